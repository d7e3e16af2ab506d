//! Benchmark support: chains loaded from inline configs over the echo example's schema, and
//! hand-written Rust versions of the five elements of the benchmark chain
//! [ratelimit, firewall, logging, metrics, fault] — one struct per element, called in turn,
//! doing what the element files say with native types — to compare the fused JIT against.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use weft_hostcalls::channel::{ChannelRecord, ChannelSink, Name};
use weft_hostcalls::clock::Clock;
use weft_hostcalls::rng::{self, SeededRng};
use weft_hostcalls::{Code, Message, Value, VirtualClock};
use weft_ir::config::Config;
use weft_ir::ir::Element;
use weft_ir::load::load_edge;
use weft_ir::schema::{FieldPath, MethodSchema, resolve_path};
use weft_ir::wire;

/// The directory of the echo example (its proto and the benchmark's element files).
pub fn echo_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/echo")
}

/// The benchmark chain, as the config writes it.
pub const FIVE: &str = "
      - ratelimit: {capacity: 1000000000000.0, rate: 1000000000000.0}
      - firewall: {field: user, deny: [mallory, eve]}
      - logging
      - metrics
      - fault: {prob_pass: 1.0}";

/// Loads a client-side chain (YAML list items, indented six spaces) over `echo.Echo/Say` and
/// returns its elements' IR in chain order with the method.
pub fn load_chain(items: &str) -> Result<(Vec<Arc<Element>>, MethodSchema), String> {
    let yaml = format!(
        "protos: [echo.proto]\nelement_paths: [../../bench/elements]\nedges:\n  a->b:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    client:{items}\n"
    );
    let config = Config::parse("bench.yaml", &echo_dir(), &yaml).map_err(|e| e.to_string())?;
    let edge = load_edge(&config, "a->b").map_err(|e| e.to_string())?;
    let method = edge.methods.first().cloned().ok_or("no method")?;
    let elements = edge
        .elements
        .iter()
        .map(|e| e.ir.get(&method.full_name).cloned().ok_or("not checked"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((elements, method))
}

/// `n` count elements, named apart.
pub fn counters(n: usize) -> String {
    (0..n)
        .map(|i| format!("\n      - element: count\n        name: count{i}"))
        .collect()
}

/// A request of the benchmark: `{"user": "alice", "body": "hello"}`.
pub fn request(method: &MethodSchema) -> Result<Message, String> {
    let json = serde_json::json!({"user": "alice", "body": "hello, world", "priority": 3});
    let bytes = wire::json_to_bytes(&method.request, &json).map_err(|e| e.to_string())?;
    Ok(Message::request(bytes))
}

pub fn response(method: &MethodSchema) -> Result<Message, String> {
    let json = serde_json::json!({"body": "hello, world", "served_by": "echo-0"});
    let bytes = wire::json_to_bytes(&method.response, &json).map_err(|e| e.to_string())?;
    Ok(Message::response(bytes))
}

// ---------------------------------------------------------------------------------------------
// Hand-written elements

/// What a request handler decided.
pub enum Decision {
    Forward,
    Reject(Code, &'static str),
}

/// The host services the hand-written elements use: the same clock and channel sink types
/// the executors use, so both sides produce the same observable records.
pub struct Cx<'a> {
    pub clock: &'a dyn Clock,
    pub channels: &'a mut dyn ChannelSink,
    pub rpc_id: u64,
}

pub struct RateLimit {
    capacity: f64,
    rate: f64,
    tokens: f64,
    last: f64,
}

impl RateLimit {
    pub fn new(capacity: f64, rate: f64, now: f64) -> Self {
        RateLimit {
            capacity,
            rate,
            tokens: capacity,
            last: now,
        }
    }

    pub fn request(&mut self, cx: &mut Cx<'_>) -> Decision {
        let now = cx.clock.now();
        self.tokens = self
            .capacity
            .min(self.tokens + self.rate * (now - self.last));
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Decision::Forward
        } else {
            Decision::Reject(Code::ResourceExhausted, "ratelimit")
        }
    }
}

pub struct Firewall {
    field: FieldPath,
    denied: HashSet<String>,
}

impl Firewall {
    pub fn new(field: FieldPath, deny: &[&str]) -> Self {
        Firewall {
            field,
            denied: deny.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    pub fn request(&mut self, msg: &Message) -> Result<Decision, wire::WireError> {
        let denied = match wire::read(&msg.bytes, &self.field)? {
            Value::Str(s) => self.denied.contains(&s),
            _ => false,
        };
        Ok(if denied {
            Decision::Reject(Code::PermissionDenied, "acl")
        } else {
            Decision::Forward
        })
    }
}

/// The names its records carry are interned once, as the executors intern theirs.
pub struct Logging {
    element: Name,
    channel: Name,
}

impl Default for Logging {
    fn default() -> Self {
        Logging {
            element: "logging".into(),
            channel: "log".into(),
        }
    }
}

impl Logging {
    pub fn log(&mut self, msg: &Arc<Message>, cx: &mut Cx<'_>) {
        cx.channels.emit(ChannelRecord {
            element: self.element,
            channel: self.channel,
            rpc_id: cx.rpc_id,
            time: cx.clock.now(),
            value: Value::Msg(Arc::clone(msg)),
        });
    }
}

pub struct Metrics {
    pub total: i64,
    pub failed: i64,
    start: HashMap<u64, f64>,
    element: Name,
    channel: Name,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            total: 0,
            failed: 0,
            start: HashMap::new(),
            element: "metrics".into(),
            channel: "latency".into(),
        }
    }
}

impl Metrics {
    pub fn request(&mut self, cx: &mut Cx<'_>) {
        self.start.insert(cx.rpc_id, cx.clock.now());
    }

    pub fn response(&mut self, msg: &Message, cx: &mut Cx<'_>) {
        self.total += 1;
        if msg.code != Code::Ok {
            self.failed += 1;
        }
        if let Some(start) = self.start.remove(&cx.rpc_id) {
            let now = cx.clock.now();
            cx.channels.emit(ChannelRecord {
                element: self.element,
                channel: self.channel,
                rpc_id: cx.rpc_id,
                time: now,
                value: Value::Float(now - start),
            });
        }
    }

    /// The request's response will not come (an element after this one rejected it).
    pub fn forget(&mut self, rpc_id: u64) {
        self.start.remove(&rpc_id);
    }
}

pub struct Fault {
    prob_pass: f64,
    rng: SeededRng,
}

impl Fault {
    pub fn new(prob_pass: f64, seed: u64) -> Self {
        Fault {
            prob_pass,
            rng: SeededRng::for_stream(seed, "fault@bench"),
        }
    }

    pub fn request(&mut self) -> Decision {
        if rng::random_float(&mut self.rng, 0.0, 1.0) < self.prob_pass {
            Decision::Forward
        } else {
            Decision::Reject(Code::Unavailable, "fault_injected")
        }
    }
}

/// The five hand-written elements, called in turn.
pub struct HandChain {
    pub ratelimit: RateLimit,
    pub firewall: Firewall,
    pub logging: Logging,
    pub metrics: Metrics,
    pub fault: Fault,
}

/// The result of one RPC through the hand-written chain.
pub enum Answer {
    Response(Arc<Message>),
    Error(Code, String),
}

impl HandChain {
    pub fn new(user_field: FieldPath, now: f64) -> Self {
        HandChain {
            ratelimit: RateLimit::new(1e12, 1e12, now),
            firewall: Firewall::new(user_field, &["mallory", "eve"]),
            logging: Logging::default(),
            metrics: Metrics::default(),
            fault: Fault::new(1.0, 1),
        }
    }

    /// The request down the chain and the response back up, as the executors do it.
    pub fn rpc(&mut self, req: Message, resp: &Message, cx: &mut Cx<'_>) -> Answer {
        if let Decision::Reject(c, m) = self.ratelimit.request(cx) {
            return Answer::Error(c, m.into());
        }
        match self.firewall.request(&req) {
            Ok(Decision::Forward) => {}
            Ok(Decision::Reject(c, m)) => return Answer::Error(c, m.into()),
            Err(e) => return Answer::Error(Code::InvalidArgument, e.to_string()),
        }
        let req = Arc::new(req);
        self.logging.log(&req, cx);
        self.metrics.request(cx);
        if let Decision::Reject(c, m) = self.fault.request() {
            // Errors travel up through metrics and logging.
            let err = Arc::new(Message::error(c, m));
            self.metrics.response(&err, cx);
            self.logging.log(&err, cx);
            return Answer::Error(c, m.into());
        }
        let resp = Arc::new(resp.clone());
        self.metrics.response(&resp, cx);
        self.logging.log(&resp, cx);
        Answer::Response(resp)
    }
}

/// The hand-written chain with what the rigs do around each RPC: time passes, the records of
/// the previous RPC are drained, and the request and the response are copied and shared.
pub struct HandRig {
    pub chain: HandChain,
    clock: VirtualClock,
    channels: Vec<ChannelRecord>,
    rpc_id: u64,
    request: Message,
    response: Message,
}

impl HandRig {
    pub fn new(method: &MethodSchema) -> Result<HandRig, String> {
        let user = resolve_path(&method.request, "user").map_err(|e| e.to_string())?;
        Ok(HandRig {
            chain: HandChain::new(user, 0.0),
            clock: VirtualClock::new(0.0),
            channels: Vec::new(),
            rpc_id: 0,
            request: request(method)?,
            response: response(method)?,
        })
    }

    fn next_rpc(&mut self) {
        self.clock.advance(0.001);
        self.channels.clear();
        self.rpc_id += 1;
    }

    /// One RPC through the five elements.
    pub fn run(&mut self) -> Answer {
        self.next_rpc();
        let mut cx = Cx {
            clock: &self.clock,
            channels: &mut self.channels,
            rpc_id: self.rpc_id,
        };
        self.chain
            .rpc(self.request.clone(), &self.response, &mut cx)
    }

    /// Only what every executor pays per RPC before any element runs.
    pub fn messages_only(&mut self) -> (Arc<Message>, Arc<Message>) {
        self.next_rpc();
        (
            Arc::new(self.request.clone()),
            Arc::new(self.response.clone()),
        )
    }
}
