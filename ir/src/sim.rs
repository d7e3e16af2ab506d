//! The trace-driven simulator: runs an edge's chain over a stream of RPCs in virtual time.
//!
//! Requests and responses are events; a response is processed at the trace's `t_resp`, so
//! RPCs overlap as they do in a service (a circuit breaker sees requests pile up). Each
//! element has one instance per replica of the side it runs on — per caller (`src`) on the
//! client side, per routed replica on the server side — and `@consistency` state is shared
//! between instances through [`SharedState`], with weak replicas merged every
//! `sim.weak_sync_interval` virtual seconds. Every instance has its own random stream derived
//! from the seed and its name, so reordering elements never reshuffles another element's
//! draws. The output is the oracle that every other executor is compared against.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;

use serde_json::{Value as Json, json};
use weft_hostcalls::channel::ChannelRecord;
use weft_hostcalls::clock::VirtualClock;
use weft_hostcalls::rng::SeededRng;
use weft_hostcalls::state::{CellKind, Consistency, SharedState, StateStore, VarSpec};
use weft_hostcalls::{Code, Message, Value};

use crate::check::coerce_value;
use crate::config::{ElementUse, Position, Side};
use crate::interp::{self, Host, Instance, RpcInfo, RpcScratch, Verdict};
use crate::ir::Element;
use crate::json;
use crate::layout::Layout;
use crate::load::LoadedEdge;
use crate::schema::MethodSchema;
use crate::wire;

/// One RPC of a trace.
#[derive(Clone, Debug)]
pub struct TraceRpc {
    /// Line of the trace file (for messages).
    pub line: usize,
    /// Echoed in the output as given.
    pub id: Json,
    pub t: f64,
    pub method: String,
    pub src: String,
    pub headers: BTreeMap<String, String>,
    pub req: Json,
    pub resp: Json,
    pub resp_headers: BTreeMap<String, String>,
    /// The server's status; a non-OK status makes the server answer with that error.
    pub status: Code,
    pub status_message: String,
    /// When the server answers; absent means right after the request.
    pub t_resp: Option<f64>,
}

/// A control-plane write in a trace: `{"t": 0, "control": {"element": "lb", "var":
/// "replicas", "value": {…}}}` (with `"key"` to write one map entry).
///
/// A write to local state reaches every instance of the element, and instances created later
/// start with it; a write to shared (`@consistency`) state is one write to the shared
/// variable.
#[derive(Clone, Debug)]
pub struct TraceControl {
    pub t: f64,
    pub element: String,
    pub var: String,
    pub key: Option<Json>,
    pub value: Json,
}

#[derive(Clone, Debug)]
pub enum TraceLine {
    Rpc(TraceRpc),
    Control(TraceControl),
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("trace line {line}: {message}")]
    Trace { line: usize, message: String },
    #[error("element `{element}`: {message}")]
    Element { element: String, message: String },
}

