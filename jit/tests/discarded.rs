#![allow(clippy::unwrap_used)]
//! An expression statement whose value is discarded still runs a read-modify-write nested
//! inside it, in both executors (the checker used to drop the whole statement).

mod common;

use std::sync::Arc;

use common::{echo_element, jit_instance, local_store, rpc};
use weft_hostcalls::{Message, SeededRng, Value, VirtualClock};
use weft_ir::check::{CheckEnv, check};
use weft_ir::diag::SourceFile;
use weft_ir::interp::{Host, Instance, Verdict};
use weft_ir::parser::parse;
use weft_ir::sim::{Executor, Interp};
use weft_jit::{Buffers, Fusion, compile};

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
    let (_, method) = echo_element("logging");
    let src = SourceFile::new("d.weft", SOURCE.to_owned());
    let (ast, diags) = parse(&src);
    assert!(diags.is_empty(), "{diags:?}");
    let env = CheckEnv {
        name: "d".into(),
        method: Some(&method),
        params: None,
    };
    let (e, diags) = check(&ast, &env);
    let rendered = weft_ir::diag::render_all(&src, &diags);
    assert!(!rendered.contains("discarded"), "{rendered}");
    let e = Arc::new(e.unwrap_or_else(|| panic!("{rendered}")));
    let clock = VirtualClock::new(1.0);
    let mut records = Vec::new();
    let mut host = Host {
        clock: &clock,
        channels: &mut records,
    };
    let compiled = compile(std::slice::from_ref(&e), Fusion::Fused).unwrap();
    let mut oracle = Instance::new("d", local_store(&e), Box::new(SeededRng::new(1)));
    let mut inst = jit_instance(&e, "d");
    for _ in 0..3 {
        let want = Interp.request(
            std::slice::from_ref(&e),
            &mut [&mut oracle],
            Message::request(vec![]),
            &rpc(),
            &mut host,
        );
        let got = compiled.request(
            &mut Buffers::default(),
            &mut [&mut inst],
            Message::request(vec![]),
            &rpc(),
            &mut host,
        );
        assert!(
            matches!(want.verdict, Verdict::Forward(_)),
            "{:?}",
            want.verdict
        );
        assert!(
            matches!(got.verdict, Verdict::Forward(_)),
            "{:?}",
            got.verdict
        );
    }
    let three = Value::Map([(Value::str("all"), Value::Int(3))].into_iter().collect());
    for (executor, inst) in [("interpreter", &mut oracle), ("jit", &mut inst)] {
        let hits = inst
            .store
            .snapshot()
            .into_iter()
            .find(|(name, _)| name == "hits")
            .map(|(_, v)| v);
        assert_eq!(hits, Some(three.clone()), "{executor}");
    }
}
