#![allow(clippy::unwrap_used)]

use weft_ir::ast::*;
use weft_ir::diag::{SourceFile, render_all};
use weft_ir::parser::{parse, parse_expr};
use weft_ir::printer::print_element;

/// The expression as an S-expression, so tests state the tree's shape, not its spans.
fn sexpr(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Lit(Lit::Int(i)) => i.to_string(),
        ExprKind::Lit(Lit::Float(f)) => format!("{f:?}"),
        ExprKind::Lit(Lit::Str(s)) => format!("'{s}'"),
        ExprKind::Lit(Lit::Bool(b)) => b.to_string(),
        ExprKind::Name(n) => n.clone(),
        ExprKind::Call { func, args } => {
            let a: Vec<String> = args.iter().map(sexpr).collect();
            format!("{}({})", func.name, a.join(" "))
        }
        ExprKind::Unary { op, operand } => format!("({op:?} {})", sexpr(operand)),
        ExprKind::Binary { op, lhs, rhs } => {
            format!("({} {} {})", op.symbol(), sexpr(lhs), sexpr(rhs))
        }
        ExprKind::Pair(a, b) => format!("(pair {} {})", sexpr(a), sexpr(b)),
        ExprKind::Lambda(l) => format!("(lambda {})", l.params.len()),
        ExprKind::Error => "ERROR".into(),
    }
}

fn expr(src: &str) -> String {
    let (e, d) = parse_expr(&SourceFile::new("e", src));
    assert!(d.is_empty(), "{src}: {d:?}");
    sexpr(&e)
}

fn parse_ok(src: &str) -> ElementFile {
    let f = SourceFile::new("t.weft", src);
    let (file, diags) = parse(&f);
    assert!(
        diags.is_empty(),
        "unexpected diagnostics:\n{}",
        render_all(&f, &diags)
    );
    file
}

fn parse_errors(src: &str) -> Vec<String> {
    let f = SourceFile::new("t.weft", src);
    let (_, diags) = parse(&f);
    diags.iter().map(|d| d.message.clone()).collect()
}

#[test]
fn multiplication_binds_tighter_than_addition() {
    assert_eq!(expr("1 + 2 * 3"), "(+ 1 (* 2 3))");
    assert_eq!(expr("(1 + 2) * 3"), "(* (+ 1 2) 3)");
    assert_eq!(expr("10 - 4 - 3"), "(- (- 10 4) 3)");
    assert_eq!(expr("8 / 4 % 3"), "(% (/ 8 4) 3)");
}

#[test]
fn comparisons_bind_tighter_than_and_which_binds_tighter_than_or() {
    assert_eq!(expr("a < b and c < d"), "(and (< a b) (< c d))");
    assert_eq!(expr("a or b and c"), "(or a (and b c))");
    assert_eq!(expr("x + 1 >= y * 2"), "(>= (+ x 1) (* y 2))");
}

#[test]
fn not_sits_between_and_and_comparisons() {
    assert_eq!(expr("not a == b"), "(Not (== a b))");
    assert_eq!(expr("not a and b"), "(and (Not a) b)");
    assert_eq!(expr("not not a"), "(Not (Not a))");
}

#[test]
fn unary_minus_binds_tightest_and_folds_into_literals() {
    assert_eq!(expr("-x * y"), "(* (Neg x) y)");
    assert_eq!(expr("-3 * 2"), "(* -3 2)");
    assert_eq!(expr("-9223372036854775808"), "-9223372036854775808");
    assert_eq!(expr("a - -1"), "(- a -1)");
}

#[test]
fn calls_pairs_and_lambdas() {
    assert_eq!(expr("get(m, get(rpc, 'user'))"), "get(m get(rpc 'user'))");
    assert_eq!(expr("(a, b + 1)"), "(pair a (+ b 1))");
    assert_eq!(expr("f()"), "f()");
    assert_eq!(
        expr("get(m, k, lambda(v): return v + 1)"),
        "get(m k (lambda 1))"
    );
}