/// Reads a trace: one JSON object per line; blank lines and lines starting with `#` are
/// skipped.
pub fn parse_trace(text: &str) -> Result<Vec<TraceLine>, SimError> {
    let mut out = Vec::new();
    // Each explicit id (as JSON text) and the line that gave it.
    let mut id_lines: BTreeMap<String, usize> = BTreeMap::new();
    // Where in `out` the RPCs without an id are.
    let mut without_id = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let err = |message: String| SimError::Trace {
            line: line_no,
            message,
        };
        let j: Json = serde_json::from_str(l).map_err(|e| {
            // serde_json saw one line, so its "at line 1 column N" names the wrong line; the
            // column counts in the file's line, before the trim.
            let text = e.to_string();
            let what = text
                .strip_suffix(&format!(" at line {} column {}", e.line(), e.column()))
                .unwrap_or(&text);
            let column = e.column() + (line.len() - line.trim_start().len());
            err(format!("not JSON at column {column}: {what}"))
        })?;
        let Json::Object(o) = &j else {
            return Err(err("each line must be a JSON object".into()));
        };
        // A misspelt key would otherwise be an RPC without what it meant to give.
        let known = |what: &str, o: &serde_json::Map<String, Json>, keys: &[&str]| match o
            .keys()
            .find(|k| !keys.contains(&k.as_str()))
        {
            None => Ok(()),
            Some(k) => {
                // `reqest` is too far from `req` for the edit distance, but starts with it.
                let prefix = keys
                    .iter()
                    .filter(|c| c.len() >= 3 && k.starts_with(*c))
                    .max_by_key(|c| c.len())
                    .map(|c| format!("did you mean `{c}`?"));
                let hint = crate::diag::did_you_mean(k, keys.iter().copied())
                    .or(prefix)
                    .unwrap_or_else(|| format!("the keys of {what}: {}", keys.join(", ")));
                Err(err(format!("unknown key `{k}`; {hint}")))
            }
        };
        let t = o
            .get("t")
            .map_or(Some(0.0), Json::as_f64)
            .ok_or_else(|| err("`t` must be a number of seconds".into()))?;
        if let Some(c) = o.get("control") {
            known("a control line", o, &["t", "control"])?;
            let Json::Object(c) = c else {
                return Err(err(
                    "`control` is an object with `element`, `var`, `value` and maybe `key`".into(),
                ));
            };
            known("`control`", c, &["element", "var", "key", "value"])?;
            let field = |k: &str| c.get(k).and_then(Json::as_str).map(str::to_owned);
            out.push(TraceLine::Control(TraceControl {
                t,
                element: field("element").ok_or_else(|| err("control needs `element`".into()))?,
                var: field("var").ok_or_else(|| err("control needs `var`".into()))?,
                key: c.get("key").cloned(),
                value: c
                    .get("value")
                    .cloned()
                    .ok_or_else(|| err("control needs `value`".into()))?,
            }));
            continue;
        }
        known(
            "an RPC line",
            o,
            &[
                "id",
                "t",
                "method",
                "src",
                "headers",
                "req",
                "resp",
                "resp_headers",
                "status",
                "status_message",
                "t_resp",
            ],
        )?;
        let text = |k: &str, default: &str| match o.get(k) {
            None | Some(Json::Null) => Ok(default.to_owned()),
            Some(Json::String(s)) => Ok(s.clone()),
            Some(_) => Err(err(format!("`{k}` is a string"))),
        };
        let headers = |k: &str| -> Result<BTreeMap<String, String>, SimError> {
            match o.get(k) {
                None | Some(Json::Null) => Ok(BTreeMap::new()),
                Some(Json::Object(h)) => h
                    .iter()
                    .map(|(k, v)| {
                        let v = match v {
                            Json::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        Ok((k.to_ascii_lowercase(), v))
                    })
                    .collect(),
                Some(_) => Err(err(format!("`{k}` must be an object of strings"))),
            }
        };
        let status = match o.get("status") {
            None | Some(Json::Null) => Code::Ok,
            Some(Json::String(s)) => s.parse().map_err(|e| err(format!("`status`: {e}")))?,
            Some(_) => {
                return Err(err(
                    "`status` is a gRPC code name such as \"UNAVAILABLE\"".into()
                ));
            }
        };
        let t_resp = match o.get("t_resp") {
            None | Some(Json::Null) => None,
            Some(v) => Some(
                v.as_f64()
                    .ok_or_else(|| err("`t_resp` must be a number".into()))?,
            ),
        };
        if t_resp.is_some_and(|r| r < t) {
            return Err(err("`t_resp` is before `t`".into()));
        }
        let id = match o.get("id") {
            None | Some(Json::Null) => {
                without_id.push(out.len());
                Json::Null
            }
            Some(id) => {
                if let Some(first) = id_lines.insert(id.to_string(), line_no) {
                    return Err(err(format!(
                        "id {id} is also the id of line {first}; each RPC of a trace has its own"
                    )));
                }
                id.clone()
            }
        };
        out.push(TraceLine::Rpc(TraceRpc {
            line: line_no,
            id,
            t,
            method: text("method", "")?,
            src: text("src", "client")?,
            headers: headers("headers")?,
            req: o.get("req").cloned().unwrap_or_else(|| json!({})),
            resp: o.get("resp").cloned().unwrap_or_else(|| json!({})),
            resp_headers: headers("resp_headers")?,
            status,
            status_message: text("status_message", "")?,
            t_resp,
        }));
    }
    // A line without an id gets its line number, unless an explicit id is that number (the
    // RPC with that id is another one): then a number no id of the trace uses.
    let explicit: BTreeSet<u64> = id_lines
        .keys()
        .filter_map(|k| k.parse::<u64>().ok())
        .collect();
    let lines: Vec<u64> = without_id
        .iter()
        .filter_map(|&k| match &out[k] {
            TraceLine::Rpc(r) => Some(r.line as u64),
            TraceLine::Control(_) => None,
        })
        .collect();
    let mut fresh = explicit
        .iter()
        .chain(&lines)
        .max()
        .map_or(1, |m| m.saturating_add(1));
    for k in without_id {
        if let TraceLine::Rpc(r) = &mut out[k] {
            let mut id = r.line as u64;
            if explicit.contains(&id) {
                id = fresh;
                fresh = fresh.saturating_add(1);
            }
            r.id = json!(id);
        }
    }
    Ok(out)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The request reached the server.
    Ok,
    /// An element rejected the request.
    Rejected,
    /// An element answered locally.
    Replied,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Rejected => "rejected",
            Outcome::Replied => "replied",
        }
    }
}

/// What happened to one RPC.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcResult {
    pub id: Json,
    pub outcome: Outcome,
    pub status: Code,
    pub message: String,
    pub server_saw: Option<Json>,
    pub server_headers: BTreeMap<String, String>,
    pub dst: Option<String>,
    pub client_got: Option<Json>,
    pub client_headers: BTreeMap<String, String>,
    /// The element that rejected the request or answered it locally.
    pub by: Option<String>,
}

impl RpcResult {
    pub fn to_json(&self) -> Json {
        json!({
            "id": self.id,
            "outcome": self.outcome.name(),
            "status": self.status.name(),
            "message": self.message,
            "server_saw": self.server_saw,
            "server_headers": self.server_headers,
            "dst": self.dst,
            "client_got": self.client_got,
            "client_headers": self.client_headers,
            "by": self.by,
        })
    }
}

#[derive(Clone, Debug)]
pub struct SimReport {
    /// In trace order.
    pub results: Vec<RpcResult>,
    pub channels: Vec<ChannelRecord>,
    /// Final state of every instance: `element@replica` → variable → value.
    pub state: BTreeMap<String, BTreeMap<String, Value>>,
    /// Run-time errors and malformed messages per instance.
    pub errors: BTreeMap<String, (u64, u64)>,
}

