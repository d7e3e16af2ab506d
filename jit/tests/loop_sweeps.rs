#![allow(clippy::unwrap_used)]
//! Adversarial programs for the loop sweep (docs/jit.md, "Values"): values kept across
//! back edges through aliased and rotating locals, read-modify-write lambdas with loops
//! inside and around them, loops over stored responses that reply from inside the loop,
//! messages rewritten and forwarded from a loop, nested loops appending to what they
//! iterate, and fused chains of these. Each runs through the interpreter and the JIT, fused
//! and unfused, request and response, and everything must agree: verdicts, responses,
//! state, counters and channel records. Written by a review of the sweep; the generated
//! programs of `generated.rs` do not make these shapes.

mod common;

use common::{echo_element, element_from_source, jit_instance, rpc};
use weft_hostcalls::{Message, VirtualClock};
use weft_ir::interp::{Host, RpcScratch, Verdict};
use weft_jit::{Buffers, Fusion, compile};

/// Runs `reqs` (tags and user of each request) through the chain of `srcs` in both
/// executors and asserts that they agree on everything.
fn both_agree(srcs: &[(&str, &str)], reqs: &[(Vec<String>, &str)]) {
    use weft_hostcalls::SeededRng;
    use weft_ir::sim::{Executor, Interp};
    let els: Vec<_> = srcs
        .iter()
        .map(|(n, s)| element_from_source(n, s).0)
        .collect();
    for fusion in [Fusion::Fused, Fusion::Unfused] {
        let compiled = compile(&els, fusion).unwrap();
        let mut oracle: Vec<weft_ir::interp::Instance> = els
            .iter()
            .map(|e| {
                weft_ir::interp::Instance::new(
                    e.name.clone(),
                    common::local_store(e),
                    Box::new(SeededRng::new(1)),
                )
            })
            .collect();
        let mut jit: Vec<weft_ir::interp::Instance> =
            els.iter().map(|e| jit_instance(e, &e.name)).collect();
        let clock = VirtualClock::new(1.0);
        let mut rec_a = Vec::new();
        let mut rec_b = Vec::new();
        let mut bufs = Buffers::default();
        let (_, method) = echo_element("logging");
        for (i, (tags, user)) in reqs.iter().enumerate() {
            let json = serde_json::json!({ "user": user, "tags": tags, "body": "b" });
            let req =
                Message::request(weft_ir::wire::json_to_bytes(&method.request, &json).unwrap());
            let mut r = rpc();
            r.id = i as u64 + 1;
            // Each executor's scratch of this RPC, from its request to its response.
            let (mut sa, mut sb) = (RpcScratch::default(), RpcScratch::default());
            let want = {
                let mut host = Host::new(&clock, &mut rec_a);
                let mut insts: Vec<_> = oracle.iter_mut().collect();
                Interp.request(&els, &mut insts, req.clone(), &r, &mut host, &mut sa)
            };
            let got = {
                let mut host = Host::new(&clock, &mut rec_b);
                let mut insts: Vec<_> = jit.iter_mut().collect();
                compiled.request(&mut bufs, &mut insts, req.clone(), &r, &mut host, &mut sb)
            };
            assert_eq!(want, got, "{fusion:?} rpc {i}: request");
            r.routed = want.routed.clone();
            let (start, resp) = match &want.verdict {
                Verdict::Forward(_) => {
                    let rj = serde_json::json!({ "body": format!("resp{i}"), "served_by": "srv" });
                    (
                        els.len(),
                        Message::response(
                            weft_ir::wire::json_to_bytes(&method.response, &rj).unwrap(),
                        ),
                    )
                }
                Verdict::Reply(m) => (want.decided, m.clone()),
                Verdict::Reject { code, message } => {
                    (want.decided, Message::error(*code, message.clone()))
                }
            };
            if start == 0 {
                continue;
            }
            let a = {
                let mut host = Host::new(&clock, &mut rec_a);
                let mut insts: Vec<_> = oracle.iter_mut().collect();
                let resp = resp.clone();
                Interp.response(&els, &mut insts, start - 1, resp, &r, &mut host, &mut sa)
            };
            let b = {
                let mut host = Host::new(&clock, &mut rec_b);
                let mut insts: Vec<_> = jit.iter_mut().collect();
                compiled.response(
                    &mut bufs,
                    &mut insts,
                    start - 1,
                    resp.clone(),
                    &r,
                    &mut host,
                    &mut sb,
                )
            };
            assert_eq!(a, b, "{fusion:?} rpc {i}: response");
        }
        for (x, y) in oracle.iter_mut().zip(jit.iter_mut()) {
            assert_eq!(
                x.store.snapshot(),
                y.store.snapshot(),
                "{fusion:?}: state of {}",
                x.name
            );
            assert_eq!(x.errors, y.errors, "{fusion:?}: counters");
        }
        let ka: Vec<_> = rec_a.iter().map(|r| (r.rpc_id, r.value.clone())).collect();
        let kb: Vec<_> = rec_b.iter().map(|r| (r.rpc_id, r.value.clone())).collect();
        assert_eq!(ka, kb, "{fusion:?}: records");
    }
}

fn tagsets() -> Vec<(Vec<String>, &'static str)> {
    let mut v = Vec::new();
    for (n, user) in [
        (0, "alice"),
        (1, "t0"),
        (3, "bob"),
        (7, "t3"),
        (4, "t9"),
        (12, "t5"),
        (2, "t1"),
    ] {
        v.push(((0..n).map(|i| format!("t{i}")).collect(), user));
    }
    v
}

