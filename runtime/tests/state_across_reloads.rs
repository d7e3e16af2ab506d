//! A reload keeps the state of the elements it leaves unchanged (a rate limiter stays drained,
//! a cache stays warm) and starts changed elements afresh; RPCs still running in the older
//! version read and write that state where the newer version keeps it.

// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use common::{
    Seen, echo_dir_with_elements, echo_edge, examples, no_metadata, options, round_trip,
    two_strings,
};
use std::sync::Arc;
use weft_hostcalls::Code;

use weft_runtime::{Engine, Reloaded, ServerResponse, Side, Verdict};

/// A token bucket of `capacity` that refills too slowly to matter during a test.
fn ratelimit(capacity: u32) -> String {
    format!("ratelimit: {{capacity: {capacity}.0, rate: 0.000001}}")
}

/// Whether the client side lets one request through (`false`: rejected by the rate limit).
fn passes(client: &Engine) -> bool {
    passes_on(client, Side::Client)
}

/// Whether `side` lets one request through (`false`: rejected with RESOURCE_EXHAUSTED).
fn passes_on(engine: &Engine, side: Side) -> bool {
    let out = engine
        .process_request(
            side,
            "/echo.Echo/Say",
            no_metadata(),
            two_strings("alice", "hi"),
        )
        .unwrap();
    match out.verdict {
        Verdict::Forward(_) => true,
        Verdict::Reject { code, .. } => {
            assert_eq!(code, Code::ResourceExhausted);
            false
        }
        other => panic!("unexpected verdict {other:?}"),
    }
}

/// Whether one request from alice reached the server application (`false`: a local reply,
/// here the cache's).
fn reached(client: &Engine, server: &Engine) -> bool {
    reached_as(client, server, "alice")
}

fn reached_as(client: &Engine, server: &Engine, user: &str) -> bool {
    let seen = round_trip(
        client,
        server,
        no_metadata(),
        two_strings(user, "hi"),
        |_| ServerResponse::Ok {
            message: two_strings("hi", "echo-0"),
            metadata: no_metadata(),
        },
    );
    match seen {
        Seen::Answer { reached, .. } => reached,
        other => panic!("unexpected {other:?}"),
    }
}

fn installed(r: Reloaded) {
    assert!(matches!(r, Reloaded::Installed(_)), "{r:?}");
}

#[test]
fn an_unchanged_rate_limiter_stays_drained_and_a_changed_one_starts_full() {
    let dir = examples().join("echo");
    let before = echo_edge(&[&ratelimit(2)], &[]);
    let client = Engine::open_yaml(&before, &dir, "frontend", options()).unwrap();
    assert!(passes(&client) && passes(&client));
    assert!(!passes(&client), "the bucket of 2 is empty");

    // Another element joins the chain; the rate limiter is the same element as configured.
    let grown = echo_edge(&[&ratelimit(2), "logging"], &[]);
    installed(client.reload_yaml(&grown, &dir).unwrap());
    assert!(
        !passes(&client),
        "the reload must not refill an unchanged rate limiter"
    );

    // A new capacity is a new element: its `init` fills the bucket.
    let resized = echo_edge(&[&ratelimit(3), "logging"], &[]);
    installed(client.reload_yaml(&resized, &dir).unwrap());
    assert!(passes(&client) && passes(&client) && passes(&client));
    assert!(!passes(&client));
}

#[test]
fn a_new_iteration_limit_keeps_the_state() {
    // Raising `max_iterations` is how an operator lets an element whose state grew past
    // the limit work again, so it must not reset that state.
    let dir = examples().join("echo");
    let limited = |limit: u32| {
        format!(
            "element: ratelimit\n        params: {{capacity: 2.0, rate: 0.000001}}\n        max_iterations: {limit}"
        )
    };
    let client = Engine::open_yaml(
        &echo_edge(&[&limited(10)], &[]),
        &dir,
        "frontend",
        options(),
    )
    .unwrap();
    assert!(passes(&client) && passes(&client));
    assert!(!passes(&client), "the bucket of 2 is empty");
    installed(
        client
            .reload_yaml(&echo_edge(&[&limited(5_000_000)], &[]), &dir)
            .unwrap(),
    );
    assert!(!passes(&client), "a new limit must not refill the bucket");
}

