#![allow(clippy::unwrap_used)]
//! Scenarios for the standard elements that admit or refuse requests: firewall, fault,
//! ratelimit, bandwidthlimit, circuitbreaker, admissioncontrol.
//!
//! Every expected value below is derived from the element's source (elements/*.weft) and
//! LANGUAGE.md, not copied from a run.

mod common;

use common::*;
use serde_json::json;
use weft_hostcalls::{Code, Value};
use weft_ir::sim::{Outcome, SimReport};

// ---------------------------------------------------------------------------------------------
// firewall

#[test]
fn firewall_denies_listed_users_and_allows_everyone_else() {
    let sc = Scenario::new("client:\n  - firewall: {field: user, deny: [mallory, eve]}");
    let users = ["alice", "mallory", "bob", "eve", "", "Mallory", "mallory "];
    let report = sc.run(
        users
            .iter()
            .enumerate()
            .map(|(i, u)| rpc(i as u64 + 1, i as f64).user(u).body("hi")),
    );
    for (i, u) in users.iter().enumerate() {
        let r = result(&report, i as u64 + 1);
        if *u == "mallory" || *u == "eve" {
            assert_rejected(r, Code::PermissionDenied, "acl");
        } else {
            // Default allow: unlisted (also empty, differently cased or padded) names pass
            // unchanged.
            assert_ok(r);
            let mut req = json!({"body": "hi"});
            if !u.is_empty() {
                req["user"] = json!(u);
            }
            assert_eq!(r.server_saw, Some(req), "user {u:?}");
        }
    }
    // `init` turned the deny list into the map, and requests never change it.
    let denied: Value = Value::Map(
        [
            (s("eve"), Value::Bool(true)),
            (s("mallory"), Value::Bool(true)),
        ]
        .into_iter()
        .collect(),
    );
    assert_eq!(state(&report, "firewall@client", "denied"), &denied);
}

#[test]
fn firewall_on_an_int_field_compares_its_decimal_text() {
    // `str(get(rpc, 'priority'))`: an int64 field is matched through its decimal rendering.
    let sc = Scenario::new("client:\n  - firewall: {field: priority, deny: ['7', '-3', '0']}");
    let prios = [7, 8, -3, 70, 3];
    let mut trace: Vec<Line> = prios
        .iter()
        .enumerate()
        .map(|(i, p)| rpc(i as u64 + 1, i as f64).priority(*p))
        .collect();
    // An absent field reads as its default, 0, whose text '0' is denied.
    trace.push(rpc(9, 9.0).user("nobody"));
    let report = sc.run(trace);
    for (i, p) in prios.iter().enumerate() {
        let r = result(&report, i as u64 + 1);
        if [7, -3].contains(p) {
            assert_rejected(r, Code::PermissionDenied, "acl");
        } else {
            assert_ok(r);
            assert_eq!(r.server_saw, Some(json!({"priority": p})));
        }
    }
    assert_rejected(result(&report, 9), Code::PermissionDenied, "acl");
}

// ---------------------------------------------------------------------------------------------
// fault

fn fault(prob: &str) -> Scenario {
    Scenario::new(&format!("client:\n  - fault: {{prob_pass: {prob}}}"))
}

fn many(n: u64) -> Vec<Line> {
    (0..n)
        .map(|i| rpc(i + 1, i as f64 * 0.001).user("u"))
        .collect()
}

fn passed(report: &SimReport) -> Vec<bool> {
    report
        .results
        .iter()
        .map(|r| {
            match r.outcome {
                Outcome::Ok => assert_ok(r),
                _ => assert_rejected(r, Code::Unavailable, "fault_injected"),
            }
            r.outcome == Outcome::Ok
        })
        .collect()
}

#[test]
fn fault_pass_rate_is_binomial_around_prob_pass() {
    let n = 10_000u64;
    let p = 0.7;
    let report = fault("0.7").run(many(n));
    let passes = passed(&report).iter().filter(|p| **p).count() as f64;
    let mean = n as f64 * p;
    let sigma = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (passes - mean).abs() <= 3.0 * sigma,
        "{passes} passes of {n}; expected {mean} ± {:.1}",
        3.0 * sigma
    );
}

#[test]
fn fault_with_prob_0_fails_everything_and_prob_1_nothing() {
    // randomf(0, 1) is in [0, 1): `< 0.0` never holds, `< 1.0` always does.
    let none = fault("0.0").run(many(2000));
    assert!(passed(&none).iter().all(|p| !p));
    let all = fault("1.0").run(many(2000));
    assert!(passed(&all).iter().all(|p| *p));
}

