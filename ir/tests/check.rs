#![allow(clippy::unwrap_used)]
//! The checker: local type inference, numeric coercions and widening, constant folding,
//! parameter binding (and the arm selection it enables), definite assignment, lambdas,
//! field resolution against a schema, and the warnings it gives. Assertions look at the IR
//! it produces, not only at whether it accepts a program.

use std::path::Path;

use weft_hostcalls::Value;
use weft_ir::Type;
use weft_ir::ast::BinOp;
use weft_ir::check::{CheckEnv, check};
use weft_ir::diag::{Diagnostic, SourceFile, render_all};
use weft_ir::ir::*;
use weft_ir::parser::parse;
use weft_ir::schema::{MethodSchema, Schema};

// ---- harness -----------------------------------------------------------------------------

fn catalog() -> MethodSchema {
    let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/protos/catalog.proto");
    Schema::load(&[proto], &[])
        .unwrap()
        .method("catalog.v1.Catalog/Lookup")
        .unwrap()
}

struct Checked {
    element: Option<Element>,
    diags: Vec<Diagnostic>,
    file: SourceFile,
}

impl Checked {
    fn rendered(&self) -> String {
        render_all(&self.file, &self.diags)
    }

    /// The element, which must have checked without any diagnostic at all.
    fn clean(self) -> Element {
        assert!(self.diags.is_empty(), "{}", self.rendered());
        self.element.unwrap()
    }

    fn errors(&self) -> Vec<&str> {
        self.of(true)
    }

    /// The element, which must have checked without errors (warnings allowed).
    fn clean_of_errors(self) -> Element {
        assert!(self.errors().is_empty(), "{}", self.rendered());
        self.element.unwrap()
    }

    fn warnings(&self) -> Vec<&str> {
        self.of(false)
    }

    fn of(&self, errors: bool) -> Vec<&str> {
        self.diags
            .iter()
            .filter(|d| d.is_error() == errors)
            .map(|d| d.message.as_str())
            .collect()
    }
}

fn run(src: &str, method: Option<&MethodSchema>, params: Option<&Params>) -> Checked {
    let file = SourceFile::new("t.weft", src);
    let (ast, parse_diags) = parse(&file);
    assert!(
        parse_diags.is_empty(),
        "{}",
        render_all(&file, &parse_diags)
    );
    let (element, diags) = check(
        &ast,
        &CheckEnv {
            name: "t".into(),
            method,
            params,
        },
    );
    Checked {
        element,
        diags,
        file,
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("    {l}\n")
            }
        })
        .collect()
}

/// An element with the given state declarations, `init` header and `req` body; `resp`
/// forwards the response.
fn element(state: &str, init: &str, req: &str) -> String {
    let state = if state.is_empty() { "pass" } else { state };
    format!(
        "state:\n{}\n{init}:\n    pass\n\nreq(rpc):\n{}\nresp(rpc):\n    send(rpc, Up)\n",
        indent(state),
        indent(req)
    )
}

fn req_only(state: &str, req: &str) -> String {
    element(state, "init()", req)
}

/// Checks against the catalog schema without parameters.
fn check_catalog(src: &str) -> Checked {
    run(src, Some(&catalog()), None)
}

fn params(pairs: &[(&str, Value)]) -> Params {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

// ---- IR walking --------------------------------------------------------------------------

/// Every statement of a block, outermost first, including those nested in match arms,
/// `foreach` bodies and read-modify-write lambdas.
fn all_stmts(block: &Block) -> Vec<&Stmt> {
    let mut out = Vec::new();
    for s in block {
        out.push(s);
        match &s.kind {
            StmtKind::Match { arms, .. } => {
                for a in arms {
                    out.extend(all_stmts(&a.body));
                }
            }
            StmtKind::ForEach { body, .. } => out.extend(all_stmts(body)),
            _ => {}
        }
        for e in stmt_exprs(s) {
            for sub in expr_tree(e) {
                if let ExprKind::StateRmw { body, .. } = &sub.kind {
                    out.extend(all_stmts(body));
                }
            }
        }
    }
    out
}

/// The expressions a statement holds directly.
fn stmt_exprs(s: &Stmt) -> Vec<&Expr> {
    match &s.kind {
        StmtKind::Assign { value, .. }
        | StmtKind::AssignPair { value, .. }
        | StmtKind::StateStore { value, .. }
        | StmtKind::SetField { value, .. }
        | StmtKind::SetMetadata { value, .. }
        | StmtKind::Eval(value) => vec![value],
        StmtKind::StateSet { key, value, .. }
        | StmtKind::LocalSet { key, value, .. }
        | StmtKind::SetHeader {
            name: key, value, ..
        } => vec![key, value],
        StmtKind::StateDelete { key, .. } | StmtKind::LocalDelete { key, .. } => vec![key],
        StmtKind::Match { scrutinee, .. } => vec![scrutinee],
        StmtKind::ForEach { coll, .. } => match coll {
            Collection::Value(e) => vec![e],
            Collection::State(_) => vec![],
        },
        StmtKind::Send(send) => match send {
            SendKind::Down(e) | SendKind::Up(e) => vec![e],
            SendKind::Reject { message, .. } => vec![message],
            SendKind::Channel { value, .. } => vec![value],
        },
        StmtKind::Return(e) => e.iter().collect(),
    }
}

/// An expression and all its sub-expressions (not those inside lambda bodies).
fn expr_tree(e: &Expr) -> Vec<&Expr> {
    let mut out = vec![e];
    let children: Vec<&Expr> = match &e.kind {
        ExprKind::Const(_)
        | ExprKind::Param(_)
        | ExprKind::Local(_)
        | ExprKind::StateLoad(_)
        | ExprKind::StateSize(_)
        | ExprKind::Metadata(_) => vec![],
        ExprKind::StateGet { key, .. } | ExprKind::StateRmw { key, .. } => vec![key],
        ExprKind::ValueGet { coll, key } => vec![coll, key],
        ExprKind::Unary { operand, .. } | ExprKind::Convert { operand } => vec![operand],
        ExprKind::Unwrap(x) | ExprKind::MakeSome(x) => vec![x],
        ExprKind::Binary { lhs, rhs, .. } | ExprKind::MakePair(lhs, rhs) => vec![lhs, rhs],
        ExprKind::Field { msg, .. }
        | ExprKind::MetaStatus(msg)
        | ExprKind::MetaCode(msg)
        | ExprKind::ByteSize { msg, .. } => vec![msg],
        ExprKind::Header { msg, name } => vec![msg, name],
        ExprKind::Call { args, .. } => args.iter().collect(),
    };
    for c in children {
        out.extend(expr_tree(c));
    }
    out
}

/// Every expression anywhere in a body.
fn all_exprs(block: &Block) -> Vec<&Expr> {
    all_stmts(block)
        .into_iter()
        .flat_map(stmt_exprs)
        .flat_map(expr_tree)
        .collect()
}

/// Field paths read anywhere in a body.
fn fields_read(block: &Block) -> Vec<String> {
    all_exprs(block)
        .into_iter()
        .filter_map(|e| match &e.kind {
            ExprKind::Field { field, .. } => Some(field.text.clone()),
            _ => None,
        })
        .collect()
}

/// The slot of the only local called `name` (a name used again reuses its slot).
fn local(body: &Body, name: &str) -> LocalId {
    let ids: Vec<LocalId> = (0..body.locals.len())
        .filter(|&i| body.locals[i].name == name)
        .collect();
    assert_eq!(ids.len(), 1, "slots named `{name}`: {:?}", body.locals);
    ids[0]
}

fn local_ty<'a>(body: &'a Body, name: &str) -> &'a Type {
    &body.locals[local(body, name)].ty
}

