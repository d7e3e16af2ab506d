#![allow(clippy::unwrap_used)]
//! Scenarios for the standard elements that look at or change message contents, or observe
//! them: cache, encrypt/decrypt, mutation, logging, metrics — and how rejections and local
//! replies travel back up through the `resp` handlers of the elements above them
//! (LANGUAGE.md §6).
//!
//! Every expected value below is derived from the element's source (elements/*.weft) and
//! LANGUAGE.md, not copied from a run.

mod common;

use std::collections::BTreeSet;

use base64::Engine as _;
use common::*;
use serde_json::json;
use weft_hostcalls::{Code, MsgKind, Value, builtins};
use weft_ir::config::Config;
use weft_ir::load::load_edge;
use weft_ir::sim::{Outcome, SimOptions, parse_trace, simulate};

// ---------------------------------------------------------------------------------------------
// cache

#[test]
fn cache_answers_repeats_locally_and_never_stores_errors() {
    let sc = Scenario::new("client:\n  - cache: {field: body}");
    let trace = vec![
        rpc(1, 0.0)
            .body("x")
            .resp(json!({"body": "X1", "served_by": "s1"})),
        // Same key: answered from the cache; the server's answer in the trace is never used.
        rpc(2, 1.0)
            .body("x")
            .resp(json!({"body": "not from the server"})),
        // An error response is not stored...
        rpc(3, 2.0).body("y").status("UNAVAILABLE"),
        // ...so the next request for `y` goes to the server, and its success is stored.
        rpc(4, 3.0).body("y").resp(json!({"body": "Y"})),
        rpc(5, 4.0)
            .body("y")
            .resp(json!({"body": "not from the server"})),
        // Overlapping misses: both reach the server (nothing stored yet at t = 6); the later
        // answer (6's, at t = 7) overwrites the earlier one (7's, at t = 6).
        rpc(6, 5.0)
            .body("z")
            .t_resp(7.0)
            .resp(json!({"body": "Z6"})),
        rpc(7, 6.0).body("z").resp(json!({"body": "Z7"})),
        rpc(8, 8.0).body("z"),
        // An empty key (proto3 cannot tell it from unset) is neither stored nor answered:
        // every request without the field would otherwise share one answer.
        rpc(9, 9.0).body("").resp(json!({"body": "anon"})),
        rpc(10, 10.0).body("").resp(json!({"body": "bob's"})),
    ];
    let report = sc.run(trace);

    let r1 = result(&report, 1);
    assert_ok(r1);
    assert_eq!(r1.server_saw, Some(json!({"body": "x"})));
    assert_eq!(
        r1.client_got,
        Some(json!({"body": "X1", "served_by": "s1"}))
    );

    let r2 = result(&report, 2);
    assert_eq!(
        (r2.outcome, r2.status, r2.server_saw.clone()),
        (Outcome::Replied, Code::Ok, None)
    );
    assert_eq!(
        r2.client_got,
        Some(json!({"body": "X1", "served_by": "s1"}))
    );

    let r3 = result(&report, 3);
    assert_eq!((r3.outcome, r3.status), (Outcome::Ok, Code::Unavailable));
    let r4 = result(&report, 4);
    assert_ok(r4);
    assert_eq!(r4.client_got, Some(json!({"body": "Y"})));
    let r5 = result(&report, 5);
    assert_eq!(
        (r5.outcome, r5.server_saw.clone()),
        (Outcome::Replied, None)
    );
    assert_eq!(r5.client_got, Some(json!({"body": "Y"})));

    assert_ok(result(&report, 6));
    assert_ok(result(&report, 7));
    let r8 = result(&report, 8);
    assert_eq!(r8.outcome, Outcome::Replied);
    assert_eq!(r8.client_got, Some(json!({"body": "Z6"})));
    let r10 = result(&report, 10);
    assert_ok(r10);
    assert_eq!(r10.client_got, Some(json!({"body": "bob's"})));

    // The cache holds one successful response per key.
    let Value::Map(cache) = state(&report, "cache@client", "cache") else {
        panic!("cache is a map")
    };
    let stored: Vec<(String, serde_json::Value)> = cache
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().to_owned(), sc.decode(msg(v))))
        .collect();
    // Keyed by the method and the field's value.
    let key = |v: &str| format!("{METHOD} {v}");
    assert_eq!(
        stored,
        [
            (key("x"), json!({"body": "X1", "served_by": "s1"})),
            (key("y"), json!({"body": "Y"})),
            (key("z"), json!({"body": "Z6"})),
        ]
    );
}

