//! Lowering of the IR to Cranelift: one function per (segment, direction) with every element
//! of the segment inlined in chain order.
//!
//! Values: int, uint and Instant/float scalars live in registers (`i64`, `f64`), bools in
//! `i8`; every other value is a handle (`i64`) into the call's arena, manipulated through
//! host functions. Local scalar state is loaded and stored directly in the element's state
//! block. Control flow is structured in the IR, so each construct becomes a few blocks.
//!
//! The request function runs elements 0, 1, … and stops at the first that rejects, replies or
//! fails, recording which one in the context. The response function starts at the element the
//! context names and runs back to 0; an element's rejection or failure becomes the response
//! the earlier elements see.

use std::collections::{BTreeSet, HashMap};
use std::mem::offset_of;
use std::sync::Arc;

use cranelift_codegen::entity::SecondaryMap;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    AbiParam, BlockArg, FuncRef, Function, InstBuilder, MemFlagsData as MemFlags, Signature, types,
};
use cranelift_codegen::ir::{Block, Value as V};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Switch, Variable};
use cranelift_module::{FuncId, Linkage, Module};
use weft_hostcalls::abi::{HostFn, NONE, RpcCtx, ScalarKind, SlotKind, verdict};
use weft_hostcalls::state::{CellKind, Consistency};
use weft_hostcalls::{Code, Value, builtins};
use weft_ir::ast::{BinOp, UnOp};
use weft_ir::ir::*;
use weft_ir::schema::FieldPath;
use weft_ir::types::Type;

use crate::error::JitError;
use crate::host::{self, Tables, UNIT, fail};

/// Which local scalar state variables live in the element's block, by variable id.
pub fn block_vars(e: &Element) -> Vec<Option<SlotKind>> {
    e.state
        .iter()
        .map(|v| {
            if v.consistency == Consistency::Local && v.kind == CellKind::Scalar {
                SlotKind::of(&v.value_type().zero_value())
            } else {
                None
            }
        })
        .collect()
}

/// How a value of a type is held in compiled code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Repr {
    /// int, uint: `i64`.
    I,
    /// bool: `i8`, 0 or 1.
    B,
    /// float, Instant: `f64`.
    F,
    /// Everything else: a handle into the arena (unit is the handle [`UNIT`]).
    H,
}

fn repr(t: &Type) -> Repr {
    match t {
        Type::Int | Type::Uint => Repr::I,
        Type::Bool => Repr::B,
        Type::Float | Type::Instant => Repr::F,
        _ => Repr::H,
    }
}

/// The kind a scalar type is passed with to the `*I`/`*F` host functions.
fn scalar_kind(t: &Type) -> Option<ScalarKind> {
    Some(match t {
        Type::Bool => ScalarKind::Bool,
        Type::Int => ScalarKind::Int,
        Type::Uint => ScalarKind::Uint,
        Type::Float => ScalarKind::Float,
        Type::Instant => ScalarKind::Instant,
        _ => return None,
    })
}

fn clif(r: Repr) -> types::Type {
    match r {
        Repr::I | Repr::H => types::I64,
        Repr::B => types::I8,
        Repr::F => types::F64,
    }
}

/// Host functions declared in a module, shared by its functions.
/// The host functions a module imports, each declared (by its stable symbol) when code
/// first calls it: declaring all of them for every chain took 4 % of compiling ten elements.
#[derive(Default)]
pub struct Imports {
    ids: HashMap<HostFn, FuncId>,
}

impl Imports {
    /// `None` when the module refuses the declaration (a symbol clash: a bug).
    fn id<M: Module>(&mut self, module: &mut M, f: HostFn) -> Option<FuncId> {
        if let Some(id) = self.ids.get(&f) {
            return Some(*id);
        }
        let sig = host_signature(module, f);
        let id = module
            .declare_function(&f.symbol(), Linkage::Import, &sig)
            .ok()?;
        self.ids.insert(f, id);
        Some(id)
    }
}

fn host_signature<M: Module>(m: &M, f: HostFn) -> Signature {
    let ptr = m.target_config().pointer_type();
    let (_, s) = host::host_fn(f);
    let mut sig = m.make_signature();
    sig.params.push(AbiParam::new(ptr));
    for p in s.params {
        sig.params.push(AbiParam::new(match p {
            host::Ty::I => types::I64,
            host::Ty::F => types::F64,
        }));
    }
    if let Some(r) = s.ret {
        sig.returns.push(AbiParam::new(match r {
            host::Ty::I => types::I64,
            host::Ty::F => types::F64,
        }));
    }
    sig
}

/// The signature of a compiled segment function: `extern "C" fn(*mut Frame)`.
pub fn segment_signature<M: Module>(m: &M) -> Signature {
    let mut sig = m.make_signature();
    sig.params
        .push(AbiParam::new(m.target_config().pointer_type()));
    sig
}

/// Where control goes when an element's handler ends.
#[derive(Clone, Copy)]
struct Exits {
    /// The message continues (request: to the next element; response: up to the previous
    /// one). Takes the message handle.
    next: Block,
    /// A local reply from a request handler. Takes the message handle.
    reply: Option<Block>,
    /// Run-time error.
    err: Block,
}

enum Lambda {
    Rmw { exit: Block, repr: Repr },
    ForEach { cont: Block },
}

/// Lowers one function.
struct Fx<'a, 'f, M: Module> {
    b: FunctionBuilder<'f>,
    module: &'a mut M,
    imports: &'a mut Imports,
    /// The host functions declared in this function so far, by id.
    refs: Vec<Option<FuncRef>>,
    tables: &'a mut Tables,
    frame: V,
    handler: Handler,
    // The element being lowered.
    k: usize,
    element: &'a Element,
    body: &'a Body,
    locals: Vec<Variable>,
    blocks: Vec<Option<SlotKind>>,
    block_ptr: Option<V>,
    entry_msg: V,
    exits: Exits,
    lambdas: Vec<Lambda>,
    /// Per `foreach` being lowered, innermost last: the locals its body assigns.
    loops: Vec<BTreeSet<usize>>,
    /// A host function the module would not declare (a bug; fails the compilation).
    missing: Option<HostFn>,
    /// Whether a host call on the path being lowered may have failed since the last check
    /// (see [`Fx::check_failures`]).
    pending: bool,
    /// For blocks not yet lowered, what the edges into them so far bring (dense maps: these
    /// are read at every edge, and hashing was a sixth of lowering).
    pending_at: SecondaryMap<Block, Incoming>,
    /// The blocks lowered so far (an edge back to one must not carry a pending failure).
    entered: SecondaryMap<Block, bool>,
}

/// What the edges into a block bring, as far as lowering has seen them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Incoming {
    /// No edge yet.
    #[default]
    None,
    /// Only edges with nothing pending.
    Checked,
    /// Some edge with a failure pending.
    Pending,
}

const ERR: i32 = offset_of!(RpcCtx, err) as i32;
const DECIDED: i32 = offset_of!(RpcCtx, decided) as i32;
const VERDICT: i32 = offset_of!(RpcCtx, verdict) as i32;
const CODE: i32 = offset_of!(RpcCtx, code) as i32;
const MSG: i32 = offset_of!(RpcCtx, msg) as i32;
const ENTRY_MSG: i32 = offset_of!(RpcCtx, entry_msg) as i32;
const BLOCKS: i32 = offset_of!(RpcCtx, blocks) as i32;
const START: i32 = offset_of!(RpcCtx, start) as i32;
const FOUND: i32 = offset_of!(RpcCtx, found) as i32;

fn flags() -> MemFlags {
    MemFlags::trusted()
}

impl<'a, 'f, M: Module> Fx<'a, 'f, M> {
    fn call(&mut self, f: HostFn, args: &[V]) -> Option<V> {
        let fref = match self.refs.get(f as usize).copied().flatten() {
            Some(r) => r,
            None => {
                // A declaration the module refuses (a symbol clash: a bug) fails the
                // compilation (see `missing`).
                let Some(id) = self.imports.id(self.module, f) else {
                    self.missing = Some(f);
                    return None;
                };
                let r = self.module.declare_func_in_func(id, self.b.func);
                if self.refs.len() <= f as usize {
                    self.refs.resize(f as usize + 1, None);
                }
                self.refs[f as usize] = Some(r);
                r
            }
        };
        let mut all = Vec::with_capacity(args.len() + 1);
        all.push(self.frame);
        all.extend_from_slice(args);
        let inst = self.b.ins().call(fref, &all);
        self.b.inst_results(inst).first().copied()
    }

    /// Calls a host function that returns a value.
    fn callv(&mut self, f: HostFn, args: &[V]) -> V {
        match self.call(f, args) {
            Some(v) => v,
            None => self.b.ins().iconst(types::I64, 0),
        }
    }

    fn iconst(&mut self, v: i64) -> V {
        self.b.ins().iconst(types::I64, v)
    }

    fn unit(&mut self) -> V {
        self.iconst(UNIT as i64)
    }

