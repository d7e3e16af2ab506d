#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Trace lines mean one thing or are refused, naming the line.

use std::path::Path;

use weft_ir::config::Config;
use weft_ir::load::{LoadedEdge, load_edge};
use weft_ir::sim::{SimError, SimOptions, SimReport, parse_trace, simulate};

/// Edge `e` of a config beside examples/echo's proto, with `chain` under it.
fn edge(chain: &str) -> (Config, LoadedEdge) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/echo");
    let yaml = format!(
        "protos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n{chain}"
    );
    let cfg = Config::parse("weft.yaml", &dir, &yaml).unwrap();
    let edge = load_edge(&cfg, "e").unwrap();
    (cfg, edge)
}

fn run(edge: &LoadedEdge, trace: &str) -> Result<SimReport, SimError> {
    simulate(edge, &parse_trace(trace)?, SimOptions::default(), 1.0)
}

fn trace_error(trace: &str) -> (usize, String) {
    match parse_trace(trace) {
        Err(SimError::Trace { line, message }) => (line, message),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn explicit_ids_are_the_rpc_ids_and_missing_ones_never_collide_with_them() {
    let (_, e) = edge("    any: [logging]\n");
    let report = run(
        &e,
        "{\"id\": 1, \"req\": {\"user\": \"a\"}}\n{\"req\": {\"user\": \"b\"}}\n{\"id\": 2, \"req\": {\"user\": \"c\"}}\n",
    )
    .unwrap();
    let ids: Vec<u64> = report
        .results
        .iter()
        .map(|r| r.id.as_u64().unwrap())
        .collect();
    // Line 2 would get its line number, which line 3 names explicitly.
    assert_eq!(ids, [1, 3, 2]);
    // Each RPC ran as the id the output gives it (logging records each request and
    // response; the RPCs run in trace order, all at t = 0).
    let ran: Vec<u64> = report.channels.iter().map(|c| c.rpc_id).collect();
    assert_eq!(ran, [1, 1, 3, 3, 2, 2]);
}

#[test]
fn two_lines_with_one_id_are_refused_naming_both() {
    let (line, message) = trace_error("{\"id\": 2}\n# a comment\n{\"id\": 7}\n{\"id\": 2}\n");
    assert_eq!(line, 4);
    assert!(message.contains("line 1"), "{message}");
    assert!(message.contains('2'), "{message}");
    let (line, message) = trace_error("{\"id\": \"x\"}\n{\"id\": \"x\"}\n");
    assert_eq!(line, 2);
    assert!(message.contains("line 1"), "{message}");
}

#[test]
fn unknown_keys_and_mistyped_fields_are_refused() {
    let (line, message) = trace_error("# c\n{\"id\": 1, \"reqest\": {\"user\": \"mallory\"}}\n");
    assert_eq!(line, 2);
    assert!(message.contains("unknown key `reqest`"), "{message}");
    assert!(message.contains("did you mean `req`?"), "{message}");
    let (_, message) = trace_error("{\"statsu\": \"UNAVAILABLE\"}\n");
    assert!(message.contains("did you mean `status`?"), "{message}");
    for key in ["src", "method", "status_message"] {
        let (line, message) = trace_error(&format!("{{}}\n{{\"{key}\": 7}}\n"));
        assert_eq!(line, 2);
        assert!(
            message.contains(&format!("`{key}` is a string")),
            "{message}"
        );
    }
    // A control line has its own keys.
    let (_, message) = trace_error(
        "{\"t\": 0, \"control\": {\"element\": \"lb\", \"var\": \"replicas\", \"value\": [], \"kye\": 1}}\n",
    );
    assert!(message.contains("unknown key `kye`"), "{message}");
    assert!(message.contains("did you mean `key`?"), "{message}");
    let (_, message) = trace_error(
        "{\"t\": 0, \"req\": {}, \"control\": {\"element\": \"lb\", \"var\": \"replicas\", \"value\": []}}\n",
    );
    assert!(message.contains("unknown key `req`"), "{message}");
    // Every documented key is known.
    parse_trace(
        "{\"id\": 7, \"t\": 0.25, \"method\": \"echo.Echo/Say\", \"src\": \"frontend-0\", \"headers\": {\"x-user-tier\": \"gold\"}, \"req\": {}, \"resp\": {}, \"resp_headers\": {}, \"status\": \"OK\", \"status_message\": \"\", \"t_resp\": 0.27}\n{\"t\": 0, \"control\": {\"element\": \"lb\", \"var\": \"replicas\", \"key\": \"a\", \"value\": 1}}\n",
    )
    .unwrap();
}

#[test]
fn a_line_without_a_method_on_an_edge_of_several_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("multi.proto"),
        "syntax = \"proto3\";\npackage m;\nservice S {\n  rpc A(ReqA) returns (Rep);\n  rpc B(ReqB) returns (Rep);\n}\nmessage ReqA { string user = 1; }\nmessage ReqB { string name = 1; string user = 2; }\nmessage Rep { string body = 1; }\n",
    )
    .unwrap();
    let yaml = "protos: [multi.proto]\nedges:\n  e:\n    from: f\n    to: s\n    method: m.S/*\n    any: [logging]\n";
    let cfg = Config::parse("weft.yaml", tmp.path(), yaml).unwrap();
    let e = load_edge(&cfg, "e").unwrap();
    let err = run(
        &e,
        "{\"id\": 1, \"method\": \"B\", \"req\": {\"name\": \"x\"}}\n{\"id\": 2, \"req\": {\"user\": \"x\"}}\n",
    )
    .unwrap_err();
    let SimError::Trace { line, message } = err else {
        panic!("{err:?}")
    };
    assert_eq!(line, 2);
    assert!(message.contains("`method`"), "{message}");
    assert!(message.contains("m.S/A, m.S/B"), "{message}");
    // On an edge of one method it may be left out.
    let (_, e) = edge("    any: [logging]\n");
    run(&e, "{\"req\": {\"user\": \"x\"}}\n").unwrap();
}

