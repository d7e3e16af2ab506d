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

#[test]
fn an_elements_iteration_limit_comes_from_its_config() {
    // tagpairs makes n + n² iterations for n tags: 12 for three tags, 6 for two.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("../examples/echo");
    let elements = root.join("tests/elements");
    let chain = |limit: &str| {
        format!(
            "protos: [echo.proto]\nelement_paths: [{}]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any:\n      - element: tagpairs\n{limit}",
            elements.display()
        )
    };
    let trace = parse_trace(
        "{\"id\": 1, \"t\": 0, \"req\": {\"tags\": [\"x\", \"y\"]}}\n{\"id\": 2, \"t\": 1, \"req\": {\"tags\": [\"x\", \"y\", \"z\"]}}\n",
    )
    .unwrap();
    let run = |yaml: &str| {
        let cfg = Config::parse("weft.yaml", &dir, yaml).unwrap();
        let edge = load_edge(&cfg, "e").unwrap();
        simulate(
            &edge,
            &trace,
            SimOptions::default(),
            cfg.sim.weak_sync_interval,
        )
        .unwrap()
    };

    let limited = run(&chain("        max_iterations: 10\n"));
    assert_eq!(limited.results[0].outcome, Outcome::Ok, "6 iterations");
    assert_eq!(
        limited.results[1].outcome,
        Outcome::Rejected,
        "12 iterations"
    );
    assert!(
        limited.results[1]
            .message
            .contains("more than 10 foreach iterations"),
        "{}",
        limited.results[1].message
    );
    let default = run(&chain(""));
    assert!(default.results.iter().all(|r| r.outcome == Outcome::Ok));

    for bad in ["0", "-3", "lots"] {
        let yaml = chain(&format!("        max_iterations: {bad}\n"));
        let err = Config::parse("weft.yaml", &dir, &yaml)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`max_iterations` is a whole number above 0"),
            "{bad}: {err}"
        );
    }
    // A limit so high it no longer bounds anything is refused, naming the ceiling.
    let ceiling = weft_ir::eval::MAX_ITERATIONS_CEILING;
    let yaml = chain(&format!("        max_iterations: {}\n", ceiling + 1));
    let err = Config::parse("weft.yaml", &dir, &yaml)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`max_iterations` is at most 1000000000"),
        "{err}"
    );
    let yaml = chain(&format!("        max_iterations: {ceiling}\n"));
    assert!(Config::parse("weft.yaml", &dir, &yaml).is_ok());
}
