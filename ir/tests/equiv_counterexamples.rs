#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Layouts the checker called equivalent that the simulator tells apart. Each test gives the
//! configured chain, the layout, and a stream on which the simulator — the oracle — shows
//! the difference, then asks the checker, which must refuse the layout.

mod planner_common;

use weft_ir::config::{Observation, Side};
use weft_ir::equiv::Checker;
use weft_ir::layout::Layout;
use weft_ir::load::LoadedEdge;
use weft_ir::sim::{Outcome, SimOptions, SimReport, parse_trace, simulate_layout};

/// The configured layout with `order` (names) and the elements in `server` on the server side.
fn layout(c: &Checker, order: &[&str], server: &[&str]) -> Layout {
    let names = c.names().to_vec();
    let idx = |n: &str| names.iter().position(|x| x == n).unwrap();
    let mut sides = c.canonical().sides.clone();
    for s in server {
        sides[idx(s)] = Side::Server;
    }
    Layout {
        order: order.iter().map(|n| idx(n)).collect(),
        sides,
    }
}

/// The configured chain's report and the layout's, on `trace` (JSON lines).
fn both(edge: &LoadedEdge, c: &Checker, l: &Layout, trace: &[&str]) -> (SimReport, SimReport) {
    let lines = parse_trace(&trace.join("\n")).unwrap();
    let opts = SimOptions { seed: 1 };
    let a = simulate_layout(edge, &lines, opts, 0.5, c.canonical()).unwrap();
    let b = simulate_layout(edge, &lines, opts, 0.5, l).unwrap();
    (a, b)
}

fn outcomes(r: &SimReport) -> Vec<Outcome> {
    r.results.iter().map(|x| x.outcome).collect()
}

fn rpc(id: u32, t: f64, src: &str) -> String {
    format!(
        r#"{{"id": {id}, "t": {t}, "src": "{src}", "req": {{"user": "alice", "body": "hi"}}, "resp": {{"body": "r"}}}}"#
    )
}

/// Every instance that starts runs `init`, which writes strong shared state again. The
/// checker counted that only for a variable the handlers also change; but the control plane
/// changes shared state too (and is never replayed into a new instance), so `gate_strong`'s
/// `init` reopens a switch the control plane closed whenever a new instance starts — on the
/// client side a new caller starts one, on the server side the one replica's instance is
/// already running.
#[test]
fn init_rewriting_shared_state_the_control_plane_set_keeps_the_side() {
    let edge = planner_common::load("    any: [gate_strong]\n").unwrap();
    let mut c = Checker::new(&edge).unwrap();
    let moved = layout(&c, &["gate_strong"], &["gate_strong"]);
    let closed =
        r#"{"t": 1, "control": {"element": "gate_strong", "var": "open", "value": false}}"#;
    let trace = [
        rpc(1, 0.0, "frontend-0"),
        closed.to_owned(),
        rpc(2, 2.0, "frontend-1"),
    ];
    let trace: Vec<&str> = trace.iter().map(String::as_str).collect();
    let (configured, server) = both(&edge, &c, &moved, &trace);
    // Client side: frontend-1's instance starts at t=2 and its `init` reopens the switch.
    assert_eq!(outcomes(&configured), [Outcome::Ok, Outcome::Ok]);
    assert_eq!(outcomes(&server), [Outcome::Ok, Outcome::Rejected]);
    let v = c.check(&moved, Observation::Weak);
    assert!(!v.equivalent, "{}", v.reason);
    assert!(v.reason.contains("`open`"), "{}", v.reason);
}

/// The same through the config's `state:`, which only the element's first instance applies
/// (it is shared state) while every instance runs `init`: the second caller's instance
/// reopens what the config closed.
#[test]
fn init_rewriting_shared_state_the_config_set_keeps_the_side() {
    let edge =
        planner_common::load("    any: [{element: gate_strong, state: {open: false}}]\n").unwrap();
    let mut c = Checker::new(&edge).unwrap();
    let moved = layout(&c, &["gate_strong"], &["gate_strong"]);
    let trace = [rpc(1, 0.0, "frontend-0"), rpc(2, 1.0, "frontend-1")];
    let trace: Vec<&str> = trace.iter().map(String::as_str).collect();
    let (configured, server) = both(&edge, &c, &moved, &trace);
    assert_eq!(outcomes(&configured), [Outcome::Rejected, Outcome::Ok]);
    assert_eq!(outcomes(&server), [Outcome::Rejected, Outcome::Rejected]);
    let v = c.check(&moved, Observation::Weak);
    assert!(!v.equivalent, "{}", v.reason);
}

/// `init` that copies shared state into local state gives each instance the value the
/// shared variable had when it started, and when an instance starts depends on its side.
/// The checker counted only a copy of state the handlers change; the control plane changes
/// shared state too.
#[test]
fn init_copying_shared_state_into_local_state_keeps_the_side() {
    let edge = planner_common::load("    any: [snap_level]\n").unwrap();
    let mut c = Checker::new(&edge).unwrap();
    let moved = layout(&c, &["snap_level"], &["snap_level"]);
    let raise = r#"{"t": 1, "control": {"element": "snap_level", "var": "level", "value": 1}}"#;
    let trace = [
        rpc(1, 0.0, "frontend-0"),
        raise.to_owned(),
        rpc(2, 2.0, "frontend-1"),
    ];
    let trace: Vec<&str> = trace.iter().map(String::as_str).collect();
    let (configured, server) = both(&edge, &c, &moved, &trace);
    // Client side: frontend-1's instance starts after the raise and copies 1.
    assert_eq!(outcomes(&configured), [Outcome::Ok, Outcome::Rejected]);
    assert_eq!(outcomes(&server), [Outcome::Ok, Outcome::Ok]);
    let v = c.check(&moved, Observation::Weak);
    assert!(!v.equivalent, "{}", v.reason);
    assert!(v.reason.contains("`snap`"), "{}", v.reason);
}