    /// Notes that the host call just made may have failed. The failure is not branched on
    /// here but before the element's next effect that host functions do not make
    /// ([`Fx::check_failures`]): a host function called while a failure is pending does
    /// nothing (`host::guard`), so the handler's remaining host calls up to that point are
    /// without effect, as if the handler had stopped at the failure, and one check serves
    /// them all. A check after every call was a quarter of the compile time.
    fn may_fail(&mut self) {
        self.pending = true;
    }

    /// Branches to the element's error exit if a host call on this path failed since the
    /// last check. Called before what compiled code does itself that host functions cannot
    /// undo or ignore: leaving the element (a send, the end of the handler, a rejection),
    /// storing to the state block, entering a loop and going round it again, and branching
    /// (a branch on a failed call's result would be wrong, though harmless until one of the
    /// others; checked once before it rather than on each side).
    fn check_failures(&mut self) {
        if !self.pending {
            return;
        }
        let e = self.b.ins().load(types::I32, flags(), self.frame, ERR);
        let cont = self.b.create_block();
        self.b.ins().brif(e, self.exits.err, &[], cont, &[]);
        self.b.switch_to_block(cont);
        self.entered[cont] = true;
        self.pending = false;
    }

    /// Notes an edge from here to `to`: a block entered from a path with a pending failure
    /// starts with one pending. An edge back to a block already lowered is checked first,
    /// since that block was lowered with what was known then.
    fn edge(&mut self, to: Block) {
        if self.pending && self.entered[to] {
            self.check_failures();
        }
        if self.pending {
            self.pending_at[to] = Incoming::Pending;
        } else if self.pending_at[to] == Incoming::None {
            self.pending_at[to] = Incoming::Checked;
        }
    }

    /// Continues lowering in `block`, with a failure pending if some edge into it had one
    /// (or if no edge into it was seen: unreachable code, which costs nothing to check).
    fn switch_to(&mut self, block: Block) {
        self.b.switch_to_block(block);
        self.entered[block] = true;
        self.pending = self.pending_at[block] != Incoming::Checked;
    }

    /// Continues in a fresh block after a jump (code after a `send` is unreachable). No path
    /// reaches it, so none brings a pending failure: taken as pending, its jumps made the
    /// blocks after it check for nothing.
    fn dead(&mut self) {
        let b = self.b.create_block();
        self.switch_to(b);
        self.pending = false;
    }

    fn jump(&mut self, to: Block, args: &[V]) {
        self.edge(to);
        match args {
            [] => self.b.ins().jump(to, &[]),
            [a] => self.b.ins().jump(to, &[BlockArg::Value(*a)]),
            _ => {
                let args: Vec<BlockArg> = args.iter().map(|v| BlockArg::Value(*v)).collect();
                self.b.ins().jump(to, &args)
            }
        };
    }

    /// `brif c, then, else` without block arguments. A pending failure is checked first:
    /// once here rather than once on each side.
    fn brif(&mut self, c: V, then: Block, otherwise: Block) {
        self.check_failures();
        self.edge(then);
        self.edge(otherwise);
        self.b.ins().brif(c, then, &[], otherwise, &[]);
    }

    fn store_u32(&mut self, off: i32, v: u32) {
        let c = self.b.ins().iconst(types::I32, i64::from(v));
        self.b.ins().store(flags(), c, self.frame, off);
    }

    fn constant(&mut self, v: &Value) -> V {
        if matches!(v, Value::Unit) {
            return self.unit();
        }
        let id = self.tables.constant(v);
        let id = self.iconst(id as i64);
        let h = self.callv(HostFn::Const, &[id]);
        self.may_fail();
        h
    }

    fn elem(&mut self) -> V {
        self.iconst(self.k as i64)
    }

    /// A scalar in a register as the `*I`/`*F` host functions take it: the value (bools
    /// widened to `i64`), its kind, and whether it travels in a float register. `None` for
    /// handles.
    fn scalar_arg(&mut self, v: V, ty: &Type) -> Option<(V, V, bool)> {
        let kind = scalar_kind(ty)?;
        let k = self.iconst(kind as i64);
        Some(match repr(ty) {
            Repr::B => (self.b.ins().uextend(types::I64, v), k, false),
            Repr::I => (v, k, false),
            Repr::F => (v, k, true),
            Repr::H => return None,
        })
    }

    /// A value in `from`'s representation as a handle.
    fn boxed(&mut self, v: V, ty: &Type) -> V {
        let (f, arg) = match ty {
            Type::Int => (HostFn::BoxInt, v),
            Type::Uint => (HostFn::BoxUint, v),
            Type::Bool => (HostFn::BoxBool, self.b.ins().uextend(types::I64, v)),
            Type::Float => (HostFn::BoxFloat, v),
            Type::Instant => (HostFn::BoxInstant, v),
            _ => return v,
        };
        self.callv(f, &[arg])
    }

    /// A handle as a value of type `ty`'s representation.
    fn unboxed(&mut self, h: V, ty: &Type) -> V {
        match repr(ty) {
            Repr::H => h,
            Repr::I => {
                let v = self.callv(HostFn::UnboxInt, &[h]);
                self.may_fail();
                v
            }
            Repr::B => {
                let v = self.callv(HostFn::UnboxBool, &[h]);
                self.may_fail();
                self.b.ins().ireduce(types::I8, v)
            }
            Repr::F => {
                let v = self.callv(HostFn::UnboxFloat, &[h]);
                self.may_fail();
                v
            }
        }
    }

    fn zero(&mut self, ty: &Type) -> V {
        match repr(ty) {
            Repr::I => self.iconst(0),
            Repr::B => self.b.ins().iconst(types::I8, 0),
            Repr::F => self.b.ins().f64const(0.0),
            Repr::H => self.unit(),
        }
    }

    fn block_slot(&self, var: VarId) -> Option<(V, SlotKind)> {
        match (self.blocks.get(var), self.block_ptr) {
            (Some(Some(kind)), Some(p)) => Some((p, *kind)),
            _ => None,
        }
    }

    /// Assigns a local, noting it in every loop being lowered: a loop's sweep keeps only the
    /// locals its body assigns, since any other holds what it held before the loop.
    fn set_local(&mut self, l: usize, v: V) {
        self.b.def_var(self.locals[l], v);
        for assigned in &mut self.loops {
            assigned.insert(l);
        }
    }

    fn msg_local(&mut self) -> Option<V> {
        self.body.msg.map(|m| self.b.use_var(self.locals[m]))
    }

    // -----------------------------------------------------------------------------------
    // statements

    fn block(&mut self, stmts: &'a [Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &'a Stmt) {
        match &s.kind {
            StmtKind::Assign { local, value } => {
                let v = self.expr(value);
                self.set_local(*local, v);
            }
            StmtKind::AssignPair {
                first,
                second,
                value,
            } => {
                let h = self.expr(value);
                for (which, l) in [(0, *first), (1, *second)] {
                    let w = self.iconst(which);
                    let part = self.callv(HostFn::Unpack, &[h, w]);
                    self.may_fail();
                    let ty = self.body.locals[l].ty.clone();
                    let v = self.unboxed(part, &ty);
                    self.set_local(l, v);
                }
            }
            StmtKind::StateStore { var, value } => {
                let v = self.expr(value);
                if let Some((p, kind)) = self.block_slot(*var) {
                    // A value computed from a failed call's result must not be stored.
                    self.check_failures();
                    let bits = match kind {
                        SlotKind::Bool => self.b.ins().uextend(types::I64, v),
                        _ => v,
                    };
                    self.b.ins().store(flags(), bits, p, (*var * 8) as i32);
                } else {
                    let h = self.boxed(v, &value.ty);
                    let (e, var, unit) = (self.elem(), self.iconst(*var as i64), self.unit());
                    self.call(HostFn::StateSet, &[e, var, unit, h]);
                    self.may_fail();
                }
            }
            StmtKind::StateSet { var, key, value } => {
                let k = self.expr(key);
                let k = self.boxed(k, &key.ty);
                let v = self.expr(value);
                let v = self.boxed(v, &value.ty);
                let (e, var) = (self.elem(), self.iconst(*var as i64));
                self.call(HostFn::StateSet, &[e, var, k, v]);
                self.may_fail();
            }
            StmtKind::StateDelete { var, key } => {
                let k = self.expr(key);
                let k = self.boxed(k, &key.ty);
                let (e, var) = (self.elem(), self.iconst(*var as i64));
                self.call(HostFn::StateDelete, &[e, var, k]);
                self.may_fail();
            }
            StmtKind::LocalSet { local, key, value } => {
                let k = self.expr(key);
                let k = self.boxed(k, &key.ty);
                let v = self.expr(value);
                let v = self.boxed(v, &value.ty);
                let c = self.b.use_var(self.locals[*local]);
                let n = self.callv(HostFn::LocalSet, &[c, k, v]);
                self.may_fail();
                self.set_local(*local, n);
            }
            StmtKind::LocalDelete { local, key } => {
                let k = self.expr(key);
                let k = self.boxed(k, &key.ty);
                let c = self.b.use_var(self.locals[*local]);
                let n = self.callv(HostFn::LocalDelete, &[c, k]);
                self.may_fail();
                self.set_local(*local, n);
            }
            StmtKind::SetField { msg, field, value } => {
                let v = self.expr(value);
                let v = self.boxed(v, &value.ty);
                let m = self.b.use_var(self.locals[*msg]);
                let id = self.tables.field(field);
                let id = self.iconst(id as i64);
                let n = self.callv(HostFn::FieldWrite, &[m, id, v]);
                self.may_fail();
                self.set_local(*msg, n);
            }
            StmtKind::SetHeader { msg, name, value } => {
                let n = self.expr(name);
                let v = self.expr(value);
                let m = self.b.use_var(self.locals[*msg]);
                let r = self.callv(HostFn::HeaderSet, &[m, n, v]);
                self.may_fail();
                self.set_local(*msg, r);
            }
            StmtKind::SetMetadata { key, value } => {
                let v = self.expr(value);
                let forms = [
                    HostFn::MetadataSetI,
                    HostFn::MetadataSetF,
                    HostFn::MetadataSet,
                ];
                self.call_with_value(forms, *key as i64, v, &value.ty);
            }
            StmtKind::Eval(e) => {
                self.expr(e);
            }
            StmtKind::Match { scrutinee, arms } => self.match_(scrutinee, arms),
            StmtKind::ForEach { coll, binder, body } => self.foreach(coll, binder, body),
            StmtKind::Send(send) => self.send(send),
            StmtKind::Return(v) => {
                let value = v.as_ref().map(|e| (self.expr(e), e.ty.clone()));
                match self.lambdas.last() {
                    Some(Lambda::Rmw { exit, repr: r }) => {
                        let (exit, r) = (*exit, *r);
                        let out = match value {
                            Some((v, ty)) if repr(&ty) == r => v,
                            Some((v, ty)) if r == Repr::H => self.boxed(v, &ty),
                            _ => match r {
                                Repr::I => self.iconst(0),
                                Repr::B => self.b.ins().iconst(types::I8, 0),
                                Repr::F => self.b.ins().f64const(0.0),
                                Repr::H => self.unit(),
                            },
                        };
                        self.jump(exit, &[out]);
                    }
                    Some(Lambda::ForEach { cont }) => {
                        let cont = *cont;
                        self.jump(cont, &[]);
                    }
                    None => self.fall_off(),
                }
                self.dead();
            }
        }
    }

