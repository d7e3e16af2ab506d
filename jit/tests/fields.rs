#![allow(clippy::unwrap_used)]
//! Field access in compiled code agrees with the interpreter's lazy per-field reads on
//! messages with nested, repeated (packed and unpacked), map and unknown fields, and on every
//! truncation and many corruptions of them: the same values, the same rewritten bytes (unknown
//! fields kept), and the same INVALID_ARGUMENT rejections for malformed bytes.

mod common;

use std::sync::Arc;

use common::{local_store, rpc};
use weft_hostcalls::channel::ChannelRecord;
use weft_hostcalls::{Message, SeededRng, Value, VirtualClock};
use weft_ir::check::{CheckEnv, check};
use weft_ir::diag::SourceFile;
use weft_ir::interp::{Host, Instance};
use weft_ir::ir::Element;
use weft_ir::parser::parse;
use weft_ir::schema::{MethodSchema, resolve_path};
use weft_ir::sim::{Executor, Interp};
use weft_ir::testgen::test_method;
use weft_ir::wire;
use weft_jit::{Buffers, Fusion, block_store, compile};

const READER: &str = "
state:
    seen: Channel
    total: int
    known: Map<string, bool>

init():
    pass

req(rpc):
    send(get(rpc, 'inner.child.y'), seen)
    send(get(rpc, 'inner.zs'), seen)
    send(get(rpc, 'nums'), seen)
    send(get(rpc, 'weights'), seen)
    send(get(rpc, 'counters'), seen)
    send(get(rpc, 'names'), seen)
    send(get(rpc, 'tags'), seen)
    send(get(rpc, 'score'), seen)
    send(get(rpc, 'flag'), seen)
    send(get(rpc, 'mood'), seen)
    send(byte_size(rpc, 'inner'), seen)
    total = total + get(rpc, 'priority')
    set(known, 'alice', true)
    set(known, '', true)
    match get(known, get(rpc, 'user')):
        Some(_) =>
            send('user known', seen)
        None =>
            send('user unknown', seen)
    match get(known, str(get(rpc, 'inner.child.y'))):
        Some(_) =>
            send('y known', seen)
        _ =>
            send('y unknown', seen)
    set(rpc, 'inner.x', 7)
    set(rpc, 'tags', get(rpc, 'tags'))
    set(rpc, 'inner.child.y', 'written')
    send(rpc, Down)

resp(rpc):
    send(get(rpc, 'stats'), seen)
    send(get(rpc, 'inner.y'), seen)
    send(rpc, Up)
";

fn element(method: &MethodSchema) -> Arc<Element> {
    let src = SourceFile::new("reader.weft", READER.to_owned());
    let (ast, diags) = parse(&src);
    assert!(diags.is_empty(), "{diags:?}");
    let env = CheckEnv {
        name: "reader".into(),
        method: Some(method),
        params: None,
    };
    let (e, diags) = check(&ast, &env);
    assert!(
        !weft_ir::diag::has_errors(&diags),
        "{}",
        weft_ir::diag::render_all(&src, &diags)
    );
    Arc::new(e.unwrap())
}

fn full_request(method: &MethodSchema) -> Vec<u8> {
    let json = serde_json::json!({
        "user": "alice", "priority": 5, "score": 2.5, "flag": true, "mood": "SAD",
        "tags": ["x", "y"], "nums": [1, -2, 300], "weights": [0.5, -1.25],
        "counters": {"a": 1, "b": -7}, "names": {"3": "three", "-1": "minus"},
        "inner": {"x": 1, "y": "why", "zs": [-5, 6], "child": {"x": 2, "y": "deep"}}
    });
    let mut bytes = wire::json_to_bytes(&method.request, &json).unwrap();
    // Unknown fields of every wire type, which writes must keep byte for byte.
    bytes.extend_from_slice(&[0xf8, 0x06, 0x2a]); // 111: varint 42
    bytes.extend_from_slice(&[0xfa, 0x06, 0x03, b'a', b'b', b'c']); // 111: len "abc"
    bytes.extend_from_slice(&[0xfd, 0x06, 1, 2, 3, 4]); // 111: fixed32
    // An unpacked run of `nums` after the packed one: both count, in wire order.
    bytes.extend_from_slice(&[0x78, 0x09]);
    bytes
}

fn full_response(method: &MethodSchema) -> Vec<u8> {
    let json = serde_json::json!({
        "body": "b", "stats": {"p50": 0.25, "p99": 1.5}, "inner": {"y": "resp"}
    });
    wire::json_to_bytes(&method.response, &json).unwrap()
}

struct Side {
    inst: Instance,
    channels: Vec<ChannelRecord>,
}

fn side(e: &Element, jit: bool) -> Side {
    let store = local_store(e);
    let store = if jit { block_store(e, store) } else { store };
    Side {
        inst: Instance::new("reader", store, Box::new(SeededRng::new(1))),
        channels: Vec::new(),
    }
}