/// The keys the cache holds, without the method prefix, and the body each answers with.
fn cached(sc: &Scenario, report: &weft_ir::sim::SimReport) -> Vec<(String, serde_json::Value)> {
    let Value::Map(cache) = state(report, "cache@client", "cache") else {
        panic!("cache is a map")
    };
    let prefix = format!("{METHOD} ");
    cache
        .iter()
        .map(|(k, v)| {
            let k = k
                .as_str()
                .unwrap()
                .strip_prefix(&prefix)
                .unwrap()
                .to_owned();
            (k, sc.decode(msg(v))["body"].clone())
        })
        .collect()
}

#[test]
fn cache_at_capacity_evicts_the_response_stored_longest_ago() {
    let sc = Scenario::new("client:\n  - cache: {field: body, capacity: 2}");
    let trace = vec![
        rpc(1, 0.0).body("a").resp(json!({"body": "A1"})),
        rpc(2, 1.0).body("b").resp(json!({"body": "B2"})),
        // A hit does not refresh `a`: eviction is by insertion, not by use.
        rpc(3, 2.0)
            .body("a")
            .resp(json!({"body": "not from the server"})),
        // A third key in a cache of two: `a`, stored first, goes.
        rpc(4, 3.0).body("c").resp(json!({"body": "C4"})),
        rpc(5, 4.0).body("a").resp(json!({"body": "A5"})),
        // Storing `a` again evicted `b`; `c` is still there.
        rpc(6, 5.0)
            .body("c")
            .resp(json!({"body": "not from the server"})),
        rpc(7, 6.0).body("b").resp(json!({"body": "B7"})),
    ];
    let report = sc.run(trace);
    let replied = |id| result(&report, id).outcome == Outcome::Replied;
    let went_to_server = |id| result(&report, id).server_saw.is_some();
    assert!(went_to_server(1) && went_to_server(2));
    assert!(replied(3));
    assert_eq!(result(&report, 3).client_got, Some(json!({"body": "A1"})));
    assert!(went_to_server(4));
    assert!(went_to_server(5), "`a` was evicted, so it misses");
    assert_eq!(result(&report, 5).client_got, Some(json!({"body": "A5"})));
    assert!(replied(6));
    assert_eq!(result(&report, 6).client_got, Some(json!({"body": "C4"})));
    assert!(went_to_server(7), "`b` was evicted, so it misses");
    // Storing `b` evicted `c`, the oldest left.
    assert_eq!(
        cached(&sc, &report),
        [("a".to_owned(), json!("A5")), ("b".to_owned(), json!("B7"))]
    );
}

#[test]
fn many_distinct_keys_leave_at_most_capacity_entries() {
    // A client sending ever new keys: before `capacity`, the cache grew by one response per
    // key for good.
    let sc = Scenario::new("client:\n  - cache: {field: body, capacity: 3}");
    let mut trace: Vec<Line> = (1..=40)
        .map(|i| {
            rpc(i, i as f64)
                .body(&format!("k{i}"))
                .resp(json!({"body": format!("R{i}")}))
        })
        .collect();
    // The last three keys hit; the first, long evicted, goes to the server again.
    trace.push(rpc(41, 41.0).body("k40"));
    trace.push(rpc(42, 42.0).body("k38"));
    trace.push(rpc(43, 43.0).body("k1").resp(json!({"body": "R1 again"})));
    let report = sc.run(trace);
    for id in 1..=40 {
        assert!(
            result(&report, id).server_saw.is_some(),
            "rpc {id} is a miss"
        );
    }
    assert_eq!(result(&report, 41).outcome, Outcome::Replied);
    assert_eq!(result(&report, 41).client_got, Some(json!({"body": "R40"})));
    assert_eq!(result(&report, 42).outcome, Outcome::Replied);
    let r43 = result(&report, 43);
    assert_ok(r43);
    assert_eq!(r43.server_saw, Some(json!({"body": "k1"})));
    assert_eq!(
        cached(&sc, &report),
        [
            ("k1".to_owned(), json!("R1 again")),
            ("k39".to_owned(), json!("R39")),
            ("k40".to_owned(), json!("R40")),
        ]
    );
}

