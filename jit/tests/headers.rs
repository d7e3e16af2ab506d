#![allow(clippy::unwrap_used)]
//! Header names computed at run time (here a parameter) reach messages lower-cased in both
//! executors, as the runtime and the simulator store every key they receive: a read finds
//! the header whatever case the name has, and a write replaces it instead of adding a key
//! of another case.

mod common;

use std::sync::Arc;

use common::{echo_element, jit_instance, local_store, rpc};
use weft_hostcalls::{Message, SeededRng, VirtualClock};
use weft_ir::check::{CheckEnv, check};
use weft_ir::diag::SourceFile;
use weft_ir::interp::{Host, Instance, Verdict};
use weft_ir::parser::parse;
use weft_ir::sim::{Executor, Interp};
use weft_jit::{Buffers, Fusion, compile};

const SOURCE: &str = "\
state:
    pass

init(name: string = 'X-User'):
    pass

req(rpc):
    set_rpc_header(rpc, 'x-seen', get_rpc_header(rpc, name))
    set_rpc_header(rpc, name, 'replaced')
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

#[test]
fn a_computed_header_name_is_lower_cased_in_both_executors() {
    let (_, method) = echo_element("logging");
    let src = SourceFile::new("h.weft", SOURCE.to_owned());
    let (ast, diags) = parse(&src);
    assert!(diags.is_empty(), "{diags:?}");
    let env = CheckEnv {
        name: "h".into(),
        method: Some(&method),
        params: None,
    };
    let (e, diags) = check(&ast, &env);
    assert!(
        diags.is_empty(),
        "{}",
        weft_ir::diag::render_all(&src, &diags)
    );
    let e = Arc::new(e.unwrap());
    let request = || {
        let mut m = Message::request(vec![]);
        m.headers.insert("x-user".into(), "alice".into());
        m
    };
    let clock = VirtualClock::new(1.0);
    let mut records = Vec::new();
    let mut host = Host {
        clock: &clock,
        channels: &mut records,
    };
    let mut oracle = Instance::new("h", local_store(&e), Box::new(SeededRng::new(1)));
    let want = Interp.request(
        std::slice::from_ref(&e),
        &mut [&mut oracle],
        request(),
        &rpc(),
        &mut host,
    );
    let compiled = compile(std::slice::from_ref(&e), Fusion::Fused).unwrap();
    let mut inst = jit_instance(&e, "h");
    let got = compiled.request(
        &mut Buffers::default(),
        &mut [&mut inst],
        request(),
        &rpc(),
        &mut host,
    );
    for (executor, out) in [("interpreter", want), ("jit", got)] {
        let Verdict::Forward(m) = out.verdict else {
            panic!("{executor}: {:?}", out.verdict)
        };
        let headers: Vec<_> = m.headers.iter().collect();
        assert_eq!(
            headers,
            [
                (&"x-seen".to_owned(), &"alice".to_owned()),
                (&"x-user".to_owned(), &"replaced".to_owned())
            ],
            "{executor}"
        );
    }
}
