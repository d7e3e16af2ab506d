//! Handler bodies and statements: assignment, `return`, expression statements and `send`.

use weft_hostcalls::state::CellKind;
use weft_hostcalls::{Code, Value};

use super::*;
use crate::ast::{self};
use crate::diag::{Span, did_you_mean};
use crate::types::Type;

impl Checker<'_> {
    pub(super) fn handler_body(
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
        self.warn_misspelt_locals(&bx);
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

    pub(super) fn block(&mut self, b: &ast::Block) -> Block {
        let mut out = Vec::new();
        // Once per block: each block that goes on past its end has its own warning.
        let mut reported_unreachable = false;
        for s in &b.stmts {
            if !self.bx().live && !reported_unreachable {
                reported_unreachable = true;
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

    pub(super) fn stmt(&mut self, s: &ast::Stmt) -> Option<Stmt> {
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

    pub(super) fn return_stmt(
        &mut self,
        value: Option<&ast::Expr>,
        span: Span,
    ) -> Option<StmtKind> {
        let Some(lambda) = self.bx().lambdas.last().map(|l| l.kind) else {
            self.error(span, "`return` outside a lambda").hint =
                Some("a handler ends with `send`; `return` leaves a `lambda` body".into());
            return None;
        };
        // A later `return` is checked against the first one's type, so `return None` after
        // `return Some(v)` knows which Option it is.
        let expected = match lambda {
            LambdaKind::Rmw => self
                .bx()
                .lambdas
                .last()
                .and_then(|l| l.returns.first())
                .map(|(t, _)| t.clone()),
            LambdaKind::ForEach => None,
        };
        let value = value.map(|v| self.expr(v, expected.as_ref()));
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
        self.bx().live = false;
        Some(StmtKind::Return(value))
    }

    pub(super) fn assign(
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
                    if ty == Type::Dyn && self.dead == 0 {
                        // Declared in an arm a constant never takes (dropped from the IR),
                        // where a field this method lacks has no type: the first live
                        // assignment gives the local its type.
                        let v = self.expr(value, None);
                        if matches!(v.ty, Type::Unit | Type::Channel) {
                            self.error(value.span, "this expression has no value to assign");
                            return None;
                        }
                        self.bx().locals[local].ty = v.ty.clone();
                        self.bx().defined.insert(local);
                        return Some(StmtKind::Assign { local, value: v });
                    }
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
                self.bx().created.push((local, id.span));
                self.bx().defined.insert(local);
                if self.dead > 0 {
                    self.bx().declared_dead.insert(local);
                }
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

    pub(super) fn pair_target(&mut self, id: &ast::Ident, ty: Type) -> Option<LocalId> {
        if let Some(local) = self.bx().lookup(&id.name) {
            if Some(local) == self.bx().msg {
                self.error(
                    id.span,
                    format!("the message `{}` cannot be reassigned", id.name),
                )
                .hint = Some("unpack the pair into a new name".into());
                return None;
            }
            let want = self.bx().locals[local].ty.clone();
            if want == Type::Dyn && self.dead == 0 {
                // Declared in an arm a constant never takes: this live unpacking gives the
                // local its type, as a plain assignment does. Left `Dyn`, any later
                // assignment could give it another type than the value it holds.
                self.bx().locals[local].ty = ty;
                self.bx().defined.insert(local);
                return Some(local);
            }
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
        if self.dead > 0 {
            self.bx().declared_dead.insert(local);
        }
        Some(local)
    }

    /// A binder (a lambda's parameter, the `x` of `Some(x)`) named like a state variable or
    /// an element parameter hides it where it is bound: an assignment there changes the
    /// binder, which is rarely what was meant.
    pub(super) fn check_binder_name(&mut self, id: &ast::Ident) {
        if let Some(msg) = reserved_name(&id.name, "a binder") {
            self.error(id.span, msg);
            return;
        }
        let what = if self.state_index.contains_key(&id.name) {
            "state variable"
        } else if self.params.iter().any(|p| p.name == id.name) {
            "parameter"
        } else {
            return;
        };
        self.warn(
            id.span,
            format!(
                "this binder hides the {what} `{}` where it is bound",
                id.name
            ),
        )
        .hint = Some(format!(
            "rename the binder; `{}` here means the binder, not the {what}",
            id.name
        ));
    }

    pub(super) fn check_new_name(&mut self, id: &ast::Ident) {
        if let Some(msg) = reserved_name(&id.name, "a local") {
            self.error(id.span, msg);
        } else if BUILTINS.contains(&id.name.as_str()) {
            self.warn(
                id.span,
                format!("local `{}` shadows the built-in of that name", id.name),
            );
        }
    }

    pub(super) fn expr_stmt(&mut self, e: &ast::Expr) -> Option<StmtKind> {
        if let ast::ExprKind::Call { func, args } = &e.kind {
            match func.name.as_str() {
                "send" => return self.send(args, e.span),
                "set" => return self.set_call(args, e.span),
                "delete" => return self.delete_call(args, e.span),
                "foreach" => return self.foreach(args, e.span),
                "set_rpc_header" => return self.set_header(args, e.span),
                "set_metadata" => return self.set_metadata(args, e.span),
                "require" => return self.require(args, e.span),
                _ => {}
            }
        }
        let v = self.expr(e, None);
        if has_effect(&v) {
            // A read-modify-write (or a random draw) inside runs for its effect, as written.
            return Some(StmtKind::Eval(v));
        }
        if v.ty != Type::Dyn {
            self.warn(e.span, "this value is computed and then discarded")
                .hint = Some("assign it to a name, or remove the line".into());
        }
        None
    }

    pub(super) fn arity(
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

    pub(super) fn send(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
        let out = self.send_checked(args, span);
        // A `send` to `Up`/`Down` ends the handler even when it is malformed: that is where
        // the author meant it to end, so "can end without `send`" would be a false follow-on.
        // So does one without a target (`send(rpc)`) or with a misspelt direction
        // (`send(rpc, Dwn)`); a misspelt channel (`logs` for `log`) does not end it.
        let ends_handler = match args.get(1).map(|a| &a.kind) {
            None => true,
            Some(ast::ExprKind::Name(n)) => {
                matches!(n.as_str(), "Up" | "up" | "Down" | "down")
                    || (!self.channel_index.contains_key(n)
                        && did_you_mean(n, ["Up", "Down"]).is_some()
                        && did_you_mean(n, self.channels.iter().map(String::as_str)).is_none())
            }
            Some(_) => false,
        };
        if out.is_none() && ends_handler && self.handler() != Handler::Init {
            self.bx().reachable = false;
            self.bx().live = false;
        }
        out
    }

    pub(super) fn send_checked(&mut self, args: &[ast::Expr], span: Span) -> Option<StmtKind> {
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
        self.bx().live = false;
        Some(StmtKind::Send(kind))
    }

    pub(super) fn err_call(&mut self, args: &[ast::Expr], span: Span) -> Option<(Code, Expr)> {
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

    /// A local that is assigned, never read, and named like a state variable or parameter
    /// is almost always a typo for it (`cuont = count + 1`), which otherwise counts nothing
    /// without a word. Other unread locals stay silent: a value kept for a reader to see is
    /// not worth a warning, and names under three characters (`f`, `fl`) are too close to
    /// everything for a guess.
    fn warn_misspelt_locals(&mut self, bx: &BodyCx) {
        for &(local, span) in &bx.created {
            let name = &bx.locals[local].name;
            if bx.read.contains(&local) || name.chars().count() < 3 {
                continue;
            }
            let names = self
                .state
                .iter()
                .map(|v| v.name.as_str())
                .chain(self.params.iter().map(|p| p.name.as_str()))
                .filter(|n| n.chars().count() >= 3);
            let Some(mean) = did_you_mean(name, names) else {
                continue;
            };
            let hint = format!(
                "{mean} assigning a name that is not declared makes a new local, which this \
                 handler never reads"
            );
            self.warn(span, format!("`{name}` is assigned but never read"))
                .hint = Some(hint);
        }
    }

    pub(super) fn name_is_unknown(&self, n: &str) -> bool {
        let local = self.body.as_ref().and_then(|b| b.lookup(n)).is_some();
        !local
            && !self.state_index.contains_key(n)
            && !self.channel_index.contains_key(n)
            && !self.params.iter().any(|p| p.name == n)
    }
}

/// Whether evaluating `e` changes anything beyond its value: a read-modify-write of state
/// anywhere inside, or a draw from the element's random stream.
fn has_effect(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::StateRmw { .. } => true,
        ExprKind::Call { builtin, .. }
            if builtin.uses_randomness() || *builtin == Builtin::Require =>
        {
            true
        }
        _ => {
            let mut found = false;
            e.for_each_operand(|x| found |= has_effect(x));
            found
        }
    }
}
