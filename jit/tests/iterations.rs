#![allow(clippy::unwrap_used)]
//! A handler's `foreach` iterations are bounded (`weft_ir::eval::MAX_ITERATIONS`, nested
//! loops counted together), and both executors stop at the same iteration: the RPC is
//! rejected with INTERNAL, the element's error counter grows, and what the handler did
//! before the limit stays, the same in both.

mod common;

use common::{BothExecutors, echo_element, element_from_source};
use weft_hostcalls::{Code, Message, Value};
use weft_ir::eval::MAX_ITERATIONS;
use weft_ir::interp::Verdict;

/// Two nested loops over the request's tags: n + n² iterations for n tags.
const SOURCE: &str = "\
state:
    visits: int

init():
    pass

req(rpc):
    foreach(get(rpc, 'tags'), lambda(a):
        foreach(get(rpc, 'tags'), lambda(b):
            visits = visits + 1
        )
    )
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

/// The start of an element whose `req` copies the request's tags into `seen`, to loop over
/// (`PAIRS_OF_SEEN`) in either handler.
const COPY_TAGS: &str = "\
state:
    seen: Vec<string>
    visits: int

init():
    pass

req(rpc):
    foreach(get(rpc, 'tags'), lambda(t):
        set(seen, size(seen), t)
    )
";

/// n + n² iterations for n items in `seen`.
const PAIRS_OF_SEEN: &str = "    foreach(seen, lambda(a):
        foreach(seen, lambda(b):
            visits = visits + 1
        )
    )
";

fn with_tags(n: usize) -> Message {
    let (_, method) = echo_element("logging");
    let tags: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
    let json = serde_json::json!({ "user": "alice", "tags": tags });
    Message::request(weft_ir::wire::json_to_bytes(&method.request, &json).unwrap())
}

fn visits(both: &mut BothExecutors) -> [Option<Value>; 2] {
    [&mut both.oracle, &mut both.jit].map(|inst| {
        (inst.store.snapshot().into_iter())
            .find(|(name, _)| name == "visits")
            .map(|(_, v)| v)
    })
}

#[test]
fn nested_loops_stop_at_the_same_iteration_in_both_executors() {
    // 999 tags: 999 + 998 001 iterations, under the limit; 1000 tags: 1 001 000, over it.
    assert_eq!(
        MAX_ITERATIONS, 1_000_000,
        "the tag counts below assume this limit"
    );
    let (e, _) = element_from_source("loops", SOURCE);
    let mut both = BothExecutors::new(e, "loops");

    let under = with_tags(999);
    for (executor, out) in both.request(|| under.clone()) {
        assert!(
            matches!(out.verdict, Verdict::Forward(_)),
            "{executor}: {:?}",
            out.verdict
        );
    }
    let [oracle, jit] = visits(&mut both);
    assert_eq!(oracle, Some(Value::Int(999 * 999)));
    assert_eq!(jit, oracle);

    let over = with_tags(1000);
    for (executor, out) in both.request(|| over.clone()) {
        match out.verdict {
            Verdict::Reject { code, message } => {
                assert_eq!(code, Code::Internal, "{executor}");
                assert!(
                    message.starts_with("loops: more than 1000000 foreach iterations"),
                    "{executor}: {message}"
                );
            }
            other => panic!("{executor}: {other:?}"),
        }
    }
    // Both stopped at iteration 1 000 001: the inner body ran for every inner iteration
    // counted before it, in both.
    let [oracle, jit] = visits(&mut both);
    assert!(
        matches!(oracle, Some(Value::Int(v)) if v > 999 * 999),
        "{oracle:?}"
    );
    assert_eq!(jit, oracle);
    assert_eq!((both.oracle.errors, both.jit.errors), (1, 1));

    // The count is per handler run: the next RPC under the limit passes again.
    for (executor, out) in both.request(|| under.clone()) {
        assert!(matches!(out.verdict, Verdict::Forward(_)), "{executor}");
    }
}

#[test]
fn each_element_of_a_fused_chain_has_its_own_count() {
    // 800 tags: 640 800 iterations per element, 1 281 600 for the two together.
    use weft_ir::sim::{Executor, Interp};
    let elements: Vec<_> = ["loops_a", "loops_b"]
        .map(|name| element_from_source(name, SOURCE).0)
        .into();
    // One function for both elements' handlers, with one frame.
    let compiled = weft_jit::compile(&elements, weft_jit::Fusion::Fused).unwrap();
    let mut oracle: Vec<_> = (elements.iter())
        .map(|e| {
            let store = common::local_store(e);
            weft_ir::interp::Instance::new(
                &*e.name,
                store,
                Box::new(weft_hostcalls::SeededRng::new(1)),
            )
        })
        .collect();
    let mut jit: Vec<_> = (elements.iter())
        .map(|e| common::jit_instance(e, &e.name))
        .collect();
    let clock = weft_hostcalls::VirtualClock::new(1.0);
    let mut records = Vec::new();
    let mut host = weft_ir::interp::Host::new(&clock, &mut records);
    let msg = with_tags(800);
    let want = Interp.request(
        &elements,
        &mut oracle.iter_mut().collect::<Vec<_>>(),
        msg.clone(),
        &common::rpc(),
        &mut host,
        &mut Default::default(),
    );
    let got = compiled.request(
        &mut weft_jit::Buffers::default(),
        &mut jit.iter_mut().collect::<Vec<_>>(),
        msg,
        &common::rpc(),
        &mut host,
        &mut Default::default(),
    );
    for (executor, out) in [("interpreter", want), ("jit", got)] {
        assert!(
            matches!(out.verdict, Verdict::Forward(_)),
            "{executor}: {:?}",
            out.verdict
        );
    }
}