#[test]
fn cache_without_a_capacity_keeps_a_thousand_responses() {
    // Configs written before `capacity` (`cache: {field: body}`) keep working, bounded.
    let sc = Scenario::new("client:\n  - cache: {field: body}");
    let mut trace: Vec<Line> = (1..=1001)
        .map(|i| rpc(i, i as f64).body(&format!("k{i}")))
        .collect();
    trace.push(rpc(1002, 1002.0).body("k2"));
    trace.push(rpc(1003, 1003.0).body("k1"));
    let report = sc.run(trace);
    assert_eq!(cached(&sc, &report).len(), 1000);
    assert_eq!(result(&report, 1002).outcome, Outcome::Replied);
    assert!(result(&report, 1003).server_saw.is_some(), "k1 was evicted");
}

#[test]
fn cache_refuses_a_capacity_below_one() {
    for capacity in ["0", "-5"] {
        let elements = protos_dir().join("../../../elements");
        let yaml = format!(
            "protos: [scenario.proto]\nelement_paths: [{}]\nedges:\n  app->svc:\n    from: app\n    to: svc\n    method: {METHOD}\n    client:\n      - cache: {{field: body, capacity: {capacity}}}\n",
            elements.display()
        );
        let config = Config::parse("t.yaml", &protos_dir(), &yaml).unwrap();
        let err = load_edge(&config, "app->svc").unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "`cache` has a capacity of {capacity}; it must hold at least one entry"
            )),
            "{err}"
        );
    }
}

#[test]
fn cache_never_answers_one_method_with_anothers_response() {
    // A review: on an edge of two methods keyed by `user`, GetBalance got GetProfile's
    // answer, decoded as a balance.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.proto"),
        "syntax = \"proto3\";\npackage t;\nservice Svc {\n  rpc GetProfile(Req) returns (Profile);\n  rpc GetBalance(Req) returns (Balance);\n}\nmessage Req { string user = 1; }\nmessage Profile { string name = 1; string email = 2; }\nmessage Balance { string account = 1; string iban = 2; }\n",
    )
    .unwrap();
    let elements = protos_dir().join("../../../elements");
    let yaml = format!(
        "protos: [t.proto]\nelement_paths: [{}]\nedges:\n  fe->svc:\n    from: fe\n    to: svc\n    method: t.Svc/*\n    client:\n      - cache: {{field: user}}\n",
        elements.display()
    );
    let config = Config::parse("t.yaml", dir.path(), &yaml).unwrap();
    let edge = load_edge(&config, "fe->svc").unwrap();
    let trace = [
        r#"{"id":1,"t":0,"method":"t.Svc/GetProfile","req":{"user":"alice"},"resp":{"name":"Alice","email":"alice@x"}}"#,
        r#"{"id":2,"t":1,"method":"t.Svc/GetBalance","req":{"user":"alice"},"resp":{"account":"ACC-1","iban":"DE00"}}"#,
        r#"{"id":3,"t":2,"method":"t.Svc/GetProfile","req":{"user":"alice"}}"#,
    ];
    let lines = parse_trace(&trace.join("\n")).unwrap();
    let report = simulate(
        &edge,
        &lines,
        SimOptions { seed: 1 },
        config.sim.weak_sync_interval,
    )
    .unwrap();
    let r2 = result(&report, 2);
    assert_eq!(r2.outcome, Outcome::Ok, "{r2:?}");
    assert_eq!(
        r2.client_got,
        Some(json!({"account": "ACC-1", "iban": "DE00"}))
    );
    let r3 = result(&report, 3);
    assert_eq!(r3.outcome, Outcome::Replied, "{r3:?}");
    assert_eq!(
        r3.client_got,
        Some(json!({"name": "Alice", "email": "alice@x"}))
    );
}

