//! The typed IR: what the checker produces and every executor consumes.
//!
//! It is a tree with structured control flow (match, foreach, atomic read-modify-write), so
//! the interpreter walks it directly and the JIT lowers each construct to Cranelift blocks.
//! Everything is resolved: locals are numbered slots with types, state variables and channels
//! are indices, message fields are schema paths, built-ins are an enum, and element
//! parameters are constants.

use std::collections::BTreeMap;

use weft_hostcalls::channel::Name;
use weft_hostcalls::state::{CellKind, Combiner, Consistency};
use weft_hostcalls::{Code, Value};

use crate::ast::{BinOp, UnOp};
use crate::diag::Span;
use crate::schema::FieldPath;
use crate::types::Type;

pub type LocalId = usize;
pub type VarId = usize;
pub type ChannelId = usize;
pub type MetaId = usize;

/// One element, checked against one RPC method's schema with its parameters bound.
#[derive(Clone, Debug)]
pub struct Element {
    /// Instance name in the chain (the element's file name unless the config renames it).
    pub name: String,
    /// Bound parameter values, in declaration order.
    pub params: Vec<(String, Value)>,
    pub state: Vec<StateVar>,
    pub channels: Vec<String>,
    /// Keys of the per-RPC scratch (`set_metadata`) with their value types.
    pub metadata: Vec<(String, Type)>,
    pub init: Body,
    pub req: Body,
    pub resp: Body,
    /// Parameters with neither a config value nor a default (`weft check` / `weft props`
    /// without a chain). They appear as [`ExprKind::Param`]; such an element cannot run.
    pub unbound_params: Vec<String>,
    /// Parameters the chain config sets that a `require` of `init` reads, where their values
    /// make its condition false: what an instance refused by `init` points at in the config.
    pub refused_params: Vec<String>,
    /// `name` and `channels` as channel records carry them, interned once so an emit does
    /// not allocate. [`Element::set_name`] keeps them in step with `name`.
    pub(crate) record_names: RecordNames,
}

#[derive(Clone, Debug)]
pub(crate) struct RecordNames {
    element: Name,
    channels: Vec<Name>,
}

impl RecordNames {
    pub(crate) fn new(element: &str, channels: &[String]) -> Self {
        RecordNames {
            element: Name::from(element),
            channels: channels.iter().map(|c| Name::from(c.as_str())).collect(),
        }
    }
}

impl Element {
    /// Whether every executor can run it (all parameters bound, all fields resolved).
    pub fn is_runnable(&self) -> bool {
        self.unbound_params.is_empty()
    }

    /// Renames the element (its channel records follow).
    pub fn set_name(&mut self, name: String) {
        self.record_names.element = Name::from(name.as_str());
        self.name = name;
    }

    /// The element's name as its channel records carry it.
    pub fn record_element(&self) -> Name {
        self.record_names.element
    }

    /// A channel's name as records carry it.
    pub fn record_channel(&self, channel: ChannelId) -> Option<Name> {
        self.record_names.channels.get(channel).copied()
    }

    /// [`Element::record_channel`], borrowed where the element keeps it.
    pub fn record_channel_ref(&self, channel: ChannelId) -> Option<&Name> {
        self.record_names.channels.get(channel)
    }

    /// [`Element::record_element`], borrowed where the element keeps it.
    pub fn record_element_ref(&self) -> &Name {
        &self.record_names.element
    }

    pub fn var(&self, name: &str) -> Option<VarId> {
        self.state.iter().position(|v| v.name == name)
    }