#[test]
fn fault_draws_are_reproducible_from_the_seed() {
    let sc = fault("0.5");
    let a = passed(&sc.run_seed(many(1000), 7));
    let b = passed(&sc.run_seed(many(1000), 7));
    let c = passed(&sc.run_seed(many(1000), 8));
    assert_eq!(a, b, "same seed, same outcomes");
    assert_ne!(a, c, "another seed draws other outcomes");
    // Both seeds draw a fair mix (1000 draws at p = 0.5: σ ≈ 16).
    for v in [&a, &c] {
        let k = v.iter().filter(|p| **p).count();
        assert!((400..=600).contains(&k), "{k}");
    }
}

// ---------------------------------------------------------------------------------------------
// ratelimit

#[test]
fn ratelimit_token_bucket_with_a_frozen_clock() {
    let sc = Scenario::new("client:\n  - ratelimit: {capacity: 1000, rate: 1000}");
    let mut trace = Vec::new();
    let mut id = 0;
    let mut at = |t: f64, n: usize, trace: &mut Vec<Line>| {
        let first = id + 1;
        for _ in 0..n {
            id += 1;
            trace.push(rpc(id, t).user("u"));
        }
        first..=id
    };
    // A burst of 1500 at one instant: the full bucket holds 1000 tokens.
    let burst = at(0.0, 1500, &mut trace);
    // Half a second later 0.5 s × 1000/s = 500 tokens have come back.
    let later = at(0.5, 1000, &mut trace);
    // Long idle: the bucket refills to its capacity and no further.
    let refilled = at(60.0, 1001, &mut trace);
    let report = sc.run(trace);

    let check = |ids: std::ops::RangeInclusive<u64>, passing: u64| {
        for id in ids.clone() {
            let r = result(&report, id);
            // Tokens are taken in arrival order, so exactly the first `passing` pass.
            if id - ids.start() < passing {
                assert_ok(r);
            } else {
                assert_rejected(r, Code::ResourceExhausted, "ratelimit");
            }
        }
    };
    check(burst, 1000);
    check(later, 500);
    check(refilled, 1000);
    assert_eq!(state_float(&report, "ratelimit@client", "tokens"), 0.0);
    assert_eq!(
        state(&report, "ratelimit@client", "last"),
        &Value::Instant(60.0)
    );
}

#[test]
fn ratelimit_buckets_are_per_client_replica() {
    // Client-side state is per caller: two replicas each get their own bucket.
    let sc = Scenario::new("client:\n  - ratelimit: {capacity: 2, rate: 1}");
    let report = sc.run((1..=6).map(|i| rpc(i, 0.0).src(if i % 2 == 0 { "b" } else { "a" })));
    for i in 1..=4 {
        assert_ok(result(&report, i));
    }
    for i in 5..=6 {
        assert_rejected(result(&report, i), Code::ResourceExhausted, "ratelimit");
    }
}

// ---------------------------------------------------------------------------------------------
// bandwidthlimit

/// A body of `n` ASCII characters: one request of `n + 2` encoded bytes (key byte, length
/// byte, payload) for n < 128.
fn body(n: usize) -> String {
    "x".repeat(n)
}

#[test]
fn bandwidthlimit_counts_encoded_bytes_at_the_edges() {
    let sc = Scenario::new("client:\n  - bandwidthlimit: {capacity: 100, rate: 100}");
    let trace = vec![
        // 2 + 38 = 40 bytes of 100: passes, 60 left.
        rpc(1, 0.0).body(&body(38)),
        // 61 bytes > 60: rejected, and takes nothing.
        rpc(2, 0.0).body(&body(59)),
        // user "ab" (2 + 2) + body 54 (2 + 54) = 60 bytes: exactly what is left; passes.
        rpc(3, 0.0).user("ab").body(&body(54)),
        // The bucket is empty; even 2 bytes (priority 1: key byte + varint) are too many.
        rpc(4, 0.0).priority(1),
        // An empty message encodes to 0 bytes, and 0 tokens are enough.
        rpc(5, 0.0),
        // 0.25 s × 100 B/s = 25 bytes back: 26 is one too many, 25 fits exactly.
        rpc(6, 0.25).body(&body(24)),
        rpc(7, 0.25).body(&body(23)),
        rpc(8, 0.25).priority(1),
        // After a long idle the bucket holds its capacity, 100, not more.
        rpc(9, 30.0).body(&body(99)),
        rpc(10, 30.0).body(&body(98)),
        rpc(11, 30.0).priority(1),
    ];
    let report = sc.run(trace);
    for id in [1, 3, 5, 7, 10] {
        assert_ok(result(&report, id));
    }
    for id in [2, 4, 6, 8, 9, 11] {
        assert_rejected(
            result(&report, id),
            Code::ResourceExhausted,
            "bandwidthlimit",
        );
    }
    assert_eq!(state_float(&report, "bandwidthlimit@client", "tokens"), 0.0);
}