// ---------------------------------------------------------------------------------------------
// encrypt / decrypt

/// Opens a string field sealed by `encrypt`: standard base64 of nonce (24) ‖ ciphertext ‖
/// tag (16).
fn open(field: &str, key: &str) -> Option<String> {
    let sealed = base64::engine::general_purpose::STANDARD
        .decode(field)
        .ok()?;
    String::from_utf8(builtins::decrypt(&sealed, key)?).ok()
}

#[test]
fn encrypt_decrypt_round_trip_with_ciphertext_in_between() {
    let sc = Scenario::new(
        "pair:\n  - [encrypt: {field: body, key: k1}, decrypt: {field: body, key: k1}]\nany:\n  - logging",
    );
    let trace = vec![
        rpc(1, 0.0)
            .user("alice")
            .body("attack at dawn")
            .resp(json!({"body": "ok"})),
        rpc(2, 1.0).user("bob").body("attack at dawn"),
    ];
    let report = sc.run(trace);
    for id in [1, 2] {
        let r = result(&report, id);
        assert_ok(r);
        // The server side decrypted: the service sees the plaintext, other fields untouched.
        assert_eq!(
            r.server_saw.as_ref().unwrap()["body"],
            json!("attack at dawn")
        );
    }
    // Logging, between the two, saw ciphertext: the base64 of a 24-byte nonce, the 14 bytes
    // of the plaintext and a 16-byte tag, that opens under k1 and only k1.
    let logged = records(&report, "logging", "log");
    assert_eq!(logged.len(), 4);
    let mut bodies = Vec::new();
    for rec in logged
        .iter()
        .filter(|r| msg(&r.value).kind == MsgKind::Request)
    {
        let seen = sc.decode(msg(&rec.value));
        let body = seen["body"].as_str().unwrap().to_owned();
        assert_ne!(body, "attack at dawn");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&body)
            .unwrap();
        assert_eq!(raw.len(), 24 + "attack at dawn".len() + 16);
        assert_eq!(open(&body, "k1").as_deref(), Some("attack at dawn"));
        assert_eq!(open(&body, "k2"), None);
        assert_eq!(
            seen["user"],
            json!(if rec.rpc_id == 1 { "alice" } else { "bob" })
        );
        bodies.push(body);
    }
    // A fresh nonce per request: equal plaintexts give different ciphertexts.
    assert_eq!(bodies.len(), 2);
    assert_ne!(bodies[0], bodies[1]);
}

#[test]
fn encrypt_decrypt_round_trip_on_a_bytes_field() {
    let sc = Scenario::new(
        "pair:\n  - [encrypt: {field: blob, key: k}, decrypt: {field: blob, key: k}]\nany:\n  - logging",
    );
    let plain = [0u8, 1, 2, 255, 128];
    let report = sc.run([rpc(1, 0.0).blob(&plain)]);
    let r = result(&report, 1);
    assert_ok(r);
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    assert_eq!(r.server_saw, Some(json!({"blob": b64(&plain)})));
    // In between, bytes stay bytes: nonce ‖ ciphertext ‖ tag, no base64 layer.
    let logged = records(&report, "logging", "log");
    let seen = sc.decode(msg(&logged[0].value));
    let sealed = base64::engine::general_purpose::STANDARD
        .decode(seen["blob"].as_str().unwrap())
        .unwrap();
    assert_eq!(sealed.len(), 24 + plain.len() + 16);
    assert_eq!(builtins::decrypt(&sealed, "k"), Some(plain.to_vec()));
}

