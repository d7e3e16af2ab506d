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
        .map(|v| {
            let spec = VarSpec::new(v.name.clone(), v.kind, v.value_type().zero_value());
            match v.capacity {
                Some(n) => spec.bounded(n),
                None => spec,
            }
        })
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

/// `source`, parsed and checked as element `name` against `echo.Echo/Say`; panics with the
/// diagnostics when it does not check. Also returns the rendered warnings.
pub fn element_from_source(name: &str, source: &str) -> (Arc<Element>, String) {
    use weft_ir::check::{CheckEnv, check};
    use weft_ir::diag::{SourceFile, render_all};
    let (_, method) = echo_element("logging");
    let src = SourceFile::new(format!("{name}.weft"), source.to_owned());
    let (ast, diags) = weft_ir::parser::parse(&src);
    assert!(diags.is_empty(), "{}", render_all(&src, &diags));
    let env = CheckEnv {
        name: name.into(),
        method: Some(&method),
        params: None,
    };
    let (e, diags) = check(&ast, &env);
    let rendered = render_all(&src, &diags);
    let e = e.unwrap_or_else(|| panic!("{rendered}"));
    (Arc::new(e), rendered)
}

/// One element run by the interpreter and by the fused JIT side by side, each with its own
/// instance (seed 1) and one virtual clock.
pub struct BothExecutors {
    element: Arc<Element>,
    compiled: weft_jit::Compiled,
    pub oracle: Instance,
    pub jit: Instance,
    clock: weft_hostcalls::VirtualClock,
    records: Vec<weft_hostcalls::channel::ChannelRecord>,
}

impl BothExecutors {
    pub fn new(element: Arc<Element>, name: &str) -> Self {
        let compiled =
            weft_jit::compile(std::slice::from_ref(&element), weft_jit::Fusion::Fused).unwrap();
        BothExecutors {
            oracle: Instance::new(name, local_store(&element), Box::new(SeededRng::new(1))),
            jit: jit_instance(&element, name),
            element,
            compiled,
            clock: weft_hostcalls::VirtualClock::new(1.0),
            records: Vec::new(),
        }
    }

    /// The request `make()` builds, through the interpreter and then the JIT.
    pub fn request(
        &mut self,
        make: impl Fn() -> weft_hostcalls::Message,
    ) -> [(&'static str, weft_ir::sim::SegmentRequest); 2] {
        use weft_ir::sim::Executor;
        let mut host = weft_ir::interp::Host::new(&self.clock, &mut self.records);
        let elements = std::slice::from_ref(&self.element);
        let want = weft_ir::sim::Interp.request(
            elements,
            &mut [&mut self.oracle],
            make(),
            &rpc(),
            &mut host,
            &mut Default::default(),
        );
        let got = self.compiled.request(
            &mut weft_jit::Buffers::default(),
            &mut [&mut self.jit],
            make(),
            &rpc(),
            &mut host,
            &mut Default::default(),
        );
        [("interpreter", want), ("jit", got)]
    }
}
