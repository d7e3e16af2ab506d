//! Generated meshes at the size of a production config, for docs/benchmarks.md ("At the size
//! of a mesh"). The mesh's shape is `SERVICES METHODS EDGES CHAIN hub|spread`
//! (`tests/common/mesh.rs`).
//!
//! - `mesh write DIR SHAPE…`: writes the protos and `weft.yaml` into DIR, for `weft check
//!   --config` and `weft plan`.
//! - `mesh open DIR SERVICE`: opens an engine for `svcSERVICE` on DIR's config, reloads it
//!   with a changed config five times, and prints the times and the memory each step took
//!   (resident set, from /proc).
//! - `mesh lookup DIR`: ns per client request through `svc0`'s engine, for the first and the
//!   last edge's method, on a config written with `hub` (every edge leaves `svc0`).
#![allow(clippy::unwrap_used)]

#[path = "../tests/common/mesh.rs"]
mod mesh;

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use weft_runtime::{Engine, EngineOptions, Metadata, Side, engine::recycle};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn options() -> EngineOptions {
    EngineOptions {
        watch_interval: None,
        ..EngineOptions::default()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("write") => {
            let shape = mesh::Mesh {
                services: args[2].parse().unwrap(),
                methods: args[3].parse().unwrap(),
                edges: args[4].parse().unwrap(),
                chain: args[5].parse().unwrap(),
                hub: args[6] == "hub",
            };
            std::fs::create_dir_all(&args[1]).unwrap();
            let path = shape.write(Path::new(&args[1]));
            println!("{}", path.display());
        }
        Some("open") => {
            let dir = Path::new(&args[1]);
            let service = format!("svc{}", args[2]);
            let yaml = std::fs::read_to_string(dir.join("weft.yaml")).unwrap();
            let before = rss_kib();
            let t = Instant::now();
            let engine = Engine::open(dir.join("weft.yaml"), &service, options()).unwrap();
            let open = t.elapsed();
            let one = rss_kib();
            let mut reloads = Vec::new();
            for n in 0..5 {
                // A comment changes the digest, so each reload builds and installs.
                let text = format!("{yaml}# reload {n}\n");
                let t = Instant::now();
                engine.reload_yaml(&text, dir).unwrap();
                reloads.push(ms(t.elapsed()));
            }
            let after = rss_kib();
            // A second engine on the same config: what one more installed version holds
            // (a reload keeps two while the old one drains).
            let second = Engine::open(dir.join("weft.yaml"), &service, options()).unwrap();
            let two = rss_kib();
            let stats = engine.stats();
            println!(
                "service {service}: open {:.1} ms, rss +{} KiB; reloads {:?} ms; rss after \
                 reloads +{} KiB ({} of {} versions freed); one more version +{} KiB",
                ms(open),
                one - before,
                reloads
                    .iter()
                    .map(|r| (r * 10.0).round() / 10.0)
                    .collect::<Vec<_>>(),
                after.saturating_sub(one),
                stats.freed,
                stats.installed,
                two.saturating_sub(after),
            );
            drop(second);
        }
        Some("lookup") => {
            let dir = Path::new(&args[1]);
            let service = "svc0";
            let engine = Engine::open(dir.join("weft.yaml"), service, options()).unwrap();
            let yaml = std::fs::read_to_string(dir.join("weft.yaml")).unwrap();
            let methods: Vec<String> = yaml
                .lines()
                .filter_map(|l| l.trim().strip_prefix("method: "))
                .map(|m| format!("/{m}"))
                .collect();
            let request = [0x0a, 3, b'b', b'o', b'b', 0x12, 2, b'h', b'i'];
            for method in [methods.first().unwrap(), methods.last().unwrap()] {
                let n = 200_000;
                let mut best = f64::MAX;
                for _ in 0..3 {
                    let t = Instant::now();
                    for _ in 0..n {
                        let p = engine.prepare(Side::Client, method, None).unwrap();
                        let out = engine
                            .run_request_from(p, Metadata::new(), &request)
                            .unwrap();
                        recycle(out.verdict);
                    }
                    best = best.min(t.elapsed().as_secs_f64() * 1e9 / n as f64);
                }
                println!(
                    "{service}: {} client methods; {method}: {best:.0} ns per request",
                    methods.len()
                );
            }
        }
        _ => {
            eprintln!("usage: mesh write DIR SERVICES METHODS EDGES CHAIN hub|spread");
            eprintln!("       mesh open DIR SERVICE | mesh lookup DIR");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
