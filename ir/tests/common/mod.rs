//! Shared helpers for the scenario tests: chain configs from inline YAML over the test schema
//! (`tests/protos/scenario.proto`), traces built line by line as JSON, and accessors for the
//! simulator's report.
//!
//! Every scenario runs through the same public path as `weft sim`: `Config::parse` →
//! `load::load_edge` → `sim::parse_trace` → `sim::simulate`.
#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::{Map, Value as Json, json};
use weft_hostcalls::channel::ChannelRecord;
use weft_hostcalls::{Code, Message, MsgKind, Value};
use weft_ir::config::Config;
use weft_ir::load::{LoadedEdge, load_edge};
use weft_ir::sim::{Outcome, RpcResult, SimOptions, SimReport, parse_trace, simulate};
use weft_ir::wire;

/// The edge every scenario configures: service `app` calls service `svc`.
pub const EDGE: &str = "app->svc";
pub const METHOD: &str = "weft.scenario.Svc/Call";

/// The directory the configs are parsed against (it holds `scenario.proto`).
pub fn protos_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/protos")
}

/// A loaded edge, ready to simulate traces.
pub struct Scenario {
    pub config: Config,
    pub edge: LoadedEdge,
}

impl Scenario {
    /// `chain` is the body of the edge — its `client:`/`any:`/`server:`/`pair:` lists —
    /// written at column 0.
    pub fn new(chain: &str) -> Scenario {
        Scenario::with_sim("", chain)
    }

    /// As [`Scenario::new`], with the top-level `sim:` settings (e.g.
    /// `weak_sync_interval: 10`).
    pub fn with_sim(sim: &str, chain: &str) -> Scenario {
        let mut yaml = String::from("protos: [scenario.proto]\nelement_paths: [../elements]\n");
        if !sim.is_empty() {
            yaml.push_str(&format!("sim: {{{sim}}}\n"));
        }
        yaml.push_str(&format!(
            "edges:\n  {EDGE}:\n    from: app\n    to: svc\n    method: {METHOD}\n"
        ));
        for line in chain.lines() {
            yaml.push_str("    ");
            yaml.push_str(line);
            yaml.push('\n');
        }
        let config = Config::parse("scenario.yaml", &protos_dir(), &yaml)
            .unwrap_or_else(|e| panic!("config does not parse: {e}\n{yaml}"));
        let edge =
            load_edge(&config, EDGE).unwrap_or_else(|e| panic!("edge does not load: {e}\n{yaml}"));
        Scenario { config, edge }
    }

    /// Simulates with seed 1.
    pub fn run(&self, trace: impl IntoIterator<Item = Line>) -> SimReport {
        self.run_seed(trace, 1)
    }

    /// Serialises the lines as a JSONL trace, parses it back and simulates it. No scenario
    /// expects a run-time error or a malformed message, so any is a failure.
    pub fn run_seed(&self, trace: impl IntoIterator<Item = Line>, seed: u64) -> SimReport {
        let text: Vec<String> = trace.into_iter().map(|l| l.0.to_string()).collect();
        let lines = parse_trace(&text.join("\n")).expect("the trace parses");
        let report = simulate(
            &self.edge,
            &lines,
            SimOptions { seed },
            self.config.sim.weak_sync_interval,
        )
        .expect("the simulation runs");
        for (instance, counters) in &report.errors {
            assert_eq!(
                *counters,
                (0, 0),
                "{instance}: (run-time errors, malformed)"
            );
        }
        report
    }

    /// Decodes a message value (from state or a channel) of this edge's method to JSON.
    pub fn decode(&self, m: &Message) -> Json {
        let method = &self.edge.methods[0];
        let desc = match m.kind {
            MsgKind::Request => &method.request,
            MsgKind::Response => &method.response,
        };
        wire::bytes_to_json(desc, &m.bytes).expect("the message decodes")
    }
}

/// One trace line: an RPC or a control-plane write.
#[derive(Clone, Debug)]
pub struct Line(pub Json);

/// An RPC with trace id `id` sent at virtual time `t` (seconds) by client replica `client`.
pub fn rpc(id: u64, t: f64) -> Line {
    Line(json!({"id": id, "t": t, "method": METHOD, "src": "client"}))
}

/// A control-plane write of a whole state variable.
pub fn control(t: f64, element: &str, var: &str, value: Json) -> Line {
    Line(json!({"t": t, "control": {"element": element, "var": var, "value": value}}))
}

/// A control-plane write of one entry of a map (or one index of a vector).
pub fn control_key(t: f64, element: &str, var: &str, key: Json, value: Json) -> Line {
    Line(json!({"t": t, "control": {"element": element, "var": var, "key": key, "value": value}}))
}

impl Line {
    fn obj(&mut self) -> &mut Map<String, Json> {
        self.0.as_object_mut().expect("a trace line is an object")
    }

