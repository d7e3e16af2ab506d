//! Control flow: `match` (with constant folding of the arm taken), patterns, `if`, `foreach`.

use std::collections::HashSet;

use weft_hostcalls::Value;

use super::*;
use crate::ast::{self, Lit};
use crate::diag::Span;
use crate::types::Type;

impl Checker<'_> {
    pub(super) fn match_stmt(&mut self, scrutinee: &ast::Expr, arms: &[ast::Arm]) -> StmtKind {
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

    pub(super) fn match_checked(&mut self, s: Expr, arms: &[ast::Arm]) -> StmtKind {
        let constant = match &s.kind {
            // A `Dyn` constant is the stand-in for a scrutinee that failed to check: folding on
            // it would mark every arm dead and hide the errors inside them.
            ExprKind::Const(v) if s.ty != Type::Dyn => Some(v.clone()),
            _ => None,
        };
        let before = self.bx().defined.clone();
        let was_reachable = self.bx().reachable;
        let was_live = self.bx().live;
        let mut live_after = false;
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
            self.bx().live = was_live;
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
            live_after |= self.bx().live;
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
        // As if no arm were folded away: what follows is live when some arm goes on past
        // its end, or no arm matches.
        self.bx().live = was_live && (live_after || !exhaustive);
        self.bx().defined = after.unwrap_or(before);
        StmtKind::Match {
            scrutinee: s,
            arms: out_arms,
        }
    }

    pub(super) fn pattern(
        &mut self,
        p: &ast::Pattern,
        scrutinee: &Type,
    ) -> (Pattern, Option<String>) {
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
                        self.check_binder_name(b);
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

    pub(super) fn if_stmt(
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

    pub(super) fn foreach(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
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
            // An Option of a collection (`get(backends, dst())`) is unwrapped with a warning,
            // as anywhere else an Option is used as a value (language.md).
            let c = self.expr(&args[0], None);
            let c = match &c.ty {
                Type::Option(inner) if matches!(**inner, Type::Vec(_) | Type::Map(..)) => {
                    self.implicit_unwrap(c)
                }
                _ => c,
            };
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
        let saved_live = self.bx().live;
        self.bx().push_scope(true);
        let mut ids = Vec::new();
        for (p, t) in lambda.params.iter().zip(binder_types) {
            self.check_binder_name(p);
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
        self.bx().live = saved_live;
        let binder = if ids.len() == 2 {
            Binder::Pair(ids[0], ids[1])
        } else {
            Binder::One(ids[0])
        };
        Some(StmtKind::ForEach { coll, binder, body })
    }
}
