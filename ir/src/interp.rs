//! The reference interpreter: the semantic oracle every other executor is tested against.
//!
//! It walks the IR directly. Messages stay wire bytes: a field read decodes only that field,
//! a write re-encodes only that field and keeps everything else (unknown fields included).
//! All effects go through `weft-hostcalls` (state stores, clock, RNG, channels, built-ins),
//! the same implementations the JIT calls, so the two can only differ in their own code.
//!
//! Run-time errors (integer division by zero, an index out of range, an Option used as a
//! value when it is None…) reject the RPC with INTERNAL and count against the element;
//! malformed message bytes reject it with INVALID_ARGUMENT and count as malformed.

use std::sync::Arc;

use weft_hostcalls::abi::ScalarBlock;
use weft_hostcalls::builtins;
use weft_hostcalls::channel::{ChannelRecord, ChannelSink};
use weft_hostcalls::clock::Clock;
use weft_hostcalls::rng::{self, RandomSource};
use weft_hostcalls::state::StateStore;
use weft_hostcalls::{Code, Message, MsgKind, Value};

use crate::ast::BinOp;
use crate::eval::{self, RuntimeError};
use crate::ir::*;
use crate::types::Type;
use crate::wire;

/// One running instance of an element: its state, its random stream and its counters.
pub struct Instance {
    pub name: String,
    pub store: Box<dyn StateStore + Send>,
    pub rng: Box<dyn RandomSource>,
    /// Run-time errors raised by this element (each rejected its RPC with INTERNAL).
    pub errors: u64,
    /// RPCs rejected because their bytes did not parse.
    pub malformed: u64,
    /// Of `errors`, those where a handler passed its iteration limit (`max_iterations`):
    /// apart, so an operator can tell a limit set too low from a failing element.
    pub iteration_limited: u64,
    /// The most `foreach` iterations one handler run may make (`max_iterations` in the
    /// config; [`crate::eval::MAX_ITERATIONS`] by default). Both executors read it.
    pub max_iterations: u64,
    /// The store's state block as of the last [`Instance::scalar_block`].
    block: Option<Arc<ScalarBlock>>,
}

/// One RPC's scratch (`set_metadata` / `get_metadata`) in one segment: the keys of every
/// element of the segment in chain order ([`scratch_offsets`]), from the RPC's request to its
/// response. It travels with the RPC (the runtime's `Rpc`, the simulator's flight), as an
/// interceptor keeps a value across its call: nothing is looked up by RPC id, nothing has
/// to end when a response never comes (it is dropped with the RPC), and a reload that hands
/// an instance's state to a new version has nothing of the RPCs in flight to move. Each RPC
/// starts with a fresh one, every key unset.
///
/// The usual segment keeps one key (metrics' start time), so [`INLINE_KEYS`] live in the
/// value itself and the rest, once asked for, on the heap: made and dropped per RPC, a
/// `SmallVec` cost 100 instructions per RPC in `slots` alone (its growth path), more than
/// the lookup by RPC id this replaced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RpcScratch {
    inline: [Option<Value>; INLINE_KEYS],
    /// Every key once a segment asked for more than [`INLINE_KEYS`] (the inline ones moved
    /// here first); empty until then.
    spilled: Vec<Option<Value>>,
}

/// Keys an [`RpcScratch`] holds without allocating.
pub const INLINE_KEYS: usize = 2;

impl RpcScratch {
    /// The first `len` keys (every element of a segment whose keys end there), unset ones
    /// added as needed; those already there keep their values, whatever `len` was before.
    #[inline]
    pub fn slots(&mut self, len: usize) -> &mut [Option<Value>] {
        if self.spilled.is_empty() && len <= INLINE_KEYS {
            return &mut self.inline[..len];
        }
        self.spill(len)
    }

    #[cold]
    fn spill(&mut self, len: usize) -> &mut [Option<Value>] {
        if self.spilled.is_empty() {
            self.spilled
                .extend(self.inline.iter_mut().map(Option::take));
        }
        if self.spilled.len() < len {
            self.spilled.resize(len, None);
        }
        &mut self.spilled[..len]
    }
}