    /// Calls a host function taking `(element, id, value)` in the form that fits the value:
    /// `[int register, float register, boxed]` (the register forms also take the scalar's
    /// kind), then checks for a failure.
    fn call_with_value(&mut self, forms: [HostFn; 3], id: i64, v: V, ty: &Type) {
        let [int_form, float_form, boxed_form] = forms;
        if let Some((v, kind, float)) = self.scalar_arg(v, ty) {
            let (e, id) = (self.elem(), self.iconst(id));
            let f = if float { float_form } else { int_form };
            self.call(f, &[e, id, v, kind]);
        } else {
            let v = self.boxed(v, ty);
            let (e, id) = (self.elem(), self.iconst(id));
            self.call(boxed_form, &[e, id, v]);
        }
        self.may_fail();
    }

    /// The end of the handler without a `send`: the current message goes on.
    fn fall_off(&mut self) {
        match self.msg_local() {
            Some(m) => {
                self.check_failures();
                let next = self.exits.next;
                self.jump(next, &[m]);
            }
            None => {
                let kind = self.iconst(fail::UNSUPPORTED);
                let z = self.iconst(0);
                self.call(HostFn::Fail, &[kind, z, z]);
                let err = self.exits.err;
                self.jump(err, &[]);
            }
        }
    }

    fn send(&mut self, send: &'a SendKind) {
        let in_rmw = self.lambdas.iter().any(|l| matches!(l, Lambda::Rmw { .. }));
        match send {
            SendKind::Channel { channel, value } => {
                let v = self.expr(value);
                let forms = [
                    HostFn::ChannelEmitI,
                    HostFn::ChannelEmitF,
                    HostFn::ChannelEmit,
                ];
                self.call_with_value(forms, *channel as i64, v, &value.ty);
                return;
            }
            _ if in_rmw => {
                let kind = self.iconst(fail::UNSUPPORTED);
                let z = self.iconst(0);
                self.call(HostFn::Fail, &[kind, z, z]);
                let err = self.exits.err;
                self.jump(err, &[]);
            }
            SendKind::Down(e) => {
                let m = self.expr(e);
                self.check_failures();
                let next = self.exits.next;
                self.jump(next, &[m]);
            }
            SendKind::Up(e) => {
                let m = self.expr(e);
                self.check_failures();
                let to = self.exits.reply.unwrap_or(self.exits.next);
                self.jump(to, &[m]);
            }
            SendKind::Reject { code, message } => {
                let text = self.expr(message);
                if self.handler == Handler::Resp {
                    let c = self.iconst(i64::from(code.number()));
                    let entry = self.entry_msg;
                    let m = self.callv(HostFn::RespReject, &[entry, c, text]);
                    self.may_fail();
                    self.check_failures();
                    let next = self.exits.next;
                    self.jump(next, &[m]);
                } else {
                    self.call(HostFn::Reject, &[text]);
                    self.may_fail();
                    self.check_failures();
                    // The element and its message are in the context since it started.
                    self.store_u32(CODE, code.number());
                    self.store_u32(VERDICT, verdict::REJECT);
                    self.b.ins().return_(&[]);
                }
            }
        }
        self.dead();
    }

    /// A `match` on `get(map_state, k)` or `get_metadata(k)` whose arms are only `Some`,
    /// `None` and `_`: one host call gives the value or NONE, and no Option is built.
    fn match_probe(&mut self, scrutinee: &'a Expr, arms: &'a [Arm]) -> bool {
        let only_options = arms.iter().all(|a| {
            matches!(
                a.pattern,
                Pattern::Some(_) | Pattern::None | Pattern::Wildcard
            )
        });
        if !only_options {
            return false;
        }
        // The type of the local a `Some(x)` arm binds, if any.
        let bound = arms.iter().find_map(|a| match a.pattern {
            Pattern::Some(Some(l)) => Some(self.body.locals[l].ty.clone()),
            _ => None,
        });
        let h = match &scrutinee.kind {
            ExprKind::StateGet { var, key }
                if bound.is_none()
                    && self.element.state.get(*var).map(|v| v.kind) == Some(CellKind::Map)
                    && let Some((msg, field)) = string_field(key) =>
            {
                let m = self.expr(msg);
                let id = self.tables.field(field);
                let (el, var, id) = (
                    self.elem(),
                    self.iconst(*var as i64),
                    self.iconst(id as i64),
                );
                self.callv(HostFn::StateContainsField, &[el, var, m, id])
            }
            ExprKind::StateGet { var, key }
                if self.element.state.get(*var).map(|v| v.kind) == Some(CellKind::Map) =>
            {
                let k = self.expr(key);
                let k = self.boxed(k, &key.ty);
                let (el, var) = (self.elem(), self.iconst(*var as i64));
                // Nothing binds the value: ask whether it is there, without copying it.
                let f = match bound {
                    None => HostFn::StateContains,
                    Some(_) => HostFn::StateProbe,
                };
                self.callv(f, &[el, var, k])
            }
            ExprKind::Metadata(key) => {
                let (el, key) = (self.elem(), self.iconst(*key as i64));
                if let Some(ty) = bound.as_ref().filter(|t| repr(t) != Repr::H) {
                    self.scalar_metadata_probe(el, key, ty, arms);
                    return true;
                }
                self.callv(HostFn::MetadataProbe, &[el, key])
            }
            _ => return false,
        };
        self.may_fail();
        let after = self.b.create_block();
        self.arms(
            arms,
            after,
            true,
            |fx, p| match p {
                Pattern::Some(_) => Some(fx.b.ins().icmp_imm_s(IntCC::NotEqual, h, NONE as i64)),
                Pattern::None => Some(fx.b.ins().icmp_imm_s(IntCC::Equal, h, NONE as i64)),
                _ => None,
            },
            |fx, l| {
                let ty = fx.body.locals[l].ty.clone();
                let x = fx.unboxed(h, &ty);
                fx.set_local(l, x);
            },
        );
        true
    }

    /// `match get_metadata(k)` whose `Some(x)` binds a scalar: the value comes back in a
    /// register and its presence in [`RpcCtx::found`], so nothing is boxed.
    fn scalar_metadata_probe(&mut self, el: V, key: V, ty: &Type, arms: &'a [Arm]) {
        let v = match repr(ty) {
            Repr::F => self.callv(HostFn::MetadataProbeF, &[el, key]),
            r => {
                let kind = self.iconst(scalar_kind(ty).map_or(-1, |k| k as i64));
                let v = self.callv(HostFn::MetadataProbeI, &[el, key, kind]);
                if r == Repr::B {
                    self.b.ins().ireduce(types::I8, v)
                } else {
                    v
                }
            }
        };
        self.may_fail();
        let found = self.b.ins().load(types::I32, flags(), self.frame, FOUND);
        let after = self.b.create_block();
        self.arms(
            arms,
            after,
            true,
            |fx, p| match p {
                Pattern::Some(_) => Some(fx.b.ins().icmp_imm_s(IntCC::NotEqual, found, 0)),
                Pattern::None => Some(fx.b.ins().icmp_imm_s(IntCC::Equal, found, 0)),
                _ => None,
            },
            |fx, l| fx.set_local(l, v),
        );
    }

