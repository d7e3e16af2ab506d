#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Language semantics through the whole front end and the reference interpreter.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;
use weft_hostcalls::channel::ChannelRecord;
use weft_hostcalls::clock::VirtualClock;
use weft_hostcalls::rng::SeededRng;
use weft_hostcalls::state::{LocalStore, VarSpec};
use weft_hostcalls::{Code, Message, Value};
use weft_ir::check::{CheckEnv, check};
use weft_ir::diag::{SourceFile, has_errors, render_all};
use weft_ir::interp::{
    Host, Instance, RpcInfo, RpcScratch, Verdict, on_request, on_response, run_init,
};
use weft_ir::ir::{Element, Params};
use weft_ir::parser::parse;
use weft_ir::schema::{MethodSchema, Schema};
use weft_ir::wire;

const PROTO: &str = r#"
syntax = "proto3";
package t;
service S { rpc Call(Req) returns (Resp); }
message Inner { string name = 1; int64 n = 2; }
message Req {
  string user = 1;
  int64 count = 2;
  Inner inner = 3;
  repeated int64 nums = 4;
  map<string, int64> weights = 5;
  bytes blob = 6;
}
message Resp { string body = 1; int64 code = 2; }
"#;

fn method() -> MethodSchema {
    Schema::from_source("t.proto", PROTO)
        .unwrap()
        .method("t.S/Call")
        .unwrap()
}

/// Checks `source` (which must be error-free) against t.S/Call.
fn element(source: &str, params: Option<&Params>) -> Element {
    let m = method();
    let f = SourceFile::new("e.weft", source);
    let (ast, mut d) = parse(&f);
    assert!(!has_errors(&d), "{}", render_all(&f, &d));
    let (e, d2) = check(
        &ast,
        &CheckEnv {
            name: "e".into(),
            method: Some(&m),
            params,
        },
    );
    d.extend(d2);
    assert!(!has_errors(&d), "{}", render_all(&f, &d));
    e.unwrap()
}

struct Rig {
    e: Element,
    inst: Instance,
    clock: VirtualClock,
    channels: Vec<ChannelRecord>,
    /// The scratch of each RPC between its request and its response, as a runtime keeps it.
    scratch: HashMap<u64, RpcScratch>,
}

impl Rig {
    fn new(source: &str) -> Rig {
        let e = element(source, None);
        let specs: Vec<VarSpec> = e
            .state
            .iter()
            .map(|v| {
                let spec = VarSpec::new(v.name.clone(), v.kind, v.value_type().zero_value());
                match v.capacity {
                    Some(n) => spec.bounded(n),
                    None => spec,
                }
            })
            .collect();
        let inst = Instance::new(
            "e",
            Box::new(LocalStore::new(&specs)),
            Box::new(SeededRng::new(7)),
        );
        let mut rig = Rig {
            e,
            inst,
            clock: VirtualClock::new(0.0),
            channels: Vec::new(),
            scratch: HashMap::new(),
        };
        let mut host = Host::new(&rig.clock, &mut rig.channels);
        run_init(&mut rig.inst, &rig.e, &mut host).unwrap();
        rig
    }

    fn request_bytes(&mut self, id: u64, bytes: Vec<u8>) -> Verdict {
        let rpc = info(id);
        let mut host = Host::new(&self.clock, &mut self.channels);
        let scratch = self.scratch.entry(id).or_default();
        on_request(
            &mut self.inst,
            &self.e,
            Message::request(bytes),
            &rpc,
            &mut host,
            scratch.slots(self.e.metadata.len()),
        )
    }

    fn request(&mut self, id: u64, req: serde_json::Value) -> Verdict {
        let bytes = wire::json_to_bytes(&method().request, &req).unwrap();
        self.request_bytes(id, bytes)
    }

    fn response(&mut self, id: u64, msg: Message) -> Message {
        let rpc = info(id);
        let mut host = Host::new(&self.clock, &mut self.channels);
        // An RPC whose request never ran here has a fresh scratch: every key unset.
        let mut scratch = self.scratch.remove(&id).unwrap_or_default();
        let keys = scratch.slots(self.e.metadata.len());
        on_response(&mut self.inst, &self.e, msg, &rpc, &mut host, keys)
    }

