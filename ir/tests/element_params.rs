#![allow(clippy::unwrap_used)]
//! The standard elements refuse parameters they cannot work with when an instance starts
//! (`require` in `init`), so the config does not load, instead of every RPC meeting the
//! consequences later: a circuit breaker of 0 rejecting everything, a misspelt policy
//! failing each RPC with INTERNAL, an empty encryption key.

use std::path::Path;

use weft_ir::config::Config;
use weft_ir::load::load_edge;
use weft_ir::sim::{SimOptions, parse_trace, simulate};

/// Loads `item` (a chain entry) on a client-side chain over `echo.Echo/Say` and runs one
/// RPC: the error, if loading or starting failed.
fn start(item: &str) -> Result<(), String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/echo");
    let yaml = format!(
        "protos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    client:\n      - {item}\n"
    );
    let cfg = Config::parse("weft.yaml", &dir, &yaml).map_err(|e| e.to_string())?;
    let edge = load_edge(&cfg, "e").map_err(|e| e.to_string())?;
    let trace = parse_trace("{\"t\": 0, \"req\": {\"user\": \"u\", \"body\": \"b\"}}\n").unwrap();
    simulate(
        &edge,
        &trace,
        SimOptions::default(),
        cfg.sim.weak_sync_interval,
    )
    .map(|_| ())
    .map_err(|e| e.to_string())
}

#[test]
fn nonsense_parameters_stop_the_chain_from_loading_with_the_elements_reason() {
    // (chain entry, what the error must say)
    let refused = [
        (
            "admissioncontrol: {multiplier: 0.5}",
            "multiplier must be at least 1.0, got 0.5",
        ),
        (
            "admissioncontrol: {window: 0.0}",
            "window must be a positive number of seconds",
        ),
        (
            "admissioncontrol: {window: -1.0}",
            "window must be a positive number of seconds",
        ),
        (
            "admissioncontrol: {buckets: 0}",
            "buckets must be at least 1, got 0",
        ),
        (
            "ratelimit: {capacity: 0.5}",
            "capacity must be at least 1.0",
        ),
        ("ratelimit: {rate: -1.0}", "rate must be a finite number"),
        ("ratelimit: {rate: .nan}", "rate must be a finite number"),
        ("ratelimit: {rate: .inf}", "rate must be a finite number"),
        (
            "bandwidthlimit: {capacity: 0.0}",
            "capacity must be a positive number of bytes",
        ),
        (
            "bandwidthlimit: {rate: -5.0}",
            "rate must be a finite number",
        ),
        (
            "circuitbreaker: {max_pending: 0}",
            "max_pending must be at least 1, got 0",
        ),
        ("fault: {prob_pass: 1.5}", "prob_pass is a probability"),
        ("fault: {prob_pass: -0.1}", "prob_pass is a probability"),
        ("encrypt: {field: body, key: ''}", "key must not be empty"),
        ("decrypt: {field: body, key: ''}", "key must not be empty"),
        (
            "loadbalance: {policy: roundrobin}",
            "policy must be round_robin, random or sticky, got 'roundrobin'",
        ),
        (
            "prequal_client: {pool_size: 0}",
            "pool_size must be at least 1, got 0",
        ),
        (
            "prequal_client: {num_choices: 0}",
            "num_choices must be at least 1",
        ),
        ("prequal_client: {q_rif: 80.0}", "q_rif is a quantile"),
        (
            "prequal_client: {max_age: -1.0}",
            "max_age must be at least 0 seconds",
        ),
        (
            "prequal_server: {alpha: 0.0}",
            "alpha must be above 0.0 and at most 1.0",
        ),
        (
            "prequal_server: {alpha: 1.5}",
            "alpha must be above 0.0 and at most 1.0",
        ),
        (
            "servicerouter_client: {key_field: user, num_shards: 0}",
            "num_shards must be at least 1, got 0",
        ),
        (
            "servicerouter_client: {key_field: user, num_choices: 0}",
            "num_choices must be at least 1",
        ),
        (
            "servicerouter_client: {key_field: user, staleness: -2.0}",
            "staleness must be at least 0 seconds",
        ),
        // The checker refuses it already: the sticky arm reads the field `key_field` names.
        ("loadbalance: {policy: sticky}", "empty field path"),
    ];
    for (item, reason) in refused {
        let element = item.split(':').next().unwrap();
        let err = start(item).expect_err(item);
        assert!(err.contains(reason), "{item}: {err}");
        assert!(
            err.contains(&format!("`{element}`")),
            "{item}: names no element: {err}"
        );
    }
}

#[test]
fn sensible_parameters_at_the_edges_of_the_ranges_still_load() {
    for item in [
        "admissioncontrol: {multiplier: 1.0, window: 0.001, buckets: 1}",
        "ratelimit: {capacity: 1.0, rate: 0.0}",
        "ratelimit: {capacity: .inf, rate: 5.0}",
        "bandwidthlimit: {capacity: 1.0, rate: 0.0}",
        "circuitbreaker: {max_pending: 1}",
        "fault: {prob_pass: 0.0}",
        "fault: {prob_pass: 1.0}",
        "encrypt: {field: body, key: k}",
        "loadbalance: {policy: random}",
        "loadbalance: {policy: sticky, key_field: user}",
        "prequal_client: {num_choices: 1, q_rif: 1.0, pool_size: 1, max_age: 0.0}",
        "prequal_server: {alpha: 1.0}",
        "servicerouter_client: {key_field: user, num_shards: 1, num_choices: 1, staleness: 0.0}",
    ] {
        assert_eq!(start(item), Ok(()), "{item}");
    }
}