    fn match_(&mut self, scrutinee: &'a Expr, arms: &'a [Arm]) {
        if self.match_probe(scrutinee, arms) {
            return;
        }
        let v = self.expr(scrutinee);
        let r = repr(&scrutinee.ty);
        let after = self.b.create_block();
        let int_lits = r == Repr::I
            && arms.iter().all(|a| match &a.pattern {
                Pattern::Wildcard => true,
                Pattern::Lit(l) => lit_bits(l, &scrutinee.ty).is_some(),
                _ => false,
            });
        if int_lits && arms.len() > 2 {
            // A jump table (or a compare tree, for sparse values) over the literals.
            let mut switch = Switch::new();
            let mut seen = std::collections::HashSet::new();
            let mut otherwise = after;
            let mut bodies = Vec::new();
            for arm in arms {
                let blk = self.b.create_block();
                match &arm.pattern {
                    Pattern::Lit(l) => {
                        if let Some(bits) = lit_bits(l, &scrutinee.ty)
                            && seen.insert(bits)
                        {
                            switch.set_entry(u128::from(bits as u64), blk);
                            bodies.push((blk, &arm.body));
                        }
                    }
                    _ => {
                        otherwise = blk;
                        bodies.push((blk, &arm.body));
                        break;
                    }
                }
            }
            self.check_failures();
            for (blk, _) in &bodies {
                self.edge(*blk);
            }
            self.edge(otherwise);
            switch.emit(&mut self.b, v, otherwise);
            for (blk, body) in bodies {
                self.switch_to(blk);
                self.block(body);
                self.jump(after, &[]);
            }
            self.switch_to(after);
            return;
        }
        let ty = &scrutinee.ty;
        self.arms(
            arms,
            after,
            matches!(ty, Type::Bool | Type::Option(_)),
            |fx, p| fx.pattern_test(p, v, ty),
            |fx, l| {
                let inner = fx.callv(HostFn::OptInner, &[v]);
                fx.may_fail();
                let ty = fx.body.locals[l].ty.clone();
                let x = fx.unboxed(inner, &ty);
                fx.set_local(l, x);
            },
        );
    }

    /// Lowers a `match`'s arms in order, then continues in `after`: each arm's `test` (`None`:
    /// it matches whatever reaches it) branches to its body or on to the next arm; `bind`
    /// binds what a `Some(x)` arm names. With `complete` (the scrutinee is a bool or an
    /// option), an arm that matches every value the arms before it did not
    /// ([`completes`]) is entered without a test.
    fn arms(
        &mut self,
        arms: &'a [Arm],
        after: Block,
        complete: bool,
        test: impl Fn(&mut Self, &Pattern) -> Option<V>,
        bind: impl Fn(&mut Self, LocalId),
    ) {
        for (i, arm) in arms.iter().enumerate() {
            let cond = if complete && completes(&arms[..i], &arm.pattern) {
                None
            } else {
                test(self, &arm.pattern)
            };
            // An arm entered without a test is lowered where the tests got to.
            let next = cond.map(|c| {
                let (body_blk, next) = (self.b.create_block(), self.b.create_block());
                self.brif(c, body_blk, next);
                self.switch_to(body_blk);
                next
            });
            if let Pattern::Some(Some(l)) = &arm.pattern {
                bind(self, *l);
            }
            self.block(&arm.body);
            self.jump(after, &[]);
            match next {
                Some(next) => self.switch_to(next),
                None => {
                    // No value gets past an arm without a test.
                    self.dead();
                    break;
                }
            }
        }
        self.jump(after, &[]);
        self.switch_to(after);
    }

    /// The condition under which a pattern matches (`None`: always).
    fn pattern_test(&mut self, p: &Pattern, v: V, ty: &Type) -> Option<V> {
        let r = repr(ty);
        Some(match p {
            Pattern::Wildcard => return None,
            Pattern::Lit(l) => match (r, l) {
                (Repr::I, _) if lit_bits(l, ty).is_some() => {
                    let bits = lit_bits(l, ty).unwrap_or(0);
                    self.b.ins().icmp_imm_s(IntCC::Equal, v, bits)
                }
                (Repr::B, Value::Bool(x)) => {
                    self.b.ins().icmp_imm_s(IntCC::Equal, v, i64::from(*x))
                }
                (Repr::F, Value::Float(x)) if *ty == Type::Float => {
                    let c = self.b.ins().f64const(*x);
                    self.b.ins().fcmp(FloatCC::Equal, v, c)
                }
                (Repr::F, Value::Instant(x)) if *ty == Type::Instant => {
                    let c = self.b.ins().f64const(*x);
                    self.b.ins().fcmp(FloatCC::Equal, v, c)
                }
                _ => {
                    let h = self.boxed(v, ty);
                    let id = self.tables.constant(l);
                    let id = self.iconst(id as i64);
                    let eq = self.callv(HostFn::LitEq, &[h, id]);
                    self.may_fail();
                    self.b.ins().icmp_imm_s(IntCC::NotEqual, eq, 0)
                }
            },
            Pattern::Some(_) | Pattern::None if r != Repr::H => self.b.ins().iconst(types::I8, 0),
            Pattern::Some(_) => {
                let s = self.callv(HostFn::OptIsSome, &[v]);
                self.may_fail();
                self.b.ins().icmp_imm_s(IntCC::Equal, s, 1)
            }
            Pattern::None => {
                let s = self.callv(HostFn::OptIsSome, &[v]);
                self.may_fail();
                self.b.ins().icmp_imm_s(IntCC::Equal, s, 0)
            }
        })
    }