    fn state(&mut self, name: &str) -> Value {
        self.inst
            .store
            .snapshot()
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap()
            .1
    }
}

fn info(id: u64) -> RpcInfo {
    RpcInfo {
        id,
        method: "t.S/Call".into(),
        src: "c0".into(),
        service: "svc".into(),
        routed: None,
    }
}

fn forwarded_json(v: &Verdict) -> serde_json::Value {
    match v {
        Verdict::Forward(m) => wire::bytes_to_json(&method().request, &m.bytes).unwrap(),
        other => panic!("expected Forward, got {other:?}"),
    }
}

/// An element whose request handler records `expr` in state `out` of type `ty`.
fn eval_src(ty: &str, expr: &str) -> String {
    format!(
        "state:\n    out: {ty}\ninit():\n    pass\nreq(rpc):\n    out = {expr}\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n"
    )
}

fn eval(ty: &str, expr: &str) -> Value {
    let mut rig = Rig::new(&eval_src(ty, expr));
    let v = rig.request(1, json!({}));
    assert!(matches!(v, Verdict::Forward(_)), "{v:?}");
    rig.state("out")
}

#[test]
fn precedence_holds_at_run_time() {
    assert_eq!(eval("int", "1 + 2 * 3"), Value::Int(7));
    assert_eq!(eval("int", "(1 + 2) * 3"), Value::Int(9));
    assert_eq!(eval("int", "10 - 4 - 3"), Value::Int(3));
    assert_eq!(eval("bool", "1 < 2 and 3 < 4"), Value::Bool(true));
    assert_eq!(eval("bool", "not 1 == 2"), Value::Bool(true));
    assert_eq!(eval("int", "-7 / 2"), Value::Int(-3));
    assert_eq!(eval("int", "-7 % 2"), Value::Int(-1));
    assert_eq!(eval("float", "1 + 0.5"), Value::Float(1.5));
    // Run time, not constant folding: the operands come from the message.
    let mut rig = Rig::new(&eval_src(
        "int",
        "get(rpc, 'count') + 2 * get(rpc, 'count')",
    ));
    rig.request(1, json!({"count": 5}));
    assert_eq!(rig.state("out"), Value::Int(15));
}

