#![allow(clippy::unwrap_used)]
//! An expression statement whose value is discarded still runs a read-modify-write nested
//! inside it, in both executors (the checker used to drop the whole statement).

mod common;

use common::{BothExecutors, element_from_source};
use weft_hostcalls::{Message, Value};
use weft_ir::interp::Verdict;

const SOURCE: &str = "\
state:
    hits: Map<string, int>

init():
    pass

req(rpc):
    str(get(hits, 'all', lambda(n):
        n = n + 1
        return n))
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

#[test]
fn a_read_modify_write_inside_a_discarded_value_still_runs() {
    let (e, warnings) = element_from_source("d", SOURCE);
    assert!(!warnings.contains("discarded"), "{warnings}");
    let mut both = BothExecutors::new(e, "d");
    for _ in 0..3 {
        for (executor, out) in both.request(|| Message::request(vec![])) {
            assert!(
                matches!(out.verdict, Verdict::Forward(_)),
                "{executor}: {:?}",
                out.verdict
            );
        }
    }
    let three = Value::Map([(Value::str("all"), Value::Int(3))].into_iter().collect());
    for (executor, inst) in [("interpreter", &mut both.oracle), ("jit", &mut both.jit)] {
        let hits = inst
            .store
            .snapshot()
            .into_iter()
            .find(|(name, _)| name == "hits")
            .map(|(_, v)| v);
        assert_eq!(hits, Some(three.clone()), "{executor}");
    }
}
