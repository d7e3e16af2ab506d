//! The engine's counters of rejected RPCs: malformed messages and elements' run-time errors,
//! kept across reloads, including the counts of an element a reload removes.

// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use common::{echo_dir_with_elements, options, two_strings};
use weft_hostcalls::Code;
use weft_runtime::{Engine, Metadata, Rpc, RpcCounters, ServerResponse, Side, Verdict};

/// The client side of `frontend->echo` with `elements` (YAML list items), the test elements
/// beside the config.
fn config(elements: &[&str]) -> String {
    let list: String = elements.iter().map(|e| format!("      - {e}\n")).collect();
    format!(
        "protos: [echo.proto]\nelement_paths: [elements]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: echo.Echo/Say\n    client:\n{list}"
    )
}

fn config_dir() -> tempfile::TempDir {
    echo_dir_with_elements(&[("divide.weft", include_str!("elements/divide.weft"))])
}

/// SayRequest{user, body, priority}.
fn request(user: &str, priority: u8) -> Vec<u8> {
    let mut out = two_strings(user, "hello");
    out.extend_from_slice(&[0x18, priority]);
    out
}

/// Field 1 claims 80 bytes and has 1.
const CORRUPT: &[u8] = &[0x0a, 0x50, b'x'];

/// The status a request is rejected with, or None when it is forwarded.
fn rejected(engine: &Engine, message: &[u8]) -> Option<Code> {
    let out = engine
        .process_request(
            Side::Client,
            "/echo.Echo/Say",
            Metadata::new(),
            message.to_vec(),
        )
        .unwrap();
    match out.verdict {
        Verdict::Reject { code, .. } => Some(code),
        Verdict::Forward(_) | Verdict::Route { .. } => {
            // The response comes back, so the RPC's version is not kept waiting.
            if let Some(rpc) = out.rpc {
                answer(engine, rpc);
            }
            None
        }
        Verdict::Reply(_) => panic!("no element here replies"),
    }
}

/// A request `divide` passes, waiting for its response (divide's response handler writes
/// state, so the RPC waits for it): it holds its version until answered or dropped.
fn waiting(engine: &Engine) -> Rpc {
    engine
        .process_request(
            Side::Client,
            "/echo.Echo/Say",
            Metadata::new(),
            request("alice", 4),
        )
        .unwrap()
        .rpc
        .expect("divide's response handler writes state, so the RPC waits for it")
}

/// The server's answer to `rpc`, through its response path.
fn answer(engine: &Engine, rpc: Rpc) {
    engine
        .process_response(
            rpc,
            ServerResponse::Ok {
                message: two_strings("hello", "echo-0"),
                metadata: Metadata::new(),
            },
        )
        .unwrap();
}

fn counts(malformed: u64, element_errors: u64) -> RpcCounters {
    RpcCounters {
        malformed,
        element_errors,
        ..RpcCounters::default()
    }
}

#[test]
fn rejected_rpcs_are_counted_across_reloads() {
    let dir = config_dir();
    let firewall = "firewall: {field: user, deny: [mallory]}";
    let engine = Engine::open_yaml(
        &config(&[firewall, "divide"]),
        dir.path(),
        "frontend",
        options(),
    )
    .unwrap();
    assert_eq!(engine.rpc_counters(), counts(0, 0));

    assert_eq!(rejected(&engine, CORRUPT), Some(Code::InvalidArgument));
    assert_eq!(engine.rpc_counters(), counts(1, 0));
    // No priority: 100 / 0.
    assert_eq!(
        rejected(&engine, &request("alice", 0)),
        Some(Code::Internal)
    );
    assert_eq!(engine.rpc_counters(), counts(1, 1));
    // Passed, and rejected by policy: neither is counted.
    assert_eq!(rejected(&engine, &request("alice", 3)), None);
    assert_eq!(
        rejected(&engine, &request("mallory", 3)),
        Some(Code::PermissionDenied)
    );
    assert_eq!(engine.rpc_counters(), counts(1, 1));

    // A reload that keeps both elements carries their counts on.
    let firewall2 = "firewall: {field: user, deny: [mallory, eve]}";
    engine
        .reload_yaml(&config(&[firewall2, "divide"]), dir.path())
        .unwrap();
    assert_eq!(engine.rpc_counters(), counts(1, 1));
    assert_eq!(rejected(&engine, CORRUPT), Some(Code::InvalidArgument));
    assert_eq!(engine.rpc_counters(), counts(2, 1));

    // A reload that removes `divide`: its error stays counted once its version is freed
    // (no RPC runs in it here, so at once).
    engine
        .reload_yaml(&config(&[firewall2]), dir.path())
        .unwrap();
    assert_eq!(engine.stats().freed, 2, "both earlier versions were freed");
    assert_eq!(engine.rpc_counters(), counts(2, 1));
    assert_eq!(rejected(&engine, &request("alice", 0)), None);
    assert_eq!(rejected(&engine, CORRUPT), Some(Code::InvalidArgument));
    assert_eq!(engine.rpc_counters(), counts(3, 1));
}