#[test]
fn runtime_errors_reject_with_internal_and_count() {
    let src = eval_src("int", "10 / get(rpc, 'count')");
    let mut rig = Rig::new(&src);
    assert!(matches!(
        rig.request(1, json!({"count": 2})),
        Verdict::Forward(_)
    ));
    match rig.request(2, json!({"count": 0})) {
        Verdict::Reject { code, message } => {
            assert_eq!(code, Code::Internal);
            assert!(message.contains("division by zero"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rig.inst.errors, 1);
    assert_eq!(rig.inst.malformed, 0);
}

#[test]
fn a_string_doubled_per_item_is_refused_before_it_exhausts_memory() {
    // 64 items would ask for 2^64 bytes: an allocation failure aborts the process. The
    // concatenation past the limit fails the RPC instead.
    let src = "state:\n    out: int\ninit():\n    pass\nreq(rpc):\n    s = 'a'\n    foreach(get(rpc, 'nums'), lambda(x):\n        s = s + s\n    )\n    out = size(s)\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n";
    let mut rig = Rig::new(src);
    assert!(matches!(
        rig.request(1, json!({"nums": [1, 2, 3]})),
        Verdict::Forward(_)
    ));
    assert_eq!(rig.state("out"), Value::Int(8));
    let nums: Vec<i64> = (0..64).collect();
    match rig.request(2, json!({ "nums": nums })) {
        Verdict::Reject { code, message } => {
            assert_eq!(code, Code::Internal);
            assert!(message.contains("over the limit of"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rig.inst.errors, 1);
}

#[test]
fn malformed_bytes_reject_with_invalid_argument() {
    let mut rig = Rig::new(&eval_src("string", "get(rpc, 'user')"));
    // Field 1 (user), length-delimited, claims 50 bytes but the message ends.
    match rig.request_bytes(1, vec![0x0a, 50, b'a']) {
        Verdict::Reject { code, .. } => assert_eq!(code, Code::InvalidArgument),
        other => panic!("{other:?}"),
    }
    assert_eq!(rig.inst.malformed, 1);
    assert_eq!(rig.inst.errors, 0);
}

#[test]
fn writes_keep_unknown_fields_and_nested_paths_work() {
    let src = "state:\n    pass\ninit():\n    pass\nreq(rpc):\n    set(rpc, 'inner.name', get(rpc, 'user') + '!')\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n";
    let mut rig = Rig::new(src);
    let mut bytes =
        wire::json_to_bytes(&method().request, &json!({"user": "ann", "count": 3})).unwrap();
    // Field 99, varint 42: unknown to the schema.
    bytes.extend([0x98, 0x06, 42]);
    let Verdict::Forward(m) = rig.request_bytes(1, bytes) else {
        panic!()
    };
    assert!(
        m.bytes.windows(3).any(|w| w == [0x98, 0x06, 42]),
        "unknown field 99 survives"
    );
    let j = wire::bytes_to_json(&method().request, &m.bytes).unwrap();
    assert_eq!(
        j,
        json!({"user": "ann", "count": 3, "inner": {"name": "ann!"}})
    );
}

#[test]
fn read_modify_write_stores_the_final_value_and_returns_the_lambda_result() {
    let src = "\
state:
    bucket: Map<string, int>
    got: bool
init():
    set(bucket, 'a', 2)
req(rpc):
    got = get(bucket, get(rpc, 'user'), lambda(tokens):
        if tokens > 0:
            tokens = tokens - 1
            return true
        return false
    )
    send(rpc, Down)
resp(rpc):
    send(rpc, Up)
";
    let mut rig = Rig::new(src);
    for (user, want) in [("a", true), ("a", true), ("a", false), ("b", false)] {
        rig.request(1, json!({"user": user}));
        assert_eq!(rig.state("got"), Value::Bool(want), "{user}");
    }
    let Value::Map(m) = rig.state("bucket") else {
        panic!()
    };
    assert_eq!(m.get(&Value::str("a")), Some(&Value::Int(0)));
    // A missing key starts from zero; left at zero, nothing is stored.
    assert_eq!(m.get(&Value::str("b")), None);
}

#[test]
fn foreach_over_state_iterates_a_snapshot_in_key_order() {
    let src = "\
state:
    m: Map<string, int>
    order: Vec<string>
init():
    set(m, 'b', 2)
    set(m, 'a', 1)
req(rpc):
    foreach(m, lambda(k, v):
        set(order, size(order), k)
        set(m, k + k, v)
    )
    send(rpc, Down)
resp(rpc):
    send(rpc, Up)
";
    let mut rig = Rig::new(src);
    rig.request(1, json!({}));
    assert_eq!(
        rig.state("order"),
        Value::Vec(vec![Value::str("a"), Value::str("b")])
    );
    let Value::Map(m) = rig.state("m") else {
        panic!()
    };
    assert_eq!(m.len(), 4, "entries added during the loop are not visited");
}

#[test]
fn send_inside_foreach_ends_the_handler() {
    let src = "\
state:
    seen: int
init():
    pass
req(rpc):
    foreach(get(rpc, 'nums'), lambda(n):
        seen = seen + 1
        if n < 0:
            send(err('negative', INVALID_ARGUMENT), Up)
    )
    send(rpc, Down)
resp(rpc):
    send(rpc, Up)
";
    let mut rig = Rig::new(src);
    assert!(matches!(
        rig.request(1, json!({"nums": [1, 2, 3]})),
        Verdict::Forward(_)
    ));
    assert_eq!(rig.state("seen"), Value::Int(3));
    match rig.request(2, json!({"nums": [1, -2, 3]})) {
        Verdict::Reject { code, message } => {
            assert_eq!(
                (code, message.as_str()),
                (Code::InvalidArgument, "negative")
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        rig.state("seen"),
        Value::Int(5),
        "stopped at the second element"
    );
}

#[test]
fn metadata_lives_from_request_to_response_of_the_same_rpc() {
    let src = "\
state:
    out: Channel
init():
    pass
req(rpc):
    set_metadata('user', get(rpc, 'user'))
    send(rpc, Down)
resp(rpc):
    match get_metadata('user'):
        Some(u) =>
            send(u, out)
        None =>
            send('none', out)
    send(rpc, Up)
";
    let mut rig = Rig::new(src);
    rig.request(1, json!({"user": "first"}));
    rig.request(2, json!({"user": "second"}));
    rig.response(2, Message::response(vec![]));
    rig.response(1, Message::response(vec![]));
    rig.response(3, Message::response(vec![]));
    let got: Vec<(u64, Value)> = rig
        .channels
        .iter()
        .map(|c| (c.rpc_id, c.value.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (2, Value::str("second")),
            (1, Value::str("first")),
            (3, Value::str("none"))
        ]
    );
}

#[test]
fn a_resp_handler_can_turn_a_response_into_an_error_and_keeps_headers() {
    let src = "\
state:
    pass
init():
    pass
req(rpc):
    send(rpc, Down)
resp(rpc):
    if get(rpc, 'code') != 0:
        send(err('backend said ' + str(get(rpc, 'code')), FAILED_PRECONDITION), Up)
    send(rpc, Up)
";
    let mut rig = Rig::new(src);
    let ok = wire::json_to_bytes(&method().response, &json!({"code": 0})).unwrap();
    assert_eq!(rig.response(1, Message::response(ok)).code, Code::Ok);
    let bad = wire::json_to_bytes(&method().response, &json!({"code": 4})).unwrap();
    let mut m = Message::response(bad);
    m.headers.insert("x-trace".into(), "abc".into());
    let out = rig.response(2, m);
    assert_eq!(out.code, Code::FailedPrecondition);
    assert_eq!(out.status_message, "backend said 4");
    assert_eq!(out.headers.get("x-trace").map(String::as_str), Some("abc"));
}

#[test]
fn implicit_unwrap_of_a_missing_entry_rejects_with_internal() {
    let src = "\
state:
    m: Map<string, int>
    out: int
init():
    set(m, 'a', 1)
req(rpc):
    out = get(m, get(rpc, 'user')) + 1
    send(rpc, Down)
resp(rpc):
    send(rpc, Up)
";
    let mut rig = Rig::new(src);
    rig.request(1, json!({"user": "a"}));
    assert_eq!(rig.state("out"), Value::Int(2));
    match rig.request(2, json!({"user": "zz"})) {
        Verdict::Reject { code, message } => {
            assert_eq!(code, Code::Internal);
            assert!(message.contains("missing map entry"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn handler_without_send_forwards_unchanged_and_maps_and_repeated_fields_read() {
    let src = "\
state:
    total: int
init():
    pass
req(rpc):
    foreach(get(rpc, 'weights'), lambda(k, v):
        total = total + v * size(k)
    )
    foreach(get(rpc, 'nums'), lambda(n):
        total = total + n
    )
resp(rpc):
    send(rpc, Up)
";
    let mut rig = Rig::new(src);
    let v = rig.request(
        1,
        json!({"weights": {"ab": 10, "c": 1}, "nums": [100, 200]}),
    );
    assert_eq!(
        forwarded_json(&v),
        json!({"weights": {"ab": 10, "c": 1}, "nums": [100, 200]})
    );
    assert_eq!(rig.state("total"), Value::Int(20 + 1 + 300));
}

#[test]
fn byte_size_of_a_sub_message_is_its_encoded_length() {
    let mut rig = Rig::new(&eval_src("int", "byte_size(rpc, 'inner')"));
    rig.request(1, json!({"inner": {"name": "abc"}}));
    // name: tag (1) + length (1) + 3 bytes.
    assert_eq!(rig.state("out"), Value::Int(5));
}

#[test]
fn parameters_are_constants_and_select_the_taken_arm() {
    let src = "\
state:
    out: string
init(mode: string, field: string = 'user'):
    pass
req(rpc):
    match mode:
        'copy' =>
            out = get(rpc, field)
        _ =>
            out = 'fixed'
    send(rpc, Down)
resp(rpc):
    send(rpc, Up)
";
    let params: Params = [("mode".to_owned(), Value::str("copy"))].into();
    let e = element(src, Some(&params));
    assert!(e.is_runnable());
    // The match on a constant keeps one arm.
    let weft_ir::ir::StmtKind::Match { arms, .. } = &e.req.block[0].kind else {
        panic!()
    };
    assert_eq!(arms.len(), 1);
    // An unresolvable field in the arm not taken is not an error.
    let params: Params = [
        ("mode".to_owned(), Value::str("other")),
        ("field".to_owned(), Value::str("nope")),
    ]
    .into();
    let e = element(src, Some(&params));
    let props = weft_ir::props::analyse(&e);
    assert!(props.req.fields_read.is_empty());
    let _ = Arc::new(e);
}

/// A NaN among `quantile`'s values sorts after every number whatever its sign bit, which the
/// language never shows (`0.0 / 0.0` has it set on x86-64 and clear on AArch64). It used to
/// sort by IEEE total order, so a NaN with the bit set came first and `quantile(v, 0.0)` of
/// `[1.0, NaN]` gave NaN or 1.0 depending on how the NaN was made.
#[test]
fn quantile_sorts_a_nan_last_whatever_its_sign() {
    let src = "\
state:
    out: string
    pos: Vec<float>
    neg: Vec<float>
init():
    pass
req(rpc):
    n = 0.0
    match parse_float('nan'):
        Some(x) => n = x
        None => pass
    set(pos, 0, 1.0)
    set(pos, 1, n)
    set(neg, 0, 1.0)
    set(neg, 1, -n)
    out = str(quantile(pos, 0.0)) + ' ' + str(quantile(neg, 0.0)) + ' ' + str(quantile(pos, 1.0)) + ' ' + str(quantile(neg, 1.0))
    send(rpc, Down)
resp(rpc):
    send(rpc, Up)
";
    let mut rig = Rig::new(src);
    let v = rig.request(1, json!({}));
    assert!(matches!(v, Verdict::Forward(_)), "{v:?}");
    // Sorted [1.0, NaN] either way: rank 0 is 1.0, rank 1 the NaN.
    assert_eq!(rig.state("out"), Value::str("1.0 1.0 NaN NaN"));
}

/// A sub-message sent as a million empty pieces (2 MiB), which protobuf merges into one:
/// reading a field through it, its size, and a write through it (which re-encodes the
/// message, merging the pieces) each take one pass over the pieces, in the interpreter as
/// in the JIT (the same `wire` functions). No step recurses per piece or per level.
///
/// Timed as a ratio, a million pieces against a quarter of a million (about 4x when linear),
/// each the shortest of three runs: an absolute limit failed whenever the machine was busy.
#[test]
fn a_sub_message_in_a_million_pieces_is_read_and_rewritten_in_linear_time() {
    let src = "state:\n    pass\ninit():\n    pass\nreq(rpc):\n    set(rpc, 'inner.name', get(rpc, 'inner.name') + str(byte_size(rpc, 'inner')))\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n";
    let mut rig = Rig::new(src);
    let pieces = |n: usize| {
        let mut bytes = [0x1a, 0x00].repeat(n);
        // The last piece names it.
        bytes.extend([0x1a, 0x03, 0x0a, 0x01, b'x']);
        bytes
    };
    let mut time = |bytes: &[u8]| {
        (0..3)
            .map(|_| {
                let started = std::time::Instant::now();
                let Verdict::Forward(m) = rig.request_bytes(1, bytes.to_vec()) else {
                    panic!("forwarded")
                };
                let took = started.elapsed();
                // One merged occurrence: `inner { name: "x3" }`.
                assert_eq!(m.bytes, [0x1a, 0x04, 0x0a, 0x02, b'x', b'3']);
                took
            })
            .min()
            .unwrap_or_default()
    };
    let (short, long) = (time(&pieces(250_000)), time(&pieces(1_000_000)));
    eprintln!("a million pieces: {long:?}; a quarter of a million: {short:?}");
    assert!(long < short * 8, "{long:?} against {short:?}");
}
