//! Type checking and lowering of an element to the IR.
//!
//! One pass over the syntax tree: resolve names (locals, parameters, state, channels),
//! infer local types from their first assignment, check every expression bidirectionally,
//! resolve message fields against the method's protobuf schema, bind parameters from the
//! chain config and fold constants. A `match` on a constant (a parameter, typically) keeps
//! only the arm it takes: the others are still type-checked but a field name that does not
//! resolve is no error there, so `loadbalance(policy: 'round_robin')` need not name a key
//! field.

use std::collections::{HashMap, HashSet};

use weft_hostcalls::state::{CellKind, Combiner, Consistency};
use weft_hostcalls::{Code, Value};

use crate::ast::{self, BinOp, Lit, UnOp};
use crate::diag::{Diagnostic, Span, did_you_mean};
use crate::eval;
use crate::ir::*;
use crate::schema::{FieldPath, MethodSchema, resolve_path, resolve_payload_path};
use crate::types::Type;

/// What an element is checked against.
#[derive(Clone, Debug, Default)]
pub struct CheckEnv<'a> {
    /// Instance name (defaults to "element").
    pub name: String,
    /// The edge's method; without it message fields have [`Type::Dyn`].
    pub method: Option<&'a MethodSchema>,
    /// Parameter values from the chain config. `None` checks the element on its own:
    /// parameters without a default stay symbolic.
    pub params: Option<&'a Params>,
}

/// Checks a parsed element. Returns the IR when there is no error; warnings may accompany
/// it.
pub fn check(file: &ast::ElementFile, env: &CheckEnv<'_>) -> (Option<Element>, Vec<Diagnostic>) {
    let mut cx = Checker {
        env,
        diags: Vec::new(),
        state: Vec::new(),
        state_index: HashMap::new(),
        channels: Vec::new(),
        channel_index: HashMap::new(),
        params: Vec::new(),
        metadata: Vec::new(),
        dead: 0,
        body: None,
    };
    cx.declare_state(file);
    cx.declare_params(file);
    let init = cx.handler_body(Handler::Init, None, file.init.as_ref().map(|i| &i.body));
    let req = cx.handler_body(
        Handler::Req,
        file.req.as_ref().map(|h| &h.param),
        file.req.as_ref().map(|h| &h.body),
    );
    let resp = cx.handler_body(
        Handler::Resp,
        file.resp.as_ref().map(|h| &h.param),
        file.resp.as_ref().map(|h| &h.body),
    );
    let has_errors = cx.diags.iter().any(Diagnostic::is_error);
    if has_errors
        || file.state.is_none()
        || file.init.is_none()
        || file.req.is_none()
        || file.resp.is_none()
    {
        return (None, cx.diags);
    }
    let unbound_params = cx
        .params
        .iter()
        .filter(|p| p.value.is_none())
        .map(|p| p.name.clone())
        .collect();
    let params = cx
        .params
        .iter()
        .filter_map(|p| Some((p.name.clone(), p.value.clone()?)))
        .collect();
    let element = Element {
        name: if env.name.is_empty() {
            "element".into()
        } else {
            env.name.clone()
        },
        params,
        state: cx.state,
        channels: cx.channels,
        metadata: cx.metadata.into_iter().map(|m| (m.0, m.1)).collect(),
        init,
        req,
        resp,
        unbound_params,
    };
    (Some(element), cx.diags)
}

struct ParamInfo {
    name: String,
    ty: Type,
    value: Option<Value>,
    /// The parameter initialises the state variable of the same name.
    state: Option<VarId>,
}

/// Per-body checking state.
struct BodyCx {
    handler: Handler,
    locals: Vec<Local>,
    /// Name scopes, innermost last. Assignments declare into the innermost function-level
    /// scope (the handler or a lambda body), as in Python; match-arm bindings are scoped to
    /// their arm.
    scopes: Vec<Scope>,
    /// Locals assigned on every path to the current point.
    defined: HashSet<LocalId>,
    /// Whether the current point can be reached (false after a `send` or `return`).
    reachable: bool,
    reported_unreachable: bool,
    msg: Option<LocalId>,
    lambdas: Vec<LambdaCx>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LambdaKind {
    ForEach,
    Rmw,
}

struct LambdaCx {
    kind: LambdaKind,
    /// Types of the values returned so far (read-modify-write lambdas).
    returns: Vec<(Type, Span)>,
}

struct Checker<'a> {
    env: &'a CheckEnv<'a>,
    diags: Vec<Diagnostic>,
    state: Vec<StateVar>,
    state_index: HashMap<String, VarId>,
    channels: Vec<String>,
    channel_index: HashMap<String, ChannelId>,
    params: Vec<ParamInfo>,
    /// Per-RPC scratch keys: name, type, where first set.
    metadata: Vec<(String, Type, Span)>,
    /// Greater than zero inside code a constant condition never reaches.
    dead: usize,
    body: Option<BodyCx>,
}

const BUILTINS: &[&str] = &[
    "send",
    "err",
    "get",
    "set",
    "delete",
    "size",
    "foreach",
    "byte_size",
    "get_rpc_header",
    "set_rpc_header",
    "get_metadata",
    "set_metadata",
    "rpc_id",
    "method",
    "src",
    "dst",
    "randomf",
    "randomi",
    "random_choices",
    "current_time",
    "time_diff",
    "min",
    "max",
    "abs",
    "hash",
    "encrypt",
    "decrypt",
    "compress",
    "decompress",
    "quantile",
    "str",
    "int",
    "uint",
    "float",
    "parse_int",
    "parse_float",
    "Some",
];

fn err_expr(span: Span) -> Expr {
    Expr {
        kind: ExprKind::Const(Value::Unit),
        ty: Type::Dyn,
        span,
    }
}

fn const_expr(v: Value, ty: Type, span: Span) -> Expr {
    Expr {
        kind: ExprKind::Const(v),
        ty,
        span,
    }
}

