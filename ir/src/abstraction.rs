//! Symbolic abstraction of one element (appnet-nsdi25.txt, Appendix B, Algorithm 1): what
//! each handler reads, what it writes and from what, whether it may stop a request, which
//! channels it writes — the inputs of its transfer functions.
//!
//! The record comes from [`crate::props`]. Where props is not enough to be sound, a small
//! scan of the IR fills in, always erring towards more dependencies:
//!
//! - **Run-time errors** (integer division by zero, an index out of range, an `Option` used
//!   as a value, an empty `randomi` range, a `foreach` past the iteration limit, a computed
//!   header name or value `set_rpc_header` may not write, a string join or an `encrypt`
//!   whose result would pass 64 MiB…) reject the RPC with INTERNAL, so an element that can
//!   raise one stops requests even if it never says `send(err(…), Up)`.
//! - **Early termination.** `if c: send(err, Up)` followed by a state write makes the write
//!   depend on `c`, which taint through control flow does not see; a handler that can stop
//!   (or fail) before its end uses AppNet's rule instead of props' per-write taint: every
//!   write depends on everything the handler reads.
//! - **Whole messages.** `send(rpc, log)` or `set(cache, k, rpc)` reads every field.
//! - **Replaced messages.** `send(other, Down)` forwards another message entirely.
//! - **Per-RPC scratch.** `get_metadata` in `resp` reads what `req` computed; props labels
//!   those sources as if they were the response's, so such a handler also depends on the
//!   scratch term the request pass produced.
//! - **Randomness.** Each instance has its own random stream: drawing is reading and
//!   advancing a hidden state variable of the instance.
//! - **Instances starting.** An instance runs `init` (and the config's `state:`) when it
//!   first sees a request. For a shared variable it writes (the handlers and the control
//!   plane change shared state in between), or for a value taken from the clock or from
//!   shared state, that is a write whose timing depends on which requests reach the element
//!   and which instance they reach.
//!
//! Every write also depends on the value it overwrites (a conditional write keeps it).

use std::collections::{BTreeMap, BTreeSet};

use weft_hostcalls::Value;
use weft_hostcalls::builtins::MAX_VALUE_LEN;
use weft_hostcalls::state::{CellKind, Consistency};
use weft_hostcalls::text::{header_name, writable_header};

use crate::ast::BinOp;
use crate::config::ElementUse;
use crate::ir::*;
use crate::props::{ElementProps, HandlerProps, Scope, analyse};
use crate::types::Type;

/// Something a handler reads.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Input {
    /// A field (`f:path`) or header (`h:name`) of the handler's message.
    Key(String),
    /// A response's status (`meta_status`, `meta_code`).
    Status,
    /// The whole message (forwarded into state or a channel, its size, any header).
    Whole,
    /// A state variable (an index into [`ElementAbs::vars`]).
    State(usize),
    /// The clock, in a response handler (a request handler's time is the event's, the same
    /// wherever the element runs).
    Time,
    /// Where the request was routed (`dst()` in a response handler).
    Routed,
    /// What the request handler kept for the response (`get_metadata`).
    Meta,
}

/// Something a handler writes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    Key(String),
    /// A header whose name is computed.
    AnyHeader,
    /// The message as a whole (another message sent on).
    Message,
    State(usize),
}

/// Why a handler may stop a request (or, in `resp`, turn the response into an error).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stops {
    pub rejects: bool,
    pub replies: bool,
    pub fails: bool,
}

impl Stops {
    pub fn any(self) -> bool {
        self.rejects || self.replies || self.fails
    }