// ---------------------------------------------------------------------------------------------
// circuitbreaker

#[test]
fn circuitbreaker_frees_slots_on_errors_and_downstream_rejections() {
    let sc = Scenario::new(
        "client:\n  - circuitbreaker: {max_pending: 2}\n  - firewall: {field: user, deny: [mallory]}",
    );
    let trace = vec![
        rpc(1, 0.0).user("alice").t_resp(5.0),
        // Fails at t = 3 with UNAVAILABLE from the server: still frees its slot.
        rpc(2, 1.0).user("bob").t_resp(3.0).status("UNAVAILABLE"),
        // 1 and 2 in flight: full.
        rpc(3, 2.0).user("carol"),
        // 2's error arrives at t = 3 before this request (responses first at one instant).
        rpc(4, 3.0).user("dave").t_resp(10.0),
        // 1 and 4 in flight: full.
        rpc(5, 4.0).user("erin"),
        // 1's answer at t = 5 frees a slot; the breaker admits mallory, the firewall below
        // rejects her and the rejection, travelling up, frees the slot again.
        rpc(6, 5.0).user("mallory").t_resp(9.0),
        // Only 4 is in flight, so this one fits (it would not had 6 kept its slot)...
        rpc(7, 6.0).user("frank").t_resp(7.0),
        // ...and now 4 and 7 fill the breaker.
        rpc(8, 6.5).user("grace"),
        // 7 answered at t = 7.
        rpc(9, 7.0).user("heidi"),
    ];
    let report = sc.run(trace);
    assert_ok(result(&report, 1));
    let r2 = result(&report, 2);
    assert_eq!((r2.outcome, r2.status), (Outcome::Ok, Code::Unavailable));
    assert_rejected(result(&report, 3), Code::Unavailable, "circuit_breaker");
    assert_ok(result(&report, 4));
    assert_rejected(result(&report, 5), Code::Unavailable, "circuit_breaker");
    assert_rejected(result(&report, 6), Code::PermissionDenied, "acl");
    assert_ok(result(&report, 7));
    assert_rejected(result(&report, 8), Code::Unavailable, "circuit_breaker");
    assert_ok(result(&report, 9));
    // Everything admitted has answered by t = 10.
    assert_eq!(state_int(&report, "circuitbreaker@client", "pending"), 0);
}

// ---------------------------------------------------------------------------------------------
// admissioncontrol

/// Local rejection rate of the RPCs sent in [from, to).
fn rejection_rate(report: &SimReport, times: &[f64], from: f64, to: f64) -> f64 {
    let mut n = 0;
    let mut rejected = 0;
    for (r, t) in report.results.iter().zip(times) {
        if (from..to).contains(t) {
            n += 1;
            if r.outcome == Outcome::Rejected {
                assert_rejected(r, Code::Unavailable, "admission_control");
                rejected += 1;
            }
        }
    }
    assert!(n > 0);
    rejected as f64 / n as f64
}

#[test]
fn admissioncontrol_throttles_a_failing_backend_and_recovers() {
    let sc = Scenario::new("client:\n  - admissioncontrol: {multiplier: 2.0, window: 10.0}");
    // 10 RPCs a second for 240 s; the backend fails every RPC sent in [20, 60).
    let times: Vec<f64> = (0..2400).map(|i| i as f64 / 10.0).collect();
    let trace = || {
        times.iter().enumerate().map(|(i, t)| {
            let l = rpc(i as u64 + 1, *t).user("u");
            if (20.0..60.0).contains(t) {
                l.status("UNAVAILABLE")
            } else {
                l
            }
        })
    };
    for seed in [1, 2, 3] {
        let report = sc.run_seed(trace(), seed);
        let rate = |a, b| rejection_rate(&report, &times, a, b);
        // Healthy: every request is accepted at once, so requests <= accepts and the
        // probability max(0, (requests - 2·accepts) / (requests + 1)) is exactly 0.
        assert_eq!(rate(0.0, 20.0), 0.0, "seed {seed}");
        // The window is ten 1 s buckets; bucket b (the RPCs sent in [b, b + 1)) leaves the
        // counts when bucket b + 10 starts. The k-th RPC (from 0) of bucket b in 20..=28
        // sees the 90 requests of buckets b - 9..b - 1 plus k, and the 10 accepts of each
        // healthy bucket b - 9..=19: requests - 2·accepts = 90 + k - 20·(29 - b), which is
        // < 0 for every b <= 24 (k <= 9).
        assert_eq!(rate(20.0, 25.0), 0.0, "seed {seed}");
        // Then p = (90 + k - 20·(29 - b)) / (91 + k) is about 0.15, 0.36, 0.57, 0.78 and
        // 0.99 in buckets 25 to 29: about half of (25, 30).
        let climbing = rate(25.0, 30.0);
        assert!((0.2..0.8).contains(&climbing), "seed {seed}: {climbing}");
        // Later in the outage the window holds no accept: p = (90 + k) / (91 + k) > 0.98.
        let outage = rate(30.0, 60.0);
        assert!(outage > 0.9, "seed {seed}: {outage}");
        // Recovery: requests rejected locally count, and only the ones let through are
        // accepted (a share 1 - p ≈ 2·accepts / requests), so the accepted share of the
        // window about doubles per window: the first healthy window stays mostly
        // throttled...
        let windows: Vec<f64> = (6..24)
            .map(|w| rate(w as f64 * 10.0, w as f64 * 10.0 + 10.0))
            .collect();
        assert!(windows[0] > 0.5, "seed {seed}: {windows:?}");
        // ...then the rate falls to 0 within a few windows and stays there (once
        // 2·accepts >= requests, every request is accepted, and the buckets that leave the
        // window are the ones with the fewest accepts, so it remains so).
        let zero = windows.iter().position(|r| *r == 0.0);
        assert!(
            zero.is_some_and(|z| z <= 14 && windows[z..].iter().all(|r| *r == 0.0)),
            "seed {seed}: rates by window from t = 60: {windows:?}"
        );
    }
}