/// The values assigned to local `name`, in program order.
fn assigned<'a>(body: &'a Body, name: &str) -> Vec<&'a Expr> {
    let id = local(body, name);
    all_stmts(&body.block)
        .into_iter()
        .filter_map(|s| match &s.kind {
            StmtKind::Assign { local, value } if *local == id => Some(value),
            _ => None,
        })
        .collect()
}

fn the_assigned<'a>(body: &'a Body, name: &str) -> &'a Expr {
    let all = assigned(body, name);
    assert_eq!(all.len(), 1, "assignments to `{name}`");
    all[0]
}

fn constant(e: &Expr) -> &Value {
    match &e.kind {
        ExprKind::Const(v) => v,
        other => panic!("not folded to a constant: {other:?}"),
    }
}

/// The value stored into state variable `name` by its only scalar store in `body`.
fn stored<'a>(e: &Element, body: &'a Body, name: &str) -> &'a Expr {
    let var = e.var(name).unwrap();
    let stores: Vec<&Expr> = all_stmts(&body.block)
        .into_iter()
        .filter_map(|s| match &s.kind {
            StmtKind::StateStore { var: v, value } if *v == var => Some(value),
            _ => None,
        })
        .collect();
    assert_eq!(stores.len(), 1, "stores to `{name}`");
    stores[0]
}

// ---- local type inference ----------------------------------------------------------------

#[test]
fn locals_take_the_type_of_their_first_assignment_and_keep_their_slot() {
    let e = run(
        &req_only(
            "",
            "n = 1
s = 'a'
f = 1.5
b = n > 0
n = n + 2
p = (n, s)
(x, y) = p
t = current_time()
o = get(rpc, 'customer.id')
send(rpc, Down)",
        ),
        Some(&catalog()),
        None,
    )
    .clean();
    let body = &e.req;
    assert_eq!(*local_ty(body, "n"), Type::Int);
    assert_eq!(*local_ty(body, "s"), Type::Str);
    assert_eq!(*local_ty(body, "f"), Type::Float);
    assert_eq!(*local_ty(body, "b"), Type::Bool);
    assert_eq!(*local_ty(body, "p"), Type::pair(Type::Int, Type::Str));
    assert_eq!(*local_ty(body, "x"), Type::Int);
    assert_eq!(*local_ty(body, "y"), Type::Str);
    assert_eq!(*local_ty(body, "t"), Type::Instant);
    assert_eq!(*local_ty(body, "o"), Type::Str);
    // `n = n + 2` writes the slot `n = 1` created (`local` asserts there is only one).
    assert_eq!(assigned(body, "n").len(), 2);
}

#[test]
fn a_local_keeps_its_type_on_reassignment() {
    let c = check_catalog(&req_only("", "n = 1\nn = 'one'\nsend(rpc, Down)"));
    assert_eq!(
        c.errors(),
        ["type mismatch: the value assigned to `n` must be `int`, found `string`"]
    );
    // No silent narrowing either: a float does not fit an int local.
    let c = check_catalog(&req_only("", "n = 1\nn = 2.5\nsend(rpc, Down)"));
    assert_eq!(
        c.errors(),
        ["type mismatch: the value assigned to `n` must be `int`, found `float`"]
    );
    assert_eq!(
        c.diags[0].hint.as_deref(),
        Some("convert with `int(x)` (truncates toward zero)")
    );
}

// ---- numeric literals, widening and folding ----------------------------------------------

#[test]
fn int_literals_take_the_expected_uint_or_float_type() {
    let e = check_catalog(&req_only(
        "u: uint\nfl: float\nquota: Map<string, uint>",
        "u = 5
fl = 2
set(quota, 'k', 7)
f = 1.0
f = 3
w = get(rpc, 'page') + 1
send(rpc, Down)",
    ))
    .clean();
    let body = &e.req;
    let u = stored(&e, body, "u");
    assert_eq!((constant(u), &u.ty), (&Value::Uint(5), &Type::Uint));
    let fl = stored(&e, body, "fl");
    assert_eq!((constant(fl), &fl.ty), (&Value::Float(2.0), &Type::Float));
    let set_value = all_stmts(&body.block)
        .into_iter()
        .find_map(|s| match &s.kind {
            StmtKind::StateSet { value, .. } => Some(value),
            _ => None,
        })
        .unwrap();
    assert_eq!(constant(set_value), &Value::Uint(7));
    // The second assignment to the float local `f` stores 3.0, converted at check time.
    let f = assigned(body, "f");
    assert_eq!(constant(f[1]), &Value::Float(3.0));
    // `page` is uint32, so the literal in `page + 1` is a uint and so is the sum.
    assert_eq!(*local_ty(body, "w"), Type::Uint);
    let ExprKind::Binary { rhs, .. } = &the_assigned(body, "w").kind else {
        panic!()
    };
    assert_eq!(constant(rhs), &Value::Uint(1));
}

#[test]
fn a_negative_literal_is_not_a_uint() {
    let c = check_catalog(&req_only("u: uint", "u = -1\nsend(rpc, Down)"));
    assert_eq!(
        c.errors(),
        ["type mismatch: the value assigned to `u` must be `uint`, found `int`"]
    );
    assert_eq!(
        c.diags[0].hint.as_deref(),
        Some("convert with `int(x)` or `uint(x)`")
    );
}

/// `abs` of a `uint` is that uint: it was refused, although both executors took it.
#[test]
fn abs_takes_every_number_type_and_keeps_it() {
    let e = check_catalog(&req_only(
        "",
        "a = abs(get(rpc, 'page'))
b = abs(get(rpc, 'offset'))
c = abs(get(rpc, 'discount'))
send(rpc, Down)",
    ))
    .clean();
    for (name, ty) in [("a", Type::Uint), ("b", Type::Int), ("c", Type::Float)] {
        assert_eq!(*local_ty(&e.req, name), ty, "{name}");
    }
    let c = check_catalog(&req_only("", "a = abs('x')\nsend(rpc, Down)"));
    assert_eq!(c.errors(), ["`abs` needs a number, found `string`"]);
}

