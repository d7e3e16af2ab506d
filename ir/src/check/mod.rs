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

use weft_hostcalls::Value;

use crate::ast::{self, BinOp};
use crate::diag::{Diagnostic, Span};
use crate::eval::{self, RuntimeError};
use crate::ir::*;
use crate::schema::{FieldPath, MethodSchema};
use crate::types::Type;

mod call;
mod decl;
mod expr;
mod flow;
mod stmt;
mod write;

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
        untyped_reads: HashMap::new(),
        body: None,
        refused_params: Vec::new(),
    };
    cx.declare_state(file);
    cx.declare_params(file);
    cx.resolve_capacities(file);
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
    let name: String = if env.name.is_empty() {
        "element".into()
    } else {
        env.name.clone()
    };
    let element = Element {
        record_names: RecordNames::new(&name, &cx.channels),
        name,
        params,
        state: cx.state,
        channels: cx.channels,
        metadata: cx.metadata.into_iter().map(|m| (m.0, m.1)).collect(),
        init,
        req,
        resp,
        unbound_params,
        refused_params: cx.refused_params,
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
    /// Whether the current point can be reached with some value of the parameters:
    /// `reachable` follows only the arms a constant condition takes, so code after an arm
    /// that ends is unreachable with these parameters but not with others, and is not
    /// warned about.
    live: bool,
    /// Locals first assigned in an arm a constant never takes (see `Checker::name`).
    declared_dead: HashSet<LocalId>,
    msg: Option<LocalId>,
    lambdas: Vec<LambdaCx>,
    /// Locals read anywhere in the body, and where each local an assignment created was
    /// first assigned: one never read is often a misspelt state variable.
    read: HashSet<LocalId>,
    created: Vec<(LocalId, Span)>,
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
    /// Metadata keys (by index) read in live code while only dead code had set them, so
    /// their type was unknown: where the first such read is. A later live set that types
    /// the key makes that read an error (it could have used the value as anything).
    untyped_reads: HashMap<usize, Span>,
    body: Option<BodyCx>,
    /// See [`Element::refused_params`].
    refused_params: Vec<String>,
}

/// Names with a meaning of their own where a value is read (`Checker::name`): a local, a
/// binder, state or a parameter of that name would change what they mean, so none may take
/// one (`None = 0` made `x == None` compare against 0).
const RESERVED: &[&str] = &["None", "inf", "inf_f", "Up", "Down", "up", "down"];

/// The error for a declaration of `name` when it is reserved.
fn reserved_name(name: &str, what: &str) -> Option<String> {
    RESERVED
        .contains(&name)
        .then(|| format!("`{name}` is reserved and cannot name {what}"))
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
    "require",
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
    // The error names what was given; for a collection, the item that does not fit (`deny:
    // [5]` for a `Vec<string>` is a list with an int item, not an int).
    let out = match (v, ty) {
        (Value::Int(i), Type::Float) => Value::Float(i as f64),
        (Value::Uint(u), Type::Float) => Value::Float(u as f64),
        (Value::Int(i), Type::Uint) if i >= 0 => Value::Uint(i as u64),
        (Value::Uint(u), Type::Int) if u <= i64::MAX as u64 => Value::Int(u as i64),
        (Value::Vec(items), Type::Vec(t)) => Value::Vec(
            items
                .into_iter()
                .map(|i| {
                    coerce_value(i, t)
                        .map_err(|found| format!("list with {} item", a_or_an(&found)))
                })
                .collect::<Result<_, _>>()?,
        ),
        (Value::Map(m), Type::Map(kt, vt)) => Value::Map(
            m.into_iter()
                .map(|(k, v)| {
                    let k = coerce_value(k, kt)
                        .map_err(|found| format!("map with {} key", a_or_an(&found)))?
                        .into_canonical_key();
                    let v = coerce_value(v, vt)
                        .map_err(|found| format!("map with {} value", a_or_an(&found)))?;
                    Ok((k, v))
                })
                .collect::<Result<_, String>>()?,
        ),
        (v, t) if t.admits(&v) => v,
        (v, _) => return Err(v.kind_name().to_owned()),
    };
    Ok(out)
}