    fn foreach(&mut self, coll: &'a Collection, binder: &Binder, body: &'a [Stmt]) {
        let items = match coll {
            Collection::State(var) => {
                let (e, var) = (self.elem(), self.iconst(*var as i64));
                self.callv(HostFn::StateItems, &[e, var])
            }
            Collection::Value(e) => {
                let h = self.expr(e);
                self.callv(HostFn::Items, &[h])
            }
        };
        self.may_fail();
        let len = self.callv(HostFn::ItemsLen, &[items]);
        self.may_fail();
        // Everything made from here on is the loop's, reclaimed at each back edge.
        let floor = self.callv(HostFn::ArenaLen, &[]);
        let i = self.b.declare_var(types::I64);
        let zero = self.iconst(0);
        self.b.def_var(i, zero);
        let header = self.b.create_block();
        let body_blk = self.b.create_block();
        let cont = self.b.create_block();
        let exit = self.b.create_block();
        // Checked here, once, rather than at the loop's test on every iteration.
        self.check_failures();
        self.jump(header, &[]);
        self.switch_to(header);
        let iv = self.b.use_var(i);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, iv, len);
        self.brif(more, body_blk, exit);
        self.switch_to(body_blk);
        self.loops.push(BTreeSet::new());
        let iv = self.b.use_var(i);
        let e = self.elem();
        let item = self.callv(HostFn::ItemAtCounted, &[items, iv, e]);
        self.may_fail();
        match binder {
            Binder::One(l) => {
                let ty = self.body.locals[*l].ty.clone();
                let x = self.unboxed(item, &ty);
                self.set_local(*l, x);
            }
            Binder::Pair(a, b) => {
                for (which, l) in [(0, *a), (1, *b)] {
                    let w = self.iconst(which);
                    let part = self.callv(HostFn::Unpack, &[item, w]);
                    self.may_fail();
                    let ty = self.body.locals[l].ty.clone();
                    let x = self.unboxed(part, &ty);
                    self.set_local(l, x);
                }
            }
        }
        self.lambdas.push(Lambda::ForEach { cont });
        self.block(body);
        self.lambdas.pop();
        let assigned = self.loops.pop().unwrap_or_default();
        self.jump(cont, &[]);
        self.switch_to(cont);
        // An iteration that failed ends the loop here, before the sweep and the next one.
        self.check_failures();
        self.sweep(floor, &assigned);
        let iv = self.b.use_var(i);
        let next = self.b.ins().iadd_imm_s(iv, 1);
        self.b.def_var(i, next);
        self.jump(header, &[]);
        self.switch_to(exit);
    }

    /// A loop's back edge: keeps what the handle-typed locals the body `assigned` hold above
    /// the loop's `floor` and drops the rest of the iteration's values (see `host::Sweep`,
    /// which says why nothing else can hold such a handle here; a local the body does not
    /// assign still holds what it held when the loop started, below the floor).
    fn sweep(&mut self, floor: V, assigned: &BTreeSet<usize>) {
        let handles: Vec<usize> = assigned
            .iter()
            .copied()
            .filter(|&l| repr(&self.body.locals[l].ty) == Repr::H)
            .collect();
        let [first, .., last] = handles[..] else {
            // One local or none: one call.
            let h = match handles.first() {
                Some(&l) => self.b.use_var(self.locals[l]),
                None => self.unit(),
            };
            let kept = self.callv(HostFn::SweepOnly, &[floor, h]);
            if let Some(&l) = handles.first() {
                self.b.def_var(self.locals[l], kept);
            }
            return;
        };
        for &l in &handles {
            let h = self.b.use_var(self.locals[l]);
            let kept = if l == first {
                self.callv(HostFn::SweepBegin, &[floor, h])
            } else if l == last {
                self.callv(HostFn::SweepEnd, &[h])
            } else {
                self.callv(HostFn::SweepKeep, &[h])
            };
            self.b.def_var(self.locals[l], kept);
        }
    }

    // -----------------------------------------------------------------------------------
    // expressions

    fn expr(&mut self, e: &'a Expr) -> V {
        match &e.kind {
            ExprKind::Const(v) => self.const_expr(v, &e.ty),
            ExprKind::Param(_) => {
                let kind = self.iconst(fail::UNSUPPORTED);
                let z = self.iconst(0);
                self.call(HostFn::Fail, &[kind, z, z]);
                self.may_fail();
                self.zero(&e.ty)
            }
            ExprKind::Local(l) => self.b.use_var(self.locals[*l]),
            ExprKind::StateLoad(var) => {
                if let Some((p, kind)) = self.block_slot(*var) {
                    let off = (*var * 8) as i32;
                    return match kind {
                        SlotKind::Float | SlotKind::Instant => {
                            self.b.ins().load(types::F64, flags(), p, off)
                        }
                        SlotKind::Bool => {
                            let w = self.b.ins().load(types::I64, flags(), p, off);
                            self.b.ins().ireduce(types::I8, w)
                        }
                        SlotKind::Int | SlotKind::Uint => {
                            self.b.ins().load(types::I64, flags(), p, off)
                        }
                    };
                }
                let zero = self.constant(&e.ty.zero_value());
                let (el, var) = (self.elem(), self.iconst(*var as i64));
                let h = self.callv(HostFn::StateLoad, &[el, var, zero]);
                self.may_fail();
                self.unboxed(h, &e.ty)
            }
            ExprKind::StateGet { var, key } => {
                let k = self.expr(key);
                let k = self.boxed(k, &key.ty);
                let (el, var) = (self.elem(), self.iconst(*var as i64));
                let h = self.callv(HostFn::StateGet, &[el, var, k]);
                self.may_fail();
                self.unboxed(h, &e.ty)
            }
            ExprKind::StateRmw {
                var,
                key,
                binder,
                body,
            } => {
                let k = self.expr(key);
                let k = self.boxed(k, &key.ty);
                let zero_v = self.element.state[*var].value_type().zero_value();
                let zero = self.constant(&zero_v);
                let (el, varc) = (self.elem(), self.iconst(*var as i64));
                let begun = self.callv(HostFn::RmwBegin, &[el, varc, k, zero]);
                self.may_fail();
                let bty = self.body.locals[*binder].ty.clone();
                let cur = self.unboxed(begun, &bty);
                self.set_local(*binder, cur);
                let r = repr(&e.ty);
                let exit = self.b.create_block();
                let result = self.b.append_block_param(exit, clif(r));
                self.lambdas.push(Lambda::Rmw { exit, repr: r });
                self.block(body);
                self.lambdas.pop();
                let z = self.zero(&e.ty);
                let z = if r == Repr::H { self.unit() } else { z };
                self.jump(exit, &[z]);
                self.switch_to(exit);
                let new = self.b.use_var(self.locals[*binder]);
                let new = self.boxed(new, &bty);
                let (el, varc) = (self.elem(), self.iconst(*var as i64));
                self.call(HostFn::RmwEnd, &[el, varc, k, new, begun]);
                self.may_fail();
                result
            }
            ExprKind::StateSize(var) => {
                let (el, var) = (self.elem(), self.iconst(*var as i64));
                let n = self.callv(HostFn::StateSize, &[el, var]);
                self.may_fail();
                n
            }
            ExprKind::ValueGet { coll, key } => {
                let c = self.expr(coll);
                let k = self.expr(key);
                let k = self.boxed(k, &key.ty);
                let h = self.callv(HostFn::ValueGet, &[c, k]);
                self.may_fail();
                self.unboxed(h, &e.ty)
            }
            ExprKind::Unary { op, operand } => {
                let v = self.expr(operand);
                match (op, repr(&operand.ty), &operand.ty) {
                    (UnOp::Not, Repr::B, _) => self.b.ins().icmp_imm_s(IntCC::Equal, v, 0),
                    (UnOp::Neg, Repr::I, Type::Int) => self.b.ins().ineg(v),
                    (UnOp::Neg, Repr::F, Type::Float) => self.b.ins().fneg(v),
                    _ => {
                        let h = self.boxed(v, &operand.ty);
                        let op = self.iconst(if *op == UnOp::Not { 0 } else { 1 });
                        let r = self.callv(HostFn::Unary, &[op, h]);
                        self.may_fail();
                        self.unboxed(r, &e.ty)
                    }
                }
            }
            ExprKind::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, &e.ty),
            ExprKind::Convert { operand } => {
                let v = self.expr(operand);
                self.convert(v, &operand.ty, &e.ty)
            }
            ExprKind::Unwrap(inner) => {
                let v = self.expr(inner);
                if !matches!(inner.ty, Type::Option(_)) {
                    return v;
                }
                let what = match &inner.kind {
                    ExprKind::StateGet { .. } | ExprKind::ValueGet { .. } => 0,
                    ExprKind::Metadata(_) => 1,
                    _ => 2,
                };
                let what = self.iconst(what);
                let h = self.callv(HostFn::Unwrap, &[v, what]);
                self.may_fail();
                self.unboxed(h, &e.ty)
            }
            ExprKind::MakePair(a, b) => {
                let x = self.expr(a);
                let x = self.boxed(x, &a.ty);
                let y = self.expr(b);
                let y = self.boxed(y, &b.ty);
                let h = self.callv(HostFn::MakePair, &[x, y]);
                self.may_fail();
                h
            }
            ExprKind::MakeSome(v) => {
                let x = self.expr(v);
                let x = self.boxed(x, &v.ty);
                let h = self.callv(HostFn::MakeSome, &[x]);
                self.may_fail();
                h
            }
            ExprKind::Field { msg, field } => {
                let m = self.expr(msg);
                let id = self.tables.field(field);
                let id = self.iconst(id as i64);
                match repr(&e.ty) {
                    Repr::I => {
                        let v = self.callv(HostFn::FieldReadInt, &[m, id]);
                        self.may_fail();
                        v
                    }
                    Repr::B => {
                        let v = self.callv(HostFn::FieldReadInt, &[m, id]);
                        self.may_fail();
                        self.b.ins().icmp_imm_s(IntCC::NotEqual, v, 0)
                    }
                    Repr::F => {
                        let v = self.callv(HostFn::FieldReadFloat, &[m, id]);
                        self.may_fail();
                        v
                    }
                    Repr::H => {
                        let v = self.callv(HostFn::FieldRead, &[m, id]);
                        self.may_fail();
                        v
                    }
                }
            }
            ExprKind::MetaStatus(msg) => {
                let m = self.expr(msg);
                let h = self.callv(HostFn::MetaStatus, &[m]);
                self.may_fail();
                h
            }
            ExprKind::MetaCode(msg) => {
                let m = self.expr(msg);
                let c = self.callv(HostFn::MetaCode, &[m]);
                self.may_fail();
                c
            }
            ExprKind::ByteSize { msg, field } => {
                let m = self.expr(msg);
                let id = match field {
                    Some(f) => self.tables.field(f) as i64,
                    None => -1,
                };
                let id = self.iconst(id);
                let n = self.callv(HostFn::ByteSize, &[m, id]);
                self.may_fail();
                n
            }
            ExprKind::Header { msg, name } => {
                let m = self.expr(msg);
                let n = self.expr(name);
                let h = self.callv(HostFn::HeaderGet, &[m, n]);
                self.may_fail();
                h
            }
            ExprKind::Metadata(key) => {
                let (el, key) = (self.elem(), self.iconst(*key as i64));
                let h = self.callv(HostFn::MetadataGet, &[el, key]);
                self.may_fail();
                h
            }
            ExprKind::Call { builtin, args } => self.builtin(*builtin, args, &e.ty),
        }
    }

    fn const_expr(&mut self, v: &Value, ty: &Type) -> V {
        match (repr(ty), v) {
            (Repr::I, Value::Int(i)) => self.iconst(*i),
            (Repr::I, Value::Uint(u)) => self.iconst(*u as i64),
            (Repr::B, Value::Bool(b)) => self.b.ins().iconst(types::I8, i64::from(*b)),
            (Repr::F, Value::Float(f) | Value::Instant(f)) => self.b.ins().f64const(*f),
            (Repr::H, v) => self.constant(v),
            (_, v) => {
                let h = self.constant(v);
                self.unboxed(h, ty)
            }
        }
    }

    fn binary(&mut self, op: BinOp, lhs: &'a Expr, rhs: &'a Expr, ty: &Type) -> V {
        if matches!(op, BinOp::And | BinOp::Or) && repr(&lhs.ty) == Repr::B {
            return self.short_circuit(op, lhs, rhs);
        }
        if let Some(v) = self.meta_status_compare(op, lhs, rhs) {
            return v;
        }
        let a = self.expr(lhs);
        let b = self.expr(rhs);
        if lhs.ty == rhs.ty
            && let Some(v) = self.scalar_binary(op, a, b, &lhs.ty)
        {
            return v;
        }
        let ha = self.boxed(a, &lhs.ty);
        let hb = self.boxed(b, &rhs.ty);
        let opc = self.iconst(host::binop_id(op));
        let r = self.callv(HostFn::Binary, &[opc, ha, hb]);
        self.may_fail();
        self.unboxed(r, ty)
    }

    fn short_circuit(&mut self, op: BinOp, lhs: &'a Expr, rhs: &'a Expr) -> V {
        let a = self.expr(lhs);
        let rhs_blk = self.b.create_block();
        let done = self.b.create_block();
        let out = self.b.append_block_param(done, types::I8);
        self.check_failures();
        self.edge(rhs_blk);
        self.edge(done);
        if op == BinOp::And {
            let f = self.b.ins().iconst(types::I8, 0);
            self.b
                .ins()
                .brif(a, rhs_blk, &[], done, &[BlockArg::Value(f)]);
        } else {
            let t = self.b.ins().iconst(types::I8, 1);
            self.b
                .ins()
                .brif(a, done, &[BlockArg::Value(t)], rhs_blk, &[]);
        }
        self.switch_to(rhs_blk);
        let b = self.expr(rhs);
        self.jump(done, &[b]);
        self.switch_to(done);
        out
    }

    /// `get(rpc, 'meta_status') == 'success'` compares the status code, without a string.
    fn meta_status_compare(&mut self, op: BinOp, lhs: &'a Expr, rhs: &'a Expr) -> Option<V> {
        if !matches!(op, BinOp::Eq | BinOp::Ne) {
            return None;
        }
        let (msg, lit) = match (&lhs.kind, &rhs.kind) {
            (ExprKind::MetaStatus(m), ExprKind::Const(Value::Str(s)))
            | (ExprKind::Const(Value::Str(s)), ExprKind::MetaStatus(m)) => (m, s.as_str()),
            _ => return None,
        };
        let m = self.expr(msg);
        let code = self.callv(HostFn::MetaCode, &[m]);
        self.may_fail();
        let eq = match lit {
            "success" => self.b.ins().icmp_imm_s(IntCC::Equal, code, 0),
            "failure" => self.b.ins().icmp_imm_s(IntCC::NotEqual, code, 0),
            _ => self.b.ins().iconst(types::I8, 0),
        };
        Some(if op == BinOp::Eq {
            eq
        } else {
            self.b.ins().bxor_imm_s(eq, 1)
        })
    }

    fn scalar_binary(&mut self, op: BinOp, a: V, b: V, ty: &Type) -> Option<V> {
        use BinOp::*;
        Some(match ty {
            Type::Int | Type::Uint => {
                let signed = *ty == Type::Int;
                match op {
                    Add => self.b.ins().iadd(a, b),
                    Sub => self.b.ins().isub(a, b),
                    Mul => self.b.ins().imul(a, b),
                    Div | Rem => self.int_divide(op, a, b, signed),
                    Eq | Ne | Lt | Le | Gt | Ge => {
                        let cc = match (op, signed) {
                            (Eq, _) => IntCC::Equal,
                            (Ne, _) => IntCC::NotEqual,
                            (Lt, true) => IntCC::SignedLessThan,
                            (Le, true) => IntCC::SignedLessThanOrEqual,
                            (Gt, true) => IntCC::SignedGreaterThan,
                            (Ge, true) => IntCC::SignedGreaterThanOrEqual,
                            (Lt, false) => IntCC::UnsignedLessThan,
                            (Le, false) => IntCC::UnsignedLessThanOrEqual,
                            (Gt, false) => IntCC::UnsignedGreaterThan,
                            _ => IntCC::UnsignedGreaterThanOrEqual,
                        };
                        self.b.ins().icmp(cc, a, b)
                    }
                    And | Or => return None,
                }
            }
            Type::Float | Type::Instant => match op {
                Add if *ty == Type::Float => self.b.ins().fadd(a, b),
                Sub if *ty == Type::Float => self.b.ins().fsub(a, b),
                Mul if *ty == Type::Float => self.b.ins().fmul(a, b),
                Div if *ty == Type::Float => self.b.ins().fdiv(a, b),
                // IEEE: ordered comparisons with NaN are false, `!=` is true.
                Eq => self.b.ins().fcmp(FloatCC::Equal, a, b),
                Ne => self.b.ins().fcmp(FloatCC::NotEqual, a, b),
                Lt => self.b.ins().fcmp(FloatCC::LessThan, a, b),
                Le => self.b.ins().fcmp(FloatCC::LessThanOrEqual, a, b),
                Gt => self.b.ins().fcmp(FloatCC::GreaterThan, a, b),
                Ge => self.b.ins().fcmp(FloatCC::GreaterThanOrEqual, a, b),
                _ => return None,
            },
            Type::Bool => match op {
                Eq => self.b.ins().icmp(IntCC::Equal, a, b),
                Ne => self.b.ins().icmp(IntCC::NotEqual, a, b),
                _ => return None,
            },
            _ => return None,
        })
    }

    /// Integer division and remainder: division by zero is a run-time error; `MIN / -1`
    /// wraps (Cranelift's `sdiv` would trap).
    fn int_divide(&mut self, op: BinOp, a: V, b: V, signed: bool) -> V {
        let ok = self.b.create_block();
        let zero = self.b.create_block();
        self.brif(b, ok, zero);
        self.switch_to(zero);
        let kind = self.iconst(fail::DIVISION_BY_ZERO);
        let z = self.iconst(0);
        self.call(HostFn::Fail, &[kind, z, z]);
        let err = self.exits.err;
        self.jump(err, &[]);
        self.switch_to(ok);
        if !signed {
            return if op == BinOp::Div {
                self.b.ins().udiv(a, b)
            } else {
                self.b.ins().urem(a, b)
            };
        }
        // b == -1: a / -1 = -a (wrapping), a % -1 = 0. Any other b cannot overflow.
        let minus_one = self.b.ins().icmp_imm_s(IntCC::Equal, b, -1);
        let one = self.iconst(1);
        let safe_b = self.b.ins().select(minus_one, one, b);
        if op == BinOp::Div {
            let q = self.b.ins().sdiv(a, safe_b);
            let neg = self.b.ins().ineg(a);
            self.b.ins().select(minus_one, neg, q)
        } else {
            let r = self.b.ins().srem(a, safe_b);
            let z = self.iconst(0);
            self.b.ins().select(minus_one, z, r)
        }
    }

    /// Numeric conversions inline: one instruction where they cannot fail, behind a range
    /// test for `int`/`uint`; the rest (to and from strings) through the host's `convert`.
    fn convert(&mut self, v: V, from: &Type, to: &Type) -> V {
        if let Some(r) = self.scalar_convert(v, from, to) {
            return r;
        }
        if let Some(fits) = self.fits(v, from, to) {
            return self.checked_convert(v, fits, from, to);
        }
        self.host_convert(v, from, to)
    }

    fn host_convert(&mut self, v: V, from: &Type, to: &Type) -> V {
        let h = self.boxed(v, from);
        let t = self.tables.ty(to);
        let t = self.iconst(t as i64);
        let r = self.callv(HostFn::Convert, &[h, t]);
        self.may_fail();
        self.unboxed(r, to)
    }

    /// A conversion that cannot fail (`float` of a large integer rounds, as documented).
    fn scalar_convert(&mut self, v: V, from: &Type, to: &Type) -> Option<V> {
        use Type::*;
        Some(match (from, to) {
            (Int, Int) | (Uint, Uint) => v,
            // Arena values are immutable, so a string converts to itself by handle.
            (Str, Str) => v,
            (Float | Instant, Float) => v,
            (Int, Float) => self.b.ins().fcvt_from_sint(types::F64, v),
            (Uint, Float) => self.b.ins().fcvt_from_uint(types::F64, v),
            (Bool, Int | Uint) => self.b.ins().uextend(types::I64, v),
            (Bool, Float) => {
                let w = self.b.ins().uextend(types::I64, v);
                self.b.ins().fcvt_from_uint(types::F64, w)
            }
            _ => return None,
        })
    }

    /// For `int(x)` and `uint(x)` of a number, whether `v` fits the result: the bounds of
    /// `builtins::to_int` and `to_uint` (NaN fails every ordered comparison).
    fn fits(&mut self, v: V, from: &Type, to: &Type) -> Option<V> {
        use Type::*;
        let within = |fx: &mut Self, low: FloatCC, lo: f64, hi: f64| {
            let lo = fx.b.ins().f64const(lo);
            let hi = fx.b.ins().f64const(hi);
            let above = fx.b.ins().fcmp(low, v, lo);
            let below = fx.b.ins().fcmp(FloatCC::LessThan, v, hi);
            fx.b.ins().band(above, below)
        };
        Some(match (from, to) {
            // The same test both ways: the sign bit is clear.
            (Int, Uint) | (Uint, Int) => {
                self.b
                    .ins()
                    .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, v, 0)
            }
            (Float | Instant, Int) => within(
                self,
                FloatCC::GreaterThanOrEqual,
                builtins::INT_LOW,
                builtins::INT_HIGH,
            ),
            (Float | Instant, Uint) => {
                within(self, FloatCC::GreaterThan, -1.0, builtins::UINT_HIGH)
            }
            _ => return None,
        })
    }

    /// Converts inline where `fits`; otherwise the host converts, and so reports the error
    /// with the interpreter's words (and, should the two ever disagree, its result).
    fn checked_convert(&mut self, v: V, fits: V, from: &Type, to: &Type) -> V {
        let fast = self.b.create_block();
        let slow = self.b.create_block();
        let done = self.b.create_block();
        let out = self.b.append_block_param(done, types::I64);
        self.b.set_cold_block(slow);
        self.brif(fits, fast, slow);
        self.switch_to(fast);
        let r = match from {
            Type::Float | Type::Instant if *to == Type::Int => {
                self.b.ins().fcvt_to_sint_sat(types::I64, v)
            }
            Type::Float | Type::Instant => self.b.ins().fcvt_to_uint_sat(types::I64, v),
            _ => v,
        };
        self.jump(done, &[r]);
        self.switch_to(slow);
        let r = self.host_convert(v, from, to);
        self.jump(done, &[r]);
        self.switch_to(done);
        out
    }

    fn builtin(&mut self, bi: Builtin, args: &'a [Expr], ty: &Type) -> V {
        // Every argument is evaluated first, in order, as the interpreter does.
        let vals: Vec<V> = args.iter().map(|a| self.expr(a)).collect();
        let aty = |i: usize| args.get(i).map(|a| a.ty.clone()).unwrap_or(Type::Unit);
        match bi {
            Builtin::CurrentTime => {
                // The clock is the embedder's and may fail (`hc_now` is guarded): the failure
                // belongs to this element, not to the next checked call's.
                let t = self.callv(HostFn::Now, &[]);
                self.may_fail();
                return t;
            }
            Builtin::RpcId => return self.callv(HostFn::RpcId, &[]),
            Builtin::Method => return self.callv(HostFn::Method, &[]),
            Builtin::Src => return self.callv(HostFn::Src, &[]),
            Builtin::Dst => {
                let m = match self.msg_local() {
                    Some(m) => m,
                    None => self.unit(),
                };
                let h = self.callv(HostFn::Dst, &[m]);
                self.may_fail();
                return h;
            }
            Builtin::RandomF if vals.len() == 2 && repr(&aty(0)) == Repr::F => {
                let el = self.elem();
                let r = self.callv(HostFn::RandomF, &[el, vals[0], vals[1]]);
                self.may_fail();
                return r;
            }
            Builtin::RandomI if vals.len() == 2 && aty(0) == Type::Int => {
                let el = self.elem();
                let r = self.callv(HostFn::RandomI, &[el, vals[0], vals[1]]);
                self.may_fail();
                return r;
            }
            Builtin::RandomChoices if vals.len() == 2 && aty(1) == Type::Int => {
                let el = self.elem();
                let r = self.callv(HostFn::RandomChoices, &[el, vals[0], vals[1]]);
                self.may_fail();
                return r;
            }
            Builtin::Encrypt if vals.len() == 2 => {
                let el = self.elem();
                let v = self.boxed(vals[0], &aty(0));
                let r = self.callv(HostFn::Encrypt, &[el, v, vals[1]]);
                self.may_fail();
                return r;
            }
            Builtin::TimeDiff if aty(0) == Type::Instant && aty(1) == Type::Instant => {
                return self.b.ins().fsub(vals[0], vals[1]);
            }
            Builtin::Min | Builtin::Max if vals.len() == 2 && aty(0) == aty(1) => {
                if let Some(v) = self.min_max(bi == Builtin::Min, vals[0], vals[1], &aty(0)) {
                    return v;
                }
            }
            Builtin::Abs if vals.len() == 1 => match aty(0) {
                Type::Int => return self.b.ins().iabs(vals[0]),
                Type::Uint => return vals[0],
                Type::Float => return self.b.ins().fabs(vals[0]),
                _ => {}
            },
            Builtin::ToInt | Builtin::ToUint | Builtin::ToFloat | Builtin::ToStr
                if vals.len() == 1 =>
            {
                let to = match bi {
                    Builtin::ToInt => Type::Int,
                    Builtin::ToUint => Type::Uint,
                    Builtin::ToFloat => Type::Float,
                    _ => Type::Str,
                };
                if repr(&to) == repr(ty) {
                    return self.convert(vals[0], &aty(0), &to);
                }
            }
            _ => {}
        }
        if !bi.is_pure() || vals.len() > 3 {
            // The checker never produces these shapes; reject like the interpreter's type
            // errors rather than guess.
            let kind = self.iconst(fail::UNSUPPORTED);
            let z = self.iconst(0);
            self.call(HostFn::Fail, &[kind, z, z]);
            self.may_fail();
            return self.zero(ty);
        }
        let mut hs = Vec::with_capacity(3);
        for (i, v) in vals.iter().enumerate() {
            let h = self.boxed(*v, &aty(i));
            hs.push(h);
        }
        while hs.len() < 3 {
            hs.push(self.unit());
        }
        let id = self.tables.builtin(bi);
        let id = self.iconst(id as i64);
        let n = self.iconst(vals.len() as i64);
        let r = self.callv(HostFn::CallPure, &[id, n, hs[0], hs[1], hs[2]]);
        self.may_fail();
        self.unboxed(r, ty)
    }

    /// `min`/`max` inline: integers compare; floats follow IEEE 754-2019 minimum/maximum as
    /// `builtins::min_value` does (the first NaN operand wins, payload kept; −0 < +0).
    fn min_max(&mut self, min: bool, x: V, y: V, ty: &Type) -> Option<V> {
        Some(match ty {
            Type::Int => {
                let cc = if min {
                    IntCC::SignedLessThanOrEqual
                } else {
                    IntCC::SignedGreaterThanOrEqual
                };
                let c = self.b.ins().icmp(cc, x, y);
                self.b.ins().select(c, x, y)
            }
            Type::Uint => {
                let cc = if min {
                    IntCC::UnsignedLessThanOrEqual
                } else {
                    IntCC::UnsignedGreaterThanOrEqual
                };
                let c = self.b.ins().icmp(cc, x, y);
                self.b.ins().select(c, x, y)
            }
            Type::Float | Type::Instant => {
                let strict = self.b.ins().fcmp(
                    if min {
                        FloatCC::LessThan
                    } else {
                        FloatCC::GreaterThan
                    },
                    x,
                    y,
                );
                let eq = self.b.ins().fcmp(FloatCC::Equal, x, y);
                let xbits = self.b.ins().bitcast(types::I64, MemFlags::new(), x);
                let xneg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, xbits, 0);
                let sign_ok = if min {
                    xneg
                } else {
                    self.b.ins().bxor_imm_s(xneg, 1)
                };
                let tie = self.b.ins().band(eq, sign_ok);
                let first = self.b.ins().bor(strict, tie);
                let r = self.b.ins().select(first, x, y);
                let ynan = self.b.ins().fcmp(FloatCC::Unordered, y, y);
                let r = self.b.ins().select(ynan, y, r);
                let xnan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
                self.b.ins().select(xnan, x, r)
            }
            _ => return None,
        })
    }
}