/// How many keys the elements of a segment keep in its [`RpcScratch`].
pub fn scratch_len<E: std::borrow::Borrow<Element>>(elements: &[E]) -> usize {
    elements.iter().map(|e| e.borrow().metadata.len()).sum()
}

/// Where each element's keys start in its segment's [`RpcScratch`], and after the last
/// element where they end: `elements.len() + 1` offsets.
pub fn scratch_offsets<E: std::borrow::Borrow<Element>>(elements: &[E]) -> Vec<usize> {
    let mut at = 0;
    let mut offsets = Vec::with_capacity(elements.len() + 1);
    offsets.push(0);
    for e in elements {
        at += e.borrow().metadata.len();
        offsets.push(at);
    }
    offsets
}

impl Instance {
    pub fn new(
        name: impl Into<String>,
        store: Box<dyn StateStore + Send>,
        rng: Box<dyn RandomSource>,
    ) -> Instance {
        Instance {
            name: name.into(),
            store,
            rng,
            errors: 0,
            malformed: 0,
            iteration_limited: 0,
            max_iterations: crate::eval::MAX_ITERATIONS,
            block: None,
        }
    }

    /// The store's state block (see [`StateStore::scalar_block`]), held by the instance: a
    /// compiled executor takes it once at the start of a call and addresses it until the
    /// call returns, while host calls hand the store out `&mut` and a store may replace or
    /// drop its own block in any of them. The instance keeps the block alive through all of
    /// that (compiled code would otherwise write through a dangling pointer); a store that
    /// changed its block is followed from the next call on. Call it only between calls.
    // Inline: a compiled call asks it for every element with a block, on every RPC.
    #[inline]
    pub fn scalar_block(&mut self) -> Option<&ScalarBlock> {
        match self.store.scalar_block() {
            Some(b) if self.block.as_ref().is_some_and(|held| Arc::ptr_eq(held, b)) => {}
            Some(b) => self.block = Some(Arc::clone(b)),
            None => self.block = None,
        }
        self.block.as_deref()
    }

    /// Counts a run-time error against this instance, as the interpreter does.
    pub fn count_error(&mut self, err: &RuntimeError) {
        count(self, err);
    }
}

/// What the RPC is, for `rpc_id()`, `method()`, `src()`, `dst()`.
#[derive(Clone, Debug)]
pub struct RpcInfo {
    pub id: u64,
    /// Full method name, `pkg.Service/Method`.
    pub method: String,
    /// The calling service (or client replica).
    pub src: String,
    /// The callee service; `dst()` returns it until the RPC is routed to a replica.
    pub service: String,
    /// The replica the request was routed to (the final `dst` header), for `resp` handlers.
    pub routed: Option<String>,
}

/// The host side of one call: time and where channel records go.
///
/// Elements see time *per pass*: every `current_time()` and every channel record of one
/// pass of a message through a segment (its request handlers, or its response handlers)
/// gets the same instant, read from `clock` when the pass first needs it. So a chain reads
/// the system clock at most once per direction (a vDSO call of 25–35 ns on a VM, as much as
/// a few elements of fused code), a pass that needs no time reads none, and elements moved
/// within a segment see the instant they saw before (docs/language.md, "Time").
pub struct Host<'a> {
    pub clock: &'a dyn Clock,
    pub channels: &'a mut dyn ChannelSink,
    /// The current pass's instant, once read.
    instant: Option<f64>,
}

impl<'a> Host<'a> {
    pub fn new(clock: &'a dyn Clock, channels: &'a mut dyn ChannelSink) -> Self {
        Host {
            clock,
            channels,
            instant: None,
        }
    }

    /// The instant of the current pass: the clock's time when the pass first asked.
    #[inline]
    pub fn now(&mut self) -> f64 {
        match self.instant {
            Some(t) => t,
            None => *self.instant.insert(self.clock.now()),
        }
    }

