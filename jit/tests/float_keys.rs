#![allow(clippy::unwrap_used)]
//! A float key is one key per value the language cannot tell apart, in both executors:
//! `0.0 == -0.0`, so `-0.0` finds and replaces the entry of `0.0` (they used to be two
//! entries of one `Map<float, …>`), and every NaN is one key (a NaN's sign and payload
//! differ between processors, which would split state shared across them). `hash` agrees:
//! `hash(0.0) == hash(-0.0)`.

mod common;

use common::{BothExecutors, element_from_source};
use weft_hostcalls::Message;
use weft_ir::interp::Verdict;

const SOURCE: &str = "\
state:
    seen: Map<float, int>
    at: Map<<float, int>, int>

init():
    pass

req(rpc):
    match parse_float(get_rpc_header(rpc, 'x-x')):
        Some(f) =>
            match get(seen, f):
                Some(n) => set_rpc_header(rpc, 'x-found', str(n))
                None => pass
            set(seen, f, size(seen) * 10 + 1)
            set(at, (f, 1), 1)
            set_rpc_header(rpc, 'x-hash', str(hash(f)) + ' ' + str(hash((f, 1))))
        None => pass
    keys = ''
    foreach(seen, lambda(k, v):
        keys = keys + str(k) + '=' + str(v) + ' '
    )
    set_rpc_header(rpc, 'x-keys', keys + str(size(at)))
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

/// `(x, the entry found before the write, the map afterwards then size(at))`.
/// The key is stored as `0.0` even when `-0.0` writes it first.
const STEPS: &[(&str, Option<&str>, &str)] = &[
    ("-0.0", None, "0.0=1 1"),
    ("0.0", Some("1"), "0.0=11 1"),
    ("-0.0", Some("11"), "0.0=11 1"),
    ("-NaN", None, "0.0=11 NaN=11 2"),
    ("NaN", Some("11"), "0.0=11 NaN=21 2"),
];

#[test]
fn zeros_of_either_sign_and_every_nan_are_one_key_in_both_executors() {
    let (e, warnings) = element_from_source("keys", SOURCE);
    assert!(!warnings.contains("error"), "{warnings}");
    let mut both = BothExecutors::new(e, "keys");
    let mut hashes = Vec::new();
    for &(x, found, keys) in STEPS {
        let request = || {
            let mut m = Message::request(vec![]);
            m.headers.insert("x-x".into(), x.into());
            m
        };
        for (executor, out) in both.request(request) {
            let Verdict::Forward(m) = out.verdict else {
                panic!("{executor}, {x}: {:?}", out.verdict)
            };
            let h = |k: &str| m.headers.get(k).map(String::as_str);
            assert_eq!(h("x-found"), found, "{executor}, {x}");
            assert_eq!(h("x-keys"), Some(keys), "{executor}, {x}");
            hashes.push((x, h("x-hash").unwrap().to_owned()));
        }
    }
    let of = |x: &str| {
        let hs: Vec<&String> = hashes.iter().filter(|h| h.0 == x).map(|h| &h.1).collect();
        assert!(hs.windows(2).all(|w| w[0] == w[1]), "{x}: {hs:?}");
        hs[0].clone()
    };
    assert_eq!(of("0.0"), of("-0.0"));
    assert_eq!(of("NaN"), of("-NaN"));
    assert_ne!(of("0.0"), of("NaN"));
}