    pub fn body(&self, handler: Handler) -> &Body {
        match handler {
            Handler::Init => &self.init,
            Handler::Req => &self.req,
            Handler::Resp => &self.resp,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Handler {
    Init,
    Req,
    Resp,
}

impl Handler {
    pub fn name(self) -> &'static str {
        match self {
            Handler::Init => "init",
            Handler::Req => "req",
            Handler::Resp => "resp",
        }
    }
}

#[derive(Clone, Debug)]
pub struct StateVar {
    pub name: String,
    pub ty: Type,
    pub kind: CellKind,
    pub consistency: Consistency,
    pub combiner: Combiner,
    pub persistence: bool,
    /// A map's most entries (`@capacity(n)`); the oldest inserted goes first.
    pub capacity: Option<usize>,
    /// Set when an `init` parameter of the same name initialises it (AppNet's
    /// `init(max_concurrent_req):` form).
    pub from_param: Option<Value>,
    pub span: Span,
}

impl StateVar {
    /// Type of a map value or vector element; the variable's type for scalars.
    pub fn value_type(&self) -> &Type {
        match &self.ty {
            Type::Map(_, v) => v,
            Type::Vec(t) => t,
            t => t,
        }
    }

    pub fn key_type(&self) -> Type {
        match &self.ty {
            Type::Map(k, _) => (**k).clone(),
            Type::Vec(_) => Type::Int,
            _ => Type::Unit,
        }
    }
}

/// A handler (or `init`) body with its local slots.
#[derive(Clone, Debug, Default)]
pub struct Body {
    pub locals: Vec<Local>,
    /// The slot holding the message (`rpc`) in `req`/`resp`.
    pub msg: Option<LocalId>,
    pub block: Block,
}

#[derive(Clone, Debug)]
pub struct Local {
    pub name: String,
    pub ty: Type,
}

pub type Block = Vec<Stmt>;

#[derive(Clone, Debug)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum StmtKind {
    Assign {
        local: LocalId,
        value: Expr,
    },
    /// `(a, b) = pair`.
    AssignPair {
        first: LocalId,
        second: LocalId,
        value: Expr,
    },
    /// Assignment to a scalar state variable.
    StateStore {
        var: VarId,
        value: Expr,
    },
    /// `set(map_or_vec_state, key, value)`.
    StateSet {
        var: VarId,
        key: Expr,
        value: Expr,
    },
    StateDelete {
        var: VarId,
        key: Expr,
    },
    /// `set(local_map_or_vec, key, value)` on a local value.
    LocalSet {
        local: LocalId,
        key: Expr,
        value: Expr,
    },
    LocalDelete {
        local: LocalId,
        key: Expr,
    },
    /// `set(rpc, 'a.b', value)`.
    SetField {
        msg: LocalId,
        field: FieldPath,
        value: Expr,
    },
    /// `set_rpc_header(rpc, name, value)`.
    SetHeader {
        msg: LocalId,
        name: Expr,
        value: Expr,
    },
    SetMetadata {
        key: MetaId,
        value: Expr,
    },
    /// An expression evaluated for its effects (a read-modify-write whose result is unused).
    Eval(Expr),
    Match {
        scrutinee: Expr,
        arms: Vec<Arm>,
    },
    ForEach {
        coll: Collection,
        binder: Binder,
        body: Block,
    },
    /// Ends the handler (except channel sends).
    Send(SendKind),
    /// Returns from the innermost lambda: the result of a read-modify-write, or the next
    /// iteration of a `foreach`.
    Return(Option<Expr>),
}

impl StmtKind {
    /// Calls `f` on each expression directly inside this statement, in evaluation order;
    /// the blocks of `match` arms and `foreach` bodies are not expressions: walkers that need
    /// them match those statements themselves.
    pub fn for_each_expr<'a>(&'a self, mut f: impl FnMut(&'a Expr)) {
        match self {
            StmtKind::Assign { value, .. }
            | StmtKind::AssignPair { value, .. }
            | StmtKind::StateStore { value, .. }
            | StmtKind::SetField { value, .. }
            | StmtKind::SetMetadata { value, .. }
            | StmtKind::Eval(value)
            | StmtKind::Match {
                scrutinee: value, ..
            } => f(value),
            StmtKind::StateSet { key, value, .. }
            | StmtKind::LocalSet { key, value, .. }
            | StmtKind::SetHeader {
                name: key, value, ..
            } => {
                f(key);
                f(value);
            }
            StmtKind::StateDelete { key, .. } | StmtKind::LocalDelete { key, .. } => f(key),
            StmtKind::ForEach { coll, .. } => {
                if let Collection::Value(e) = coll {
                    f(e);
                }
            }
            StmtKind::Send(
                SendKind::Down(e)
                | SendKind::Up(e)
                | SendKind::Reject { message: e, .. }
                | SendKind::Channel { value: e, .. },
            ) => f(e),
            StmtKind::Return(e) => {
                if let Some(e) = e {
                    f(e);
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
pub enum Collection {
    State(VarId),
    Value(Expr),
}

#[derive(Clone, Debug)]
pub enum Binder {
    One(LocalId),
    /// `lambda(k, v)` over a map.
    Pair(LocalId, LocalId),
}

#[derive(Clone, Debug)]
pub struct Arm {
    pub pattern: Pattern,
    pub body: Block,
}

#[derive(Clone, Debug)]
pub enum Pattern {
    Wildcard,
    Lit(Value),
    Some(Option<LocalId>),
    None,
}

#[derive(Clone, Debug)]
pub enum SendKind {
    /// Towards the server (request handlers).
    Down(Expr),
    /// Towards the client: the response in `resp`, a local reply in `req`.
    Up(Expr),
    /// `send(err(message, CODE), Up)`.
    Reject { code: Code, message: Expr },
    /// A record to an auxiliary channel; does not end the handler.
    Channel { channel: ChannelId, value: Expr },
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub ty: Type,
    pub span: Span,
}

impl Expr {
    /// Calls `f` on each expression directly inside this one, in evaluation order. A
    /// read-modify-write's lambda body is a block, not an operand: walkers that need it
    /// match `StateRmw` themselves.
    pub fn for_each_operand<'a>(&'a self, mut f: impl FnMut(&'a Expr)) {
        match &self.kind {
            ExprKind::Const(_)
            | ExprKind::Param(_)
            | ExprKind::Local(_)
            | ExprKind::StateLoad(_)
            | ExprKind::StateSize(_)
            | ExprKind::Metadata(_) => {}
            ExprKind::StateGet { key, .. } | ExprKind::StateRmw { key, .. } => f(key),
            ExprKind::Call { args, .. } => args.iter().for_each(f),
            ExprKind::ValueGet { coll: a, key: b }
            | ExprKind::Binary { lhs: a, rhs: b, .. }
            | ExprKind::MakePair(a, b)
            | ExprKind::Header { msg: a, name: b } => {
                f(a);
                f(b);
            }
            ExprKind::Unary { operand, .. }
            | ExprKind::Convert { operand }
            | ExprKind::Unwrap(operand)
            | ExprKind::MakeSome(operand)
            | ExprKind::Field { msg: operand, .. }
            | ExprKind::MetaStatus(operand)
            | ExprKind::MetaCode(operand)
            | ExprKind::ByteSize { msg: operand, .. } => f(operand),
        }
    }
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Const(Value),
    /// An unbound parameter (only in elements that are not runnable).
    Param(String),
    Local(LocalId),
    /// Read of a scalar state variable, or of a whole (local) state vector.
    StateLoad(VarId),
    /// `get(map_state, k)` → `Option<V>`; `get(vec_state, i)` → `T` (out of range is a
    /// run-time error).
    StateGet {
        var: VarId,
        key: Box<Expr>,
    },
    /// `get(map_state, k, lambda(v): …)`: atomic read-modify-write of one key. The binder
    /// starts as the stored value (the zero value when missing); its final value is stored
    /// unless it equals that starting value; the expression's value is the lambda's `return`
    /// value.
    StateRmw {
        var: VarId,
        key: Box<Expr>,
        binder: LocalId,
        body: Block,
    },
    StateSize(VarId),
    /// `get(local_map, k)` → `Option<V>`; `get(local_vec, i)` → `T`.
    ValueGet {
        coll: Box<Expr>,
        key: Box<Expr>,
    },
    Unary {
        op: UnOp,
        operand: Box<Expr>,
    },
    /// `and`/`or` short-circuit; other operators evaluate both sides. Both operands have the
    /// same type (the checker inserts conversions).
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// Numeric conversion inserted by the checker (int → float) or written (`float(x)`).
    Convert {
        operand: Box<Expr>,
    },
    /// `Option<T>` used where `T` is expected (AppNet files rely on it): `None` is a run-time
    /// error.
    Unwrap(Box<Expr>),
    MakePair(Box<Expr>, Box<Expr>),
    MakeSome(Box<Expr>),
    Field {
        msg: Box<Expr>,
        field: FieldPath,
    },
    /// `get(rpc, 'meta_status')`: 'success' or 'failure'.
    MetaStatus(Box<Expr>),
    /// `get(rpc, 'meta_code')`: the numeric gRPC status.
    MetaCode(Box<Expr>),
    ByteSize {
        msg: Box<Expr>,
        field: Option<FieldPath>,
    },
    /// `get_rpc_header(rpc, name)`: the value, or '' when absent.
    Header {
        msg: Box<Expr>,
        name: Box<Expr>,
    },
    Metadata(MetaId),
    Call {
        builtin: Builtin,
        args: Vec<Expr>,
    },
}

/// Built-in functions. Pure ones are folded when their arguments are constants; the others
/// reach the host (clock, RNG, RPC context).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    RandomF,
    RandomI,
    RandomChoices,
    CurrentTime,
    TimeDiff,
    Min,
    Max,
    Abs,
    Hash,
    Encrypt,
    Decrypt,
    Compress,
    Decompress,
    Quantile,
    /// `size` of a local value (string, bytes, Vec, Map).
    Size,
    ToStr,
    ToInt,
    ToUint,
    ToFloat,
    ParseInt,
    ParseFloat,
    RpcId,
    Method,
    Src,
    Dst,
    /// `require(condition, message)` in `init`: stops the instance from starting, with
    /// `message`, when `condition` is false (a parameter the element cannot work with).
    Require,
}

impl Builtin {
    /// Whether the result depends only on the arguments.
    pub fn is_pure(self) -> bool {
        !matches!(
            self,
            Builtin::RandomF
                | Builtin::RandomI
                | Builtin::RandomChoices
                | Builtin::CurrentTime
                | Builtin::Encrypt
                | Builtin::RpcId
                | Builtin::Method
                | Builtin::Src
                | Builtin::Dst
        )
    }

    pub fn uses_randomness(self) -> bool {
        matches!(
            self,
            Builtin::RandomF | Builtin::RandomI | Builtin::RandomChoices | Builtin::Encrypt
        )
    }
}

/// Parameter values bound by a chain config, by name.
pub type Params = BTreeMap<String, Value>;
