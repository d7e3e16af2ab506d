#![allow(clippy::unwrap_used)]
//! Header names computed at run time (here a parameter) reach messages lower-cased in both
//! executors, as the runtime and the simulator store every key they receive: a read finds
//! the header whatever case the name has, and a write replaces it instead of adding a key
//! of another case.

mod common;

use common::{BothExecutors, element_from_source};
use weft_hostcalls::{Code, Message};
use weft_ir::interp::Verdict;

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
    let (e, warnings) = element_from_source("h", SOURCE);
    assert!(warnings.is_empty(), "{warnings}");
    let request = || {
        let mut m = Message::request(vec![]);
        m.headers.insert("x-user".into(), "alice".into());
        m
    };
    for (executor, out) in BothExecutors::new(e, "h").request(request) {
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

/// The header named by the request's `body`, set to its `user`: both computed at run time.
const FROM_FIELDS: &str = "\
state:
    pass

init():
    pass

req(rpc):
    set_rpc_header(rpc, get(rpc, 'body'), get(rpc, 'user'))
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

/// An `echo.SayRequest` with these `user` and `body` fields (each under 128 bytes).
fn say(user: &str, body: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for (tag, s) in [(0x0a, user), (0x12, body)] {
        b.push(tag);
        b.push(u8::try_from(s.len()).unwrap());
        b.extend_from_slice(s.as_bytes());
    }
    b
}

/// The checker refuses such literals; computed, they were written as they came, so a field
/// value carrying CR/LF, or a computed `grpc-status`, reached the wire. Now both executors
/// fail the RPC as with any run-time error, naming the header and what is wrong with it.
#[test]
fn a_computed_header_grpc_cannot_carry_is_a_run_time_error_in_both_executors() {
    let (e, warnings) = element_from_source("h", FROM_FIELDS);
    assert!(warnings.is_empty(), "{warnings}");
    let mut both = BothExecutors::new(e, "h");
    let cases = [
        ("alice", "X-Tenant", None),
        (
            "a\r\nInjected: 1",
            "x-tenant",
            Some(
                "h: set_rpc_header: the value for header 'x-tenant' is not printable ASCII: byte 1 is 0x0d (CR); only a key ending in `-bin` carries other bytes",
            ),
        ),
        (
            "13",
            "GRPC-Status",
            Some(
                "h: set_rpc_header: header 'grpc-status' belongs to gRPC or to Weft; an element cannot write it",
            ),
        ),
        (
            "abc",
            "weft-version",
            Some(
                "h: set_rpc_header: header 'weft-version' belongs to gRPC or to Weft; an element cannot write it",
            ),
        ),
        (
            "x",
            "x-a\nb",
            Some(
                "h: set_rpc_header: 'x-a\\nb' is not a gRPC metadata key: '\\n' at byte 3; keys are lower-case letters, digits, `-`, `_` and `.`",
            ),
        ),
        (
            "x",
            "",
            Some(
                "h: set_rpc_header: the header name is empty; keys are lower-case letters, digits, `-`, `_` and `.`",
            ),
        ),
        // A `-bin` key carries any bytes.
        ("caf\u{e9}\r\n", "x-trace-bin", None),
    ];
    let mut failed = 0;
    for (user, body, want) in cases {
        for (executor, out) in both.request(|| Message::request(say(user, body))) {
            match (&out.verdict, want) {
                (Verdict::Forward(m), None) => {
                    let key = body.to_ascii_lowercase();
                    assert_eq!(
                        m.headers.get(&key).map(String::as_str),
                        Some(user),
                        "{executor}: {body:?}"
                    );
                }
                (Verdict::Reject { code, message }, Some(want)) => {
                    assert_eq!(*code, Code::Internal, "{executor}: {body:?}");
                    assert_eq!(message, want, "{executor}: {body:?}");
                }
                (other, _) => panic!("{executor}: {body:?}: {other:?}"),
            }
        }
        failed += u64::from(want.is_some());
        // Counted as the element's run-time errors, in both.
        assert_eq!((both.oracle.errors, both.jit.errors), (failed, failed));
    }
    assert_eq!(failed, 5);
}

/// Removes `x-user` (a literal empty value) and the header the request's `body` names (a
/// computed one, its `user`).
const REMOVES: &str = "\
state:
    pass

init():
    pass

req(rpc):
    set_rpc_header(rpc, 'x-user', '')
    set_rpc_header(rpc, get(rpc, 'body'), get(rpc, 'user'))
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

/// `get_rpc_header` gives `''` for a missing header, so an empty value cannot mean an empty
/// header: it removes it (the header was kept with an empty value, and went on).
#[test]
fn an_empty_header_value_removes_the_header_in_both_executors() {
    let (e, warnings) = element_from_source("h", REMOVES);
    assert!(warnings.is_empty(), "{warnings}");
    let mut both = BothExecutors::new(e, "h");
    let request = |body: &'static str| {
        move || {
            let mut m = Message::request(say("", body));
            for k in ["x-user", "x-tier", "x-keep"] {
                m.headers.insert(k.into(), "v".into());
            }
            m
        }
    };
    for (executor, out) in both.request(request("X-Tier")) {
        let Verdict::Forward(m) = out.verdict else {
            panic!("{executor}: {:?}", out.verdict)
        };
        let keys: Vec<&str> = m.headers.keys().map(String::as_str).collect();
        assert_eq!(keys, ["x-keep"], "{executor}");
    }
    // Removing an absent header leaves the others be.
    for (executor, out) in both.request(request("x-absent")) {
        let Verdict::Forward(m) = out.verdict else {
            panic!("{executor}: {:?}", out.verdict)
        };
        let keys: Vec<&str> = m.headers.keys().map(String::as_str).collect();
        assert_eq!(keys, ["x-keep", "x-tier"], "{executor}");
    }
    // A header gRPC or Weft reserves cannot be removed either.
    for (executor, out) in both.request(request("weft-version")) {
        let Verdict::Reject { code, message } = out.verdict else {
            panic!("{executor}: {:?}", out.verdict)
        };
        assert_eq!(code, Code::Internal, "{executor}");
        assert_eq!(
            message,
            "h: set_rpc_header: header 'weft-version' belongs to gRPC or to Weft; an element cannot write it",
            "{executor}"
        );
    }
}

