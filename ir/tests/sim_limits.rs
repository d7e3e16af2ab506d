#![allow(clippy::unwrap_used)]
//! The simulator stays fast and well-defined on extreme but valid traces.

use std::path::Path;
use std::time::{Duration, Instant};

use weft_ir::config::Config;
use weft_ir::load::load_edge;
use weft_ir::sim::{Outcome, SimOptions, parse_trace, simulate};

#[test]
fn a_jump_of_years_in_virtual_time_costs_one_weak_merge() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/echo");
    let yaml = "protos: [echo.proto]\nsim: {weak_sync_interval: 0.000001}\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any: [ratelimit]\n";
    let cfg = Config::parse("weft.yaml", &dir, yaml).unwrap();
    let edge = load_edge(&cfg, "e").unwrap();
    let trace = parse_trace("{\"t\": 0}\n{\"t\": 1e9}\n").unwrap();
    let start = Instant::now();
    let report = simulate(
        &edge,
        &trace,
        SimOptions::default(),
        cfg.sim.weak_sync_interval,
    )
    .unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    assert!(report.results.iter().all(|r| r.outcome == Outcome::Ok));
}
