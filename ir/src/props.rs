//! Property analysis: the per-element record of AppNet's Appendix B, computed on the IR.
//!
//! For each handler: message fields read and written, state read and written, whether it may
//! drop the RPC (reject, or answer locally) and whether that decision depends on randomness,
//! whether it may reorder RPCs, which channels it writes; for each state variable, the scope
//! its keys imply. The equivalence checker builds its transfer functions from this record.
//!
//! Dependencies are found by taint propagation: every value carries the set of sources it was
//! computed from (fields, headers, state, randomness, time, `src()`, `dst()`…), including
//! through control flow (a value assigned inside `match x:` depends on `x`). Locals are
//! iterated to a fixpoint, so flows through loops and from `req` to `resp` (per-RPC metadata)
//! are found.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use weft_hostcalls::state::{CellKind, Combiner, Consistency};
use weft_hostcalls::text::header_name;

use crate::ast::BinOp;
use crate::ir::*;

/// Where a value can come from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// A field of the message the handler processes (request in `req`, response in `resp`).
    Field(String),
    Header(String),
    /// `meta_status` / `meta_code` of a response.
    Status,
    State(String),
    Random,
    Time,
    Src,
    Dst,
    Method,
    RpcId,
    /// A message value as a whole (forwarded, stored, or written to a channel).
    Message,
}

impl Source {
    fn label(&self) -> String {
        match self {
            Source::Field(f) => format!("field:{f}"),
            Source::Header(h) => format!("header:{h}"),
            Source::Status => "status".into(),
            Source::State(s) => format!("state:{s}"),
            Source::Random => "random".into(),
            Source::Time => "time".into(),
            Source::Src => "src".into(),
            Source::Dst => "dst".into(),
            Source::Method => "method".into(),
            Source::RpcId => "rpc_id".into(),
            Source::Message => "message".into(),
        }
    }
}

type Taint = BTreeSet<Source>;