const CACHE_LOOPS: &str = "\
state:
    cache: Map<string, Response>
    out: string
    log: Channel
init():
    pass
req(rpc):
    acc = ''
    foreach(cache, lambda(k, v):
        acc = acc + k + get(v, 'body')
        send(get(v, 'served_by') + acc, log)
        if k == get(rpc, 'user'):
            send(v, Up)
    )
    out = acc
    set_metadata('k', get(rpc, 'user'))
    send(rpc, Down)
resp(rpc):
    match get_metadata('k'):
        Some(k) =>
            set(cache, k, rpc)
        None =>
            pass
    foreach(cache, lambda(k, v):
        set(rpc, 'body', get(rpc, 'body') + get(v, 'body'))
        set_rpc_header(rpc, 'x-' + k, get(v, 'served_by') + get(rpc, 'body'))
        send(get(rpc, 'body'), log)
    )
    send(rpc, Up)
";

const RMW_LOOPS: &str = "\
state:
    m: Map<string, string>
    out: string
init():
    pass
req(rpc):
    acc = ''
    foreach(get(rpc, 'tags'), lambda(t):
        y = get(m, t, lambda(v):
            foreach(get(rpc, 'tags'), lambda(u):
                if u == t:
                    return
                v = v + u
                z = v + t
            )
            return v + '#'
        )
        acc = acc + y
        w = get(m, t)
        match w:
            Some(q) =>
                acc = acc + q
            None =>
                acc = acc + '-'
    )
    r = get(m, 'all', lambda(v):
        foreach(get(rpc, 'tags'), lambda(u):
            v = u + v
        )
        return v
    )
    out = acc + r
    send(rpc, Down)
resp(rpc):
    send(rpc, Up)
";

const ROTATE: &str = "\
state:
    out: string
    hits: Map<string, int>
init():
    pass
req(rpc):
    a = 'A'
    b = 'B'
    c = 'C'
    ts = get(rpc, 'tags')
    foreach(ts, lambda(t):
        tmp = a
        a = b + t
        b = c
        c = tmp
        d = a
        e = c
        f = d
        set(ts, size(ts), t + a)
        foreach(ts, lambda(x):
            g = f + x
            set_metadata('m', g)
            e = g
        )
    )
    out = a + '|' + b + '|' + c + '|' + str(size(ts))
    send(rpc, Down)
resp(rpc):
    s = ''
    n = 0
    foreach(hits, lambda(k, v):
        n = n + 1
        s = s + k
        if n == 3:
            send(err('stop' + s + get(rpc, 'body'), UNAVAILABLE), Up)
    )
    set(hits, get(rpc, 'body'), 1)
    match get_metadata('m'):
        Some(x) =>
            set_rpc_header(rpc, 'x-m', x + s)
        None =>
            pass
    send(rpc, Up)
";

#[test]
fn rotating_aliased_locals_and_a_response_loop_that_rejects() {
    both_agree(&[("ro", ROTATE)], &tagsets());
    both_agree(
        &[("ro", ROTATE), ("rr", RMW_LOOPS), ("rc", CACHE_LOOPS)],
        &tagsets(),
    );
}

#[test]
fn loops_over_stored_responses_that_reply_from_the_loop() {
    both_agree(&[("rc", CACHE_LOOPS)], &tagsets());
    both_agree(&[("rc0", CACHE_LOOPS), ("rc1", CACHE_LOOPS)], &tagsets());
}

#[test]
fn loops_inside_and_around_read_modify_writes() {
    both_agree(&[("rr", RMW_LOOPS)], &tagsets());
    both_agree(&[("rc0", CACHE_LOOPS), ("rr", RMW_LOOPS)], &tagsets());
}

const FORWARD_IN_LOOP: &str = "\
state:
    seen: Map<string, int>
    out: string
    v: Vec<string>
init():
    pass
req(rpc):
    ts = get(rpc, 'tags')
    o = parse_int(get(rpc, 'user'))
    acc = ''
    foreach(ts, lambda(t):
        set(rpc, 'user', get(rpc, 'user') + t)
        set(ts, size(ts), t + '+')
        match size(acc):
            0 =>
                acc = 'z'
            1 =>
                acc = acc + 'y'
            2 =>
                acc = acc + get(rpc, 'user')
            _ =>
                acc = acc + '.'
        match get(seen, t):
            Some(c) =>
                set(seen, t, c + 1)
            None =>
                set(seen, t, 1)
        set_metadata('last', get(rpc, 'user'))
        match get_metadata('last'):
            Some(l) =>
                acc = acc + l
            None =>
                pass
        p = (t, acc)
        (q, r) = p
        set(v, size(v), q)
        if t == 't4':
            out = acc
            send(rpc, Down)
    )
    out = acc + str(size(ts))
    match o:
        Some(n) =>
            out = out + str(n)
        None =>
            pass
    send(rpc, Down)
resp(rpc):
    b = get(rpc, 'body')
    foreach(v, lambda(x):
        set(rpc, 'body', get(rpc, 'body') + x)
        set_rpc_header(rpc, 'x-h', get_rpc_header(rpc, 'x-h') + x)
    )
    send(rpc, Up)
";

#[test]
fn a_loop_that_forwards_and_rewrites_the_message_in_a_chain() {
    both_agree(
        &[("f0", FORWARD_IN_LOOP), ("f1", FORWARD_IN_LOOP)],
        &tagsets(),
    );
    both_agree(
        &[("ro", ROTATE), ("f1", FORWARD_IN_LOOP), ("rr", RMW_LOOPS)],
        &tagsets(),
    );
}
