#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The checker on the cases its model is about: the response path, rejections travelling
//! up, per-instance state and sides, shared state, encrypt/decrypt pairs. Each expectation
//! follows from the element sources, stated next to it.

mod planner_common;

use weft_ir::config::{Observation, Side};
use weft_ir::equiv::{Checker, Verdict};
use weft_ir::layout::Layout;

fn checker(chain: &str) -> Checker {
    Checker::new(&planner_common::load(chain).unwrap()).unwrap()
}

/// The configured layout with `order` (names) and the given sides (`name=server`).
fn check(c: &mut Checker, order: &[&str], server: &[&str], obs: Observation) -> Verdict {
    let names = c.names().to_vec();
    let idx = |n: &str| names.iter().position(|x| x == n).unwrap();
    let mut sides = c.canonical().sides.clone();
    for s in server {
        sides[idx(s)] = Side::Server;
    }
    let layout = Layout {
        order: order.iter().map(|n| idx(n)).collect(),
        sides,
    };
    c.check(&layout, obs)
}

#[test]
fn a_response_header_written_below_is_read_above() {
    // respguard reads the response's `x-user` on the way back; tagger writes it in its own
    // response handler. With tagger after respguard (closer to the server), tagger's resp
    // runs first and respguard sees the header; swapped, it does not.
    let mut c = checker("    consistency: weak\n    any: [respguard, tagger]\n");
    let v = check(&mut c, &["tagger", "respguard"], &[], Observation::Weak);
    assert!(!v.equivalent);
    assert!(
        v.reason.contains("`respguard`")
            && v.reason.contains("header `x-user`")
            && v.reason.contains("tagger")
            && v.reason.contains("response path"),
        "{}",
        v.reason
    );
}

#[test]
fn rejections_travel_up_through_earlier_response_handlers() {
    // metrics counts failed responses in its resp handler; firewall's rejections reach
    // metrics' resp only when metrics is ahead of firewall.
    let mut c = checker(
        "    consistency: weak\n    any: [metrics, {element: firewall, name: firewall, params: {field: user, deny: [eve]}}]\n",
    );
    let v = check(&mut c, &["firewall", "metrics"], &[], Observation::Weak);
    assert!(!v.equivalent);
    assert!(
        v.reason.contains("`metrics`") && v.reason.contains("`firewall`"),
        "{}",
        v.reason
    );
    // logging has no state: under weak consistency its records do not count, so it may
    // move behind the firewall; under strong it may not (it would stop logging rejected
    // requests).
    let mut c = checker(
        "    any: [logging, {element: firewall, name: firewall, params: {field: user, deny: [eve]}}]\n",
    );
    assert!(check(&mut c, &["firewall", "logging"], &[], Observation::Weak).equivalent);
    let v = check(&mut c, &["firewall", "logging"], &[], Observation::Strong);
    assert!(
        !v.equivalent && v.reason.contains("channel `log`"),
        "{}",
        v.reason
    );
}

#[test]
fn local_state_keeps_its_side_and_shared_state_moves() {
    // The standard ratelimit keeps its bucket in local state: one per calling replica on the
    // client side, one per server replica on the server side.
    let mut c = checker("    any: [ratelimit]\n");
    let v = check(&mut c, &["ratelimit"], &["ratelimit"], Observation::Weak);
    assert!(!v.equivalent);
    assert!(v.reason.contains("local state `tokens`"), "{}", v.reason);
    // users_strong counts in strong shared state that init does not touch: one variable
    // wherever it runs.
    let mut c = checker("    any: [users_strong]\n");
    assert!(
        check(
            &mut c,
            &["users_strong"],
            &["users_strong"],
            Observation::Strong
        )
        .equivalent
    );
    // boot_strong's init writes its shared counter, and every instance that starts runs init.
    let mut c = checker("    any: [boot_strong]\n");
    let v = check(
        &mut c,
        &["boot_strong"],
        &["boot_strong"],
        Observation::Strong,
    );
    assert!(!v.equivalent);
    assert!(v.reason.contains("re-initialises"), "{}", v.reason);
    // A firewall only reads state its init wrote: the same in every instance.
    let mut c = checker(
        "    any: [{element: firewall, name: firewall, params: {field: user, deny: [eve]}}]\n",
    );
    assert!(check(&mut c, &["firewall"], &["firewall"], Observation::Strong).equivalent);
}