/// The scope of a state variable, from what its keys are derived from (LANGUAGE.md §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Every key depends on `dst()`: each server replica only touches its own entries.
    PerServerReplica,
    /// Every key depends on `src()`.
    PerClientReplica,
    Global,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HandlerProps {
    /// Fields of the handler's message read (dotted paths), and headers as `header:NAME`.
    pub fields_read: BTreeSet<String>,
    pub fields_written: BTreeSet<String>,
    pub state_read: BTreeSet<String>,
    pub state_written: BTreeSet<String>,
    /// In `req`: may reject or answer locally, so later elements may not see the RPC. In
    /// `resp`: may turn the response into an error.
    pub may_drop: bool,
    /// In `req`: may answer with a locally produced response (a cache hit).
    pub may_reply: bool,
    pub drop_depends_on_random: bool,
    /// What the drop decision reads.
    pub drop_deps: BTreeSet<String>,
    /// Always false today: no construct delays or reorders RPCs.
    pub may_reorder: bool,
    pub channels: BTreeSet<String>,
    /// Writes the `dst` header (routes the RPC).
    pub routes: bool,
    pub uses_random: bool,
    pub uses_time: bool,
    /// For each written field, header or state variable: what the new value depends on
    /// (the inputs of its transfer function).
    pub write_deps: BTreeMap<String, BTreeSet<String>>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StateProps {
    pub name: String,
    pub kind: &'static str,
    pub consistency: &'static str,
    pub combiner: &'static str,
    pub scope: Scope,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ElementProps {
    pub element: String,
    pub init: HandlerProps,
    pub req: HandlerProps,
    pub resp: HandlerProps,
    pub state: Vec<StateProps>,
}

impl ElementProps {
    /// AppNet's tuple (rf, wf, rs, ws, drop, reorder, channel) over both handlers.
    pub fn may_drop(&self) -> bool {
        self.req.may_drop
    }

    pub fn state_scope(&self, name: &str) -> Option<Scope> {
        self.state.iter().find(|s| s.name == name).map(|s| s.scope)
    }
}

pub fn analyse(e: &Element) -> ElementProps {
    let mut a = Analysis {
        element: e,
        metadata: vec![Taint::new(); e.metadata.len()],
        key_taints: BTreeMap::new(),
    };
    // Metadata carries taint from `req` to `resp`; iterate until it settles.
    let (mut init, mut req, mut resp);
    loop {
        let before = a.metadata.clone();
        a.key_taints.clear();
        init = a.handler(Handler::Init);
        req = a.handler(Handler::Req);
        resp = a.handler(Handler::Resp);
        if a.metadata == before {
            break;
        }
    }
    let state = e
        .state
        .iter()
        .enumerate()
        .map(|(i, v)| StateProps {
            name: v.name.clone(),
            kind: match v.kind {
                CellKind::Scalar => "scalar",
                CellKind::Map => "map",
                CellKind::Vec => "vec",
            },
            consistency: match v.consistency {
                Consistency::Local => "local",
                Consistency::Strong => "strong",
                Consistency::Weak => "weak",
            },
            combiner: match v.combiner {
                Combiner::Lww => "lww",
                Combiner::Sum => "sum",
                Combiner::Max => "max",
                Combiner::Min => "min",
            },
            scope: a.scope_of(i),
        })
        .collect();
    ElementProps {
        element: e.name.clone(),
        init,
        req,
        resp,
        state,
    }
}

struct Analysis<'a> {
    element: &'a Element,
    metadata: Vec<Taint>,
    /// For each state variable, the taint of every key it is accessed with.
    key_taints: BTreeMap<VarId, Vec<Taint>>,
}

struct HandlerWalk {
    locals: Vec<Taint>,
    props: HandlerProps,
    changed: bool,
    /// Taint of values returned by the innermost read-modify-write lambda.
    returns: Vec<Taint>,
    /// Taint of every state key used in this handler, by variable.
    keys: BTreeMap<VarId, Vec<Taint>>,
}

impl Analysis<'_> {
    fn scope_of(&self, var: VarId) -> Scope {
        let v = &self.element.state[var];
        // A map with a capacity evicts across all its keys: split per replica, each part
        // would evict only among its own keys and hold up to the capacity alone.
        if v.kind == CellKind::Scalar || v.capacity.is_some() {
            return Scope::Global;
        }
        let Some(keys) = self.key_taints.get(&var) else {
            return Scope::Global;
        };
        if keys.is_empty() {
            Scope::Global
        } else if keys.iter().all(|k| k.contains(&Source::Dst)) {
            Scope::PerServerReplica
        } else if keys.iter().all(|k| k.contains(&Source::Src)) {
            Scope::PerClientReplica
        } else {
            Scope::Global
        }
    }

    fn handler(&mut self, h: Handler) -> HandlerProps {
        let body = self.element.body(h);
        let mut w = HandlerWalk {
            locals: vec![Taint::new(); body.locals.len()],
            props: HandlerProps::default(),
            changed: true,
            returns: Vec::new(),
            keys: BTreeMap::new(),
        };
        if let Some(m) = body.msg {
            w.locals[m].insert(Source::Message);
        }
        let mut rounds = 0;
        while w.changed && rounds < 64 {
            w.changed = false;
            w.props = HandlerProps::default();
            w.keys.clear();
            self.block(&mut w, &body.block, &Taint::new(), h);
            rounds += 1;
        }
        for (var, keys) in std::mem::take(&mut w.keys) {
            self.key_taints.entry(var).or_default().extend(keys);
        }
        w.props.drop_depends_on_random = w.props.drop_deps.contains("random");
        w.props
    }

    fn note_key(w: &mut HandlerWalk, var: VarId, t: &Taint) {
        w.keys.entry(var).or_default().push(t.clone());
    }

    /// A read of the whole collection (`size`, `foreach`, a vector read whole) sees every
    /// key, whichever replica wrote it, so it confines the variable to no replica.
    fn note_every_key(w: &mut HandlerWalk, var: VarId) {
        Self::note_key(w, var, &Taint::new());
    }

    fn assign(&self, w: &mut HandlerWalk, local: LocalId, t: &Taint) {
        let slot = &mut w.locals[local];
        let before = slot.len();
        slot.extend(t.iter().cloned());
        if slot.len() != before {
            w.changed = true;
        }
    }

    fn block(&mut self, w: &mut HandlerWalk, b: &Block, ctrl: &Taint, h: Handler) {
        for s in b {
            self.stmt(w, s, ctrl, h);
        }
    }

    fn stmt(&mut self, w: &mut HandlerWalk, s: &Stmt, ctrl: &Taint, h: Handler) {
        let with_ctrl = |t: Taint| -> Taint { t.union(ctrl).cloned().collect() };
        match &s.kind {
            StmtKind::Assign { local, value } => {
                let t = with_ctrl(self.expr(w, value, ctrl, h));
                self.assign(w, *local, &t);
            }
            StmtKind::AssignPair {
                first,
                second,
                value,
            } => {
                let t = with_ctrl(self.expr(w, value, ctrl, h));
                self.assign(w, *first, &t);
                self.assign(w, *second, &t);
            }
            StmtKind::StateStore { var, value } => {
                let t = with_ctrl(self.expr(w, value, ctrl, h));
                self.write_state(w, *var, t);
            }
            StmtKind::StateSet { var, key, value } => {
                let k = self.expr(w, key, ctrl, h);
                Self::note_key(w, *var, &k);
                let t = with_ctrl(self.expr(w, value, ctrl, h))
                    .union(&k)
                    .cloned()
                    .collect();
                // Writing one key depends on the map's other entries too (they are kept).
                let mut t: Taint = t;
                t.insert(Source::State(self.element.state[*var].name.clone()));
                self.write_state(w, *var, t);
            }
            StmtKind::StateDelete { var, key } => {
                let k = self.expr(w, key, ctrl, h);
                Self::note_key(w, *var, &k);
                let mut t = with_ctrl(k);
                t.insert(Source::State(self.element.state[*var].name.clone()));
                self.write_state(w, *var, t);
            }
            StmtKind::LocalSet { local, key, value } => {
                let mut t = with_ctrl(self.expr(w, key, ctrl, h));
                t.extend(self.expr(w, value, ctrl, h));
                self.assign(w, *local, &t);
            }
            StmtKind::LocalDelete { local, key } => {
                let t = with_ctrl(self.expr(w, key, ctrl, h));
                self.assign(w, *local, &t);
            }
            StmtKind::SetField { msg, field, value } => {
                let t = with_ctrl(self.expr(w, value, ctrl, h));
                for written in written_by(field) {
                    add_deps(&mut w.props.write_deps, &written, &t);
                    w.props.fields_written.insert(written);
                }
                let _ = msg;
            }
            StmtKind::SetHeader { name, value, .. } => {
                let n = self.expr(w, name, ctrl, h);
                let t = with_ctrl(self.expr(w, value, ctrl, h))
                    .union(&n)
                    .cloned()
                    .collect::<Taint>();
                let label = match &name.kind {
                    ExprKind::Const(weft_hostcalls::Value::Str(s)) => {
                        format!("header:{}", header_name(s))
                    }
                    _ => "header:*".into(),
                };
                // A name computed at run time may be `dst` too: placing such an element on the
                // server side would stop a route it sets (found by a review).
                if label == "header:dst" || label == "header:*" {
                    w.props.routes = true;
                }
                w.props.fields_written.insert(label.clone());
                add_deps(&mut w.props.write_deps, &label, &t);
            }
            StmtKind::SetMetadata { key, value } => {
                let t = with_ctrl(self.expr(w, value, ctrl, h));
                let slot = &mut self.metadata[*key];
                slot.extend(t);
            }
            StmtKind::Eval(e) => {
                self.expr(w, e, ctrl, h);
            }
            StmtKind::Match { scrutinee, arms } => {
                let st = self.expr(w, scrutinee, ctrl, h);
                let inner: Taint = with_ctrl(st.clone());
                for arm in arms {
                    if let Pattern::Some(Some(b)) = arm.pattern {
                        self.assign(w, b, &st);
                    }
                    self.block(w, &arm.body, &inner, h);
                }
            }
            StmtKind::ForEach { coll, binder, body } => {
                let ct = match coll {
                    Collection::State(v) => {
                        Self::note_every_key(w, *v);
                        w.props
                            .state_read
                            .insert(self.element.state[*v].name.clone());
                        Taint::from([Source::State(self.element.state[*v].name.clone())])
                    }
                    Collection::Value(e) => self.expr(w, e, ctrl, h),
                };
                match binder {
                    Binder::One(l) => self.assign(w, *l, &ct),
                    Binder::Pair(a, b) => {
                        self.assign(w, *a, &ct);
                        self.assign(w, *b, &ct);
                    }
                }
                let inner = with_ctrl(ct);
                self.block(w, body, &inner, h);
            }
            StmtKind::Send(send) => self.send(w, send, ctrl, h),
            StmtKind::Return(v) => {
                let t = match v {
                    Some(e) => with_ctrl(self.expr(w, e, ctrl, h)),
                    None => ctrl.clone(),
                };
                if let Some(r) = w.returns.last_mut() {
                    r.extend(t);
                }
            }
        }
    }

    fn write_state(&mut self, w: &mut HandlerWalk, var: VarId, t: Taint) {
        let name = self.element.state[var].name.clone();
        w.props.state_written.insert(name.clone());
        note_whole_message(w, &t);
        add_deps(&mut w.props.write_deps, &format!("state:{name}"), &t);
    }

    fn send(&mut self, w: &mut HandlerWalk, send: &SendKind, ctrl: &Taint, h: Handler) {
        match send {
            SendKind::Down(e) => {
                self.expr(w, e, ctrl, h);
            }
            SendKind::Up(e) => {
                self.expr(w, e, ctrl, h);
                if h == Handler::Req {
                    w.props.may_drop = true;
                    w.props.may_reply = true;
                    w.props.drop_deps.extend(ctrl.iter().map(Source::label));
                }
            }
            SendKind::Reject { message, .. } => {
                self.expr(w, message, ctrl, h);
                w.props.may_drop = true;
                w.props.drop_deps.extend(ctrl.iter().map(Source::label));
            }
            SendKind::Channel { channel, value } => {
                let t = self.expr(w, value, ctrl, h);
                note_whole_message(w, &t);
                w.props
                    .channels
                    .insert(self.element.channels[*channel].clone());
            }
        }
    }

    fn expr(&mut self, w: &mut HandlerWalk, e: &Expr, ctrl: &Taint, h: Handler) -> Taint {
        let mut t = Taint::new();
        match &e.kind {
            ExprKind::Const(_) | ExprKind::Param(_) => {}
            ExprKind::Local(l) => t.extend(w.locals[*l].iter().cloned()),
            ExprKind::StateLoad(v) => {
                if self.element.state[*v].kind != CellKind::Scalar {
                    Self::note_every_key(w, *v);
                }
                let name = self.element.state[*v].name.clone();
                w.props.state_read.insert(name.clone());
                t.insert(Source::State(name));
            }
            ExprKind::StateGet { var, key } => {
                let k = self.expr(w, key, ctrl, h);
                Self::note_key(w, *var, &k);
                let name = self.element.state[*var].name.clone();
                w.props.state_read.insert(name.clone());
                t.extend(k);
                t.insert(Source::State(name));
            }
            ExprKind::StateRmw {
                var,
                key,
                binder,
                body,
            } => {
                let k = self.expr(w, key, ctrl, h);
                Self::note_key(w, *var, &k);
                let name = self.element.state[*var].name.clone();
                w.props.state_read.insert(name.clone());
                let mut bt = k.clone();
                bt.insert(Source::State(name.clone()));
                self.assign(w, *binder, &bt);
                w.returns.push(Taint::new());
                let inner: Taint = ctrl.union(&k).cloned().collect();
                self.block(w, body, &inner, h);
                let ret = w.returns.pop().unwrap_or_default();
                // The stored value is the binder's final value.
                let stored: Taint = w.locals[*binder].union(ctrl).cloned().collect();
                self.write_state(w, *var, stored);
                t.extend(ret);
                t.extend(bt);
            }
            ExprKind::StateSize(v) => {
                Self::note_every_key(w, *v);
                let name = self.element.state[*v].name.clone();
                w.props.state_read.insert(name.clone());
                t.insert(Source::State(name));
            }
            ExprKind::ValueGet { coll, key } => {
                t.extend(self.expr(w, coll, ctrl, h));
                t.extend(self.expr(w, key, ctrl, h));
            }
            ExprKind::Unary { operand, .. }
            | ExprKind::Convert { operand }
            | ExprKind::Unwrap(operand)
            | ExprKind::MakeSome(operand) => t.extend(self.expr(w, operand, ctrl, h)),
            ExprKind::Binary {
                op: BinOp::And | BinOp::Or,
                lhs,
                rhs,
            } => {
                // The right side runs only when the left side does not decide the result, so
                // what it does (a read-modify-write, a draw) depends on the left side, as the
                // body of an `if` does: with only the statement's control taint, a count
                // behind `header == 'yes' or get(m, k, lambda…)` looked independent of the
                // header, and the checker moved the header's writer across it.
                let l = self.expr(w, lhs, ctrl, h);
                let inner: Taint = ctrl.union(&l).cloned().collect();
                t.extend(self.expr(w, rhs, &inner, h));
                t.extend(l);
            }
            ExprKind::Binary { lhs, rhs, .. } | ExprKind::MakePair(lhs, rhs) => {
                t.extend(self.expr(w, lhs, ctrl, h));
                t.extend(self.expr(w, rhs, ctrl, h));
            }
            ExprKind::Field { msg, field } => {
                self.expr(w, msg, ctrl, h);
                w.props.fields_read.insert(field.text.clone());
                t.insert(Source::Field(field.text.clone()));
            }
            ExprKind::MetaStatus(msg) | ExprKind::MetaCode(msg) => {
                self.expr(w, msg, ctrl, h);
                w.props.fields_read.insert("meta_status".into());
                t.insert(Source::Status);
            }
            ExprKind::ByteSize { msg, field } => {
                let m = self.expr(w, msg, ctrl, h);
                match field {
                    Some(f) => {
                        w.props.fields_read.insert(f.text.clone());
                        t.insert(Source::Field(f.text.clone()));
                    }
                    None => {
                        // The whole message's size depends on every field.
                        w.props.fields_read.insert("*".into());
                        t.extend(m);
                    }
                }
            }
            ExprKind::Header { msg, name } => {
                self.expr(w, msg, ctrl, h);
                t.extend(self.expr(w, name, ctrl, h));
                match &name.kind {
                    ExprKind::Const(weft_hostcalls::Value::Str(s)) => {
                        // Executors look headers up lower-cased; a name from a parameter
                        // (`name: X-Tenant`) was never checked for case, and a key kept as
                        // written would not match the lower-cased metadata the runtime
                        // decodes for elements (the header would go unseen).
                        let s = header_name(s).into_owned();
                        w.props.fields_read.insert(format!("header:{s}"));
                        if s == "dst" {
                            t.insert(Source::Dst);
                        }
                        t.insert(Source::Header(s));
                    }
                    _ => {
                        w.props.fields_read.insert("header:*".into());
                        t.insert(Source::Header("*".into()));
                    }
                }
            }
            ExprKind::Metadata(k) => t.extend(self.metadata[*k].iter().cloned()),
            ExprKind::Call { builtin, args } => {
                for a in args {
                    t.extend(self.expr(w, a, ctrl, h));
                }
                match builtin {
                    b if b.uses_randomness() => {
                        w.props.uses_random = true;
                        t.insert(Source::Random);
                    }
                    Builtin::CurrentTime => {
                        w.props.uses_time = true;
                        t.insert(Source::Time);
                    }
                    Builtin::Src => {
                        t.insert(Source::Src);
                    }
                    Builtin::Dst => {
                        // Before routing `dst()` is the callee; after, the chosen replica.
                        w.props.fields_read.insert("header:dst".into());
                        t.insert(Source::Dst);
                    }
                    Builtin::Method => {
                        t.insert(Source::Method);
                    }
                    Builtin::RpcId => {
                        t.insert(Source::RpcId);
                    }
                    _ => {}
                }
            }
        }
        t
    }
}

