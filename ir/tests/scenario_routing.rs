#![allow(clippy::unwrap_used)]
//! Scenarios for the standard routing elements: loadbalance, the servicerouter pair and the
//! prequal pair. Replica lists, load reports and probes are control-plane state, given in the
//! chain config (`state:`) or as control lines in the trace.
//!
//! Every expected value below is derived from the element's source (elements/*.weft) and
//! LANGUAGE.md, not copied from a run.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use serde_json::json;
use weft_hostcalls::{Code, MsgKind, Value, builtins};
use weft_ir::sim::SimReport;

fn dsts(report: &SimReport) -> Vec<String> {
    report
        .results
        .iter()
        .map(|r| {
            assert_ok(r);
            r.dst
                .clone()
                .unwrap_or_else(|| panic!("rpc {} not routed", r.id))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// loadbalance

#[test]
fn loadbalance_round_robin_cycles_over_configured_replicas() {
    let sc = Scenario::new(
        "client:
  - element: loadbalance
    params: {policy: round_robin}
    state: {replicas: [a, b, c]}
server:
  - metrics",
    );
    let report = sc.run((1..=7).map(|i| rpc(i, i as f64)));
    // In turn, from a random place (client replicas started together do not all start at
    // the first replica).
    let start = first_place(&report, &["a", "b", "c"]);
    assert_eq!(dsts(&report), in_turn(&["a", "b", "c"], start, 7));
    // The `dst` header is the route, not something the server sees as metadata.
    assert!(report.results.iter().all(|r| r.server_headers.is_empty()));
    assert_eq!(
        state_int(&report, "loadbalance@client", "next"),
        (start as i64 + 7) % 3
    );
    // Server-side elements run once per routed replica.
    for (i, replica) in ["a", "b", "c"].into_iter().enumerate() {
        let visits = (0..7).filter(|k| (start + k) % 3 == i).count() as i64;
        assert_eq!(
            state_int(&report, &format!("metrics@{replica}"), "total"),
            visits
        );
    }
    assert!(!has_instance(&report, "metrics@svc"));
}

/// The load report header `key` of each RPC's response as the server part of a pair sent
/// it, by trace id: `logging`, between the two parts (`any:`), records the responses
/// before the client part reads the report and removes it.
fn reported(report: &SimReport, key: &str) -> BTreeMap<u64, String> {
    records(report, "logging", "log")
        .iter()
        .filter(|r| msg(&r.value).kind == MsgKind::Response)
        .map(|r| {
            let v = msg(&r.value).headers.get(key);
            (r.rpc_id, v.cloned().unwrap_or_default())
        })
        .collect()
}

/// Where in `list` the first RPC of `report` was routed.
fn first_place(report: &SimReport, list: &[&str]) -> usize {
    let first = dsts(report)[0].clone();
    list.iter()
        .position(|r| *r == first)
        .expect("routed to a listed replica")
}

/// `n` turns over `list`, from index `start`.
fn in_turn(list: &[&str], start: usize, n: usize) -> Vec<String> {
    (0..n)
        .map(|k| list[(start + k) % list.len()].to_owned())
        .collect()
}

#[test]
fn loadbalance_round_robin_starts_client_replicas_at_different_places() {
    // A review: three client replicas sending at once all went to one replica, then all
    // to the next. From random places, 20 client replicas do not all start alike.
    let sc = Scenario::new(
        "client:
  - element: loadbalance
    params: {policy: round_robin}
    state: {replicas: [a, b, c]}",
    );
    let report = sc.run((1..=20).map(|i| rpc(i, 1.0).src(&format!("app-{i}"))));
    let firsts: BTreeSet<String> = dsts(&report).into_iter().collect();
    assert!(
        firsts.len() > 1,
        "every client replica started at {firsts:?}"
    );
}

#[test]
fn loadbalance_round_robin_follows_control_plane_writes() {
    let sc = Scenario::new("client:\n  - loadbalance");
    let mut trace = vec![control(
        0.0,
        "loadbalance",
        "replicas",
        json!(["a", "b", "c"]),
    )];
    trace.extend((1..=4).map(|i| rpc(i, i as f64)));
    // The control plane publishes a new list at t = 10: b is gone, d is new.
    trace.push(control(
        10.0,
        "loadbalance",
        "replicas",
        json!(["a", "c", "d"]),
    ));
    trace.extend((5..=8).map(|i| rpc(i, i as f64 + 10.0)));
    let report = sc.run(trace);
    // Four RPCs in turn over the first list; `next` then indexes the new list where it is.
    let start = first_place(&report, &["a", "b", "c"]);
    let mut expected = in_turn(&["a", "b", "c"], start, 4);
    expected.extend(in_turn(&["a", "c", "d"], (start + 4) % 3, 4));
    assert_eq!(dsts(&report), expected);
    assert_eq!(
        state(&report, "loadbalance@client", "replicas"),
        &strs(&["a", "c", "d"])
    );
}

#[test]
fn loadbalance_control_plane_list_replaces_the_configured_one() {
    let sc = Scenario::new(
        "client:
  - element: loadbalance
    state: {replicas: [a, b, c]}",
    );
    let mut trace: Vec<Line> = (1..=2).map(|i| rpc(i, i as f64)).collect();
    trace.push(control(5.0, "loadbalance", "replicas", json!(["x", "y"])));
    trace.extend((3..=6).map(|i| rpc(i, i as f64 + 5.0)));
    let report = sc.run(trace);
    // `next` is start + 2 when the list changes, taken modulo the new list's length.
    let start = first_place(&report, &["a", "b", "c"]);
    let mut expected = in_turn(&["a", "b", "c"], start, 2);
    expected.extend(in_turn(&["x", "y"], ((start + 2) % 3) % 2, 4));
    assert_eq!(dsts(&report), expected);
}

#[test]
fn loadbalance_random_spreads_over_every_replica() {
    let sc = Scenario::new(
        "client:
  - element: loadbalance
    params: {policy: random}
    state: {replicas: [a, b, c]}",
    );
    let n = 3000;
    let report = sc.run((1..=n).map(|i| rpc(i, i as f64 * 0.01)));
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for d in dsts(&report) {
        *by.entry(d).or_default() += 1;
    }
    assert_eq!(by.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
    // Binomial(3000, 1/3): mean 1000, σ ≈ 25.8; allow 3σ.
    let sigma = (n as f64 / 3.0 * 2.0 / 3.0).sqrt();
    for (d, k) in &by {
        assert!((*k as f64 - 1000.0).abs() <= 3.0 * sigma, "{d}: {k} of {n}");
    }
}

#[test]
fn loadbalance_sticky_keeps_a_key_on_its_replica_until_it_leaves() {
    let sc = Scenario::new(
        "client:
  - element: loadbalance
    params: {policy: sticky, key_field: user}",
    );
    let users: Vec<String> = (0..20).map(|i| format!("user{i}")).collect();
    let mut trace = vec![control(
        0.0,
        "loadbalance",
        "replicas",
        json!(["a", "b", "c"]),
    )];
    let mut id = 0;
    let mut phase = |start: f64, trace: &mut Vec<Line>| {
        let mut ids = Vec::new();
        // Each user three times, interleaved with the others.
        for round in 0..3 {
            for (i, u) in users.iter().enumerate() {
                id += 1;
                trace.push(rpc(id, start + round as f64 + i as f64 * 0.01).user(u));
                ids.push((id, u.clone()));
            }
        }
        ids
    };
    let p1 = phase(1.0, &mut trace);
    // b leaves the list.
    trace.push(control(10.0, "loadbalance", "replicas", json!(["a", "c"])));
    let p2 = phase(11.0, &mut trace);
    // b comes back: keys stay where they are now.
    trace.push(control(
        20.0,
        "loadbalance",
        "replicas",
        json!(["a", "b", "c"]),
    ));
    let p3 = phase(21.0, &mut trace);
    let report = sc.run(trace);

    let placement = |ids: &[(u64, String)]| {
        let mut m: BTreeMap<String, String> = BTreeMap::new();
        for (id, u) in ids {
            let r = result(&report, *id);
            assert_ok(r);
            let d = r.dst.clone().unwrap();
            // Same key, same replica, every time.
            assert_eq!(m.entry(u.clone()).or_insert_with(|| d.clone()), &d, "{u}");
        }
        m
    };
    let first = placement(&p1);
    let second = placement(&p2);
    let third = placement(&p3);
    let used: BTreeSet<&String> = first.values().collect();
    assert_eq!(
        used.len(),
        3,
        "20 keys should use all of a, b, c: {first:?}"
    );
    for u in &users {
        if first[u] == "b" {
            // Re-picked among the remaining replicas.
            assert!(
                ["a", "c"].contains(&second[u].as_str()),
                "{u}: {}",
                second[u]
            );
        } else {
            assert_eq!(second[u], first[u], "{u} moved although its replica stayed");
        }
        assert_eq!(third[u], second[u], "{u} moved when b came back");
    }
    // The sticky table records the current choice of every key.
    let expected: Value = Value::Map(third.iter().map(|(u, d)| (s(u), s(d))).collect());
    assert_eq!(state(&report, "loadbalance@client", "sticky"), &expected);
}

#[test]
fn loadbalance_without_replicas_is_unavailable() {
    let sc = Scenario::new("client:\n  - loadbalance: {policy: random}\n  - metrics");
    let report = sc.run([rpc(1, 0.0).user("u")]);
    assert_rejected(
        result(&report, 1),
        Code::Unavailable,
        "loadbalance: no replicas for svc",
    );
    assert!(!has_instance(&report, "metrics@client"));
    // An unknown policy stops the chain from loading (tests/element_params.rs).
}

// ---------------------------------------------------------------------------------------------
// servicerouter_client / servicerouter_server

const SR_PAIR: &str = "pair:
  - - element: servicerouter_client
      name: src
      params: {key_field: user, num_shards: NUM_SHARDS, num_choices: 2, staleness: 1.0}
      STATE
    - element: servicerouter_server
      name: srs
any:
  - logging";

fn sr(num_shards: u32, state: &str) -> Scenario {
    let chain = SR_PAIR
        .replace("NUM_SHARDS", &num_shards.to_string())
        .replace("STATE", state);
    Scenario::new(&chain)
}

#[test]
fn servicerouter_routes_within_the_request_shard() {
    let sc = sr(2, "state: {shards: {0: [s0a, s0b], 1: [s1a, s1b]}}");
    let users: Vec<String> = (0..40).map(|i| format!("user{i}")).collect();
    let trace: Vec<Line> = users
        .iter()
        .enumerate()
        .flat_map(|(i, u)| {
            [
                rpc(2 * i as u64 + 1, i as f64).user(u),
                rpc(2 * i as u64 + 2, i as f64 + 0.5).user(u),
            ]
        })
        .collect();
    let report = sc.run(trace);
    let loads = reported(&report, "sr-load");
    let mut shards_used = BTreeSet::new();
    for (i, u) in users.iter().enumerate() {
        // shard = hash(user) % num_shards, with the host's stable hash.
        let shard = builtins::hash(&Value::str(u.as_str())) % 2;
        shards_used.insert(shard);
        for id in [2 * i as u64 + 1, 2 * i as u64 + 2] {
            let r = result(&report, id);
            assert_ok(r);
            let d = r.dst.as_deref().unwrap();
            let allowed: [&str; 2] = if shard == 0 {
                ["s0a", "s0b"]
            } else {
                ["s1a", "s1b"]
            };
            assert!(allowed.contains(&d), "{u} (shard {shard}) went to {d}");
            // The server part reports its requests in flight after this one: none. The
            // client part takes the report out of the response.
            assert_eq!(loads[&id], "0");
            assert!(!r.client_headers.contains_key("sr-load"), "{r:?}");
        }
    }
    assert_eq!(shards_used.len(), 2);
}

#[test]
fn servicerouter_prefers_the_lower_fresh_load() {
    // One shard, two replicas, both sampled every time (num_choices 2).
    let sc = sr(1, "state: {shards: {0: [a, b]}}");
    let load =
        |t: f64, r: &str, l: i64, at: f64| control_key(t, "src", "load", json!(r), json!([l, at]));
    let trace = vec![
        load(0.0, "a", 5, 0.0),
        load(0.0, "b", 2, 0.0),
        // 2 < 5.
        rpc(1, 0.5).user("u").t_resp(100.0),
        load(0.6, "b", 7, 0.6),
        // 5 < 7.
        rpc(2, 0.7).user("u").t_resp(100.0),
        load(0.9, "b", 3, 0.9),
        // a's report is 1.5 s old, staler than 1 s: it counts as 0, below b's fresh 3
        // (with the stale 5 counted, b would win).
        rpc(3, 1.5).user("u").t_resp(100.0),
        // Both reports are stale now: a tie at 0, so either may be picked.
        rpc(4, 2.0).user("u").t_resp(100.0),
    ];
    let report = sc.run(trace);
    let d = dsts(&report);
    assert_eq!(&d[..3], ["b", "a", "a"]);
    assert!(["a", "b"].contains(&d[3].as_str()));

    // Every RPC answers at t = 100 in request order; the server part of each replica
    // decrements its count and reports what is left in flight.
    let loads = reported(&report, "sr-load");
    let mut in_flight: BTreeMap<&str, i64> = BTreeMap::new();
    for x in &d {
        *in_flight.entry(x.as_str()).or_default() += 1;
    }
    for r in &report.results {
        let n = in_flight.get_mut(r.dst.as_deref().unwrap()).unwrap();
        *n -= 1;
        assert_eq!(
            loads[&r.id.as_u64().unwrap()],
            n.to_string(),
            "rpc {}",
            r.id
        );
    }
    // Both replicas got RPCs, so the client's last report of each is its final answer at
    // t = 100, with nothing left in flight.
    let expected = Value::Map(
        ["a", "b"]
            .iter()
            .map(|x| (s(x), Value::pair(Value::Int(0), Value::Instant(100.0))))
            .collect(),
    );
    assert_eq!(state(&report, "src@client", "load"), &expected);
    for x in ["a", "b"] {
        assert_eq!(state_int(&report, &format!("srs@{x}"), "in_flight"), 0);
    }
}

#[test]
fn servicerouter_learns_load_from_the_server_part() {
    let sc = sr(1, "state: {shards: {0: [a, b]}}");
    let trace = vec![
        control_key(0.0, "src", "load", json!("a"), json!([10, 0.0])),
        control_key(0.0, "src", "load", json!("b"), json!([10, 0.0])),
        // A tie: goes to either, call it X. Its answer at t = 0.5 reports sr-load 0...
        rpc(1, 0.1).user("u").t_resp(0.5),
        // ...so X (load 0) beats the other (a fresh 10), twice.
        rpc(2, 0.6).user("u").t_resp(0.8),
        rpc(3, 0.7).user("u").t_resp(0.8),
    ];
    let report = sc.run(trace);
    let d = dsts(&report);
    assert_eq!(d[1], d[0]);
    assert_eq!(d[2], d[0]);
    // 2 and 3 overlap on X: 2's answer leaves 3 in flight, 3's leaves none.
    let loads = reported(&report, "sr-load");
    assert_eq!((loads[&2].as_str(), loads[&3].as_str()), ("1", "0"));
}

#[test]
fn servicerouter_without_the_shard_is_unavailable() {
    let sc = sr(1, "state: {shards: {1: [a]}}");
    let report = sc.run([rpc(1, 0.0).user("u")]);
    assert_rejected(
        result(&report, 1),
        Code::Unavailable,
        "servicerouter: no replicas for shard 0",
    );
    let sc = sr(1, "state: {shards: {0: []}}");
    let report = sc.run([rpc(1, 0.0).user("u")]);
    assert_rejected(
        result(&report, 1),
        Code::Unavailable,
        "servicerouter: shard 0 has no replicas",
    );
}

// ---------------------------------------------------------------------------------------------
// prequal_client / prequal_server

/// Reports stay fresh for `max_age` seconds.
fn prequal(num_choices: u32, q_rif: f64, max_age: f64, replicas: &str) -> Scenario {
    Scenario::new(&format!(
        "pair:
  - - element: prequal_client
      name: pqc
      params: {{num_choices: {num_choices}, q_rif: {q_rif}, pool_size: 16, max_age: {max_age:?}}}
      state: {{replicas: [{replicas}]}}
    - element: prequal_server
      name: pqs
      params: {{alpha: 0.2}}
any:
  - logging"
    ))
}

/// A probe as the client part keeps it: the report and when it came.
fn probe(rif: i64, latency: f64, at: f64) -> Value {
    Value::pair(
        Value::pair(Value::Int(rif), Value::Float(latency)),
        Value::Instant(at),
    )
}

#[test]
fn prequal_prefers_the_fastest_cold_replica() {
    // About the choice: no report grows old here.
    let sc = prequal(3, 0.5, 10.0, "a, b, c");
    let trace = vec![
        control(
            0.0,
            "pqc",
            "probes",
            json!({"a": [[10, 0.05], 0.0], "b": [[1, 0.2], 0.0], "c": [[2, 0.1], 0.0]}),
        ),
        control(0.0, "pqc", "pool", json!([1.0, 2.0, 10.0])),
        rpc(1, 1.0).t_resp(1.5),
        rpc(2, 2.0).t_resp(2.25),
    ];
    let report = sc.run(trace);
    // Threshold = quantile([1, 2, 10], 0.5) = 2: a (RIF 10) is hot despite the lowest latency;
    // b (1) and c (2, not above 2) are cold, and c is the faster of them.
    let d = dsts(&report);
    assert_eq!(d[0], "c");
    // c's server part answered at 1.5: RIF 0 after it, latency 0.2 × 0.5 + 0.8 × 0 = 0.1,
    // which the client stored as c's probe and pool[0]. Threshold is still
    // quantile([0, 2, 10], 0.5) = 2 and c (0, 0.1) still beats b (1, 0.2).
    assert_eq!(d[1], "c");
    let (rif, latency) = (
        reported(&report, "prequal-rif"),
        reported(&report, "prequal-latency"),
    );
    assert_eq!((rif[&1].as_str(), latency[&1].as_str()), ("0", "0.1"));
    let l2: f64 = 0.2 * (2.25 - 2.0) + (1.0 - 0.2) * (0.2 * (1.5 - 1.0) + (1.0 - 0.2) * 0.0);
    assert_eq!(latency[&2], format!("{l2:?}"));
    // The server part's headers are for the client part: neither the service nor the
    // calling application sees them.
    let r1 = result(&report, 1);
    assert!(r1.server_headers.is_empty());
    assert!(r1.client_headers.is_empty(), "{r1:?}");

    let probes = state(&report, "pqc@client", "probes");
    let Value::Map(p) = probes else { panic!() };
    assert_eq!(p[&s("c")], probe(0, l2, 2.25));
    assert_eq!(p[&s("a")], probe(10, 0.05, 0.0));
    assert_eq!(
        state(&report, "pqc@client", "pool"),
        &Value::Vec(vec![
            Value::Float(0.0),
            Value::Float(0.0),
            Value::Float(10.0)
        ])
    );
    assert_eq!(state_int(&report, "pqc@client", "slot"), 2);
}

#[test]
fn prequal_all_hot_picks_the_fewest_requests_in_flight() {
    let sc = prequal(3, 0.5, 10.0, "a, b, c");
    let trace = vec![
        control(
            0.0,
            "pqc",
            "probes",
            json!({"a": [[5, 0.01], 0.0], "b": [[3, 0.3], 0.0], "c": [[7, 0.02], 0.0]}),
        ),
        // Threshold quantile([0, 0, 1], 0.5) = 0: every sampled RIF is above it.
        control(0.0, "pqc", "pool", json!([0.0, 0.0, 1.0])),
        rpc(1, 1.0).t_resp(2.0),
    ];
    let report = sc.run(trace);
    // All hot: fewest in flight wins (b), however slow.
    assert_eq!(dsts(&report), ["b"]);
}

#[test]
fn prequal_chooses_only_among_the_sampled_replicas() {
    // Two of three sampled per request. c is the worst (hot) and can never win; a beats b
    // whenever both are sampled, so a wins when sampled (probability 2/3) and b otherwise.
    // The requests span 6 s: the probes must not grow old meanwhile.
    let sc = prequal(2, 0.5, 10.0, "a, b, c");
    let n = 600u64;
    let mut trace = vec![
        control(
            0.0,
            "pqc",
            "probes",
            json!({"a": [[1, 0.01], 0.0], "b": [[1, 0.02], 0.0], "c": [[9, 0.001], 0.0]}),
        ),
        control(0.0, "pqc", "pool", json!([1.0, 1.0, 9.0])),
    ];
    // Answers after every request, so the probes stay as injected while choosing.
    trace.extend((1..=n).map(|i| rpc(i, i as f64 * 0.01).t_resp(1000.0)));
    let report = sc.run(trace);
    let d = dsts(&report);
    assert!(d.iter().all(|x| x != "c"));
    let a = d.iter().filter(|x| *x == "a").count() as f64;
    let sigma = (n as f64 * 2.0 / 3.0 / 3.0).sqrt();
    assert!(
        (a - n as f64 * 2.0 / 3.0).abs() <= 3.0 * sigma,
        "{a} of {n}"
    );
}

#[test]
fn prequal_server_reports_in_flight_and_smoothed_latency() {
    let sc = prequal(3, 0.8, 1.0, "solo");
    let trace = vec![
        rpc(1, 0.0).t_resp(1.0),
        rpc(2, 0.5).t_resp(2.0),
        rpc(3, 3.0).t_resp(3.25),
    ];
    let report = sc.run(trace);
    assert_eq!(dsts(&report), ["solo", "solo", "solo"]);
    let alpha = 0.2;
    let l1: f64 = alpha * 1.0 + (1.0 - alpha) * 0.0;
    let l2: f64 = alpha * 1.5 + (1.0 - alpha) * l1;
    let l3: f64 = alpha * 0.25 + (1.0 - alpha) * l2;
    let (rif, latency) = (
        reported(&report, "prequal-rif"),
        reported(&report, "prequal-latency"),
    );
    let headers: Vec<(String, String)> = (1..=3)
        .map(|id| (rif[&id].clone(), latency[&id].clone()))
        .collect();
    assert_eq!(
        headers,
        [
            // 1 answers while 2 is still in flight.
            ("1".to_owned(), format!("{l1:?}")),
            ("0".to_owned(), format!("{l2:?}")),
            ("0".to_owned(), format!("{l3:?}")),
        ]
    );
    assert_eq!(state_int(&report, "pqs@solo", "in_flight"), 0);
    assert_eq!(state_float(&report, "pqs@solo", "latency"), l3);
    // The client recorded each report: the last probe of solo, and the RIFs in the pool.
    let Value::Map(p) = state(&report, "pqc@client", "probes") else {
        panic!()
    };
    assert_eq!(p[&s("solo")], probe(0, l3, 3.25));
    assert_eq!(
        state(&report, "pqc@client", "pool"),
        &Value::Vec(vec![
            Value::Float(1.0),
            Value::Float(0.0),
            Value::Float(0.0)
        ])
    );
}

/// A replica that reported a high latency loses to a faster cold one for as long as its
/// report is fresh; once the report is older than `max_age` it counts as none, so the
/// replica is picked again and reports anew. Kept for ever, the report shut it out for good
/// (it never got the request that would have refreshed it).
#[test]
fn prequal_probes_a_replica_again_once_its_report_is_older_than_max_age() {
    // b reported a latency of 0.05 s at t = 0; a has no report, so it wins the first RPC
    // (latency 0), and answers it slowly: 0.5 s, which its server part reports as
    // 0.2 × 0.5 = 0.1 s at t = 0.5. RPCs 2 to 9 (t = 0.625 … 1.5, answered in 1/16 s) go to
    // b, whose reports (at most 0.0625 s) beat a's 0.1 while a's is at most 1 s old. At
    // t = 1.625 a's report is 1.125 s old: a counts as unreported and gets RPC 10.
    let trace = || {
        let mut t = vec![
            control(0.0, "pqc", "probes", json!({"b": [[0, 0.05], 0.0]})),
            rpc(1, 0.0).t_resp(0.5),
        ];
        for k in 1..=9u64 {
            let at = 0.5 + 0.125 * k as f64;
            t.push(rpc(k + 1, at).t_resp(at + 0.0625));
        }
        t
    };
    let report = prequal(2, 0.5, 1.0, "a, b").run(trace());
    let mut expected = vec!["a"];
    expected.extend(["b"; 8]);
    expected.push("a");
    assert_eq!(dsts(&report), expected);
    // a answered RPC 10 at 1.6875 s and reported again: its latency average moved from
    // the slow answer towards the fast one.
    let Value::Map(p) = state(&report, "pqc@client", "probes") else {
        panic!()
    };
    let l_a: f64 = 0.2 * 0.0625 + (1.0 - 0.2) * (0.2 * 0.5);
    assert_eq!(p[&s("a")], probe(0, l_a, 1.6875));

    // With reports good for 10 s, a's slow one still counts at t = 1.625.
    let report = prequal(2, 0.5, 10.0, "a, b").run(trace());
    let mut expected = vec!["a"];
    expected.extend(["b"; 9]);
    assert_eq!(dsts(&report), expected);
}

/// The load reports are for the client part of each pair: it reads them and takes them out
/// of the response, so the calling application gets the server's own headers and nothing
/// else (they reached it, and looked like the service's metadata).
#[test]
fn the_client_parts_remove_the_load_reports_from_the_response() {
    let answer = |id| {
        rpc(id, id as f64)
            .user("u")
            .t_resp(id as f64 + 0.5)
            .resp_header("x-app", "kept")
    };
    for (sc, keys) in [
        (
            prequal(1, 0.5, 1.0, "a"),
            &["prequal-latency", "prequal-rif"][..],
        ),
        (sr(1, "state: {shards: {0: [a]}}"), &["sr-load"][..]),
    ] {
        let report = sc.run([answer(1), answer(2)]);
        for id in [1, 2] {
            let r = result(&report, id);
            assert_ok(r);
            let got: Vec<(&str, &str)> = r
                .client_headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            assert_eq!(got, [("x-app", "kept")], "{keys:?}");
            // The server part did report, between the two parts.
            for k in keys {
                assert!(!reported(&report, k)[&id].is_empty(), "{k}");
            }
        }
    }
}

#[test]
fn prequal_without_replicas_is_unavailable() {
    let sc = Scenario::new("pair:\n  - [prequal_client, prequal_server]");
    let report = sc.run([rpc(1, 0.0)]);
    assert_rejected(
        result(&report, 1),
        Code::Unavailable,
        "prequal: no replicas",
    );
}

/// A `dst` set inside a read-modify-write lambda routes as one set anywhere else: the
/// server-side element after it runs on the replica it names. The simulator looked for
/// header writes only in `match` and `foreach` bodies, kept the segment's first replica
/// for the next element, and so disagreed with the checker (found by a review).
#[test]
fn a_route_set_inside_a_read_modify_write_picks_the_next_elements_replica() {
    let sc = Scenario::new("server:\n  - rmwroute\n  - local_counter");
    let report = sc.run([rpc(1, 1.0).user("b"), rpc(2, 2.0).user("a")]);
    assert_eq!(report.results[1].dst.as_deref(), Some("svc-1"));
    assert_eq!(state_int(&report, "local_counter@svc", "count"), 1);
    assert_eq!(state_int(&report, "local_counter@svc-1", "count"), 1);
}

#[test]
fn loadbalance_sticky_picks_the_same_replica_for_a_key_on_every_client_replica() {
    // A review: alice went to echo-0, echo-1, echo-0 and echo-3 from four frontends, each
    // of which picked at random.
    let sc = Scenario::new(
        "client:
  - element: loadbalance
    params: {policy: sticky, key_field: user}
    state: {replicas: [a, b, c, d]}",
    );
    let users = ["alice", "bob", "carol", "dave", "erin"];
    let trace = users.iter().enumerate().flat_map(|(u, user)| {
        (0..4).map(move |f| {
            rpc((u * 4 + f + 1) as u64, (u * 4 + f) as f64)
                .src(&format!("app-{f}"))
                .user(user)
        })
    });
    let report = sc.run(trace);
    let dsts = dsts(&report);
    for (u, user) in users.iter().enumerate() {
        let picks: BTreeSet<&String> = dsts[u * 4..u * 4 + 4].iter().collect();
        assert_eq!(picks.len(), 1, "{user}: {picks:?}");
    }
}