#[test]
fn chained_comparison_is_an_error() {
    let (_, d) = parse_expr(&SourceFile::new("e", "a < b < c"));
    assert_eq!(d.len(), 1);
    assert!(d[0].message.contains("cannot be chained"));
    assert_eq!(d[0].hint.as_deref(), Some("write `a < b and b < c`"));
}

/// Written in AppNet's concrete syntax: tabs and spaces mixed at one level, an untyped
/// `init` parameter, `match(…)` with parentheses, `//` comments, trailing spaces after `=>`.
const APPNET_STYLE: &str = concat!(
    "state:\n",
    "\tmax_concurrent_req: int\n",
    "    pending_req: int\n",
    "    drop_count: int\n",
    "\n",
    "init(max_concurrent_req):\n",
    "\tmax_concurrent_req = 1\n",
    "    pending_req = 0\n",
    "\n",
    "req(rpc):\n",
    "\tmatch(pending_req <= max_concurrent_req):\n",
    "\t\ttrue => \n",
    "            pending_req = pending_req + 1\n",
    "\t\t\tsend(rpc, Down)\n",
    "\t\tfalse =>\n",
    "            drop_count = drop_count + 1 // count it\n",
    "\t\t\tsend(err('circuit breaker'), Up)\n",
    "\n",
    "resp(rpc):\n",
    "\tpending_req = pending_req - 1\n",
    "    send(rpc, Up)\n",
);

#[test]
fn appnet_concrete_syntax_parses() {
    let f = parse_ok(APPNET_STYLE);
    let state = f.state.unwrap();
    assert_eq!(state.decls.len(), 3);
    let init = f.init.unwrap();
    assert_eq!(init.params.len(), 1);
    assert!(init.params[0].ty.is_none());
    let req = f.req.unwrap();
    let StmtKind::Match { scrutinee, arms } = &req.body.stmts[0].kind else {
        panic!()
    };
    assert_eq!(sexpr(scrutinee), "(<= pending_req max_concurrent_req)");
    assert_eq!(arms.len(), 2);
    assert_eq!(arms[0].body.stmts.len(), 2);
    assert_eq!(arms[1].body.stmts.len(), 2);
}

const LAMBDA_BLOCKS: &str = "\
state:
    @consistency(strong) @combiner(sum) @persistence(true)
    bucket: Map<string, int>
    load_map: Map<int, <int, Instant>>
    hot: Vec< <int, float> >

init(capacity: int = 10, names: Vec<string> = names_default()):
    pass

req(rpc):
    key = get(rpc, 'dst')
    has_token = get(bucket, key, lambda(token):
        match token > 0:
            true =>
                token = token - 1
                return true
            false =>
                return false
    )
    foreach(hot, lambda(x):
        (a, b) = x
        if a > 1:
            send(rpc, Down)
        elif a == 0:
            pass
        else:
            set(bucket, 'x', a))
    match has_token:
        true => send(rpc, Down)
        _ => send(err('rate limited', RESOURCE_EXHAUSTED), Up)

resp(rpc):
    send(rpc, Up)
";

