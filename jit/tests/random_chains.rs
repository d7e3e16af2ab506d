#![allow(clippy::unwrap_used)]
//! Property: for random chains of standard elements (split between the client and server
//! sides, so segments and routing vary) and random streams of RPCs (overlapping, failing,
//! hostile users), the fused and unfused JIT produce exactly the interpreter's simulation:
//! outcomes, final state, counters and channel records.

mod differential;

use std::path::PathBuf;

use proptest::prelude::*;
use serde_json::json;
use weft_ir::config::Config;
use weft_ir::load::load_edge;
use weft_ir::sim::{SimOptions, parse_trace};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// An element entry (without the name), as the config writes it.
const MENU: &[&str] = &[
    "element: ratelimit\n  params: {capacity: 3.0, rate: 2.0}",
    "element: firewall\n  params: {field: user, deny: [mallory]}",
    "element: logging",
    "element: metrics",
    "element: fault\n  params: {prob_pass: 0.7}",
    "element: cache\n  params: {field: body}",
    "element: admissioncontrol",
    "element: bandwidthlimit\n  params: {capacity: 60.0, rate: 30.0}",
    "element: circuitbreaker\n  params: {max_pending: 2}",
    "element: mutation\n  params: {field: body}",
    "element: encrypt\n  params: {field: body, key: k1}",
    "element: decrypt\n  params: {field: body, key: k1}",
    "element: loadbalance\n  params: {policy: random}\n  state: {replicas: [r1, r2]}",
    "element: loadbalance\n  params: {policy: round_robin}\n  state: {replicas: [r1, r2, r3]}",
];

fn config(rng: &mut Rng) -> String {
    let n = 1 + rng.below(6);
    let mut client = String::new();
    let mut server = String::new();
    for i in 0..n {
        let entry = MENU[rng.below(MENU.len())].replace("\n  ", "\n        ");
        let item = format!("      - {entry}\n        name: e{i}\n");
        if rng.below(3) == 0 {
            server.push_str(&item);
        } else {
            client.push_str(&item);
        }
    }
    let mut yaml = String::from(
        "protos: [scenario.proto]\nedges:\n  app->svc:\n    from: app\n    to: svc\n    method: weft.scenario.Svc/Call\n",
    );
    if !client.is_empty() {
        yaml.push_str("    client:\n");
        yaml.push_str(&client);
    }
    if !server.is_empty() {
        yaml.push_str("    server:\n");
        yaml.push_str(&server);
    }
    yaml
}

fn trace(rng: &mut Rng) -> String {
    let users = ["alice", "bob", "mallory", ""];
    let bodies = ["hi", "hello", "", "a longer body that costs bandwidth"];
    let mut t = 0.0;
    let mut lines = Vec::new();
    for id in 1..=(5 + rng.below(25)) {
        t += rng.below(800) as f64 / 1000.0;
        let src = ["c1", "c2"][rng.below(2)];
        let (user, body, resp) = (
            users[rng.below(4)],
            bodies[rng.below(4)],
            bodies[rng.below(4)],
        );
        let priority = rng.below(5);
        let mut l = json!({
            "id": id, "t": t, "method": "weft.scenario.Svc/Call",
            "src": src,
            "req": {"user": user, "body": body, "priority": priority},
            "resp": {"body": resp, "served_by": "svc-0"},
        });
        if rng.below(3) == 0 {
            l["t_resp"] = json!(t + rng.below(2000) as f64 / 1000.0);
        }
        if rng.below(6) == 0 {
            let status = ["UNAVAILABLE", "INTERNAL", "RESOURCE_EXHAUSTED"][rng.below(3)];
            l["status"] = json!(status);
        }
        lines.push(l.to_string());
    }
    lines.join("\n")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("WEFT_CHAIN_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64)
    ))]

    #[test]
    fn random_chains_agree_on_random_streams(seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let yaml = config(&mut rng);
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ir/tests/protos");
        let cfg = Config::parse("chain.yaml", &dir, &yaml).unwrap();
        let edge = load_edge(&cfg, "app->svc").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let lines = parse_trace(&trace(&mut rng)).unwrap();
        let sim_seed = rng.next();
        differential::simulate(&edge, &lines, SimOptions { seed: sim_seed }, 0.5).unwrap();
    }
}
