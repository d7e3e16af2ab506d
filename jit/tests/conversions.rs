#![allow(clippy::unwrap_used)]
//! `int(x)` and `uint(x)` in both executors: a value the target type cannot hold (NaN, an
//! infinity, out of range, negative for `uint`) rejects the RPC with INTERNAL and counts as
//! an element error, whatever the source type; values in range convert, floats truncating
//! toward zero. They used to saturate floats (NaN gave 0) and wrap integers, silently.

mod common;

use common::{BothExecutors, element_from_source};
use weft_hostcalls::{Code, Message};
use weft_ir::interp::Verdict;

// The operands come from headers, so nothing is folded at check time.
const SOURCE: &str = "\
state:
    pass

init():
    pass

req(rpc):
    f = 0.0
    match parse_float(get_rpc_header(rpc, 'x-x')):
        Some(v) => f = v
        None => pass
    i = 0
    match parse_int(get_rpc_header(rpc, 'x-x')):
        Some(v) => i = v
        None => pass
    out = ''
    match get_rpc_header(rpc, 'x-op'):
        'int(float)' => out = str(int(f))
        'uint(float)' => out = str(uint(f))
        'uint(int)' => out = str(uint(i))
        'int(uint)' => out = str(int(uint(i) + 9223372036854775807))
        'int(instant)' => out = str(int(current_time()))
        'uint(instant)' => out = str(uint(current_time()))
    set_rpc_header(rpc, 'x-out', out)
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

/// `(op, x, Ok(result) | Err(what the message names))`.
const CASES: &[(&str, &str, Result<&str, &str>)] = &[
    ("int(float)", "2.9", Ok("2")),
    ("int(float)", "-2.9", Ok("-2")),
    ("int(float)", "-0.0", Ok("0")),
    (
        "int(float)",
        "-9223372036854775808.0",
        Ok("-9223372036854775808"),
    ),
    // The largest double below 2^63.
    (
        "int(float)",
        "9223372036854774784.0",
        Ok("9223372036854774784"),
    ),
    ("int(float)", "NaN", Err("int(NaN)")),
    ("int(float)", "inf", Err("int(inf)")),
    ("int(float)", "-inf", Err("int(-inf)")),
    (
        "int(float)",
        "9223372036854775808.0",
        Err("int(9.223372036854776e18)"),
    ),
    (
        "int(float)",
        "-9223372036854777856.0",
        Err("int(-9.223372036854778e18)"),
    ),
    ("int(float)", "1e300", Err("int(1e300)")),
    ("uint(float)", "3.5", Ok("3")),
    // Truncated toward zero first: -0.5 is 0, which a uint holds.
    ("uint(float)", "-0.5", Ok("0")),
    (
        "uint(float)",
        "18446744073709549568.0",
        Ok("18446744073709549568"),
    ),
    ("uint(float)", "-1.0", Err("uint(-1.0)")),
    ("uint(float)", "-9.0", Err("uint(-9.0)")),
    ("uint(float)", "NaN", Err("uint(NaN)")),
    ("uint(float)", "inf", Err("uint(inf)")),
    (
        "uint(float)",
        "18446744073709551616.0",
        Err("uint(1.8446744073709552e19)"),
    ),
    ("uint(int)", "9", Ok("9")),
    ("uint(int)", "0", Ok("0")),
    (
        "uint(int)",
        "9223372036854775807",
        Ok("9223372036854775807"),
    ),
    // As uint(-9.0): an int and a float of one value convert alike.
    ("uint(int)", "-9", Err("uint(-9)")),
    (
        "uint(int)",
        "-9223372036854775808",
        Err("uint(-9223372036854775808)"),
    ),
    ("int(uint)", "0", Ok("9223372036854775807")),
    ("int(uint)", "1", Err("int(9223372036854775808)")),
    (
        "int(uint)",
        "9223372036854775807",
        Err("int(18446744073709551614)"),
    ),
    // The virtual clock stands at 1.0.
    ("int(instant)", "", Ok("1")),
    ("uint(instant)", "", Ok("1")),
];

fn request(op: &str, x: &str) -> Message {
    let mut m = Message::request(vec![]);
    m.headers.insert("x-op".into(), op.into());
    m.headers.insert("x-x".into(), x.into());
    m
}

#[test]
fn int_and_uint_refuse_values_they_cannot_hold_in_both_executors() {
    let (e, warnings) = element_from_source("conv", SOURCE);
    assert!(!warnings.contains("error"), "{warnings}");
    let mut both = BothExecutors::new(e, "conv");
    let mut failures = 0;
    for &(op, x, want) in CASES {
        for (executor, out) in both.request(|| request(op, x)) {
            let case = format!("{executor}: {op} of {x:?}");
            match (want, out.verdict) {
                (Ok(want), Verdict::Forward(m)) => {
                    assert_eq!(m.headers["x-out"], want, "{case}");
                }
                (Err(what), Verdict::Reject { code, message }) => {
                    assert_eq!(code, Code::Internal, "{case}: {message}");
                    assert!(
                        message.starts_with(&format!("conv: {what}: ")),
                        "{case}: {message}"
                    );
                }
                (want, got) => panic!("{case}: expected {want:?}, got {got:?}"),
            }
        }
        failures += usize::from(want.is_err());
    }
    assert_eq!(both.oracle.errors, failures as u64);
    assert_eq!(both.jit.errors, failures as u64);
}

/// The checker used to refuse `abs` of a `uint`, which both executors already took as the
/// identity.
const ABS_SOURCE: &str = "\
state:
    pass

init():
    pass

req(rpc):
    match parse_int(get_rpc_header(rpc, 'x-x')):
        Some(i) => set_rpc_header(rpc, 'x-out', str(abs(uint(i) + 9223372036854775807)))
        None => pass
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

#[test]
fn abs_of_a_uint_is_the_uint_in_both_executors() {
    let (e, _) = element_from_source("abs", ABS_SOURCE);
    let mut both = BothExecutors::new(e, "abs");
    for (x, want) in [("0", "9223372036854775807"), ("5", "9223372036854775812")] {
        for (executor, out) in both.request(|| request("", x)) {
            let Verdict::Forward(m) = out.verdict else {
                panic!("{executor}: {:?}", out.verdict)
            };
            assert_eq!(m.headers["x-out"], want, "{executor}");
        }
    }
}