#[test]
fn a_cache_stays_warm_across_a_reload() {
    let dir = examples().join("echo");
    let cache = "cache: {field: user}";
    let client = Engine::open_yaml(&echo_edge(&[cache], &[]), &dir, "frontend", options()).unwrap();
    let server = Engine::open_yaml(&echo_edge(&[cache], &[]), &dir, "echo", options()).unwrap();
    assert!(
        reached(&client, &server),
        "the first request reaches the server"
    );
    assert!(
        !reached(&client, &server),
        "the second is answered by the cache"
    );

    installed(
        client
            .reload_yaml(&echo_edge(&[cache, "metrics"], &[]), &dir)
            .unwrap(),
    );
    assert!(
        !reached(&client, &server),
        "the cache keeps its entries across the reload"
    );
}

#[test]
fn a_full_cache_evicts_in_the_same_order_after_a_reload() {
    let dir = examples().join("echo");
    let cache = "cache: {field: user, capacity: 2}";
    let client = Engine::open_yaml(&echo_edge(&[cache], &[]), &dir, "frontend", options()).unwrap();
    let server = Engine::open_yaml(&echo_edge(&[cache], &[]), &dir, "echo", options()).unwrap();
    // Stored bob first, then alice: the order of insertion is not the order of the keys.
    assert!(reached_as(&client, &server, "bob"));
    assert!(reached_as(&client, &server, "alice"));
    installed(
        client
            .reload_yaml(&echo_edge(&[cache, "metrics"], &[]), &dir)
            .unwrap(),
    );
    // A third user evicts bob, stored longest ago, as it would have without the reload.
    assert!(reached_as(&client, &server, "carol"));
    assert!(
        !reached_as(&client, &server, "alice"),
        "alice is still cached"
    );
    assert!(reached_as(&client, &server, "bob"), "bob was evicted");
}

#[test]
fn a_changed_schema_starts_the_cache_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let proto = std::fs::read_to_string(examples().join("echo/echo.proto")).unwrap();
    std::fs::write(dir.path().join("echo.proto"), &proto).unwrap();
    let cache = "cache: {field: user}";
    let yaml = echo_edge(&[cache], &[]);
    let client = Engine::open_yaml(&yaml, dir.path(), "frontend", options()).unwrap();
    let server = Engine::open_yaml(&yaml, dir.path(), "echo", options()).unwrap();
    assert!(reached(&client, &server));
    assert!(!reached(&client, &server), "answered by the cache");

    // The reply type gains a field: stored replies were encoded for the old one.
    let grown = proto.replace(
        "  string served_by = 2;\n}",
        "  string served_by = 2;\n  int64 at = 3;\n}",
    );
    assert_ne!(grown, proto);
    std::fs::write(dir.path().join("echo.proto"), grown).unwrap();
    installed(client.reload().unwrap());
    assert!(
        reached(&client, &server),
        "a cache built under another schema must not answer"
    );
}