    /// Starts a pass: the next [`Host::now`] reads the clock. Executors call it where a
    /// message enters a segment (each direction), not per element or per compiled part.
    #[inline]
    pub fn start_pass(&mut self) {
        self.instant = None;
    }
}

/// The result of a request handler.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Continue towards the server with this (maybe rewritten) request.
    Forward(Message),
    /// Fail the RPC; the error travels back up.
    Reject { code: Code, message: String },
    /// Answer locally with this response; it travels back up.
    Reply(Message),
}

/// Runs `init`: parameters that name state are stored first, then the body.
pub fn run_init(inst: &mut Instance, e: &Element, host: &mut Host<'_>) -> Result<(), RuntimeError> {
    for (i, v) in e.state.iter().enumerate() {
        if let Some(p) = &v.from_param {
            inst.store.set(i, Value::Unit, p.clone())?;
        }
    }
    let rpc = RpcInfo {
        id: 0,
        method: String::new(),
        src: String::new(),
        service: String::new(),
        routed: None,
    };
    // `init` has no RPC, and the checker refuses metadata there: no scratch.
    let mut frame = Frame::new(e, Handler::Init, inst, &rpc, host, &mut []);
    match frame.block(&e.init.block)? {
        Flow::Normal | Flow::Return(_) | Flow::Sent(_) => Ok(()),
    }
}

/// Runs the element's `req` handler on a request. `scratch` is the element's keys in the
/// RPC's scratch (`&mut RpcScratch::slots(…)[at..]`, [`scratch_offsets`]), which its
/// `resp` handler gets too.
pub fn on_request(
    inst: &mut Instance,
    e: &Element,
    msg: Message,
    rpc: &RpcInfo,
    host: &mut Host<'_>,
    scratch: &mut [Option<Value>],
) -> Verdict {
    debug_assert!(e.is_runnable(), "element {} has unbound parameters", e.name);
    let result = {
        let mut frame = Frame::new(e, Handler::Req, inst, rpc, host, scratch);
        frame.set_msg(msg);
        frame.run_handler()
    };
    match result {
        Ok(Sent::Down(m)) => Verdict::Forward(m),
        Ok(Sent::Up(m)) => Verdict::Reply(m),
        Ok(Sent::Reject(code, message)) => Verdict::Reject { code, message },
        Err(err) => {
            count(inst, &err);
            Verdict::Reject {
                code: err.code(),
                message: format!("{}: {err}", e.name),
            }
        }
    }
}

/// Runs the element's `resp` handler on a response (or an error travelling up).
pub fn on_response(
    inst: &mut Instance,
    e: &Element,
    msg: Message,
    rpc: &RpcInfo,
    host: &mut Host<'_>,
    scratch: &mut [Option<Value>],
) -> Message {
    let headers = msg.headers.clone();
    let result = {
        let mut frame = Frame::new(e, Handler::Resp, inst, rpc, host, scratch);
        frame.set_msg(msg);
        frame.run_handler()
    };
    match result {
        Ok(Sent::Up(m)) | Ok(Sent::Down(m)) => m,
        Ok(Sent::Reject(code, message)) => Message {
            headers,
            ..Message::error(code, message)
        },
        Err(err) => {
            count(inst, &err);
            Message {
                headers,
                ..Message::error(err.code(), format!("{}: {err}", e.name))
            }
        }
    }
}

fn count(inst: &mut Instance, err: &RuntimeError) {
    match err {
        RuntimeError::Malformed(_) => inst.malformed += 1,
        RuntimeError::TooManyIterations { .. } => {
            inst.errors += 1;
            inst.iteration_limited += 1;
        }
        _ => inst.errors += 1,
    }
}

enum Sent {
    Down(Message),
    Up(Message),
    Reject(Code, String),
}

enum Flow {
    Normal,
    Return(Value),
    Sent(Sent),
}

struct Frame<'a, 'h> {
    element: &'a Element,
    handler: Handler,
    body: &'a Body,
    locals: Vec<Value>,
    inst: &'a mut Instance,
    rpc: &'a RpcInfo,
    host: &'a mut Host<'h>,
    /// The element's keys in the RPC's scratch.
    scratch: &'a mut [Option<Value>],
    /// `foreach` iterations made so far (see [`crate::eval::MAX_ITERATIONS`]).
    iterations: u64,
}