#[test]
fn multi_line_lambdas_decorators_and_generic_types() {
    let f = parse_ok(LAMBDA_BLOCKS);
    let state = f.state.unwrap();
    assert_eq!(state.decls[0].decorators.len(), 3);
    assert_eq!(state.decls[0].decorators[1].arg.name, "sum");
    assert!(matches!(state.decls[1].ty, TypeExpr::Generic { ref args, .. } if args.len() == 2));
    let init = f.init.unwrap();
    assert!(init.params[0].default.is_some());
    let req = f.req.unwrap();
    assert_eq!(req.body.stmts.len(), 4, "{:#?}", req.body.stmts);
    let StmtKind::Assign { value, .. } = &req.body.stmts[1].kind else {
        panic!()
    };
    let ExprKind::Call { args, .. } = &value.kind else {
        panic!()
    };
    let ExprKind::Lambda(l) = &args[2].kind else {
        panic!()
    };
    assert_eq!(l.body.stmts.len(), 1);
    let StmtKind::Expr(fe) = &req.body.stmts[2].kind else {
        panic!()
    };
    let ExprKind::Call { args, .. } = &fe.kind else {
        panic!()
    };
    let ExprKind::Lambda(l) = &args[1].kind else {
        panic!()
    };
    assert_eq!(l.body.stmts.len(), 2);
    let StmtKind::If {
        branches,
        otherwise,
    } = &l.body.stmts[1].kind
    else {
        panic!()
    };
    assert_eq!(branches.len(), 2);
    assert!(otherwise.is_some());
}

#[test]
fn printing_and_reparsing_gives_the_same_tree_shape() {
    for src in [APPNET_STYLE, LAMBDA_BLOCKS] {
        let first = parse_ok(src);
        let printed = print_element(&first);
        let second = parse_ok(&printed);
        assert_eq!(
            print_element(&second),
            printed,
            "printer is not a fixed point"
        );
    }
}

#[test]
fn several_errors_are_reported_in_one_run() {
    let errs = parse_errors(
        "state:\n    x: int\ninit():\n    a = (1 +\n    b = 2 *\nreq(rpc):\n    send(rpc Down)\nresp(rpc):\n    send(rpc, Up)\n",
    );
    assert!(errs.len() >= 2, "{errs:?}");
}

#[test]
fn missing_and_misordered_sections_are_named() {
    let errs = parse_errors("state:\n    pass\nreq(rpc):\n    send(rpc, Down)\n");
    assert!(
        errs.iter().any(|e| e == "missing section `init`"),
        "{errs:?}"
    );
    assert!(
        errs.iter().any(|e| e == "missing section `resp`"),
        "{errs:?}"
    );
    let errs = parse_errors(
        "init():\n    pass\nstate:\n    pass\nreq(rpc):\n    pass\nresp(rpc):\n    pass\n",
    );
    assert_eq!(errs, vec!["section `state` must come before `init`"]);
}

#[test]
fn long_operator_and_elif_chains_are_refused_not_a_stack_overflow() {
    // Flat in the source, but each operator or `elif` is a level of the tree that the
    // checker and both executors walk recursively (and that dropping it recurses through).
    let section = |body: &str| {
        format!("state:\n    pass\ninit():\n{body}req(rpc):\n    pass\nresp(rpc):\n    pass\n")
    };
    let errs = parse_errors(&section(&format!("    x = 1{}\n", " + 1".repeat(50_000))));
    assert!(
        errs.iter()
            .any(|e| e.contains("too many operators in a row")),
        "{errs:?}"
    );
    let elifs = "    elif x == 1:\n        pass\n".repeat(5_000);
    let errs = parse_errors(&section(&format!(
        "    x = 0\n    if x == 0:\n        pass\n{elifs}"
    )));
    assert!(
        errs.iter().any(|e| e.contains("too many `elif` branches")),
        "{errs:?}"
    );
    // A chain of a reasonable length is fine.
    let errs = parse_errors(&section(&format!("    x = 1{}\n", " + 1".repeat(40))));
    assert!(errs.is_empty(), "{errs:?}");
}

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    let depth = 5000;
    let src = format!(
        "state:\n    pass\ninit():\n    x = {}1{}\nreq(rpc):\n    pass\nresp(rpc):\n    pass\n",
        "(".repeat(depth),
        ")".repeat(depth)
    );
    let errs = parse_errors(&src);
    // Said once: the parentheses left open by the cut are not reported one by one.
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs.iter().any(|e| e.contains("nested too deeply")),
        "{errs:?}"
    );
    // Each input is well formed except for its depth (an unclosed `(` would be reported as
    // such, with the depth error on its line dropped as a follow-on).
    for (prefix, suffix) in [("not ", ""), ("- ", ""), ("f(", ")")] {
        let src = format!(
            "state:\n    pass\ninit():\n    x = {}1{}\nreq(rpc):\n    pass\nresp(rpc):\n    pass\n",
            prefix.repeat(depth),
            suffix.repeat(depth)
        );
        let errs = parse_errors(&src);
        assert!(
            errs.iter().any(|e| e.contains("nested too deeply")),
            "{prefix}: {errs:?}"
        );
    }
    let mut src = String::from("state:\n    pass\ninit():\n");
    for level in 1..200 {
        src.push_str(&"    ".repeat(level));
        src.push_str("if true:\n");
    }
    src.push_str(&"    ".repeat(200));
    src.push_str("pass\nreq(rpc):\n    pass\nresp(rpc):\n    pass\n");
    let errs = parse_errors(&src);
    assert!(
        errs.iter().any(|e| e.contains("nested too deeply")),
        "{errs:?}"
    );
}