/// The right side of `and`/`or` runs only when the left side does not decide the result,
/// so a read-modify-write there updates state depending on the left side. The taint
/// analysis gave both sides the statement's control dependencies only, so `viporcount`'s
/// count looked independent of the header `viptag` sets, and the checker let the two swap.
#[test]
fn a_write_on_the_right_of_or_depends_on_its_left_side() {
    let edge = planner_common::load("    any: [viptag, viporcount]\n").unwrap();
    let mut c = Checker::new(&edge).unwrap();
    let swapped = layout(&c, &["viporcount", "viptag"], &[]);
    let trace = [rpc(1, 0.0, "frontend-0"), rpc(2, 1.0, "frontend-0")];
    let trace: Vec<&str> = trace.iter().map(String::as_str).collect();
    let (configured, moved) = both(&edge, &c, &swapped, &trace);
    let served = |r: &SimReport| r.state["viporcount@frontend-0"]["served"].clone();
    // Configured, every request is marked before it is counted: nothing is counted.
    assert_eq!(format!("{:?}", served(&configured)), "Map({})");
    assert_ne!(served(&configured), served(&moved));
    let v = c.check(&swapped, Observation::Weak);
    assert!(!v.equivalent, "{}", v.reason);
    assert!(v.reason.contains("viporcount"), "{}", v.reason);
}

/// `+` on strings fails past 64 MiB (`MAX_VALUE_LEN`), which rejects the request with
/// INTERNAL, so `mutation` (`prefix + get(rpc, field)`) can stop a request whose field is
/// that long. The checker took it for an element that never stops and let `local_counter`
/// move ahead of it, where it also counts the requests `mutation` rejects.
#[test]
fn a_concatenation_past_the_value_limit_stops_the_request() {
    let edge = planner_common::load(
        "    any: [{element: mutation, name: mutation, params: {field: body}}, local_counter]\n",
    )
    .unwrap();
    let mut c = Checker::new(&edge).unwrap();
    let swapped = layout(&c, &["local_counter", "mutation"], &[]);
    let huge = "a".repeat(weft_hostcalls::builtins::MAX_VALUE_LEN);
    let trace = [format!(
        r#"{{"id": 1, "t": 0, "src": "frontend-0", "req": {{"user": "alice", "body": "{huge}"}}, "resp": {{"body": "r"}}}}"#
    )];
    drop(huge);
    let trace: Vec<&str> = trace.iter().map(String::as_str).collect();
    let (configured, moved) = both(&edge, &c, &swapped, &trace);
    assert_eq!(outcomes(&configured), [Outcome::Rejected]);
    assert_eq!(outcomes(&moved), [Outcome::Rejected]);
    let count = |r: &SimReport| {
        r.state
            .get("local_counter@frontend-0")
            .map(|s| format!("{:?}", s["count"]))
    };
    // Configured, the request never reaches the counter (no instance even starts).
    assert_eq!(count(&configured), None);
    assert_eq!(count(&moved).as_deref(), Some("Int(1)"));
    let v = c.check(&swapped, Observation::Weak);
    assert!(!v.equivalent, "{}", v.reason);
}

/// `encrypt` refuses a plaintext whose sealed text would pass the same 64 MiB limit, so the
/// first half of an encrypt/decrypt pair can stop a request too; the checker let
/// `local_counter` leave the pair for the front, where it counts requests `enc` rejects.
#[test]
fn encrypting_past_the_value_limit_stops_the_request() {
    let edge = planner_common::load(
        "    any: [local_counter]\n    pair:\n      - [{element: encrypt, name: enc, params: {field: body, key: k}}, {element: decrypt, name: dec, params: {field: body, key: k}}]\n",
    )
    .unwrap();
    let mut c = Checker::new(&edge).unwrap();
    assert_eq!(c.names(), ["enc", "local_counter", "dec"]);
    let moved = layout(&c, &["local_counter", "enc", "dec"], &[]);
    let huge = "a".repeat(weft_hostcalls::builtins::MAX_VALUE_LEN);
    let trace = [format!(
        r#"{{"id": 1, "t": 0, "src": "frontend-0", "req": {{"user": "alice", "body": "{huge}"}}, "resp": {{"body": "r"}}}}"#
    )];
    drop(huge);
    let trace: Vec<&str> = trace.iter().map(String::as_str).collect();
    let (configured, front) = both(&edge, &c, &moved, &trace);
    assert_eq!(outcomes(&configured), [Outcome::Rejected]);
    assert_eq!(configured.results[0].by.as_deref(), Some("enc"));
    let counted = |r: &SimReport| r.state.contains_key("local_counter@frontend-0");
    assert!(!counted(&configured) && counted(&front));
    let v = c.check(&moved, Observation::Weak);
    assert!(!v.equivalent, "{}", v.reason);
}