/// A clock that runs a hook, once, at the first reading after it is armed: a test's way to
/// act in the middle of a reload (elements read the clock in `init`).
struct HookClock {
    hook: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl weft_hostcalls::clock::Clock for HookClock {
    fn now(&self) -> f64 {
        let hook = self.hook.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        0.0
    }
}

/// Two edges of service `echo`: `a_in` (its server side counts requests down from 2, with an
/// `init` that reads no clock) and `b_out` (its client side rate-limits; `ratelimit`'s `init`
/// reads the clock). Edges are built in order, so `b_out`'s `init` runs after `a_in`'s
/// segment is built.
fn two_edges(out_capacity: u32) -> String {
    format!(
        "protos: [echo.proto]
element_paths: [elements]
edges:
  a_in:
    from: frontend
    to: echo
    method: echo.Echo/Say
    server:
      - countdown
  b_out:
    from: echo
    to: backend
    method: echo.Echo/Say
    client:
      - {}
",
        ratelimit(out_capacity)
    )
}

const COUNTDOWN: &str = "# Lets `n` requests through, then rejects with RESOURCE_EXHAUSTED.
state:
    left: int

init(n: int = 2):
    left = n

req(rpc):
    if left > 0:
        left = left - 1
        send(rpc, Down)
    else:
        send(err('spent', RESOURCE_EXHAUSTED), Up)

resp(rpc):
    send(rpc, Up)
";

/// Whether the server side of `a_in` lets one request through.
fn server_passes(server: &Engine) -> bool {
    passes_on(server, Side::Server)
}

#[test]
fn state_written_while_a_reload_builds_is_carried_over() {
    let dir = echo_dir_with_elements(&[("countdown.weft", COUNTDOWN)]);
    let clock = Arc::new(HookClock {
        hook: std::sync::Mutex::new(None),
    });
    let mut opts = options();
    opts.clock = clock.clone();
    let server = Arc::new(Engine::open_yaml(&two_edges(100), dir.path(), "echo", opts).unwrap());

    // While the new version is being built (at `b_out`'s `init`, after `a_in`'s segment is
    // built), one request passes the countdown in the running version.
    let during = Arc::clone(&server);
    let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = Arc::clone(&fired);
    *clock.hook.lock().unwrap() = Some(Box::new(move || {
        assert!(server_passes(&during), "the first of two");
        // The counters answer while the build runs (they wait only for the install).
        let (tx, rx) = std::sync::mpsc::channel();
        let counted = Arc::clone(&during);
        std::thread::spawn(move || tx.send(counted.rpc_counters()));
        let counters = rx.recv_timeout(std::time::Duration::from_secs(5));
        assert!(
            counters.is_ok(),
            "the counters waited for the reload's build"
        );
        seen.store(true, std::sync::atomic::Ordering::SeqCst);
    }));
    installed(server.reload_yaml(&two_edges(101), dir.path()).unwrap());
    assert!(fired.load(std::sync::atomic::Ordering::SeqCst));

    // The countdown is unchanged, so the new version continues it: one request is left.
    assert!(server_passes(&server), "the second of two");
    assert!(
        !server_passes(&server),
        "the request made during the build must count in the new version"
    );
}

/// A server request from alice: its verdict, and the RPC when a response handler waits.
fn server_request(
    server: &Engine,
    metadata: weft_runtime::Metadata,
) -> weft_runtime::RequestOutcome {
    server
        .process_request(
            Side::Server,
            "/echo.Echo/Say",
            metadata,
            two_strings("alice", "hi"),
        )
        .unwrap()
}

/// The server's reply to `rpc`, through the response path.
fn respond(server: &Engine, rpc: weft_runtime::Rpc) -> weft_runtime::ResponseOutcome {
    server
        .process_response(
            rpc,
            ServerResponse::Ok {
                message: two_strings("hi", "echo-0"),
                metadata: no_metadata(),
            },
        )
        .unwrap()
}

fn rejected_with(out: &weft_runtime::RequestOutcome) -> Option<Code> {
    match &out.verdict {
        Verdict::Forward(_) => None,
        Verdict::Reject { code, .. } => Some(*code),
        other => panic!("unexpected verdict {other:?}"),
    }
}

#[test]
fn a_response_after_a_reload_writes_where_the_new_version_reads() {
    // At most one request in flight: the breaker counts requests up and responses down.
    let dir = examples().join("echo");
    let breaker = "circuitbreaker: {max_pending: 1}";
    let server = Engine::open_yaml(&echo_edge(&[], &[breaker]), &dir, "echo", options()).unwrap();
    let first = server_request(&server, no_metadata());
    assert_eq!(rejected_with(&first), None);
    let rpc = first.rpc.expect("the breaker waits for the response");

    // Another element joins; the breaker is unchanged and takes over its count of one.
    let grown = echo_edge(&[], &[breaker, "logging"]);
    installed(server.reload_yaml(&grown, &dir).unwrap());
    let second = server_request(&server, no_metadata());
    assert_eq!(second.version, 2);
    assert_eq!(
        rejected_with(&second),
        Some(Code::Unavailable),
        "one is in flight"
    );

    // The first request's response runs in version 1, and its count goes down where
    // version 2 counts: had it stayed in version 1's copy, version 2 would reject forever.
    let out = respond(&server, rpc);
    assert_eq!(out.version, 1);
    let third = server_request(&server, no_metadata());
    assert_eq!(rejected_with(&third), None, "nothing is in flight any more");
}

#[test]
fn requests_stamped_with_the_older_version_draw_from_the_same_bucket() {
    // During a rollout, clients that have not reloaded yet stamp the older version, and the
    // server runs it while it has that version. A rate limiter both versions share must not
    // hand out its tokens twice.
    let dir = examples().join("echo");
    let chain = [ratelimit(3), "metrics".to_owned()];
    let chain: Vec<&str> = chain.iter().map(String::as_str).collect();
    let server = Engine::open_yaml(&echo_edge(&[], &chain), &dir, "echo", options()).unwrap();
    let old_stamp = server.digest();
    let first = server_request(&server, no_metadata());
    assert_eq!(rejected_with(&first), None);
    // metrics waits for the response, which keeps version 1 alive.
    let _in_flight = first.rpc.expect("metrics waits for the response");

    let grown: Vec<&str> = chain.iter().copied().chain(["logging"]).collect();
    installed(server.reload_yaml(&echo_edge(&[], &grown), &dir).unwrap());
    let stamped = || {
        let mut md = no_metadata();
        md.insert("weft-version".into(), old_stamp.clone());
        md
    };
    let second = server_request(&server, stamped());
    assert_eq!(second.version, 1, "the stamped version is still here");
    assert_eq!(rejected_with(&second), None);
    let third = server_request(&server, no_metadata());
    assert_eq!(third.version, 2);
    assert_eq!(rejected_with(&third), None);
    // Three tokens, three requests, whichever version each ran in.
    for md in [no_metadata(), stamped()] {
        let out = server_request(&server, md);
        assert_eq!(
            rejected_with(&out),
            Some(Code::ResourceExhausted),
            "version {} handed out a fourth token",
            out.version
        );
    }
}

#[test]
fn an_rpc_in_flight_across_a_reload_keeps_its_scratch() {
    // metrics keeps the request's start time in the RPC's scratch and sends the latency at
    // the response. The response runs where the state went, and so must the scratch.
    let records = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&records);
    let mut opts = options();
    opts.channels = Some(Arc::new(
        move |r: weft_hostcalls::channel::ChannelRecord, _| {
            seen.lock().unwrap().push(r.channel.to_string())
        },
    ));
    let dir = examples().join("echo");
    let server = Engine::open_yaml(&echo_edge(&[], &["metrics"]), &dir, "echo", opts).unwrap();
    let first = server_request(&server, no_metadata());
    let rpc = first.rpc.expect("metrics waits for the response");
    installed(
        server
            .reload_yaml(&echo_edge(&[], &["metrics", "logging"]), &dir)
            .unwrap(),
    );
    respond(&server, rpc);
    let latencies = records
        .lock()
        .unwrap()
        .iter()
        .filter(|channel| *channel == "latency")
        .count();
    assert_eq!(
        latencies, 1,
        "the latency of the RPC that spanned the reload"
    );
}