/// A character that shows as nothing, or that a terminal would act on, is named by its code
/// point in the message.
#[test]
fn invisible_unexpected_characters_are_named_by_code_point() {
    for (c, named) in [('\u{1b}', "\\u{1b}"), ('\u{200b}', "\\u{200b}"), ('$', "$")] {
        let src = SourceFile::new("u.weft", format!("req(rpc):\n    x = 1 {c} 2\n"));
        let (_, diags) = parse(&src);
        let want = format!("unexpected character `{named}`");
        assert!(
            diags.iter().any(|d| d.message == want),
            "{want} missing in:\n{}",
            render_all(&src, &diags)
        );
    }
}

/// A run of the same unexpected character is one diagnostic over the whole run.
#[test]
fn a_run_of_one_unexpected_character_is_one_diagnostic() {
    let text = "req(rpc):\n    x = 1 \u{200b}\u{200b}\u{200b} + $$ 2\n";
    let src = SourceFile::new("r.weft", text);
    let (_, diags) = parse(&src);
    let unexpected: Vec<_> = diags
        .iter()
        .filter(|d| d.message.starts_with("unexpected character"))
        .map(|d| (d.message.as_str(), src.slice(d.span)))
        .collect();
    assert_eq!(
        unexpected,
        [
            (
                "unexpected character `\\u{200b}` (3 in a row)",
                "\u{200b}\u{200b}\u{200b}"
            ),
            ("unexpected character `$` (2 in a row)", "$$"),
        ],
        "{}",
        render_all(&src, &diags)
    );
}

/// Two mistakes of someone used to Python, each reported once, where the error is: a third
/// element of a tuple (not also the `)` the parser then expected), and `p.1` for a pair's
/// element (not `found \`0.1\``, a number the source does not have).
#[test]
fn tuple_mistakes_are_reported_once_where_they_are() {
    let section = |body: &str| {
        format!("state:\n    pass\ninit():\n{body}req(rpc):\n    pass\nresp(rpc):\n    pass\n")
    };
    let errs = parse_errors(&section("    x = ('a', 'b', 'c')\n"));
    assert_eq!(errs, ["tuples have exactly two elements"], "{errs:?}");
    let errs = parse_errors(&section(
        "    p = ('a', 1)\n    if p.1 > 0:\n        pass\n",
    ));
    assert_eq!(
        errs,
        ["`.1` does not read an element: pairs have no element access"],
        "{errs:?}"
    );
    // A number written `.5` is still one, after an operator, a `(` or a space.
    for ok in [
        "    x = .5\n",
        "    x = 1.0 + .5\n",
        "    x = min(.5, 1.0)\n",
    ] {
        let errs = parse_errors(&section(ok));
        assert!(errs.is_empty(), "{ok}: {errs:?}");
    }
}