#[test]
fn decrypt_rejects_a_wrong_key_and_tampering() {
    let wrong = Scenario::new(
        "pair:\n  - [encrypt: {field: body, key: k1}, decrypt: {field: body, key: k2}]\nclient:\n  - metrics",
    );
    let report = wrong.run([rpc(1, 0.0).body("secret")]);
    assert_rejected(
        result(&report, 1),
        Code::InvalidArgument,
        "decrypt: field body did not authenticate",
    );
    // The rejection travelled up to the client side.
    assert_eq!(state_int(&report, "metrics@client", "failed"), 1);

    // A mutation between the pair prefixes the ciphertext: it no longer decodes, let alone
    // authenticates.
    let tampered = Scenario::new(
        "pair:\n  - [encrypt: {field: body, key: k}, decrypt: {field: body, key: k}]\nany:\n  - mutation: {field: body, prefix: 'weft-'}\n  - logging",
    );
    let report = tampered.run([rpc(1, 0.0).body("secret")]);
    assert_rejected(
        result(&report, 1),
        Code::InvalidArgument,
        "decrypt: field body did not authenticate",
    );
    let logged = records(&report, "logging", "log");
    let body = sc_body(&tampered, &logged[0].value);
    let sealed = body
        .strip_prefix("weft-")
        .expect("the mutation ran on ciphertext");
    assert_eq!(open(sealed, "k").as_deref(), Some("secret"));
    // The error response came back through logging.
    assert_eq!(logged.len(), 2);
    assert_eq!(msg(&logged[1].value).code, Code::InvalidArgument);

    // A field that was never encrypted does not authenticate either.
    let lone = Scenario::new("server:\n  - decrypt: {field: body, key: k}");
    let report = lone.run([rpc(1, 0.0).body("plain")]);
    assert_rejected(
        result(&report, 1),
        Code::InvalidArgument,
        "decrypt: field body did not authenticate",
    );
}

fn sc_body(sc: &Scenario, v: &Value) -> String {
    sc.decode(msg(v))["body"].as_str().unwrap().to_owned()
}

// ---------------------------------------------------------------------------------------------
// mutation

#[test]
fn mutation_prefixes_the_field_and_keeps_the_others() {
    let sc = Scenario::new(
        "client:\n  - mutation: {field: body, prefix: 'pre-'}\n  - element: mutation\n    name: default_prefix\n    params: {field: user}",
    );
    let report = sc.run([
        rpc(1, 0.0).user("alice").body("hello").priority(3).key("k"),
        rpc(2, 1.0),
    ]);
    let r = result(&report, 1);
    assert_ok(r);
    assert_eq!(
        r.server_saw,
        Some(json!({"user": "weft-alice", "body": "pre-hello", "priority": 3, "key": "k"}))
    );
    // Empty fields get the prefix too.
    assert_eq!(
        result(&report, 2).server_saw,
        Some(json!({"user": "weft-", "body": "pre-"}))
    );
}

// ---------------------------------------------------------------------------------------------
// logging

#[test]
fn logging_writes_requests_and_responses_in_event_order() {
    let sc = Scenario::new("client:\n  - logging");
    let trace = vec![
        rpc(1, 0.0)
            .user("a")
            .body("one")
            .t_resp(2.0)
            .resp(json!({"body": "r1"})),
        rpc(2, 1.0)
            .user("b")
            .body("two")
            .t_resp(1.5)
            .status("NOT_FOUND"),
        rpc(3, 3.0)
            .user("c")
            .body("three")
            .resp(json!({"body": "r3"})),
    ];
    let report = sc.run(trace);
    let got: Vec<(u64, f64, MsgKind, serde_json::Value, Code)> = records(&report, "logging", "log")
        .iter()
        .map(|r| {
            let m = msg(&r.value);
            let body = if m.code == Code::Ok {
                sc.decode(m)
            } else {
                json!(null)
            };
            (r.rpc_id, r.time, m.kind, body, m.code)
        })
        .collect();
    use MsgKind::{Request as Q, Response as A};
    assert_eq!(
        got,
        [
            (1, 0.0, Q, json!({"user": "a", "body": "one"}), Code::Ok),
            (2, 1.0, Q, json!({"user": "b", "body": "two"}), Code::Ok),
            (2, 1.5, A, json!(null), Code::NotFound),
            (1, 2.0, A, json!({"body": "r1"}), Code::Ok),
            (3, 3.0, Q, json!({"user": "c", "body": "three"}), Code::Ok),
            (3, 3.0, A, json!({"body": "r3"}), Code::Ok),
        ]
    );
    // Logging only observes.
    for id in [1, 3] {
        assert_ok(result(&report, id));
    }
    assert_eq!(result(&report, 2).status, Code::NotFound);
}