#[derive(Clone, Copy, Debug)]
pub struct SimOptions {
    pub seed: u64,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions { seed: 1 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Event {
    t: f64,
    /// Responses before requests at the same instant: an answer that arrives at `t` frees
    /// capacity for a request at `t`.
    rank: u8,
    seq: usize,
    rpc: usize,
}

impl Eq for Event {}

impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: reverse for earliest first.
        other
            .t
            .total_cmp(&self.t)
            .then(other.rank.cmp(&self.rank))
            .then(other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Per-RPC progress between its request and response events.
struct InFlight {
    info: RpcInfo,
    method: usize,
    /// Each segment the request entered: its first chain position, how many of its elements
    /// forwarded the request (their `resp` handlers run), the replica it ran on, and the
    /// RPC's scratch there.
    segments: Vec<(usize, usize, String, RpcScratch)>,
    outcome: Outcome,
    by: Option<String>,
    /// Set when the request was answered or rejected before reaching the server.
    early_response: Option<Message>,
    server_request: Option<Message>,
}

/// How the simulator runs element handlers: the reference interpreter ([`Interp`]) or a
/// compiled executor (the JIT crate implements this trait).
///
/// The simulator hands an executor one *segment* at a time: consecutive elements that run in
/// one processor (the same side of the edge, and the same replica), so a compiling executor
/// can fuse the segment into one native function per direction.
pub trait Executor {
    /// Wraps the state store of a new instance (a compiled executor may keep some variables
    /// where its code addresses them directly). The default keeps the store as it is.
    fn wrap_store(
        &self,
        _ir: &Element,
        store: Box<dyn StateStore + Send>,
    ) -> Box<dyn StateStore + Send> {
        store
    }

    /// Runs the request handlers of `elements` in chain order on one request, stopping at the
    /// first element that rejects or replies. `scratch` is the RPC's for this segment, fresh,
    /// and is handed to the response handlers of the same elements.
    fn request(
        &self,
        elements: &[Arc<Element>],
        instances: &mut [&mut Instance],
        msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        scratch: &mut RpcScratch,
    ) -> SegmentRequest;

    /// Runs the response handlers of `elements[..=start]` from `start` back to 0.
    #[allow(clippy::too_many_arguments)]
    fn response(
        &self,
        elements: &[Arc<Element>],
        instances: &mut [&mut Instance],
        start: usize,
        msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        scratch: &mut RpcScratch,
    ) -> Message;
}

/// What a segment did with a request.
#[derive(Clone, Debug, PartialEq)]
pub struct SegmentRequest {
    /// The index in the segment of the element that rejected or replied, or the segment's
    /// length when the request was forwarded.
    pub decided: usize,
    pub verdict: Verdict,
    /// The `dst` header of the request as the deciding element received it (for a forwarded
    /// request, as it leaves the segment).
    pub routed: Option<String>,
}

/// The reference interpreter, one element at a time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Interp;

impl Interp {
    /// [`Executor::request`] on the segment's keys of the RPC's scratch (`slots`, from the
    /// first element's): a compiled executor that falls back to the interpreter for part of
    /// a segment hands it that part's.
    pub fn request_in(
        &self,
        elements: &[Arc<Element>],
        instances: &mut [&mut Instance],
        mut msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        slots: &mut [Option<Value>],
    ) -> SegmentRequest {
        // Where the element's keys start, counted as the loop goes: no list of offsets is
        // made per call (an allocation on the interpreter's path, which would slow the
        // oracle the JIT is measured against).
        let mut at = 0;
        for (k, (e, inst)) in elements.iter().zip(instances.iter_mut()).enumerate() {
            let routed = msg.headers.get("dst").cloned();
            let end = at + e.metadata.len();
            let keys = slots.get_mut(at..end).unwrap_or_default();
            at = end;
            match interp::on_request(inst, e, msg, rpc, host, keys) {
                Verdict::Forward(m) => msg = m,
                verdict => {
                    return SegmentRequest {
                        decided: k,
                        verdict,
                        routed,
                    };
                }
            }
        }
        SegmentRequest {
            decided: elements.len(),
            routed: msg.headers.get("dst").cloned(),
            verdict: Verdict::Forward(msg),
        }
    }

    /// [`Executor::response`] on the segment's keys of the RPC's scratch (as
    /// [`Interp::request_in`]).
    #[allow(clippy::too_many_arguments)]
    pub fn response_in(
        &self,
        elements: &[Arc<Element>],
        instances: &mut [&mut Instance],
        start: usize,
        mut msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        slots: &mut [Option<Value>],
    ) -> Message {
        // From the end of element `start`'s keys back, as `request_in` counts forward.
        let last = start.min(elements.len().saturating_sub(1));
        let mut end = interp::scratch_len(elements.get(..=last).unwrap_or_default());
        for k in (0..=last).rev() {
            let Some(e) = elements.get(k) else { continue };
            let at = end.saturating_sub(e.metadata.len());
            let keys = slots.get_mut(at..end).unwrap_or_default();
            end = at;
            if let Some(inst) = instances.get_mut(k) {
                msg = interp::on_response(inst, e, msg, rpc, host, keys);
            }
        }
        msg
    }
}

impl Executor for Interp {
    fn request(
        &self,
        elements: &[Arc<Element>],
        instances: &mut [&mut Instance],
        msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        scratch: &mut RpcScratch,
    ) -> SegmentRequest {
        host.start_pass();
        let slots = scratch.slots(interp::scratch_len(elements));
        self.request_in(elements, instances, msg, rpc, host, slots)
    }

    fn response(
        &self,
        elements: &[Arc<Element>],
        instances: &mut [&mut Instance],
        start: usize,
        msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        scratch: &mut RpcScratch,
    ) -> Message {
        host.start_pass();
        let slots = scratch.slots(interp::scratch_len(elements));
        self.response_in(elements, instances, start, msg, rpc, host, slots)
    }
}

/// Whether an element's request handler may set a header (and so route the request to
/// another replica of the server side). The simulator ends a segment after such an element,
/// because the next server-side element's instance depends on the header it sets.
pub fn sets_headers(e: &Element) -> bool {
    use crate::ir::{Expr, ExprKind, Stmt, StmtKind};
    // Every block counts, the bodies of read-modify-write lambdas inside expressions too:
    // missing one made the simulator keep the segment's first replica for an element the
    // checker routes by the header (found by a review).
    fn expr(x: &Expr) -> bool {
        if let ExprKind::StateRmw { body, .. } = &x.kind
            && block(body)
        {
            return true;
        }
        let mut found = false;
        x.for_each_operand(|o| found = found || expr(o));
        found
    }
    fn block(b: &[Stmt]) -> bool {
        b.iter().any(|s| {
            let mut found = match &s.kind {
                StmtKind::SetHeader { .. } => true,
                StmtKind::Match { arms, .. } => arms.iter().any(|a| block(&a.body)),
                StmtKind::ForEach { body, .. } => block(body),
                _ => false,
            };
            s.kind.for_each_expr(|x| found = found || expr(x));
            found
        })
    }
    block(&e.req.block)
}

struct InstanceSlot {
    instance: Instance,
}

/// Simulates an edge over a trace with the reference interpreter.
pub fn simulate(
    edge: &LoadedEdge,
    trace: &[TraceLine],
    opts: SimOptions,
    sync_interval: f64,
) -> Result<SimReport, SimError> {
    run(edge, trace, opts, sync_interval, None, &Interp)
}

/// Simulates an edge over a trace, running handlers with `executor`.
pub fn simulate_with(
    edge: &LoadedEdge,
    trace: &[TraceLine],
    opts: SimOptions,
    sync_interval: f64,
    executor: &dyn Executor,
) -> Result<SimReport, SimError> {
    run(edge, trace, opts, sync_interval, None, executor)
}

/// Simulates an edge with its elements in another order and on other sides (a planner's
/// layout), everything else as [`simulate`] does. The planner's soundness test compares the
/// two: an equivalent layout must produce the same report.
pub fn simulate_layout(
    edge: &LoadedEdge,
    trace: &[TraceLine],
    opts: SimOptions,
    sync_interval: f64,
    layout: &Layout,
) -> Result<SimReport, SimError> {
    let names: Vec<&str> = edge.elements.iter().map(|e| e.use_.name.as_str()).collect();
    layout.validate(&names).map_err(|e| SimError::Element {
        element: "-".into(),
        message: format!("invalid layout: {e}"),
    })?;
    run(edge, trace, opts, sync_interval, Some(layout), &Interp)
}

fn run(
    edge: &LoadedEdge,
    trace: &[TraceLine],
    opts: SimOptions,
    sync_interval: f64,
    layout: Option<&Layout>,
    executor: &dyn Executor,
) -> Result<SimReport, SimError> {
    let mut sim = Sim::new(edge, opts, sync_interval, layout, executor);
    let rpcs: Vec<&TraceRpc> = trace
        .iter()
        .filter_map(|l| match l {
            TraceLine::Rpc(r) => Some(r),
            TraceLine::Control(_) => None,
        })
        .collect();
    let controls: Vec<&TraceControl> = trace
        .iter()
        .filter_map(|l| match l {
            TraceLine::Control(c) => Some(c),
            TraceLine::Rpc(_) => None,
        })
        .collect();
    let ids = rpc_ids(&rpcs);
    let mut heap = BinaryHeap::new();
    for (i, r) in rpcs.iter().enumerate() {
        heap.push(Event {
            t: r.t,
            rank: 1,
            seq: i,
            rpc: i,
        });
    }
    let mut seq = rpcs.len();
    let mut flights: Vec<Option<InFlight>> = (0..rpcs.len()).map(|_| None).collect();
    let mut results: Vec<Option<RpcResult>> = vec![None; rpcs.len()];
    let mut next_control = 0;
    // Control-plane writes are applied in time order, before RPC events at the same time.
    let mut controls_sorted = controls.clone();
    controls_sorted.sort_by(|a, b| a.t.total_cmp(&b.t));
    while let Some(ev) = heap.pop() {
        while next_control < controls_sorted.len() && controls_sorted[next_control].t <= ev.t {
            let c = controls_sorted[next_control];
            sim.advance(c.t);
            sim.control_write(c)?;
            next_control += 1;
        }
        sim.advance(ev.t);
        let r = rpcs[ev.rpc];
        if ev.rank == 1 {
            let flight = sim.request(ids[ev.rpc], r)?;
            let reached = flight.early_response.is_none();
            flights[ev.rpc] = Some(flight);
            if reached && r.t_resp.is_some() {
                heap.push(Event {
                    t: r.t_resp.unwrap_or(r.t),
                    rank: 0,
                    seq,
                    rpc: ev.rpc,
                });
                seq += 1;
                continue;
            }
        }
        if let Some(flight) = flights[ev.rpc].take() {
            results[ev.rpc] = Some(sim.response(r, flight)?);
        }
    }
    for c in &controls_sorted[next_control..] {
        sim.advance(c.t);
        sim.control_write(c)?;
    }
    let mut state = BTreeMap::new();
    let mut errors = BTreeMap::new();
    for ((k, replica), &i) in &sim.instances {
        let slot = &mut sim.slots[i];
        let name = format!("{}@{replica}", edge.elements[*k].use_.name);
        errors.insert(
            name.clone(),
            (slot.instance.errors, slot.instance.malformed),
        );
        let snap = snapshot(slot.instance.store.as_mut());
        state.insert(name, snap);
    }
    Ok(SimReport {
        results: results.into_iter().flatten().collect(),
        channels: sim.channels,
        state,
        errors,
    })
}

/// The `rpc_id()` of each RPC, unique within the run: per-RPC metadata is keyed by it, so two
/// RPCs in flight must never share one. A trace id that is a number (`parse_trace` gives an
/// RPC without an id one no other line has, and refuses repeats) is used as given the first
/// time; any other id, or a number already taken (lines built without `parse_trace`), gets
/// the next number above every numeric id of the trace.
fn rpc_ids(rpcs: &[&TraceRpc]) -> Vec<u64> {
    let numeric: Vec<Option<u64>> = rpcs.iter().map(|r| r.id.as_u64()).collect();
    let mut fresh = numeric
        .iter()
        .flatten()
        .max()
        .map_or(1, |m| m.saturating_add(1));
    let mut taken = BTreeSet::new();
    numeric
        .into_iter()
        .map(|n| match n {
            Some(n) if taken.insert(n) => n,
            _ => {
                while !taken.insert(fresh) {
                    fresh = fresh.wrapping_add(1);
                }
                fresh
            }
        })
        .collect()
}

fn snapshot(store: &mut (dyn StateStore + Send)) -> BTreeMap<String, Value> {
    store.snapshot().into_iter().collect()
}

struct Sim<'a> {
    edge: &'a LoadedEdge,
    /// An explicit order and sides ([`simulate_layout`]); `None` runs the configured chain.
    layout: Option<&'a Layout>,
    /// Element index at each chain position: the layout's order, or the configured one.
    order: Vec<usize>,
    executor: &'a dyn Executor,
    opts: SimOptions,
    clock: VirtualClock,
    shared: SharedState,
    /// Instance (element index, replica) → its index in `slots`.
    instances: BTreeMap<(usize, String), usize>,
    slots: Vec<InstanceSlot>,
    /// Elements (by index) whose first instance exists, so their shared config state is set.
    configured: BTreeSet<usize>,
    channels: Vec<ChannelRecord>,
    /// Control-plane writes to local state so far, replayed into instances created later.
    control: Vec<TraceControl>,
    next_sync: f64,
    sync_interval: f64,
}

/// Starts one instance of every element of `edge`, for each method it is checked for, as a
/// run starts one (`init`, with its `require`s, then the config's `state:`), on a virtual
/// clock at 0; every failure, in chain order. A run starts an instance only when an RPC
/// first reaches it, so a parameter an element refuses could wait for the first RPC that
/// gets that far: `weft check --config` reports them all before any RPC.
pub fn start_each_instance(edge: &LoadedEdge) -> Vec<SimError> {
    let mut sim = Sim::new(edge, SimOptions::default(), f64::INFINITY, None, &Interp);
    let mut failures = Vec::new();
    for k in 0..edge.elements.len() {
        for method in &edge.methods {
            // A replica per method: the instance of another method's IR is another one.
            if let Err(e) = sim.instance(k, &method.full_name, method) {
                failures.push(e);
                // One method's failure is the element's: its `init` is the same code.
                break;
            }
        }
    }
    failures
}

impl<'a> Sim<'a> {
    fn new(
        edge: &'a LoadedEdge,
        opts: SimOptions,
        sync_interval: f64,
        layout: Option<&'a Layout>,
        executor: &'a dyn Executor,
    ) -> Self {
        let order = match layout {
            Some(l) => l.order.clone(),
            None => (0..edge.elements.len()).collect(),
        };
        Sim {
            edge,
            layout,
            order,
            executor,
            slots: Vec::new(),
            opts,
            clock: VirtualClock::new(0.0),
            shared: SharedState::new(),
            instances: BTreeMap::new(),
            configured: BTreeSet::new(),
            channels: Vec::new(),
            control: Vec::new(),
            next_sync: sync_interval,
            sync_interval,
        }
    }

    fn advance(&mut self, t: f64) {
        if t >= self.next_sync {
            // Merging is idempotent when nothing was written in between, so one merge stands
            // for every interval that passed (a jump of hours in a trace costs one merge).
            let missed = ((t - self.next_sync) / self.sync_interval).floor();
            self.clock.set(self.next_sync + missed * self.sync_interval);
            self.shared.sync();
            self.next_sync += (missed + 1.0) * self.sync_interval;
        }
        self.clock.set(t);
    }

    fn side(&self, k: usize) -> Side {
        if let Some(l) = self.layout {
            return l.sides[k];
        }
        let el = &self.edge.elements[k];
        match el.position {
            Position::Client | Position::PairFirst(_) => Side::Client,
            Position::Server | Position::PairSecond(_) => Side::Server,
            Position::Any => el.use_.constraints.side.unwrap_or(Side::Client),
        }
    }

    fn ir(&self, k: usize, method: &MethodSchema) -> Result<Arc<Element>, SimError> {
        let el = &self.edge.elements[k];
        el.ir
            .get(&method.full_name)
            .cloned()
            .ok_or_else(|| SimError::Element {
                element: el.use_.name.clone(),
                message: format!("not checked for method {}", method.full_name),
            })
    }

    fn instance(
        &mut self,
        k: usize,
        replica: &str,
        method: &MethodSchema,
    ) -> Result<usize, SimError> {
        let key = (k, replica.to_owned());
        if !self.instances.contains_key(&key) {
            let ir = self.ir(k, method)?;
            let el = &self.edge.elements[k];
            let store = self
                .shared
                .instance_store(&self.scope(k), replica, &var_specs(&ir));
            // The runtime's stream for the same instance (edge, element, service) in version 1.
            let rng =
                SeededRng::for_stream(self.opts.seed, &format!("{}@{replica}", self.scope(k)));
            let store = self.executor.wrap_store(&ir, Box::new(store));
            let mut instance = Instance::new(el.use_.name.clone(), store, Box::new(rng));
            let mut host = Host::new(&self.clock, &mut self.channels);
            let first = self.configured.insert(k);
            start_instance(&mut instance, &ir, &el.use_, first, &mut host)?;
            // Local state is per instance, so each one gets the control-plane writes so far.
            for c in self.control.iter().filter(|c| c.element == el.use_.name) {
                control_apply(instance.store.as_mut(), &ir, c)?;
            }
            self.slots.push(InstanceSlot { instance });
            self.instances.insert(key.clone(), self.slots.len() - 1);
        }
        self.instances
            .get(&key)
            .copied()
            .ok_or_else(|| SimError::Element {
                element: self.edge.elements[k].use_.name.clone(),
                message: "instance vanished".into(),
            })
    }

    fn control_write(&mut self, c: &TraceControl) -> Result<(), SimError> {
        let Some(k) = self
            .edge
            .elements
            .iter()
            .position(|e| e.use_.name == c.element)
        else {
            return Err(SimError::Element {
                element: c.element.clone(),
                message: "no such element in this edge".into(),
            });
        };
        let method = self
            .edge
            .methods
            .first()
            .cloned()
            .ok_or_else(|| SimError::Element {
                element: c.element.clone(),
                message: "the edge has no methods".into(),
            })?;
        let ir = self.ir(k, &method)?;
        if is_shared(&ir, &c.var) {
            // One write to the shared variable, as a control plane makes it: through a store
            // of its own (for weak state, a replica that merges at the next sync), never
            // repeated per instance nor replayed into instances created later.
            let mut store =
                self.shared
                    .instance_store(&self.scope(k), CONTROL_PLANE, &var_specs(&ir));
            return control_apply(&mut store, &ir, c);
        }
        for ((ek, _), &i) in self.instances.iter() {
            if *ek == k {
                control_apply(self.slots[i].instance.store.as_mut(), &ir, c)?;
            }
        }
        self.control.push(c.clone());
        Ok(())
    }

    /// Where the instances of element `k` share their state.
    fn scope(&self, k: usize) -> String {
        format!(
            "{}/{}",
            self.edge.edge.name, self.edge.elements[k].use_.name
        )
    }

    /// One past the last element of the segment that starts at `k`: consecutive elements on
    /// the same side, ended after a server-side element that may route the request (the next
    /// one's replica depends on the header it sets).
    /// The end (exclusive) of the segment that starts at chain position `start`: the
    /// neighbouring positions on the same side.
    fn segment_end(&self, start: usize, method: &MethodSchema) -> Result<usize, SimError> {
        let side = self.side(self.order[start]);
        let mut end = start + 1;
        while end < self.order.len() && self.side(self.order[end]) == side {
            if side == Side::Server && sets_headers(&*self.ir(self.order[end - 1], method)?) {
                break;
            }
            end += 1;
        }
        Ok(end)
    }

    fn replica_for(&self, k: usize, src: &str, msg: &Message) -> String {
        match self.side(k) {
            Side::Client => src.to_owned(),
            Side::Server => msg
                .headers
                .get("dst")
                .cloned()
                .unwrap_or_else(|| self.edge.edge.to.clone()),
        }
    }

    fn request(&mut self, rpc_id: u64, r: &TraceRpc) -> Result<InFlight, SimError> {
        let line_err = |message: String| SimError::Trace {
            line: r.line,
            message,
        };
        if r.method.is_empty() && self.edge.methods.len() > 1 {
            // Taking the first would run the RPC as a method it may not be.
            let names: Vec<&str> = self
                .edge
                .methods
                .iter()
                .map(|m| m.full_name.as_str())
                .collect();
            return Err(line_err(format!(
                "no `method`, and edge `{}` has several: {}; name one",
                self.edge.edge.name,
                names.join(", ")
            )));
        }
        let method_pos = self
            .edge
            .methods
            .iter()
            .position(|m| {
                self.edge
                    .method(&r.method)
                    .is_some_and(|x| x.full_name == m.full_name)
                    || r.method.is_empty()
            })
            .ok_or_else(|| {
                line_err(format!(
                    "method `{}` is not on edge `{}`, which covers {}",
                    r.method,
                    self.edge.edge.name,
                    crate::diag::some_of(
                        self.edge.methods.iter().map(|m| m.full_name.as_str()),
                        crate::config::LISTED
                    )
                ))
            })?;
        let method = self.edge.methods[method_pos].clone();
        let bytes = wire::json_to_bytes(&method.request, &r.req)
            .map_err(|e| line_err(format!("`req`: {e}")))?;
        let mut msg = Message::request(bytes);
        msg.headers = r.headers.clone();
        let info = RpcInfo {
            id: rpc_id,
            method: method.full_name.clone(),
            src: r.src.clone(),
            service: self.edge.edge.to.clone(),
            routed: None,
        };
        let mut flight = InFlight {
            info,
            method: method_pos,
            segments: Vec::new(),
            outcome: Outcome::Ok,
            by: None,
            early_response: None,
            server_request: None,
        };
        let n = self.order.len();
        let mut k = 0;
        while k < n {
            let replica = self.replica_for(self.order[k], &r.src, &msg);
            let mut end = self.segment_end(k, &method)?;
            if (k..end).any(|j| {
                !self
                    .instances
                    .contains_key(&(self.order[j], replica.clone()))
            }) {
                // An instance comes to life (and runs `init`) only when a request first
                // reaches its element, so a segment with a missing instance runs one element
                // at a time until all of them exist.
                end = k + 1;
            }
            let mut irs = Vec::with_capacity(end - k);
            let mut slots = Vec::with_capacity(end - k);
            for j in k..end {
                irs.push(self.ir(self.order[j], &method)?);
                slots.push(self.instance(self.order[j], &replica, &method)?);
            }
            let mut instances = borrow_instances(&mut self.slots, &slots);
            let mut host = Host::new(&self.clock, &mut self.channels);
            let mut scratch = RpcScratch::default();
            let done = self.executor.request(
                &irs,
                &mut instances,
                msg,
                &flight.info,
                &mut host,
                &mut scratch,
            );
            flight.segments.push((k, done.decided, replica, scratch));
            // Past the end when every element forwarded; only read on a rejection or reply.
            let by = k + done.decided;
            match done.verdict {
                Verdict::Forward(m) => msg = m,
                Verdict::Reject { code, message } => {
                    flight.outcome = Outcome::Rejected;
                    flight.info.routed = done.routed;
                    flight.by = Some(self.edge.elements[self.order[by]].use_.name.clone());
                    flight.early_response = Some(Message::error(code, message));
                    return Ok(flight);
                }
                Verdict::Reply(m) => {
                    flight.outcome = Outcome::Replied;
                    flight.info.routed = done.routed;
                    flight.by = Some(self.edge.elements[self.order[by]].use_.name.clone());
                    flight.early_response = Some(m);
                    return Ok(flight);
                }
            }
            k = end;
        }
        flight.info.routed = msg.headers.get("dst").cloned();
        flight.server_request = Some(msg);
        Ok(flight)
    }

    fn response(&mut self, r: &TraceRpc, mut flight: InFlight) -> Result<RpcResult, SimError> {
        let method = self.edge.methods[flight.method].clone();
        let mut resp = match flight.early_response.take() {
            Some(m) => m,
            None if r.status == Code::Ok => {
                let bytes = wire::json_to_bytes(&method.response, &r.resp).map_err(|e| {
                    SimError::Trace {
                        line: r.line,
                        message: format!("rpc {}: `resp`: {e}", r.id),
                    }
                })?;
                let mut m = Message::response(bytes);
                m.headers = r.resp_headers.clone();
                m
            }
            None => {
                let mut m = Message::error(r.status, r.status_message.clone());
                m.headers = r.resp_headers.clone();
                m
            }
        };
        for (k, ran, replica, scratch) in flight.segments.iter_mut().rev() {
            if *ran == 0 {
                continue;
            }
            let mut irs = Vec::with_capacity(*ran);
            let mut slots = Vec::with_capacity(*ran);
            for j in *k..*k + *ran {
                irs.push(self.ir(self.order[j], &method)?);
                slots.push(self.instance(self.order[j], replica, &method)?);
            }
            let mut instances = borrow_instances(&mut self.slots, &slots);
            let mut host = Host::new(&self.clock, &mut self.channels);
            resp = self.executor.response(
                &irs,
                &mut instances,
                *ran - 1,
                resp,
                &flight.info,
                &mut host,
                scratch,
            );
        }
        let server = flight.server_request.as_ref();
        let server_saw = match server {
            Some(m) => Some(
                wire::bytes_to_json(&method.request, &m.bytes)
                    .unwrap_or_else(|e| json!({"malformed": e.to_string()})),
            ),
            None => None,
        };
        let mut server_headers = server.map(|m| m.headers.clone()).unwrap_or_default();
        let dst = server_headers
            .remove("dst")
            .or_else(|| flight.info.routed.clone());
        let client_got = (resp.code == Code::Ok).then(|| {
            wire::bytes_to_json(&method.response, &resp.bytes)
                .unwrap_or_else(|e| json!({"malformed": e.to_string()}))
        });
        Ok(RpcResult {
            id: r.id.clone(),
            outcome: flight.outcome,
            status: resp.code,
            message: resp.status_message.clone(),
            server_saw,
            server_headers,
            dst,
            client_got,
            client_headers: resp.headers.clone(),
            by: flight.by,
        })
    }
}

/// Starts a new instance of a configured element as every executor starts one (the
/// simulator, `weft bench`): with its iteration limit, which holds `init` too, then `init`,
/// then the config's `state:` values.
///
/// Local state is per instance, so each one gets the configured values; shared state is one
/// variable, written only when `first` (the element's first instance), so a replica joining
/// later does not reset it.
pub fn start_instance(
    instance: &mut Instance,
    ir: &Element,
    use_: &ElementUse,
    first: bool,
    host: &mut Host<'_>,
) -> Result<(), SimError> {
    let err = |message: String| SimError::Element {
        element: use_.name.clone(),
        message,
    };
    instance.max_iterations = use_.iteration_limit();
    interp::run_init(instance, ir, host).map_err(|e| err(format!("`init` failed: {e}")))?;
    for (var, value) in &use_.state {
        if !first && is_shared(ir, var) {
            continue;
        }
        write_state(instance.store.as_mut(), ir, var, None, value.clone())
            .map_err(|message| err(format!("config state `{var}`: {message}")))?;
    }
    Ok(())
}

/// Mutable borrows of the instances at distinct indices `at`, in that order.
fn borrow_instances<'s>(slots: &'s mut [InstanceSlot], at: &[usize]) -> Vec<&'s mut Instance> {
    let mut all: Vec<Option<&mut Instance>> =
        slots.iter_mut().map(|s| Some(&mut s.instance)).collect();
    at.iter()
        .filter_map(|&i| all.get_mut(i).and_then(Option::take))
        .collect()
}