#[test]
fn arithmetic_widens_int_and_uint_to_float_but_never_mixes_int_and_uint() {
    let e = check_catalog(&req_only(
        "",
        "a = get(rpc, 'offset') * 0.5
b = get(rpc, 'page') + get(rpc, 'discount')
c = 2 * get(rpc, 'discount')
d = get(rpc, 'offset') < 1.5
send(rpc, Down)",
    ))
    .clean();
    let body = &e.req;
    for name in ["a", "b", "c"] {
        assert_eq!(*local_ty(body, name), Type::Float, "{name}");
    }
    assert_eq!(*local_ty(body, "d"), Type::Bool);
    // The int (sint64) and uint (uint32) sides are converted explicitly in the IR, so every
    // executor performs the same conversion.
    for name in ["a", "b", "d"] {
        let ExprKind::Binary { lhs, rhs, .. } = &the_assigned(body, name).kind else {
            panic!("{name}")
        };
        assert!(
            matches!(&lhs.kind, ExprKind::Convert { operand } if matches!(operand.kind, ExprKind::Field { .. })),
            "{name}: {lhs:?}"
        );
        assert_eq!(lhs.ty, Type::Float);
        assert_eq!(rhs.ty, Type::Float);
    }
    // A literal operand is converted at check time.
    let ExprKind::Binary { lhs, .. } = &the_assigned(body, "c").kind else {
        panic!()
    };
    assert_eq!(constant(lhs), &Value::Float(2.0));

    let c = check_catalog(&req_only(
        "",
        "d = get(rpc, 'offset') + get(rpc, 'page')\nsend(rpc, Down)",
    ));
    assert_eq!(c.errors(), ["`+` on mismatched types `int` and `uint`"]);
    assert_eq!(
        c.diags[0].hint.as_deref(),
        Some("convert one side with `int(x)` or `uint(x)`")
    );
}

#[test]
fn constant_expressions_fold_with_the_usual_precedence() {
    let e = run(
        &element(
            "",
            "init(k: int = 4)",
            "a = 1 + 2 * 3
b = (1 + 2) * 3
c = 10 - 4 - 3
d = 1 + 2.5
s = 'we' + 'ft'
g = not (1 > 2) and 7 % 4 == 3
h = k * 2 + 1
send(rpc, Down)",
        ),
        None,
        None,
    )
    .clean();
    let body = &e.req;
    let folded = |name: &str| {
        let v = the_assigned(body, name);
        (constant(v).clone(), v.ty.clone())
    };
    assert_eq!(folded("a"), (Value::Int(7), Type::Int));
    assert_eq!(folded("b"), (Value::Int(9), Type::Int));
    assert_eq!(folded("c"), (Value::Int(3), Type::Int));
    assert_eq!(folded("d"), (Value::Float(3.5), Type::Float));
    assert_eq!(folded("s"), (Value::str("weft"), Type::Str));
    assert_eq!(folded("g"), (Value::Bool(true), Type::Bool));
    // A parameter with a value is a constant, so expressions over it fold too.
    assert_eq!(folded("h"), (Value::Int(9), Type::Int));
}

// ---- parameters --------------------------------------------------------------------------

fn std_element(name: &str) -> String {
    weft_ir::stdlib::source(name).unwrap().to_owned()
}

#[test]
fn parameters_bound_from_the_config_are_constants() {
    let p = params(&[("prob_pass", Value::Float(0.5))]);
    let e = run(&std_element("fault"), Some(&catalog()), Some(&p)).clean();
    assert_eq!(e.params, [("prob_pass".to_owned(), Value::Float(0.5))]);
    assert!(e.is_runnable());
    let StmtKind::Match { scrutinee, .. } = &e.req.block[0].kind else {
        panic!("{:?}", e.req.block[0])
    };
    let ExprKind::Binary {
        op: BinOp::Lt, rhs, ..
    } = &scrutinee.kind
    else {
        panic!("{scrutinee:?}")
    };
    assert_eq!(constant(rhs), &Value::Float(0.5));

    // YAML has one kind per number literal: `1` may fill a float parameter.
    let p = params(&[("prob_pass", Value::Int(1))]);
    let e = run(&std_element("fault"), Some(&catalog()), Some(&p)).clean();
    assert_eq!(e.params[0].1, Value::Float(1.0));
}

#[test]
fn config_values_must_fit_and_name_declared_parameters() {
    let p = params(&[("prob_pass", Value::str("high"))]);
    let c = run(&std_element("fault"), Some(&catalog()), Some(&p));
    assert_eq!(
        c.errors(),
        ["parameter `prob_pass` is given a string, but it is declared `float`"]
    );
    let p = params(&[("prob_pas", Value::Float(0.5))]);
    let c = run(&std_element("fault"), Some(&catalog()), Some(&p));
    assert_eq!(
        c.errors(),
        ["the chain config sets `prob_pas`, which `init` does not declare"]
    );
    assert_eq!(
        c.diags[0].hint.as_deref(),
        Some("did you mean `prob_pass`?")
    );
    // With a config, a parameter without default must be given.
    let c = run(
        &std_element("firewall"),
        Some(&catalog()),
        Some(&params(&[])),
    );
    assert_eq!(
        c.errors(),
        [
            "parameter `field` has no value",
            "parameter `deny` has no value"
        ]
    );
    // Without a config (checking an element on its own) it stays symbolic.
    let e = run(&std_element("firewall"), Some(&catalog()), None).clean();
    assert_eq!(e.unbound_params, ["field", "deny"]);
    assert!(!e.is_runnable());
}

fn loadbalance(pairs: &[(&str, Value)]) -> Checked {
    run(
        &std_element("loadbalance"),
        Some(&catalog()),
        Some(&params(pairs)),
    )
}

/// The patterns of the `match policy:` in loadbalance's `req`.
fn policy_arms(e: &Element) -> Vec<Pattern> {
    e.req
        .block
        .iter()
        .find_map(|s| match &s.kind {
            StmtKind::Match { scrutinee, arms }
                if matches!(scrutinee.kind, ExprKind::Const(Value::Str(_))) =>
            {
                Some(arms.iter().map(|a| a.pattern.clone()).collect())
            }
            _ => None,
        })
        .unwrap()
}