#[test]
fn admissioncontrol_forgets_failures_older_than_its_window() {
    // 10 RPCs a second fail in [0, 2), then nothing is sent until the backend is healthy.
    // With a 10 s window of ten 1 s buckets, buckets 0 and 1 leave the counts when buckets
    // 10 and 11 start.
    let sc = Scenario::new("client:\n  - admissioncontrol: {multiplier: 2.0, window: 10.0}");
    let failing = (0..20).map(|i| i as f64 / 10.0);
    for (healthy_from, failures_in_window) in [(15.0, 0), (10.5, 10)] {
        let times: Vec<f64> = failing
            .clone()
            .chain((0..5).map(|i| healthy_from + i as f64 / 10.0))
            .collect();
        let trace = || {
            times.iter().enumerate().map(|(i, t)| {
                let l = rpc(i as u64 + 1, *t).user("u");
                if *t < 2.0 { l.status("UNAVAILABLE") } else { l }
            })
        };
        let mut rejected = 0;
        for seed in [1, 2, 3] {
            let report = sc.run_seed(trace(), seed);
            let rate = rejection_rate(&report, &times, healthy_from, healthy_from + 1.0);
            rejected += (rate * 5.0).round() as i64;
            // What is left in the window: the failures still in it, and the five healthy
            // RPCs, each counted as a request, and accepted when it got through.
            let through = 5 - (rate * 5.0).round() as i64;
            let instance = "admissioncontrol@client";
            assert_eq!(
                state_int(&report, instance, "requests"),
                failures_in_window + 5
            );
            assert_eq!(
                state_int(&report, instance, "accepts"),
                through,
                "seed {seed}"
            );
        }
        if failures_in_window == 0 {
            // At t = 15 every failure is 13 s old or more: nothing counts against the
            // backend (an earlier version weighed the whole previous window in, and
            // rejected about 95 % of these).
            assert_eq!(rejected, 0);
        } else {
            // At t = 10.5 the ten failures of bucket 1 still count: the first healthy RPC
            // is rejected with p = 10 / 11.
            assert!(rejected > 0);
        }
    }
}

#[test]
fn admissioncontrol_does_not_throttle_application_errors() {
    // A backend that answers NOT_FOUND took the request: only overload signals (UNAVAILABLE,
    // RESOURCE_EXHAUSTED) count against it, so requests <= accepts and p stays exactly 0.
    let sc = Scenario::new("client:\n  - admissioncontrol: {multiplier: 2.0, window: 10.0}");
    let times: Vec<f64> = (0..600).map(|i| i as f64 / 10.0).collect();
    let trace = times
        .iter()
        .enumerate()
        .map(|(i, t)| rpc(i as u64 + 1, *t).user("u").status("NOT_FOUND"));
    let report = sc.run(trace);
    assert_eq!(rejection_rate(&report, &times, 0.0, 60.0), 0.0);
    // The same load with RESOURCE_EXHAUSTED is throttled: nothing is ever accepted, so
    // p = total / (total + 1) once the first requests are counted.
    let trace = times
        .iter()
        .enumerate()
        .map(|(i, t)| rpc(i as u64 + 1, *t).user("u").status("RESOURCE_EXHAUSTED"));
    let report = sc.run(trace);
    assert!(rejection_rate(&report, &times, 10.0, 60.0) > 0.9);
}