impl<'a, 'h> Frame<'a, 'h> {
    fn new(
        element: &'a Element,
        handler: Handler,
        inst: &'a mut Instance,
        rpc: &'a RpcInfo,
        host: &'a mut Host<'h>,
        scratch: &'a mut [Option<Value>],
    ) -> Self {
        let body = element.body(handler);
        Frame {
            element,
            handler,
            body,
            locals: vec![Value::Unit; body.locals.len()],
            inst,
            rpc,
            host,
            scratch,
            iterations: 0,
        }
    }

    /// Key `key` of the element's scratch; a key the checker gave the element is always
    /// there, so a missing one is an executor's mistake, reported as such.
    fn scratch_slot(&mut self, key: MetaId) -> Result<&mut Option<Value>, RuntimeError> {
        let n = self.scratch.len();
        self.scratch.get_mut(key).ok_or_else(|| {
            RuntimeError::Type(format!(
                "metadata key {key} outside the RPC's scratch of {n}"
            ))
        })
    }

    fn set_msg(&mut self, m: Message) {
        if let Some(slot) = self.body.msg {
            self.locals[slot] = Value::Msg(Arc::new(m));
        }
    }

    fn current_msg(&self) -> Option<Message> {
        match self.body.msg.map(|s| &self.locals[s]) {
            Some(Value::Msg(m)) => Some((**m).clone()),
            _ => None,
        }
    }

    /// Runs the handler body; falling off the end forwards the message unchanged.
    fn run_handler(&mut self) -> Result<Sent, RuntimeError> {
        let flow = self.block(&self.body.block)?;
        match flow {
            Flow::Sent(s) => Ok(s),
            Flow::Normal | Flow::Return(_) => {
                let m = self
                    .current_msg()
                    .ok_or_else(|| RuntimeError::Type("handler without a message".into()))?;
                Ok(if self.handler == Handler::Req {
                    Sent::Down(m)
                } else {
                    Sent::Up(m)
                })
            }
        }
    }

    fn block(&mut self, b: &'a [Stmt]) -> Result<Flow, RuntimeError> {
        for s in b {
            match self.stmt(s)? {
                Flow::Normal => {}
                other => return Ok(other),
            }
        }
        Ok(Flow::Normal)
    }

