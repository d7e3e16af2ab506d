#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Invalid chain configs get an error naming the edge and the element.

mod planner_common;

use weft_ir::cost::CostTable;
use weft_ir::plan::{PlanOptions, plan_edge};

fn plan_error(chain: &str) -> String {
    match planner_common::load(chain) {
        Err(e) => e.to_string(),
        Ok(edge) => match plan_edge(&edge, &CostTable::paper(), &PlanOptions::default()) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("the config was accepted:\n{chain}"),
        },
    }
}

fn assert_names(err: &str, element: &str) {
    assert!(err.contains("edge `frontend->echo`"), "{err}");
    assert!(err.contains(&format!("`{element}`")), "{err}");
}

#[test]
fn unknown_element() {
    let err = plan_error("    any: [logging, firewal]\n");
    assert_names(&err, "firewal");
    assert!(err.contains("did you mean `firewall`?"), "{err}");
}

#[test]
fn pair_not_closed() {
    let err = plan_error(
        "    pair:\n      - [{element: encrypt, name: enc, params: {field: body, key: k}}]\n",
    );
    assert_names(&err, "enc");
    assert!(err.contains("not closed"), "{err}");
}

#[test]
fn contradictory_pins() {
    // A side pin that contradicts the list.
    let err = plan_error("    client:\n      - {element: logging, side: server}\n");
    assert_names(&err, "logging");
    // `untrusted` and `processor: lib`.
    let err = plan_error("    any:\n      - {element: logging, untrusted: true, processor: lib}\n");
    assert_names(&err, "logging");
    // `hot_upgrade` on the SmartNIC, which reloads rather than swaps code.
    let err =
        plan_error("    any:\n      - {element: metrics, hot_upgrade: true, processor: nic}\n");
    assert_names(&err, "metrics");
    assert!(err.contains("hot_upgrade"), "{err}");
    // A processor that cannot run the element: the NIC has no channel sink.
    let err = plan_error("    any:\n      - {element: logging, processor: nic}\n");
    assert_names(&err, "logging");
    assert!(err.contains("channel `log`"), "{err}");
    // Strong shared state needs the store the NIC cannot reach.
    let err = plan_error("    any:\n      - {element: users_strong, processor: nic}\n");
    assert_names(&err, "users_strong");
    // A client pin after a server pin.
    let err = plan_error(
        "    any:\n      - {element: metrics, side: server}\n      - {element: logging, side: client}\n",
    );
    assert_names(&err, "logging");
    assert!(err.contains("`metrics`"), "{err}");
}
