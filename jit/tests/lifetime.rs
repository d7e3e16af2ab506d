#![allow(clippy::unwrap_used)]
//! Code lifetime with real machine code: a call that entered a version keeps running in it
//! after a new version is published, and the old module is freed when that call's reference
//! goes (tests/loom.rs models the same logic under every interleaving).

use std::path::PathBuf;
use std::sync::Arc;

use weft_hostcalls::state::{LocalStore, StateStore, VarSpec};
use weft_hostcalls::{Message, SeededRng, VirtualClock};
use weft_ir::config::Config;
use weft_ir::interp::{Host, Instance, RpcInfo, Verdict};
use weft_ir::ir::Element;
use weft_ir::load::load_edge;
use weft_ir::schema::MethodSchema;
use weft_jit::lifetime::VersionSlot;
use weft_jit::{Buffers, Compiled, Fusion, block_store, compile};

fn firewall(deny: &str) -> (Arc<Element>, MethodSchema) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/echo");
    let yaml = format!(
        "protos: [echo.proto]\nedges:\n  a->b:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    client:\n      - firewall: {{field: user, deny: [{deny}]}}\n"
    );
    let config = Config::parse("x.yaml", &dir, &yaml).unwrap();
    let edge = load_edge(&config, "a->b").unwrap();
    let m = edge.methods[0].clone();
    (edge.elements[0].ir[&m.full_name].clone(), m)
}

fn run(c: &Compiled, (e, method): &(Arc<Element>, MethodSchema), user: &str) -> bool {
    let specs: Vec<VarSpec> = e
        .state
        .iter()
        .map(|v| VarSpec::new(v.name.clone(), v.kind, v.value_type().zero_value()))
        .collect();
    let store: Box<dyn StateStore + Send> = Box::new(LocalStore::new(&specs));
    let mut inst = Instance::new("fw", block_store(e, store), Box::new(SeededRng::new(1)));
    let clock = VirtualClock::new(0.0);
    let mut records = Vec::new();
    let mut host = Host {
        clock: &clock,
        channels: &mut records,
    };
    weft_ir::interp::run_init(&mut inst, e, &mut host).unwrap();
    let bytes =
        weft_ir::wire::json_to_bytes(&method.request, &serde_json::json!({"user": user})).unwrap();
    let rpc = RpcInfo {
        id: 1,
        method: String::new(),
        src: "c".into(),
        service: "s".into(),
        routed: None,
    };
    let out = c.request(
        &mut Buffers::default(),
        &mut [&mut inst],
        Message::request(bytes),
        &rpc,
        &mut host,
    );
    matches!(out.verdict, Verdict::Forward(_))
}

#[test]
fn a_running_call_keeps_its_version_until_it_returns() {
    let (old_e, new_e) = (firewall("mallory"), firewall("alice"));
    let slot = VersionSlot::new(compile(std::slice::from_ref(&old_e.0), Fusion::Fused).unwrap());
    let entered = slot.enter();
    slot.publish(compile(std::slice::from_ref(&new_e.0), Fusion::Fused).unwrap());
    // The old version still runs (and still lets alice through) after the new one is live.
    assert!(run(&entered, &old_e, "alice"));
    assert!(!run(&entered, &old_e, "mallory"));
    let weak = Arc::downgrade(&entered);
    drop(entered);
    // The last reference is gone: the old module has been freed.
    assert!(weak.upgrade().is_none());
    let current = slot.enter();
    assert!(!run(&current, &new_e, "alice"));
    assert!(run(&current, &new_e, "mallory"));
}
