#![allow(clippy::unwrap_used)]
//! Compiled code addresses an element's local scalars in its store's state block directly.
//! It must do so only when the block has exactly the layout the code was compiled for;
//! any other store (made for another element, or by another executor) is run by the
//! interpreter through the store's ordinary interface, with the interpreter's results.

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use common::{echo_element, local_store, rpc};
use weft_hostcalls::abi::{BlockStore, BlockVar, ScalarBlock, SlotKind};
use weft_hostcalls::state::{StateError, StateStore};
use weft_hostcalls::{Message, SeededRng, Value, VirtualClock};
use weft_ir::interp::{Host, Instance, Verdict, run_init};
use weft_ir::ir::Element;
use weft_ir::sim::{Executor, Interp};
use weft_jit::{Buffers, Fusion, compile, lower::block_vars};

/// An instance whose store has a block of `layout` (a slot per entry), holding the
/// variables `layout` gives a kind and leaving the rest to a plain store (slots past the
/// element's variables hold made-up ones).
fn instance_with_block(e: &Element, layout: &[Option<SlotKind>]) -> Instance {
    let vars = layout
        .iter()
        .enumerate()
        .map(|(k, kind)| {
            kind.map(|kind| match e.state.get(k) {
                Some(v) => BlockVar {
                    name: v.name.clone(),
                    kind,
                    zero: v.value_type().zero_value(),
                },
                None => BlockVar {
                    name: format!("extra{k}"),
                    kind,
                    zero: weft_hostcalls::Value::Int(0),
                },
            })
        })
        .collect();
    let store = BlockStore::new(local_store(e), vars);
    Instance::new("rl", Box::new(store), Box::new(SeededRng::new(1)))
}

#[test]
fn a_block_of_another_layout_is_left_to_the_interpreter() {
    let (e, _) = echo_element("ratelimit: {capacity: 2.0, rate: 0.0}");
    let compiled_for = block_vars(&e);
    assert_eq!(
        compiled_for,
        [Some(SlotKind::Float), Some(SlotKind::Instant)],
        "the test assumes ratelimit keeps both scalars in its block"
    );
    let compiled = compile(std::slice::from_ref(&e), Fusion::Fused).unwrap();
    let layouts: [&[Option<SlotKind>]; 3] = [
        // A block whose slots hold none of the variables: writes to it would be lost.
        &[None, None],
        // A block one slot short: the code would write past its end.
        &[Some(SlotKind::Float)],
        // A block with a slot more than the code knows.
        &[
            Some(SlotKind::Float),
            Some(SlotKind::Instant),
            Some(SlotKind::Int),
        ],
    ];
    for layout in layouts {
        let clock = VirtualClock::new(1.0);
        let mut records = Vec::new();
        let mut host = Host::new(&clock, &mut records);
        let mut jit = instance_with_block(&e, layout);
        let mut oracle = Instance::new("rl", local_store(&e), Box::new(SeededRng::new(1)));
        run_init(&mut jit, &e, &mut host).unwrap();
        run_init(&mut oracle, &e, &mut host).unwrap();
        let mut bufs = Buffers::default();
        for n in 0..3 {
            let msg = || Message::request(vec![]);
            let s = &mut Default::default();
            let got = compiled.request(&mut bufs, &mut [&mut jit], msg(), &rpc(), &mut host, s);
            let want = Interp.request(
                std::slice::from_ref(&e),
                &mut [&mut oracle],
                msg(),
                &rpc(),
                &mut host,
                &mut Default::default(),
            );
            assert_eq!(got, want, "request {n} with a block of layout {layout:?}");
            assert_eq!(
                jit.store.snapshot(),
                oracle.store.snapshot(),
                "state after request {n} with a block of layout {layout:?}"
            );
        }
    }
}

/// A store that, on any write to its map, drops its whole inner store (and so its state
/// block) for a new one: legal for a `StateStore`, which is safe to implement. It keeps a
/// weak reference to each block it dropped.
struct Rebuilding {
    element: Arc<Element>,
    inner: Box<dyn StateStore + Send>,
    dropped: Arc<Mutex<Vec<Weak<ScalarBlock>>>>,
}

impl StateStore for Rebuilding {
    fn get(&mut self, var: usize, key: &Value) -> Result<Option<Value>, StateError> {
        self.inner.get(var, key)
    }
    fn set(&mut self, var: usize, key: Value, value: Value) -> Result<(), StateError> {
        if var == 1 {
            let old = self.inner.scalar_block().map(Arc::downgrade);
            self.dropped.lock().unwrap().extend(old);
            self.inner = weft_jit::block_store(&self.element, local_store(&self.element));
        }
        self.inner.set(var, key, value)
    }
    fn delete(&mut self, var: usize, key: &Value) -> Result<(), StateError> {
        self.inner.delete(var, key)
    }
    fn len(&mut self, var: usize) -> Result<usize, StateError> {
        self.inner.len(var)
    }
    fn entries(&mut self, var: usize) -> Result<Vec<(Value, Value)>, StateError> {
        self.inner.entries(var)
    }
    fn snapshot(&mut self) -> Vec<(String, Value)> {
        self.inner.snapshot()
    }
    fn scalar_block(&mut self) -> Option<&Arc<ScalarBlock>> {
        self.inner.scalar_block()
    }
}

/// Compiled code takes an element's block at the start of a call and writes it after host
/// calls that hand the store out: a store that drops its block in one of them must not
/// leave the code writing freed memory. The instance holds the block until the call ends,
/// and the next call follows the store to its new block.
#[test]
fn a_store_that_drops_its_block_during_a_call_leaves_it_alive_until_the_call_ends() {
    let (e, _) = common::element_from_source(
        "u",
        "\
state:
    n: int
    m: Map<string, int>

init():
    pass

req(rpc):
    set(m, 'k', 1)
    n = n + 1
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
",
    );
    let dropped = Arc::new(Mutex::new(Vec::new()));
    let store = Rebuilding {
        element: e.clone(),
        inner: weft_jit::block_store(&e, local_store(&e)),
        dropped: Arc::clone(&dropped),
    };
    let mut inst = Instance::new("u", Box::new(store), Box::new(SeededRng::new(1)));
    let compiled = compile(std::slice::from_ref(&e), Fusion::Fused).unwrap();
    let clock = VirtualClock::new(1.0);
    let mut records = Vec::new();
    let mut host = Host::new(&clock, &mut records);
    let mut bufs = Buffers::default();
    let mut run = |inst: &mut Instance| {
        let out = compiled.request(
            &mut bufs,
            &mut [inst],
            Message::request(vec![]),
            &rpc(),
            &mut host,
            &mut Default::default(),
        );
        assert!(
            matches!(out.verdict, Verdict::Forward(_)),
            "{:?}",
            out.verdict
        );
    };
    let first_block = || dropped.lock().unwrap()[0].upgrade();
    run(&mut inst);
    // The store dropped the block the call started with; the write of `n` after the
    // drop went to that block, which the instance still holds.
    let first = first_block().expect("the first block is alive");
    let n = first.slots()[0].load(Ordering::Relaxed);
    assert_eq!(n as i64, 1, "the write after the store dropped its block");
    drop(first);
    run(&mut inst);
    assert!(
        first_block().is_none(),
        "the next call moved to the store's new block and let the old one go"
    );
}