    fn stmt(&mut self, s: &'a Stmt) -> Result<Flow, RuntimeError> {
        match &s.kind {
            StmtKind::Assign { local, value } => {
                self.locals[*local] = self.expr(value)?;
            }
            StmtKind::AssignPair {
                first,
                second,
                value,
            } => match self.expr(value)? {
                Value::Pair(p) => {
                    let (a, b) = *p;
                    self.locals[*first] = a;
                    self.locals[*second] = b;
                }
                other => {
                    return Err(RuntimeError::Type(format!(
                        "unpacking a {}",
                        other.kind_name()
                    )));
                }
            },
            StmtKind::StateStore { var, value } => {
                let v = self.expr(value)?;
                self.inst.store.set(*var, Value::Unit, v)?;
            }
            StmtKind::StateSet { var, key, value } => {
                let k = self.expr(key)?;
                let v = self.expr(value)?;
                self.inst.store.set(*var, k, v)?;
            }
            StmtKind::StateDelete { var, key } => {
                let k = self.expr(key)?;
                self.inst.store.delete(*var, &k)?;
            }
            StmtKind::LocalSet { local, key, value } => {
                let k = self.expr(key)?;
                let v = self.expr(value)?;
                local_set(&mut self.locals[*local], k, v)?;
            }
            StmtKind::LocalDelete { local, key } => {
                let k = self.expr(key)?;
                local_delete(&mut self.locals[*local], &k)?;
            }
            StmtKind::SetField { msg, field, value } => {
                let v = self.expr(value)?;
                let Value::Msg(m) = &mut self.locals[*msg] else {
                    return Err(RuntimeError::Type("set on a non-message".into()));
                };
                let bytes = wire::write(&m.bytes, field, &v)?;
                Arc::make_mut(m).bytes = bytes;
            }
            StmtKind::SetHeader { msg, name, value } => {
                let (Value::Str(n), Value::Str(v)) = (self.expr(name)?, self.expr(value)?) else {
                    return Err(RuntimeError::Type(
                        "header name and value must be strings".into(),
                    ));
                };
                let Value::Msg(m) = &mut self.locals[*msg] else {
                    return Err(RuntimeError::Type("header on a non-message".into()));
                };
                Arc::make_mut(m).set_header(n, v)?;
            }
            StmtKind::SetMetadata { key, value } => {
                let v = self.expr(value)?;
                *self.scratch_slot(*key)? = Some(v);
            }
            StmtKind::Eval(e) => {
                self.expr(e)?;
            }
            StmtKind::Match { scrutinee, arms } => {
                let v = self.expr(scrutinee)?;
                for arm in arms {
                    if self.bind(&arm.pattern, &v) {
                        return self.block(&arm.body);
                    }
                }
            }
            StmtKind::ForEach { coll, binder, body } => {
                let items: Vec<Value> = match coll {
                    Collection::State(var) => {
                        let is_map =
                            self.element.state[*var].kind == weft_hostcalls::state::CellKind::Map;
                        self.inst
                            .store
                            .entries(*var)?
                            .into_iter()
                            .map(|(k, v)| if is_map { Value::pair(k, v) } else { v })
                            .collect()
                    }
                    Collection::Value(e) => match self.expr(e)? {
                        Value::Vec(items) => items,
                        Value::Map(m) => m.into_iter().map(|(k, v)| Value::pair(k, v)).collect(),
                        other => {
                            return Err(RuntimeError::Type(format!(
                                "foreach over {}",
                                other.kind_name()
                            )));
                        }
                    },
                };
                for item in items {
                    crate::eval::count_iteration(&mut self.iterations, self.inst.max_iterations)?;
                    match binder {
                        Binder::One(l) => self.locals[*l] = item,
                        Binder::Pair(a, b) => {
                            let Value::Pair(p) = item else {
                                return Err(RuntimeError::Type("foreach pair binder".into()));
                            };
                            let (k, v) = *p;
                            self.locals[*a] = k;
                            self.locals[*b] = v;
                        }
                    }
                    match self.block(body)? {
                        Flow::Normal | Flow::Return(_) => {}
                        sent @ Flow::Sent(_) => return Ok(sent),
                    }
                }
            }
            StmtKind::Send(send) => return self.send(send),
            StmtKind::Return(v) => {
                let v = match v {
                    Some(e) => self.expr(e)?,
                    None => Value::Unit,
                };
                return Ok(Flow::Return(v));
            }
        }
        Ok(Flow::Normal)
    }

    fn send(&mut self, send: &'a SendKind) -> Result<Flow, RuntimeError> {
        let sent = match send {
            SendKind::Down(e) => Sent::Down(self.message(e)?),
            SendKind::Up(e) => Sent::Up(self.message(e)?),
            SendKind::Reject { code, message } => {
                let Value::Str(m) = self.expr(message)? else {
                    return Err(RuntimeError::Type("error message".into()));
                };
                Sent::Reject(*code, m)
            }
            SendKind::Channel { channel, value } => {
                let v = self.expr(value)?;
                if !self.host.channels.enabled() {
                    return Ok(Flow::Normal);
                }
                let name = self.element.record_channel(*channel);
                let name = name.ok_or_else(|| RuntimeError::Type(format!("channel {channel}")))?;
                let time = self.host.now();
                self.host.channels.emit(ChannelRecord {
                    element: self.element.record_element(),
                    channel: name,
                    rpc_id: self.rpc.id,
                    time,
                    value: v,
                });
                return Ok(Flow::Normal);
            }
        };
        Ok(Flow::Sent(sent))
    }