/// The replica name control-plane writes to shared state go through.
const CONTROL_PLANE: &str = "<control-plane>";

pub fn var_specs(ir: &Element) -> Vec<VarSpec> {
    ir.state
        .iter()
        .map(|v| VarSpec {
            name: v.name.clone(),
            kind: v.kind,
            consistency: v.consistency,
            combiner: v.combiner,
            zero: v.value_type().zero_value(),
            capacity: v.capacity,
        })
        .collect()
}

/// Whether a state variable is shared between instances (`@consistency(strong|weak)`).
fn is_shared(ir: &Element, var: &str) -> bool {
    ir.var(var)
        .is_some_and(|i| ir.state[i].consistency != Consistency::Local)
}

/// Applies a control-plane write to one store.
fn control_apply(
    store: &mut dyn StateStore,
    ir: &Element,
    c: &TraceControl,
) -> Result<(), SimError> {
    let err = |message: String| SimError::Element {
        element: c.element.clone(),
        message,
    };
    let Some(var) = ir.var(&c.var) else {
        return Err(err(format!("has no state variable `{}`", c.var)));
    };
    let sv = &ir.state[var];
    match &c.key {
        Some(k) => {
            let key = json::from_json(k, &sv.key_type())
                .map_err(|m| err(format!("`{}` key: {m}", c.var)))?;
            let value = json::from_json(&c.value, sv.value_type())
                .map_err(|m| err(format!("`{}`: {m}", c.var)))?;
            write_state(store, ir, &c.var, Some(key), value).map_err(err)
        }
        None => {
            let value =
                json::from_json(&c.value, &sv.ty).map_err(|m| err(format!("`{}`: {m}", c.var)))?;
            write_state(store, ir, &c.var, None, value).map_err(err)
        }
    }
}