/// Whether `p` matches every value the arms `before` it do not: `false` after `true`, `None`
/// after `Some` and the other way round. Such an arm is entered without a test, so an
/// `if`/`else` (a match on `true` and `false`) is one branch, not two and a path no value
/// takes.
fn completes(before: &[Arm], p: &Pattern) -> bool {
    before.iter().any(|a| match (&a.pattern, p) {
        (Pattern::Lit(Value::Bool(x)), Pattern::Lit(Value::Bool(y))) => x != y,
        (Pattern::Some(_), Pattern::None) | (Pattern::None, Pattern::Some(_)) => true,
        _ => false,
    })
}

fn lit_bits(l: &Value, ty: &Type) -> Option<i64> {
    match (l, ty) {
        (Value::Int(i), Type::Int) => Some(*i),
        (Value::Uint(u), Type::Uint) => Some(*u as i64),
        _ => None,
    }
}

/// Per-element set-up at the element's entry block: state block pointer and locals.
fn enter_element<'a, M: Module>(fx: &mut Fx<'a, '_, M>, k: usize, e: &'a Element, h: V) {
    fx.k = k;
    fx.element = e;
    fx.body = e.body(fx.handler);
    fx.blocks = block_vars(e);
    fx.block_ptr = if fx.blocks.iter().any(Option::is_some) {
        let arr = fx.b.ins().load(types::I64, flags(), fx.frame, BLOCKS);
        Some(fx.b.ins().load(types::I64, flags(), arr, (k * 8) as i32))
    } else {
        None
    };
    fx.entry_msg = h;
    fx.locals = fx
        .body
        .locals
        .iter()
        .map(|l| fx.b.declare_var(clif(repr(&l.ty))))
        .collect();
    for (i, l) in fx.body.locals.iter().enumerate() {
        let z = fx.zero(&l.ty);
        fx.b.def_var(fx.locals[i], z);
    }
    if let Some(m) = fx.body.msg {
        fx.b.def_var(fx.locals[m], h);
    }
    fx.lambdas.clear();
    fx.loops.clear();
}