    /// "can reject requests", "can answer requests itself", "can fail at run time".
    pub fn describe(self, dir_resp: bool) -> String {
        let mut parts = Vec::new();
        if self.rejects {
            parts.push(if dir_resp {
                "can turn a response into an error"
            } else {
                "can reject requests"
            });
        }
        if self.replies {
            parts.push("can answer requests itself");
        }
        if self.fails {
            parts.push(if dir_resp {
                "can fail at run time (which turns the response into an error)"
            } else {
                "can fail at run time (which rejects the request)"
            });
        }
        parts.join(" and ")
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct HandlerAbs {
    /// Everything the handler reads (AppNet's `rv`).
    pub reads: BTreeSet<Input>,
    /// Each write and what the new value depends on (the old value comes on top).
    pub writes: Vec<(Target, BTreeSet<Input>)>,
    pub stops: Stops,
    /// Channel indices written.
    pub channels: BTreeSet<usize>,
    /// Sets per-RPC scratch for the response handler.
    pub meta_write: bool,
    pub reorders: bool,
    /// Whether per-write dependencies come from props' taint (else AppNet's `rv` rule).
    pub precise: bool,
}

impl HandlerAbs {
    /// Whether running it can have any effect beyond passing the message on.
    pub fn active(&self) -> bool {
        !self.writes.is_empty() || !self.channels.is_empty() || self.stops.any() || self.reorders
    }

    pub fn writes_state(&self, v: usize) -> bool {
        self.writes
            .iter()
            .any(|(t, _)| matches!(t, Target::State(x) if *x == v))
    }

    pub fn writes_key(&self, key: &str) -> bool {
        self.writes.iter().any(|(t, _)| match t {
            Target::Key(k) => keys_overlap(k, key),
            Target::AnyHeader => key.starts_with("h:"),
            Target::Message => true,
            Target::State(_) => false,
        })
    }

    pub fn reads_key(&self, key: &str) -> bool {
        self.reads.iter().any(|i| match i {
            Input::Key(k) => keys_overlap(k, key),
            Input::Whole => true,
            Input::Status => key == "status",
            _ => false,
        })
    }
}

/// One state variable as the checker sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct VarAbs {
    pub name: String,
    pub consistency: Consistency,
    /// Its value depends on which instance runs the element (local state the handlers
    /// change, weak replicas, the random stream).
    pub keyed: bool,
    /// Written when an instance starts, in a way that depends on when or which.
    pub creation: bool,
    pub scope: Scope,
    /// The hidden per-instance random stream.
    pub random_stream: bool,
    pub written_by_handlers: bool,
}

/// The abstraction of one element, checked against one method.
#[derive(Clone, Debug, PartialEq)]
pub struct ElementAbs {
    /// Instance name in the chain.
    pub name: String,
    /// The element's file name (`loadbalance`).
    pub kind: String,
    pub vars: Vec<VarAbs>,
    pub channels: Vec<String>,
    pub req: HandlerAbs,
    pub resp: HandlerAbs,
    /// `init` writes channel records, once per instance start.
    pub creation_records: bool,
    /// Writes the `dst` header.
    pub routes: bool,
    /// `encrypt`/`decrypt` of one field with one key: (`f:field`, key).
    pub cipher: Option<(Cipher, String, String)>,
    pub props: ElementProps,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cipher {
    Encrypt,
    Decrypt,
}

impl ElementAbs {
    pub fn handler(&self, resp: bool) -> &HandlerAbs {
        if resp { &self.resp } else { &self.req }
    }

    pub fn keyed(&self) -> bool {
        self.vars.iter().any(|v| v.keyed || v.creation) || self.creation_records
    }
}

/// Two keys overlap when they are the same, or one is a nested field of the other.
pub fn keys_overlap(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let (Some(pa), Some(pb)) = (a.strip_prefix("f:"), b.strip_prefix("f:")) else {
        return false;
    };
    pa.strip_prefix(pb).is_some_and(|r| r.starts_with('.'))
        || pb.strip_prefix(pa).is_some_and(|r| r.starts_with('.'))
}

/// Builds the abstraction of `e` as configured by `use_` (its `state:` values and kind).
pub fn abstract_element(e: &Element, use_: &ElementUse) -> ElementAbs {
    let props = analyse(e);
    let mut vars: Vec<VarAbs> = e
        .state
        .iter()
        .enumerate()
        .map(|(i, v)| VarAbs {
            name: v.name.clone(),
            consistency: v.consistency,
            keyed: false,
            creation: false,
            scope: props.state.get(i).map_or(Scope::Global, |s| s.scope),
            random_stream: false,
            written_by_handlers: false,
        })
        .collect();
    let uses_random = props.req.uses_random || props.resp.uses_random;
    let rng = uses_random.then(|| {
        vars.push(VarAbs {
            name: "random stream".into(),
            consistency: Consistency::Local,
            keyed: true,
            creation: props.init.uses_random && props.init.uses_time,
            scope: Scope::Global,
            random_stream: true,
            written_by_handlers: true,
        });
        vars.len() - 1
    });
    let var_index: BTreeMap<String, usize> = vars
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.random_stream)
        .map(|(i, v)| (v.name.clone(), i))
        .collect();
    let req_scan = Scan::run(e, Handler::Req);
    let resp_scan = Scan::run(e, Handler::Resp);
    let init_scan = Scan::run(e, Handler::Init);
    let req = handler_abs(&props.req, &req_scan, false, &var_index, rng, e);
    let resp = handler_abs(&props.resp, &resp_scan, true, &var_index, rng, e);

