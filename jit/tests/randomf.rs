#![allow(clippy::unwrap_used)]
//! `randomf` with a bound that is not a finite number is a run-time error in both executors
//! (INTERNAL, counted), before any draw; finite bounds draw the same number in both.

mod common;

use std::sync::Arc;

use common::{echo_element, jit_instance, local_store, rpc};
use weft_hostcalls::{Code, Message, SeededRng, VirtualClock};
use weft_ir::check::{CheckEnv, check};
use weft_ir::diag::SourceFile;
use weft_ir::interp::{Host, Instance, Verdict};
use weft_ir::parser::parse;
use weft_ir::sim::{Executor, Interp};
use weft_jit::{Buffers, Fusion, compile};

const SOURCE: &str = "\
state:
    pass

init():
    pass

req(rpc):
    match parse_float(get_rpc_header(rpc, 'x-hi')):
        Some(hi) =>
            set_rpc_header(rpc, 'x-drawn', str(randomf(0.0, hi)))
        None =>
            pass
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

#[test]
fn randomf_refuses_bounds_that_are_not_finite_in_both_executors() {
    let (_, method) = echo_element("logging");
    let src = SourceFile::new("r.weft", SOURCE.to_owned());
    let (ast, diags) = parse(&src);
    assert!(diags.is_empty(), "{diags:?}");
    let env = CheckEnv {
        name: "r".into(),
        method: Some(&method),
        params: None,
    };
    let (e, diags) = check(&ast, &env);
    let e = Arc::new(e.unwrap_or_else(|| panic!("{}", weft_ir::diag::render_all(&src, &diags))));
    let clock = VirtualClock::new(1.0);
    let mut records = Vec::new();
    let mut host = Host {
        clock: &clock,
        channels: &mut records,
    };
    let compiled = compile(std::slice::from_ref(&e), Fusion::Fused).unwrap();
    let mut oracle = Instance::new("r", local_store(&e), Box::new(SeededRng::new(1)));
    let mut inst = jit_instance(&e, "r");
    for hi in ["inf", "-inf", "NaN", "2.5"] {
        let request = || {
            let mut m = Message::request(vec![]);
            m.headers.insert("x-hi".into(), hi.into());
            m
        };
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
        let mut drawn = Vec::new();
        for (executor, out) in [("interpreter", want), ("jit", got)] {
            match (hi, out.verdict) {
                ("2.5", Verdict::Forward(m)) => {
                    let x: f64 = m.headers["x-drawn"].parse().unwrap();
                    assert!((0.0..2.5).contains(&x), "{executor}: {x}");
                    drawn.push(x);
                }
                (_, Verdict::Reject { code, message }) if hi != "2.5" => {
                    assert_eq!(code, Code::Internal, "{executor}, {hi}: {message}");
                    assert!(message.contains("finite"), "{executor}, {hi}: {message}");
                }
                (_, v) => panic!("{executor}, {hi}: {v:?}"),
            }
        }
        if hi == "2.5" {
            // Neither refused call drew a number: both streams are at their first draw.
            assert_eq!(drawn[0], drawn[1]);
            let mut first = SeededRng::new(1);
            let expected = weft_hostcalls::rng::random_float(&mut first, 0.0, 2.5);
            assert_eq!(drawn[0], expected);
        }
    }
    assert_eq!((oracle.errors, inst.errors), (3, 3));
}
