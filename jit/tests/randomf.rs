#![allow(clippy::unwrap_used)]
//! `randomf` with a bound that is not a finite number is a run-time error in both executors
//! (INTERNAL, counted), before any draw; finite bounds draw the same number in both.

mod common;

use common::{BothExecutors, element_from_source};
use weft_hostcalls::{Code, Message, SeededRng};
use weft_ir::interp::Verdict;

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
    let (e, _) = element_from_source("r", SOURCE);
    let mut both = BothExecutors::new(e, "r");
    for hi in ["inf", "-inf", "NaN", "2.5"] {
        let request = || {
            let mut m = Message::request(vec![]);
            m.headers.insert("x-hi".into(), hi.into());
            m
        };
        let mut drawn = Vec::new();
        for (executor, out) in both.request(request) {
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
    assert_eq!((both.oracle.errors, both.jit.errors), (3, 3));
}