    // Which variables depend on the instance, and which are (re)written when one starts.
    let config_state: BTreeSet<&str> = use_.state.iter().map(|(k, _)| k.as_str()).collect();
    let handler_written: BTreeSet<String> = props
        .req
        .state_written
        .union(&props.resp.state_written)
        .map(|v| format!("state:{v}"))
        .collect();
    // What `init` writes depends on when the instance starts if it reads the clock, draws,
    // or reads state that changes while instances run: state the handlers change, shared
    // state (the control plane and other instances change it, and a new instance reads it
    // as it is then: an `init` that copied a shared level into local state made instances
    // started on the two sides disagree), or a variable `init` computed from such state.
    let shared: BTreeSet<String> = e
        .state
        .iter()
        .filter(|v| v.consistency != Consistency::Local)
        .map(|v| format!("state:{}", v.name))
        .collect();
    let mut init_nondet: BTreeSet<String> = BTreeSet::new();
    loop {
        let before = init_nondet.len();
        for v in &e.state {
            let label = format!("state:{}", v.name);
            let nondet = props.init.write_deps.get(&label).is_some_and(|d| {
                d.contains("time")
                    || d.contains("random")
                    || d.iter().any(|x| {
                        x != &label
                            && (handler_written.contains(x)
                                || shared.contains(x)
                                || init_nondet.contains(x))
                    })
            });
            if nondet {
                init_nondet.insert(label);
            }
        }
        if init_nondet.len() == before {
            break;
        }
    }
    for (i, v) in e.state.iter().enumerate() {
        let label = format!("state:{}", v.name);
        let by_handlers = handler_written.contains(&label);
        let by_init = props.init.state_written.contains(&v.name)
            || v.from_param.is_some()
            || config_state.contains(v.name.as_str());
        let init_nondet = init_nondet.contains(&label);
        let slot = &mut vars[i];
        slot.written_by_handlers = by_handlers;
        match v.consistency {
            Consistency::Local => {
                slot.keyed = by_handlers || init_nondet;
                slot.creation = init_nondet;
            }
            Consistency::Strong => {
                slot.keyed = false;
                // Every instance that starts runs `init` again (and the first one applies
                // the config's `state:`), overwriting what the handlers, the control plane
                // or the config put there since, whether or not the handlers write it: a
                // control-plane write is never replayed into a new instance, so a switch the
                // control plane closed reopened when a new caller's instance started.
                slot.creation = by_init || init_nondet;
            }
            Consistency::Weak => {
                slot.keyed = true;
                slot.creation = by_init || init_nondet;
            }
        }
    }
    let cipher = cipher_of(use_, &req, &resp, &vars);
    ElementAbs {
        name: e.name.clone(),
        kind: use_.element.clone(),
        channels: e.channels.clone(),
        routes: props.req.routes || props.resp.routes,
        creation_records: !init_scan.channels.is_empty() || !props.init.channels.is_empty(),
        vars,
        req,
        resp,
        cipher,
        props,
    }
}

/// Recognises the standard `encrypt`/`decrypt` pair on one field with one key, whose
/// composition is the identity (authenticated encryption round-trips exactly).
fn cipher_of(
    use_: &ElementUse,
    req: &HandlerAbs,
    resp: &HandlerAbs,
    vars: &[VarAbs],
) -> Option<(Cipher, String, String)> {
    let kind = match use_.element.as_str() {
        "encrypt" => Cipher::Encrypt,
        "decrypt" => Cipher::Decrypt,
        _ => return None,
    };
    let (Some(Value::Str(field)), Some(Value::Str(key))) =
        (use_.params.get("field"), use_.params.get("key"))
    else {
        return None;
    };
    let fkey = format!("f:{field}");
    // Only the shape the standard elements have: one field in, the same field out, no
    // state other than the random stream, nothing on the way back.
    let only_field = req.writes.iter().all(|(t, _)| match t {
        Target::Key(k) => *k == fkey,
        Target::State(v) => vars[*v].random_stream,
        _ => false,
    });
    let plain = req.channels.is_empty() && !resp.active();
    let ok = match kind {
        // Encrypt can fail (a plaintext too long to seal rejects the RPC); that stays a stop
        // in the model, so nothing that counts requests moves across it. The pair needs only
        // that every request it lets through reaches decrypt with the ciphertext.
        Cipher::Encrypt => only_field && plain && !req.stops.rejects && !req.stops.replies,
        Cipher::Decrypt => only_field && plain && !req.stops.fails && vars.is_empty(),
    };
    ok.then_some((kind, fkey, key.clone()))
}

fn label_inputs(
    label: &str,
    resp: bool,
    vars: &BTreeMap<String, usize>,
    rng: Option<usize>,
    out: &mut BTreeSet<Input>,
) {
    if let Some(f) = label.strip_prefix("field:") {
        out.insert(Input::Key(format!("f:{f}")));
    } else if let Some(h) = label.strip_prefix("header:") {
        if h == "*" {
            out.insert(Input::Whole);
        } else {
            out.insert(Input::Key(format!("h:{h}")));
            if resp && h == "dst" {
                out.insert(Input::Routed);
            }
        }
    } else if let Some(s) = label.strip_prefix("state:") {
        if let Some(&i) = vars.get(s) {
            out.insert(Input::State(i));
        }
    } else {
        match label {
            "status" if resp => {
                out.insert(Input::Status);
            }
            "random" => {
                if let Some(r) = rng {
                    out.insert(Input::State(r));
                }
            }
            "time" if resp => {
                out.insert(Input::Time);
            }
            "dst" => {
                out.insert(Input::Key("h:dst".into()));
                if resp {
                    out.insert(Input::Routed);
                }
            }
            "message" => {
                out.insert(Input::Whole);
            }
            // The same for every element on the RPC's path, wherever it runs.
            _ => {}
        }
    }
}

fn read_inputs(
    fields_read: &BTreeSet<String>,
    resp: bool,
    out: &mut BTreeSet<Input>,
    vars: &BTreeMap<String, usize>,
) {
    for f in fields_read {
        match f.as_str() {
            "meta_status" => {
                if resp {
                    out.insert(Input::Status);
                }
            }
            "*" | "header:*" => {
                out.insert(Input::Whole);
            }
            h if h.starts_with("header:") => {
                label_inputs(h, resp, vars, None, out);
            }
            path => {
                out.insert(Input::Key(format!("f:{path}")));
            }
        }
    }
}

fn handler_abs(
    p: &HandlerProps,
    scan: &Scan,
    resp: bool,
    vars: &BTreeMap<String, usize>,
    rng: Option<usize>,
    e: &Element,
) -> HandlerAbs {
    let mut reads = BTreeSet::new();
    read_inputs(&p.fields_read, resp, &mut reads, vars);
    for s in &p.state_read {
        label_inputs(&format!("state:{s}"), resp, vars, rng, &mut reads);
    }
    for deps in p.write_deps.values().chain(std::iter::once(&p.drop_deps)) {
        for l in deps {
            label_inputs(l, resp, vars, rng, &mut reads);
        }
    }
    if p.uses_random
        && let Some(r) = rng
    {
        reads.insert(Input::State(r));
    }
    if p.uses_time && resp {
        reads.insert(Input::Time);
    }
    if scan.whole {
        reads.insert(Input::Whole);
    }
    if resp && scan.meta_read {
        reads.insert(Input::Meta);
    }
    // Handlers that can end before their last statement: every write depends on `rv`.
    let precise = !scan.may_fail && !scan.early_end;
    let mut targets: Vec<Target> = Vec::new();
    for w in &p.fields_written {
        targets.push(if w == "header:*" {
            Target::AnyHeader
        } else if let Some(h) = w.strip_prefix("header:") {
            Target::Key(format!("h:{h}"))
        } else {
            Target::Key(format!("f:{w}"))
        });
    }
    for s in &p.state_written {
        if let Some(&i) = vars.get(s.as_str()) {
            targets.push(Target::State(i));
        }
    }
    if scan.replaces {
        targets.push(Target::Message);
    }
    if p.uses_random
        && let Some(r) = rng
    {
        targets.push(Target::State(r));
    }
    targets.sort();
    targets.dedup();
    // Per-write dependencies, closed over what the handler itself writes (a value read
    // after the handler wrote it depends on what was written).
    let label_of = |t: &Target| -> Option<String> {
        match t {
            Target::Key(k) => Some(match k.strip_prefix("f:") {
                Some(f) => f.to_owned(),
                None => format!("header:{}", k.trim_start_matches("h:")),
            }),
            Target::AnyHeader => Some("header:*".into()),
            Target::State(i) => e.state.get(*i).map(|v| format!("state:{}", v.name)),
            Target::Message => None,
        }
    };
    let mut writes = Vec::new();
    for t in &targets {
        let deps: BTreeSet<Input> = if !precise
            || matches!(t, Target::Message)
            || matches!(t, Target::State(i) if Some(*i) == rng)
        {
            reads.clone()
        } else {
            let mut deps = BTreeSet::new();
            if let Some(l) = label_of(t)
                && let Some(d) = p.write_deps.get(&l)
            {
                for x in d {
                    label_inputs(x, resp, vars, rng, &mut deps);
                }
            }
            deps
        };
        writes.push((t.clone(), deps));
    }
    if precise {
        close_over_own_writes(&mut writes);
    }
    if resp && scan.meta_read {
        for (_, d) in &mut writes {
            d.insert(Input::Meta);
        }
    }
    let stops = Stops {
        rejects: scan.rejects || (p.may_drop && !p.may_reply),
        replies: !resp && p.may_reply,
        fails: scan.may_fail,
    };
    HandlerAbs {
        reads,
        writes,
        stops,
        channels: scan.channels.clone(),
        meta_write: !resp && scan.meta_write,
        reorders: p.may_reorder,
        precise,
    }
}

/// If a write depends on a key or state the same handler writes, it may have read the new
/// value: add that write's dependencies, to a fixpoint.
fn close_over_own_writes(writes: &mut [(Target, BTreeSet<Input>)]) {
    loop {
        let mut changed = false;
        for i in 0..writes.len() {
            let mut extra = BTreeSet::new();
            for (t, d) in writes.iter() {
                let written_input = match t {
                    Target::Key(k) => writes[i].1.iter().any(|x| match x {
                        Input::Key(r) => keys_overlap(r, k),
                        Input::Whole => true,
                        _ => false,
                    }),
                    Target::AnyHeader => writes[i].1.iter().any(|x| match x {
                        Input::Key(r) => r.starts_with("h:"),
                        Input::Whole => true,
                        _ => false,
                    }),
                    Target::State(v) => writes[i].1.contains(&Input::State(*v)),
                    Target::Message => true,
                };
                if written_input {
                    extra.extend(d.iter().cloned());
                }
            }
            let before = writes[i].1.len();
            writes[i].1.extend(extra);
            changed |= writes[i].1.len() != before;
        }
        if !changed {
            break;
        }
    }
}

/// What props does not record, found by walking the IR.
#[derive(Default)]
struct Scan {
    msg: Option<LocalId>,
    handler: Option<Handler>,
    may_fail: bool,
    /// A send that ends the handler, or a `return` that ends a lambda, somewhere other than
    /// its last statement.
    early_end: bool,
    whole: bool,
    replaces: bool,
    rejects: bool,
    meta_read: bool,
    meta_write: bool,
    channels: BTreeSet<usize>,
    vec_vars: BTreeSet<VarId>,
    local_types: Vec<Type>,
}

impl Scan {
    fn run(e: &Element, h: Handler) -> Scan {
        let body = e.body(h);
        let mut s = Scan {
            msg: body.msg,
            handler: Some(h),
            vec_vars: e
                .state
                .iter()
                .enumerate()
                .filter(|(_, v)| v.kind == CellKind::Vec)
                .map(|(i, _)| i)
                .collect(),
            local_types: body.locals.iter().map(|l| l.ty.clone()).collect(),
            ..Scan::default()
        };
        s.block(&body.block, true, true);
        s
    }

