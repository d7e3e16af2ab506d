//! Whatever version each RPC runs in, an element a reload leaves unchanged keeps one state:
//! random sequences of requests (some stamped with older versions), responses, abandoned
//! RPCs and reloads, checked against a model with a single circuit breaker and a single
//! token bucket.

// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use common::{echo_edge, examples, no_metadata, options, two_strings};
use proptest::prelude::*;
use weft_hostcalls::Code;
use weft_runtime::{Engine, Reloaded, Rpc, ServerResponse, Side, Verdict};

const MAX_PENDING: usize = 3;
const TOKENS: usize = 6;

#[derive(Clone, Debug)]
enum Op {
    /// A request, stamped with the digest of the `n`-th version installed so far (modulo
    /// their number), or unstamped.
    Request(Option<usize>),
    /// The server answers the `n`-th RPC in flight (modulo their number).
    Respond(usize),
    /// The `n`-th RPC in flight is cancelled: its response handlers never run.
    Abandon(usize),
    /// The config changes around the two elements, which stay as they were.
    Reload,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => proptest::option::of(0..8usize).prop_map(Op::Request),
        3 => (0..8usize).prop_map(Op::Respond),
        1 => (0..8usize).prop_map(Op::Abandon),
        2 => Just(Op::Reload),
    ]
}

/// The chain of the `generation`-th config: the breaker and the bucket, then an element that
/// comes and goes so every reload installs a new version.
fn config(generation: usize) -> String {
    let breaker = format!("circuitbreaker: {{max_pending: {MAX_PENDING}}}");
    let bucket = format!("ratelimit: {{capacity: {TOKENS}.0, rate: 0.000001}}");
    let third = ["logging", "metrics"][generation % 2];
    echo_edge(&[], &[&breaker, &bucket, third])
}

/// What the single breaker and bucket say about one more request.
#[derive(Debug, Default)]
struct Model {
    /// Requests the breaker let through whose response handler has not run (abandoned ones
    /// stay counted: the element's `resp` never ran for them).
    pending: usize,
    tokens_used: usize,
}

impl Model {
    fn request(&mut self) -> Option<Code> {
        if self.pending >= MAX_PENDING {
            return Some(Code::Unavailable);
        }
        if self.tokens_used == TOKENS {
            // The bucket's rejection travels back through the breaker, which counts down.
            return Some(Code::ResourceExhausted);
        }
        self.pending += 1;
        self.tokens_used += 1;
        None
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn unchanged_elements_keep_one_state_across_versions(ops in proptest::collection::vec(op(), 1..40)) {
        let dir = examples().join("echo");
        let server = Engine::open_yaml(&config(0), &dir, "echo", options()).unwrap();
        let mut digests = vec![server.digest()];
        let mut in_flight: Vec<Rpc> = Vec::new();
        let mut model = Model::default();
        for op in ops {
            match op {
                Op::Request(stamp) => {
                    let mut md = no_metadata();
                    if let Some(k) = stamp {
                        md.insert("weft-version".into(), digests[k % digests.len()].clone());
                    }
                    let out = server
                        .process_request(Side::Server, "/echo.Echo/Say", md, two_strings("alice", "hi"))
                        .unwrap();
                    let got = match &out.verdict {
                        Verdict::Forward(_) => None,
                        Verdict::Reject { code, .. } => Some(*code),
                        other => panic!("unexpected verdict {other:?}"),
                    };
                    prop_assert_eq!(got, model.request(), "request in version {}", out.version);
                    if let Some(rpc) = out.rpc {
                        in_flight.push(rpc);
                    }
                }
                Op::Respond(k) if !in_flight.is_empty() => {
                    let rpc = in_flight.remove(k % in_flight.len());
                    let reply = ServerResponse::Ok { message: two_strings("hi", "echo-0"), metadata: no_metadata() };
                    let out = server.process_response(rpc, reply).unwrap();
                    prop_assert!(matches!(out.verdict, Verdict::Forward(_)));
                    model.pending -= 1;
                }
                Op::Abandon(k) if !in_flight.is_empty() => {
                    drop(in_flight.remove(k % in_flight.len()));
                }
                Op::Respond(_) | Op::Abandon(_) => {}
                Op::Reload => {
                    let r = server.reload_yaml(&config(digests.len()), &dir).unwrap();
                    prop_assert!(matches!(r, Reloaded::Installed(_)), "{:?}", r);
                    digests.push(server.digest());
                }
            }
        }
        drop(in_flight);
        let stats = server.stats();
        prop_assert_eq!(stats.draining, 0, "{:?}", stats);
        prop_assert_eq!(stats.freed, stats.installed - 1, "{:?}", stats);
    }
}
