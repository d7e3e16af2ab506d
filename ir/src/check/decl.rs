//! Declarations: state variables (types, decorators) and `init` parameters (types, defaults,
//! values from the chain config).

use std::collections::HashSet;

use weft_hostcalls::state::{CellKind, Combiner, Consistency};

use super::*;
use crate::ast::{self};
use crate::diag::{ConfigCause, did_you_mean};
use crate::types::Type;

impl Checker<'_> {
    pub(super) fn resolve_type(&mut self, t: &ast::TypeExpr) -> Type {
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
                    // Still the collection it names (missing arguments unknown): as `Dyn`, a
                    // `Map<string>` in state was a scalar, and each `get`/`set` on it said so.
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

    pub(super) fn declare_state(&mut self, file: &ast::ElementFile) {
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
            if let Some(msg) = reserved_name(name, "state") {
                self.error(decl.name.span, msg);
                continue;
            }
            let ty = self.resolve_type(&decl.ty);
            let mut consistency = Consistency::Local;
            let mut combiner = None;
            let mut persistence = false;
            let mut capacity = None;
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
                    // Its argument may name a parameter: resolved once they are declared
                    // (`resolve_capacities`).
                    "capacity" => capacity = Some(d),
                    other => {
                        let hint = did_you_mean(
                            other,
                            ["consistency", "combiner", "persistence", "capacity"],
                        )
                        .unwrap_or_else(|| {
                            "decorators: @consistency, @combiner, @persistence, @capacity".into()
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
            if let Some(d) = capacity {
                if kind != CellKind::Map {
                    self.error(
                        d.span,
                        format!("`@capacity` bounds a map, but `{name}` is `{ty}`"),
                    )
                    .hint = Some("declare it `Map<K, V>`, or remove `@capacity`".into());
                } else if consistency == Consistency::Weak {
                    // Each weak replica would evict on its own, and merging them key by key
                    // could bring an evicted entry back and pass the capacity.
                    self.error(d.span, "a weak map cannot have a capacity").hint = Some(
                        "weak replicas evict apart and merge key by key; use a local or `@consistency(strong)` map"
                            .into(),
                    );
                }
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
            if holds_option(&ty) || mentions(&ty, &Type::Channel) {
                // An Option in a collection too: language.md rules them out of state
                // (a map entry that is present holds a value; absence is the map's `None`).
                self.error(decl.ty.span(), format!("state cannot hold `{ty}`"));
            } else if mentions(&ty, &Type::Request) {
                // A stored request could be replayed with `send(r, Down)` on a later RPC:
                // a different RPC would reach the server. Keep what you need from it.
                self.error(decl.ty.span(), format!("state cannot hold `{ty}`"))
                    .hint =
                    Some("requests belong to their RPC; store the fields you need instead".into());
            }
            self.state_index.insert(name.clone(), self.state.len());
            self.state.push(StateVar {
                name: name.clone(),
                ty,
                kind,
                consistency,
                combiner,
                persistence,
                capacity: None,
                from_param: None,
                span: decl.span,
            });
        }
    }

    pub(super) fn declare_params(&mut self, file: &ast::ElementFile) {
        let Some(init) = &file.init else { return };
        let given = self.env.params;
        let mut seen = HashSet::new();
        for p in &init.params {
            let name = p.name.name.clone();
            if !seen.insert(name.clone()) {
                self.error(p.name.span, format!("parameter `{name}` is declared twice"));
                continue;
            }
            if let Some(msg) = reserved_name(&name, "a parameter") {
                self.error(p.name.span, msg);
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
                if given.is_none() {
                    // Checked without a config (`weft check`): AppNet's untyped parameter
                    // takes its type from the value a chain config gives it, so its uses
                    // are checked then. Nothing runs an element checked this way.
                    self.warn(
                        p.name.span,
                        format!("parameter `{name}` takes its type from the chain config's value; its uses are checked only with one"),
                    )
                    .hint = Some(format!("write `{name}: int` (or the type it needs) to check them here"));
                } else {
                    self.error(p.name.span, format!("parameter `{name}` has no type"))
                        .hint = Some(format!("write `{name}: int` (or the type it needs)"));
                }
                // Still declared: its uses are not "unknown names".
                self.params.push(ParamInfo {
                    name,
                    ty: Type::Dyn,
                    value: None,
                    state: None,
                });
                continue;
            };
            let mut misfit = false;
            let default_value = match default {
                Some(e) => {
                    let e = self.coerce(e, &ty, "the default value");
                    match e.kind {
                        // A default of another type, reported by `coerce`: its placeholder
                        // is no value, or its uses would fold to "always fails" warnings.
                        ExprKind::Const(Value::Unit) if e.ty == Type::Dyn => {
                            misfit = true;
                            None
                        }
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
            let value = match config_value {
                Some(v) => match coerce_value(v, &ty) {
                    Ok(v) => Some(v),
                    Err(found) => {
                        let d = self.error(
                            p.name.span,
                            format!(
                                "parameter `{name}` is given {}, but it is declared `{ty}`",
                                super::a_or_an(&found)
                            ),
                        );
                        d.config = Some(ConfigCause::ParamValue(name.clone()));
                        // YAML reads an unquoted 5 or true as a number or a bool.
                        let scalar = ["int", "uint", "float", "bool"];
                        let declared = ty.to_string();
                        if (declared == "string" && scalar.contains(&found.as_str()))
                            || (declared == "Vec<string>" && found.starts_with("list with"))
                        {
                            d.hint = Some(
                                "quote the value in weft.yaml ('5', 'true') to give a string"
                                    .into(),
                            );
                        } else if declared.starts_with("Vec<")
                            && !found.contains(' ')
                            && found != "Vec"
                        {
                            d.hint = Some(format!(
                                "`{name}` takes a list, even of one: `{name}: [...]`"
                            ));
                        }
                        misfit = true;
                        None
                    }
                },
                None => default_value,
            };
            // A value (or default) of the wrong kind is reported above; "has no value" would
            // be false.
            if given.is_some() && value.is_none() && !misfit {
                let d = self.error(p.name.span, format!("parameter `{name}` has no value"));
                d.hint = Some(format!(
                    "set it in the chain config, e.g. `{name}: …`, or give it a default"
                ));
                d.config = Some(ConfigCause::MissingParam(name.clone()));
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
                    let d = self.error(
                        init.span,
                        format!("the chain config sets `{k}`, which `init` does not declare"),
                    );
                    d.hint = Some(hint);
                    d.config = Some(ConfigCause::ParamName(k.clone()));
                }
            }
        }
    }
}

impl Checker<'_> {
    /// Binds each `@capacity(n)`: a number, or an `int`/`uint` parameter whose value the
    /// config or its default gives. An unbound parameter (`weft check` without a chain)
    /// leaves the map unbounded, but such an element never runs.
    pub(super) fn resolve_capacities(&mut self, file: &ast::ElementFile) {
        let Some(section) = &file.state else { return };
        for decl in &section.decls {
            let Some(var) = self.state_index.get(&decl.name.name).copied() else {
                continue;
            };
            if self.state[var].kind != CellKind::Map
                || self.state[var].consistency == Consistency::Weak
            {
                continue;
            }
            let Some(d) = decl.decorators.iter().rfind(|d| d.name.name == "capacity") else {
                continue;
            };
            let arg = d.arg.name.as_str();
            let value = if arg.bytes().all(|b| b.is_ascii_digit()) {
                arg.parse::<i128>().ok()
            } else if let Some(p) = self.params.iter().find(|p| p.name == arg) {
                if !matches!(p.ty, Type::Int | Type::Uint | Type::Dyn) {
                    let ty = p.ty.clone();
                    self.error(
                        d.arg.span,
                        format!("`@capacity` takes a number of entries, but `{arg}` is `{ty}`"),
                    )
                    .hint = Some(format!("declare it `{arg}: int`"));
                    continue;
                }
                match &p.value {
                    Some(Value::Int(n)) => Some(i128::from(*n)),
                    Some(Value::Uint(n)) => Some(i128::from(*n)),
                    // An untyped (AppNet) parameter given a value of another kind: left
                    // alone, the map would quietly be unbounded.
                    Some(other) => {
                        let kind = other.kind_name();
                        self.error(
                            d.arg.span,
                            format!("`@capacity` takes a number of entries, but `{arg}` is {kind}"),
                        )
                        .hint = Some(format!("give `{arg}` a whole number"));
                        continue;
                    }
                    None => continue,
                }
            } else {
                let names = self.params.iter().map(|p| p.name.as_str());
                let hint = did_you_mean(arg, names).unwrap_or_else(|| {
                    "write a number, `@capacity(1000)`, or name an `int` parameter of `init`".into()
                });
                self.error(
                    d.arg.span,
                    format!("`@capacity({arg})`: `init` declares no parameter `{arg}`"),
                )
                .hint = Some(hint);
                continue;
            };
            match value.and_then(|n| usize::try_from(n).ok()) {
                Some(n) if n >= 1 => self.state[var].capacity = Some(n),
                _ => {
                    let shown = value.map_or_else(|| arg.to_owned(), |n| n.to_string());
                    let name = &decl.name.name;
                    let from_config = self.env.params.is_some_and(|g| g.contains_key(arg));
                    let d = self.error(
                        d.arg.span,
                        format!(
                            "`{name}` has a capacity of {shown}; it must hold at least one entry"
                        ),
                    );
                    d.hint = Some(format!("give `{name}` a capacity of 1 or more"));
                    if from_config {
                        d.config = Some(ConfigCause::ParamValue(arg.to_owned()));
                    }
                }
            }
        }
    }
}

/// Whether `t` is an Option or contains one.
fn holds_option(t: &Type) -> bool {
    match t {
        Type::Option(_) => true,
        Type::Pair(a, b) | Type::Map(a, b) => holds_option(a) || holds_option(b),
        Type::Vec(x) => holds_option(x),
        _ => false,
    }
}

/// Whether `t` is `needle` or contains it.
fn mentions(t: &Type, needle: &Type) -> bool {
    t == needle
        || match t {
            Type::Pair(a, b) | Type::Map(a, b) => mentions(a, needle) || mentions(b, needle),
            Type::Vec(x) | Type::Option(x) => mentions(x, needle),
            _ => false,
        }
}
