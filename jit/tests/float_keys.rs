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
        for (executor, m) in forward_x(&mut both, x) {
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

/// A map parameter copied into a local: the config's `-0.0` key is stored as `0.0`, and
/// `get`, `set` and `delete` on the local reach it with either zero.
const LOCAL_SOURCE: &str = "\
state:
    pass

init(weights: Map<float, int>):
    pass

req(rpc):
    w = weights
    match parse_float(get_rpc_header(rpc, 'x-x')):
        Some(f) =>
            match get(w, f):
                Some(n) => set_rpc_header(rpc, 'x-found', str(n))
                None => pass
            set(w, f, 7)
            delete(w, -f)
            keys = ''
            foreach(w, lambda(k, v):
                keys = keys + str(k) + '=' + str(v) + ' '
            )
            set_rpc_header(rpc, 'x-keys', keys)
        None => pass
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

#[test]
fn a_local_map_has_one_zero_key_in_both_executors() {
    use std::collections::BTreeMap;
    use weft_hostcalls::Value;
    use weft_ir::check::{CheckEnv, check};
    use weft_ir::diag::{SourceFile, render_all};

    let (_, method) = common::echo_element("logging");
    let src = SourceFile::new("local.weft", LOCAL_SOURCE.to_owned());
    let (ast, diags) = weft_ir::parser::parse(&src);
    assert!(diags.is_empty(), "{}", render_all(&src, &diags));
    let weights = BTreeMap::from([
        (Value::Float(-0.0), Value::Int(1)),
        (Value::Float(2.5), Value::Int(2)),
    ]);
    let params = BTreeMap::from([("weights".to_owned(), Value::Map(weights))]);
    let env = CheckEnv {
        name: "local".into(),
        method: Some(&method),
        params: Some(&params),
    };
    let (e, diags) = check(&ast, &env);
    let e = e.unwrap_or_else(|| panic!("{}", render_all(&src, &diags)));
    let mut both = BothExecutors::new(std::sync::Arc::new(e), "local");
    // `delete(w, -f)` removes the other zero, or nothing.
    for (x, keys) in [
        ("0.0", "2.5=2 "),
        ("-0.0", "2.5=2 "),
        ("2.5", "0.0=1 2.5=7 "),
    ] {
        for (executor, m) in forward_x(&mut both, x) {
            let h = |k: &str| m.headers.get(k).map(String::as_str);
            let found = if x == "2.5" { "2" } else { "1" };
            assert_eq!(h("x-found"), Some(found), "{executor}, {x}");
            assert_eq!(h("x-keys"), Some(keys), "{executor}, {x}");
        }
    }
}

/// A request whose header `x-x` is `x`, through both executors: the message each forwards.
fn forward_x(both: &mut BothExecutors, x: &str) -> Vec<(&'static str, Message)> {
    let request = || {
        let mut m = Message::request(vec![]);
        m.headers.insert("x-x".into(), x.into());
        m
    };
    both.request(request)
        .into_iter()
        .map(|(executor, out)| match out.verdict {
            Verdict::Forward(m) => (executor, m),
            other => panic!("{executor}, {x}: {other:?}"),
        })
        .collect()
}
