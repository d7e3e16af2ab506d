#![allow(clippy::unwrap_used)]
//! Shared state between element instances (LANGUAGE.md §5): client-side elements run one
//! instance per caller replica (`src`); `@consistency(strong)` state is one cell for all of
//! them, `@consistency(weak)` state is a replica per instance merged with its combiner every
//! `sim.weak_sync_interval` seconds. The elements are small test files in tests/elements/.

mod common;

use common::*;
use weft_hostcalls::Value;
use weft_ir::sim::SimReport;

/// The `x-count` header each RPC carried to the server: the count its instance saw.
fn counts(report: &SimReport) -> Vec<String> {
    report
        .results
        .iter()
        .map(|r| {
            assert_ok(r);
            r.server_headers["x-count"].clone()
        })
        .collect()
}

/// Five RPCs alternating between client replicas a and b.
fn alternating() -> Vec<Line> {
    (1..=5)
        .map(|i| rpc(i, i as f64).src(if i % 2 == 1 { "a" } else { "b" }))
        .collect()
}

#[test]
fn strong_state_is_one_counter_for_every_client_replica() {
    let sc = Scenario::new("client:\n  - strong_counter");
    let report = sc.run(alternating());
    assert_eq!(counts(&report), ["1", "2", "3", "4", "5"]);
    // Two instances, one value.
    assert_eq!(state_int(&report, "strong_counter@a", "count"), 5);
    assert_eq!(state_int(&report, "strong_counter@b", "count"), 5);
}

#[test]
fn local_state_is_per_client_replica() {
    let sc = Scenario::new("client:\n  - local_counter");
    let report = sc.run(alternating());
    assert_eq!(counts(&report), ["1", "1", "2", "2", "3"]);
    assert_eq!(state_int(&report, "local_counter@a", "count"), 3);
    assert_eq!(state_int(&report, "local_counter@b", "count"), 2);
}

#[test]
fn weak_sum_state_converges_at_each_sync() {
    let sc = Scenario::with_sim("weak_sync_interval: 10", "client:\n  - weak_counter");
    let trace = vec![
        rpc(1, 1.0).src("a").user("u"),
        rpc(2, 2.0).src("b").user("u"),
        rpc(3, 3.0).src("a").user("v"),
        rpc(4, 4.0).src("b").user("u"),
        rpc(5, 5.0).src("a").user("u"),
        // Sync at t = 10: 0 + 3 (a) + 2 (b) = 5 everywhere; per user u = 2 + 2, v = 1.
        rpc(6, 11.0).src("a").user("u"),
        rpc(7, 12.0).src("b").user("v"),
        // Sync at t = 20: 5 + 1 + 1 = 7; u = 4 + 1, v = 1 + 1.
        rpc(8, 21.0).src("a").user("u"),
        // A replica that joins later starts from the state merged at the last sync (7), not
        // from a's unsynced 8.
        rpc(9, 25.0).src("c").user("w"),
    ];
    let report = sc.run(trace);
    // Between syncs each replica counts only its own increments.
    assert_eq!(
        counts(&report),
        ["1", "1", "2", "2", "3", "6", "6", "8", "8"]
    );
    let per_user = |pairs: &[(&str, i64)]| {
        Value::Map(pairs.iter().map(|(u, n)| (s(u), Value::Int(*n))).collect())
    };
    // The run ends at t = 25, after the sync at 20 and before the one at 30.
    assert_eq!(state_int(&report, "weak_counter@a", "count"), 8);
    assert_eq!(state_int(&report, "weak_counter@b", "count"), 7);
    assert_eq!(state_int(&report, "weak_counter@c", "count"), 8);
    assert_eq!(
        state(&report, "weak_counter@a", "per_user"),
        &per_user(&[("u", 6), ("v", 2)])
    );
    assert_eq!(
        state(&report, "weak_counter@b", "per_user"),
        &per_user(&[("u", 5), ("v", 2)])
    );
    assert_eq!(
        state(&report, "weak_counter@c", "per_user"),
        &per_user(&[("u", 5), ("v", 2), ("w", 1)])
    );
}