    fn set(mut self, k: &str, v: Json) -> Line {
        self.obj().insert(k.to_owned(), v);
        self
    }

    fn req_field(mut self, k: &str, v: Json) -> Line {
        let req = self.obj().entry("req").or_insert_with(|| json!({}));
        req.as_object_mut()
            .expect("`req` is an object")
            .insert(k.to_owned(), v);
        self
    }

    pub fn src(self, s: &str) -> Line {
        self.set("src", json!(s))
    }
    pub fn user(self, s: &str) -> Line {
        self.req_field("user", json!(s))
    }
    pub fn body(self, s: &str) -> Line {
        self.req_field("body", json!(s))
    }
    pub fn key(self, s: &str) -> Line {
        self.req_field("key", json!(s))
    }
    pub fn priority(self, p: i64) -> Line {
        self.req_field("priority", json!(p))
    }
    /// A bytes field, given as the raw bytes (JSON carries them base64).
    pub fn blob(self, b: &[u8]) -> Line {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(b);
        self.req_field("blob", json!(b64))
    }
    /// The server's answer (when the request reaches it).
    pub fn resp(self, r: Json) -> Line {
        self.set("resp", r)
    }
    pub fn resp_header(mut self, k: &str, v: &str) -> Line {
        let h = self
            .obj()
            .entry("resp_headers")
            .or_insert_with(|| json!({}));
        h.as_object_mut()
            .expect("headers are an object")
            .insert(k.to_owned(), json!(v));
        self
    }
    /// When the server answers (default: at once).
    pub fn t_resp(self, t: f64) -> Line {
        self.set("t_resp", json!(t))
    }
    /// The server fails the RPC with this gRPC status.
    pub fn status(self, code: &str) -> Line {
        self.set("status", json!(code))
    }
}

// ---------------------------------------------------------------------------------------------
// report accessors

pub fn result(report: &SimReport, id: u64) -> &RpcResult {
    report
        .results
        .iter()
        .find(|r| r.id == json!(id))
        .unwrap_or_else(|| panic!("no result for rpc {id}"))
}

/// Asserts an RPC reached the server and came back OK.
pub fn assert_ok(r: &RpcResult) {
    assert_eq!(
        (r.outcome, r.status, r.message.as_str()),
        (Outcome::Ok, Code::Ok, ""),
        "rpc {}: {r:?}",
        r.id
    );
    assert!(r.server_saw.is_some(), "rpc {}: {r:?}", r.id);
}

/// Asserts an element rejected the RPC with `code` and `message`, before the server.
pub fn assert_rejected(r: &RpcResult, code: Code, message: &str) {
    assert_eq!(
        (r.outcome, r.status, r.message.as_str()),
        (Outcome::Rejected, code, message),
        "rpc {}: {r:?}",
        r.id
    );
    assert_eq!(r.server_saw, None, "rpc {}", r.id);
    assert_eq!(r.client_got, None, "rpc {}", r.id);
}

pub fn count(report: &SimReport, pred: impl Fn(&RpcResult) -> bool) -> usize {
    report.results.iter().filter(|r| pred(r)).count()
}

/// Whether the instance `element@replica` exists in the final state.
pub fn has_instance(report: &SimReport, instance: &str) -> bool {
    report.state.contains_key(instance)
}

/// A variable of an instance (`element@replica`) in the final state.
pub fn state<'a>(report: &'a SimReport, instance: &str, var: &str) -> &'a Value {
    let vars = report.state.get(instance).unwrap_or_else(|| {
        panic!(
            "no instance `{instance}`; instances: {:?}",
            report.state.keys().collect::<Vec<_>>()
        )
    });
    vars.get(var)
        .unwrap_or_else(|| panic!("`{instance}` has no variable `{var}`: {vars:?}"))
}

pub fn state_int(report: &SimReport, instance: &str, var: &str) -> i64 {
    match state(report, instance, var) {
        Value::Int(i) => *i,
        other => panic!("`{instance}.{var}` is {other:?}, not an int"),
    }
}

pub fn state_float(report: &SimReport, instance: &str, var: &str) -> f64 {
    match state(report, instance, var) {
        Value::Float(f) => *f,
        other => panic!("`{instance}.{var}` is {other:?}, not a float"),
    }
}

/// Records of one element's channel, in emit order.
pub fn records<'a>(report: &'a SimReport, element: &str, channel: &str) -> Vec<&'a ChannelRecord> {
    report
        .channels
        .iter()
        .filter(|c| &*c.element == element && &*c.channel == channel)
        .collect()
}

pub fn msg(v: &Value) -> &Message {
    match v {
        Value::Msg(m) => m,
        other => panic!("expected a message, found {other:?}"),
    }
}

pub fn s(x: &str) -> Value {
    Value::str(x)
}

/// A `Vec<string>` value.
pub fn strs(items: &[&str]) -> Value {
    Value::Vec(items.iter().map(|x| Value::str(*x)).collect())
}