    /// `tail`: the block ends the handler; `lambda_tail`: it ends the innermost lambda (or
    /// the handler), so a `return` there skips nothing.
    fn block(&mut self, b: &Block, tail: bool, lambda_tail: bool) {
        for (i, st) in b.iter().enumerate() {
            let last = i + 1 == b.len();
            self.stmt(st, tail && last, lambda_tail && last);
        }
    }

    fn is_msg(&self, e: &Expr) -> bool {
        matches!(e.kind, ExprKind::Local(l) if Some(l) == self.msg)
    }

    fn stmt(&mut self, s: &Stmt, tail: bool, lambda_tail: bool) {
        match &s.kind {
            StmtKind::Assign { local, value } => {
                if Some(*local) == self.msg {
                    self.replaces = true;
                }
                self.expr(value);
            }
            StmtKind::AssignPair {
                first,
                second,
                value,
            } => {
                if Some(*first) == self.msg || Some(*second) == self.msg {
                    self.replaces = true;
                }
                self.expr(value);
            }
            StmtKind::StateStore { value, .. } => self.expr(value),
            StmtKind::StateSet { var, key, value } => {
                if self.vec_vars.contains(var) {
                    self.may_fail = true;
                }
                self.expr(key);
                self.expr(value);
            }
            StmtKind::StateDelete { var, key } => {
                if self.vec_vars.contains(var) {
                    self.may_fail = true;
                }
                self.expr(key);
            }
            StmtKind::LocalSet { local, key, value } => {
                if matches!(self.local_types.get(*local), Some(Type::Vec(_)) | None) {
                    self.may_fail = true;
                }
                self.expr(key);
                self.expr(value);
            }
            StmtKind::LocalDelete { local, key } => {
                if matches!(self.local_types.get(*local), Some(Type::Vec(_)) | None) {
                    self.may_fail = true;
                }
                self.expr(key);
            }
            StmtKind::SetField { value, .. } => self.expr(value),
            StmtKind::SetHeader { name, value, .. } => {
                if !header_write_cannot_fail(name, value) {
                    self.may_fail = true;
                }
                self.expr(name);
                self.expr(value);
            }
            StmtKind::SetMetadata { value, .. } => {
                self.meta_write = true;
                self.expr(value);
            }
            StmtKind::Eval(e) => self.expr(e),
            StmtKind::Match { scrutinee, arms } => {
                self.expr(scrutinee);
                for a in arms {
                    self.block(&a.body, tail, lambda_tail);
                }
            }
            StmtKind::ForEach { coll, body, .. } => {
                // Any loop may pass the iteration limit (`eval::MAX_ITERATIONS`): the size of
                // a collection is not known here.
                self.may_fail = true;
                if let Collection::Value(e) = coll {
                    self.expr(e);
                }
                // A send inside a loop ends the handler part-way through.
                self.block(body, false, true);
            }
            StmtKind::Send(send) => match send {
                SendKind::Down(e) | SendKind::Up(e) => {
                    if !tail {
                        self.early_end = true;
                    }
                    let forward = matches!(
                        (self.handler, send),
                        (Some(Handler::Req), SendKind::Down(_))
                            | (Some(Handler::Resp), SendKind::Up(_))
                    );
                    if forward {
                        if !self.is_msg(e) {
                            self.replaces = true;
                            self.expr(e);
                        }
                    } else {
                        self.expr(e);
                    }
                }
                SendKind::Reject { message, .. } => {
                    if !tail {
                        self.early_end = true;
                    }
                    self.rejects = true;
                    self.expr(message);
                }
                SendKind::Channel { channel, value } => {
                    self.channels.insert(*channel);
                    self.expr(value);
                }
            },
            StmtKind::Return(v) => {
                // A `return` before the end of its lambda skips the rest of it, so what the
                // rest writes depends on the conditions that led here, which props does not
                // record (like an early send).
                if !lambda_tail {
                    self.early_end = true;
                }
                if let Some(e) = v {
                    self.expr(e);
                }
            }
        }
    }