#[test]
fn weak_replicas_and_random_streams_are_per_instance() {
    let mut c = checker("    any: [hits_weak]\n");
    let v = check(&mut c, &["hits_weak"], &["hits_weak"], Observation::Weak);
    assert!(
        !v.equivalent && v.reason.contains("weak replica"),
        "{}",
        v.reason
    );
    let mut c = checker("    any: [fault]\n");
    let v = check(&mut c, &["fault"], &["fault"], Observation::Weak);
    assert!(
        !v.equivalent && v.reason.contains("random stream"),
        "{}",
        v.reason
    );
}

#[test]
fn encrypt_and_decrypt_cancel_when_nothing_touches_the_field_between() {
    let pair = "    pair:\n      - [{element: encrypt, name: enc, params: {field: body, key: k}}, {element: decrypt, name: dec, params: {field: body, key: k}}]\n";
    // A firewall on `user` sits between the pair in the configured chain (any elements run
    // between the two halves); it does not touch `body`, so it may run after decrypt.
    let mut c = checker(&format!(
        "    any: [{{element: firewall, name: fw, params: {{field: user, deny: [eve]}}}}]\n{pair}"
    ));
    assert_eq!(c.names(), ["enc", "fw", "dec"]);
    assert!(check(&mut c, &["enc", "dec", "fw"], &["fw"], Observation::Strong).equivalent);
    // A firewall on `body` reads the ciphertext there; after decrypt it would read the
    // plaintext.
    let mut c = checker(&format!(
        "    any: [{{element: firewall, name: fw, params: {{field: body, deny: [eve]}}}}]\n{pair}"
    ));
    let v = check(&mut c, &["enc", "dec", "fw"], &["fw"], Observation::Strong);
    assert!(!v.equivalent);
    assert!(
        v.reason.contains("`fw`") && v.reason.contains("`body`"),
        "{}",
        v.reason
    );
    // A mutation of `body` between them changes the ciphertext, so decrypt can reject: it
    // may not leave the pair either.
    let mut c = checker(&format!(
        "    any: [{{element: mutation, name: mu, params: {{field: body}}}}]\n{pair}"
    ));
    assert!(!check(&mut c, &["enc", "dec", "mu"], &["mu"], Observation::Weak).equivalent);
}

#[test]
fn a_stopped_request_reports_its_routing() {
    // headerguard rejects; a stopped request is reported with the `dst` it had, so a router
    // may not move across a stopper even when neither has state. dynheader writes a header
    // named by `user` — possibly `dst`.
    let mut c = checker("    consistency: weak\n    any: [dynheader, headerguard]\n");
    assert!(
        !check(
            &mut c,
            &["headerguard", "dynheader"],
            &[],
            Observation::Weak
        )
        .equivalent
    );
}

#[test]
fn a_write_to_a_nested_field_overlaps_a_read_of_its_parent() {
    use std::path::Path;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = format!(
        "protos: [{}]\nelement_paths: [{}]\nedges:\n  a->b:\n    from: a\n    to: b\n    method: nested.Svc/Call\n    any:\n      - {{element: fieldset, name: mu, params: {{field: who.name}}}}\n      - who_size\n      - {{element: fieldset, name: mu_body, params: {{field: body}}}}\n",
        root.join("tests/protos/planner_nested.proto").display(),
        root.join("tests/elements").display(),
    );
    let cfg = weft_ir::config::Config::parse("weft.yaml", root, &text).unwrap();
    let edge = weft_ir::load::load_edge(&cfg, "a->b").unwrap();
    let mut c = Checker::new(&edge).unwrap();
    // who_size measures `who`, which contains `who.name`, which mu sets. (`fieldset`, not
    // `mutation`: a join may fail, and a writer that may stop keeps its order with who_size
    // whatever it writes.)
    let v = check(
        &mut c,
        &["who_size", "mu", "mu_body"],
        &[],
        Observation::Strong,
    );
    assert!(!v.equivalent);
    assert!(
        v.reason.contains("`who_size`") && v.reason.contains("`mu`"),
        "{}",
        v.reason
    );
    // `body` is not inside `who`: mu_body may move ahead of who_size.
    assert!(
        check(
            &mut c,
            &["mu", "mu_body", "who_size"],
            &[],
            Observation::Strong
        )
        .equivalent
    );
}

