//! Helpers shared by the JIT's integration tests (a failed unwrap here is a failed test).
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;

use weft_hostcalls::SeededRng;
use weft_hostcalls::state::{LocalStore, StateStore, VarSpec};
use weft_ir::config::Config;
use weft_ir::interp::{Instance, RpcInfo};
use weft_ir::ir::Element;
use weft_ir::load::load_edge;
use weft_ir::schema::MethodSchema;
use weft_jit::block_store;

/// The element of a one-element client chain on `echo.Echo/Say` (`item` as a YAML list item,
/// e.g. `ratelimit` or `firewall: {field: user, deny: [mallory]}`), checked for that method.
pub fn echo_element(item: &str) -> (Arc<Element>, MethodSchema) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/echo");
    let yaml = format!(
        "protos: [echo.proto]\nedges:\n  a->b:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    client:\n      - {item}\n"
    );
    let config = Config::parse("x.yaml", &dir, &yaml).unwrap();
    let edge = load_edge(&config, "a->b").unwrap();
    let m = edge.methods[0].clone();
    (edge.elements[0].ir[&m.full_name].clone(), m)
}

/// A store for `e`'s state, every variable at its zero.
pub fn local_store(e: &Element) -> Box<dyn StateStore + Send> {
    let specs: Vec<VarSpec> = e
        .state
        .iter()
        .map(|v| VarSpec::new(v.name.clone(), v.kind, v.value_type().zero_value()))
        .collect();
    Box::new(LocalStore::new(&specs))
}

/// An instance of `e` for compiled code (scalars in its state block), seed 1.
pub fn jit_instance(e: &Element, name: &str) -> Instance {
    Instance::new(
        name,
        block_store(e, local_store(e)),
        Box::new(SeededRng::new(1)),
    )
}

/// RPC 1 from `c` to `s`.
pub fn rpc() -> RpcInfo {
    RpcInfo {
        id: 1,
        method: String::new(),
        src: "c".into(),
        service: "s".into(),
        routed: None,
    }
}
