//! Prints a syntax tree back as source, fully parenthesised where precedence requires.
//!
//! Used by the random-program generator (tests and fuzzing build trees, print them and feed
//! the text through the whole front end) and by round-trip tests of the parser.

use std::fmt::Write as _;

use crate::ast::*;

pub fn print_element(file: &ElementFile) -> String {
    let mut out = String::new();
    if let Some(state) = &file.state {
        out.push_str("state:\n");
        if state.decls.is_empty() {
            out.push_str("    pass\n");
        }
        for d in &state.decls {
            if !d.decorators.is_empty() {
                out.push_str("    ");
                for dec in &d.decorators {
                    let _ = write!(out, "@{}({}) ", dec.name.name, dec.arg.name);
                }
                out.push('\n');
            }
            let _ = writeln!(out, "    {}: {}", d.name.name, print_type(&d.ty));
        }
        out.push('\n');
    }
    if let Some(init) = &file.init {
        let params: Vec<String> = init
            .params
            .iter()
            .map(|p| {
                let mut s = p.name.name.clone();
                if let Some(t) = &p.ty {
                    let _ = write!(s, ": {}", print_type(t));
                }
                if let Some(d) = &p.default {
                    let _ = write!(s, " = {}", print_expr(d, 1));
                }
                s
            })
            .collect();
        let _ = writeln!(out, "init({}):", params.join(", "));
        print_block(&mut out, &init.body, 1);
        out.push('\n');
    }
    for (name, h) in [("req", &file.req), ("resp", &file.resp)] {
        if let Some(h) = h {
            let _ = writeln!(out, "{name}({}):", h.param.name);
            print_block(&mut out, &h.body, 1);
            out.push('\n');
        }
    }
    out
}

pub fn print_type(t: &TypeExpr) -> String {
    match t {
        TypeExpr::Named(i) => i.name.clone(),
        TypeExpr::Generic { name, args, .. } => {
            let args: Vec<String> = args.iter().map(print_type).collect();
            format!("{}<{}>", name.name, args.join(", "))
        }
        TypeExpr::Pair(a, b, _) => format!("<{}, {}>", print_type(a), print_type(b)),
    }
}

fn indent(out: &mut String, level: usize) {
    for _ in 0..level {
        out.push_str("    ");
    }
}

fn print_block(out: &mut String, block: &Block, level: usize) {
    if block.stmts.is_empty() {
        indent(out, level);
        out.push_str("pass\n");
    }
    for s in &block.stmts {
        print_stmt(out, s, level);
    }
}

fn print_stmt(out: &mut String, s: &Stmt, level: usize) {
    indent(out, level);
    match &s.kind {
        StmtKind::Assign { target, value } => {
            let t = match target {
                AssignTarget::Name(n) => n.name.clone(),
                AssignTarget::Pair(a, b) => format!("({}, {})", a.name, b.name),
            };
            let _ = writeln!(out, "{t} = {}", print_expr_at(value, 1, level));
        }
        StmtKind::Expr(e) => {
            let _ = writeln!(out, "{}", print_expr_at(e, 1, level));
        }
        StmtKind::Match { scrutinee, arms } => {
            let _ = writeln!(out, "match {}:", print_expr_at(scrutinee, 1, level));
            for arm in arms {
                indent(out, level + 1);
                let _ = writeln!(out, "{} =>", print_pattern(&arm.pattern));
                print_block(out, &arm.body, level + 2);
            }
        }
        StmtKind::If {
            branches,
            otherwise,
        } => {
            for (i, (cond, body)) in branches.iter().enumerate() {
                if i > 0 {
                    indent(out, level);
                }
                let kw = if i == 0 { "if" } else { "elif" };
                let _ = writeln!(out, "{kw} {}:", print_expr_at(cond, 1, level));
                print_block(out, body, level + 1);
            }
            if let Some(body) = otherwise {
                indent(out, level);
                out.push_str("else:\n");
                print_block(out, body, level + 1);
            }
        }
        StmtKind::Return(None) => out.push_str("return\n"),
        StmtKind::Return(Some(e)) => {
            let _ = writeln!(out, "return {}", print_expr_at(e, 1, level));
        }
        StmtKind::Pass => out.push_str("pass\n"),
    }
}

