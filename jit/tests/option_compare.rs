#![allow(clippy::unwrap_used)]
//! `opt == None` and `opt != None` compare the Option itself in both executors: a missing
//! map entry is `None`, a present one is not. (They used to unwrap both sides first, so a
//! present entry compared its value with an unwrapped `None` and every RPC was rejected.)

mod common;

use std::sync::Arc;

use common::{echo_element, jit_instance, local_store, rpc};
use weft_hostcalls::{Message, SeededRng, VirtualClock};
use weft_ir::check::{CheckEnv, check};
use weft_ir::diag::{Severity, SourceFile};
use weft_ir::interp::{Host, Instance, Verdict};
use weft_ir::parser::parse;
use weft_ir::sim::{Executor, Interp};
use weft_jit::{Buffers, Fusion, compile};

const SOURCE: &str = "\
state:
    seen: Map<string, int>

init():
    pass

req(rpc):
    user = get_rpc_header(rpc, 'x-user')
    if get(seen, user) == None:
        set_rpc_header(rpc, 'x-first', 'yes')
        set(seen, user, 1)
    if None != get(seen, user):
        set_rpc_header(rpc, 'x-known', 'yes')
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

#[test]
fn an_option_compared_with_none_is_not_unwrapped() {
    let (_, method) = echo_element("logging");
    let src = SourceFile::new("o.weft", SOURCE.to_owned());
    let (ast, diags) = parse(&src);
    assert!(diags.is_empty(), "{diags:?}");
    let env = CheckEnv {
        name: "o".into(),
        method: Some(&method),
        params: None,
    };
    let (e, diags) = check(&ast, &env);
    let rendered = weft_ir::diag::render_all(&src, &diags);
    assert!(
        diags.iter().all(|d| d.severity != Severity::Error)
            && !rendered.contains("unwrap")
            && !rendered.contains("Option is used as a value"),
        "{rendered}"
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
    let compiled = compile(std::slice::from_ref(&e), Fusion::Fused).unwrap();
    let mut oracle = Instance::new("o", local_store(&e), Box::new(SeededRng::new(1)));
    let mut inst = jit_instance(&e, "o");
    for (round, first) in [(1, Some("yes")), (2, None)] {
        let want = Interp.request(
            std::slice::from_ref(&e),
            &mut [&mut oracle],
            request(),
            &rpc(),
            &mut host,
        );
        let got = compiled.request(
            &mut Buffers::default(),
            &mut [&mut inst],
            request(),
            &rpc(),
            &mut host,
        );
        for (executor, out) in [("interpreter", want), ("jit", got)] {
            let Verdict::Forward(m) = out.verdict else {
                panic!("{executor}, request {round}: {:?}", out.verdict)
            };
            assert_eq!(
                m.headers.get("x-first").map(String::as_str),
                first,
                "{executor}, request {round}"
            );
            assert_eq!(
                m.headers.get("x-known").map(String::as_str),
                Some("yes"),
                "{executor}, request {round}"
            );
        }
    }
}