impl Checker<'_> {
    fn error(&mut self, span: Span, msg: impl Into<String>) -> &mut Diagnostic {
        self.diags.push(Diagnostic::error(span, msg));
        let n = self.diags.len() - 1;
        &mut self.diags[n]
    }

    fn warn(&mut self, span: Span, msg: impl Into<String>) -> &mut Diagnostic {
        self.diags.push(Diagnostic::warning(span, msg));
        let n = self.diags.len() - 1;
        &mut self.diags[n]
    }

    fn bx(&mut self) -> &mut BodyCx {
        self.body
            .as_mut()
            .expect("body context is set while checking a handler")
    }

    fn handler(&self) -> Handler {
        self.body.as_ref().map_or(Handler::Init, |b| b.handler)
    }

    // ---- declarations --------------------------------------------------------------

    fn resolve_type(&mut self, t: &ast::TypeExpr) -> Type {
        match t {
            ast::TypeExpr::Named(id) => match id.name.as_str() {
                "int" | "i64" | "i32" => Type::Int,
                "uint" | "u64" | "u32" => Type::Uint,
                "float" | "f64" | "f32" | "double" => Type::Float,
                "bool" => Type::Bool,
                "string" | "str" | "String" => Type::Str,
                "bytes" => Type::Bytes,
                "Instant" | "instant" => Type::Instant,
                "Channel" => Type::Channel,
                "Request" => Type::Request,
                "Response" => Type::Response,
                "Vec" | "Map" | "Option" => {
                    self.error(id.span, format!("`{}` needs type arguments", id.name))
                        .hint =
                        Some("write `Vec<int>`, `Map<string, int>` or `Option<int>`".into());
                    Type::Dyn
                }
                other => {
                    let known = [
                        "int", "uint", "float", "bool", "string", "bytes", "Instant", "Channel",
                        "Request", "Response", "Vec", "Map", "Option",
                    ];
                    let hint = did_you_mean(other, known)
                        .unwrap_or_else(|| format!("known types: {}", known.join(", ")));
                    self.error(id.span, format!("unknown type `{other}`")).hint = Some(hint);
                    Type::Dyn
                }
            },
            ast::TypeExpr::Generic { name, args, span } => {
                let args: Vec<Type> = args.iter().map(|a| self.resolve_type(a)).collect();
                let want = match name.name.as_str() {
                    "Vec" | "Option" | "Channel" => 1,
                    "Map" => 2,
                    _ => {
                        self.error(
                            name.span,
                            format!("`{}` takes no type arguments", name.name),
                        );
                        return Type::Dyn;
                    }
                };
                if args.len() != want {
                    self.error(
                        *span,
                        format!(
                            "`{}` takes {want} type argument(s), found {}",
                            name.name,
                            args.len()
                        ),
                    );
                    return Type::Dyn;
                }
                let mut it = args.into_iter();
                let a = it.next().unwrap_or(Type::Dyn);
                match name.name.as_str() {
                    "Vec" => Type::vec(a),
                    "Option" => Type::option(a),
                    "Channel" => Type::Channel,
                    _ => {
                        if !a.is_comparable() {
                            self.error(*span, format!("`{a}` cannot be a map key"));
                        }
                        Type::map(a, it.next().unwrap_or(Type::Dyn))
                    }
                }
            }
            ast::TypeExpr::Pair(a, b, _) => {
                let a = self.resolve_type(a);
                let b = self.resolve_type(b);
                Type::pair(a, b)
            }
        }
    }

    fn declare_state(&mut self, file: &ast::ElementFile) {
        let Some(section) = &file.state else { return };
        for decl in &section.decls {
            let name = &decl.name.name;
            if self.state_index.contains_key(name) || self.channel_index.contains_key(name) {
                self.error(
                    decl.name.span,
                    format!("state variable `{name}` is declared twice"),
                );
                continue;
            }
            if BUILTINS.contains(&name.as_str()) {
                self.error(
                    decl.name.span,
                    format!("`{name}` is a built-in function and cannot name state"),
                );
                continue;
            }
            let ty = self.resolve_type(&decl.ty);
            let mut consistency = Consistency::Local;
            let mut combiner = None;
            let mut persistence = false;
            for d in &decl.decorators {
                let arg = d.arg.name.as_str();
                match d.name.name.as_str() {
                    "consistency" => match arg {
                        "strong" => consistency = Consistency::Strong,
                        "weak" => consistency = Consistency::Weak,
                        _ => {
                            self.error(d.arg.span, format!("unknown consistency `{arg}`"))
                                .hint =
                                Some("write `@consistency(strong)` or `@consistency(weak)`".into());
                        }
                    },
                    "combiner" => match arg {
                        "lww" => combiner = Some(Combiner::Lww),
                        "sum" => combiner = Some(Combiner::Sum),
                        "max" => combiner = Some(Combiner::Max),
                        "min" => combiner = Some(Combiner::Min),
                        _ => {
                            self.error(d.arg.span, format!("unknown combiner `{arg}`"))
                                .hint = Some("combiners: lww, sum, max, min".into());
                        }
                    },
                    "persistence" => match arg {
                        "true" => persistence = true,
                        "false" => persistence = false,
                        _ => {
                            self.error(d.arg.span, "`@persistence` takes `true` or `false`");
                        }
                    },
                    other => {
                        let hint = did_you_mean(other, ["consistency", "combiner", "persistence"])
                            .unwrap_or_else(|| {
                                "decorators: @consistency, @combiner, @persistence".into()
                            });
                        self.error(d.name.span, format!("unknown decorator `@{other}`"))
                            .hint = Some(hint);
                    }
                }
            }
            if ty == Type::Channel {
                if !decl.decorators.is_empty() {
                    self.error(decl.span, "a channel takes no decorators");
                }
                self.channel_index.insert(name.clone(), self.channels.len());
                self.channels.push(name.clone());
                continue;
            }
            let kind = match ty {
                Type::Map(..) => CellKind::Map,
                Type::Vec(_) => CellKind::Vec,
                _ => CellKind::Scalar,
            };
            if kind == CellKind::Vec && consistency != Consistency::Local {
                self.error(decl.span, "shared state cannot be a `Vec`").hint =
                    Some("use a `Map<int, T>` keyed by position; maps merge key by key".into());
            }
            let combiner = combiner.unwrap_or(Combiner::Lww);
            let value_ty = match &ty {
                Type::Map(_, v) => (**v).clone(),
                t => t.clone(),
            };
            // Max and min order instants too; a sum of instants means nothing (and the state
            // stores refuse it: every access would fail at run time).
            let combinable = match combiner {
                Combiner::Sum => value_ty.is_numeric(),
                Combiner::Max | Combiner::Min => value_ty.is_numeric() || value_ty == Type::Instant,
                Combiner::Lww => true,
            };
            if !combinable {
                let what = if combiner == Combiner::Sum {
                    "`sum` needs int, uint or float values"
                } else {
                    "this combiner needs numeric or Instant values"
                };
                self.error(
                    decl.span,
                    format!("{what}, but `{name}` holds `{value_ty}`"),
                );
            }
            if matches!(ty, Type::Request | Type::Option(_))
                || matches!(&ty, Type::Map(_, v) if **v == Type::Channel)
            {
                self.error(decl.ty.span(), format!("state cannot hold `{ty}`"));
            }
            self.state_index.insert(name.clone(), self.state.len());
            self.state.push(StateVar {
                name: name.clone(),
                ty,
                kind,
                consistency,
                combiner,
                persistence,
                from_param: None,
                span: decl.span,
            });
        }
    }

    fn declare_params(&mut self, file: &ast::ElementFile) {
        let Some(init) = &file.init else { return };
        let given = self.env.params;
        let mut seen = HashSet::new();
        for p in &init.params {
            let name = p.name.name.clone();
            if !seen.insert(name.clone()) {
                self.error(p.name.span, format!("parameter `{name}` is declared twice"));
                continue;
            }
            let state = self.state_index.get(&name).copied();
            let declared = p.ty.as_ref().map(|t| self.resolve_type(t));
            // A parameter named like state initialises it (`init` stores the value whole), so
            // it must be a scalar of the same type: a mismatch would store a value of another
            // kind, and a collection would land under the scalar key `()`.
            if let Some(v) = state {
                let sv = &self.state[v];
                if sv.kind != CellKind::Scalar {
                    let msg = format!(
                        "parameter `{name}` would initialise the collection `{name}`; only scalar state is initialised from a parameter"
                    );
                    self.error(p.name.span, msg).hint = Some(format!(
                        "rename the parameter, or fill `{name}` from the chain config's `state:`"
                    ));
                    continue;
                }
                if let Some(t) = &declared
                    && *t != sv.ty
                    && *t != Type::Dyn
                {
                    let msg = format!(
                        "parameter `{name}` initialises state `{name}: {}` but is declared `{t}`",
                        sv.ty
                    );
                    self.error(p.name.span, msg).hint = Some(format!(
                        "declare it `{name}: {}`, or leave the type out",
                        sv.ty
                    ));
                    continue;
                }
            }
            let config_value = given.and_then(|g| g.get(&name)).cloned();
            let default = p.default.as_ref().map(|d| {
                self.body = Some(BodyCx::new(Handler::Init, None));
                let e = self.expr(d, declared.as_ref());
                self.body = None;
                e
            });
            let ty = declared
                .or_else(|| state.map(|v| self.state[v].ty.clone()))
                .or_else(|| default.as_ref().map(|d| d.ty.clone()))
                .or_else(|| config_value.as_ref().and_then(infer_value_type));
            let Some(ty) = ty else {
                self.error(p.name.span, format!("parameter `{name}` has no type"))
                    .hint = Some(format!("write `{name}: int` (or the type it needs)"));
                // Still declared: its uses are not "unknown names".
                self.params.push(ParamInfo {
                    name,
                    ty: Type::Dyn,
                    value: None,
                    state: None,
                });
                continue;
            };
            let default_value = match default {
                Some(e) => {
                    let e = self.coerce(e, &ty, "the default value");
                    match e.kind {
                        ExprKind::Const(v) => Some(v),
                        _ => {
                            let span = p.default.as_ref().map_or(p.span, |d| d.span);
                            self.error(span, "a parameter default must be a constant")
                                .hint = Some("use a literal or an expression of literals".into());
                            None
                        }
                    }
                }
                None => None,
            };
            let mut misfit = false;
            let value = match config_value {
                Some(v) => match coerce_value(v, &ty) {
                    Ok(v) => Some(v),
                    Err(found) => {
                        self.error(p.name.span, format!(
                            "the chain config gives parameter `{name}` a {found}, but it is declared `{ty}`"
                        ));
                        misfit = true;
                        None
                    }
                },
                None => default_value,
            };
            // A value of the wrong kind is reported above; "has no value" would be false.
            if given.is_some() && value.is_none() && !misfit {
                self.error(p.name.span, format!("parameter `{name}` has no value"))
                    .hint = Some(format!(
                    "set it in the chain config, e.g. `{name}: …`, or give it a default"
                ));
            }
            if let (Some(v), Some(val)) = (state, &value) {
                self.state[v].from_param = Some(val.clone());
            }
            self.params.push(ParamInfo {
                name,
                ty,
                value,
                state,
            });
        }
        if let Some(given) = given {
            for k in given.keys() {
                if !init.params.iter().any(|p| &p.name.name == k) {
                    let names: Vec<&str> =
                        init.params.iter().map(|p| p.name.name.as_str()).collect();
                    let hint = did_you_mean(k, names.iter().copied()).unwrap_or_else(|| {
                        if names.is_empty() {
                            "`init()` declares no parameters".into()
                        } else {
                            format!("parameters: {}", names.join(", "))
                        }
                    });
                    self.error(
                        init.span,
                        format!("the chain config sets `{k}`, which `init` does not declare"),
                    )
                    .hint = Some(hint);
                }
            }
        }
    }

    // ---- bodies --------------------------------------------------------------------

    fn handler_body(
        &mut self,
        handler: Handler,
        param: Option<&ast::Ident>,
        block: Option<&ast::Block>,
    ) -> Body {
        let msg_ty = match handler {
            Handler::Init => None,
            Handler::Req => Some(Type::Request),
            Handler::Resp => Some(Type::Response),
        };
        let mut bx = BodyCx::new(handler, None);
        if let (Some(p), Some(ty)) = (param, msg_ty) {
            if self.state_index.contains_key(&p.name) {
                self.error(
                    p.span,
                    format!(
                        "`{}` is a state variable; name the message differently",
                        p.name
                    ),
                );
            }
            let id = bx.declare_binder(&p.name, ty);
            bx.defined.insert(id);
            bx.msg = Some(id);
        }
        self.body = Some(bx);
        let block = block.map(|b| self.block(b)).unwrap_or_default();
        let bx = self.body.take().expect("body context");
        if handler != Handler::Init
            && bx.reachable
            && let Some(b) = block.last().map(|s| s.span).or(param.map(|p| p.span))
        {
            let dir = if handler == Handler::Req {
                "Down"
            } else {
                "Up"
            };
            self.warn(
                b,
                format!(
                    "`{}` can end without `send`; the message is forwarded unchanged",
                    handler.name()
                ),
            )
            .hint = Some(format!(
                "end the handler with `send(rpc, {dir})` to make this explicit"
            ));
        }
        Body {
            locals: bx.locals,
            msg: bx.msg,
            block,
        }
    }

    fn block(&mut self, b: &ast::Block) -> Block {
        let mut out = Vec::new();
        for s in &b.stmts {
            if !self.bx().reachable && !self.bx().reported_unreachable {
                self.bx().reported_unreachable = true;
                self.warn(
                    s.span,
                    "unreachable code: the handler already ended at a `send` or `return` above",
                );
            }
            if let Some(stmt) = self.stmt(s) {
                out.push(stmt);
            }
        }
        out
    }

    fn stmt(&mut self, s: &ast::Stmt) -> Option<Stmt> {
        let span = s.span;
        let kind = match &s.kind {
            ast::StmtKind::Pass => return None,
            ast::StmtKind::Assign { target, value } => self.assign(target, value, span)?,
            ast::StmtKind::Expr(e) => self.expr_stmt(e)?,
            ast::StmtKind::Match { scrutinee, arms } => self.match_stmt(scrutinee, arms),
            ast::StmtKind::If {
                branches,
                otherwise,
            } => self.if_stmt(branches, otherwise.as_ref(), span),
            ast::StmtKind::Return(value) => self.return_stmt(value.as_ref(), span)?,
        };
        Some(Stmt { kind, span })
    }

    fn return_stmt(&mut self, value: Option<&ast::Expr>, span: Span) -> Option<StmtKind> {
        let Some(lambda) = self.bx().lambdas.last().map(|l| l.kind) else {
            self.error(span, "`return` outside a lambda").hint =
                Some("a handler ends with `send`; `return` leaves a `lambda` body".into());
            return None;
        };
        let value = value.map(|v| self.expr(v, None));
        match (lambda, &value) {
            (LambdaKind::ForEach, Some(v)) => {
                self.error(v.span, "a `foreach` lambda cannot return a value")
                    .hint = Some("`return` alone moves on to the next element".into());
            }
            (LambdaKind::Rmw, _) => {
                let ty = value.as_ref().map_or(Type::Unit, |v| v.ty.clone());
                if let Some(l) = self.bx().lambdas.last_mut() {
                    l.returns.push((ty, span));
                }
            }
            _ => {}
        }
        self.bx().reachable = false;
        Some(StmtKind::Return(value))
    }

    fn assign(
        &mut self,
        target: &ast::AssignTarget,
        value: &ast::Expr,
        span: Span,
    ) -> Option<StmtKind> {
        match target {
            ast::AssignTarget::Name(id) => {
                if let Some(local) = self.bx().lookup(&id.name) {
                    if Some(local) == self.bx().msg {
                        self.error(
                            id.span,
                            format!("the message `{}` cannot be reassigned", id.name),
                        )
                        .hint = Some("change its fields with `set(rpc, 'field', value)`".into());
                        return None;
                    }
                    let ty = self.bx().locals[local].ty.clone();
                    let v = self.expr(value, Some(&ty));
                    let v = self.coerce(v, &ty, &format!("the value assigned to `{}`", id.name));
                    self.bx().defined.insert(local);
                    return Some(StmtKind::Assign { local, value: v });
                }
                if let Some(&var) = self.state_index.get(&id.name) {
                    let sv = &self.state[var];
                    if sv.kind != CellKind::Scalar {
                        let what = if sv.kind == CellKind::Map {
                            "map"
                        } else {
                            "vector"
                        };
                        self.error(
                            id.span,
                            format!(
                                "`{}` is a {what} in state; it cannot be assigned whole",
                                id.name
                            ),
                        )
                        .hint = Some(format!("write entries with `set({}, key, value)`", id.name));
                        return None;
                    }
                    let ty = sv.ty.clone();
                    let v = self.expr(value, Some(&ty));
                    let v = self.coerce(v, &ty, &format!("the value assigned to `{}`", id.name));
                    return Some(StmtKind::StateStore { var, value: v });
                }
                if self
                    .params
                    .iter()
                    .any(|p| p.name == id.name && p.state.is_none())
                {
                    self.error(id.span, format!("parameter `{}` is read-only", id.name))
                        .hint = Some("copy it into a local or a state variable".into());
                    return None;
                }
                if self.channel_index.contains_key(&id.name) {
                    self.error(
                        id.span,
                        format!(
                            "`{}` is a channel; write to it with `send(value, {})`",
                            id.name, id.name
                        ),
                    );
                    return None;
                }
                self.check_new_name(id);
                let v = self.expr(value, None);
                if v.ty == Type::Unit {
                    self.error(value.span, "this expression has no value to assign");
                    return None;
                }
                if v.ty == Type::Channel {
                    self.error(value.span, "a channel cannot be copied into a local");
                    return None;
                }
                let local = self.bx().declare(&id.name, v.ty.clone());
                self.bx().defined.insert(local);
                Some(StmtKind::Assign { local, value: v })
            }
            ast::AssignTarget::Pair(a, b) => {
                let v = self.expr(value, None);
                let (ta, tb) = match &v.ty {
                    Type::Pair(x, y) => ((**x).clone(), (**y).clone()),
                    Type::Dyn => (Type::Dyn, Type::Dyn),
                    other => {
                        self.error(
                            value.span,
                            format!("expected a pair to unpack, found `{other}`"),
                        );
                        return None;
                    }
                };
                let first = self.pair_target(a, ta)?;
                let second = self.pair_target(b, tb)?;
                if first == second {
                    self.error(span, format!("`{}` is assigned twice in one pair", a.name));
                }
                Some(StmtKind::AssignPair {
                    first,
                    second,
                    value: v,
                })
            }
        }
    }

    fn pair_target(&mut self, id: &ast::Ident, ty: Type) -> Option<LocalId> {
        if let Some(local) = self.bx().lookup(&id.name) {
            let want = self.bx().locals[local].ty.clone();
            if !has_dyn_mismatch_only(&want, &ty) {
                self.error(
                    id.span,
                    format!(
                        "`{}` holds `{want}`, but this part of the pair is `{ty}`",
                        id.name
                    ),
                );
            }
            self.bx().defined.insert(local);
            return Some(local);
        }
        if self.state_index.contains_key(&id.name) || self.params.iter().any(|p| p.name == id.name)
        {
            self.error(
                id.span,
                format!("`{}` is not a local; unpack pairs into locals", id.name),
            )
            .hint = Some(format!(
                "unpack into a new name, then assign `{} = …`",
                id.name
            ));
            return None;
        }
        self.check_new_name(id);
        let local = self.bx().declare(&id.name, ty);
        self.bx().defined.insert(local);
        Some(local)
    }

    fn check_new_name(&mut self, id: &ast::Ident) {
        if BUILTINS.contains(&id.name.as_str()) {
            self.warn(
                id.span,
                format!("local `{}` shadows the built-in of that name", id.name),
            );
        }
    }

    fn expr_stmt(&mut self, e: &ast::Expr) -> Option<StmtKind> {
        if let ast::ExprKind::Call { func, args } = &e.kind {
            match func.name.as_str() {
                "send" => return self.send(args, e.span),
                "set" => return self.set_call(args, e.span),
                "delete" => return self.delete_call(args, e.span),
                "foreach" => return self.foreach(args, e.span),
                "set_rpc_header" => return self.set_header(args, e.span),
                "set_metadata" => return self.set_metadata(args, e.span),
                _ => {}
            }
        }
        let v = self.expr(e, None);
        if matches!(v.kind, ExprKind::StateRmw { .. }) {
            return Some(StmtKind::Eval(v));
        }
        if v.ty != Type::Dyn {
            self.warn(e.span, "this value is computed and then discarded")
                .hint = Some("assign it to a name, or remove the line".into());
        }
        None
    }

    fn arity(
        &mut self,
        name: &str,
        args: &[ast::Expr],
        n: std::ops::RangeInclusive<usize>,
        span: Span,
        usage: &str,
    ) -> bool {
        if n.contains(&args.len()) {
            return true;
        }
        self.error(
            span,
            format!(
                "`{name}` takes {} argument(s), found {}",
                describe_range(&n),
                args.len()
            ),
        )
        .hint = Some(format!("usage: {usage}"));
        false
    }

    // ---- send ----------------------------------------------------------------------

    fn send(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
        let out = self.send_checked(args, span);
        // A `send` to `Up`/`Down` ends the handler even when it is malformed: that is where
        // the author meant it to end, so "can end without `send`" would be a false follow-on.
        let ends_handler = matches!(
            args.get(1).map(|a| &a.kind),
            Some(ast::ExprKind::Name(n)) if matches!(n.as_str(), "Up" | "up" | "Down" | "down")
        );
        if out.is_none() && ends_handler && self.handler() != Handler::Init {
            self.bx().reachable = false;
        }
        out
    }

    fn send_checked(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
        if !self.arity(
            "send",
            args,
            2..=2,
            span,
            "send(rpc, Down), send(rpc, Up), send(err('msg'), Up), send(value, channel)",
        ) {
            return None;
        }
        let handler = self.handler();
        let target = &args[1];
        let dir = match &target.kind {
            ast::ExprKind::Name(n) if n == "Up" || n == "up" => Some(true),
            ast::ExprKind::Name(n) if n == "Down" || n == "down" => Some(false),
            _ => None,
        };
        let Some(up) = dir else {
            // A channel.
            let ast::ExprKind::Name(n) = &target.kind else {
                self.error(
                    target.span,
                    "the second argument of `send` is `Up`, `Down` or a channel",
                )
                .hint = Some("declare a channel in `state` as `log: Channel`".into());
                return None;
            };
            let Some(&channel) = self.channel_index.get(n) else {
                let candidates: Vec<&str> = self
                    .channels
                    .iter()
                    .map(String::as_str)
                    .chain(["Up", "Down"])
                    .collect();
                let hint = did_you_mean(n, candidates)
                    .unwrap_or_else(|| format!("declare it in `state` as `{n}: Channel`"));
                self.error(target.span, format!("`{n}` is not a channel"))
                    .hint = Some(hint);
                return None;
            };
            if let ast::ExprKind::Call { func, .. } = &args[0].kind
                && func.name == "err"
            {
                self.error(args[0].span, "an error cannot be written to a channel");
                return None;
            }
            let value = self.expr(&args[0], None);
            if matches!(value.ty, Type::Unit | Type::Channel) {
                self.error(args[0].span, "this has no value to record");
                return None;
            }
            return Some(StmtKind::Send(SendKind::Channel { channel, value }));
        };
        if handler == Handler::Init {
            self.error(span, "`init` cannot send messages").hint =
                Some("`init` only sets up state; messages are sent from `req` and `resp`".into());
            return None;
        }
        if self.bx().lambdas.iter().any(|l| l.kind == LambdaKind::Rmw) {
            self.error(span, "`send` inside `get(…, lambda)` is not allowed").hint = Some(
                "the read-modify-write must complete: return a value from the lambda and send after it".into(),
            );
            return None;
        }
        let kind = if let ast::ExprKind::Call { func, args: eargs } = &args[0].kind
            && func.name == "err"
        {
            if !up {
                self.error(target.span, "an error travels up, not down")
                    .hint = Some("write `send(err('…'), Up)`".into());
                return None;
            }
            let (code, message) = self.err_call(eargs, args[0].span)?;
            SendKind::Reject { code, message }
        } else {
            let m = self.expr(&args[0], None);
            match (handler, up, &m.ty) {
                (_, _, Type::Dyn) => {
                    if up {
                        SendKind::Up(m)
                    } else {
                        SendKind::Down(m)
                    }
                }
                (Handler::Req, false, Type::Request) => SendKind::Down(m),
                (Handler::Req, true, Type::Response) => SendKind::Up(m),
                (Handler::Req, true, Type::Request) => {
                    self.error(span, "a request cannot travel up").hint = Some(
                        "forward it with `send(rpc, Down)`, reject it with `send(err('…'), Up)`, or answer with a stored response".into(),
                    );
                    return None;
                }
                (Handler::Resp, true, Type::Response) => SendKind::Up(m),
                (Handler::Resp, false, _) => {
                    self.error(
                        target.span,
                        "`send(…, Down)` in `resp`: responses travel up",
                    )
                    .hint = Some("write `send(rpc, Up)`".into());
                    return None;
                }
                (Handler::Req, false, Type::Response) => {
                    self.error(span, "a response cannot travel down").hint = Some(
                        "a locally produced response goes back to the client: `send(resp, Up)`"
                            .into(),
                    );
                    return None;
                }
                (Handler::Resp, true, Type::Request) => {
                    self.error(span, "a request cannot be sent from `resp`")
                        .hint = Some("write `send(rpc, Up)` to forward the response".into());
                    return None;
                }
                (_, _, other) => {
                    self.error(
                        args[0].span,
                        format!("only messages and errors can be sent up or down, found `{other}`"),
                    );
                    return None;
                }
            }
        };
        self.bx().reachable = false;
        Some(StmtKind::Send(kind))
    }

    fn err_call(&mut self, args: &[ast::Expr], span: Span) -> Option<(Code, Expr)> {
        if !self.arity(
            "err",
            args,
            1..=2,
            span,
            "err('message') or err('message', PERMISSION_DENIED)",
        ) {
            return None;
        }
        let message = match &args[0].kind {
            // AppNet's `err(NAME)` with an undeclared name meant the text itself.
            ast::ExprKind::Name(n) if self.name_is_unknown(n) => {
                const_expr(Value::Str(n.clone()), Type::Str, args[0].span)
            }
            _ => {
                let m = self.expr(&args[0], Some(&Type::Str));
                self.coerce(m, &Type::Str, "the error message")
            }
        };
        let code = match args.get(1) {
            None => Code::Aborted,
            Some(c) => match &c.kind {
                ast::ExprKind::Name(n) => match n.parse::<Code>() {
                    Ok(Code::Ok) => {
                        self.error(c.span, "`OK` is not an error code");
                        return None;
                    }
                    Ok(code) => code,
                    Err(_) => {
                        let hint = did_you_mean(n, Code::all_names()).unwrap_or_else(|| {
                            "use a gRPC status name such as PERMISSION_DENIED".into()
                        });
                        self.error(c.span, format!("unknown status code `{n}`"))
                            .hint = Some(hint);
                        return None;
                    }
                },
                _ => {
                    self.error(c.span, "the status code is a gRPC status name")
                        .hint = Some("e.g. `err('denied', PERMISSION_DENIED)`".into());
                    return None;
                }
            },
        };
        Some((code, message))
    }

    fn name_is_unknown(&self, n: &str) -> bool {
        let local = self.body.as_ref().and_then(|b| b.lookup(n)).is_some();
        !local
            && !self.state_index.contains_key(n)
            && !self.channel_index.contains_key(n)
            && !self.params.iter().any(|p| p.name == n)
    }

    // ---- state and message writes ------------------------------------------------

    fn set_call(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
        if !self.arity(
            "set",
            args,
            2..=3,
            span,
            "set(map, key, value), set(rpc, 'field', value)",
        ) {
            return None;
        }
        let target = &args[0];
        if let ast::ExprKind::Name(n) = &target.kind
            && self.body.as_ref().and_then(|b| b.lookup(n)).is_none()
            && let Some(&var) = self.state_index.get(n)
        {
            let sv = self.state[var].clone();
            if args.len() == 2 {
                if sv.kind != CellKind::Scalar {
                    self.error(span, format!("`set` on `{n}` needs a key and a value"))
                        .hint = Some(format!("write `set({n}, key, value)`"));
                    return None;
                }
                let v = self.expr(&args[1], Some(&sv.ty));
                let v = self.coerce(v, &sv.ty, "the value");
                return Some(StmtKind::StateStore { var, value: v });
            }
            if sv.kind == CellKind::Scalar {
                self.error(
                    span,
                    format!("`{n}` is a scalar; assign it with `{n} = value`"),
                );
                return None;
            }
            let kt = sv.key_type();
            let key = self.expr(&args[1], Some(&kt));
            let key = self.coerce(key, &kt, "the key");
            let vt = sv.value_type().clone();
            let value = self.expr(&args[2], Some(&vt));
            let value = self.coerce(value, &vt, "the value");
            return Some(StmtKind::StateSet { var, key, value });
        }
        if args.len() != 3 {
            self.error(span, "`set` takes a target, a key or field, and a value");
            return None;
        }
        let t = self.expr(target, None);
        let ExprKind::Local(local) = t.kind else {
            if t.ty != Type::Dyn {
                self.error(
                    target.span,
                    "`set` writes to a state variable, a local, or the message",
                )
                .hint = Some("assign the value to a local first".into());
            }
            return None;
        };
        match t.ty.clone() {
            Type::Request | Type::Response => {
                let field = self.field_ref(&t.ty, &args[1], false)?;
                let FieldRef::Path(field) = field else {
                    self.error(args[1].span, "`meta_status` and `meta_code` are read-only");
                    return None;
                };
                let v = self.expr(&args[2], Some(&field.ty));
                let v = self.coerce(v, &field.ty.clone(), &format!("field `{}`", field.text));
                Some(StmtKind::SetField {
                    msg: local,
                    field,
                    value: v,
                })
            }
            Type::Vec(elem) => {
                let key = self.expr(&args[1], Some(&Type::Int));
                let key = self.coerce(key, &Type::Int, "the index");
                let value = self.expr(&args[2], Some(&elem));
                let value = self.coerce(value, &elem, "the element");
                self.bx().defined.insert(local);
                Some(StmtKind::LocalSet { local, key, value })
            }
            Type::Map(k, v) => {
                let key = self.expr(&args[1], Some(&k));
                let key = self.coerce(key, &k, "the key");
                let value = self.expr(&args[2], Some(&v));
                let value = self.coerce(value, &v, "the value");
                Some(StmtKind::LocalSet { local, key, value })
            }
            Type::Dyn => None,
            other => {
                self.error(
                    target.span,
                    format!("`set` needs a map, a vector or a message, found `{other}`"),
                );
                None
            }
        }
    }

    fn delete_call(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
        if !self.arity("delete", args, 2..=2, span, "delete(map, key)") {
            return None;
        }
        if let ast::ExprKind::Name(n) = &args[0].kind
            && self.body.as_ref().and_then(|b| b.lookup(n)).is_none()
            && let Some(&var) = self.state_index.get(n)
        {
            let sv = self.state[var].clone();
            if sv.kind == CellKind::Scalar {
                self.error(
                    args[0].span,
                    format!("`{n}` is a scalar; only map and vector entries are deleted"),
                );
                return None;
            }
            let kt = sv.key_type();
            let key = self.expr(&args[1], Some(&kt));
            let key = self.coerce(key, &kt, "the key");
            return Some(StmtKind::StateDelete { var, key });
        }
        let t = self.expr(&args[0], None);
        let ExprKind::Local(local) = t.kind else {
            if t.ty != Type::Dyn {
                self.error(
                    args[0].span,
                    "`delete` needs a map or vector (in state or a local)",
                );
            }
            return None;
        };
        let kt = match &t.ty {
            Type::Map(k, _) => (**k).clone(),
            Type::Vec(_) => Type::Int,
            Type::Dyn => return None,
            other => {
                self.error(
                    args[0].span,
                    format!("`delete` needs a map or vector, found `{other}`"),
                );
                return None;
            }
        };
        let key = self.expr(&args[1], Some(&kt));
        let key = self.coerce(key, &kt, "the key");
        Some(StmtKind::LocalDelete { local, key })
    }

    fn set_header(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
        if !self.arity(
            "set_rpc_header",
            args,
            3..=3,
            span,
            "set_rpc_header(rpc, 'name', value)",
        ) {
            return None;
        }
        let m = self.expr(&args[0], None);
        let ExprKind::Local(msg) = m.kind else {
            self.error(
                args[0].span,
                "`set_rpc_header` writes the message of this handler",
            );
            return None;
        };
        if !m.ty.is_message() && m.ty != Type::Dyn {
            self.error(
                args[0].span,
                format!("expected a message, found `{}`", m.ty),
            );
            return None;
        }
        let name = self.expr(&args[1], Some(&Type::Str));
        let name = self.coerce(name, &Type::Str, "the header name");
        let value = self.expr(&args[2], Some(&Type::Str));
        let value = self.coerce(value, &Type::Str, "a header value");
        Some(StmtKind::SetHeader { msg, name, value })
    }

    fn metadata_key(&mut self, arg: &ast::Expr) -> Option<String> {
        match &arg.kind {
            ast::ExprKind::Lit(Lit::Str(s)) => Some(s.clone()),
            _ => {
                self.error(arg.span, "the metadata key must be a string literal")
                    .hint = Some("e.g. `set_metadata('start', current_time())`".into());
                None
            }
        }
    }

    fn set_metadata(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
        if !self.arity(
            "set_metadata",
            args,
            2..=2,
            span,
            "set_metadata('key', value)",
        ) {
            return None;
        }
        if self.handler() == Handler::Init {
            self.error(
                span,
                "`init` has no RPC; metadata lives from request to response",
            );
            return None;
        }
        let key = self.metadata_key(&args[0])?;
        let existing = self.metadata.iter().position(|m| m.0 == key);
        let want = existing.map(|i| self.metadata[i].1.clone());
        let v = self.expr(&args[1], want.as_ref());
        let v = match &want {
            Some(t) => self.coerce(v, t, &format!("metadata `{key}`")),
            None => v,
        };
        if matches!(v.ty, Type::Unit | Type::Channel) {
            self.error(args[1].span, "this has no value to store");
            return None;
        }
        let id = match existing {
            Some(i) => i,
            None => {
                self.metadata.push((key, v.ty.clone(), span));
                self.metadata.len() - 1
            }
        };
        Some(StmtKind::SetMetadata { key: id, value: v })
    }

    // ---- control flow --------------------------------------------------------------

    fn match_stmt(&mut self, scrutinee: &ast::Expr, arms: &[ast::Arm]) -> StmtKind {
        let s = self.expr(scrutinee, None);
        if !matches!(s.ty, Type::Option(_) | Type::Dyn)
            && arms.iter().any(|a| {
                matches!(
                    a.pattern.kind,
                    ast::PatternKind::Some(_) | ast::PatternKind::None
                )
            })
        {
            self.error(
                scrutinee.span,
                format!(
                    "`Some`/`None` patterns need an Option, but this is `{}`",
                    s.ty
                ),
            );
        }
        if matches!(s.ty, Type::Channel | Type::Unit) {
            self.error(scrutinee.span, format!("cannot match on `{}`", s.ty));
        }
        self.match_checked(s, arms)
    }

    fn match_checked(&mut self, s: Expr, arms: &[ast::Arm]) -> StmtKind {
        let constant = match &s.kind {
            // A `Dyn` constant is the stand-in for a scrutinee that failed to check: folding on
            // it would mark every arm dead and hide the errors inside them.
            ExprKind::Const(v) if s.ty != Type::Dyn => Some(v.clone()),
            _ => None,
        };
        let before = self.bx().defined.clone();
        let was_reachable = self.bx().reachable;
        let mut after: Option<HashSet<LocalId>> = None;
        let mut out_arms = Vec::new();
        let mut exhaustive = false;
        let mut seen_true = false;
        let mut seen_false = false;
        let mut seen_some = false;
        let mut seen_none = false;
        let mut taken_found = false;
        for arm in arms {
            if exhaustive {
                self.warn(
                    arm.pattern.span,
                    "this arm is never reached: an earlier arm matches everything",
                );
            }
            let (pattern, binder) = self.pattern(&arm.pattern, &s.ty);
            match &pattern {
                Pattern::Wildcard => exhaustive = true,
                Pattern::Lit(Value::Bool(true)) => seen_true = true,
                Pattern::Lit(Value::Bool(false)) => seen_false = true,
                Pattern::Some(_) => seen_some = true,
                Pattern::None => seen_none = true,
                _ => {}
            }
            if (seen_true && seen_false) || (seen_some && seen_none) {
                exhaustive = true;
            }
            let taken = match &constant {
                Some(c) if !taken_found => {
                    let t = pattern_matches(&pattern, c);
                    taken_found |= t;
                    t
                }
                Some(_) => false,
                None => true,
            };
            self.bx().defined = before.clone();
            self.bx().reachable = was_reachable;
            self.bx().push_scope(false);
            if let (Some(b), Some(local)) = (&binder, pattern_binder(&pattern))
                && let Some(scope) = self.bx().scopes.last_mut()
            {
                scope.names.insert(b.clone(), local);
                self.bx().defined.insert(local);
            }
            if !taken {
                self.dead += 1;
            }
            let body = self.block(&arm.body);
            if !taken {
                self.dead -= 1;
            }
            self.bx().pop_scope();
            if taken {
                if self.bx().reachable {
                    let d = self.bx().defined.clone();
                    after = Some(match after {
                        None => d,
                        Some(a) => a.intersection(&d).copied().collect(),
                    });
                }
                out_arms.push(Arm { pattern, body });
            }
        }
        let falls_through = match &constant {
            Some(_) => !taken_found,
            None => !exhaustive,
        };
        if falls_through {
            after = Some(match after {
                None => before.clone(),
                Some(a) => a.intersection(&before).copied().collect(),
            });
        }
        self.bx().reachable = was_reachable && after.is_some();
        self.bx().defined = after.unwrap_or(before);
        StmtKind::Match {
            scrutinee: s,
            arms: out_arms,
        }
    }

    fn pattern(&mut self, p: &ast::Pattern, scrutinee: &Type) -> (Pattern, Option<String>) {
        match &p.kind {
            ast::PatternKind::Wildcard => (Pattern::Wildcard, None),
            ast::PatternKind::None => (Pattern::None, None),
            ast::PatternKind::Some(binding) => {
                let inner = match scrutinee {
                    Type::Option(t) => (**t).clone(),
                    _ => Type::Dyn,
                };
                match binding {
                    Some(b) => {
                        let local = self.bx().declare_hidden(&b.name, inner);
                        (Pattern::Some(Some(local)), Some(b.name.clone()))
                    }
                    None => (Pattern::Some(None), None),
                }
            }
            ast::PatternKind::Lit(lit) => {
                let e = self.lit(lit, Some(scrutinee), p.span);
                let e = self.coerce(e, scrutinee, "the pattern");
                match e.kind {
                    ExprKind::Const(v) => (Pattern::Lit(v), None),
                    _ => (Pattern::Wildcard, None),
                }
            }
        }
    }

    fn if_stmt(
        &mut self,
        branches: &[(ast::Expr, ast::Block)],
        otherwise: Option<&ast::Block>,
        span: Span,
    ) -> StmtKind {
        // `if a: x elif b: y else: z` is `match a: true => x; false => match b: …`.
        let Some(((cond, body), rest)) = branches.split_first() else {
            return StmtKind::Eval(err_expr(span));
        };
        let tpat = ast::Pattern {
            kind: ast::PatternKind::Lit(Lit::Bool(true)),
            span: cond.span,
        };
        let fpat = ast::Pattern {
            kind: ast::PatternKind::Lit(Lit::Bool(false)),
            span: cond.span,
        };
        let mut arms = vec![ast::Arm {
            pattern: tpat,
            body: body.clone(),
            span: body.span,
        }];
        if !rest.is_empty() {
            let nested = ast::Stmt {
                kind: ast::StmtKind::If {
                    branches: rest.to_vec(),
                    otherwise: otherwise.cloned(),
                },
                span: rest[0].0.span,
            };
            arms.push(ast::Arm {
                pattern: fpat,
                body: ast::Block {
                    stmts: vec![nested],
                    span: rest[0].1.span,
                },
                span,
            });
        } else if let Some(o) = otherwise {
            arms.push(ast::Arm {
                pattern: fpat,
                body: o.clone(),
                span: o.span,
            });
        }
        let c = self.expr(cond, Some(&Type::Bool));
        let c = self.implicit_unwrap(c);
        if c.ty != Type::Bool && c.ty != Type::Dyn {
            self.error(
                cond.span,
                format!("an `if` condition must be a bool, found `{}`", c.ty),
            );
            return StmtKind::Eval(err_expr(span));
        }
        self.match_checked(c, &arms)
    }

    fn foreach(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
        if !self.arity(
            "foreach",
            args,
            2..=2,
            span,
            "foreach(collection, lambda(x): …)",
        ) {
            return None;
        }
        let ast::ExprKind::Lambda(lambda) = &args[1].kind else {
            self.error(args[1].span, "the second argument of `foreach` is a lambda")
                .hint = Some("write `foreach(v, lambda(x): …)`".into());
            return None;
        };
        let (coll, elem_ty) = if let ast::ExprKind::Name(n) = &args[0].kind
            && self.body.as_ref().and_then(|b| b.lookup(n)).is_none()
            && let Some(&var) = self.state_index.get(n)
        {
            let sv = &self.state[var];
            let t = match &sv.ty {
                Type::Vec(t) => ElemTy::One((**t).clone()),
                Type::Map(k, v) => ElemTy::Pair((**k).clone(), (**v).clone()),
                other => {
                    let msg = format!("`foreach` needs a vector or a map, but `{n}` is `{other}`");
                    self.error(args[0].span, msg);
                    return None;
                }
            };
            (Collection::State(var), t)
        } else {
            let c = self.expr(&args[0], None);
            let t = match &c.ty {
                Type::Vec(t) => ElemTy::One((**t).clone()),
                Type::Map(k, v) => ElemTy::Pair((**k).clone(), (**v).clone()),
                Type::Dyn => ElemTy::One(Type::Dyn),
                other => {
                    self.error(
                        args[0].span,
                        format!("`foreach` needs a vector or a map, found `{other}`"),
                    );
                    return None;
                }
            };
            (Collection::Value(c), t)
        };
        let binder_types: Vec<Type> = match (&elem_ty, lambda.params.len()) {
            (ElemTy::One(t), 1) => vec![t.clone()],
            (ElemTy::Pair(k, v), 1) => vec![Type::pair(k.clone(), v.clone())],
            (ElemTy::Pair(k, v), 2) => vec![k.clone(), v.clone()],
            // An untyped field (no schema) may be a map: `lambda(key, value)` is fine.
            (ElemTy::One(Type::Dyn), 2) => vec![Type::Dyn, Type::Dyn],
            (_, n) => {
                self.error(
                    lambda.span,
                    format!("this `foreach` lambda takes {n} parameter(s)"),
                )
                .hint = Some(
                    "vectors: `lambda(x)`; maps: `lambda(entry)` or `lambda(key, value)`".into(),
                );
                return None;
            }
        };
        let saved_defined = self.bx().defined.clone();
        let saved_reachable = self.bx().reachable;
        self.bx().push_scope(true);
        let mut ids = Vec::new();
        for (p, t) in lambda.params.iter().zip(binder_types) {
            let id = self.bx().declare_binder(&p.name, t);
            self.bx().defined.insert(id);
            ids.push(id);
        }
        self.bx().lambdas.push(LambdaCx {
            kind: LambdaKind::ForEach,
            returns: Vec::new(),
        });
        let body = self.block(&lambda.body);
        self.bx().lambdas.pop();
        self.bx().pop_scope();
        // The body may run zero times: nothing it assigns is definitely assigned after it.
        self.bx().defined = saved_defined;
        self.bx().reachable = saved_reachable;
        let binder = if ids.len() == 2 {
            Binder::Pair(ids[0], ids[1])
        } else {
            Binder::One(ids[0])
        };
        Some(StmtKind::ForEach { coll, binder, body })
    }

    // ---- expressions ---------------------------------------------------------------

    fn expr(&mut self, e: &ast::Expr, expected: Option<&Type>) -> Expr {
        let out = self.expr_inner(e, expected);
        fold(out)
    }

    fn lit(&mut self, lit: &Lit, expected: Option<&Type>, span: Span) -> Expr {
        match lit {
            Lit::Int(i) => {
                let i = *i;
                match expected {
                    Some(Type::Uint) if i >= 0 && i <= u64::MAX as i128 => {
                        const_expr(Value::Uint(i as u64), Type::Uint, span)
                    }
                    Some(Type::Float) => const_expr(Value::Float(i as f64), Type::Float, span),
                    _ => {
                        if let Ok(v) = i64::try_from(i) {
                            const_expr(Value::Int(v), Type::Int, span)
                        } else if let Ok(v) = u64::try_from(i) {
                            const_expr(Value::Uint(v), Type::Uint, span)
                        } else {
                            self.error(span, "integer literal out of range");
                            err_expr(span)
                        }
                    }
                }
            }
            Lit::Float(f) => const_expr(Value::Float(*f), Type::Float, span),
            Lit::Str(s) => const_expr(Value::Str(s.clone()), Type::Str, span),
            Lit::Bool(b) => const_expr(Value::Bool(*b), Type::Bool, span),
        }
    }

    fn expr_inner(&mut self, e: &ast::Expr, expected: Option<&Type>) -> Expr {
        let span = e.span;
        match &e.kind {
            ast::ExprKind::Error => err_expr(span),
            ast::ExprKind::Lit(l) => self.lit(l, expected, span),
            ast::ExprKind::Name(n) => self.name(n, expected, span),
            ast::ExprKind::Pair(a, b) => {
                let (ea, eb) = match expected {
                    Some(Type::Pair(x, y)) => (Some(&**x), Some(&**y)),
                    _ => (None, None),
                };
                let a = self.expr(a, ea);
                let a = match ea {
                    Some(t) => self.coerce(a, t, "the first element"),
                    None => a,
                };
                let b = self.expr(b, eb);
                let b = match eb {
                    Some(t) => self.coerce(b, t, "the second element"),
                    None => b,
                };
                let ty = Type::pair(a.ty.clone(), b.ty.clone());
                Expr {
                    kind: ExprKind::MakePair(Box::new(a), Box::new(b)),
                    ty,
                    span,
                }
            }
            ast::ExprKind::Unary { op, operand } => {
                let v = self.expr(operand, expected);
                match (op, &v.ty) {
                    (UnOp::Not, Type::Bool | Type::Dyn) => {}
                    (UnOp::Neg, Type::Int | Type::Float | Type::Dyn) => {}
                    (UnOp::Not, t) => {
                        self.error(operand.span, format!("`not` needs a bool, found `{t}`"));
                        return err_expr(span);
                    }
                    (UnOp::Neg, t) => {
                        let hint =
                            (*t == Type::Uint).then(|| "convert with `int(x)` first".to_string());
                        self.error(
                            operand.span,
                            format!("`-` needs an int or a float, found `{t}`"),
                        )
                        .hint = hint;
                        return err_expr(span);
                    }
                }
                let ty = if *op == UnOp::Not {
                    Type::Bool
                } else {
                    v.ty.clone()
                };
                Expr {
                    kind: ExprKind::Unary {
                        op: *op,
                        operand: Box::new(v),
                    },
                    ty,
                    span,
                }
            }
            ast::ExprKind::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, expected, span),
            ast::ExprKind::Lambda(_) => {
                self.error(
                    span,
                    "a lambda can only be passed to `foreach` or `get(map, key, lambda)`",
                );
                err_expr(span)
            }
            ast::ExprKind::Call { func, args } => self.call(func, args, expected, span),
        }
    }

    fn name(&mut self, n: &str, expected: Option<&Type>, span: Span) -> Expr {
        if let Some(local) = self.body.as_ref().and_then(|b| b.lookup(n)) {
            let bx = self.body.as_ref().expect("body");
            let ty = bx.locals[local].ty.clone();
            if !bx.defined.contains(&local) && bx.reachable {
                self.error(span, format!("`{n}` may be unassigned here"))
                    .hint = Some(format!(
                    "assign `{n}` before the `match`/`if`, or in every arm that continues here"
                ));
            }
            return Expr {
                kind: ExprKind::Local(local),
                ty,
                span,
            };
        }
        if let Some(p) = self
            .params
            .iter()
            .find(|p| p.name == n && p.state.is_none())
        {
            let ty = p.ty.clone();
            return match &p.value {
                Some(v) => const_expr(v.clone(), ty, span),
                None => Expr {
                    kind: ExprKind::Param(n.to_owned()),
                    ty,
                    span,
                },
            };
        }
        if let Some(&var) = self.state_index.get(n) {
            let sv = &self.state[var];
            // Scalars, and vectors (always local, so bounded by the instance), read whole.
            if sv.kind != CellKind::Map {
                return Expr {
                    kind: ExprKind::StateLoad(var),
                    ty: sv.ty.clone(),
                    span,
                };
            }
            self.error(
                span,
                format!("`{n}` is a map in state and cannot be used as a value"),
            )
            .hint = Some(format!(
                "read entries with `get({n}, key)`, count them with `size({n})`, or iterate with `foreach`"
            ));
            return err_expr(span);
        }
        if self.channel_index.contains_key(n) {
            self.error(
                span,
                format!("`{n}` is a channel; it is only written, with `send(value, {n})`"),
            );
            return err_expr(span);
        }
        match n {
            "inf" => return const_expr(Value::Int(i64::MAX), Type::Int, span),
            "inf_f" => return const_expr(Value::Float(f64::INFINITY), Type::Float, span),
            "None" => {
                if let Some(t @ Type::Option(_)) = expected {
                    return const_expr(Value::none(), t.clone(), span);
                }
                self.error(span, "`None` needs a known Option type here")
                    .hint = Some(
                    "`None` is a pattern in `match`; as a value it needs a typed context".into(),
                );
                return err_expr(span);
            }
            "Up" | "Down" | "up" | "down" => {
                self.error(
                    span,
                    format!("`{n}` is only meaningful as the second argument of `send`"),
                );
                return err_expr(span);
            }
            _ => {}
        }
        if n.parse::<Code>().is_ok() {
            self.error(
                span,
                format!("status code `{n}` is only meaningful in `err(message, {n})`"),
            );
            return err_expr(span);
        }
        let mut candidates: Vec<String> = self.state_index.keys().cloned().collect();
        candidates.extend(self.params.iter().map(|p| p.name.clone()));
        if let Some(b) = &self.body {
            candidates.extend(b.scopes.iter().flat_map(|s| s.names.keys().cloned()));
        }
        let hint = did_you_mean(n, candidates.iter().map(String::as_str));
        let d = self.error(span, format!("unknown name `{n}`"));
        d.hint = hint.or_else(|| {
            Some("locals are created by assignment; state is declared in `state:`".into())
        });
        err_expr(span)
    }

    fn binary(
        &mut self,
        op: BinOp,
        lhs: &ast::Expr,
        rhs: &ast::Expr,
        expected: Option<&Type>,
        span: Span,
    ) -> Expr {
        let op_desc = op.symbol();
        match op {
            BinOp::And | BinOp::Or => {
                let l = self.expr(lhs, Some(&Type::Bool));
                let r = self.expr(rhs, Some(&Type::Bool));
                for (side, x) in [(lhs, &l), (rhs, &r)] {
                    if x.ty != Type::Bool && x.ty != Type::Dyn {
                        self.error(
                            side.span,
                            format!("`{op_desc}` needs bools, found `{}`", x.ty),
                        );
                    }
                }
                Expr {
                    kind: ExprKind::Binary {
                        op,
                        lhs: Box::new(l),
                        rhs: Box::new(r),
                    },
                    ty: Type::Bool,
                    span,
                }
            }
            _ => {
                let hint_ty = if op.is_comparison() { None } else { expected };
                let l = self.expr(lhs, hint_ty);
                let r = self.expr(rhs, Some(&l.ty).filter(|t| **t != Type::Dyn).or(hint_ty));
                let (l, r, ty) = match self.unify(l, r, op, span) {
                    Some(x) => x,
                    None => return err_expr(span),
                };
                let ok = match op {
                    BinOp::Eq | BinOp::Ne => ty.is_comparable(),
                    BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                        ty.is_numeric() || matches!(ty, Type::Str | Type::Bytes | Type::Instant)
                    }
                    BinOp::Add => ty.is_numeric() || matches!(ty, Type::Str | Type::Bytes),
                    _ => ty.is_numeric(),
                };
                if !ok {
                    let hint = match (op, &ty) {
                        (BinOp::Sub, Type::Instant) => Some(
                            "use `time_diff(a, b)` for the seconds between two instants"
                                .to_string(),
                        ),
                        (_, Type::Option(_)) => {
                            Some("match on `Some(x)` / `None` first".to_string())
                        }
                        _ => None,
                    };
                    self.error(span, format!("`{op_desc}` is not defined for `{ty}`"))
                        .hint = hint;
                    return err_expr(span);
                }
                let result = if op.is_comparison() { Type::Bool } else { ty };
                Expr {
                    kind: ExprKind::Binary {
                        op,
                        lhs: Box::new(l),
                        rhs: Box::new(r),
                    },
                    ty: result,
                    span,
                }
            }
        }
    }

    /// Brings both operands to one type: int/uint widen to float, an integer literal takes
    /// the other side's integer type, an Option is unwrapped (with a warning).
    fn unify(&mut self, l: Expr, r: Expr, op: BinOp, span: Span) -> Option<(Expr, Expr, Type)> {
        let (l, r) = (self.implicit_unwrap(l), self.implicit_unwrap(r));
        if l.ty == r.ty {
            let t = l.ty.clone();
            return Some((l, r, t));
        }
        match (&l.ty, &r.ty) {
            (Type::Dyn, t) | (t, Type::Dyn) => {
                // An integer literal says nothing about an untyped field (it may be a uint or
                // a float): `get(rpc, 'count') + 1` stays untyped rather than becoming an int.
                let literal = |e: &Expr| matches!(e.kind, ExprKind::Const(Value::Int(_)));
                let t = if *t == Type::Int && (literal(&l) || literal(&r)) {
                    Type::Dyn
                } else {
                    t.clone()
                };
                Some((l, r, t))
            }
            (Type::Float, Type::Int | Type::Uint) => {
                let r = self.coerce(r, &Type::Float, "");
                Some((l, r, Type::Float))
            }
            (Type::Int | Type::Uint, Type::Float) => {
                let l = self.coerce(l, &Type::Float, "");
                Some((l, r, Type::Float))
            }
            (Type::Uint, Type::Int) if is_nonneg_int_const(&r) => {
                let r = self.coerce(r, &Type::Uint, "");
                Some((l, r, Type::Uint))
            }
            (Type::Int, Type::Uint) if is_nonneg_int_const(&l) => {
                let l = self.coerce(l, &Type::Uint, "");
                Some((l, r, Type::Uint))
            }
            // Untyped fields nested in pairs or options (no schema): keep the typed side.
            (a, b) if has_dyn_mismatch_only(a, b) => {
                let t = if a.has_dyn() { b.clone() } else { a.clone() };
                Some((l, r, t))
            }
            (a, b) => {
                let hint = match (a, b) {
                    (Type::Int, Type::Uint) | (Type::Uint, Type::Int) => {
                        Some("convert one side with `int(x)` or `uint(x)`".to_string())
                    }
                    (Type::Str, t) | (t, Type::Str) if t.is_numeric() => {
                        Some("convert the number with `str(x)`, or parse the string with `parse_int`/`parse_float`".to_string())
                    }
                    _ => None,
                };
                self.error(
                    span,
                    format!("`{}` on mismatched types `{a}` and `{b}`", op.symbol()),
                )
                .hint = hint;
                None
            }
        }
    }

    fn implicit_unwrap(&mut self, e: Expr) -> Expr {
        if let Type::Option(inner) = &e.ty {
            let inner = (**inner).clone();
            self.warn(
                e.span,
                "an Option is used as a value: a missing entry rejects the RPC with INTERNAL",
            )
            .hint = Some("match on `Some(v)` / `None` to handle the missing case".into());
            return Expr {
                span: e.span,
                ty: inner,
                kind: ExprKind::Unwrap(Box::new(e)),
            };
        }
        e
    }

    /// Converts `e` to `to` where the language allows it, or reports a type error.
    fn coerce(&mut self, e: Expr, to: &Type, what: &str) -> Expr {
        if e.ty == *to || *to == Type::Dyn {
            return e;
        }
        if e.ty == Type::Dyn {
            return Expr {
                ty: to.clone(),
                ..e
            };
        }
        if let (Type::Uint, ExprKind::Const(Value::Int(i))) = (to, &e.kind)
            && *i >= 0
        {
            return const_expr(Value::Uint(*i as u64), Type::Uint, e.span);
        }
        match (&e.ty, to) {
            (Type::Int | Type::Uint, Type::Float) => {
                let span = e.span;
                return fold(Expr {
                    kind: ExprKind::Convert {
                        operand: Box::new(e),
                    },
                    ty: Type::Float,
                    span,
                });
            }
            (Type::Option(inner), _) if self.type_accepts(inner, to) => {
                let e = self.implicit_unwrap(e);
                return self.coerce(e, to, what);
            }
            (Type::Pair(..), Type::Pair(ta, tb)) => {
                if let ExprKind::MakePair(a, b) = e.kind {
                    let a = self.coerce(*a, ta, what);
                    let b = self.coerce(*b, tb, what);
                    let ty = Type::pair(a.ty.clone(), b.ty.clone());
                    return Expr {
                        kind: ExprKind::MakePair(Box::new(a), Box::new(b)),
                        ty,
                        span: e.span,
                    };
                }
            }
            _ => {}
        }
        if has_dyn_mismatch_only(&e.ty, to) {
            return Expr {
                ty: to.clone(),
                ..e
            };
        }
        let hint = match (&e.ty, to) {
            (Type::Int, Type::Uint) | (Type::Uint, Type::Int) => {
                Some("convert with `int(x)` or `uint(x)`".to_string())
            }
            (t, Type::Str) if t.is_numeric() || *t == Type::Bool => {
                Some("convert with `str(x)`".to_string())
            }
            (Type::Float, Type::Int) => {
                Some("convert with `int(x)` (truncates toward zero)".to_string())
            }
            (Type::Str, Type::Int) => {
                Some("parse with `parse_int(s)`, which gives an Option".to_string())
            }
            (Type::Str, Type::Float) => {
                Some("parse with `parse_float(s)`, which gives an Option".to_string())
            }
            _ => None,
        };
        let what = if what.is_empty() {
            "the operand".to_string()
        } else {
            what.to_string()
        };
        self.error(
            e.span,
            format!("type mismatch: {what} must be `{to}`, found `{}`", e.ty),
        )
        .hint = hint;
        err_expr(e.span)
    }

    fn type_accepts(&self, from: &Type, to: &Type) -> bool {
        from == to
            || matches!((from, to), (Type::Int | Type::Uint, Type::Float))
            || *from == Type::Dyn
    }

    // ---- calls ---------------------------------------------------------------------

    fn call(
        &mut self,
        func: &ast::Ident,
        args: &[ast::Expr],
        expected: Option<&Type>,
        span: Span,
    ) -> Expr {
        let name = func.name.as_str();
        if self.body.as_ref().and_then(|b| b.lookup(name)).is_some() {
            self.error(func.span, format!("`{name}` is a local, not a function"));
            return err_expr(span);
        }
        match name {
            "send" | "set" | "delete" | "foreach" | "set_rpc_header" | "set_metadata" => {
                self.error(span, format!("`{name}(…)` is a statement and has no value"))
                    .hint = Some(format!("put `{name}(…)` on its own line"));
                err_expr(span)
            }
            "err" => {
                self.error(span, "`err(…)` is only meaningful as `send(err(…), Up)`");
                err_expr(span)
            }
            "get" => self.get_call(args, span),
            "size" => self.size_call(args, span),
            "byte_size" => self.byte_size_call(args, span),
            "get_rpc_header" => {
                if !self.arity(name, args, 2..=2, span, "get_rpc_header(rpc, 'name')") {
                    return err_expr(span);
                }
                let m = self.expr(&args[0], None);
                if !m.ty.is_message() && m.ty != Type::Dyn {
                    self.error(
                        args[0].span,
                        format!("expected a message, found `{}`", m.ty),
                    );
                    return err_expr(span);
                }
                let n = self.expr(&args[1], Some(&Type::Str));
                let n = self.coerce(n, &Type::Str, "the header name");
                Expr {
                    kind: ExprKind::Header {
                        msg: Box::new(m),
                        name: Box::new(n),
                    },
                    ty: Type::Str,
                    span,
                }
            }
            "get_metadata" => {
                if !self.arity(name, args, 1..=1, span, "get_metadata('key')") {
                    return err_expr(span);
                }
                let Some(key) = self.metadata_key(&args[0]) else {
                    return err_expr(span);
                };
                if self.handler() == Handler::Init {
                    self.error(
                        span,
                        "`init` has no RPC; metadata lives from request to response",
                    );
                    return err_expr(span);
                }
                match self.metadata.iter().position(|m| m.0 == key) {
                    Some(i) => {
                        let ty = Type::option(self.metadata[i].1.clone());
                        Expr {
                            kind: ExprKind::Metadata(i),
                            ty,
                            span,
                        }
                    }
                    None => {
                        self.error(
                            args[0].span,
                            format!("metadata `{key}` is never set before this point"),
                        )
                        .hint = Some(format!(
                            "set it in `req` with `set_metadata('{key}', value)`"
                        ));
                        err_expr(span)
                    }
                }
            }
            "rpc_id" | "method" | "src" | "dst" | "current_time" => {
                if !self.arity(name, args, 0..=0, span, &format!("{name}()")) {
                    return err_expr(span);
                }
                if self.handler() == Handler::Init && name != "current_time" {
                    self.error(
                        span,
                        format!("`{name}()` describes an RPC; `init` has none"),
                    );
                    return err_expr(span);
                }
                let (b, ty) = match name {
                    "rpc_id" => (Builtin::RpcId, Type::Uint),
                    "method" => (Builtin::Method, Type::Str),
                    "src" => (Builtin::Src, Type::Str),
                    "dst" => (Builtin::Dst, Type::Str),
                    _ => (Builtin::CurrentTime, Type::Instant),
                };
                Expr {
                    kind: ExprKind::Call {
                        builtin: b,
                        args: vec![],
                    },
                    ty,
                    span,
                }
            }
            "randomf" => self.typed_call(
                Builtin::RandomF,
                args,
                &[Type::Float, Type::Float],
                Type::Float,
                span,
                "randomf(lo, hi)",
            ),
            "randomi" => self.typed_call(
                Builtin::RandomI,
                args,
                &[Type::Int, Type::Int],
                Type::Int,
                span,
                "randomi(lo, hi)",
            ),
            "time_diff" => self.typed_call(
                Builtin::TimeDiff,
                args,
                &[Type::Instant, Type::Instant],
                Type::Float,
                span,
                "time_diff(later, earlier)",
            ),
            "hash" => {
                if !self.arity(name, args, 1..=1, span, "hash(value)") {
                    return err_expr(span);
                }
                let v = self.expr(&args[0], None);
                let v = self.implicit_unwrap(v);
                if !v.ty.is_comparable() {
                    self.error(args[0].span, format!("`{}` cannot be hashed", v.ty));
                }
                Expr {
                    kind: ExprKind::Call {
                        builtin: Builtin::Hash,
                        args: vec![v],
                    },
                    ty: Type::Int,
                    span,
                }
            }
            "min" | "max" => {
                if !self.arity(name, args, 2..=2, span, &format!("{name}(a, b)")) {
                    return err_expr(span);
                }
                let a = self.expr(&args[0], expected);
                let b = self.expr(
                    &args[1],
                    Some(&a.ty).filter(|t| **t != Type::Dyn).or(expected),
                );
                let Some((a, b, ty)) = self.unify(a, b, BinOp::Lt, span) else {
                    return err_expr(span);
                };
                if !ty.is_numeric() && ty != Type::Instant {
                    self.error(
                        span,
                        format!("`{name}` needs numbers or instants, found `{ty}`"),
                    );
                    return err_expr(span);
                }
                let builtin = if name == "min" {
                    Builtin::Min
                } else {
                    Builtin::Max
                };
                Expr {
                    kind: ExprKind::Call {
                        builtin,
                        args: vec![a, b],
                    },
                    ty,
                    span,
                }
            }
            "abs" => {
                if !self.arity(name, args, 1..=1, span, "abs(x)") {
                    return err_expr(span);
                }
                let v = self.expr(&args[0], expected);
                let v = self.implicit_unwrap(v);
                if !matches!(v.ty, Type::Int | Type::Float | Type::Dyn) {
                    self.error(
                        args[0].span,
                        format!("`abs` needs an int or a float, found `{}`", v.ty),
                    );
                    return err_expr(span);
                }
                let ty = v.ty.clone();
                Expr {
                    kind: ExprKind::Call {
                        builtin: Builtin::Abs,
                        args: vec![v],
                    },
                    ty,
                    span,
                }
            }
            "encrypt" | "decrypt" | "compress" | "decompress" => {
                let keyed = name == "encrypt" || name == "decrypt";
                let n = if keyed { 2..=2 } else { 1..=1 };
                let usage = if keyed {
                    format!("{name}(value, key)")
                } else {
                    format!("{name}(value)")
                };
                if !self.arity(name, args, n, span, &usage) {
                    return err_expr(span);
                }
                let v = self.expr(&args[0], None);
                let v = self.implicit_unwrap(v);
                if !matches!(v.ty, Type::Str | Type::Bytes | Type::Dyn) {
                    self.error(
                        args[0].span,
                        format!("`{name}` works on string or bytes, found `{}`", v.ty),
                    );
                    return err_expr(span);
                }
                let mut call_args = vec![v.clone()];
                if keyed {
                    let k = self.expr(&args[1], Some(&Type::Str));
                    call_args.push(self.coerce(k, &Type::Str, "the key"));
                }
                let (builtin, ty) = match name {
                    "encrypt" => (Builtin::Encrypt, v.ty.clone()),
                    "decrypt" => (Builtin::Decrypt, Type::option(v.ty.clone())),
                    "compress" => (Builtin::Compress, v.ty.clone()),
                    _ => (Builtin::Decompress, Type::option(v.ty.clone())),
                };
                Expr {
                    kind: ExprKind::Call {
                        builtin,
                        args: call_args,
                    },
                    ty,
                    span,
                }
            }
            "random_choices" => {
                if !self.arity(name, args, 2..=2, span, "random_choices(vector, n)") {
                    return err_expr(span);
                }
                let v = self.value_collection(&args[0]);
                let v = self.implicit_unwrap(v);
                if !matches!(v.ty, Type::Vec(_) | Type::Dyn) {
                    self.error(
                        args[0].span,
                        format!("`random_choices` needs a vector, found `{}`", v.ty),
                    );
                    return err_expr(span);
                }
                let n = self.expr(&args[1], Some(&Type::Int));
                let n = self.coerce(n, &Type::Int, "the count");
                let ty = v.ty.clone();
                Expr {
                    kind: ExprKind::Call {
                        builtin: Builtin::RandomChoices,
                        args: vec![v, n],
                    },
                    ty,
                    span,
                }
            }
            "quantile" => {
                if !self.arity(name, args, 2..=2, span, "quantile(vector, q)") {
                    return err_expr(span);
                }
                let v = self.value_collection(&args[0]);
                let v = self.implicit_unwrap(v);
                match &v.ty {
                    Type::Vec(t) if t.is_numeric() || **t == Type::Instant => {}
                    Type::Dyn => {}
                    t => {
                        self.error(
                            args[0].span,
                            format!("`quantile` needs a vector of numbers, found `{t}`"),
                        );
                        return err_expr(span);
                    }
                }
                let q = self.expr(&args[1], Some(&Type::Float));
                let q = self.coerce(q, &Type::Float, "the quantile");
                Expr {
                    kind: ExprKind::Call {
                        builtin: Builtin::Quantile,
                        args: vec![v, q],
                    },
                    ty: Type::Float,
                    span,
                }
            }
            "str" | "int" | "uint" | "float" => {
                if !self.arity(name, args, 1..=1, span, &format!("{name}(x)")) {
                    return err_expr(span);
                }
                let v = self.expr(&args[0], None);
                let v = self.implicit_unwrap(v);
                let (builtin, ty) = match name {
                    "str" => (Builtin::ToStr, Type::Str),
                    "int" => (Builtin::ToInt, Type::Int),
                    "uint" => (Builtin::ToUint, Type::Uint),
                    _ => (Builtin::ToFloat, Type::Float),
                };
                let ok = match ty {
                    Type::Str => matches!(
                        v.ty,
                        Type::Int
                            | Type::Uint
                            | Type::Float
                            | Type::Bool
                            | Type::Str
                            | Type::Instant
                            | Type::Dyn
                    ),
                    _ => matches!(
                        v.ty,
                        Type::Int
                            | Type::Uint
                            | Type::Float
                            | Type::Bool
                            | Type::Instant
                            | Type::Dyn
                    ),
                };
                if !ok {
                    let hint = (v.ty == Type::Str && ty != Type::Str).then(|| {
                        format!(
                            "parse text with `parse_{}` (gives an Option)",
                            if ty == Type::Float { "float" } else { "int" }
                        )
                    });
                    self.error(args[0].span, format!("`{name}` cannot convert `{}`", v.ty))
                        .hint = hint;
                    return err_expr(span);
                }
                if v.ty == ty {
                    return v;
                }
                Expr {
                    kind: ExprKind::Call {
                        builtin,
                        args: vec![v],
                    },
                    ty,
                    span,
                }
            }
            "parse_int" => self.typed_call(
                Builtin::ParseInt,
                args,
                &[Type::Str],
                Type::option(Type::Int),
                span,
                "parse_int(text)",
            ),
            "parse_float" => self.typed_call(
                Builtin::ParseFloat,
                args,
                &[Type::Str],
                Type::option(Type::Float),
                span,
                "parse_float(text)",
            ),
            "Some" => {
                if !self.arity(name, args, 1..=1, span, "Some(value)") {
                    return err_expr(span);
                }
                let inner = match expected {
                    Some(Type::Option(t)) => Some(&**t),
                    _ => None,
                };
                let v = self.expr(&args[0], inner);
                let v = match inner {
                    Some(t) => self.coerce(v, t, "the value"),
                    None => v,
                };
                let ty = Type::option(v.ty.clone());
                Expr {
                    kind: ExprKind::MakeSome(Box::new(v)),
                    ty,
                    span,
                }
            }
            _ => {
                let hint = match name {
                    "get_backends" | "get_load" | "estimate_RIF_distribution" => Some(
                        "control-plane data is state the control plane writes: declare e.g. `backends: Map<string, Vec<string>>` and read it with `get`".to_string(),
                    ),
                    "set_route_dst" => Some("route with `set_rpc_header(rpc, 'dst', replica)`".to_string()),
                    "len" | "length" => Some("did you mean `size`?".to_string()),
                    "now" | "time" => Some("did you mean `current_time`?".to_string()),
                    _ => did_you_mean(name, BUILTINS.iter().copied()),
                };
                self.error(func.span, format!("unknown function `{name}`"))
                    .hint = hint;
                for a in args {
                    if !matches!(a.kind, ast::ExprKind::Lambda(_)) {
                        let _ = self.expr(a, None);
                    }
                }
                err_expr(span)
            }
        }
    }

    fn typed_call(
        &mut self,
        b: Builtin,
        args: &[ast::Expr],
        params: &[Type],
        ret: Type,
        span: Span,
        usage: &str,
    ) -> Expr {
        let name = usage.split('(').next().unwrap_or("");
        if !self.arity(name, args, params.len()..=params.len(), span, usage) {
            return err_expr(span);
        }
        let mut out = Vec::new();
        for (a, t) in args.iter().zip(params) {
            let e = self.expr(a, Some(t));
            out.push(self.coerce(e, t, &format!("the argument of `{name}`")));
        }
        Expr {
            kind: ExprKind::Call {
                builtin: b,
                args: out,
            },
            ty: ret,
            span,
        }
    }

    /// A collection argument of `random_choices` / `quantile`: a local value or a state
    /// vector (read whole); a state map is not a value.
    fn value_collection(&mut self, a: &ast::Expr) -> Expr {
        if let ast::ExprKind::Name(n) = &a.kind
            && self.body.as_ref().and_then(|b| b.lookup(n)).is_none()
            && self
                .state_index
                .get(n)
                .is_some_and(|&v| self.state[v].kind == CellKind::Map)
        {
            self.error(
                a.span,
                format!("`{n}` is a state collection; copy what you need into a local first"),
            )
            .hint = Some(
                "built-ins over whole collections take local values, e.g. a vector read from a map"
                    .into(),
            );
            return err_expr(a.span);
        }
        self.expr(a, None)
    }

    fn get_call(&mut self, args: &[ast::Expr], span: Span) -> Expr {
        if !self.arity(
            "get",
            args,
            2..=3,
            span,
            "get(map, key), get(map, key, lambda(v): …), get(rpc, 'field')",
        ) {
            return err_expr(span);
        }
        // State collections. A scalar holding a pair or a message is a value like any other
        // (`get(pair, 0)`, `get(stored_response, 'field')`) and is read whole below.
        if let ast::ExprKind::Name(n) = &args[0].kind
            && self.body.as_ref().and_then(|b| b.lookup(n)).is_none()
            && let Some(&var) = self.state_index.get(n)
            && !(self.state[var].kind == CellKind::Scalar
                && matches!(
                    self.state[var].ty,
                    Type::Pair(..) | Type::Request | Type::Response
                ))
        {
            let sv = self.state[var].clone();
            if sv.kind == CellKind::Scalar {
                self.error(args[0].span, format!("`{n}` is a scalar; read it by name"))
                    .hint = Some(format!("write `{n}`"));
                return err_expr(span);
            }
            let kt = sv.key_type();
            let key = self.expr(&args[1], Some(&kt));
            let key = self.coerce(key, &kt, "the key");
            if let Some(l) = args.get(2) {
                return self.rmw(var, key, l, span);
            }
            let ty = if sv.kind == CellKind::Map {
                Type::option(sv.value_type().clone())
            } else {
                sv.value_type().clone()
            };
            return Expr {
                kind: ExprKind::StateGet {
                    var,
                    key: Box::new(key),
                },
                ty,
                span,
            };
        }
        if args.len() == 3 {
            self.error(args[2].span, "`get` with a lambda updates a map in state")
                .hint = Some("the first argument must be a `Map` declared in `state`".into());
            return err_expr(span);
        }
        let c = self.expr(&args[0], None);
        let c = self.implicit_unwrap(c);
        match c.ty.clone() {
            Type::Request | Type::Response => {
                let ty = c.ty.clone();
                match self.field_ref(&ty, &args[1], false) {
                    Some(FieldRef::Path(field)) => {
                        let t = field.ty.clone();
                        Expr {
                            kind: ExprKind::Field {
                                msg: Box::new(c),
                                field,
                            },
                            ty: t,
                            span,
                        }
                    }
                    Some(FieldRef::MetaStatus) => Expr {
                        kind: ExprKind::MetaStatus(Box::new(c)),
                        ty: Type::Str,
                        span,
                    },
                    Some(FieldRef::MetaCode) => Expr {
                        kind: ExprKind::MetaCode(Box::new(c)),
                        ty: Type::Int,
                        span,
                    },
                    None => err_expr(span),
                }
            }
            Type::Map(k, v) => {
                let key = self.expr(&args[1], Some(&k));
                let key = self.coerce(key, &k, "the key");
                Expr {
                    kind: ExprKind::ValueGet {
                        coll: Box::new(c),
                        key: Box::new(key),
                    },
                    ty: Type::option(*v),
                    span,
                }
            }
            Type::Vec(t) => {
                let key = self.expr(&args[1], Some(&Type::Int));
                let key = self.coerce(key, &Type::Int, "the index");
                Expr {
                    kind: ExprKind::ValueGet {
                        coll: Box::new(c),
                        key: Box::new(key),
                    },
                    ty: *t,
                    span,
                }
            }
            Type::Pair(a, b) => {
                let key = self.expr(&args[1], Some(&Type::Int));
                match key.kind {
                    ExprKind::Const(Value::Int(0)) => Expr {
                        kind: ExprKind::ValueGet {
                            coll: Box::new(c),
                            key: Box::new(key),
                        },
                        ty: *a,
                        span,
                    },
                    ExprKind::Const(Value::Int(1)) => Expr {
                        kind: ExprKind::ValueGet {
                            coll: Box::new(c),
                            key: Box::new(key),
                        },
                        ty: *b,
                        span,
                    },
                    _ => {
                        self.error(args[1].span, "a pair is indexed by the constant 0 or 1")
                            .hint = Some("or unpack it: `(a, b) = pair`".into());
                        err_expr(span)
                    }
                }
            }
            Type::Dyn => err_expr(span),
            other => {
                self.error(
                    args[0].span,
                    format!("`get` reads a map, a vector or a message, found `{other}`"),
                );
                err_expr(span)
            }
        }
    }

    fn rmw(&mut self, var: VarId, key: Expr, l: &ast::Expr, span: Span) -> Expr {
        let sv = self.state[var].clone();
        if sv.kind != CellKind::Map {
            self.error(span, "`get` with a lambda updates a map entry")
                .hint = Some(format!("`{}` is not a map", sv.name));
            return err_expr(span);
        }
        let ast::ExprKind::Lambda(lambda) = &l.kind else {
            self.error(l.span, "the third argument of `get` is a lambda")
                .hint = Some("write `get(map, key, lambda(v): …)`".into());
            return err_expr(span);
        };
        if lambda.params.len() != 1 {
            self.error(
                lambda.span,
                "the lambda of `get(map, key, lambda)` takes one parameter: the stored value",
            );
            return err_expr(span);
        }
        let vt = sv.value_type().clone();
        let saved_defined = self.bx().defined.clone();
        let saved_reachable = self.bx().reachable;
        self.bx().push_scope(true);
        let binder = self.bx().declare_binder(&lambda.params[0].name, vt);
        self.bx().defined.insert(binder);
        self.bx().lambdas.push(LambdaCx {
            kind: LambdaKind::Rmw,
            returns: Vec::new(),
        });
        let body = self.block(&lambda.body);
        let falls_off = self.bx().reachable;
        let cx = self.bx().lambdas.pop().unwrap_or(LambdaCx {
            kind: LambdaKind::Rmw,
            returns: vec![],
        });
        self.bx().pop_scope();
        self.bx().defined = saved_defined;
        self.bx().reachable = saved_reachable;
        let mut ty = Type::Unit;
        if let Some((first, _)) = cx.returns.first() {
            ty = first.clone();
            for (t, s) in &cx.returns[1..] {
                if !has_dyn_mismatch_only(t, &ty) {
                    self.error(
                        *s,
                        format!("this lambda returns `{t}` here but `{ty}` before"),
                    );
                }
            }
            if falls_off && ty != Type::Unit {
                self.error(lambda.span, "the lambda can end without `return`")
                    .hint = Some(format!("every path must `return` a `{ty}`"));
            }
        }
        Expr {
            kind: ExprKind::StateRmw {
                var,
                key: Box::new(key),
                binder,
                body,
            },
            ty,
            span,
        }
    }

    fn size_call(&mut self, args: &[ast::Expr], span: Span) -> Expr {
        if !self.arity("size", args, 1..=1, span, "size(collection)") {
            return err_expr(span);
        }
        if let ast::ExprKind::Name(n) = &args[0].kind
            && self.body.as_ref().and_then(|b| b.lookup(n)).is_none()
            && let Some(&var) = self.state_index.get(n)
            && self.state[var].kind != CellKind::Scalar
        {
            return Expr {
                kind: ExprKind::StateSize(var),
                ty: Type::Int,
                span,
            };
        }
        let v = self.expr(&args[0], None);
        let v = self.implicit_unwrap(v);
        if !matches!(
            v.ty,
            Type::Str | Type::Bytes | Type::Vec(_) | Type::Map(..) | Type::Dyn
        ) {
            self.error(
                args[0].span,
                format!(
                    "`size` needs a string, bytes, a vector or a map, found `{}`",
                    v.ty
                ),
            )
            .hint = (v.ty.is_message())
                .then(|| "the encoded size of a message is `byte_size(rpc)`".to_string());
            return err_expr(span);
        }
        Expr {
            kind: ExprKind::Call {
                builtin: Builtin::Size,
                args: vec![v],
            },
            ty: Type::Int,
            span,
        }
    }

    fn byte_size_call(&mut self, args: &[ast::Expr], span: Span) -> Expr {
        if !self.arity(
            "byte_size",
            args,
            1..=2,
            span,
            "byte_size(rpc) or byte_size(rpc, 'field')",
        ) {
            return err_expr(span);
        }
        let m = self.expr(&args[0], None);
        if !m.ty.is_message() && m.ty != Type::Dyn {
            self.error(
                args[0].span,
                format!("`byte_size` measures a message, found `{}`", m.ty),
            )
            .hint = Some("for strings and collections use `size(x)`".into());
            return err_expr(span);
        }
        let field = match args.get(1) {
            None => None,
            Some(f) => match self.field_ref(&m.ty.clone(), f, true) {
                Some(FieldRef::Path(p)) => Some(p),
                Some(_) => {
                    self.error(f.span, "`meta_status`/`meta_code` are not encoded fields");
                    return err_expr(span);
                }
                None => return err_expr(span),
            },
        };
        Expr {
            kind: ExprKind::ByteSize {
                msg: Box::new(m),
                field,
            },
            ty: Type::Int,
            span,
        }
    }

    /// Resolves a field-name argument against the message type's schema.
    /// `payload`: `byte_size` may name a message-typed field (its encoded length).
    fn field_ref(&mut self, msg_ty: &Type, arg: &ast::Expr, payload: bool) -> Option<FieldRef> {
        let name = self.expr(arg, Some(&Type::Str));
        let (text, literal) = match &name.kind {
            ExprKind::Const(Value::Str(s)) => {
                (s.clone(), matches!(arg.kind, ast::ExprKind::Lit(_)))
            }
            ExprKind::Param(_) => return Some(FieldRef::Path(dyn_field("<param>"))),
            _ if name.ty == Type::Dyn => return None,
            _ => {
                self.error(arg.span, "a field name must be a constant string")
                    .hint = Some(
                    "write it as a literal, e.g. 'user', or pass it as an element parameter".into(),
                );
                return None;
            }
        };
        if text == "meta_status" || text == "meta_code" {
            if *msg_ty == Type::Request {
                self.error(
                    arg.span,
                    format!("`{text}` describes a response; requests have no status"),
                );
                return None;
            }
            return Some(if text == "meta_status" {
                FieldRef::MetaStatus
            } else {
                FieldRef::MetaCode
            });
        }
        if *msg_ty == Type::Dyn {
            return Some(FieldRef::Path(dyn_field(&text)));
        }
        let Some(method) = self.env.method else {
            return Some(FieldRef::Path(dyn_field(&text)));
        };
        let desc = if *msg_ty == Type::Request {
            &method.request
        } else {
            &method.response
        };
        let resolved = if payload {
            resolve_payload_path(desc, &text)
        } else {
            resolve_path(desc, &text)
        };
        match resolved {
            Ok(p) => Some(FieldRef::Path(p)),
            // An arm a constant never takes may name a field this method lacks; it is still
            // type-checked, so a field that does resolve keeps its real type there (a `Dyn`
            // would make `foreach(map_field, lambda(k, v): …)` or pair comparisons fail).
            Err(_) if self.dead > 0 => Some(FieldRef::Path(dyn_field(&text))),
            Err(e) => {
                // Point at the offending segment inside the literal (after the quote).
                let span = if literal && arg.span.len() >= text.len() + 2 {
                    let start = arg.span.start as usize + 1 + e.segment.start;
                    Span::new(start, start + e.segment.len().max(1))
                } else {
                    arg.span
                };
                let mut hint = e.hint.clone();
                // The schema always offers a hint (a close name, or the list of fields), but
                // for these names the author almost surely meant the RPC's own attribute.
                if matches!(text.as_str(), "dst" | "src" | "method") {
                    hint = Some(format!(
                        "the RPC's {text} is `{text}()`, not a message field"
                    ));
                }
                let d = self.error(
                    span,
                    format!(
                        "{} (the {} of `{}`)",
                        e.message,
                        if *msg_ty == Type::Request {
                            "request"
                        } else {
                            "response"
                        },
                        method.full_name
                    ),
                );
                d.hint = hint;
                None
            }
        }
    }
}