#[test]
fn a_match_on_a_constant_parameter_keeps_only_the_arm_it_takes() {
    let e = loadbalance(&[("policy", Value::str("round_robin"))]).clean();
    let arms = policy_arms(&e);
    assert_eq!(arms.len(), 1);
    assert!(matches!(&arms[0], Pattern::Lit(Value::Str(s)) if s == "round_robin"));
    // The sticky arm, the only one that reads `key_field`, is gone: no field is read.
    assert_eq!(fields_read(&e.req.block), Vec::<String>::new());

    // Its field name is not even resolved, so a wrong one is not an error either.
    loadbalance(&[
        ("policy", Value::str("round_robin")),
        ("key_field", Value::str("nope")),
    ])
    .clean();

    let e = loadbalance(&[
        ("policy", Value::str("sticky")),
        ("key_field", Value::str("customer.id")),
    ])
    .clean();
    assert!(matches!(&policy_arms(&e)[..], [Pattern::Lit(Value::Str(s))] if s == "sticky"));
    assert_eq!(fields_read(&e.req.block), ["customer.id"]);

    let c = loadbalance(&[
        ("policy", Value::str("sticky")),
        ("key_field", Value::str("nope")),
    ]);
    assert_eq!(
        c.errors(),
        [
            "`catalog.v1.LookupRequest` has no field `nope` (the request of `catalog.v1.Catalog/Lookup`)"
        ]
    );
    assert!(c.element.is_none());
}

#[test]
fn an_untyped_appnet_parameter_initialises_the_state_variable_of_its_name() {
    // AppNet's form: `init(max_concurrent_req):` fills the state variable of that name.
    let src = "state:
    max_concurrent_req: int
    pending_req: int

init(max_concurrent_req):
    pending_req = 0

req(rpc):
    match pending_req < max_concurrent_req:
        true =>
            pending_req = pending_req + 1
            send(rpc, Down)
        false =>
            send(err(circuit_breaker), Up)

resp(rpc):
    pending_req = pending_req - 1
    send(rpc, Up)
";
    let p = params(&[("max_concurrent_req", Value::Int(5))]);
    let e = run(src, None, Some(&p)).clean();
    let var = e.var("max_concurrent_req").unwrap();
    assert_eq!(e.state[var].ty, Type::Int);
    assert_eq!(e.state[var].from_param, Some(Value::Int(5)));
    assert_eq!(e.params, [("max_concurrent_req".to_owned(), Value::Int(5))]);
    // It stays state (the element may change it), so `req` loads it rather than folding it.
    let StmtKind::Match { scrutinee, arms } = &e.req.block[0].kind else {
        panic!()
    };
    let ExprKind::Binary { rhs, .. } = &scrutinee.kind else {
        panic!()
    };
    assert!(matches!(rhs.kind, ExprKind::StateLoad(v) if v == var));
    // AppNet's `err(NAME)` with an undeclared name means the text itself.
    let StmtKind::Send(SendKind::Reject { message, .. }) = &arms[1].body[0].kind else {
        panic!("{:?}", arms[1].body)
    };
    assert_eq!(constant(message), &Value::str("circuit_breaker"));

    // The type comes from the state declaration.
    let p = params(&[("max_concurrent_req", Value::str("five"))]);
    let c = run(src, None, Some(&p));
    assert_eq!(
        c.errors(),
        ["parameter `max_concurrent_req` is given a string, but it is declared `int`"]
    );
}

#[test]
fn an_untyped_parameter_without_a_namesake_takes_its_type_from_the_config() {
    let src = element("", "init(limit)", "x = limit + 1\nsend(rpc, Down)");
    // Checked alone (`weft check`), no value gives it a type: that is said, not refused
    // (language.md accepts the form), and its uses are checked once a config sets it.
    let c = run(&src, Some(&catalog()), None);
    assert!(c.errors().is_empty(), "{}", c.rendered());
    assert_eq!(
        c.warnings(),
        [
            "parameter `limit` takes its type from the chain config's value; its uses are checked only with one"
        ]
    );
    // A config that does not set it: only the declaration is wrong; its use is not also an
    // "unknown name".
    let c = run(&src, Some(&catalog()), Some(&params(&[])));
    assert_eq!(c.errors(), ["parameter `limit` has no type"]);
    let e = run(&src, None, Some(&params(&[("limit", Value::Int(3))]))).clean();
    assert_eq!(constant(the_assigned(&e.req, "x")), &Value::Int(4));
}

// ---- definite assignment -----------------------------------------------------------------

fn assignment_errors(req: &str) -> Vec<String> {
    let c = check_catalog(&req_only("quota: Map<string, int>", req));
    c.errors().into_iter().map(str::to_owned).collect()
}

const UNASSIGNED: &str = "`x` may be unassigned here";

#[test]
fn a_local_read_after_an_if_must_be_assigned_on_every_path() {
    let use_x = "set(rpc, 'offset', x)\nsend(rpc, Down)";
    let both = format!("if get(rpc, 'express'):\n    x = 1\nelse:\n    x = 2\n{use_x}");
    assert_eq!(assignment_errors(&both), Vec::<String>::new());
    let one = format!("if get(rpc, 'express'):\n    x = 1\n{use_x}");
    assert_eq!(assignment_errors(&one), [UNASSIGNED]);
    let elif_chain = format!(
        "if get(rpc, 'page') > 1:\n    x = 1\nelif get(rpc, 'express'):\n    x = 2\nelse:\n    x = 3\n{use_x}"
    );
    assert_eq!(assignment_errors(&elif_chain), Vec::<String>::new());
    let elif_no_else = format!(
        "if get(rpc, 'page') > 1:\n    x = 1\nelif get(rpc, 'express'):\n    x = 2\n{use_x}"
    );
    assert_eq!(assignment_errors(&elif_no_else), [UNASSIGNED]);
    // A branch that ends the handler does not continue to the read.
    let rejecting =
        format!("if get(rpc, 'express'):\n    x = 1\nelse:\n    send(err('slow'), Up)\n{use_x}");
    assert_eq!(assignment_errors(&rejecting), Vec::<String>::new());
}

#[test]
fn a_local_read_after_a_match_must_be_assigned_in_every_arm_that_continues() {
    let use_x = "set(rpc, 'offset', x)\nsend(rpc, Down)";
    let option = format!(
        "match get(quota, 'k'):\n    Some(v) =>\n        x = v\n    None =>\n        x = 0\n{use_x}"
    );
    assert_eq!(assignment_errors(&option), Vec::<String>::new());
    let bools = format!(
        "match get(rpc, 'express'):\n    true =>\n        x = 1\n    false =>\n        x = 2\n{use_x}"
    );
    assert_eq!(assignment_errors(&bools), Vec::<String>::new());
    // String arms without `_` can all miss.
    let strings = format!(
        "match get(rpc, 'card'):\n    'a' =>\n        x = 1\n    'b' =>\n        x = 2\n{use_x}"
    );
    assert_eq!(assignment_errors(&strings), [UNASSIGNED]);
    let default = format!(
        "match get(rpc, 'card'):\n    'a' =>\n        x = 1\n    _ =>\n        x = 2\n{use_x}"
    );
    assert_eq!(assignment_errors(&default), Vec::<String>::new());
}