fn print_pattern(p: &Pattern) -> String {
    match &p.kind {
        PatternKind::Wildcard => "_".into(),
        PatternKind::None => "None".into(),
        PatternKind::Some(None) => "Some(_)".into(),
        PatternKind::Some(Some(b)) => format!("Some({})", b.name),
        PatternKind::Lit(l) => print_lit(l),
    }
}

fn print_lit(l: &Lit) -> String {
    match l {
        Lit::Int(i) => i.to_string(),
        Lit::Float(f) => {
            if f.is_finite() {
                let s = format!("{f:?}");
                if s.contains('.') || s.contains('e') {
                    s
                } else {
                    format!("{s}.0")
                }
            } else {
                // No literal spells infinity; the built-ins do.
                if f.is_nan() {
                    "(inf_f - inf_f)".into()
                } else if *f > 0.0 {
                    "inf_f".into()
                } else {
                    "(0.0 - inf_f)".into()
                }
            }
        }
        Lit::Str(s) => {
            let mut out = String::from("'");
            for c in s.chars() {
                match c {
                    '\'' => out.push_str("\\'"),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\t' => out.push_str("\\t"),
                    '\r' => out.push_str("\\r"),
                    '\0' => out.push_str("\\0"),
                    c => out.push(c),
                }
            }
            out.push('\'');
            out
        }
        Lit::Bool(b) => b.to_string(),
    }
}

/// Prints an expression that appears where operators of precedence `min` or higher bind
/// without parentheses.
pub fn print_expr(e: &Expr, min: u8) -> String {
    print_expr_at(e, min, 0)
}

fn print_expr_at(e: &Expr, min: u8, level: usize) -> String {
    match &e.kind {
        ExprKind::Lit(l) => {
            let s = print_lit(l);
            // A negative literal is a unary minus to the parser's eye in tight positions.
            if s.starts_with('-') && min > crate::ast::NOT_PRECEDENCE {
                format!("({s})")
            } else {
                s
            }
        }
        ExprKind::Name(n) => n.clone(),
        ExprKind::Call { func, args } => {
            let args: Vec<String> = args.iter().map(|a| print_expr_at(a, 1, level)).collect();
            format!("{}({})", func.name, args.join(", "))
        }
        ExprKind::Unary { op, operand } => {
            let (sym, prec) = match op {
                UnOp::Not => ("not ", crate::ast::NOT_PRECEDENCE),
                UnOp::Neg => ("-", crate::ast::NEG_PRECEDENCE),
            };
            let inner = print_expr_at(operand, prec, level);
            let s = format!("{sym}{inner}");
            if prec < min { format!("({s})") } else { s }
        }
        ExprKind::Binary { op, lhs, rhs } => {
            let prec = op.precedence();
            // Left-associative: the right operand needs strictly tighter binding, and
            // comparisons do not chain at all.
            let l = print_expr_at(lhs, if op.is_comparison() { prec + 1 } else { prec }, level);
            let r = print_expr_at(rhs, prec + 1, level);
            let s = format!("{l} {} {r}", op.symbol());
            if prec < min { format!("({s})") } else { s }
        }
        ExprKind::Pair(a, b) => {
            format!(
                "({}, {})",
                print_expr_at(a, 1, level),
                print_expr_at(b, 1, level)
            )
        }
        ExprKind::Lambda(l) => {
            let params: Vec<&str> = l.params.iter().map(|p| p.name.as_str()).collect();
            let mut s = format!("lambda({}):\n", params.join(", "));
            print_block(&mut s, &l.body, level + 1);
            indent(&mut s, level);
            s
        }
        ExprKind::Error => "<error>".into(),
    }
}
