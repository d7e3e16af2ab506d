//! Planning time for chains of 5, 8, 12 (exact search), 50 and 100 elements (annealing).
//! Recorded in docs/benchmarks.md; run with `make bench`.

use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use weft_ir::config::Config;
use weft_ir::cost::CostTable;
use weft_ir::load::{LoadedEdge, load_edge};
use weft_ir::plan::{PlanOptions, plan_edge};

/// The element mix a chain cycles through: (kind, params, list).
const MIX: &[(&str, &str, &str)] = &[
    ("logging", "", "client"),
    ("loadbalance", "{policy: round_robin}", "client"),
    ("ratelimit_replica", "{limit: 100}", "any"),
    ("firewall", "{field: user, deny: [mallory]}", "any"),
    ("metrics", "", "server"),
    ("mutation", "{field: body, prefix: x-}", "any"),
    ("cache", "{field: body}", "any"),
    ("users_strong", "{limit: 10}", "any"),
    ("tagger", "", "any"),
    ("circuitbreaker", "{max_pending: 50}", "any"),
    ("headerguard", "", "any"),
    ("stamp", "", "any"),
];

/// A chain of `n` elements cycling through [`MIX`].
pub fn chain(n: usize) -> LoadedEdge {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut lists: [Vec<String>; 3] = Default::default();
    for i in 0..n {
        let (kind, params, list) = MIX[i % MIX.len()];
        let mut e = format!("{{element: {kind}, name: {kind}_{i}");
        if !params.is_empty() {
            e.push_str(&format!(", params: {params}"));
        }
        if kind == "loadbalance" {
            e.push_str(", state: {replicas: [echo-0, echo-1]}");
        }
        e.push('}');
        let k = ["client", "any", "server"]
            .iter()
            .position(|l| *l == list)
            .unwrap_or(1);
        lists[k].push(e);
    }
    let mut yaml = format!(
        "protos: [{}]\nelement_paths: [{}]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: echo.Echo/Say\n",
        root.join("../examples/echo/echo.proto").display(),
        root.join("tests/elements").display(),
    );
    for (k, l) in ["client", "any", "server"].iter().zip(&lists) {
        if !l.is_empty() {
            yaml.push_str(&format!("    {k}:\n"));
            for e in l {
                yaml.push_str(&format!("      - {e}\n"));
            }
        }
    }
    let cfg = match Config::parse("bench.yaml", root, &yaml) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    match load_edge(&cfg, "frontend->echo") {
        Ok(e) => e,
        Err(e) => panic!("{e}"),
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    for n in [5, 8, 12, 50, 100] {
        let edge = chain(n);
        let opts = PlanOptions::default();
        g.bench_function(format!("{n} elements"), |b| {
            b.iter(|| match plan_edge(&edge, &CostTable::paper(), &opts) {
                Ok(p) => p,
                Err(e) => panic!("{e}"),
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
