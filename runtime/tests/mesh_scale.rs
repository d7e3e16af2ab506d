#![allow(clippy::unwrap_used)]
//! A generated mesh (`common/mesh.rs`: services with many methods in their own protos,
//! edges whose chains hold ten standard elements) loads, checks and runs as one edge does.
//! `examples/mesh.rs` measures the same meshes at sizes up to 500 edges (docs/benchmarks.md,
//! "At the size of a mesh").

mod common;

use std::process::Command;

use common::mesh::Mesh;
use weft_runtime::{Engine, Metadata, Side, Verdict};

#[test]
fn a_mesh_of_ten_element_chains_checks_opens_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = Mesh {
        services: 12,
        methods: 5,
        edges: 40,
        chain: 10,
        hub: false,
    };
    let config = mesh.write(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["check", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("weft: 40 edge(s) checked, no errors"), "{err}");

    let engine = Engine::open(&config, "svc0", common::options()).unwrap();
    // svc0 calls edges 0, 12, 24 and 36; each is a client segment of the engine.
    for i in (0..mesh.edges).step_by(mesh.services) {
        let (from, _, method) = mesh.edge(i);
        assert_eq!(from, 0);
        let request = common::two_strings("alice", "hi");
        let out = engine
            .process_request(
                Side::Client,
                &format!("/{method}"),
                Metadata::new(),
                request,
            )
            .unwrap();
        assert!(
            matches!(out.verdict, Verdict::Forward(_) | Verdict::Route { .. }),
            "{method}: {:?}",
            out.verdict
        );
    }
}