/// Writes `x-trace-bin` and then reads the header `name` names, here the same key.
const READS_BIN: &str = "\
state:
    pass

init(name: string = 'X-Trace-Bin'):
    pass

req(rpc):
    set_rpc_header(rpc, 'x-trace-bin', 'AQ')
    match get_rpc_header(rpc, name):
        '' =>
            set_rpc_header(rpc, 'x-seen', 'nothing')
        _ =>
            set_rpc_header(rpc, 'x-seen', 'a value')
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

/// The runtime never shows elements a `-bin` value it receives (docs/c-abi.md), so an
/// element on the server side could not read what one on the client side wrote, while an
/// element beside the writer could: moving the reader across the network changed what it
/// read, which the planner cannot see. A `-bin` key now reads as absent everywhere; what
/// an element writes to it still goes on.
#[test]
fn a_bin_header_reads_as_absent_in_both_executors() {
    let (e, warnings) = element_from_source("h", READS_BIN);
    assert!(warnings.is_empty(), "{warnings}");
    let request = || {
        let mut m = Message::request(vec![]);
        m.headers
            .insert("x-trace-bin".into(), "from-the-caller".into());
        m
    };
    for (executor, out) in BothExecutors::new(e, "h").request(request) {
        let Verdict::Forward(m) = out.verdict else {
            panic!("{executor}: {:?}", out.verdict)
        };
        assert_eq!(m.headers["x-seen"], "nothing", "{executor}");
        assert_eq!(m.headers["x-trace-bin"], "AQ", "{executor}");
    }
}