#[test]
fn weak_state_converges_to_the_total_once_traffic_stops() {
    // Many increments on three replicas; one more RPC after a quiet sync sees the total.
    let sc = Scenario::with_sim("weak_sync_interval: 2.5", "client:\n  - weak_counter");
    let mut trace: Vec<Line> = (0..90u64)
        .map(|i| {
            let src = ["a", "b", "c"][(i % 3) as usize];
            rpc(i + 1, i as f64 * 0.1).src(src).user(src)
        })
        .collect();
    trace.push(rpc(91, 20.0).src("b").user("b"));
    let report = sc.run(trace);
    assert_eq!(report.results[90].server_headers["x-count"], "91");
    assert_eq!(
        state(&report, "weak_counter@a", "per_user"),
        &Value::Map(
            [("a", 30), ("b", 30), ("c", 30)]
                .iter()
                .map(|(u, n)| (s(u), Value::Int(*n)))
                .collect()
        )
    );
}

// ---------------------------------------------------------------------------------------------
// control-plane writes to shared state: one write to the shared variable, not one per instance

fn quota_trace() -> Vec<Line> {
    vec![
        rpc(1, 1.0).src("a"),
        rpc(2, 2.0).src("a"),
        // b and c join later; the quota they see is what a left, not a fresh copy.
        rpc(3, 3.0).src("b"),
        rpc(4, 4.0).src("b"),
        rpc(5, 5.0).src("c"),
    ]
}

fn assert_quota_of_three(report: &SimReport) {
    for id in 1..=3 {
        assert_ok(result(report, id));
    }
    for id in 4..=5 {
        assert_rejected(
            result(report, id),
            weft_hostcalls::Code::ResourceExhausted,
            "quota",
        );
    }
    for replica in ["a", "b", "c"] {
        assert_eq!(
            state_int(report, &format!("strong_quota@{replica}"), "quota"),
            0
        );
    }
}

#[test]
fn config_state_of_a_strong_variable_is_written_once() {
    let sc = Scenario::new("client:\n  - element: strong_quota\n    state: {quota: 3}");
    assert_quota_of_three(&sc.run(quota_trace()));
}

#[test]
fn control_writes_to_a_strong_variable_are_not_replayed_into_new_instances() {
    let sc = Scenario::new("client:\n  - strong_quota");
    let mut trace = vec![control(0.0, "strong_quota", "quota", serde_json::json!(3))];
    trace.extend(quota_trace());
    let report = sc.run(trace.clone());
    assert_quota_of_three(&report);

    // A later write is seen by every replica, old and new, once.
    trace.push(control(10.0, "strong_quota", "quota", serde_json::json!(1)));
    trace.push(rpc(6, 11.0).src("d"));
    trace.push(rpc(7, 12.0).src("a"));
    let report = sc.run(trace);
    assert_ok(result(&report, 6));
    assert_rejected(
        result(&report, 7),
        weft_hostcalls::Code::ResourceExhausted,
        "quota",
    );
}

#[test]
fn control_writes_to_a_weak_sum_variable_count_once() {
    let sc = Scenario::with_sim("weak_sync_interval: 1", "client:\n  - weak_budget");
    let trace = vec![
        control(0.0, "weak_budget", "budget", serde_json::json!(10)),
        // After the sync at t = 1 every replica starts from 10, and each takes one unit.
        rpc(1, 1.5).src("a"),
        rpc(2, 1.6).src("b"),
        // Sync at t = 2: 10 - 1 - 1.
        rpc(3, 2.5).src("c"),
        rpc(4, 2.6).src("a"),
    ];
    let report = sc.run(trace);
    let seen: Vec<&str> = report
        .results
        .iter()
        .map(|r| {
            assert_ok(r);
            r.server_headers["x-budget"].as_str()
        })
        .collect();
    assert_eq!(seen, ["10", "10", "8", "8"]);
}

#[test]
fn a_read_modify_write_that_changes_nothing_writes_nothing() {
    let sc = Scenario::with_sim("weak_sync_interval: 10", "client:\n  - weak_touch");
    let trace = vec![
        rpc(1, 1.0).src("a").user("writer").priority(5),
        // b's replica has not seen the write: it reads k as 0 and leaves it so. Had it stored
        // that 0, its later write would win the merge at t = 10 over a's 5.
        rpc(2, 2.0).src("b").user("reader"),
        rpc(3, 11.0).src("b").user("reader"),
    ];
    let report = sc.run(trace);
    let read: Vec<&str> = report
        .results
        .iter()
        .filter_map(|r| r.server_headers.get("x-read").map(String::as_str))
        .collect();
    assert_eq!(read, ["0", "5"]);
    let merged = Value::Map([(s("k"), Value::Int(5))].into_iter().collect());
    // Nor is the missing key `reader` inserted by reading it.
    assert_eq!(state(&report, "weak_touch@a", "seen"), &merged);
    assert_eq!(state(&report, "weak_touch@b", "seen"), &merged);
}
