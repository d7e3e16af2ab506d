#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Differential soundness of the equivalence checker: for random chains drawn from the
//! standard library (and the test elements), random layouts the checker accepts and random
//! RPC streams, the simulator — the oracle — cannot tell the layout from the configured
//! chain. Strong: results, state, errors and channel records; weak: all but channel records.
//!
//! Every third case runs over a schema with oneofs (planner_oneof.proto), where writing one
//! member of a oneof clears the others. The element pool adds writes decided inside
//! read-modify-write lambdas, and shared state that `init` writes while the control plane
//! changes it ([`MORE_KINDS`]).
//!
//! `WEFT_SOUNDNESS_CASES` sets the number of cases (default 10 000; `make fuzz` runs
//! 100 000), `WEFT_SOUNDNESS_SEED` the first seed. A failure prints the seed, the chain, the
//! layout and the first difference.

mod planner_common;

use planner_common::*;
use weft_ir::config::Observation;
use weft_ir::equiv::Checker;
use weft_ir::sim::{SimOptions, simulate, simulate_layout};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Default, Debug)]
struct Stats {
    cases: usize,
    moved: usize,
    rejected: usize,
    rejected_distinguished: usize,
    skipped: usize,
}

#[test]
fn accepted_layouts_are_indistinguishable_in_the_simulator() {
    let cases = env_usize("WEFT_SOUNDNESS_CASES", 10_000);
    let first = env_usize("WEFT_SOUNDNESS_SEED", 1) as u64;
    let mut stats = Stats::default();
    let started = std::time::Instant::now();
    for seed in first..first + cases as u64 {
        run_case(seed, &mut stats);
    }
    let rate = 100.0 * stats.rejected_distinguished as f64 / stats.rejected.max(1) as f64;
    eprintln!(
        "soundness: {} cases in {:.1}s, {} with a layout other than the configured one, 0 counterexamples; converse: {} of {} rejected layouts distinguishable by the simulator on the same stream ({rate:.1}%); {} skipped",
        stats.cases,
        started.elapsed().as_secs_f64(),
        stats.moved,
        stats.rejected_distinguished,
        stats.rejected,
        stats.skipped
    );
}

fn run_case(seed: u64, stats: &mut Stats) {
    let mut rng = Rng::new(seed);
    let n = 2 + rng.below(5);
    let consistency = if rng.chance(0.5) { "strong" } else { "weak" };
    let obs = if consistency == "strong" {
        Observation::Strong
    } else {
        Observation::Weak
    };
    let schema = if seed.is_multiple_of(3) {
        Schema::Oneof
    } else {
        Schema::Echo
    };
    let mut kinds: Vec<&'static str> = KINDS.iter().chain(MORE_KINDS).copied().collect();
    if schema == Schema::Oneof {
        kinds.extend(ONEOF_KINDS);
    }
    let chain = gen_chain_in(&mut rng, n, &kinds, consistency, false, schema);
    let edge = match load_in(&chain.yaml, schema) {
        Ok(e) => e,
        Err(e) => panic!(
            "seed {seed}: generated chain does not load: {e}\n{}",
            chain.yaml
        ),
    };
    let mut checker = Checker::new(&edge).unwrap();
    let canonical = checker.canonical().clone();
    let flex = flexible(&edge);
    // A random walk among accepted layouts.
    let mut layout = canonical.clone();
    for _ in 0..24 {
        let next = mutate(&mut rng, &layout, &flex);
        if checker.equivalent(&next, obs) {
            layout = next;
        }
    }
    // And one random proposal for the converse sample.
    let mut proposal = canonical.clone();
    for _ in 0..1 + rng.below(3) {
        proposal = mutate(&mut rng, &proposal, &flex);
    }
    let rpcs = 10 + rng.below(30);
    let trace = gen_trace_in(&mut rng, rpcs, &edge, schema);
    let opts = SimOptions { seed };
    let shapes = shapes(&edge);
    let channels = obs == Observation::Strong;
    let reference = match simulate_layout(&edge, &trace, opts, 0.5, &canonical) {
        Ok(r) => r,
        Err(_) => {
            stats.skipped += 1;
            return;
        }
    };
    // The layout runner with the configured layout is the default simulator.
    if canonical.sides.iter().zip(&edge.elements).all(|(s, e)| {
        e.position != weft_ir::config::Position::Any
            || e.use_.constraints.side.is_some()
            || *s == weft_ir::config::Side::Client
    }) && seed.is_multiple_of(16)
    {
        let default = simulate(&edge, &trace, opts, 0.5).unwrap();
        assert_eq!(
            observe(&edge, &default, &shapes, true),
            observe(&edge, &reference, &shapes, true),
            "seed {seed}: the layout runner differs from simulate on the configured chain"
        );
    }
    let want = observe(&edge, &reference, &shapes, channels);
    stats.cases += 1;
    if layout != canonical {
        stats.moved += 1;
        let got = simulate_layout(&edge, &trace, opts, 0.5, &layout)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let got = observe(&edge, &got, &shapes, channels);
        if got != want {
            let names = checker.names().to_vec();
            let order: Vec<String> = layout
                .order
                .iter()
                .map(|&k| format!("{}({:?})", names[k], layout.sides[k]))
                .collect();
            panic!(
                "seed {seed}: the checker accepted a layout the simulator tells apart\nschema: {schema:?}\nchain:\n{}\nlayout: {}\nverdict: {}\n{}",
                chain.yaml,
                order.join(", "),
                checker.check(&layout, obs).reason,
                first_diff(&want, &got)
            );
        }
    }
    if proposal != canonical && !checker.equivalent(&proposal, obs) {
        stats.rejected += 1;
        if let Ok(r) = simulate_layout(&edge, &trace, opts, 0.5, &proposal) {
            if observe(&edge, &r, &shapes, channels) != want {
                stats.rejected_distinguished += 1;
            }
        } else {
            stats.rejected_distinguished += 1;
        }
    }
}

fn first_diff(a: &Observed, b: &Observed) -> String {
    for (x, y) in a.results.iter().zip(&b.results) {
        if x != y {
            return format!("result differs:\n  configured: {x}\n  layout:     {y}");
        }
    }
    if a.state != b.state {
        for (k, v) in &a.state {
            if b.state.get(k) != Some(v) {
                return format!(
                    "state {k}:\n  configured: {v}\n  layout:     {:?}",
                    b.state.get(k)
                );
            }
        }
        return format!(
            "state keys differ: {:?} vs {:?}",
            a.state.keys(),
            b.state.keys()
        );
    }
    if a.errors != b.errors {
        return format!("errors: {:?} vs {:?}", a.errors, b.errors);
    }
    for (k, v) in &a.channels {
        if b.channels.get(k) != Some(v) {
            return format!(
                "channel {k}:\n  configured: {v:?}\n  layout:     {:?}",
                b.channels.get(k)
            );
        }
    }
    "channels differ".into()
}