/// An RPC that keeps version 1 alive across two reloads: the first takes `divide`'s state
/// over (its count must not be counted twice, once in each version), the second removes
/// `divide` (its count must not be lost while version 1, still pointing at version 2's
/// instances, is alive).
#[test]
fn counts_are_neither_doubled_nor_lost_while_an_old_version_drains() {
    let dir = config_dir();
    let firewall = "firewall: {field: user, deny: [mallory]}";
    let engine =
        Engine::open_yaml(&config(&["divide"]), dir.path(), "frontend", options()).unwrap();
    assert_eq!(
        rejected(&engine, &request("alice", 0)),
        Some(Code::Internal)
    );
    let rpc = waiting(&engine);

    engine
        .reload_yaml(&config(&["divide", firewall]), dir.path())
        .unwrap();
    assert_eq!(engine.stats().draining, 1);
    assert_eq!(engine.rpc_counters(), counts(0, 1));
    assert_eq!(rejected(&engine, &request("bob", 0)), Some(Code::Internal));
    assert_eq!(engine.rpc_counters(), counts(0, 2));

    engine
        .reload_yaml(&config(&[firewall]), dir.path())
        .unwrap();
    assert_eq!(engine.rpc_counters(), counts(0, 2));

    answer(&engine, rpc);
    assert_eq!(
        engine.stats().freed,
        2,
        "versions 1 and 2 are freed with the last RPC"
    );
    assert_eq!(engine.rpc_counters(), counts(0, 2));
    assert_eq!(rejected(&engine, CORRUPT), Some(Code::InvalidArgument));
    assert_eq!(engine.rpc_counters(), counts(1, 2));
}

/// A version freed on another thread while the counters are read: its counts go from its
/// instances to the retired totals, and no read in between may miss them (a total that
/// drops for a moment looks like a counter reset to a scraper). Each round adds one error
/// in `divide`, then a reload removes `divide` while an RPC holds the old version, and
/// another thread drops that RPC, freeing the version.
#[test]
fn counts_never_go_down_while_versions_are_freed() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    const ROUNDS: u64 = 300;
    let dir = config_dir();
    let firewall = "firewall: {field: user, deny: [mallory]}";
    let with_divide = config(&[firewall, "divide"]);
    let without = config(&[firewall]);
    let engine = Engine::open_yaml(&with_divide, dir.path(), "frontend", options()).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let (mut last, mut reads) = (0, 0u64);
            while !done.load(Ordering::Relaxed) {
                let now = engine.rpc_counters().element_errors;
                assert!(now >= last, "the error count went from {last} to {now}");
                last = now;
                reads += 1;
            }
            reads
        });
        let (to_dropper, held) = mpsc::channel::<Rpc>();
        let dropper = s.spawn(move || {
            // Dropped unanswered: a cancelled RPC, the last reference to its version.
            for rpc in held {
                drop(rpc);
            }
        });
        for round in 1..=ROUNDS {
            assert_eq!(
                rejected(&engine, &request("alice", 0)),
                Some(Code::Internal)
            );
            let rpc = waiting(&engine);
            engine.reload_yaml(&without, dir.path()).unwrap();
            to_dropper.send(rpc).unwrap();
            engine.reload_yaml(&with_divide, dir.path()).unwrap();
            assert!(engine.rpc_counters().element_errors >= round);
        }
        drop(to_dropper);
        dropper.join().unwrap();
        done.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    });
    assert_eq!(engine.rpc_counters(), counts(0, ROUNDS));
    let stats = engine.stats();
    assert_eq!(stats.installed, 1 + 2 * ROUNDS);
    assert_eq!(stats.freed, 2 * ROUNDS, "{stats:?}");
}

/// A reload that changes nothing, or fails, installs nothing: neither it nor the version it
/// built and dropped shows in the install and free counts.
#[test]
fn only_installed_versions_are_counted() {
    let dir = config_dir();
    let yaml = config(&["divide"]);
    let engine = Engine::open_yaml(&yaml, dir.path(), "frontend", options()).unwrap();
    engine.reload_yaml(&yaml, dir.path()).unwrap();
    assert!(
        engine
            .reload_yaml(&config(&["no_such_element"]), dir.path())
            .is_err()
    );
    let stats = engine.stats();
    assert_eq!((stats.installed, stats.freed), (1, 0), "{stats:?}");
    engine
        .reload_yaml(
            &config(&["divide", "firewall: {field: user, deny: [eve]}"]),
            dir.path(),
        )
        .unwrap();
    let stats = engine.stats();
    assert_eq!((stats.installed, stats.freed), (2, 1), "{stats:?}");
}

#[test]
fn an_elements_configured_iteration_limit_holds_in_the_runtime() {
    // tagpairs makes n + n² iterations for n tags: 6 for two, 12 for three; its limit is 10.
    let dir = echo_dir_with_elements(&[("tagpairs.weft", include_str!("elements/tagpairs.weft"))]);
    let yaml = config(&["element: tagpairs\n        max_iterations: 10"]);
    let engine = Engine::open_yaml(&yaml, dir.path(), "frontend", options()).unwrap();
    let with_tags = |n: usize| {
        let mut out = two_strings("alice", "hello");
        for _ in 0..n {
            out.extend_from_slice(&[0x22, 1, b't']); // a `tags` entry
        }
        out
    };
    assert_eq!(rejected(&engine, &with_tags(2)), None);
    assert_eq!(rejected(&engine, &with_tags(3)), Some(Code::Internal));
    let counts = engine.rpc_counters();
    assert_eq!(counts.element_errors, 1, "counted against the element");
    assert_eq!(
        counts.iteration_limited, 1,
        "and as a limit the element passed"
    );

    // Raising the limit keeps the element, and its counts go with it.
    let raised = config(&["element: tagpairs\n        max_iterations: 100"]);
    engine.reload_yaml(&raised, dir.path()).unwrap();
    assert_eq!(rejected(&engine, &with_tags(3)), None);
    assert_eq!(engine.rpc_counters(), counts);
    // Replacing it retires them with its instance.
    let other = config(&["element: tagpairs\n        name: other"]);
    engine.reload_yaml(&other, dir.path()).unwrap();
    assert_eq!(engine.rpc_counters(), counts);
}
