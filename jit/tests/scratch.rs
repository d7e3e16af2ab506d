#![allow(clippy::unwrap_used)]
//! Per-RPC scratch is held between an RPC's request and its response only by elements that
//! keep metadata, in both executors: an RPC whose request ran in one executor and whose
//! response runs in the other (a fallback, a reload) leaves nothing behind.

mod common;

use common::{BothExecutors, echo_element};
use weft_hostcalls::Message;

#[test]
fn only_elements_with_metadata_hold_scratch_between_request_and_response() {
    // metrics keeps its start time in metadata; logging keeps nothing.
    for (element, held) in [("metrics", 1), ("logging", 0)] {
        let (e, _) = echo_element(element);
        assert_eq!(e.metadata.is_empty(), held == 0, "{element}");
        let mut both = BothExecutors::new(e, "x");
        let _ = both.request(|| Message::request(vec![]));
        assert_eq!(
            (both.oracle.in_flight(), both.jit.in_flight()),
            (held, held),
            "{element}: interpreter and JIT after the request"
        );
    }
}
