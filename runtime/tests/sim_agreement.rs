//! The engine against the reference simulator: the examples/echo chain on one seeded RPC
//! stream, in the same layout (the planner's, restricted to `lib`) and on a virtual clock,
//! must give every RPC the same outcome, status, message, server request and response.

// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use common::{Seen, examples, round_trip};
use serde_json::json;
use weft_hostcalls::Code;
use weft_hostcalls::clock::VirtualClock;
use weft_ir::config::Config;
use weft_ir::load::load_edge;
use weft_ir::sim::{Outcome, SimOptions, TraceLine, TraceRpc, simulate_layout};
use weft_ir::wire;
use weft_runtime::{Engine, EngineOptions, Metadata, ServerResponse};

/// SplitMix64: a small, seeded stream for the test's choices.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
}

fn stream(seed: u64, n: usize) -> Vec<TraceRpc> {
    let mut s = Stream(seed);
    let mut t = 0.0;
    (0..n)
        .map(|i| {
            // Bursts and pauses, so the rate limiter both refuses and refills.
            t += (s.next() % 600) as f64 / 1000.0;
            let body = match s.next() % 3 {
                0 => format!("fresh-{i}"),
                _ => s.pick(&["hello", "hi", "news?", "bye"]).to_owned(),
            };
            let user = s.pick(&["alice", "bob", "carol", "mallory", "dave"]);
            let fails = s.next().is_multiple_of(10);
            TraceRpc {
                line: i + 1,
                id: json!(i + 1),
                t,
                method: "echo.Echo/Say".into(),
                src: "frontend".into(),
                headers: BTreeMap::new(),
                req: json!({"user": user, "body": body}),
                resp: json!({"body": body, "served_by": "echo-0"}),
                resp_headers: BTreeMap::new(),
                status: if fails { Code::Unavailable } else { Code::Ok },
                status_message: if fails {
                    "echo is restarting".into()
                } else {
                    String::new()
                },
                t_resp: None,
            }
        })
        .collect()
}

#[test]
fn engine_agrees_with_the_simulator_on_the_echo_chain() {
    let path = examples().join("echo/weft.yaml");
    let config = Config::load(&path).unwrap();
    let edge = load_edge(&config, "frontend->echo").unwrap();
    let method = edge.methods[0].clone();
    let clock = Arc::new(VirtualClock::new(0.0));
    let opts = EngineOptions {
        clock: clock.clone(),
        seed: Some(7),
        watch_interval: None,
        ..EngineOptions::default()
    };
    let client = Engine::open(&path, "frontend", opts.clone()).unwrap();
    let server = Engine::open(&path, "echo", opts).unwrap();
    let layout = client.layout("frontend->echo").unwrap();
    assert_eq!(
        Some(&layout),
        server.layout("frontend->echo").as_ref(),
        "both ends plan alike"
    );

    let rpcs = stream(42, 400);
    let trace: Vec<TraceLine> = rpcs.iter().cloned().map(TraceLine::Rpc).collect();
    let report = simulate_layout(&edge, &trace, SimOptions { seed: 7 }, 1.0, &layout).unwrap();
    let mut kinds = BTreeMap::new();
    for (r, expected) in rpcs.iter().zip(&report.results) {
        clock.set(r.t);
        let request = wire::json_to_bytes(&method.request, &r.req).unwrap();
        let saw = RefCell::new(None);
        let seen = round_trip(&client, &server, Metadata::new(), request, |bytes| {
            *saw.borrow_mut() = Some(wire::bytes_to_json(&method.request, bytes).unwrap());
            if r.status == Code::Ok {
                ServerResponse::Ok {
                    message: wire::json_to_bytes(&method.response, &r.resp).unwrap(),
                    metadata: Metadata::new(),
                }
            } else {
                ServerResponse::Error {
                    code: r.status,
                    message: r.status_message.clone(),
                    metadata: Metadata::new(),
                }
            }
        });
        let id = &r.id;
        let (reached, status, message, got) = match &seen {
            Seen::Answer { bytes, reached, .. } => (
                *reached,
                Code::Ok,
                String::new(),
                Some(wire::bytes_to_json(&method.response, bytes).unwrap()),
            ),
            Seen::Error {
                code,
                message,
                reached,
            } => (*reached, *code, message.clone(), None),
        };
        assert_eq!(
            reached,
            expected.outcome == Outcome::Ok,
            "rpc {id}: {seen:?} vs {expected:?}"
        );
        assert_eq!(
            status, expected.status,
            "rpc {id}: {seen:?} vs {expected:?}"
        );
        assert_eq!(message, expected.message, "rpc {id}");
        assert_eq!(got, expected.client_got, "rpc {id}");
        assert_eq!(saw.into_inner(), expected.server_saw, "rpc {id}");
        *kinds
            .entry(format!(
                "{}/{}",
                expected.outcome.name(),
                expected.status.name()
            ))
            .or_insert(0) += 1;
    }
    eprintln!("outcomes: {kinds:?}");
    // The stream exercises every path of the chain, or the comparison proves little.
    for k in [
        "ok/OK",
        "replied/OK",
        "rejected/PERMISSION_DENIED",
        "rejected/RESOURCE_EXHAUSTED",
        "ok/UNAVAILABLE",
    ] {
        assert!(kinds.contains_key(k), "no RPC ended {k}: {kinds:?}");
    }
}
