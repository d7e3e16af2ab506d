//! A malformed message is refused before the first element of its edge runs, on whichever
//! side that is, so where the planner puts an element never changes what a malformed RPC
//! does (docs/engine.md, "Malformed messages").
#![allow(clippy::unwrap_used)]

mod common;

use common::{echo_dir_with_elements, echo_edge, options, two_strings};
use weft_hostcalls::Code;
use weft_runtime::{Engine, Metadata, RpcCounters, ServerResponse, Side, Verdict};

const METHOD: &str = "/echo.Echo/Say";
/// Field 1 claims 80 bytes and has 1.
const CORRUPT: &[u8] = &[0x0a, 0x50, b'x'];
/// One token, never refilled.
const ONE_TOKEN: &str = "ratelimit: {capacity: 1.0, rate: 0.0}";
const FIREWALL: &str = "firewall: {field: user, deny: [mallory]}";

fn engine(service: &str, client: &[&str], server: &[&str]) -> (Engine, tempfile::TempDir) {
    let dir = echo_dir_with_elements(&[("served.weft", include_str!("elements/served.weft"))]);
    let yaml = format!("element_paths: [elements]\n{}", echo_edge(client, server));
    let engine = Engine::open_yaml(&yaml, dir.path(), service, options()).unwrap();
    (engine, dir)
}

/// The status and message a request is rejected with; `None` when it is forwarded.
fn rejection(engine: &Engine, side: Side, message: &[u8]) -> Option<(Code, String)> {
    let out = engine
        .process_request(side, METHOD, Metadata::new(), message.to_vec())
        .unwrap();
    match out.verdict {
        Verdict::Reject { code, message } => Some((code, message)),
        Verdict::Forward(_) | Verdict::Route { .. } => None,
        Verdict::Reply(_) => panic!("no element here replies"),
    }
}

fn malformed(n: u64) -> RpcCounters {
    RpcCounters {
        malformed: n,
        ..RpcCounters::default()
    }
}

#[test]
fn a_malformed_request_is_refused_before_the_rate_limiter_wherever_the_firewall_runs() {
    // The firewall reads `user`, the rate limiter nothing of the message. Had the firewall
    // found the damage, the rate limiter before it would have spent its one token on it.
    for (client, server) in [
        (&[ONE_TOKEN, FIREWALL][..], &[][..]),
        (&[ONE_TOKEN][..], &[FIREWALL][..]),
    ] {
        let (engine, _dir) = engine("frontend", client, server);
        let prepared = engine.prepare(Side::Client, METHOD, None).unwrap();
        assert!(
            prepared.message_observed()[0],
            "the side that checks must be given the request's bytes"
        );
        let (code, message) = rejection(&engine, Side::Client, CORRUPT).expect("refused");
        assert_eq!(code, Code::InvalidArgument, "{message}");
        assert!(
            message.starts_with("malformed request: not a valid `echo.SayRequest`: "),
            "{message}"
        );
        assert_eq!(engine.rpc_counters(), malformed(1));
        let valid = two_strings("alice", "hi");
        assert_eq!(rejection(&engine, Side::Client, &valid), None, "{client:?}");
        let (code, _) = rejection(&engine, Side::Client, &valid).expect("no token left");
        assert_eq!(code, Code::ResourceExhausted);
    }
}

#[test]
fn the_server_checks_requests_when_the_client_runs_no_element() {
    let (engine, _dir) = engine("echo", &[], &[ONE_TOKEN, FIREWALL]);
    let (code, message) = rejection(&engine, Side::Server, CORRUPT).expect("refused");
    assert_eq!(code, Code::InvalidArgument, "{message}");
    assert!(message.starts_with("malformed request: "), "{message}");
    assert_eq!(
        rejection(&engine, Side::Server, &two_strings("alice", "hi")),
        None
    );
}

#[test]
fn an_edge_that_reads_no_field_does_not_check() {
    let (engine, _dir) = engine("frontend", &[ONE_TOKEN], &[]);
    assert_eq!(rejection(&engine, Side::Client, CORRUPT), None);
    assert_eq!(engine.rpc_counters(), malformed(0));
}

#[test]
fn a_malformed_response_is_refused_before_the_response_handlers_on_either_side() {
    for (service, side, client, server) in [
        ("frontend", Side::Client, &["served"][..], &[][..]),
        ("echo", Side::Server, &[][..], &["served"][..]),
    ] {
        let (engine, _dir) = engine(service, client, server);
        let out = engine
            .process_request(side, METHOD, Metadata::new(), two_strings("alice", "hi"))
            .unwrap();
        let rpc = out.rpc.expect("served's response handler writes a header");
        let out = engine
            .process_response(
                rpc,
                ServerResponse::Ok {
                    message: CORRUPT.to_vec(),
                    metadata: Metadata::new(),
                },
            )
            .unwrap();
        let Verdict::Reject { code, message } = out.verdict else {
            panic!("{service}: a malformed response passed: {:?}", out.verdict)
        };
        assert_eq!(code, Code::InvalidArgument, "{message}");
        assert!(
            message.starts_with("malformed response: not a valid `echo.SayReply`: "),
            "{service}: {message}"
        );
        assert_eq!(engine.rpc_counters(), malformed(1), "{service}");
    }
}