    fn expr(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::Const(_) | ExprKind::Param(_) => {}
            ExprKind::Local(_) => {
                // A message used as a value anywhere but a field access or a forward.
                if self.is_msg(e) {
                    self.whole = true;
                }
            }
            ExprKind::StateLoad(_) | ExprKind::StateSize(_) => {}
            ExprKind::StateGet { var, key } => {
                if self.vec_vars.contains(var) {
                    self.may_fail = true;
                }
                self.expr(key);
            }
            ExprKind::StateRmw { var, key, body, .. } => {
                if self.vec_vars.contains(var) {
                    self.may_fail = true;
                }
                self.expr(key);
                self.block(body, false, true);
            }
            ExprKind::ValueGet { coll, key } => {
                if !matches!(coll.ty, Type::Map(..) | Type::Pair(..)) {
                    self.may_fail = true;
                }
                self.expr(coll);
                self.expr(key);
            }
            ExprKind::Unary { operand, .. } | ExprKind::Convert { operand } => self.expr(operand),
            ExprKind::Unwrap(inner) => {
                self.may_fail = true;
                self.expr(inner);
            }
            ExprKind::MakeSome(x) => self.expr(x),
            ExprKind::Binary { op, lhs, rhs } => {
                if matches!(op, BinOp::Div | BinOp::Rem)
                    && matches!(lhs.ty, Type::Int | Type::Uint)
                    && !matches!(&rhs.kind, ExprKind::Const(v) if !is_zero(v))
                {
                    self.may_fail = true;
                }
                // Joining strings or bytes fails past `MAX_VALUE_LEN` (64 MiB), which rejects
                // the RPC: `prefix + get(rpc, field)` stops a request whose field is that
                // long. Only a join of operands whose length is known to fit cannot fail.
                if *op == BinOp::Add
                    && matches!(lhs.ty, Type::Str | Type::Bytes)
                    && max_len(e).is_none_or(|n| n > MAX_VALUE_LEN)
                {
                    self.may_fail = true;
                }
                self.expr(lhs);
                self.expr(rhs);
            }
            ExprKind::MakePair(a, b) => {
                self.expr(a);
                self.expr(b);
            }
            ExprKind::Field { msg, .. }
            | ExprKind::MetaStatus(msg)
            | ExprKind::MetaCode(msg)
            | ExprKind::ByteSize { msg, .. } => {
                if !self.is_msg(msg) {
                    self.expr(msg);
                }
            }
            ExprKind::Header { msg, name } => {
                if !self.is_msg(msg) {
                    self.expr(msg);
                }
                self.expr(name);
            }
            ExprKind::Metadata(_) => self.meta_read = true,
            ExprKind::Call { builtin, args } => {
                let fallible = match builtin {
                    Builtin::RandomI => !matches!(
                        (args.first().map(|a| &a.kind), args.get(1).map(|a| &a.kind)),
                        (Some(ExprKind::Const(Value::Int(lo))), Some(ExprKind::Const(Value::Int(hi))))
                            if lo < hi
                    ),
                    Builtin::RandomF => !args.iter().all(finite_constant),
                    // The sealed text (in base64 for a string) must fit in `MAX_VALUE_LEN`;
                    // half of it leaves room for base64's 4/3 and the nonce and tag.
                    Builtin::Encrypt => args
                        .first()
                        .and_then(max_len)
                        .is_none_or(|n| n > MAX_VALUE_LEN / 2),
                    Builtin::Quantile
                    | Builtin::Compress
                    | Builtin::Decompress
                    | Builtin::Require => true,
                    _ => false,
                };
                self.may_fail |= fallible;
                for a in args {
                    self.expr(a);
                }
            }
        }
    }
}

