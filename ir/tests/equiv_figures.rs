#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The AppNet paper's worked examples, with elements written in the language.

use std::path::Path;

use weft_ir::config::{Config, Observation, Side};
use weft_ir::equiv::Checker;
use weft_ir::layout::Layout;
use weft_ir::load::{LoadedEdge, load_edge};

fn edge(chain: &str) -> LoadedEdge {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = format!(
        "protos: [{}]\nelement_paths: [{}]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: echo.Echo/Say\n{chain}",
        root.join("../examples/echo/echo.proto").display(),
        root.join("tests/elements").display(),
    );
    let cfg = Config::parse("weft.yaml", root, &text).unwrap();
    load_edge(&cfg, "frontend->echo").unwrap()
}

fn layout(c: &Checker, order: &[&str]) -> Layout {
    let names = c.names();
    let idx = |n: &str| names.iter().position(|x| x == n).unwrap();
    Layout {
        order: order.iter().map(|n| idx(n)).collect(),
        sides: c.canonical().sides.clone(),
    }
}

/// Figure 6: [logging, round-robin load balancer, firewall on `user`].
#[test]
fn figure6_logger_behind_balancer_is_weak_only_and_balancer_behind_firewall_is_not() {
    let e = edge(
        "    any:\n      - logging\n      - loadbalance: {policy: round_robin}\n      - firewall: {field: user, deny: [mallory]}\n",
    );
    let mut c = Checker::new(&e).unwrap();
    let option1 = layout(&c, &["loadbalance", "logging", "firewall"]);
    let strong = c.check(&option1, Observation::Strong);
    let weak = c.check(&option1, Observation::Weak);
    println!(
        "option1 strong: {}\noption1 weak: {}",
        strong.reason, weak.reason
    );
    assert!(!strong.equivalent);
    assert!(weak.equivalent);
    let option2 = layout(&c, &["logging", "firewall", "loadbalance"]);
    let v = c.check(&option2, Observation::Weak);
    println!("option2: {}", v.reason);
    assert!(!v.equivalent);
    assert!(
        v.reason.contains("loadbalance") && v.reason.contains("`next`"),
        "{}",
        v.reason
    );
    let same = c.canonical().clone();
    assert!(c.check(&same, Observation::Strong).equivalent);
    let _ = Side::Client;
}

/// Figure 3: client [logging, loadbalance], any [ratelimit keyed per server replica,
/// firewall].
#[test]
fn figure3_ratelimit_moves_to_the_server_side_before_the_firewall() {
    use weft_ir::config::Processor;
    use weft_ir::cost::CostTable;
    use weft_ir::plan::{PlanOptions, plan_edge};
    let e = edge(
        "    client:\n      - logging\n      - loadbalance: {policy: round_robin}\n    any:\n      - ratelimit_replica: {limit: 100}\n      - firewall: {field: user, deny: [mallory]}\n",
    );
    let plan = plan_edge(&e, &CostTable::paper(), &PlanOptions::default()).unwrap();
    let idx = |n: &str| plan.names.iter().position(|x| x == n).unwrap();
    let (rl, fw, log) = (idx("ratelimit_replica"), idx("firewall"), idx("logging"));
    let st = &plan.placement.stages;
    assert_eq!(st[rl].side, Side::Server);
    assert_eq!(st[log].processor, Processor::Lib);
    let pos = plan.placement.layout().positions();
    assert!(pos[rl] < pos[fw], "ratelimit stays before firewall");
    // The firewall follows it to the server side (it must stay behind the rate limiter,
    // whose counts change for every request that reaches it); both run in the server's lib.
    assert_eq!(st[fw], st[rl]);
    assert_eq!(st[rl].processor, Processor::Lib);
    assert_eq!(st[idx("loadbalance")].side, Side::Client);
    // Costs by hand (§4.2): fractions 1, 1 | 0.95, 0.95²; client/lib 0.5·2 + 0.1, server/lib
    // 0.5·(0.95 + 0.9025) + 0.1. Configured (all on client/lib): 0.5·(1 + 1 + 0.95 + 0.9025)
    // + 2 (the rate limiter's strong sync on the client side) + 0.1.
    assert!(
        (plan.cost - (1.1 + 0.5 * 1.8525 + 0.1)).abs() < 1e-9,
        "{}",
        plan.cost
    );
    assert!((plan.configured_cost - (0.5 * 3.8525 + 2.0 + 0.1)).abs() < 1e-9);
    assert!(
        plan.reasons
            .iter()
            .any(|r| r.contains("keyed per server replica")),
        "{:?}",
        plan.reasons
    );
}