#[test]
fn on_a_constant_only_the_taken_arm_must_assign() {
    let src = element(
        "",
        "init(mode: string = 'a')",
        "match mode:\n    'a' =>\n        x = 1\n    'b' =>\n        pass\nset(rpc, 'offset', x)\nsend(rpc, Down)",
    );
    run(&src, Some(&catalog()), None).clean();
    let p = params(&[("mode", Value::str("b"))]);
    let c = run(&src, Some(&catalog()), Some(&p));
    assert_eq!(c.errors(), [UNASSIGNED]);
}

#[test]
fn a_local_first_assigned_in_an_arm_never_taken_gets_its_type_from_the_live_code() {
    // In the arm `mode` never takes, the field this method lacks has no type (`Dyn`); the
    // local must not keep that type, or `x + 0.5` would reach the executors as an int plus
    // a float (and compiled code would keep an int in a handle's slot).
    let src = element(
        "",
        "init(mode: string = 'plain')",
        "match mode:\n    'legacy' =>\n        x = get(rpc, 'no_such_field')\n    _ =>\n        x = 1.5\ny = x + 0.5\nset_rpc_header(rpc, 'y', str(y))\nsend(rpc, Down)",
    );
    let e = run(&src, Some(&catalog()), None).clean();
    assert_eq!(local_ty(&e.req, "x"), &Type::Float);
    assert_eq!(local_ty(&e.req, "y"), &Type::Float);
    // An int assigned to it later is widened, as for any float local.
    let src = element(
        "",
        "init(mode: string = 'plain')",
        "match mode:\n    'legacy' =>\n        x = get(rpc, 'no_such_field')\n    _ =>\n        x = 1.5\nx = 2\nset_rpc_header(rpc, 'x', str(x))\nsend(rpc, Down)",
    );
    let e = run(&src, Some(&catalog()), None).clean();
    assert!(
        assigned(&e.req, "x").iter().all(|v| v.ty == Type::Float),
        "{:?}",
        assigned(&e.req, "x")
    );
    // The same for a per-RPC metadata entry.
    let src = element(
        "",
        "init(mode: string = 'plain')",
        "match mode:\n    'legacy' =>\n        set_metadata('u', get(rpc, 'no_such_field'))\n    _ =>\n        set_metadata('u', 1.5)\nsend(rpc, Down)",
    );
    let e = run(&src, Some(&catalog()), None).clean();
    assert_eq!(e.metadata, [("u".to_owned(), Type::Float)]);
}

#[test]
fn a_type_from_an_arm_never_taken_does_not_reach_live_code() {
    // A review's programs: each passed the checker and then failed at run time ("internal
    // type error"), or sent one RPC's request in place of another's.
    // Unpacked in live code, the local takes the pair's type, as an assignment gives it; a
    // later assignment of another type is then the error it would be anyway.
    let src = element(
        "",
        "init()",
        "if false:\n    x = get(rpc, 'no_such_field')\n(x, n) = (1, 2)\nif get(rpc, 'card') == 'bob':\n    x = 'hello'\nset(rpc, 'card', str(x))\nsend(rpc, Down)",
    );
    let c = run(&src, Some(&catalog()), None);
    assert_eq!(
        c.errors(),
        ["type mismatch: the value assigned to `x` must be `int`, found `string`"],
        "{}",
        c.rendered()
    );
    // A request kept from an earlier RPC through such a local is refused where it is sent.
    let src = "state:\n    saved: Response\n    have: bool\n\ninit(mode: string = 'a'):\n    pass\n\nreq(rpc):\n    match mode:\n        'b' =>\n            x = get(rpc, 'no_such_field')\n        _ =>\n            pass\n    if have:\n        (x, n) = (saved, 1)\n        send(x, Down)\n    (x, n) = (rpc, 1)\n    send(rpc, Down)\n\nresp(rpc):\n    send(rpc, Up)\n";
    let c = run(src, Some(&catalog()), None);
    assert!(
        c.errors().contains(&"a response cannot travel down"),
        "{}",
        c.rendered()
    );
    // Metadata read before the live `set_metadata` that types it: the read is the error.
    let src = element(
        "",
        "init(mode: string = 'a')",
        "match mode:\n    'b' =>\n        set_metadata('k', get(rpc, 'no_such_field'))\n    _ =>\n        pass\nforeach(get(rpc, 'skus'), lambda(s):\n    match get_metadata('k'):\n        Some(v) =>\n            set(rpc, 'card', v + 1)\n        None =>\n            pass\n    set_metadata('k', 'hello')\n)\nsend(rpc, Down)",
    );
    let c = run(&src, Some(&catalog()), None);
    assert_eq!(
        c.errors(),
        [
            "metadata `k` is read here before a `set_metadata` that runs for this method gives it a type"
        ],
        "{}",
        c.rendered()
    );
    // Read where it was only set in an arm never taken, and never set live, it stays
    // `None` at run time: that is allowed (the element fits other configs).
    let src = "state:\n    pass\n\ninit(mode: string = 'a'):\n    pass\n\nreq(rpc):\n    match mode:\n        'b' =>\n            set_metadata('k', get(rpc, 'no_such_field'))\n        _ =>\n            pass\n    send(rpc, Down)\n\nresp(rpc):\n    match get_metadata('k'):\n        Some(v) =>\n            set_rpc_header(rpc, 'k', str(v))\n        None =>\n            pass\n    send(rpc, Up)\n";
    run(src, Some(&catalog()), None).clean();
}

#[test]
fn reserved_names_and_options_in_state_are_refused() {
    // `None = 0` made `x == None` compare against 0.
    let c = check_catalog(&req_only("", "None = 0\nsend(rpc, Down)"));
    assert_eq!(c.errors(), ["`None` is reserved and cannot name a local"]);
    let c = check_catalog(&req_only("None: int", "send(rpc, Down)"));
    assert_eq!(c.errors(), ["`None` is reserved and cannot name state"]);
    let c = check_catalog(&element("", "init(inf: int = 3)", "send(rpc, Down)"));
    assert_eq!(
        c.errors(),
        ["`inf` is reserved and cannot name a parameter"]
    );
    // Options inside a collection, not only at the top (language.md: state cannot hold one).
    let c = check_catalog(&req_only(
        "m: Map<string, Option<int>>\nv: Vec<Option<int>>",
        "send(rpc, Down)",
    ));
    assert_eq!(
        c.errors(),
        [
            "state cannot hold `Map<string, Option<int>>`",
            "state cannot hold `Vec<Option<int>>`"
        ]
    );
}