    fn message(&mut self, e: &'a Expr) -> Result<Message, RuntimeError> {
        match self.expr(e)? {
            Value::Msg(m) => Ok(Arc::unwrap_or_clone(m)),
            other => Err(RuntimeError::Type(format!(
                "sending a {}",
                other.kind_name()
            ))),
        }
    }

    fn bind(&mut self, p: &Pattern, v: &Value) -> bool {
        match (p, v) {
            (Pattern::Wildcard, _) => true,
            (Pattern::Lit(l), v) => l.lang_eq(v),
            (Pattern::Some(b), Value::Opt(Some(inner))) => {
                if let Some(b) = b {
                    self.locals[*b] = (**inner).clone();
                }
                true
            }
            (Pattern::None, Value::Opt(None)) => true,
            _ => false,
        }
    }

    fn expr(&mut self, e: &'a Expr) -> Result<Value, RuntimeError> {
        Ok(match &e.kind {
            ExprKind::Const(v) => v.clone(),
            ExprKind::Param(p) => {
                return Err(RuntimeError::Type(format!("parameter `{p}` is unbound")));
            }
            ExprKind::Local(l) => self.locals[*l].clone(),
            ExprKind::StateLoad(var) => match self.element.state[*var].kind {
                weft_hostcalls::state::CellKind::Vec => Value::Vec(
                    self.inst
                        .store
                        .entries(*var)?
                        .into_iter()
                        .map(|(_, v)| v)
                        .collect(),
                ),
                _ => self
                    .inst
                    .store
                    .get(*var, &Value::Unit)?
                    .unwrap_or_else(|| e.ty.zero_value()),
            },
            ExprKind::StateGet { var, key } => {
                let k = self.expr(key)?;
                let got = self.inst.store.get(*var, &k)?;
                match self.element.state[*var].kind {
                    weft_hostcalls::state::CellKind::Vec => {
                        let len = self.inst.store.len(*var)?;
                        got.ok_or(RuntimeError::IndexOutOfRange {
                            index: k.as_int().unwrap_or(-1),
                            len,
                        })?
                    }
                    _ => got.map_or(Value::none(), Value::some),
                }
            }
            ExprKind::StateRmw {
                var,
                key,
                binder,
                body,
            } => {
                let k = self.expr(key)?;
                let zero = self.element.state[*var].value_type().zero_value();
                let current = self.inst.store.get(*var, &k)?.unwrap_or(zero);
                // Kept to compare: a lambda that changes nothing writes nothing (no missing
                // key inserted, no weak write to merge over another replica's).
                self.locals[*binder] = current.clone();
                let result = match self.block(body)? {
                    Flow::Return(v) => v,
                    Flow::Normal => Value::Unit,
                    Flow::Sent(_) => {
                        return Err(RuntimeError::Type("send inside a read-modify-write".into()));
                    }
                };
                let new = std::mem::replace(&mut self.locals[*binder], Value::Unit);
                if new != current {
                    self.inst.store.set(*var, k, new)?;
                }
                result
            }
            ExprKind::StateSize(var) => Value::Int(self.inst.store.len(*var)? as i64),
            ExprKind::ValueGet { coll, key } => {
                let c = self.expr(coll)?;
                let k = self.expr(key)?;
                match c {
                    Value::Map(m) => m
                        .get(&*k.canonical_key())
                        .cloned()
                        .map_or(Value::none(), Value::some),
                    Value::Vec(items) => eval::vec_index(&items, &k)?,
                    Value::Pair(p) => match k {
                        Value::Int(0) => p.0,
                        _ => p.1,
                    },
                    other => {
                        return Err(RuntimeError::Type(format!("get on {}", other.kind_name())));
                    }
                }
            }
            ExprKind::Unary { op, operand } => {
                let v = self.expr(operand)?;
                eval::unary(*op, &v)?
            }
            ExprKind::Binary {
                op: BinOp::And,
                lhs,
                rhs,
            } => {
                if self.expr(lhs)?.as_bool() == Some(true) {
                    self.expr(rhs)?
                } else {
                    Value::Bool(false)
                }
            }
            ExprKind::Binary {
                op: BinOp::Or,
                lhs,
                rhs,
            } => {
                if self.expr(lhs)?.as_bool() == Some(true) {
                    Value::Bool(true)
                } else {
                    self.expr(rhs)?
                }
            }
            ExprKind::Binary { op, lhs, rhs } => {
                let a = self.expr(lhs)?;
                let b = self.expr(rhs)?;
                eval::binary(*op, &a, &b)?
            }
            ExprKind::Convert { operand } => {
                let v = self.expr(operand)?;
                eval::convert(&v, &e.ty)?
            }
            ExprKind::Unwrap(inner) => match self.expr(inner)? {
                Value::Opt(Some(v)) => *v,
                Value::Opt(None) => return Err(RuntimeError::UnwrapNone(describe_option(inner))),
                other => other,
            },
            ExprKind::MakePair(a, b) => {
                let a = self.expr(a)?;
                let b = self.expr(b)?;
                Value::pair(a, b)
            }
            ExprKind::MakeSome(v) => Value::some(self.expr(v)?),
            ExprKind::Field { msg, field } => {
                let m = self.msg_value(msg)?;
                wire::read(&m.bytes, field)?
            }
            ExprKind::MetaStatus(msg) => {
                let m = self.msg_value(msg)?;
                Value::str(if m.code == Code::Ok {
                    "success"
                } else {
                    "failure"
                })
            }
            ExprKind::MetaCode(msg) => Value::Int(self.msg_value(msg)?.code.number() as i64),
            ExprKind::ByteSize { msg, field } => {
                let m = self.msg_value(msg)?;
                match field {
                    None => Value::Int(m.bytes.len() as i64),
                    Some(f) => Value::Int(wire::byte_size(&m.bytes, f)? as i64),
                }
            }
            ExprKind::Header { msg, name } => {
                let m = self.msg_value(msg)?;
                let Value::Str(n) = self.expr(name)? else {
                    return Err(RuntimeError::Type("header name".into()));
                };
                Value::str(m.element_header(&n))
            }
            ExprKind::Metadata(key) => {
                let v = self.scratch_slot(*key)?.clone();
                v.map_or(Value::none(), Value::some)
            }
            ExprKind::Call { builtin, args } => self.call(*builtin, args, &e.ty)?,
        })
    }