enum FieldRef {
    Path(FieldPath),
    MetaStatus,
    MetaCode,
}

enum ElemTy {
    One(Type),
    Pair(Type, Type),
}

fn dyn_field(text: &str) -> FieldPath {
    FieldPath {
        text: text.to_owned(),
        steps: Vec::new(),
        ty: Type::Dyn,
    }
}

fn describe_range(r: &std::ops::RangeInclusive<usize>) -> String {
    if r.start() == r.end() {
        r.start().to_string()
    } else {
        format!("{} to {}", r.start(), r.end())
    }
}

fn is_nonneg_int_const(e: &Expr) -> bool {
    matches!(e.kind, ExprKind::Const(Value::Int(i)) if i >= 0)
}

/// Types that differ only where one side is `Dyn` (check-only mode).
fn has_dyn_mismatch_only(a: &Type, b: &Type) -> bool {
    match (a, b) {
        (Type::Dyn, _) | (_, Type::Dyn) => true,
        (Type::Pair(a1, a2), Type::Pair(b1, b2)) | (Type::Map(a1, a2), Type::Map(b1, b2)) => {
            has_dyn_mismatch_only(a1, b1) && has_dyn_mismatch_only(a2, b2)
        }
        (Type::Vec(x), Type::Vec(y)) | (Type::Option(x), Type::Option(y)) => {
            has_dyn_mismatch_only(x, y)
        }
        (x, y) => x == y,
    }
}