#[test]
fn an_unknown_field_is_marked_inside_its_literal_only_when_written_without_escapes() {
    let mark = |literal: &str| {
        let src = req_only("", &format!("x = get(rpc, {literal})\nsend(rpc, Down)"));
        let c = check_catalog(&src);
        let d = c.diags.iter().find(|d| d.is_error()).expect("an error");
        c.file.text[d.span.start as usize..d.span.end as usize].to_owned()
    };
    assert_eq!(mark("'customer.nam'"), "nam");
    // The escapes make the source longer than the text: offsets into the text would mark
    // `x73` here.
    assert_eq!(mark("'\\x63ustomer.nam'"), "'\\x63ustomer.nam'");
}

#[test]
fn foreach_over_an_option_of_a_collection_unwraps_it_with_a_warning() {
    // AppNet's ServiceRouter loops over `get(backends, dst())` directly.
    let src = req_only(
        "backends: Map<string, Vec<string>>",
        "n = 0\nforeach(get(backends, dst()), lambda(b):\n    n = n + 1\n)\nset(rpc, 'limit', n)\nsend(rpc, Down)",
    );
    let c = check_catalog(&src);
    assert!(c.errors().is_empty(), "{}", c.rendered());
    assert_eq!(
        c.warnings(),
        ["an Option is used as a value: a missing entry rejects the RPC with INTERNAL"]
    );
    let e = c.clean_of_errors();
    let looped = all_stmts(&e.req.block)
        .into_iter()
        .find_map(|s| match &s.kind {
            StmtKind::ForEach { coll, .. } => Some(coll),
            _ => None,
        })
        .expect("a foreach");
    assert!(
        matches!(
            looped,
            Collection::Value(Expr {
                kind: ExprKind::Unwrap(_),
                ..
            })
        ),
        "{looped:?}"
    );
}

#[test]
fn a_literal_operand_takes_the_other_operands_type_not_the_contexts() {
    // A review: with a float `f`, `f = 100 * hits / total` divided as floats (33.33…) while
    // `f = hits * 100 / total` divided as ints (33.0); language.md says integer `/`
    // truncates. Both are integer divisions now, widened where they are assigned.
    for (i, expr) in [
        "100 * hits / total",
        "hits * 100 / total",
        "7 / total",
        "-7 / total",
    ]
    .into_iter()
    .enumerate()
    {
        let src = req_only(
            "f: float",
            &format!(
                "hits = get(rpc, 'limit')\ntotal = get(rpc, 'offset')\nf = {expr}\nsend(rpc, Down)"
            ),
        );
        let e = check_catalog(&src).clean();
        let value = stored(&e, &e.req, "f");
        let division = expr_tree(value)
            .into_iter()
            .find(|x| matches!(x.kind, ExprKind::Binary { op: BinOp::Div, .. }))
            .unwrap_or_else(|| panic!("{i}: no division in {value:?}"));
        assert_eq!(division.ty, Type::Int, "{expr}: {division:?}");
    }
    // All literals: the context still types them (`f = 1 / 2` is 0.5).
    let src = req_only("f: float", "f = 1 / 2\nsend(rpc, Down)");
    let e = check_catalog(&src).clean();
    assert_eq!(constant(stored(&e, &e.req, "f")), &Value::Float(0.5));
}

#[test]
fn an_element_writes_only_headers_of_its_own_that_grpc_can_carry() {
    let errors = |call: &str| {
        let c = check_catalog(&req_only("", &format!("{call}\nsend(rpc, Down)")));
        c.errors()
            .iter()
            .map(|e| (*e).to_owned())
            .collect::<Vec<_>>()
    };
    for reserved in [
        "grpc-status",
        ":authority",
        "content-type",
        "te",
        "weft-version",
    ] {
        assert_eq!(
            errors(&format!("set_rpc_header(rpc, '{reserved}', 'x')")),
            [format!(
                "header '{reserved}' belongs to gRPC or to Weft; an element cannot write it"
            )],
        );
    }
    assert_eq!(
        errors("set_rpc_header(rpc, 'x-bad value', 'x')"),
        [
            "'x-bad value' is not a gRPC metadata key: ' ' at byte 5; keys are lower-case letters, digits, `-`, `_` and `.`"
        ]
    );
    assert_eq!(
        errors("set_rpc_header(rpc, 'x-tenant', 'a\\r\\nInjected: 1')"),
        [
            "the value for header 'x-tenant' is not printable ASCII: byte 1 is 0x0d (CR); only a key ending in `-bin` carries other bytes"
        ]
    );
    assert!(errors("set_rpc_header(rpc, 'x-tenant.id_2', 'blue')").is_empty());
    assert!(errors("set_rpc_header(rpc, 'x-trace-bin', 'caf\u{e9}')").is_empty());
    // Reading them is fine.
    assert!(errors("x = get_rpc_header(rpc, 'grpc-timeout')").is_empty());
    // A `-bin` value is binary: elements never see one, so a literal read is a mistake.
    assert_eq!(
        errors("x = get_rpc_header(rpc, 'x-trace-bin')"),
        ["header 'x-trace-bin' is binary metadata, which elements never see: this reads '' always"]
    );
}

#[test]
fn a_read_modify_write_lambda_may_return_none_after_some() {
    let src = req_only(
        "m: Map<string, int>",
        "r = get(m, 'a', lambda(v):\n    if v > 0:\n        return Some(v)\n    return None\n)\nmatch r:\n    Some(n) =>\n        set(rpc, 'limit', n)\n    None =>\n        pass\nsend(rpc, Down)",
    );
    let e = check_catalog(&src).clean();
    assert_eq!(local_ty(&e.req, "r"), &Type::option(Type::Int));
}

#[test]
fn the_message_cannot_be_replaced_through_a_pair() {
    let src = "state:\n    last: Response\n\ninit():\n    pass\n\nreq(rpc):\n    send(rpc, Down)\n\nresp(rpc):\n    (rpc, n) = (last, 1)\n    send(rpc, Up)\n";
    let c = run(src, Some(&catalog()), None);
    assert_eq!(
        c.errors(),
        ["the message `rpc` cannot be reassigned"],
        "{}",
        c.rendered()
    );
}

#[test]
fn each_block_that_goes_on_after_its_end_is_warned_about() {
    let src = req_only(
        "",
        "if get(rpc, 'card') == 'a':\n    send(rpc, Down)\n    x = 1\nelse:\n    send(rpc, Down)\n    y = 2",
    );
    let c = check_catalog(&src);
    assert_eq!(
        c.warnings()
            .iter()
            .filter(|w| w.starts_with("unreachable code"))
            .count(),
        2,
        "{}",
        c.rendered()
    );
}

