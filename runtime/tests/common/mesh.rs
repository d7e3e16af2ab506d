//! Generated meshes: many services with many methods in their own protos, and many edges
//! whose chains are drawn from the standard elements with valid parameters. Shared by the
//! scale tests (`tests/mesh_scale.rs`) and `examples/mesh.rs`, which measures them.
#![allow(dead_code, clippy::unwrap_used)]

use std::fmt::Write as _;
use std::path::Path;

/// The shape of a generated mesh.
#[derive(Clone, Copy, Debug)]
pub struct Mesh {
    /// Services `svc0` … : each a proto file `svcN.proto` with service `mesh.SvcN`.
    pub services: usize,
    /// Methods per service, `M0` …, each with its own request and response messages.
    pub methods: usize,
    /// Edges in the config.
    pub edges: usize,
    /// Elements per edge (1 to 12).
    pub chain: usize,
    /// `true`: every edge is `svc0` calling one method of another service (so `svc0` is an
    /// end of all of them). `false`: each edge is a distinct pair of services over one of
    /// the callee's methods, spread evenly. A method is never the callee of two edges: the
    /// runtime refuses that (docs/config.md, "One edge per method and side").
    pub hub: bool,
}

/// The standard elements a chain is drawn from, each with valid parameters, and the list it
/// goes under when it is not the first or last of the chain.
const POOL: &[(&str, &str)] = &[
    ("ratelimit", "{capacity: 100, rate: 50}"),
    ("firewall", "{field: user, deny: [mallory, eve]}"),
    ("metrics", "{}"),
    ("circuitbreaker", "{max_pending: 100}"),
    ("cache", "{field: body}"),
    ("admissioncontrol", "{multiplier: 2.0}"),
    ("bandwidthlimit", "{capacity: 1000000, rate: 1000000}"),
    ("fault", "{prob_pass: 1.0}"),
    ("mutation", "{field: body}"),
    ("logging", "{}"),
    ("prequal_server", "{alpha: 0.2}"),
    ("loadbalance", "{policy: round_robin}"),
];

impl Mesh {
    /// The (caller, callee, method) of edge `i`.
    pub fn edge(&self, i: usize) -> (usize, usize, String) {
        if self.hub {
            let others = self.services - 1;
            let callee = 1 + i % others;
            let m = i / others;
            assert!(m < self.methods, "too many edges for a hub of this size");
            (0, callee, format!("mesh.Svc{callee}/M{m}"))
        } else {
            let from = i % self.services;
            let step = 1 + i / self.services;
            assert!(
                step < self.services,
                "too many edges for this many services"
            );
            let to = (from + step) % self.services;
            // Callers of one service differ in `step`, so each calls its own method.
            assert!(step <= self.methods, "too many edges for this many methods");
            (from, to, format!("mesh.Svc{to}/M{}", step - 1))
        }
    }

    /// The edges `svc{service}` is an end of.
    pub fn edges_of(&self, service: usize) -> usize {
        (0..self.edges)
            .filter(|&i| {
                let (a, b, _) = self.edge(i);
                a == service || b == service
            })
            .count()
    }

    /// The proto of one service: its methods' messages carry the fields the elements read
    /// (`user`, `body`) among others, and a shared `common.proto` type.
    pub fn proto(&self, s: usize) -> String {
        let mut p = format!(
            "syntax = \"proto3\";\npackage mesh;\nimport \"common.proto\";\n\nservice Svc{s} {{\n"
        );
        for m in 0..self.methods {
            writeln!(p, "  rpc M{m}(Svc{s}M{m}Req) returns (Svc{s}M{m}Resp);").unwrap();
        }
        p.push_str("}\n");
        for m in 0..self.methods {
            writeln!(
                p,
                "message Svc{s}M{m}Req {{ string user = 1; string body = 2; int64 priority = 3; \
                 repeated string tags = 4; Meta meta = 5; map<string, string> labels = 6; }}\n\
                 message Svc{s}M{m}Resp {{ string body = 1; string served_by = 2; Meta meta = 3; }}"
            )
            .unwrap();
        }
        p
    }

    /// The config: every proto, and the edges with their chains.
    pub fn yaml(&self) -> String {
        let mut y = String::from("protos:\n");
        for s in 0..self.services {
            writeln!(y, "  - svc{s}.proto").unwrap();
        }
        y.push_str("edges:\n");
        for i in 0..self.edges {
            let (from, to, method) = self.edge(i);
            // Distinct names in each chain, a different selection per edge.
            let names: Vec<usize> = (0..self.chain).map(|k| (i + k) % POOL.len()).collect();
            let item = |k: usize| {
                let (name, params) = POOL[k];
                format!("      - {name}: {params}\n")
            };
            write!(
                y,
                "  e{i}:\n    from: svc{from}\n    to: svc{to}\n    method: {method}\n"
            )
            .unwrap();
            let mut client = String::new();
            let mut any = String::new();
            for &k in &names {
                // The balancer routes the caller's request: it stays on the caller.
                if POOL[k].0 == "loadbalance" {
                    client.push_str(&item(k));
                } else {
                    any.push_str(&item(k));
                }
            }
            for (list, items) in [("client", client), ("any", any)] {
                if !items.is_empty() {
                    write!(y, "    {list}:\n{items}").unwrap();
                }
            }
        }
        y
    }

    /// Writes the protos and `weft.yaml` into `dir`; returns the config's path.
    pub fn write(&self, dir: &Path) -> std::path::PathBuf {
        std::fs::write(
            dir.join("common.proto"),
            "syntax = \"proto3\";\npackage mesh;\nmessage Meta { string trace = 1; int64 deadline_ms = 2; }\n",
        )
        .unwrap();
        for s in 0..self.services {
            std::fs::write(dir.join(format!("svc{s}.proto")), self.proto(s)).unwrap();
        }
        let path = dir.join("weft.yaml");
        std::fs::write(&path, self.yaml()).unwrap();
        path
    }
}
