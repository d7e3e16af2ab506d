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
