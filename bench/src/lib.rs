//! Benchmark support: chains loaded from inline configs over the echo example's schema, and
//! hand-written Rust versions of the five elements of the benchmark chain
//! [ratelimit, firewall, logging, metrics, fault] — one struct per element, called in turn,
//! doing what the element files say with native types — to compare the fused JIT against.

use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_hostcalls::channel::{ChannelRecord, ChannelSink, Name};
use weft_hostcalls::clock::Clock;
use weft_hostcalls::rng::{self, SeededRng};
use weft_hostcalls::{Code, Message, Value, VirtualClock};
use weft_ir::config::Config;
use weft_ir::ir::Element;
use weft_ir::load::load_edge;
use weft_ir::schema::{FieldPath, MethodSchema, resolve_path};
use weft_ir::wire;
use weft_jit::rig::{Rig, RpcInput, RunOutcome};

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

    /// The request down the chain and the response back up, as the executors do it. The
    /// messages come shared, as the runtime hands them to compiled code; the request stays
    /// the caller's, to hand on to the server.
    pub fn rpc(&mut self, req: &Arc<Message>, resp: Arc<Message>, cx: &mut Cx<'_>) -> Answer {
        if let Decision::Reject(c, m) = self.ratelimit.request(cx) {
            return Answer::Error(c, m.into());
        }
        match self.firewall.request(req) {
            Ok(Decision::Forward) => {}
            Ok(Decision::Reject(c, m)) => return Answer::Error(c, m.into()),
            Err(e) => return Answer::Error(Code::InvalidArgument, e.to_string()),
        }
        self.logging.log(req, cx);
        self.metrics.request(cx);
        if let Decision::Reject(c, m) = self.fault.request() {
            // Errors travel up through metrics and logging.
            let err = Arc::new(Message::error(c, m));
            self.metrics.response(&err, cx);
            self.logging.log(&err, cx);
            return Answer::Error(c, m.into());
        }
        self.metrics.response(&resp, cx);
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
    pub channels: Vec<ChannelRecord>,
    /// The requests the server got and the responses the client got since the last drain.
    delivered: Vec<Arc<Message>>,
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
            chain: HandChain::new(user, 0.0),
            clock: VirtualClock::new(0.0),
            channels: Vec::new(),
            delivered: Vec::new(),
            request: request(method)?,
            response: response(method)?,
            last_id: 0,
            last_at: 0.0,
        })
    }

    /// One RPC through the five elements, copies and draining included; whether the
    /// server's response reached the client.
    pub fn run(&mut self) -> bool {
        self.drain();
        let input = self.input();
        self.run_input(input)
    }

    /// Drops the records and the delivered messages of the RPCs run since the last drain.
    pub fn drain(&mut self) {
        self.channels.clear();
        self.delivered.clear();
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
    /// and the messages it hands on are kept until [`HandRig::drain`]. Whether the server's
    /// response reached the client.
    pub fn run_input(&mut self, input: HandInput) -> bool {
        self.clock.set(input.at);
        let mut cx = Cx {
            clock: &self.clock,
            channels: &mut self.channels,
            rpc_id: input.id,
        };
        let answer = self.chain.rpc(&input.request, input.response, &mut cx);
        self.delivered.push(input.request);
        match answer {
            Answer::Response(resp) => {
                self.delivered.push(resp);
                true
            }
            Answer::Error(..) => false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Timing the chain alone

/// RPCs per timed batch of [`time_batches`]: their copies and records (about 1 KiB an RPC)
/// stay in the L2 cache, and the two clock reads come to 0.2 ns an RPC.
pub const BATCH: u64 = 256;

/// A rig whose RPC inputs can be made ahead.
pub trait Batched {
    type Input;
    type Outcome;
    fn input(&mut self) -> Self::Input;
    fn run_input(&mut self, input: Self::Input) -> Self::Outcome;
    fn drain(&mut self);
}

impl Batched for Rig {
    type Input = RpcInput;
    type Outcome = RunOutcome;
    fn input(&mut self) -> RpcInput {
        Rig::input(self)
    }
    fn run_input(&mut self, input: RpcInput) -> RunOutcome {
        Rig::run_input(self, input)
    }
    fn drain(&mut self) {
        Rig::drain(self)
    }
}

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

/// Runs `n` RPCs and returns the time spent in the chain alone: each batch's inputs are made
/// before its clock starts, and its records and delivered messages dropped after it stops,
/// as a service's transport and channel reader do (and as criterion's `iter_batched` treats
/// inputs and outputs).
pub fn time_batches<R: Batched>(rig: &mut R, n: u64) -> Duration {
    let mut inputs = Vec::with_capacity(BATCH as usize);
    let (mut timed, mut left) = (Duration::ZERO, n);
    while left > 0 {
        let k = left.min(BATCH);
        rig.drain();
        inputs.extend((0..k).map(|_| rig.input()));
        let start = Instant::now();
        for input in inputs.drain(..) {
            black_box(rig.run_input(input));
        }
        timed += start.elapsed();
        left -= k;
    }
    rig.drain();
    timed
}