/// A header write whose name and value are known to pass `text::writable_header`, which
/// both executors apply when the write runs: a constant name with a constant value, or with
/// a number, bool or instant made text (digits, signs, `.`, `e`, `inf`, `NaN`, `true`…:
/// printable ASCII), or with anything under a `-bin` key. Anything else computed may fail
/// the RPC there.
fn header_write_cannot_fail(name: &Expr, value: &Expr) -> bool {
    let ExprKind::Const(Value::Str(n)) = &name.kind else {
        return false;
    };
    let n = header_name(n);
    match &value.kind {
        ExprKind::Const(Value::Str(v)) => writable_header(&n, Some(v)).is_ok(),
        ExprKind::Call {
            builtin: Builtin::ToStr,
            args,
        } if args.iter().all(|a| {
            matches!(
                a.ty,
                Type::Int | Type::Uint | Type::Float | Type::Bool | Type::Instant
            )
        }) =>
        {
            writable_header(&n, None).is_ok()
        }
        // A `-bin` key carries any value.
        _ => n.ends_with("-bin") && writable_header(&n, None).is_ok(),
    }
}

/// An upper bound on the length of a string or bytes value that holds whatever the RPC and
/// the state are: literals (parameters are literals once bound), numbers and bools turned
/// into text, and joins of those. `None` for anything else (a field, a header, state), whose
/// length has no bound.
fn max_len(e: &Expr) -> Option<usize> {
    // The longest text `str` makes of a number, bool or instant (`-9223372036854775808`,
    // `-1.7976931348623157e308`).
    const NUMBER_TEXT: usize = 32;
    match &e.kind {
        ExprKind::Const(Value::Str(s)) => Some(s.len()),
        ExprKind::Const(Value::Bytes(b)) => Some(b.len()),
        ExprKind::Call {
            builtin: Builtin::ToStr,
            args,
        } => match args.first() {
            Some(a) if matches!(a.ty, Type::Str) => max_len(a),
            Some(a)
                if matches!(
                    a.ty,
                    Type::Int | Type::Uint | Type::Float | Type::Bool | Type::Instant
                ) =>
            {
                Some(NUMBER_TEXT)
            }
            _ => None,
        },
        ExprKind::Binary {
            op: BinOp::Add,
            lhs,
            rhs,
        } => max_len(lhs)?.checked_add(max_len(rhs)?),
        _ => None,
    }
}

