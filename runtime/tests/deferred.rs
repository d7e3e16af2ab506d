//! A server-side request path that only reads the clock and keeps per-RPC scratch may wait
//! for the response and run in the same call, at the time the request arrived
//! (docs/engine.md, "Deferred request paths"). The undeferred path is the oracle.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{echo_dir_with_elements, echo_edge, options, two_strings};
use weft_hostcalls::Code;
use weft_hostcalls::channel::ChannelRecord;
use weft_hostcalls::clock::VirtualClock;
use weft_runtime::{
    Engine, EngineError, EngineOptions, Metadata, RequestOutcome, ResponseOutcome, ServerResponse,
    Side, Verdict,
};

const METHOD: &str = "/echo.Echo/Say";

struct Setup {
    engine: Engine,
    clock: Arc<VirtualClock>,
    records: Arc<Mutex<Vec<ChannelRecord>>>,
    _dir: tempfile::TempDir,
}

/// The `echo` service's engine on a virtual clock, with `server` as the edge's server chain
/// (and `client` as its client chain), its channel records collected.
fn setup(service: &str, client: &[&str], server: &[&str]) -> Setup {
    let dir = echo_dir_with_elements(&[("remember.weft", include_str!("elements/remember.weft"))]);
    let yaml = format!("element_paths: [elements]\n{}", echo_edge(client, server));
    let clock = Arc::new(VirtualClock::new(10.0));
    let records = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&records);
    let engine = Engine::open_yaml(
        &yaml,
        dir.path(),
        service,
        EngineOptions {
            clock: clock.clone(),
            channels: Some(Arc::new(move |r, _| sink.lock().unwrap().push(r))),
            ..options()
        },
    )
    .unwrap();
    Setup {
        engine,
        clock,
        records,
        _dir: dir,
    }
}

fn deferrable(service: &str, side: Side, client: &[&str], server: &[&str]) -> bool {
    let s = setup(service, client, server);
    s.engine
        .prepare(side, METHOD, None)
        .unwrap()
        .request_deferrable()
}

fn reply() -> ServerResponse {
    ServerResponse::Ok {
        message: two_strings("hi", "echo-0"),
        metadata: Metadata::new(),
    }
}

/// A server request the usual way, through the request path alone.
fn request(s: &Setup) -> RequestOutcome {
    s.engine
        .process_request(
            Side::Server,
            METHOD,
            Metadata::new(),
            two_strings("alice", "hi"),
        )
        .unwrap()
}

/// Runs one RPC on the server the usual way: the request at `arrive`, the response at
/// `answer`.
fn undeferred(s: &Setup, arrive: f64, answer: f64, response: ServerResponse) -> ResponseOutcome {
    s.clock.set(arrive);
    let out = request(s);
    assert!(matches!(out.verdict, Verdict::Forward(_)));
    s.clock.set(answer);
    s.engine
        .process_response(out.rpc.expect("a response path to run"), response)
        .unwrap()
}

/// The same RPC with its request path deferred to the response's call.
fn deferred(s: &Setup, arrive: f64, answer: f64, response: ServerResponse) -> ResponseOutcome {
    s.clock.set(answer);
    let prepared = s.engine.prepare(Side::Server, METHOD, None).unwrap();
    assert!(prepared.request_deferrable());
    s.engine
        .exchange(prepared, Duration::from_secs_f64(answer - arrive), response)
        .unwrap()
}

/// What a response outcome says, the records of the RPC aside.
fn said(out: &ResponseOutcome) -> String {
    match &out.verdict {
        Verdict::Forward(f) => format!(
            "forward {:?} {:?} changed={}",
            f.message.bytes, f.message.headers, f.message_changed
        ),
        other => format!("{other:?}"),
    }
}

fn values(records: &Mutex<Vec<ChannelRecord>>) -> Vec<(String, f64, String)> {
    records
        .lock()
        .unwrap()
        .drain(..)
        .map(|r| (r.channel.to_string(), r.time, format!("{:?}", r.value)))
        .collect()
}

#[test]
fn only_a_server_request_path_that_reads_the_clock_or_constants_may_wait() {
    let remember = |what: &str| format!("remember: {{what: {what}}}");
    for (server, want) in [
        (vec!["metrics".to_owned()], true),
        (vec![remember("time")], true),
        (vec![remember("param")], true),
        (vec![remember("time"), "metrics".to_owned()], true),
        // Reads a header, state other RPCs change, or draws from the instance's stream.
        (vec![remember("header")], false),
        (vec![remember("state")], false),
        (vec![remember("random")], false),
        (vec![remember("count")], false),
        // Stops requests, or writes state.
        (
            vec!["firewall: {field: user, deny: [mallory]}".to_owned()],
            false,
        ),
        (
            vec!["ratelimit: {capacity: 5.0, rate: 1.0}".to_owned()],
            false,
        ),
        (
            vec!["metrics".to_owned(), "fault: {prob_pass: 0.5}".to_owned()],
            false,
        ),
    ] {
        let server: Vec<&str> = server.iter().map(String::as_str).collect();
        assert_eq!(
            deferrable("echo", Side::Server, &[], &server),
            want,
            "{server:?}"
        );
    }
    // The client side stamps the request on its request path: it never waits.
    assert!(!deferrable("frontend", Side::Client, &["metrics"], &[]));
}

#[test]
fn a_deferred_request_path_sees_the_time_the_request_arrived() {
    let s = setup("echo", &[], &["remember: {what: time}", "metrics"]);
    let want = said(&undeferred(&s, 12.5, 14.0, reply()));
    let want_records = values(&s.records);
    assert_eq!(
        want_records.iter().filter(|r| r.0 == "latency").count(),
        1,
        "{want_records:?}"
    );
    let got = said(&deferred(&s, 12.5, 14.0, reply()));
    assert_eq!(got, want);
    assert!(got.contains("12.5"), "the request path read 12.5: {got}");
    assert_eq!(values(&s.records), want_records);
}

#[test]
fn a_deferred_request_path_sees_a_failed_call_like_the_undeferred_one() {
    let s = setup("echo", &[], &["metrics", "remember: {what: time}"]);
    let failed = || ServerResponse::Error {
        code: Code::Unavailable,
        message: "backend down".into(),
        metadata: Metadata::new(),
    };
    let want = undeferred(&s, 3.0, 3.25, failed());
    let want_records = values(&s.records);
    let got = deferred(&s, 3.0, 3.25, failed());
    assert!(matches!(
        got.verdict,
        Verdict::Reject {
            code: Code::Unavailable,
            ..
        }
    ));
    assert_eq!(said(&got), said(&want));
    assert_eq!(values(&s.records), want_records);
}

#[test]
fn a_version_whose_request_path_cannot_wait_runs_nothing_in_an_exchange() {
    // One token, never refilled: had the exchange run the rate limiter, the next request
    // would find none.
    let s = setup("echo", &[], &["ratelimit: {capacity: 1.0, rate: 0.0}"]);
    let prepared = s.engine.prepare(Side::Server, METHOD, None).unwrap();
    assert!(!prepared.request_deferrable());
    let Err(err) = s
        .engine
        .exchange(prepared, Duration::from_millis(5), reply())
    else {
        panic!("an exchange ran a rate limiter")
    };
    assert!(matches!(err, EngineError::NotDeferrable { .. }), "{err}");
    assert!(err.to_string().contains("echo.Echo/Say"), "{err}");
    let out = request(&s);
    assert!(
        matches!(out.verdict, Verdict::Forward(_)),
        "the token is still there"
    );
}