fn keys(rs: &[ChannelRecord]) -> Vec<Value> {
    rs.iter().map(|r| r.value.clone()).collect()
}

/// Runs one request (and its response when forwarded) on both executors and compares.
fn compare(e: &Arc<Element>, req: &[u8], resp: &[u8]) -> (bool, bool) {
    let chain = [e.clone()];
    let compiled = compile(&chain, Fusion::Fused).unwrap();
    let mut bufs = Buffers::default();
    let clock = VirtualClock::new(1.0);
    let rpc = rpc();
    let (mut a, mut b) = (side(e, false), side(e, true));
    let ra = {
        let mut host = Host::new(&clock, &mut a.channels);
        Interp.request(
            &chain,
            &mut [&mut a.inst],
            Message::request(req.to_vec()),
            &rpc,
            &mut host,
            &mut Default::default(),
        )
    };
    let rb = {
        let mut host = Host::new(&clock, &mut b.channels);
        compiled.request(
            &mut bufs,
            &mut [&mut b.inst],
            Message::request(req.to_vec()),
            &rpc,
            &mut host,
            &mut Default::default(),
        )
    };
    assert_eq!(ra, rb, "request {req:?}");
    let forwarded = matches!(ra.verdict, weft_ir::interp::Verdict::Forward(_));
    if forwarded {
        let ba = {
            let mut host = Host::new(&clock, &mut a.channels);
            Interp.response(
                &chain,
                &mut [&mut a.inst],
                0,
                Message::response(resp.to_vec()),
                &rpc,
                &mut host,
                &mut Default::default(),
            )
        };
        let bb = {
            let mut host = Host::new(&clock, &mut b.channels);
            compiled.response(
                &mut bufs,
                &mut [&mut b.inst],
                0,
                Message::response(resp.to_vec()),
                &rpc,
                &mut host,
                &mut Default::default(),
            )
        };
        assert_eq!(ba, bb, "response {resp:?}");
    }
    assert_eq!(keys(&a.channels), keys(&b.channels), "records for {req:?}");
    assert_eq!(a.inst.store.snapshot(), b.inst.store.snapshot());
    assert_eq!(
        (a.inst.errors, a.inst.malformed),
        (b.inst.errors, b.inst.malformed)
    );
    (forwarded, a.inst.malformed > 0)
}

#[test]
fn nested_repeated_packed_map_and_unknown_fields_read_and_write_alike() {
    let method = test_method().unwrap();
    let e = element(&method);
    let (req, resp) = (full_request(&method), full_response(&method));
    let (forwarded, malformed) = compare(&e, &req, &resp);
    assert!(forwarded && !malformed);
    // The interpreter's view, to be sure the comparison saw real values.
    let nums = wire::read(&req, &resolve_path(&method.request, "nums").unwrap()).unwrap();
    assert_eq!(
        nums,
        Value::Vec(vec![
            Value::Int(1),
            Value::Int(-2),
            Value::Int(300),
            Value::Int(9)
        ])
    );
}

#[test]
fn every_truncation_and_corruption_is_rejected_alike() {
    let method = test_method().unwrap();
    let e = element(&method);
    let (req, resp) = (full_request(&method), full_response(&method));
    let mut malformed = 0;
    for cut in 0..req.len() {
        malformed += usize::from(compare(&e, &req[..cut], &resp).1);
    }
    for cut in 0..resp.len() {
        compare(&e, &req, &resp[..cut]);
    }
    let mut x = 0x9e37_79b9_u32;
    for i in 0..req.len() {
        for _ in 0..4 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let mut bad = req.clone();
            bad[i] = x as u8;
            malformed += usize::from(compare(&e, &bad, &resp).1);
        }
    }
    assert!(
        malformed > 10,
        "only {malformed} malformed inputs were exercised"
    );
}

/// `get(map, string field)` under `Some(_)`/`None` looks the key up in the message bytes
/// (no string value is made): known, unknown, absent (the default, '') and invalid UTF-8 keys
/// give what the interpreter gives.
#[test]
fn map_lookups_by_a_string_field_agree() {
    let method = test_method().unwrap();
    let e = element(&method);
    let resp = full_response(&method);
    let user = |bytes: &[u8]| {
        let mut m = vec![0x0a, bytes.len() as u8];
        m.extend_from_slice(bytes);
        m
    };
    assert_eq!(compare(&e, &user(b"alice"), &resp), (true, false));
    assert_eq!(compare(&e, &user(b"mallory"), &resp), (true, false));
    assert_eq!(compare(&e, &[], &resp), (true, false));
    assert_eq!(compare(&e, &user(&[0xff, 0xfe]), &resp), (false, true));
}
