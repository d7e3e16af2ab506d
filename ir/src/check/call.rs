//! Built-in calls: `get` (maps, vectors, messages, read-modify-write), sizes, field
//! resolution against the schema, and every other built-in.

use weft_hostcalls::Value;
use weft_hostcalls::state::CellKind;

use super::*;
use crate::ast::{self, BinOp};
use crate::diag::{ConfigCause, Span, did_you_mean};
use crate::schema::{resolve_path, resolve_payload_path};
use crate::types::Type;

impl Checker<'_> {
    pub(super) fn call(
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
            "send" | "set" | "delete" | "foreach" | "set_rpc_header" | "set_metadata"
            | "require" => {
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
                self.header_name_case(&args[1]);
                self.header_name_readable(&args[1]);
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
                        if self.metadata[i].1 == Type::Dyn
                            && self.dead == 0
                            && self.env.method.is_some()
                        {
                            // Set so far only where a constant never goes: a later live
                            // `set_metadata` gives the key its type, and this read must
                            // not have used it as anything else (`Checker::untyped_reads`).
                            self.untyped_reads.entry(i).or_insert(span);
                        }
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
                if !matches!(v.ty, Type::Int | Type::Uint | Type::Float | Type::Dyn) {
                    self.error(
                        args[0].span,
                        format!("`abs` needs a number, found `{}`", v.ty),
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

    pub(super) fn typed_call(
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
    pub(super) fn value_collection(&mut self, a: &ast::Expr) -> Expr {
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

    pub(super) fn get_call(&mut self, args: &[ast::Expr], span: Span) -> Expr {
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

    pub(super) fn rmw(&mut self, var: VarId, key: Expr, l: &ast::Expr, span: Span) -> Expr {
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
        let saved_live = self.bx().live;
        self.bx().push_scope(true);
        self.check_binder_name(&lambda.params[0]);
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
        self.bx().live = saved_live;
        let mut ty = Type::Unit;
        if let Some((first, _)) = cx.returns.first() {
            ty = first.clone();
            for (t, s) in &cx.returns[1..] {
                if !has_dyn_mismatch_only(t, &ty) {
                    self.error(
                        *s,
                        format!("this lambda returns `{t}` here but `{ty}` before"),
                    )
                    .hint = Some(match (t, &ty) {
                        (Type::Int, Type::Float) | (Type::Float, Type::Int) => {
                            "a lambda's returns do not widen: write the whole numbers as floats (`1.0`)"
                                .into()
                        }
                        _ => format!("return `{ty}` here too: a lambda's returns share one type"),
                    });
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

    pub(super) fn size_call(&mut self, args: &[ast::Expr], span: Span) -> Expr {
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

    pub(super) fn byte_size_call(&mut self, args: &[ast::Expr], span: Span) -> Expr {
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
    pub(super) fn field_ref(
        &mut self,
        msg_ty: &Type,
        arg: &ast::Expr,
        payload: bool,
    ) -> Option<FieldRef> {
        let name = self.expr(arg, Some(&Type::Str));
        // A field named by a parameter the config set: a name the method lacks is the
        // config's mistake, and the loader points at its value there.
        let param = match &arg.kind {
            ast::ExprKind::Name(n)
                if self.body.as_ref().and_then(|b| b.lookup(n)).is_none()
                    && self.params.iter().any(|p| &p.name == n) =>
            {
                Some(n.clone())
            }
            _ => None,
        };
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
                // Point at the offending segment inside the literal (after the quote). Only a
                // literal written without escapes has the text's offsets; otherwise the
                // whole literal is marked.
                let span = if literal && arg.span.len() == text.len() + 2 {
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
                d.config = param.map(ConfigCause::ParamField);
                None
            }
        }
    }
}
