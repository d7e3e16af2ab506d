//! Writes: `set`/`delete` on state, locals and messages, headers and per-RPC metadata.

use weft_hostcalls::state::CellKind;
use weft_hostcalls::text::{HeaderError, writable_header};

use super::*;
use crate::ast::{self, Lit};
use crate::diag::Span;
use crate::types::Type;

impl Checker<'_> {
    pub(super) fn set_call(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
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

    pub(super) fn delete_call(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
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

    /// gRPC metadata keys are lower-case on the wire, and the runtime and the simulator
    /// lower-case every key they receive: a name written as a literal with an upper-case
    /// letter would never be read, and would write a key HTTP/2 refuses. (Only literals: a
    /// computed name is the element's business.)
    pub(super) fn header_name_case(&mut self, name: &ast::Expr) {
        if let ast::ExprKind::Lit(Lit::Str(n)) = &name.kind
            && n.bytes().any(|b| b.is_ascii_uppercase())
        {
            let lower = n.to_ascii_lowercase();
            self.error(
                name.span,
                format!(
                    "header name '{n}' has upper-case letters; gRPC metadata keys are lower-case"
                ),
            )
            .hint = Some(format!("write '{lower}'"));
        }
    }

    /// A literal header name `get_rpc_header` can read: a `-bin` key always reads `''`
    /// (`Message::element_header`), so naming one is a mistake worth stopping.
    pub(super) fn header_name_readable(&mut self, name: &ast::Expr) {
        if let ast::ExprKind::Lit(Lit::Str(n)) = &name.kind
            && n.to_ascii_lowercase().ends_with("-bin")
        {
            self.error(
                name.span,
                format!(
                    "header '{n}' is binary metadata, which elements never see: this reads '' always"
                ),
            )
            .hint = Some(
                "Weft passes `-bin` headers through to the application unseen; a header an element should read carries text, without the `-bin` suffix".into(),
            );
        }
    }

    /// A literal header name an element may write, with a literal value gRPC can carry
    /// (`text::writable_header`, the rule both executors apply at run time to what is
    /// computed).
    fn header_name_writable(&mut self, name: &ast::Expr, value: &ast::Expr) {
        let ast::ExprKind::Lit(Lit::Str(n)) = &name.kind else {
            return;
        };
        let value_lit = match &value.kind {
            ast::ExprKind::Lit(Lit::Str(v)) => Some(v.as_str()),
            _ => None,
        };
        let Err(e) = writable_header(&n.to_ascii_lowercase(), value_lit) else {
            return;
        };
        let hint = match e {
            HeaderError::NotPrintable { .. } => {
                self.error(value.span, e.to_string());
                return;
            }
            HeaderError::Reserved { .. } => "use a name of your own, e.g. 'x-…'",
            HeaderError::EmptyName | HeaderError::NotAKey { .. } => {
                "e.g. 'x-tenant', 'x-request-id'"
            }
        };
        self.error(name.span, e.to_string()).hint = Some(hint.into());
    }

    pub(super) fn set_header(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
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
        self.header_name_case(&args[1]);
        self.header_name_writable(&args[1], &args[2]);
        let value = self.expr(&args[2], Some(&Type::Str));
        let value = self.coerce(value, &Type::Str, "a header value");
        Some(StmtKind::SetHeader { msg, name, value })
    }

    pub(super) fn metadata_key(&mut self, arg: &ast::Expr) -> Option<String> {
        match &arg.kind {
            ast::ExprKind::Lit(Lit::Str(s)) => Some(s.clone()),
            _ => {
                self.error(arg.span, "the metadata key must be a string literal")
                    .hint = Some("e.g. `set_metadata('start', current_time())`".into());
                None
            }
        }
    }

    pub(super) fn set_metadata(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
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
            // First set in an arm a constant never takes, to a field this method lacks: the
            // first live `set_metadata` gives the entry its type (as for a local).
            Some(i) if self.metadata[i].1 == Type::Dyn && self.dead == 0 => {
                self.metadata[i].1 = v.ty.clone();
                if let Some(read) = self.untyped_reads.remove(&i) {
                    self.error(
                        read,
                        format!(
                            "metadata `{key}` is read here before a `set_metadata` that runs for this method gives it a type"
                        ),
                    )
                    .hint = Some(format!(
                        "set `{key}` in code that runs before this read (the earlier set is in an arm that never runs)"
                    ));
                }
                i
            }
            Some(i) => i,
            None => {
                self.metadata.push((key, v.ty.clone(), span));
                self.metadata.len() - 1
            }
        };
        Some(StmtKind::SetMetadata { key: id, value: v })
    }
}

impl Checker<'_> {
    /// `require(condition, 'message')`: a check of the parameters, so only in `init`, where a
    /// false condition stops the instance from starting (the config does not load) with the
    /// element's message, rather than every RPC meeting the consequences later.
    pub(super) fn require(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
        if !self.arity(
            "require",
            args,
            2..=2,
            span,
            "require(condition, 'message')",
        ) {
            return None;
        }
        if self.handler() != Handler::Init {
            self.error(
                span,
                "`require(…)` checks parameters when an instance starts; it belongs in `init`",
            )
            .hint = Some("to refuse an RPC, `send(err('message', CODE), Up)`".into());
            return None;
        }
        let call = self.typed_call(
            Builtin::Require,
            args,
            &[Type::Bool, Type::Str],
            Type::Unit,
            span,
            "require(condition, 'message')",
        );
        // The condition folds when it reads only constants; false, it refuses the config's
        // values of the parameters it reads (in code that runs: not under a constant
        // condition that skips it).
        let refused = matches!(
            &call.kind,
            ExprKind::Call { args: typed, .. }
                if matches!(typed.first().map(|c| &c.kind), Some(ExprKind::Const(Value::Bool(false))))
        );
        if refused
            && self.dead == 0
            && let (Some(given), Some(condition)) = (self.env.params, args.first())
        {
            let mut names = Vec::new();
            names_in(condition, &mut names);
            for name in names {
                if given.contains_key(&name) && !self.refused_params.contains(&name) {
                    self.refused_params.push(name);
                }
            }
        }
        Some(StmtKind::Eval(call))
    }
}

/// The names an expression reads, in order (lambda bodies aside: a condition of `require`
/// has none worth following).
fn names_in(e: &ast::Expr, out: &mut Vec<String>) {
    match &e.kind {
        ast::ExprKind::Name(n) => out.push(n.clone()),
        ast::ExprKind::Call { args, .. } => args.iter().for_each(|a| names_in(a, out)),
        ast::ExprKind::Unary { operand, .. } => names_in(operand, out),
        ast::ExprKind::Binary { lhs, rhs, .. } => {
            names_in(lhs, out);
            names_in(rhs, out);
        }
        ast::ExprKind::Pair(a, b) => {
            names_in(a, out);
            names_in(b, out);
        }
        ast::ExprKind::Lit(_) | ast::ExprKind::Lambda(_) | ast::ExprKind::Error => {}
    }
}