/// Blocks taking one message handle each, one per element.
fn handle_blocks(b: &mut FunctionBuilder<'_>, n: usize) -> (Vec<Block>, Vec<V>) {
    let blocks: Vec<Block> = (0..n).map(|_| b.create_block()).collect();
    let params = blocks
        .iter()
        .map(|blk| b.append_block_param(*blk, types::I64))
        .collect();
    (blocks, params)
}

/// A function's entry block, switched to, and its frame parameter.
fn enter_function<'f>(
    func: &'f mut Function,
    fctx: &'f mut FunctionBuilderContext,
) -> (FunctionBuilder<'f>, V) {
    let mut b = FunctionBuilder::new(func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let frame = b.block_params(entry)[0];
    (b, frame)
}

impl<'a, 'f, M: Module> Fx<'a, 'f, M> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        b: FunctionBuilder<'f>,
        module: &'a mut M,
        imports: &'a mut Imports,
        tables: &'a mut Tables,
        frame: V,
        handler: Handler,
        first: &'a Element,
        entry_msg: V,
        exits: Exits,
    ) -> Self {
        Fx {
            b,
            module,
            imports,
            refs: Vec::new(),
            tables,
            frame,
            handler,
            k: 0,
            element: first,
            body: first.body(handler),
            locals: Vec::new(),
            blocks: Vec::new(),
            block_ptr: None,
            entry_msg,
            exits,
            lambdas: Vec::new(),
            loops: Vec::new(),
            missing: None,
            pending: false,
            pending_at: SecondaryMap::new(),
            entered: SecondaryMap::new(),
        }
    }

    /// Seals and finalises the function; a host function the module lacked fails it.
    fn finish(mut self) -> Result<(), JitError> {
        self.b.seal_all_blocks();
        let cfg = self.module.target_config();
        self.b.finalize(cfg);
        match self.missing {
            Some(f) => Err(JitError::MissingHostFn(f)),
            None => Ok(()),
        }
    }
}