    fn msg_value(&mut self, e: &'a Expr) -> Result<Arc<Message>, RuntimeError> {
        match self.expr(e)? {
            Value::Msg(m) => Ok(m),
            other => Err(RuntimeError::Type(format!(
                "expected a message, got {}",
                other.kind_name()
            ))),
        }
    }

    fn call(&mut self, b: Builtin, args: &'a [Expr], ty: &Type) -> Result<Value, RuntimeError> {
        let mut vals = Vec::with_capacity(args.len());
        for a in args {
            vals.push(self.expr(a)?);
        }
        let arg = |i: usize| vals.get(i).cloned().unwrap_or(Value::Unit);
        let float = |v: Value| {
            v.as_float()
                .ok_or_else(|| RuntimeError::Type("expected a float".into()))
        };
        Ok(match b {
            Builtin::RandomF => Value::Float(rng::randomf(
                self.inst.rng.as_mut(),
                float(arg(0))?,
                float(arg(1))?,
            )?),
            Builtin::RandomI => {
                let (Value::Int(lo), Value::Int(hi)) = (arg(0), arg(1)) else {
                    return Err(RuntimeError::Type("randomi bounds".into()));
                };
                Value::Int(rng::random_int(self.inst.rng.as_mut(), lo, hi)?)
            }
            Builtin::RandomChoices => {
                let (Value::Vec(items), Value::Int(n)) = (arg(0), arg(1)) else {
                    return Err(RuntimeError::Type("random_choices arguments".into()));
                };
                Value::Vec(rng::random_choices(self.inst.rng.as_mut(), &items, n))
            }
            Builtin::Encrypt => {
                let Value::Str(key) = arg(1) else {
                    return Err(RuntimeError::Type("encrypt key".into()));
                };
                builtins::encrypt_value(&arg(0), &key, self.inst.rng.as_mut())?
            }
            Builtin::CurrentTime => Value::Instant(self.host.now()),
            Builtin::RpcId => Value::Uint(self.rpc.id),
            Builtin::Method => Value::str(self.rpc.method.clone()),
            Builtin::Src => Value::str(self.rpc.src.clone()),
            Builtin::Dst => Value::Str(self.dst()),
            pure => match eval::call_pure(pure, &vals) {
                Some(r) => r?,
                None => return Err(RuntimeError::Type(format!("built-in {pure:?} for {ty}"))),
            },
        })
    }