// ---------------------------------------------------------------------------------------------
// metrics

#[test]
fn metrics_records_exact_latencies_and_counts_failures() {
    let sc = Scenario::new("client:\n  - metrics");
    let rpcs = [
        (1, 0.5, Some(0.75), None),
        (2, 1.0, Some(1.3), Some("INTERNAL")),
        (3, 2.0, None, None),
        (4, 2.1, Some(9.7), Some("DEADLINE_EXCEEDED")),
        (5, 3.0, Some(4.0), None),
    ];
    let trace = rpcs.iter().map(|(id, t, tr, st)| {
        let mut l = rpc(*id, *t);
        if let Some(tr) = tr {
            l = l.t_resp(*tr);
        }
        if let Some(st) = st {
            l = l.status(st);
        }
        l
    });
    let report = sc.run(trace);
    // One latency record per RPC, emitted when its response passes, worth t_resp - t
    // (0 when the server answers at once).
    let mut expected: Vec<(u64, f64, f64)> = rpcs
        .iter()
        .map(|(id, t, tr, _)| {
            let done = tr.unwrap_or(*t);
            (*id, done, done - t)
        })
        .collect();
    expected.sort_by(|a, b| a.1.total_cmp(&b.1));
    let got: Vec<(u64, f64, f64)> = records(&report, "metrics", "latency")
        .iter()
        .map(|r| match r.value {
            Value::Float(l) => (r.rpc_id, r.time, l),
            ref other => panic!("latency is a float, got {other:?}"),
        })
        .collect();
    assert_eq!(got, expected);
    assert_eq!(state_int(&report, "metrics@client", "total"), 5);
    assert_eq!(state_int(&report, "metrics@client", "failed"), 2);
}

#[test]
fn metrics_keeps_overlapping_rpcs_apart_whatever_their_trace_ids() {
    // Metadata (`set_metadata('start', …)`) lives per RPC, from its request to its response.
    // A string id and a numeric id, or an RPC without an id (it gets its line number, or a
    // number no id uses when another line has that id), must still be two RPCs.
    let sc = Scenario::new("client:\n  - metrics");
    let trace = [
        Line(json!({"id": "first", "t": 0.0, "t_resp": 5.0})),
        Line(json!({"id": 1, "t": 1.0, "t_resp": 2.0})),
        Line(json!({"t": 1.5, "t_resp": 4.0})),
        Line(json!({"id": "x", "t": 1.75, "t_resp": 3.0})),
        // The line number of the RPC without an id (a numeric id used twice is refused).
        Line(json!({"id": 3, "t": 1.2, "t_resp": 1.4})),
    ];
    let report = sc.run(trace);
    let got: Vec<(f64, f64)> = records(&report, "metrics", "latency")
        .iter()
        .map(|r| (r.time, r.value.as_float().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            (1.4, 1.4 - 1.2),
            (2.0, 1.0),
            (3.0, 3.0 - 1.75),
            (4.0, 2.5),
            (5.0, 5.0)
        ]
    );
    let ids: BTreeSet<u64> = report.channels.iter().map(|r| r.rpc_id).collect();
    assert_eq!(ids.len(), 5, "each RPC has its own rpc_id: {ids:?}");
    // Numeric trace ids are the RPC's id; the RPC without one would have its line number,
    // 3, which line 5 names, so it has the next number no id uses.
    assert!(
        ids.contains(&1) && ids.contains(&3) && ids.contains(&4),
        "{ids:?}"
    );
    assert_eq!(report.results[2].id, json!(4));
    assert_eq!(state_int(&report, "metrics@client", "total"), 5);
}

// ---------------------------------------------------------------------------------------------
// rejections and local replies travelling up (LANGUAGE.md §6)

