#![allow(clippy::unwrap_used)]
//! Compiled code addresses an element's local scalars in its store's state block directly.
//! It must do so only when the block has exactly the layout the code was compiled for;
//! any other store (made for another element, or by another executor) is run by the
//! interpreter through the store's ordinary interface, with the interpreter's results.

mod common;

use common::{echo_element, local_store, rpc};
use weft_hostcalls::abi::{BlockStore, BlockVar, SlotKind};
use weft_hostcalls::{Message, SeededRng, VirtualClock};
use weft_ir::interp::{Host, Instance, run_init};
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
        let mut host = Host {
            clock: &clock,
            channels: &mut records,
        };
        let mut jit = instance_with_block(&e, layout);
        let mut oracle = Instance::new("rl", local_store(&e), Box::new(SeededRng::new(1)));
        run_init(&mut jit, &e, &mut host).unwrap();
        run_init(&mut oracle, &e, &mut host).unwrap();
        let mut bufs = Buffers::default();
        for n in 0..3 {
            let msg = || Message::request(vec![]);
            let got = compiled.request(&mut bufs, &mut [&mut jit], msg(), &rpc(), &mut host);
            let want = Interp.request(
                std::slice::from_ref(&e),
                &mut [&mut oracle],
                msg(),
                &rpc(),
                &mut host,
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