#[test]
fn an_early_return_in_a_lambda_makes_the_rest_depend_on_its_condition() {
    // vipcount's read-modify-write returns early for a request viptag marked, so whether
    // the count goes up depends on the header: with viptag first no request is counted,
    // with vipcount first every one is.
    let mut c = checker("    any: [viptag, vipcount]\n");
    let v = check(&mut c, &["vipcount", "viptag"], &[], Observation::Weak);
    assert!(!v.equivalent, "the reorder was accepted");
    assert!(v.reason.contains("vipcount"), "{}", v.reason);
}

#[test]
fn a_loop_may_fail_so_an_element_after_it_may_not_see_the_request() {
    // tagpairs' nested loops over the request's tags reject it with INTERNAL past the
    // iteration limit (1 000 tags are enough), so local_counter after tagpairs counts fewer
    // requests than before it. Nothing else ties the two: tagpairs reads the tags and writes
    // the priority, local_counter writes its state and a header.
    let mut c = checker("    consistency: weak\n    any: [local_counter, tagpairs]\n");
    let v = check(
        &mut c,
        &["tagpairs", "local_counter"],
        &[],
        Observation::Weak,
    );
    assert!(!v.equivalent, "{}", v.reason);
    assert!(v.reason.contains("`tagpairs`"), "{}", v.reason);
}

/// `fieldset` writing `field` and `firewall` reading `read` of ir/tests/protos/oneof.proto,
/// checked in the order firewall, fieldset. (`fieldset` cannot fail; `mutation`'s join can,
/// and two elements that may stop keep their order whatever they touch.)
fn firewall_first_on_oneof(field: &str, read: &str) -> Verdict {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = format!(
        "protos: [{}]\nelement_paths: [{}, {}]\nedges:\n  e:\n    from: frontend\n    to: backend\n    method: oneof.S/Call\n    consistency: weak\n    any:\n      - fieldset: {{field: {field}}}\n      - firewall: {{field: {read}, deny: [bad]}}\n",
        root.join("tests/protos/oneof.proto").display(),
        root.join("../elements").display(),
        root.join("tests/elements").display(),
    );
    let cfg = weft_ir::config::Config::parse("weft.yaml", root, &text).unwrap();
    let edge = weft_ir::load::load_edge(&cfg, "e").unwrap();
    let mut c = Checker::new(&edge).unwrap();
    check(&mut c, &["firewall", "fieldset"], &[], Observation::Weak)
}

/// Writing a member of a oneof clears the others, so it writes them too: with `fieldset`
/// setting `a` first, `firewall` sees `b` empty and lets `{b: bad}` through; moved ahead, it
/// refuses it. The checker called that order equivalent, and the planner picked it (a
/// review found it). The same holds one message down, for a oneof inside `inner`, and a
/// field outside the oneof still commutes.
#[test]
fn writing_a_oneof_member_writes_its_siblings() {
    for (field, read) in [("a", "b"), ("inner.x", "inner.y")] {
        let v = firewall_first_on_oneof(field, read);
        assert!(!v.equivalent, "{field} then {read}: {}", v.reason);
    }
    let v = firewall_first_on_oneof("a", "user");
    assert!(v.equivalent, "{}", v.reason);
}

#[test]
fn a_response_handler_that_can_fail_is_named_for_failing_not_for_writing() {
    // bodycount counts empty response bodies on the way back. servedheader writes only a
    // response header, but from a field, so it can fail at run time, turning the response
    // into an error without a body. Configured, servedheader is closer to the server and
    // bodycount sees its failures; swapped, bodycount does not. servedheader never writes
    // `body`, so the reason must say it can fail, not that it changes the body.
    let mut c = checker("    consistency: weak\n    any: [servedheader, bodycount]\n");
    let v = check(
        &mut c,
        &["bodycount", "servedheader"],
        &[],
        Observation::Weak,
    );
    assert!(!v.equivalent);
    assert!(
        v.reason.contains("`servedheader` can fail at run time")
            && v.reason.contains("`body`")
            && !v.reason.contains("changes it"),
        "{}",
        v.reason
    );
}