/// A number written as a constant (possibly converted to float by the checker) that is
/// finite: `randomf(0.0, 1.0)` and `randomf(0, 10)` cannot fail.
fn finite_constant(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Const(Value::Float(f)) => f.is_finite(),
        ExprKind::Const(Value::Int(_) | Value::Uint(_)) => true,
        ExprKind::Convert { operand } => finite_constant(operand),
        _ => false,
    }
}

fn is_zero(v: &Value) -> bool {
    matches!(v, Value::Int(0) | Value::Uint(0))
}

/// Every built-in an element calls in any handler (for processor capabilities).
pub fn builtins_used(e: &Element) -> Vec<Builtin> {
    let mut out = Vec::new();
    for h in [Handler::Init, Handler::Req, Handler::Resp] {
        collect_builtins_block(&e.body(h).block, &mut out);
    }
    out
}

fn collect_builtins_block(b: &Block, out: &mut Vec<Builtin>) {
    for s in b {
        match &s.kind {
            StmtKind::Assign { value, .. }
            | StmtKind::AssignPair { value, .. }
            | StmtKind::StateStore { value, .. }
            | StmtKind::SetField { value, .. }
            | StmtKind::SetMetadata { value, .. }
            | StmtKind::Eval(value) => collect_builtins_expr(value, out),
            StmtKind::StateSet { key, value, .. }
            | StmtKind::LocalSet { key, value, .. }
            | StmtKind::SetHeader {
                name: key, value, ..
            } => {
                collect_builtins_expr(key, out);
                collect_builtins_expr(value, out);
            }
            StmtKind::StateDelete { key, .. } | StmtKind::LocalDelete { key, .. } => {
                collect_builtins_expr(key, out)
            }
            StmtKind::Match { scrutinee, arms } => {
                collect_builtins_expr(scrutinee, out);
                for a in arms {
                    collect_builtins_block(&a.body, out);
                }
            }
            StmtKind::ForEach { coll, body, .. } => {
                if let Collection::Value(e) = coll {
                    collect_builtins_expr(e, out);
                }
                collect_builtins_block(body, out);
            }
            StmtKind::Send(SendKind::Down(e) | SendKind::Up(e)) => collect_builtins_expr(e, out),
            StmtKind::Send(SendKind::Reject { message, .. }) => collect_builtins_expr(message, out),
            StmtKind::Send(SendKind::Channel { value, .. }) => collect_builtins_expr(value, out),
            StmtKind::Return(v) => {
                if let Some(e) = v {
                    collect_builtins_expr(e, out);
                }
            }
        }
    }
}

