//! Where the runtime runs an edge's `any` elements: the planner's choice, except that an
//! element whose state the checker takes as shared by every process stays on its configured
//! side, since this runtime keeps that state per process.
#![allow(clippy::unwrap_used)]

mod common;

use common::examples;
use weft_ir::config::{Config, Side};
use weft_ir::load::load_edge;
use weft_runtime::placement::in_process_layout;

#[test]
fn an_element_with_shared_state_keeps_its_configured_side() {
    // Figure 3: client [logging, loadbalance], any [ratelimit_replica, firewall]. The
    // planner alone moves the rate limiter (strong state keyed by server replica) to the
    // server, where one process would count every frontend's requests.
    let config = Config::load(&examples().join("planner/weft.yaml")).unwrap();
    let edge = load_edge(&config, "figure3").unwrap();
    let names: Vec<_> = edge.elements.iter().map(|e| e.use_.name.as_str()).collect();
    assert_eq!(
        names,
        ["logging", "loadbalance", "ratelimit_replica", "firewall"]
    );
    let layout = in_process_layout(&edge, 1_000_000).unwrap();
    assert_eq!(
        layout.sides[2],
        Side::Client,
        "ratelimit_replica moved: {layout:?}"
    );
}

#[test]
fn an_element_without_shared_state_is_still_moved() {
    // A stateless firewall joins the server's segment: with nothing left on the client
    // side, the client segment (and its cost) disappears.
    let yaml = "protos: [echo.proto]\nedges:\n  e:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    any:\n      - firewall: {field: user, deny: [mallory]}\n    server:\n      - logging\n";
    let config = Config::parse("x.yaml", &examples().join("echo"), yaml).unwrap();
    let edge = load_edge(&config, "e").unwrap();
    let layout = in_process_layout(&edge, 1_000_000).unwrap();
    assert_eq!(layout.sides, [Side::Server; 2], "{layout:?}");
}