/// Lowers the request function of a segment into `func`.
pub fn lower_request<M: Module>(
    module: &mut M,
    imports: &mut Imports,
    tables: &mut Tables,
    elements: &[Arc<Element>],
    func: &mut Function,
    fctx: &mut FunctionBuilderContext,
) -> Result<(), JitError> {
    let first = elements.first().ok_or(JitError::EmptySegment)?;
    let (mut b, frame) = enter_function(func, fctx);
    let n = elements.len();
    let (starts, params) = handle_blocks(&mut b, n);
    let forward = b.create_block();
    let fwd_msg = b.append_block_param(forward, types::I64);
    let h0 = b.ins().iconst(types::I64, 0);
    b.ins().jump(starts[0], &[BlockArg::Value(h0)]);
    let dummy = b.create_block();
    let exits = Exits {
        next: forward,
        reply: None,
        err: dummy,
    };
    let mut fx = Fx::new(
        b,
        module,
        imports,
        tables,
        frame,
        Handler::Req,
        first,
        h0,
        exits,
    );
    // Nothing is pending where the function starts.
    fx.pending_at[starts[0]] = Incoming::Checked;
    // One error exit and one reply exit for the whole function: each element says where it
    // starts which element it is and what it received (two stores), so the exits need not
    // be its own. An error and a reply exit per element were a tenth of the blocks the
    // register allocator went through, for code that runs only when a request stops early.
    let err = fx.b.create_block();
    let reply = fx.b.create_block();
    let reply_msg = fx.b.append_block_param(reply, types::I64);
    for (k, e) in elements.iter().enumerate() {
        fx.switch_to(starts[k]);
        let h = params[k];
        fx.store_u32(DECIDED, k as u32);
        fx.b.ins().store(flags(), h, frame, ENTRY_MSG);
        fx.exits = Exits {
            next: starts.get(k + 1).copied().unwrap_or(forward),
            reply: Some(reply),
            err,
        };
        enter_element(&mut fx, k, e, h);
        fx.block(&e.req.block);
        fx.fall_off();
    }
    fx.b.switch_to_block(err);
    fx.store_u32(VERDICT, verdict::ERROR);
    fx.b.ins().return_(&[]);
    fx.b.switch_to_block(reply);
    fx.store_u32(VERDICT, verdict::REPLY);
    fx.b.ins().store(flags(), reply_msg, frame, MSG);
    fx.b.ins().return_(&[]);
    fx.b.switch_to_block(forward);
    fx.store_u32(VERDICT, verdict::FORWARD);
    fx.store_u32(DECIDED, n as u32);
    fx.b.ins().store(flags(), fwd_msg, frame, MSG);
    fx.b.ins().store(flags(), fwd_msg, frame, ENTRY_MSG);
    fx.b.ins().return_(&[]);
    fx.b.switch_to_block(dummy);
    fx.b.ins().return_(&[]);
    fx.finish()
}

/// Lowers the response function of a segment into `func`.
pub fn lower_response<M: Module>(
    module: &mut M,
    imports: &mut Imports,
    tables: &mut Tables,
    elements: &[Arc<Element>],
    func: &mut Function,
    fctx: &mut FunctionBuilderContext,
) -> Result<(), JitError> {
    let first = elements.first().ok_or(JitError::EmptySegment)?;
    let (mut b, frame) = enter_function(func, fctx);
    let n = elements.len();
    let (starts, params) = handle_blocks(&mut b, n);
    let done = b.create_block();
    let done_msg = b.append_block_param(done, types::I64);
    let h0 = b.ins().iconst(types::I64, 0);
    let start = b.ins().load(types::I32, flags(), frame, START);
    let stubs: Vec<Block> = (0..n).map(|_| b.create_block()).collect();
    let otherwise = b.create_block();
    let mut switch = Switch::new();
    for (k, s) in stubs.iter().enumerate() {
        switch.set_entry(k as u128, *s);
    }
    switch.emit(&mut b, start, otherwise);
    for (k, s) in stubs.iter().enumerate() {
        b.switch_to_block(*s);
        b.ins().jump(starts[k], &[BlockArg::Value(h0)]);
    }
    b.switch_to_block(otherwise);
    b.ins().jump(done, &[BlockArg::Value(h0)]);
    let exits = Exits {
        next: done,
        reply: None,
        err: done,
    };
    let mut fx = Fx::new(
        b,
        module,
        imports,
        tables,
        frame,
        Handler::Resp,
        first,
        h0,
        exits,
    );
    // Nothing is pending where the function starts, whichever element it starts at.
    for s in &starts {
        fx.pending_at[*s] = Incoming::Checked;
    }
    for (k, e) in elements.iter().enumerate() {
        fx.switch_to(starts[k]);
        let h = params[k];
        let err = fx.b.create_block();
        // The response goes up to the element before, or leaves the segment.
        let prev = if k == 0 { done } else { starts[k - 1] };
        fx.exits = Exits {
            next: prev,
            reply: None,
            err,
        };
        enter_element(&mut fx, k, e, h);
        fx.block(&e.resp.block);
        fx.fall_off();
        fx.switch_to(err);
        let el = fx.elem();
        let m = fx.callv(HostFn::RespError, &[el, h]);
        // `RespError` took the failure: nothing is pending after it.
        fx.pending = false;
        fx.jump(prev, &[m]);
    }
    fx.b.switch_to_block(done);
    fx.b.ins().store(flags(), done_msg, frame, MSG);
    fx.b.ins().return_(&[]);
    fx.finish()
}

/// A rejection's code as the context carries it.
pub fn code_of(n: u32) -> Code {
    Code::from_number(n).unwrap_or(Code::Internal)
}

/// `e` as a read of a `string` field, `get(m, f)` or `str(get(m, f))`: the message
/// expression and the field.
fn string_field(e: &Expr) -> Option<(&Expr, &FieldPath)> {
    match &e.kind {
        ExprKind::Field { msg, field } if e.ty == Type::Str => Some((msg, field)),
        ExprKind::Call {
            builtin: Builtin::ToStr,
            args,
        } if e.ty == Type::Str => match args.as_slice() {
            [arg] => string_field(arg),
            _ => None,
        },
        _ => None,
    }
}