fn pattern_binder(p: &Pattern) -> Option<LocalId> {
    match p {
        Pattern::Some(Some(l)) => Some(*l),
        _ => None,
    }
}

/// Whether a pattern matches a constant (for folding a `match` on a constant).
pub fn pattern_matches(p: &Pattern, v: &Value) -> bool {
    match (p, v) {
        (Pattern::Wildcard, _) => true,
        (Pattern::Lit(l), v) => l.lang_eq(v),
        (Pattern::Some(_), Value::Opt(Some(_))) => true,
        (Pattern::None, Value::Opt(None)) => true,
        _ => false,
    }
}

/// The type of a config value for an untyped parameter.
fn infer_value_type(v: &Value) -> Option<Type> {
    Some(match v {
        Value::Bool(_) => Type::Bool,
        Value::Int(_) => Type::Int,
        Value::Uint(_) => Type::Uint,
        Value::Float(_) => Type::Float,
        Value::Str(_) => Type::Str,
        Value::Bytes(_) => Type::Bytes,
        Value::Vec(items) => Type::vec(items.first().map_or(Some(Type::Str), infer_value_type)?),
        Value::Map(m) => {
            let (k, v) = m.iter().next()?;
            Type::map(infer_value_type(k)?, infer_value_type(v)?)
        }
        _ => return None,
    })
}