/// A parameter's value decides which arm runs, but the code after an arm that ends is
/// still reached with another value: warning about it would tell the author that correct
/// code is dead (an element that rejects an RPC unless a parameter names a fallback).
#[test]
fn code_after_an_arm_a_parameter_takes_is_not_unreachable() {
    let src = element(
        "",
        "init(fallback: string = '')",
        "tenant = get_rpc_header(rpc, 'x-tenant')\nif tenant == '':\n    if fallback == '':\n        send(err('no tenant', UNAUTHENTICATED), Up)\n    tenant = fallback\nset_rpc_header(rpc, 'x-t', tenant)\nsend(rpc, Down)",
    );
    for value in ["", "guest"] {
        let p = params(&[("fallback", Value::Str(value.into()))]);
        let c = run(&src, Some(&catalog()), Some(&p));
        assert!(c.errors().is_empty(), "{}", c.rendered());
        assert!(
            !c.warnings()
                .iter()
                .any(|w| w.starts_with("unreachable code")),
            "fallback = {value:?}: {}",
            c.rendered()
        );
    }
    // Every arm ending still makes what follows unreachable, whatever the parameter.
    let src = element(
        "",
        "init(fallback: string = '')",
        "if fallback == '':\n    send(err('no tenant', UNAUTHENTICATED), Up)\nelse:\n    send(rpc, Down)\nx = 1",
    );
    let c = run(&src, Some(&catalog()), None);
    assert_eq!(
        c.warnings()
            .iter()
            .filter(|w| w.starts_with("unreachable code"))
            .count(),
        1,
        "{}",
        c.rendered()
    );
}

// ---- lambdas -----------------------------------------------------------------------------

#[test]
fn a_foreach_lambda_assigns_outer_locals_and_keeps_its_own_locals() {
    let src = req_only(
        "",
        "best = ''
count = 0
foreach(get(rpc, 'skus'), lambda(s):
    if s > best:
        best = s
    count = count + 1
    seen = s
)
set(rpc, 'card', best)
send(rpc, Down)",
    );
    let e = check_catalog(&src).clean();
    let body = &e.req;
    // One slot each: the assignments in the lambda write the outer locals.
    assert_eq!(assigned(body, "best").len(), 2);
    assert_eq!(assigned(body, "count").len(), 2);
    let StmtKind::ForEach { body: inner, .. } = &body.block[2].kind else {
        panic!("{:?}", body.block[2])
    };
    let best = local(body, "best");
    assert!(
        all_stmts(inner)
            .iter()
            .any(|s| matches!(s.kind, StmtKind::Assign { local, .. } if local == best))
    );
    // A name first assigned in the lambda belongs to the lambda.
    let after = src.replace("set(rpc, 'card', best)", "set(rpc, 'card', seen)");
    assert_eq!(check_catalog(&after).errors(), ["unknown name `seen`"]);
}

#[test]
fn a_read_modify_write_lambda_updates_its_binder_and_returns_the_result() {
    let e = check_catalog(&req_only(
        "hits: Map<string, int>",
        "n = get(hits, get(rpc, 'card'), lambda(v):
    v = v + 1
    return v
)
set(rpc, 'offset', n)
send(rpc, Down)",
    ))
    .clean();
    assert_eq!(*local_ty(&e.req, "n"), Type::Int);
    let ExprKind::StateRmw { binder, body, .. } = &the_assigned(&e.req, "n").kind else {
        panic!()
    };
    assert_eq!(e.req.locals[*binder].ty, Type::Int);
    assert!(matches!(body[0].kind, StmtKind::Assign { local, .. } if local == *binder));

    let c = check_catalog(&req_only(
        "hits: Map<string, int>",
        "get(hits, 'k', lambda(v):\n    send(rpc, Down)\n)\nsend(rpc, Down)",
    ));
    assert_eq!(
        c.errors(),
        ["`send` inside `get(…, lambda)` is not allowed"]
    );
}

// ---- field resolution ----------------------------------------------------------------------

/// The type of `get(rpc, PATH)` in `req` (or `resp`), or the error message.
fn field(path: &str, in_resp: bool) -> Result<Type, String> {
    let read = format!("x = get(rpc, '{path}')");
    let src = if in_resp {
        format!(
            "state:\n    pass\n\ninit():\n    pass\n\nreq(rpc):\n    send(rpc, Down)\n\nresp(rpc):\n    {read}\n    send(rpc, Up)\n"
        )
    } else {
        req_only("", &format!("{read}\nsend(rpc, Down)"))
    };
    let c = check_catalog(&src);
    match c.element {
        Some(e) => {
            assert!(c.diags.is_empty(), "{}", render_all(&c.file, &c.diags));
            let body = if in_resp { &e.resp } else { &e.req };
            Ok(local_ty(body, "x").clone())
        }
        None => Err(c.errors().join("; ")),
    }
}

#[test]
fn field_paths_resolve_to_the_language_types_of_their_leaves() {
    let expected = [
        ("customer.id", Type::Str),
        ("customer.address.city", Type::Str),
        ("customer.address.geo.lat", Type::Float),
        // Enums read as their numbers.
        ("customer.tier", Type::Int),
        ("skus", Type::vec(Type::Str)),
        ("quantities", Type::vec(Type::Int)),
        ("tiers", Type::vec(Type::Int)),
        ("budget", Type::map(Type::Str, Type::Int)),
        ("flags", Type::map(Type::Uint, Type::Bool)),
        // The members of a oneof are ordinary fields.
        ("card", Type::Str),
        ("account", Type::Uint),
        ("page", Type::Uint),
        ("discount", Type::Float),
        ("token", Type::Bytes),
        ("express", Type::Bool),
        ("offset", Type::Int),
        ("nonce", Type::Uint),
        ("limit", Type::Int),
    ];
    for (path, ty) in expected {
        assert_eq!(field(path, false), Ok(ty), "{path}");
    }
    // In `resp` the message is the response.
    assert_eq!(field("body", true), Ok(Type::Str));
    assert_eq!(field("code", true), Ok(Type::Int));
}

#[test]
fn resolved_paths_record_each_step_and_oneof_siblings() {
    let e = check_catalog(&req_only(
        "",
        "a = get(rpc, 'customer.address.geo.lat')\nb = get(rpc, 'card')\nsend(rpc, Down)",
    ))
    .clean();
    let path = |name: &str| match &the_assigned(&e.req, name).kind {
        ExprKind::Field { field, .. } => field.clone(),
        other => panic!("{other:?}"),
    };
    let lat = path("a");
    let steps: Vec<(&str, u32)> = lat
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.number))
        .collect();
    assert_eq!(
        steps,
        [("customer", 1), ("address", 2), ("geo", 2), ("lat", 1)]
    );
    assert_eq!(path("b").leaf().unwrap().oneof_siblings, [6]);
}