#[test]
fn a_rejection_travels_up_through_every_resp_handler_above_it() {
    let sc = Scenario::new(
        "client:
  - metrics
  - circuitbreaker: {max_pending: 1}
  - firewall: {field: user, deny: [mallory]}
  - element: metrics
    name: inner
  - ratelimit: {capacity: 10, rate: 1}",
    );
    let trace = vec![
        // Rejected by the firewall: the breaker's slot must be freed on the way up, the
        // outer metrics must count a failure, and nothing below the firewall runs.
        rpc(1, 0.0).user("mallory").t_resp(1.0),
        // With max_pending 1 this only passes if 1 freed its slot.
        rpc(2, 1.0).user("alice").t_resp(3.0),
        // 2 holds the only slot: rejected by the breaker itself.
        rpc(3, 2.0).user("bob"),
        // 2 answered at t = 3, just before this request.
        rpc(4, 3.0).user("carol"),
    ];
    let report = sc.run(trace);
    assert_rejected(result(&report, 1), Code::PermissionDenied, "acl");
    assert_ok(result(&report, 2));
    assert_rejected(result(&report, 3), Code::Unavailable, "circuit_breaker");
    assert_ok(result(&report, 4));

    assert_eq!(state_int(&report, "metrics@client", "total"), 4);
    assert_eq!(state_int(&report, "metrics@client", "failed"), 2);
    assert_eq!(state_int(&report, "circuitbreaker@client", "pending"), 0);
    // Below the rejecting elements only the two admitted RPCs were seen.
    assert_eq!(state_int(&report, "inner@client", "total"), 2);
    assert_eq!(state_int(&report, "inner@client", "failed"), 0);
    // The ratelimit at the bottom took tokens only for 2 (10 - 1 at t = 1) and 4 (refilled
    // to min(10, 9 + 2 × 1) at t = 3, minus 1).
    assert_eq!(state_float(&report, "ratelimit@client", "tokens"), 9.0);

    // Latency records in emit order: rejections answer at once (latency 0); 2's response
    // passes `inner` before the outer `metrics`.
    let got: Vec<(&str, u64, f64)> = report
        .channels
        .iter()
        .map(|r| (&*r.element, r.rpc_id, r.value.as_float().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            ("metrics", 1, 0.0),
            ("metrics", 3, 0.0),
            ("inner", 2, 2.0),
            ("metrics", 2, 2.0),
            ("inner", 4, 0.0),
            ("metrics", 4, 0.0),
        ]
    );
}

#[test]
fn a_local_reply_travels_up_like_a_response() {
    let sc = Scenario::new(
        "client:
  - metrics
  - logging
  - cache: {field: body}
  - element: metrics
    name: inner",
    );
    let trace = vec![
        rpc(1, 0.0)
            .body("q")
            .t_resp(0.5)
            .resp(json!({"body": "answer"})),
        rpc(2, 1.0).body("q"),
    ];
    let report = sc.run(trace);
    assert_ok(result(&report, 1));
    let r2 = result(&report, 2);
    assert_eq!(r2.outcome, Outcome::Replied);
    assert_eq!(r2.client_got, Some(json!({"body": "answer"})));

    // The reply passed logging and the outer metrics (a success, latency 0)...
    assert_eq!(state_int(&report, "metrics@client", "total"), 2);
    assert_eq!(state_int(&report, "metrics@client", "failed"), 0);
    let lat: Vec<(u64, f64)> = records(&report, "metrics", "latency")
        .iter()
        .map(|r| (r.rpc_id, r.value.as_float().unwrap()))
        .collect();
    assert_eq!(lat, [(1, 0.5), (2, 0.0)]);
    let logged: Vec<(u64, MsgKind, serde_json::Value)> = records(&report, "logging", "log")
        .iter()
        .map(|r| (r.rpc_id, msg(&r.value).kind, sc.decode(msg(&r.value))))
        .collect();
    assert_eq!(
        logged,
        [
            (1, MsgKind::Request, json!({"body": "q"})),
            (1, MsgKind::Response, json!({"body": "answer"})),
            (2, MsgKind::Request, json!({"body": "q"})),
            (2, MsgKind::Response, json!({"body": "answer"})),
        ]
    );
    // ...but nothing below the cache saw the repeat.
    assert_eq!(state_int(&report, "inner@client", "total"), 1);
    assert_eq!(records(&report, "inner", "latency").len(), 1);
}