#[test]
fn an_error_in_a_response_names_its_line() {
    let (_, e) = edge("    any: [logging]\n");
    let err = run(
        &e,
        "# the server's answer has a field its type lacks\n{\"id\": 1, \"resp\": {\"bogus\": 1}}\n",
    )
    .unwrap_err();
    let SimError::Trace { line, message } = err else {
        panic!("{err:?}")
    };
    assert_eq!(line, 2, "{message}");
    assert!(message.contains("`resp`"), "{message}");
}

#[test]
fn a_line_that_is_not_json_gives_the_column_not_line_1() {
    let (line, message) = trace_error(
        "# first\n{\"id\": 1}\n{\"id\": 2, \"req\": {\"user\": \"a\" \"body\": \"b\"}}\n",
    );
    assert_eq!(line, 3);
    // serde_json counts lines within the one line it was given: "at line 1" misled.
    assert!(!message.contains("line 1"), "{message}");
    assert!(message.contains("column 31"), "{message}");
}

/// An edge with `logging` over `shop.Cart/Add`, whose `AddReq` (and any other messages) are
/// `messages`; the directory holds its proto.
fn shop_edge(messages: &str) -> (tempfile::TempDir, LoadedEdge) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("shop.proto"),
        format!(
            "syntax = \"proto3\";\npackage shop;\nservice Cart {{ rpc Add(AddReq) returns (AddRep); }}\n{messages}message AddRep {{ string cart_id = 1; }}\n"
        ),
    )
    .unwrap();
    let yaml = "protos: [shop.proto]\nedges:\n  e:\n    from: f\n    to: s\n    method: shop.Cart/Add\n    any: [logging]\n";
    let cfg = Config::parse("weft.yaml", tmp.path(), yaml).unwrap();
    let e = load_edge(&cfg, "e").unwrap();
    (tmp, e)
}

/// Why the simulator refuses `trace` on `e`.
fn refusal(e: &LoadedEdge, trace: &str) -> String {
    match run(e, trace).unwrap_err() {
        SimError::Trace { message, .. } => message,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_field_of_the_wrong_type_is_named_by_its_path() {
    let (_dir, e) = shop_edge(
        "message Customer { string id = 1; Address address = 2; }\nmessage Address { string country = 1; uint32 zip = 2; }\nmessage AddReq { Customer customer = 1; uint32 quantity = 2; }\n",
    );
    let message = |trace: &str| refusal(&e, trace);
    // It said only "invalid digit found in string", of a message with many fields.
    let m = message("{\"req\": {\"customer\": {\"id\": \"c\"}, \"quantity\": \"two\"}}\n");
    assert!(m.contains("field `quantity`"), "{m}");
    let m = message("{\"req\": {\"customer\": {\"address\": {\"zip\": -1}}}}\n");
    assert!(m.contains("field `customer.address.zip`"), "{m}");
    let m = message("{\"req\": {}, \"resp\": {\"cart_id\": 7}}\n");
    assert!(m.contains("`resp`"), "{m}");
    assert!(m.contains("field `cart_id`"), "{m}");
}

#[test]
fn a_field_inside_a_repeated_or_map_message_is_named_by_its_item() {
    let (_dir, e) = shop_edge(
        "message Item { string sku = 1; uint32 qty = 2; }\nmessage AddReq { repeated Item items = 1; map<string, Item> by_sku = 2; }\n",
    );
    let message = |trace: &str| refusal(&e, trace);
    // It named only `items`, of a list whose second item has a negative uint32.
    let m = message("{\"req\": {\"items\": [{\"qty\": 1}, {\"sku\": \"a\", \"qty\": -1}]}}\n");
    assert!(m.contains("field `items[1].qty`"), "{m}");
    let m = message("{\"req\": {\"by_sku\": {\"a\": {\"qty\": 2}, \"b\": {\"qty\": \"two\"}}}}\n");
    assert!(m.contains("field `by_sku[\"b\"].qty`"), "{m}");
}

/// A misspelt field in a trace's message said only "unrecognized field name 'usr'", as
/// prost-reflect words it; the trace's keys and the config's names get a suggestion.
#[test]
fn a_misspelt_message_field_is_suggested() {
    let (_, e) = edge("    any: [logging]\n");
    let message = match run(
        &e,
        "{\"id\": 1, \"req\": {\"usr\": \"a\", \"body\": \"b\"}}\n",
    ) {
        Err(SimError::Trace { line: 1, message }) => message,
        other => panic!("not refused on line 1: {other:?}"),
    };
    assert!(
        message.contains("cannot convert JSON to `echo.SayRequest`: field `usr`"),
        "{message}"
    );
    assert!(message.contains("did you mean `user`?"), "{message}");
}

/// A trace line for a method of another edge said only that it is not on this one, leaving
/// the reader to find which methods are.
#[test]
fn a_method_not_on_the_edge_lists_the_edges_methods() {
    let (_, e) = edge("    any: [logging]\n");
    let message = match run(&e, "{\"id\": 1, \"method\": \"SayStrem\"}\n") {
        Err(SimError::Trace { line: 1, message }) => message,
        other => panic!("not refused on line 1: {other:?}"),
    };
    assert!(
        message.contains("method `SayStrem` is not on edge `e`, which covers echo.Echo/Say"),
        "{message}"
    );
}
