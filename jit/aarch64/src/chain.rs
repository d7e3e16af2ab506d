//! The chain of standard elements jit/tests/cross_isa.rs compiles for aarch64. Shared by
//! build.rs, which compiles it into the objects, and the binaries, which run it: both must
//! load the very same elements for the tables to match the code.

use std::path::Path;
use std::sync::Arc;

use weft_ir::config::Config;
use weft_ir::ir::Element;
use weft_ir::load::{LoadedEdge, load_edge};

pub const EDGE: &str = "a->b";

const YAML: &str = include_str!("../../tests/cross_isa.yaml");

/// The edge's config, read against the workspace at `root` (examples/echo's protos, the
/// standard elements).
pub fn config(root: &Path) -> Result<Config, String> {
    Config::parse("aarch64.yaml", &root.join("examples/echo"), YAML).map_err(|e| e.to_string())
}

pub fn edge(config: &Config) -> Result<LoadedEdge, String> {
    load_edge(config, EDGE).map_err(|e| e.to_string())
}

/// The client segment, in chain order: what the simulator hands an executor.
pub fn elements(edge: &LoadedEdge) -> Vec<Arc<Element>> {
    let m = &edge.methods[0].full_name;
    edge.elements.iter().map(|e| e.ir[m].clone()).collect()
}