/// A whole message stored in state (a cache) or written to a channel (a logger) makes what
/// is stored or written depend on every field: record the read as `*`, as `byte_size(rpc)`
/// does, so a field writer cannot move across it unnoticed.
fn note_whole_message(w: &mut HandlerWalk, t: &Taint) {
    if t.contains(&Source::Message) {
        w.props.fields_read.insert("*".into());
    }
}

/// The fields a write of `field` changes: the field itself, and every other member of a
/// oneof that the field or one of the messages on its path belongs to, since writing a
/// member clears its siblings (`wire::write`). Without them the planner moved a reader of
/// `b` ahead of a writer of `a` in `oneof { a; b }`, and a request the written order let
/// through was rejected.
fn written_by(field: &crate::schema::FieldPath) -> Vec<String> {
    let mut out = vec![field.text.clone()];
    let mut prefix = String::new();
    for step in &field.steps {
        for sibling in &step.oneof_sibling_names {
            out.push(format!("{prefix}{sibling}"));
        }
        prefix.push_str(&step.name);
        prefix.push('.');
    }
    out
}

fn add_deps(deps: &mut BTreeMap<String, BTreeSet<String>>, target: &str, t: &Taint) {
    deps.entry(target.to_owned())
        .or_default()
        .extend(t.iter().map(Source::label));
}