#[test]
fn unreadable_field_paths_are_errors_that_say_why() {
    const IN: &str = " (the request of `catalog.v1.Catalog/Lookup`)";
    let cases = [
        ("customer", "`customer` is a message, not a value"),
        (
            "drops",
            "`drops` is a list of messages; field paths read scalars, lists of scalars and maps with scalar values",
        ),
        (
            "depots",
            "`depots` is a map with message values; field paths read scalars, lists of scalars and maps with scalar values",
        ),
        (
            "skus.first",
            "`skus` is a repeated field; a field path cannot step into its elements",
        ),
        (
            "budget.food",
            "`budget` is a map; a field path cannot step into its entries",
        ),
        (
            "customer.adress.city",
            "`customer` is a `catalog.v1.Customer`, which has no field `adress`",
        ),
        (
            "customer.id.text",
            "`customer.id` has type string, not a message, so it has no field `text`",
        ),
    ];
    for (path, message) in cases {
        assert_eq!(field(path, false), Err(format!("{message}{IN}")), "{path}");
    }
    // A request field is not a response field.
    assert_eq!(
        field("skus", true),
        Err(
            "`catalog.v1.LookupReply` has no field `skus` (the response of `catalog.v1.Catalog/Lookup`)"
                .into()
        )
    );
    // The hints name what would work.
    let c = check_catalog(&req_only("", "x = get(rpc, 'customer')\nsend(rpc, Down)"));
    assert_eq!(
        c.diags[0].hint.as_deref(),
        Some(
            "`customer` is a message; name one of its fields: customer.id, customer.address, customer.tier"
        )
    );
    let c = check_catalog(&req_only(
        "",
        "x = get(rpc, 'customer.adress')\nsend(rpc, Down)",
    ));
    assert_eq!(
        c.diags[0].hint.as_deref(),
        Some("did you mean `customer.address`?")
    );
}

// ---- warnings ----------------------------------------------------------------------------

const OPTION_AS_VALUE: &str =
    "an Option is used as a value: a missing entry rejects the RPC with INTERNAL";

#[test]
fn an_option_used_as_a_value_is_unwrapped_with_a_warning() {
    let c = check_catalog(&req_only(
        "quota: Map<string, int>",
        "x = get(quota, 'a') + 1\nset(rpc, 'offset', get(quota, 'b'))\nsend(rpc, Down)",
    ));
    assert_eq!(c.warnings(), [OPTION_AS_VALUE, OPTION_AS_VALUE]);
    assert!(c.errors().is_empty());
    // Warnings do not stop the element: the IR has an explicit unwrap.
    let e = c.element.unwrap();
    let ExprKind::Binary { lhs, .. } = &the_assigned(&e.req, "x").kind else {
        panic!()
    };
    assert!(
        matches!(&lhs.kind, ExprKind::Unwrap(inner) if matches!(inner.kind, ExprKind::StateGet { .. }))
    );
    assert_eq!(lhs.ty, Type::Int);

    // Matching on the Option is the warning-free way.
    check_catalog(&req_only(
        "quota: Map<string, int>",
        "match get(quota, 'a'):\n    Some(q) =>\n        set(rpc, 'offset', q + 1)\n    None =>\n        pass\nsend(rpc, Down)",
    ))
    .clean();
}

#[test]
fn requests_cannot_be_kept_in_state_anywhere() {
    for ty in [
        "Request",
        "Map<string, Request>",
        "Map<int, <int, Request>>",
    ] {
        let c = check_catalog(&req_only(&format!("kept: {ty}"), "send(rpc, Down)"));
        assert_eq!(
            c.errors(),
            [format!("state cannot hold `{ty}`").as_str()],
            "{ty}"
        );
    }
    // Responses may be kept: that is what a cache does.
    check_catalog(&req_only("kept: Map<string, Response>", "send(rpc, Down)")).clean();
}

#[test]
fn require_checks_parameters_in_init_and_nowhere_else() {
    let src = "state:\n    pass\n\ninit(n: int = 1):\n    require(n > 0, 'n must be positive, got ' + str(n))\n\nreq(rpc):\n    send(rpc, Down)\n\nresp(rpc):\n    send(rpc, Up)\n";
    let e = check_catalog(src).clean();
    // Kept as a statement with its two arguments, though it has no value.
    let init = &e.init;
    assert!(
        all_stmts(&init.block).iter().any(|s| matches!(
            &s.kind,
            StmtKind::Eval(Expr { kind: ExprKind::Call { builtin: Builtin::Require, args }, .. })
                if args.len() == 2
        )),
        "{:?}",
        init.block
    );

    // In a handler it would fail RPCs, which is what `send(err(…), Up)` is for.
    let c = check_catalog(&req_only("", "require(true, 'x')\nsend(rpc, Down)"));
    assert_eq!(
        c.errors(),
        ["`require(…)` checks parameters when an instance starts; it belongs in `init`"]
    );
    // No value to use, and typed arguments.
    let c = check_catalog(&element(
        "",
        "init()",
        "x = require(true, 'x')\nsend(rpc, Down)",
    ));
    assert_eq!(c.errors(), ["`require(…)` is a statement and has no value"]);
    let bad_types = "state:\n    pass\n\ninit():\n    require(1, 2)\n\nreq(rpc):\n    send(rpc, Down)\n\nresp(rpc):\n    send(rpc, Up)\n";
    assert_eq!(check_catalog(bad_types).errors().len(), 2);
}

#[test]
fn an_expression_of_constants_that_always_fails_is_warned_about_where_it_runs() {
    // Left in place (it fails when it runs), with the run-time error as the warning.
    let c = check_catalog(&req_only(
        "",
        "x = 1 / 0\ny = int(1e300) + 1\nsend(rpc, Down)",
    ));
    assert!(c.errors().is_empty(), "{}", c.rendered());
    assert_eq!(
        c.warnings()
            .iter()
            .filter(|w| w.starts_with("this always fails when it runs: "))
            .count(),
        2,
        "{}",
        c.rendered()
    );
    assert!(c.warnings().iter().any(|w| w.contains("division by zero")));
    assert!(c.warnings().iter().any(|w| w.contains("int(1e300)")));
    // Not in an arm a parameter never takes: that code never runs.
    let dead = "state:\n    pass\n\ninit(p: string = 'a'):\n    pass\n\nreq(rpc):\n    match p:\n        'b' =>\n            x = 1 / 0\n        _ =>\n            pass\n    send(rpc, Down)\n\nresp(rpc):\n    send(rpc, Up)\n";
    let c = check_catalog(dead);
    assert!(
        !c.warnings()
            .iter()
            .any(|w| w.starts_with("this always fails")),
        "{}",
        c.rendered()
    );
}