/// Brings a config value to a parameter's declared type (YAML has one number kind per
/// literal: `5` may fill a float parameter). Returns the value's kind on mismatch.
pub fn coerce_value(v: Value, ty: &Type) -> Result<Value, String> {
    let out = match (v, ty) {
        (Value::Int(i), Type::Float) => Value::Float(i as f64),
        (Value::Uint(u), Type::Float) => Value::Float(u as f64),
        (Value::Int(i), Type::Uint) if i >= 0 => Value::Uint(i as u64),
        (Value::Uint(u), Type::Int) if u <= i64::MAX as u64 => Value::Int(u as i64),
        (Value::Vec(items), Type::Vec(t)) => Value::Vec(
            items
                .into_iter()
                .map(|i| coerce_value(i, t))
                .collect::<Result<_, _>>()?,
        ),
        (Value::Map(m), Type::Map(kt, vt)) => Value::Map(
            m.into_iter()
                .map(|(k, v)| Ok((coerce_value(k, kt)?, coerce_value(v, vt)?)))
                .collect::<Result<_, String>>()?,
        ),
        (v, t) if t.admits(&v) => v,
        (v, _) => return Err(v.kind_name().to_owned()),
    };
    Ok(out)
}

/// Folds an expression whose operands are constants.
fn fold(e: Expr) -> Expr {
    // A `Dyn` constant stands in for an expression that failed to check; folding over it
    // (`lang_eq` compares anything) would make `bad == 'x'` a constant `false` and hide the
    // errors in the branches it guards.
    let is_const = |x: &Expr| matches!(x.kind, ExprKind::Const(_)) && x.ty != Type::Dyn;
    let span = e.span;
    let ty = e.ty.clone();
    let value = match &e.kind {
        ExprKind::Unary { op, operand } if is_const(operand) => match &operand.kind {
            ExprKind::Const(v) => eval::unary(*op, v).ok(),
            _ => None,
        },
        ExprKind::Binary { op, lhs, rhs } if is_const(lhs) && is_const(rhs) => {
            match (&lhs.kind, &rhs.kind) {
                (ExprKind::Const(a), ExprKind::Const(b)) => eval::binary(*op, a, b).ok(),
                _ => None,
            }
        }
        // `false and x`, `true or x`: the right side never runs.
        ExprKind::Binary {
            op: BinOp::And,
            lhs,
            ..
        } if matches!(lhs.kind, ExprKind::Const(Value::Bool(false))) => Some(Value::Bool(false)),
        ExprKind::Binary {
            op: BinOp::Or, lhs, ..
        } if matches!(lhs.kind, ExprKind::Const(Value::Bool(true))) => Some(Value::Bool(true)),
        ExprKind::Convert { operand } => match &operand.kind {
            ExprKind::Const(v) => eval::convert(v, &ty).ok(),
            _ => None,
        },
        ExprKind::MakePair(a, b) => match (&a.kind, &b.kind) {
            (ExprKind::Const(a), ExprKind::Const(b)) => Some(Value::pair(a.clone(), b.clone())),
            _ => None,
        },
        ExprKind::MakeSome(a) => match &a.kind {
            ExprKind::Const(a) => Some(Value::some(a.clone())),
            _ => None,
        },
        ExprKind::Call { builtin, args } if builtin.is_pure() && args.iter().all(is_const) => {
            let vals: Vec<Value> = args
                .iter()
                .filter_map(|a| match &a.kind {
                    ExprKind::Const(v) => Some(v.clone()),
                    _ => None,
                })
                .collect();
            eval::call_pure(*builtin, &vals).and_then(Result::ok)
        }
        _ => None,
    };
    match value {
        Some(v) if ty != Type::Dyn => Expr {
            kind: ExprKind::Const(v),
            ty,
            span,
        },
        _ => e,
    }
}

