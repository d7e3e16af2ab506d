//! Benchmark support: chains loaded from inline configs over the echo example's schema, and
//! hand-written Rust versions of the five elements of the benchmark chain
//! [ratelimit, firewall, logging, metrics, fault] — one struct per element, called in turn,
//! doing what the element files say with native types — to compare the fused JIT against.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use weft_hostcalls::channel::{ChannelRecord, ChannelSink, Name};
use weft_hostcalls::clock::{Clock, MonotonicClock};
use weft_hostcalls::rng::{self, SeededRng};
use weft_hostcalls::{Code, Message, Value, VirtualClock};
use weft_ir::config::Config;
use weft_ir::ir::Element;
use weft_ir::load::load_edge;
use weft_ir::schema::{FieldPath, FieldStep, MethodSchema, resolve_path};
use weft_ir::types::Type;
use weft_ir::wire;
use weft_jit::rig::Batched;

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

/// The benchmark chain twice, the second five renamed: the chain `compile/ten` compiles.
pub fn ten() -> String {
    let second = FIVE
        .replace(
            "- ratelimit:",
            "- element: ratelimit\n        name: rl2\n        params:",
        )
        .replace(
            "- firewall:",
            "- element: firewall\n        name: fw2\n        params:",
        )
        .replace("- logging", "- element: logging\n        name: log2")
        .replace("- metrics", "- element: metrics\n        name: m2")
        .replace(
            "- fault:",
            "- element: fault\n        name: f2\n        params:",
        );
    format!("{FIVE}{second}")
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

/// Reads the field in place (`wire::extract`, as compiled code does) and looks the borrowed
/// text up, so a request allocates nothing.
pub struct Firewall {
    /// The field: a top-level string or other singular scalar (`wire::extractable`).
    leaf: [FieldStep; 1],
    found: Vec<wire::Extracted>,
    denied: HashSet<String>,
}

impl Firewall {
    pub fn new(field: FieldPath, deny: &[&str]) -> Result<Self, String> {
        // `str(get(rpc, field))` of another kind of field is its text form, which this
        // version does not make: it takes string fields only.
        let leaf = match field.steps.as_slice() {
            [leaf] if wire::extractable(&field) && field.ty == Type::Str => leaf.clone(),
            _ => return Err(format!("{}: not a top-level string field", field.text)),
        };
        Ok(Firewall {
            leaf: [leaf],
            found: Vec::with_capacity(1),
            denied: deny.iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    pub fn request(&mut self, msg: &Message) -> Result<Decision, wire::WireError> {
        wire::extract(&msg.bytes, &self.leaf, &mut self.found);
        let found = match self.found.first() {
            Some(Ok(found)) => *found,
            Some(Err(e)) => return Err(e.clone()),
            None => None,
        };
        let denied = match wire::found_str(&msg.bytes, &self.leaf[0], found) {
            Some(name) => self.denied.contains(name?),
            None => false, // not a string field: `new` refuses those
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
    element: Name,
    channel: Name,
}

/// When a request passed metrics: the caller keeps it for the response, as an interceptor
/// keeps it across the call (the element keeps it in the RPC's scratch).
pub struct Started(f64);

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            total: 0,
            failed: 0,
            element: "metrics".into(),
            channel: "latency".into(),
        }
    }
}

impl Metrics {
    pub fn request(&mut self, cx: &mut Cx<'_>) -> Started {
        Started(cx.clock.now())
    }

    pub fn response(&mut self, started: Started, msg: &Message, cx: &mut Cx<'_>) {
        self.total += 1;
        if msg.code != Code::Ok {
            self.failed += 1;
        }
        let now = cx.clock.now();
        cx.channels.emit(ChannelRecord {
            element: self.element,
            channel: self.channel,
            rpc_id: cx.rpc_id,
            time: now,
            value: Value::Float(now - started.0),
        });
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
    pub fn new(user_field: FieldPath, now: f64) -> Result<Self, String> {
        Ok(HandChain {
            ratelimit: RateLimit::new(1e12, 1e12, now),
            firewall: Firewall::new(user_field, &["mallory", "eve"])?,
            logging: Logging::default(),
            metrics: Metrics::default(),
            fault: Fault::new(1.0, 1),
        })
    }

    /// The request down the chain and the response (`respond`, called only when the request
    /// reaches the server) back up, as the executors do it. The messages come shared, as
    /// the runtime hands them to compiled code; the request stays the caller's, to hand on
    /// to the server.
    pub fn rpc(
        &mut self,
        req: &Arc<Message>,
        respond: impl FnOnce() -> Arc<Message>,
        cx: &mut Cx<'_>,
    ) -> Answer {
        if let Decision::Reject(c, m) = self.ratelimit.request(cx) {
            return Answer::Error(c, m.into());
        }
        match self.firewall.request(req) {
            Ok(Decision::Forward) => {}
            Ok(Decision::Reject(c, m)) => return Answer::Error(c, m.into()),
            // As the executors word it (`firewall: malformed message: …`).
            Err(e) => {
                let e = weft_ir::eval::RuntimeError::from(e);
                return Answer::Error(e.code(), format!("firewall: {e}"));
            }
        }
        self.logging.log(req, cx);
        let started = self.metrics.request(cx);
        if let Decision::Reject(c, m) = self.fault.request() {
            // Errors travel up through metrics and logging.
            let err = Arc::new(Message::error(c, m));
            self.metrics.response(started, &err, cx);
            self.logging.log(&err, cx);
            return Answer::Error(c, m.into());
        }
        let resp = respond();
        self.metrics.response(started, &resp, cx);
        self.logging.log(&resp, cx);
        Answer::Response(resp)
    }
}

/// The hand-written chain with what the rigs do around each RPC (`weft_jit::rig::Rig`):
/// time passes, the records and messages of the previous RPC are drained, and the request
/// and the response are copied and shared — by [`HandRig::run`] as part of the RPC, or
/// ahead by [`HandRig::input`].
pub struct HandRig {
    pub chain: HandChain,
    clock: VirtualClock,
    /// As [`weft_jit::rig::Rig::use_system_clock`].
    system_clock: Option<MonotonicClock>,
    pub channels: Vec<ChannelRecord>,
    /// The requests the server got and the responses the client got since the last drain.
    delivered: Vec<Arc<Message>>,
    /// Copies made for RPCs that did not use them (a request that did not reach the server,
    /// a response for one), dropped at the drain as the delivered ones are.
    unused: Vec<Arc<Message>>,
    request: Message,
    response: Message,
    last_id: u64,
    last_at: f64,
}

/// One RPC's inputs, made before it runs (as `weft_jit::rig::RpcInput`).
pub struct HandInput {
    id: u64,
    at: f64,
    request: Arc<Message>,
    response: Arc<Message>,
}

impl HandRig {
    pub fn new(method: &MethodSchema) -> Result<HandRig, String> {
        let user = resolve_path(&method.request, "user").map_err(|e| e.to_string())?;
        Ok(HandRig {
            chain: HandChain::new(user, 0.0)?,
            clock: VirtualClock::new(0.0),
            system_clock: None,
            channels: Vec::new(),
            delivered: Vec::new(),
            unused: Vec::new(),
            request: request(method)?,
            response: response(method)?,
            last_id: 0,
            last_at: 0.0,
        })
    }

    /// The elements read the system clock from now on (as [`weft_jit::rig::Rig::use_system_clock`]).
    pub fn use_system_clock(&mut self) {
        self.system_clock = Some(MonotonicClock::new());
    }

    /// One RPC through the five elements, copies and draining included; whether the
    /// server's response reached the client.
    pub fn run(&mut self) -> bool {
        self.drain();
        let input = self.input();
        self.run_input(input)
    }

    /// Drops the records and the messages of the RPCs run since the last drain.
    pub fn drain(&mut self) {
        self.channels.clear();
        self.delivered.clear();
        self.unused.clear();
    }

    /// The next RPC's inputs: a millisecond after the last, with fresh copies of the messages.
    pub fn input(&mut self) -> HandInput {
        self.last_id += 1;
        self.last_at += 0.001;
        HandInput {
            id: self.last_id,
            at: self.last_at,
            request: Arc::new(self.request.clone()),
            response: Arc::new(self.response.clone()),
        }
    }

    /// One RPC on inputs made by [`HandRig::input`]; its records are added to `channels`,
    /// and the messages it hands on (and the copies it did not use) are kept until
    /// [`HandRig::drain`]. Whether the server's response reached the client.
    pub fn run_input(&mut self, input: HandInput) -> bool {
        self.clock.set(input.at);
        let mut cx = Cx {
            clock: match &self.system_clock {
                Some(system) => system,
                None => &self.clock,
            },
            channels: &mut self.channels,
            rpc_id: input.id,
        };
        let mut response = Some(input.response);
        let answer = self.chain.rpc(
            &input.request,
            || (response.take()).unwrap_or_else(|| Arc::new(Message::response(Vec::new()))),
            &mut cx,
        );
        if let Some(unused) = response {
            self.unused.push(unused);
        }
        match answer {
            Answer::Response(resp) => {
                self.delivered.push(input.request);
                self.delivered.push(resp);
                true
            }
            Answer::Error(..) => {
                self.unused.push(input.request);
                false
            }
        }
    }

    /// What the RPCs since the last drain handed on, in order: per RPC that reached the
    /// server, the request it got, then the response the client got.
    pub fn delivered(&self) -> impl Iterator<Item = &Message> {
        self.delivered.iter().map(|m| &**m)
    }
}

// ---------------------------------------------------------------------------------------------
// Timing the chain alone

/// The hand-written chain timed as the executors are (`weft_jit::rig::time_batches`).
impl Batched for HandRig {
    type Input = HandInput;
    type Outcome = bool;
    fn input(&mut self) -> HandInput {
        HandRig::input(self)
    }
    fn run_input(&mut self, input: HandInput) -> bool {
        HandRig::run_input(self, input)
    }
    fn drain(&mut self) {
        HandRig::drain(self)
    }
}