#[test]
fn a_round_trip_counts_the_response_handler_apart_from_the_request_handler() {
    // 750 tags: 564 000 iterations in `req`, 563 250 in `resp` of the same element, which the
    // fused round trip runs with one frame.
    let both_ways = format!(
        "{COPY_TAGS}{PAIRS_OF_SEEN}    send(rpc, Down)\n\nresp(rpc):\n{PAIRS_OF_SEEN}    send(rpc, Up)\n"
    );
    use weft_jit::rig::{Rig, RunOutcome};
    let (e, _) = element_from_source("both_ways", &both_ways);
    let response = Message::response(Vec::new());
    for fusion in [None, Some(weft_jit::Fusion::Fused)] {
        let mut rig = Rig::new(
            std::slice::from_ref(&e),
            fusion,
            with_tags(750),
            response.clone(),
        )
        .unwrap();
        assert_eq!(rig.run(), RunOutcome::Forwarded, "{fusion:?}");
        let answer: Vec<_> = rig.delivered().map(|m| m.code).collect();
        assert_eq!(
            answer,
            [Code::Ok, Code::Ok],
            "{fusion:?}: request and response"
        );
        assert_eq!(rig.instances[0].errors, 0, "{fusion:?}");
    }
}

#[test]
fn a_response_handler_of_a_later_element_stops_alike_in_every_executor() {
    // The second element's `resp` passes the limit (1 000 tags: 1 000 iterations in `req`,
    // 1 001 000 in `resp`); the error travels up through the first element's `resp`.
    const FIRST: &str = "\
state:
    responses: int

init():
    pass

req(rpc):
    send(rpc, Down)

resp(rpc):
    responses = responses + 1
    send(rpc, Up)
";
    let loops_on_the_way_back =
        format!("{COPY_TAGS}    send(rpc, Down)\n\nresp(rpc):\n{PAIRS_OF_SEEN}    send(rpc, Up)\n");
    use weft_jit::Fusion;
    use weft_jit::rig::{Rig, RunOutcome};
    let elements = vec![
        element_from_source("first", FIRST).0,
        element_from_source("back", &loops_on_the_way_back).0,
    ];
    let response = Message::response(Vec::new());
    let mut seen = Vec::new();
    for fusion in [None, Some(Fusion::Fused), Some(Fusion::Unfused)] {
        let mut rig = Rig::new(&elements, fusion, with_tags(1000), response.clone()).unwrap();
        assert_eq!(rig.run(), RunOutcome::Forwarded, "{fusion:?}");
        let answer: Vec<(Code, String)> = (rig.delivered())
            .map(|m| (m.code, m.status_message.clone()))
            .collect();
        assert_eq!(answer.len(), 2, "{fusion:?}: the request, then the answer");
        assert_eq!(answer[1].0, Code::Internal, "{fusion:?}");
        assert!(
            answer[1]
                .1
                .starts_with("back: more than 1000000 foreach iterations"),
            "{fusion:?}: {}",
            answer[1].1
        );
        let state: Vec<_> = (rig.instances.iter_mut())
            .map(|i| (i.store.snapshot(), i.errors))
            .collect();
        assert_eq!(state[1].1, 1, "{fusion:?}: counted against `back`");
        seen.push(state);
    }
    assert_eq!(seen[0], seen[1], "fused against the interpreter");
    assert_eq!(seen[0], seen[2], "unfused against the interpreter");
}

#[test]
fn a_configured_limit_stops_both_executors_alike() {
    // `max_iterations: 10` on tagpairs (n + n² iterations for n tags): two tags pass, three
    // do not, in the simulator with the interpreter and with the fused JIT.
    use weft_ir::config::Config;
    use weft_ir::load::load_edge;
    use weft_ir::sim::{Interp, SimOptions, parse_trace, simulate_with};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let yaml = format!(
        "protos: [echo.proto]\nelement_paths: [{}]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any:\n      - element: tagpairs\n        max_iterations: 10\n",
        root.join("../ir/tests/elements").display()
    );
    let cfg = Config::parse("weft.yaml", &root.join("../examples/echo"), &yaml).unwrap();
    let edge = load_edge(&cfg, "e").unwrap();
    let trace = parse_trace(
        "{\"id\": 1, \"t\": 0, \"req\": {\"tags\": [\"x\", \"y\"]}}\n{\"id\": 2, \"t\": 1, \"req\": {\"tags\": [\"x\", \"y\", \"z\"]}}\n",
    )
    .unwrap();
    let jit = weft_jit::Jit::new(weft_jit::Fusion::Fused);
    let reports = [
        simulate_with(&edge, &trace, SimOptions::default(), 0.5, &Interp).unwrap(),
        simulate_with(&edge, &trace, SimOptions::default(), 0.5, &jit).unwrap(),
    ];
    let [oracle, compiled] = reports.map(|r| {
        (r.results.iter())
            .map(|x| (x.status, x.message.clone()))
            .collect::<Vec<_>>()
    });
    assert_eq!(oracle[0].0, Code::Ok);
    assert_eq!(oracle[1].0, Code::Internal);
    assert!(
        oracle[1].1.contains("more than 10 foreach iterations"),
        "{}",
        oracle[1].1
    );
    assert_eq!(compiled, oracle);
    assert_eq!(jit.failures().0, 0, "the JIT compiled the segment");
}