#[test]
fn an_rpc_older_than_several_reloads_finds_the_state_where_the_last_one_keeps_it() {
    let dir = examples().join("echo");
    let breaker = "circuitbreaker: {max_pending: 1}";
    let chains: [&[&str]; 4] = [
        &[breaker],
        &[breaker, "logging"],
        &[breaker, "logging", "metrics"],
        &[breaker, "metrics"],
    ];
    let server = Engine::open_yaml(&echo_edge(&[], chains[0]), &dir, "echo", options()).unwrap();
    let first = server_request(&server, no_metadata());
    let rpc = first.rpc.expect("the breaker waits for the response");
    for chain in &chains[1..] {
        installed(server.reload_yaml(&echo_edge(&[], chain), &dir).unwrap());
    }
    // Versions 2 and 3 ran no RPC: freed, although version 1 still runs one and its state
    // went through them to version 4.
    let stats = server.stats();
    assert_eq!(
        (stats.current, stats.freed, stats.draining),
        (4, 2, 1),
        "{stats:?}"
    );
    assert_eq!(
        rejected_with(&server_request(&server, no_metadata())),
        Some(Code::Unavailable)
    );

    let out = respond(&server, rpc);
    assert_eq!(out.version, 1);
    assert_eq!(rejected_with(&server_request(&server, no_metadata())), None);
    assert_eq!(server.stats().freed, 3);
}