fn collect_builtins_expr(e: &Expr, out: &mut Vec<Builtin>) {
    if let ExprKind::Call { builtin, .. } = &e.kind
        && !out.contains(builtin)
    {
        out.push(*builtin);
    }
    e.for_each_operand(|x| collect_builtins_expr(x, out));
    if let ExprKind::StateRmw { body, .. } = &e.kind {
        collect_builtins_block(body, out);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::check::{CheckEnv, check};
    use crate::diag::{SourceFile, render_all};
    use crate::schema::Schema;

    /// The request handler of an element whose `req` runs `body` before forwarding.
    fn req_of(body: &str) -> HandlerAbs {
        let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/protos/props.proto");
        let schema = Schema::load(&[proto], &[]).expect("the schema loads");
        let method = schema.method("props.Echo/Say").expect("the method");
        let src = format!(
            "state:\n    n: int\n\ninit():\n    pass\n\nreq(rpc):\n    {body}\n    send(rpc, Down)\n\nresp(rpc):\n    send(rpc, Up)\n"
        );
        let file = SourceFile::new("h.weft", src);
        let (ast, mut diags) = crate::parser::parse(&file);
        let env = CheckEnv {
            name: "h".into(),
            method: Some(&method),
            params: None,
        };
        let (e, more) = check(&ast, &env);
        diags.extend(more);
        assert!(diags.is_empty(), "{}", render_all(&file, &diags));
        let use_ = ElementUse {
            element: "h".into(),
            name: "h".into(),
            path: None,
            params: Params::default(),
            constraints: Default::default(),
            state: Vec::new(),
            max_iterations: None,
        };
        abstract_element(&e.expect("it checks"), &use_).req
    }

    #[test]
    fn a_header_write_fails_at_run_time_only_when_its_name_or_value_is_computed_text() {
        for body in [
            "set_rpc_header(rpc, 'x-user', 'alice')",
            "set_rpc_header(rpc, 'x-load', str(n))",
            "set_rpc_header(rpc, 'x-at', str(current_time()))",
            "set_rpc_header(rpc, 'x-trace-bin', get(rpc, 'user'))",
        ] {
            assert!(!req_of(body).stops.fails, "{body}");
        }
        // Checked when the write runs: a line break in `user`, a `body` of `grpc-status`.
        for body in [
            "set_rpc_header(rpc, 'x-user', get(rpc, 'user'))",
            "set_rpc_header(rpc, get(rpc, 'body'), 'x')",
            "set_rpc_header(rpc, 'x-user', str(get(rpc, 'user')))",
        ] {
            assert!(req_of(body).stops.fails, "{body}");
        }
    }
}
