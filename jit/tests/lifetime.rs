#![allow(clippy::unwrap_used)]
//! Code lifetime with real machine code: a call that entered a version keeps running in it
//! after a new version is published, and the old module is freed when that call's reference
//! goes (tests/loom.rs models the same logic under every interleaving).

mod common;

use std::sync::Arc;

use common::{echo_element, jit_instance, rpc};
use weft_hostcalls::{Message, VirtualClock};
use weft_ir::interp::{Host, Verdict};
use weft_ir::ir::Element;
use weft_ir::schema::MethodSchema;
use weft_jit::lifetime::VersionSlot;
use weft_jit::{Buffers, Compiled, Fusion, compile};

fn firewall(deny: &str) -> (Arc<Element>, MethodSchema) {
    echo_element(&format!("firewall: {{field: user, deny: [{deny}]}}"))
}

fn run(c: &Compiled, (e, method): &(Arc<Element>, MethodSchema), user: &str) -> bool {
    let mut inst = jit_instance(e, "fw");
    let clock = VirtualClock::new(0.0);
    let mut records = Vec::new();
    let mut host = Host::new(&clock, &mut records);
    weft_ir::interp::run_init(&mut inst, e, &mut host).unwrap();
    let bytes =
        weft_ir::wire::json_to_bytes(&method.request, &serde_json::json!({"user": user})).unwrap();
    let out = c.request(
        &mut Buffers::default(),
        &mut [&mut inst],
        Message::request(bytes),
        &rpc(),
        &mut host,
        &mut Default::default(),
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

/// A compile that fails says why and leaves the next compile unaffected (a refused reload is
/// followed by a good one). That its memory is freed cannot be seen from here; the error
/// path that frees it is what runs.
#[test]
fn a_failed_compile_reports_its_error_and_the_next_one_runs() {
    for _ in 0..3 {
        assert!(matches!(
            compile(&[], Fusion::Fused),
            Err(weft_jit::JitError::EmptySegment)
        ));
    }
    let fw = firewall("mallory");
    let c = compile(std::slice::from_ref(&fw.0), Fusion::Fused).unwrap();
    assert!(!run(&c, &fw, "mallory"), "mallory is denied");
    assert!(run(&c, &fw, "alice"));
}