struct Scope {
    names: HashMap<String, LocalId>,
    function: bool,
}

impl BodyCx {
    fn new(handler: Handler, msg: Option<LocalId>) -> BodyCx {
        BodyCx {
            handler,
            locals: Vec::new(),
            scopes: vec![Scope {
                names: HashMap::new(),
                function: true,
            }],
            defined: HashSet::new(),
            reachable: true,
            reported_unreachable: false,
            msg,
            lambdas: Vec::new(),
        }
    }

    fn lookup(&self, name: &str) -> Option<LocalId> {
        self.scopes
            .iter()
            .rev()
            .find_map(|s| s.names.get(name).copied())
    }

    fn push_scope(&mut self, function: bool) {
        self.scopes.push(Scope {
            names: HashMap::new(),
            function,
        });
    }

    fn pop_scope(&mut self) {
        self.scopes.pop();
    }

    /// A new local in the innermost function-level scope (an assignment's target).
    fn declare(&mut self, name: &str, ty: Type) -> LocalId {
        let id = self.declare_hidden(name, ty);
        if let Some(s) = self.scopes.iter_mut().rev().find(|s| s.function) {
            s.names.insert(name.to_owned(), id);
        }
        id
    }

    /// A new local in the innermost scope (parameters and pattern bindings).
    fn declare_binder(&mut self, name: &str, ty: Type) -> LocalId {
        let id = self.declare_hidden(name, ty);
        if let Some(s) = self.scopes.last_mut() {
            s.names.insert(name.to_owned(), id);
        }
        id
    }