/// `kind` with its indefinite article: "an int", "a string".
pub fn a_or_an(kind: &str) -> String {
    let article = match kind.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    };
    format!("{article} {kind}")
}

/// Folds an expression whose operands are constants.
fn fold(e: Expr) -> Expr {
    fold_checked(e).0
}

/// [`fold`], and the run-time error an expression of constants always raises (`1 / 0`,
/// `int(1e300)`), which folding leaves in place to fail when it runs.
fn fold_checked(e: Expr) -> (Expr, Option<RuntimeError>) {
    // A `Dyn` constant stands in for an expression that failed to check; folding over it
    // (`lang_eq` compares anything) would make `bad == 'x'` a constant `false` and hide the
    // errors in the branches it guards.
    let is_const = |x: &Expr| matches!(x.kind, ExprKind::Const(_)) && x.ty != Type::Dyn;
    let span = e.span;
    let ty = e.ty.clone();
    let value: Option<Result<Value, RuntimeError>> = match &e.kind {
        ExprKind::Unary { op, operand } if is_const(operand) => match &operand.kind {
            ExprKind::Const(v) => Some(eval::unary(*op, v)),
            _ => None,
        },
        ExprKind::Binary { op, lhs, rhs } if is_const(lhs) && is_const(rhs) => {
            match (&lhs.kind, &rhs.kind) {
                (ExprKind::Const(a), ExprKind::Const(b)) => Some(eval::binary(*op, a, b)),
                _ => None,
            }
        }
        // `false and x`, `true or x`: the right side never runs.
        ExprKind::Binary {
            op: BinOp::And,
            lhs,
            ..
        } if matches!(lhs.kind, ExprKind::Const(Value::Bool(false))) => {
            Some(Ok(Value::Bool(false)))
        }
        ExprKind::Binary {
            op: BinOp::Or, lhs, ..
        } if matches!(lhs.kind, ExprKind::Const(Value::Bool(true))) => Some(Ok(Value::Bool(true))),
        ExprKind::Convert { operand } => match &operand.kind {
            ExprKind::Const(v) => Some(eval::convert(v, &ty)),
            _ => None,
        },
        ExprKind::MakePair(a, b) => match (&a.kind, &b.kind) {
            (ExprKind::Const(a), ExprKind::Const(b)) => Some(Ok(Value::pair(a.clone(), b.clone()))),
            _ => None,
        },
        ExprKind::MakeSome(a) => match &a.kind {
            ExprKind::Const(a) => Some(Ok(Value::some(a.clone()))),
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
            eval::call_pure(*builtin, &vals)
        }
        // `quantile(v, 95)` for the 95th percentile: whatever `v` holds, a constant `q`
        // outside [0, 1] fails every time (NaN included, which `contains` refuses too).
        ExprKind::Call {
            builtin: Builtin::Quantile,
            args,
        } => match args.get(1).map(|q| &q.kind) {
            Some(ExprKind::Const(Value::Float(q))) if !(0.0..=1.0).contains(q) => Some(Err(
                weft_hostcalls::builtins::BuiltinError::QuantileOutOfRange { q: *q }.into(),
            )),
            _ => None,
        },
        _ => None,
    };
    match value {
        Some(Ok(v)) if ty != Type::Dyn => (
            Expr {
                kind: ExprKind::Const(v),
                ty,
                span,
            },
            None,
        ),
        // An internal type error is the checker's to report, not a constant's failure.
        Some(Err(RuntimeError::Type(_))) => (e, None),
        Some(Err(failure)) if ty != Type::Dyn => (e, Some(failure)),
        _ => (e, None),
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
            live: true,
            declared_dead: HashSet::new(),
            msg,
            lambdas: Vec::new(),
            read: HashSet::new(),
            created: Vec::new(),
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
