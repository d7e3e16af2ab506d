#![allow(clippy::unwrap_used)]
//! A handler stops at the first failure, whichever executor runs it. Compiled code does not
//! branch on a failure after every host call but before its own next effect, so this checks
//! that the host calls in between do nothing: no record, no state written, no random number
//! drawn (the next RPC's draw would show it), exactly as the interpreter, which stops at the
//! failure.

mod common;

use common::{element_from_source, jit_instance, local_store, rpc};
use weft_hostcalls::channel::ChannelRecord;
use weft_hostcalls::{Code, Message, SeededRng, VirtualClock};
use weft_ir::interp::{Host, Instance, Verdict};
use weft_ir::sim::{Executor, Interp};
use weft_jit::{Buffers, Fusion, compile};

/// Reads a field (which fails on malformed bytes), then makes one effect of each kind a
/// host function makes, then stores to its state block (which compiled code checks before).
const EFFECTS_AFTER_A_READ: &str = "\
state:
    seen: Map<string, int>
    log: Channel
    draw: float

init():
    pass

req(rpc):
    user = get(rpc, 'user')
    send(rpc, log)
    set(seen, user, 1)
    draw = randomf(0.0, 1.0)
    send(draw, log)
    send(size(seen), log)
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

/// `user` (field 1, a string) claims 50 bytes that are not there.
fn truncated() -> Message {
    Message::request(vec![0x0a, 50, b'a'])
}

/// `{"user": "alice"}`.
fn well_formed() -> Message {
    let mut bytes = vec![0x0a, 5];
    bytes.extend_from_slice(b"alice");
    Message::request(bytes)
}

#[test]
fn host_calls_after_a_failure_change_nothing_the_interpreter_would_not() {
    let (e, _) = element_from_source("effects", EFFECTS_AFTER_A_READ);
    let compiled = compile(std::slice::from_ref(&e), Fusion::Fused).unwrap();
    let clock = VirtualClock::new(1.0);
    let mut oracle = Instance::new("effects", local_store(&e), Box::new(SeededRng::new(1)));
    let mut jit = jit_instance(&e, "effects");
    let (mut oracle_records, mut jit_records) = (Vec::<ChannelRecord>::new(), Vec::new());
    let mut bufs = Buffers::default();
    for (n, make) in [
        truncated as fn() -> Message,
        well_formed,
        truncated,
        well_formed,
    ]
    .into_iter()
    .enumerate()
    {
        let want = Interp.request(
            std::slice::from_ref(&e),
            &mut [&mut oracle],
            make(),
            &rpc(),
            &mut Host::new(&clock, &mut oracle_records),
            &mut Default::default(),
        );
        let got = compiled.request(
            &mut bufs,
            &mut [&mut jit],
            make(),
            &rpc(),
            &mut Host::new(&clock, &mut jit_records),
            &mut Default::default(),
        );
        assert_eq!(format!("{got:?}"), format!("{want:?}"), "RPC {n}");
        assert_eq!(
            format!("{jit_records:?}"),
            format!("{oracle_records:?}"),
            "records after RPC {n}"
        );
        let rejected = matches!(
            want.verdict,
            Verdict::Reject {
                code: Code::InvalidArgument,
                ..
            }
        );
        assert_eq!(rejected, n % 2 == 0, "RPC {n}: {want:?}");
    }
    // Only the well-formed requests got as far as the log.
    assert_eq!(oracle_records.len(), 2 * 3);
}