/// Writes a control-plane value: one entry when `key` is given, else the whole variable
/// (a map's entries are merged in; a vector and a scalar are replaced, so a control plane
/// that publishes a new replica list drops the replicas it left out).
pub fn write_state(
    store: &mut dyn StateStore,
    ir: &Element,
    var_name: &str,
    key: Option<Value>,
    value: Value,
) -> Result<(), String> {
    let var = ir
        .var(var_name)
        .ok_or_else(|| format!("no state variable `{var_name}`"))?;
    let sv = &ir.state[var];
    if let Some(k) = key {
        let v = coerce_value(value, sv.value_type())
            .map_err(|found| format!("expected {}, found {found}", sv.value_type()))?;
        return store.set(var, k, v).map_err(|e| e.to_string());
    }
    let v = coerce_value(value, &sv.ty)
        .map_err(|found| format!("expected {}, found {found}", sv.ty))?;
    match (sv.kind, v) {
        (CellKind::Scalar, v) => store.set(var, Value::Unit, v).map_err(|e| e.to_string()),
        (CellKind::Map, Value::Map(m)) => {
            for (k, v) in m {
                store.set(var, k, v).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        (CellKind::Vec, Value::Vec(items)) => {
            for i in (0..store.len(var).map_err(|e| e.to_string())?).rev() {
                store
                    .delete(var, &Value::Int(i as i64))
                    .map_err(|e| e.to_string())?;
            }
            for item in items {
                let n = store.len(var).map_err(|e| e.to_string())?;
                store
                    .set(var, Value::Int(n as i64), item)
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        (_, other) => Err(format!(
            "cannot write a {} into `{var_name}`",
            other.kind_name()
        )),
    }
}

/// Renders a message value held in state or written to a channel.
pub fn message_json(edge: &LoadedEdge, m: &Message) -> Json {
    method_message_json(edge.methods.first(), m)
}

/// [`message_json`] for a message of `method`. Without one, or when the bytes do not decode
/// (an edge whose elements read no field forwards bytes it never checked), the body is
/// `null` and the bytes themselves come along in base64 as `undecoded`: a log that showed
/// only `null` lost what was sent.
pub fn method_message_json(method: Option<&MethodSchema>, m: &Message) -> Json {
    if m.code != Code::Ok {
        return json!({"status": m.code.name(), "message": m.status_message});
    }
    match descriptor_of(method, m).and_then(|d| wire::bytes_to_json(d, &m.bytes).ok()) {
        Some(body) => json!({"message": body, "headers": m.headers}),
        None => json!({"message": null, "headers": m.headers, "undecoded": undecoded(m)}),
    }
}

fn undecoded(m: &Message) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(&m.bytes)
}

/// The type of a message of `method`: its request's or its response's.
fn descriptor_of<'m>(
    method: Option<&'m MethodSchema>,
    m: &Message,
) -> Option<&'m prost_reflect::MessageDescriptor> {
    method.map(|mm| {
        if m.kind == weft_hostcalls::MsgKind::Request {
            &mm.request
        } else {
            &mm.response
        }
    })
}

/// [`method_message_json`] written as JSON text onto `out` (the same value, keys in the same
/// order), without building it first.
pub fn write_method_message_json(method: Option<&MethodSchema>, m: &Message, out: &mut Vec<u8>) {
    if m.code != Code::Ok {
        let v = json!({"status": m.code.name(), "message": m.status_message});
        out.extend_from_slice(v.to_string().as_bytes());
        return;
    }
    out.extend_from_slice(b"{\"headers\":");
    // A map of strings always serializes.
    if serde_json::to_writer(&mut *out, &m.headers).is_err() {
        out.extend_from_slice(b"{}");
    }
    out.extend_from_slice(b",\"message\":");
    let written =
        descriptor_of(method, m).is_some_and(|d| wire::write_bytes_json(d, &m.bytes, out).is_ok());
    if !written {
        out.extend_from_slice(b"null,\"undecoded\":\"");
        out.extend_from_slice(undecoded(m).as_bytes());
        out.push(b'"');
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_errors_name_the_file_line() {
        let text = "# comment\n\n{\"t\": 0}\n{\"t\": \"soon\"}\n";
        match parse_trace(text) {
            Err(SimError::Trace { line, message }) => {
                assert_eq!(line, 4);
                assert!(message.contains("`t`"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let ok = parse_trace("# c\n{\"id\": \"x\", \"t\": 1}\n").unwrap();
        let TraceLine::Rpc(r) = &ok[0] else { panic!() };
        assert_eq!(r.line, 2);
    }

    #[test]
    fn t_resp_before_t_is_refused() {
        assert!(parse_trace("{\"t\": 2, \"t_resp\": 1}\n").is_err());
    }
}
