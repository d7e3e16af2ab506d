//! Expressions: literals, names, operators, and the conversions the language allows.

use weft_hostcalls::state::CellKind;
use weft_hostcalls::{Code, Value};

use super::*;
use crate::ast::{self, BinOp, Lit, UnOp};
use crate::diag::{Span, did_you_mean};
use crate::types::Type;

impl Checker<'_> {
    pub(super) fn expr(&mut self, e: &ast::Expr, expected: Option<&Type>) -> Expr {
        let (out, failure) = fold_checked(self.expr_inner(e, expected));
        // A warning, not an error: it may stand in code that never runs (an arm a parameter
        // never takes is still checked), and until it runs it harms nothing.
        if let Some(failure) = failure
            && self.dead == 0
        {
            let consequence = if self.handler() == Handler::Init {
                "the instance does not start"
            } else {
                "the RPC that reaches it is rejected with INTERNAL"
            };
            self.warn(
                out.span,
                format!("this always fails when it runs: {failure}"),
            )
            .hint = Some(consequence.into());
        }
        out
    }

    pub(super) fn lit(&mut self, lit: &Lit, expected: Option<&Type>, span: Span) -> Expr {
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

    pub(super) fn expr_inner(&mut self, e: &ast::Expr, expected: Option<&Type>) -> Expr {
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

    pub(super) fn name(&mut self, n: &str, expected: Option<&Type>, span: Span) -> Expr {
        if let Some(local) = self.body.as_ref().and_then(|b| b.lookup(n)) {
            self.bx().read.insert(local);
            let bx = self.body.as_ref().expect("body");
            let ty = bx.locals[local].ty.clone();
            if !bx.defined.contains(&local) && bx.reachable {
                self.error(span, format!("`{n}` may be unassigned here"))
                    .hint = Some(format!(
                    "assign `{n}` before the `match`/`if`, or in every arm that continues here"
                ));
            } else if ty == Type::Dyn
                && self.dead == 0
                && self.env.method.is_some()
                && bx.declared_dead.contains(&local)
            {
                // Only code that never runs for this method gave it a value (a field the
                // method lacks has no type); read in code that runs, nothing would check
                // what it holds.
                self.error(
                    span,
                    format!("`{n}` has no type here: only code that never runs for this method assigns it"),
                )
                .hint = Some(format!("assign `{n}` a value in code that runs before reading it"));
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
        let hint = did_you_mean(n, candidates.iter().map(String::as_str)).or_else(|| {
            let (e, number) = self.env.method?.enum_value(n)?;
            Some(format!(
                "`{n}` is a value of the proto enum `{e}`; Weft reads enum fields as `int`, so write its number, {number}"
            ))
        });
        let d = self.error(span, format!("unknown name `{n}`"));
        d.hint = hint.or_else(|| {
            Some("locals are created by assignment; state is declared in `state:`".into())
        });
        err_expr(span)
    }

    pub(super) fn binary(
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
                let (l, r) = if is_none_name(lhs) && matches!(op, BinOp::Eq | BinOp::Ne) {
                    // `None == opt`: `None` takes its type from the other side.
                    let r = self.expr(rhs, hint_ty);
                    let l = self.expr(lhs, Some(&r.ty).filter(|t| **t != Type::Dyn));
                    (l, r)
                } else if constant_number(lhs) && !constant_number(rhs) {
                    // A literal takes its type from the other operand, not from where the
                    // result goes: in `f = 7 / total` (a float `f`, an int `total`) the
                    // division is an integer one, as `total / 7` is; the context typed the
                    // 7 as a float, and the whole division with it.
                    let r = self.expr(rhs, hint_ty);
                    let l = self.expr(lhs, Some(&r.ty).filter(|t| **t != Type::Dyn).or(hint_ty));
                    (l, r)
                } else {
                    let l = self.expr(lhs, hint_ty);
                    let r = self.expr(rhs, Some(&l.ty).filter(|t| **t != Type::Dyn).or(hint_ty));
                    (l, r)
                };
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
    pub(super) fn unify(
        &mut self,
        l: Expr,
        r: Expr,
        op: BinOp,
        span: Span,
    ) -> Option<(Expr, Expr, Type)> {
        // `opt == None` asks whether the entry is missing: both executors compare Options
        // as values, so only a comparison with a plain value unwraps.
        if matches!(op, BinOp::Eq | BinOp::Ne) && l.ty == r.ty && matches!(l.ty, Type::Option(_)) {
            let t = l.ty.clone();
            return Some((l, r, t));
        }
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
                    // A deadline written as `now + 5.0`: there is no instant arithmetic.
                    (Type::Instant, t) | (t, Type::Instant) if t.is_numeric() => Some(
                        "an instant cannot be moved by a number of seconds: keep the instant and \
                         compare `time_diff(current_time(), start)` with the seconds"
                            .to_string(),
                    ),
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

    pub(super) fn implicit_unwrap(&mut self, e: Expr) -> Expr {
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
    pub(super) fn coerce(&mut self, e: Expr, to: &Type, what: &str) -> Expr {
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

    pub(super) fn type_accepts(&self, from: &Type, to: &Type) -> bool {
        from == to
            || matches!((from, to), (Type::Int | Type::Uint, Type::Float))
            || *from == Type::Dyn
    }
}

/// The bare name `None` (typed only by its context).
fn is_none_name(e: &ast::Expr) -> bool {
    matches!(&e.kind, ast::ExprKind::Name(n) if n == "None")
}

/// Whether `e` is a constant number made of literals (`2`, `-1`, `3 * 60`, `min(0 - 1, 7)`):
/// such an operand takes its type from the other operand of an arithmetic operator when
/// that one is not constant too.
fn constant_number(e: &ast::Expr) -> bool {
    match &e.kind {
        ast::ExprKind::Lit(Lit::Int(_) | Lit::Float(_)) => true,
        ast::ExprKind::Unary { operand, .. } => constant_number(operand),
        ast::ExprKind::Binary { op, lhs, rhs } => {
            !op.is_comparison()
                && !matches!(op, BinOp::And | BinOp::Or)
                && constant_number(lhs)
                && constant_number(rhs)
        }
        ast::ExprKind::Call { func, args } => {
            matches!(
                func.name.as_str(),
                "min" | "max" | "abs" | "int" | "uint" | "float"
            ) && args.iter().all(constant_number)
        }
        _ => false,
    }
}