    /// A new local slot whose name the caller scopes itself (match-arm bindings).
    fn declare_hidden(&mut self, name: &str, ty: Type) -> LocalId {
        self.locals.push(Local {
            name: name.to_owned(),
            ty,
        });
        self.locals.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::{SourceFile, render_all};
    use crate::parser::parse;
    use crate::testgen::test_method;

    /// Checks `src` against the test schema of `testgen` with `params` as the chain config.
    fn diags(src: &str, params: &[(&str, Value)]) -> Vec<Diagnostic> {
        let method = test_method().unwrap();
        let params: Params = params
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        let file = SourceFile::new("t.weft", src);
        let (ast, mut d) = parse(&file);
        assert!(d.is_empty(), "{}", render_all(&file, &d));
        let env = CheckEnv {
            name: "t".into(),
            method: Some(&method),
            params: Some(&params),
        };
        d.extend(check(&ast, &env).1);
        d.retain(Diagnostic::is_error);
        d
    }

    fn errors(src: &str, params: &[(&str, Value)]) -> Vec<String> {
        diags(src, params).into_iter().map(|d| d.message).collect()
    }

    /// Found by the random-program generator: in an arm a constant never takes, every field
    /// read had the unknown type, so a `foreach` over a map field with `lambda(k, v)` and pair
    /// comparisons failed to check in perfectly typed code.
    #[test]
    fn fields_in_untaken_arms_keep_their_types() {
        let src = "state:\n    pass\ninit(mode: string = 'a'):\n    pass\nreq(rpc):\n    match mode:\n        'b' =>\n            foreach(get(rpc, 'counters'), lambda(k, v):\n                x = v + 1\n            )\n            if (get(rpc, 'priority'), get(rpc, 'user')) == (1, 'u'):\n                send(rpc, Down)\n        _ =>\n            pass\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n";
        assert_eq!(errors(src, &[]), Vec::<String>::new());
        // A name the method lacks is still no error in the untaken arm, and still one in a
        // taken arm.
        let src = "state:\n    pass\ninit(mode: string = 'a'):\n    pass\nreq(rpc):\n    match mode:\n        'b' =>\n            x = get(rpc, 'no_such_field')\n        _ =>\n            pass\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n";
        assert_eq!(errors(src, &[]), Vec::<String>::new());
        let errs = errors(src, &[("mode", Value::str("b"))]);
        assert_eq!(errs.len(), 1, "{errs:?}");
    }

    /// Found by the generator: `get(s, 0)` on a pair held in scalar state was refused with
    /// "`s` is a scalar; read it by name", although `s` is read by name everywhere else.
    #[test]
    fn pairs_and_messages_in_scalar_state_are_values() {
        let src = "state:\n    p: <int, string>\n    last: Response\n    n: int\ninit():\n    pass\nreq(rpc):\n    x = get(p, 0) + 1\n    y = get(p, 1) + get(last, 'body')\n    send(rpc, Down)\nresp(rpc):\n    last = rpc\n    send(rpc, Up)\n";
        assert_eq!(errors(src, &[]), Vec::<String>::new());
        let errs = errors(
            "state:\n    n: int\ninit():\n    x = get(n, 0)\nreq(rpc):\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n",
            &[],
        );
        assert_eq!(errs, vec!["`n` is a scalar; read it by name".to_owned()]);
    }

    /// Found by the generator, checking its programs without a schema (`weft check` with no
    /// `--proto`, every field untyped): `foreach(field, lambda(k, v))`, untyped parts inside
    /// pairs (comparisons, pair unpacking, read-modify-write returns) and an untyped field
    /// next to an integer literal (taken for an int, so `uint`/`float` uses failed) were type
    /// errors.
    #[test]
    fn untyped_fields_inside_pairs_and_maps_check_without_a_schema() {
        let src = "state:\n    m: Map<string, <string, int>>\ninit():\n    pass\nreq(rpc):\n    foreach(get(rpc, 'counters'), lambda(k, v):\n        pass\n    )\n    p = (get(rpc, 'user'), 1)\n    if p == ('x', 2):\n        pass\n    (a, b) = p\n    (a, b) = ('y', 3)\n    q = get(m, 'k', lambda(v):\n        if b > 1:\n            return (get(rpc, 'user'), 1)\n        return ('s', 2)\n    )\n    c = get(rpc, 'count') + 1\n    if c > uint(3) or get(rpc, 'score') * 2 > 0.5:\n        pass\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n";
        let file = SourceFile::new("t.weft", src);
        let (ast, d) = parse(&file);
        assert!(d.is_empty(), "{}", render_all(&file, &d));
        let (_, d) = check(&ast, &CheckEnv::default());
        let errors: Vec<&Diagnostic> = d.iter().filter(|d| d.is_error()).collect();
        assert!(errors.is_empty(), "{}", render_all(&file, &d));
    }

    /// Found while writing the generator: a parameter named like a state variable
    /// initialises it whole, yet `init(x: float)` for `x: int` checked (then every use was
    /// an internal type error at run time), and one named like a map stored the whole map
    /// under the key `()`.
    #[test]
    fn a_parameter_initialises_only_scalar_state_of_its_type() {
        let src = |state: &str, param: &str| {
            format!(
                "state:\n    {state}\ninit({param}):\n    pass\nreq(rpc):\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n"
            )
        };
        let errs = errors(&src("x: int", "x: float = 1.5"), &[]);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("declared `float`"), "{errs:?}");
        assert!(errors(&src("x: int", "x: int = 2"), &[]).is_empty());
        assert!(errors(&src("x: int", "x"), &[("x", Value::Int(2))]).is_empty());
        let acl = Value::Map([(Value::str("a"), Value::str("b"))].into_iter().collect());
        let errs = errors(&src("acl: Map<string, string>", "acl"), &[("acl", acl)]);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("collection"), "{errs:?}");
    }

    /// Found by the generator: `@combiner(sum)` on instants checked, but the state stores
    /// refuse a sum-combined variable whose zero is not a number, so every access of a weak
    /// one failed at run time.
    #[test]
    fn sum_needs_numbers_while_max_and_min_order_instants() {
        let decl = |d: &str| {
            format!(
                "state:\n    {d}\n    t: Map<string, Instant>\ninit():\n    pass\nreq(rpc):\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n"
            )
        };
        let errs = errors(&decl("@consistency(weak) @combiner(sum)"), &[]);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].contains("`sum` needs int, uint or float"),
            "{errs:?}"
        );
        for ok in [
            "@consistency(weak) @combiner(max)",
            "@consistency(weak) @combiner(min)",
        ] {
            assert_eq!(errors(&decl(ok), &[]), Vec::<String>::new(), "{ok}");
        }
    }
}
