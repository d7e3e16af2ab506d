//! One RPC kept in flight across many reloads that keep its element (a long stream, a
//! stuck call): the versions in between must not keep their copies of the state, and the
//! RPC's end must not need stack in proportion to the reloads. A review found both: 100
//! reloads with a warm cache held 309 MB more, and the end of an RPC held across 30 000
//! reloads overflowed its thread's stack.
//!
//! One test per file: it reads the process's resident memory.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{echo_edge, examples, options, two_strings};
use weft_runtime::{Engine, Metadata, ServerResponse, Side, Verdict};

fn resident_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

fn answer(body: &str) -> ServerResponse {
    ServerResponse::Ok {
        message: two_strings(body, "echo-0"),
        metadata: Metadata::new(),
    }
}

fn say(engine: &Engine, body: &str) -> weft_runtime::RequestOutcome {
    engine
        .process_request(
            Side::Client,
            "/echo.Echo/Say",
            Metadata::new(),
            two_strings("u", body),
        )
        .unwrap()
}

/// Reloads that change only a comment keep the element, and so move its state on. The
/// capacity holds every answer the test caches (the default, 1000, would evict most).
fn config(generation: usize) -> String {
    format!(
        "# generation {generation}\n{}",
        echo_edge(&["cache: {field: body, capacity: 30000}"], &[])
    )
}

#[test]
fn an_rpc_held_across_reloads_keeps_no_copies_of_the_state_and_ends_on_a_small_stack() {
    let base = examples().join("echo");

    // About 3 MB of cached answers (bodies under 128 bytes: `two_strings` writes one length
    // byte), which each version in between used to keep a copy of.
    let warm = Engine::open_yaml(&config(0), &base, "frontend", options()).unwrap();
    let big = "x".repeat(100);
    for i in 0..20_000 {
        let out = say(&warm, &format!("k{i}"));
        warm.process_response(out.rpc.unwrap(), answer(&big))
            .unwrap();
    }
    let held = say(&warm, "held").rpc.unwrap();
    let before = resident_kb();
    for i in 1..=60 {
        warm.reload_yaml(&config(i), &base).unwrap();
    }
    let grown_mb = resident_kb().saturating_sub(before) / 1024;
    assert!(
        grown_mb < 60,
        "60 reloads with one RPC held grew the process by {grown_mb} MB"
    );
    warm.process_response(held, answer("late")).unwrap();
    // The held RPC's answer is cached where the current version keeps the state, beside
    // the answers cached before the reloads.
    for body in ["held", "k7"] {
        assert!(
            matches!(say(&warm, body).verdict, Verdict::Reply(_)),
            "{body}: not cached"
        );
    }

    // A chain of versions long enough that ending it by recursion needs more stack than the
    // thread below has (the state is small here, so the reloads are quick).
    let cold = Arc::new(Engine::open_yaml(&config(0), &base, "frontend", options()).unwrap());
    let held = say(&cold, "held").rpc.unwrap();
    for i in 1..=1_500 {
        cold.reload_yaml(&config(i), &base).unwrap();
    }
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn_scoped(s, || cold.process_response(held, answer("late")).unwrap())
            .unwrap()
            .join()
            .unwrap();
    });
    assert!(matches!(say(&cold, "held").verdict, Verdict::Reply(_)));
    // The unlinked states left the engine's list of them: summing the counters waits for a
    // state that is being dropped to leave it, and a state that never did made it wait for
    // good (an earlier version of the unlinking did that).
    // Not a scoped thread: the test must fail, not wait with it.
    let (done, finished) = std::sync::mpsc::channel();
    let summing = Arc::clone(&cold);
    std::thread::spawn(move || done.send(summing.rpc_counters()).unwrap());
    let counts = finished.recv_timeout(std::time::Duration::from_secs(20));
    assert!(counts.is_ok(), "summing the counters did not finish");
}