    /// `dst()`: in a request handler the current `dst` header (the element may just have
    /// routed it); in a response handler where the request was routed; else the callee.
    fn dst(&self) -> String {
        if self.handler == Handler::Req
            && let Some(m) = self.current_msg()
            && m.kind == MsgKind::Request
            && let Some(d) = m.headers.get("dst")
        {
            return d.clone();
        }
        self.rpc
            .routed
            .clone()
            .unwrap_or_else(|| self.rpc.service.clone())
    }
}

fn describe_option(e: &Expr) -> String {
    match &e.kind {
        ExprKind::StateGet { .. } => "a missing map entry".into(),
        ExprKind::ValueGet { .. } => "a missing map entry".into(),
        ExprKind::Metadata(_) => "metadata that was never set".into(),
        _ => "an Option".into(),
    }
}

fn local_set(target: &mut Value, k: Value, v: Value) -> Result<(), RuntimeError> {
    match target {
        Value::Map(m) => {
            m.insert(k.into_canonical_key(), v);
            Ok(())
        }
        Value::Vec(items) => {
            let Value::Int(i) = k else {
                return Err(RuntimeError::Type("vector index".into()));
            };
            let len = items.len();
            match usize::try_from(i) {
                Ok(u) if u < len => items[u] = v,
                Ok(u) if u == len => items.push(v),
                _ => return Err(RuntimeError::IndexOutOfRange { index: i, len }),
            }
            Ok(())
        }
        other => Err(RuntimeError::Type(format!(
            "set on a local {}",
            other.kind_name()
        ))),
    }
}

fn local_delete(target: &mut Value, k: &Value) -> Result<(), RuntimeError> {
    match target {
        Value::Map(m) => {
            m.remove(&*k.canonical_key());
            Ok(())
        }
        Value::Vec(items) => {
            let Value::Int(i) = k else {
                return Err(RuntimeError::Type("vector index".into()));
            };
            let len = items.len();
            match usize::try_from(*i) {
                Ok(u) if u < len => {
                    items.remove(u);
                    Ok(())
                }
                _ => Err(RuntimeError::IndexOutOfRange { index: *i, len }),
            }
        }
        other => Err(RuntimeError::Type(format!(
            "delete on a local {}",
            other.kind_name()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use weft_hostcalls::Value;

    use super::RpcScratch;

    /// Slots past the inline ones spill to the heap and keep what was written; a longer
    /// request for slots adds unset ones and leaves the others be, and a shorter one after
    /// a spill still sees the values (a response over a prefix of the request's segment).
    #[test]
    fn scratch_grows_and_keeps_its_values() {
        let mut s = RpcScratch::default();
        assert!(s.slots(0).is_empty());
        s.slots(1)[0] = Some(Value::Int(1));
        s.slots(5)[4] = Some(Value::Bool(true));
        let all = s.slots(5);
        assert_eq!(all[0], Some(Value::Int(1)));
        assert_eq!(&all[1..4], &[None, None, None]);
        assert_eq!(all[4], Some(Value::Bool(true)));
        let first_two = s.slots(2);
        assert_eq!(
            first_two,
            &[Some(Value::Int(1)), None],
            "a shorter view, same values"
        );
        assert_eq!(s.slots(5)[4], Some(Value::Bool(true)));
    }
}
