//! The host side of one compiled call: the frame compiled code receives, and the host
//! functions it calls (the table in [`weft_hostcalls::abi::HostFn`]).
//!
//! Every host function wraps the code the interpreter runs for the same construct: the state
//! store, the random stream, the clock, the channel sink, `eval`'s operators and pure
//! built-ins, and the wire codec. The only code of its own is moving values in and out of
//! the per-call arena.
//!
//! Host functions take `&mut Frame` (a pointer on the C ABI): compiled code passes back the
//! pointer it was given, so no host function dereferences a raw pointer. None of them
//! unwinds: each catches panics and reports them as a failed call.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use weft_hostcalls::abi::{HostFn, NONE, RpcCtx, ScalarKind};
use weft_hostcalls::builtins;
use weft_hostcalls::channel::ChannelRecord;
use weft_hostcalls::rng;
use weft_hostcalls::state::StateStore;
use weft_hostcalls::{Code, Message, MsgKind, Value};
use weft_ir::ast::{BinOp, UnOp};
use weft_ir::eval::{self, RuntimeError};
use weft_ir::interp::{Host, Instance, RpcInfo};
use weft_ir::ir::{Builtin, Element, Handler};
use weft_ir::schema::{FieldPath, FieldStep};
use weft_ir::types::Type;
use weft_ir::wire;

/// The handle of [`Value::Unit`], which takes no arena slot.
pub const UNIT: u64 = u64::MAX;

/// What compiled code refers to by number: constants and field paths.
#[derive(Debug, Default)]
pub struct Tables {
    pub consts: Vec<Value>,
    pub fields: Vec<FieldPath>,
    /// Builtins by number (their position here), for `CallPure`.
    pub builtins: Vec<Builtin>,
    /// Types by number, for `Convert`.
    pub types: Vec<Type>,
    /// Per field: its index among `extract`, when reads of it come from one pass over the
    /// message ([`wire::extractable`]).
    pub extract_slot: Vec<Option<usize>>,
    /// The leaves one [`wire::extract`] pass looks for: every extractable field the
    /// segment's code names.
    pub extract: Vec<FieldStep>,
}

impl Tables {
    pub fn constant(&mut self, v: &Value) -> u64 {
        // Keep the table small: identical constants share an id (`Ord` is structural).
        if let Some(i) = self.consts.iter().position(|c| c == v && same_kind(c, v)) {
            return i as u64;
        }
        self.consts.push(v.clone());
        (self.consts.len() - 1) as u64
    }

    pub fn field(&mut self, f: &FieldPath) -> u64 {
        if let Some(i) = self.fields.iter().position(|x| x == f) {
            return i as u64;
        }
        self.fields.push(f.clone());
        let slot = match f.leaf() {
            Some(leaf) if wire::extractable(f) => {
                self.extract.push(leaf.clone());
                Some(self.extract.len() - 1)
            }
            _ => None,
        };
        self.extract_slot.push(slot);
        (self.fields.len() - 1) as u64
    }

    pub fn builtin(&mut self, b: Builtin) -> u64 {
        if let Some(i) = self.builtins.iter().position(|x| *x == b) {
            return i as u64;
        }
        self.builtins.push(b);
        (self.builtins.len() - 1) as u64
    }

    pub fn ty(&mut self, t: &Type) -> u64 {
        if let Some(i) = self.types.iter().position(|x| x == t) {
            return i as u64;
        }
        self.types.push(t.clone());
        (self.types.len() - 1) as u64
    }
}

fn same_kind(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// Kinds of run-time error compiled code raises itself ([`HostFn::Fail`]).
pub mod fail {
    pub const DIVISION_BY_ZERO: i64 = 0;
    /// A construct the executor does not support where it appears (a send inside a
    /// read-modify-write); the interpreter reports the same as an internal type error.
    pub const UNSUPPORTED: i64 = 1;
}

/// One compiled call's frame: the ABI context first (compiled code reads and writes its
/// fields), then the host's own data, which compiled code never touches.
#[repr(C)]
pub struct Frame<'a, 'i, 'h> {
    pub ctx: RpcCtx,
    /// Borrowed from the caller's buffers rather than moved in and out: moving the buffers
    /// through the frame copied them with wide loads over narrow stores, which stall.
    pub arena: &'a mut Vec<Value>,
    pub tables: &'a Tables,
    pub elements: &'a [Arc<Element>],
    pub instances: &'a mut [&'i mut Instance],
    /// The RPC's scratch for the whole segment, and where each element of this part has
    /// its keys in it ([`weft_ir::interp::scratch_offsets`] of the segment, from the
    /// part's first element).
    pub scratch: &'a mut [Option<Value>],
    pub scratch_at: &'a [usize],
    pub rpc: &'a RpcInfo,
    pub handler: Handler,
    pub host: &'a mut Host<'h>,
    /// Whether the channel sink keeps records (its `enabled`), asked once per call rather
    /// than through a virtual call per emit.
    pub records: bool,
    /// The run-time error that set `ctx.err`.
    pub error: Option<RuntimeError>,
    /// The message text of a request-side rejection.
    pub reject: String,
    /// The fields of the last message read, from one pass over its bytes.
    pub extracted: &'a mut Extraction,
    /// The `foreach` iterations of the element handler running now.
    pub iterations: Iterations,
    /// The loop sweep under way, if any (see [`Sweep`]).
    pub sweep: &'a mut Sweep,
}

/// Reclaiming a `foreach` iteration's temporaries at the loop's back edge.
///
/// Every value compiled code makes goes into the arena, which is emptied only when the call
/// ends; a loop that builds a value per item (`s = s + t`) would keep every intermediate
/// one, so one RPC's memory grew with the square of its repeated field (400 MB for 2 000
/// items of 100 bytes, where the interpreter peaked at 1.5 MB). At the back edge the only
/// handles at or above the loop's floor (the arena's length when the loop started, after
/// its collection) that can still be used are in the handle-typed locals the loop body
/// assigns: any other local holds what it held before the loop, the collection and
/// everything an enclosing expression holds were made before the floor, and `foreach` is a
/// statement, so no temporary of the body lives across the edge. Compiled code passes each
/// such local through the sweep calls (`SweepBegin`, `SweepKeep`, `SweepEnd`, or
/// `SweepOnly` for one), which move its value down to the next free slot from the floor
/// (by a swap) and return its new handle; the last call drops everything above. The arena
/// stays at the floor plus the kept locals, whatever the number of iterations. (Taking the
/// kept values aside and putting them back after the truncation is simpler, but it moves
/// each twice: 2–4 % slower on the loops of bench/loops.)
#[derive(Debug, Default)]
pub struct Sweep {
    floor: u64,
    /// The next slot a kept value moves to.
    next: u64,
    /// Handles kept so far and where their values went (two locals may share one).
    placed: Vec<(u64, u64)>,
    /// Values moved aside by a swap, by the handle they had when the sweep began, with the
    /// slot they are in now.
    displaced: Vec<(u64, u64)>,
}

impl Sweep {
    fn begin(&mut self, floor: u64) {
        self.floor = floor;
        self.next = floor;
        self.placed.clear();
        self.displaced.clear();
    }

    /// Moves the value of `h` (a handle as the sweep began) to the next free slot; returns
    /// its handle from now on.
    fn keep(&mut self, arena: &mut [Value], h: u64) -> u64 {
        let len = arena.len() as u64;
        if h == UNIT || h < self.floor || h >= len {
            return h;
        }
        if let Some(&(_, to)) = self.placed.iter().find(|(from, _)| *from == h) {
            return to;
        }
        let at = match self.displaced.iter().position(|(from, _)| *from == h) {
            Some(i) => self.displaced.swap_remove(i).1,
            None => h,
        };
        let to = self.next;
        self.next += 1;
        if at != to {
            arena.swap(at as usize, to as usize);
            // Whatever was in `to` is in `at` now: a value displaced there before, or the
            // value that started there.
            match self.displaced.iter_mut().find(|(_, now)| *now == to) {
                Some(entry) => entry.1 = at,
                None => self.displaced.push((to, at)),
            }
        }
        self.placed.push((h, to));
        to
    }

    /// Drops every value above the kept ones.
    fn end(&mut self, arena: &mut Vec<Value>) {
        arena.truncate(usize::try_from(self.next).unwrap_or(usize::MAX));
    }

    /// Where a handle as the sweep began is after it: its new slot if it was kept, `None`
    /// if its value was dropped, the same handle below the floor.
    fn moved(&self, h: u64) -> Option<u64> {
        if h == UNIT || h < self.floor {
            return Some(h);
        }
        self.placed
            .iter()
            .find(|(from, _)| *from == h)
            .map(|&(_, to)| to)
    }
}

/// The `foreach` iterations of one element's handler run, counted against its instance's
/// limit (`Instance::max_iterations`) as the interpreter counts them. A fused function runs
/// several elements' handlers, each once, in order; the count starts again when the element
/// changes.
#[derive(Clone, Copy, Debug)]
pub struct Iterations {
    elem: i64,
    done: u64,
}

impl Default for Iterations {
    fn default() -> Self {
        Iterations { elem: -1, done: 0 }
    }
}

impl Iterations {
    fn count(&mut self, elem: i64, max: u64) -> Result<(), RuntimeError> {
        if self.elem != elem {
            *self = Iterations { elem, done: 0 };
        }
        weft_ir::eval::count_iteration(&mut self.done, max)
    }
}

/// The outcome of one [`wire::extract`] pass, for the message at arena handle `msg`. The
/// arena only grows during a call and its values are never changed in place (`set` makes a
/// new message), so within one call a handle names the same bytes and the recorded offsets
/// stay valid; each call starts with none.
pub struct Extraction {
    pub msg: u64,
    pub fields: Vec<wire::Extracted>,
}

impl Default for Extraction {
    fn default() -> Self {
        Extraction {
            msg: UNIT,
            fields: Vec::new(),
        }
    }
}

impl Frame<'_, '_, '_> {
    fn get(&self, h: u64) -> Result<&Value, RuntimeError> {
        if h == UNIT {
            return Ok(&Value::Unit);
        }
        usize::try_from(h)
            .ok()
            .and_then(|i| self.arena.get(i))
            .ok_or_else(|| RuntimeError::Type(format!("dangling value handle {h}")))
    }

    fn take_clone(&self, h: u64) -> Result<Value, RuntimeError> {
        self.get(h).cloned()
    }

    /// Moves the value out of its slot, leaving `Unit`: only for a handle nothing reads
    /// again, such as the text of a rejection (its handler ends there, and the next
    /// element's code cannot name this one's values). A read of the slot afterwards would
    /// find `Unit` and fail with a type error, never read freed memory.
    fn take_last_use(&mut self, h: u64) -> Result<Value, RuntimeError> {
        if h == UNIT {
            return Ok(Value::Unit);
        }
        usize::try_from(h)
            .ok()
            .and_then(|i| self.arena.get_mut(i))
            .map(|slot| std::mem::replace(slot, Value::Unit))
            .ok_or_else(|| RuntimeError::Type(format!("dangling value handle {h}")))
    }

    fn put(&mut self, v: Value) -> u64 {
        self.arena.push(v);
        (self.arena.len() - 1) as u64
    }

    fn msg(&self, h: u64) -> Result<&Arc<Message>, RuntimeError> {
        match self.get(h)? {
            Value::Msg(m) => Ok(m),
            other => Err(RuntimeError::Type(format!(
                "expected a message, got {}",
                other.kind_name()
            ))),
        }
    }

    fn instance(&mut self, elem: i64) -> Result<&mut Instance, RuntimeError> {
        usize::try_from(elem)
            .ok()
            .and_then(|k| self.instances.get_mut(k))
            .map(|i| &mut **i)
            .ok_or_else(|| RuntimeError::Type(format!("no element {elem} in the segment")))
    }

    /// Key `key` of element `elem` (of this part) in the RPC's scratch.
    fn scratch_slot(&mut self, elem: i64, key: u64) -> Result<&mut Option<Value>, RuntimeError> {
        let slot = usize::try_from(elem).ok().and_then(|k| {
            let (start, end) = (*self.scratch_at.get(k)?, *self.scratch_at.get(k + 1)?);
            let i = start.checked_add(usize::try_from(key).ok()?)?;
            (i < end).then_some(i)
        });
        match slot.and_then(|i| self.scratch.get_mut(i)) {
            Some(slot) => Ok(slot),
            None => Err(RuntimeError::Type(format!(
                "metadata key {key} of element {elem} outside the RPC's scratch"
            ))),
        }
    }

    fn element(&self, elem: i64) -> Result<&Arc<Element>, RuntimeError> {
        usize::try_from(elem)
            .ok()
            .and_then(|k| self.elements.get(k))
            .ok_or_else(|| RuntimeError::Type(format!("no element {elem} in the segment")))
    }

    #[cold]
    #[inline(never)]
    fn fail(&mut self, e: RuntimeError) {
        if self.ctx.err == 0 {
            self.error = Some(e);
        }
        self.ctx.err = 1;
    }
}

/// Runs a host function body: errors and panics set `ctx.err` and yield `default`.
///
/// While a failure is pending (`ctx.err` set), the body does not run: compiled code checks
/// for failures only before its own effects (`lower::Fx::check_failures`), so the host
/// calls it makes between a failure and that check must change nothing — no state written,
/// no record, no random number drawn, no clock read — as the interpreter, which stops at
/// the failure, makes none of them.
///
/// The body's error is handed to `fail` inside the unwinding guard, where the body left it:
/// matched outside, the whole `Result` (an error's width) was copied out of the guard's
/// return slot on every call, error or not.
fn guard<R: Copy>(
    f: &mut Frame<'_, '_, '_>,
    default: R,
    body: impl FnOnce(&mut Frame<'_, '_, '_>) -> Result<R, RuntimeError>,
) -> R {
    if f.ctx.err != 0 {
        return default;
    }
    let ran = catch_unwind(AssertUnwindSafe(|| match body(&mut *f) {
        Ok(r) => r,
        Err(e) => {
            f.fail(e);
            default
        }
    }));
    match ran {
        Ok(r) => r,
        Err(_) => {
            f.fail(RuntimeError::Type("a host function panicked".into()));
            default
        }
    }
}

fn binop(op: i64) -> Result<BinOp, RuntimeError> {
    Ok(match op {
        0 => BinOp::Or,
        1 => BinOp::And,
        2 => BinOp::Eq,
        3 => BinOp::Ne,
        4 => BinOp::Lt,
        5 => BinOp::Le,
        6 => BinOp::Gt,
        7 => BinOp::Ge,
        8 => BinOp::Add,
        9 => BinOp::Sub,
        10 => BinOp::Mul,
        11 => BinOp::Div,
        12 => BinOp::Rem,
        _ => return Err(RuntimeError::Type(format!("operator {op}"))),
    })
}

/// The number compiled code passes for an operator.
pub fn binop_id(op: BinOp) -> i64 {
    match op {
        BinOp::Or => 0,
        BinOp::And => 1,
        BinOp::Eq => 2,
        BinOp::Ne => 3,
        BinOp::Lt => 4,
        BinOp::Le => 5,
        BinOp::Gt => 6,
        BinOp::Ge => 7,
        BinOp::Add => 8,
        BinOp::Sub => 9,
        BinOp::Mul => 10,
        BinOp::Div => 11,
        BinOp::Rem => 12,
    }
}

fn int_of(v: &Value) -> Result<i64, RuntimeError> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::Uint(u) => Ok(*u as i64),
        Value::Bool(b) => Ok(i64::from(*b)),
        other => Err(RuntimeError::Type(format!(
            "expected an integer, got {}",
            other.kind_name()
        ))),
    }
}

fn float_of(v: &Value) -> Result<f64, RuntimeError> {
    v.as_float()
        .ok_or_else(|| RuntimeError::Type(format!("expected a float, got {}", v.kind_name())))
}

type F<'x, 'a, 'i, 'h> = &'x mut Frame<'a, 'i, 'h>;

extern "C" fn hc_fail(f: F, kind: i64, _a: i64, _b: i64) {
    let e = match kind {
        fail::DIVISION_BY_ZERO => RuntimeError::DivisionByZero,
        _ => RuntimeError::Type("send inside a read-modify-write".into()),
    };
    f.fail(e);
}

extern "C" fn hc_box_int(f: F, v: i64) -> u64 {
    f.put(Value::Int(v))
}
extern "C" fn hc_box_uint(f: F, v: i64) -> u64 {
    f.put(Value::Uint(v as u64))
}
extern "C" fn hc_box_float(f: F, v: f64) -> u64 {
    f.put(Value::Float(v))
}
extern "C" fn hc_box_bool(f: F, v: i64) -> u64 {
    f.put(Value::Bool(v != 0))
}
extern "C" fn hc_box_instant(f: F, v: f64) -> u64 {
    f.put(Value::Instant(v))
}
extern "C" fn hc_box_unit(_f: F) -> u64 {
    UNIT
}
extern "C" fn hc_unbox_int(f: F, h: u64) -> i64 {
    guard(f, 0, |f| int_of(f.get(h)?))
}
extern "C" fn hc_unbox_bool(f: F, h: u64) -> i64 {
    guard(f, 0, |f| match f.get(h)? {
        Value::Bool(b) => Ok(i64::from(*b)),
        other => Err(RuntimeError::Type(format!(
            "expected a bool, got {}",
            other.kind_name()
        ))),
    })
}
extern "C" fn hc_unbox_float(f: F, h: u64) -> f64 {
    guard(f, 0.0, |f| float_of(f.get(h)?))
}

extern "C" fn hc_const(f: F, id: u64) -> u64 {
    guard(f, UNIT, |f| {
        let v = usize::try_from(id)
            .ok()
            .and_then(|i| f.tables.consts.get(i))
            .cloned()
            .ok_or_else(|| RuntimeError::Type(format!("constant {id}")))?;
        Ok(f.put(v))
    })
}

extern "C" fn hc_unary(f: F, op: i64, h: u64) -> u64 {
    guard(f, UNIT, |f| {
        let op = if op == 0 { UnOp::Not } else { UnOp::Neg };
        let r = eval::unary(op, f.get(h)?)?;
        Ok(f.put(r))
    })
}

extern "C" fn hc_binary(f: F, op: i64, a: u64, b: u64) -> u64 {
    guard(f, UNIT, |f| {
        let r = eval::binary(binop(op)?, f.get(a)?, f.get(b)?)?;
        Ok(f.put(r))
    })
}

extern "C" fn hc_convert(f: F, h: u64, ty: u64) -> u64 {
    guard(f, UNIT, |f| {
        let t = usize::try_from(ty)
            .ok()
            .and_then(|i| f.tables.types.get(i))
            .ok_or_else(|| RuntimeError::Type(format!("type {ty}")))?;
        let r = eval::convert(f.get(h)?, t)?;
        Ok(f.put(r))
    })
}

/// A pure built-in over up to three boxed arguments.
extern "C" fn hc_call_pure(f: F, builtin: u64, n: i64, a: u64, b: u64, c: u64) -> u64 {
    guard(f, UNIT, |f| {
        let bi = usize::try_from(builtin)
            .ok()
            .and_then(|i| f.tables.builtins.get(i))
            .copied()
            .ok_or_else(|| RuntimeError::Type(format!("built-in {builtin}")))?;
        let mut args = Vec::with_capacity(3);
        for h in [a, b, c].into_iter().take(usize::try_from(n).unwrap_or(0)) {
            args.push(f.take_clone(h)?);
        }
        let r = match eval::call_pure(bi, &args) {
            Some(r) => r?,
            None => return Err(RuntimeError::Type(format!("built-in {bi:?} is not pure"))),
        };
        Ok(f.put(r))
    })
}

extern "C" fn hc_random_f(f: F, elem: i64, lo: f64, hi: f64) -> f64 {
    guard(f, 0.0, |f| {
        let inst = f.instance(elem)?;
        Ok(rng::randomf(inst.rng.as_mut(), lo, hi)?)
    })
}

extern "C" fn hc_random_i(f: F, elem: i64, lo: i64, hi: i64) -> i64 {
    guard(f, 0, |f| {
        let inst = f.instance(elem)?;
        Ok(rng::random_int(inst.rng.as_mut(), lo, hi)?)
    })
}

extern "C" fn hc_random_choices(f: F, elem: i64, items: u64, n: i64) -> u64 {
    guard(f, UNIT, |f| {
        let Value::Vec(items) = f.take_clone(items)? else {
            return Err(RuntimeError::Type("random_choices arguments".into()));
        };
        let inst = f.instance(elem)?;
        let r = rng::random_choices(inst.rng.as_mut(), &items, n);
        Ok(f.put(Value::Vec(r)))
    })
}

extern "C" fn hc_encrypt(f: F, elem: i64, v: u64, key: u64) -> u64 {
    guard(f, UNIT, |f| {
        let v = f.take_clone(v)?;
        let Value::Str(key) = f.take_clone(key)? else {
            return Err(RuntimeError::Type("encrypt key".into()));
        };
        let inst = f.instance(elem)?;
        let r = builtins::encrypt_value(&v, &key, inst.rng.as_mut())?;
        Ok(f.put(r))
    })
}

extern "C" fn hc_now(f: F) -> f64 {
    // The clock is the embedder's (`EngineOptions::clock`): guarded like any host call, so a
    // panicking clock fails the RPC instead of unwinding into compiled code (an abort).
    guard(f, 0.0, |f| Ok(f.host.now()))
}

extern "C" fn hc_rpc_id(f: F) -> i64 {
    f.rpc.id as i64
}

extern "C" fn hc_method(f: F) -> u64 {
    let m = f.rpc.method.clone();
    f.put(Value::Str(m))
}

extern "C" fn hc_src(f: F) -> u64 {
    let s = f.rpc.src.clone();
    f.put(Value::Str(s))
}

/// `dst()`, as the interpreter computes it from the handler's current message.
extern "C" fn hc_dst(f: F, msg: u64) -> u64 {
    guard(f, UNIT, |f| {
        if f.handler == Handler::Req
            && msg != UNIT
            && let Ok(m) = f.msg(msg)
            && m.kind == MsgKind::Request
            && let Some(d) = m.headers.get("dst")
        {
            let d = d.clone();
            return Ok(f.put(Value::Str(d)));
        }
        let d = f
            .rpc
            .routed
            .clone()
            .unwrap_or_else(|| f.rpc.service.clone());
        Ok(f.put(Value::Str(d)))
    })
}

fn var_kind(
    f: &Frame<'_, '_, '_>,
    elem: i64,
    var: u64,
) -> Result<weft_hostcalls::CellKind, RuntimeError> {
    let e = f.element(elem)?;
    usize::try_from(var)
        .ok()
        .and_then(|v| e.state.get(v))
        .map(|v| v.kind)
        .ok_or_else(|| RuntimeError::Type(format!("state variable {var}")))
}

/// Runs `read` on the state store of element `elem` with the key at arena handle `key`
/// (the key stays borrowed from the arena, not copied).
fn with_state_key<R>(
    f: &mut Frame<'_, '_, '_>,
    elem: i64,
    key: u64,
    read: impl FnOnce(&mut (dyn StateStore + Send), &Value) -> Result<R, RuntimeError>,
) -> Result<R, RuntimeError> {
    let store = store_of(f.instances, elem)?;
    let k = match key {
        UNIT => &Value::Unit,
        _ => usize::try_from(key)
            .ok()
            .and_then(|i| f.arena.get(i))
            .ok_or_else(|| RuntimeError::Type(format!("dangling value handle {key}")))?,
    };
    read(store, k)
}

/// The state store of element `elem` of the segment.
fn store_of<'s>(
    instances: &'s mut [&mut Instance],
    elem: i64,
) -> Result<&'s mut (dyn StateStore + Send), RuntimeError> {
    let inst = usize::try_from(elem)
        .ok()
        .and_then(|k| instances.get_mut(k))
        .ok_or_else(|| RuntimeError::Type(format!("no element {elem} in the segment")))?;
    Ok(&mut *inst.store)
}

/// `get(state, k)`: `Option<V>` for a map, the element (or an index error) for a vector.
extern "C" fn hc_state_get(f: F, elem: i64, var: u64, key: u64) -> u64 {
    guard(f, UNIT, |f| {
        let kind = var_kind(f, elem, var)?;
        let var = var as usize;
        let v = with_state_key(f, elem, key, |store, k| {
            let got = store.get(var, k)?;
            Ok(match kind {
                weft_hostcalls::CellKind::Vec => {
                    let len = store.len(var)?;
                    got.ok_or(RuntimeError::IndexOutOfRange {
                        index: k.as_int().unwrap_or(-1),
                        len,
                    })?
                }
                _ => got.map_or(Value::none(), Value::some),
            })
        })?;
        Ok(f.put(v))
    })
}

/// A whole state variable: a scalar's value (its zero, `zero`, when unset) or a vector.
extern "C" fn hc_state_load(f: F, elem: i64, var: u64, zero: u64) -> u64 {
    guard(f, UNIT, |f| {
        let kind = var_kind(f, elem, var)?;
        let zero = f.take_clone(zero)?;
        let inst = f.instance(elem)?;
        let var = var as usize;
        let v = match kind {
            weft_hostcalls::CellKind::Vec => Value::Vec(
                inst.store
                    .entries(var)?
                    .into_iter()
                    .map(|(_, v)| v)
                    .collect(),
            ),
            _ => inst.store.get(var, &Value::Unit)?.unwrap_or(zero),
        };
        Ok(f.put(v))
    })
}

extern "C" fn hc_state_set(f: F, elem: i64, var: u64, key: u64, value: u64) {
    guard(f, (), |f| {
        let k = f.take_clone(key)?;
        let v = f.take_clone(value)?;
        f.instance(elem)?.store.set(var as usize, k, v)?;
        Ok(())
    })
}

extern "C" fn hc_state_delete(f: F, elem: i64, var: u64, key: u64) {
    guard(f, (), |f| {
        let k = f.take_clone(key)?;
        f.instance(elem)?.store.delete(var as usize, &k)?;
        Ok(())
    })
}

extern "C" fn hc_state_size(f: F, elem: i64, var: u64) -> i64 {
    guard(f, 0, |f| {
        Ok(f.instance(elem)?.store.len(var as usize)? as i64)
    })
}

/// The items `foreach` walks over a state variable: pairs for a map, values otherwise.
extern "C" fn hc_state_items(f: F, elem: i64, var: u64) -> u64 {
    guard(f, UNIT, |f| {
        let is_map = var_kind(f, elem, var)? == weft_hostcalls::CellKind::Map;
        let items = f
            .instance(elem)?
            .store
            .entries(var as usize)?
            .into_iter()
            .map(|(k, v)| if is_map { Value::pair(k, v) } else { v })
            .collect();
        Ok(f.put(Value::Vec(items)))
    })
}

/// The start of `get(map, k, lambda)`: the stored value, or `zero` when missing.
extern "C" fn hc_rmw_begin(f: F, elem: i64, var: u64, key: u64, zero: u64) -> u64 {
    guard(f, UNIT, |f| {
        let k = f.take_clone(key)?;
        let zero = f.take_clone(zero)?;
        let v = f
            .instance(elem)?
            .store
            .get(var as usize, &k)?
            .unwrap_or(zero);
        Ok(f.put(v))
    })
}

/// Stores `new` under `key` unless it equals `begun`, the value [`hc_rmw_begin`] read (the
/// zero value for a missing key), as the interpreter does.
extern "C" fn hc_rmw_end(f: F, elem: i64, var: u64, key: u64, new: u64, begun: u64) {
    guard(f, (), |f| {
        if f.get(new)? == f.get(begun)? {
            return Ok(());
        }
        let k = f.take_clone(key)?;
        let v = f.take_clone(new)?;
        f.instance(elem)?.store.set(var as usize, k, v)?;
        Ok(())
    })
}

/// `set(local, k, v)`: a new value (values are immutable once in the arena, so another
/// local holding the old handle keeps the old value, as with the interpreter's copies).
extern "C" fn hc_local_set(f: F, coll: u64, key: u64, value: u64) -> u64 {
    guard(f, UNIT, |f| {
        let mut c = f.take_clone(coll)?;
        let k = f.take_clone(key)?;
        let v = f.take_clone(value)?;
        match &mut c {
            Value::Map(m) => {
                m.insert(k.into_canonical_key(), v);
            }
            Value::Vec(items) => {
                let Value::Int(i) = k else {
                    return Err(RuntimeError::Type("vector index".into()));
                };
                let len = items.len();
                match usize::try_from(i) {
                    Ok(u) if u < len => items[u] = v,
                    Ok(u) if u == len => items.push(v),
                    _ => return Err(RuntimeError::IndexOutOfRange { index: i, len }),
                }
            }
            other => {
                return Err(RuntimeError::Type(format!(
                    "set on a local {}",
                    other.kind_name()
                )));
            }
        }
        Ok(f.put(c))
    })
}

extern "C" fn hc_local_delete(f: F, coll: u64, key: u64) -> u64 {
    guard(f, UNIT, |f| {
        let mut c = f.take_clone(coll)?;
        let k = f.take_clone(key)?;
        match &mut c {
            Value::Map(m) => {
                m.remove(&*k.canonical_key());
            }
            Value::Vec(items) => {
                let Value::Int(i) = k else {
                    return Err(RuntimeError::Type("vector index".into()));
                };
                let len = items.len();
                match usize::try_from(i) {
                    Ok(u) if u < len => {
                        items.remove(u);
                    }
                    _ => return Err(RuntimeError::IndexOutOfRange { index: i, len }),
                }
            }
            other => {
                return Err(RuntimeError::Type(format!(
                    "delete on a local {}",
                    other.kind_name()
                )));
            }
        }
        Ok(f.put(c))
    })
}

extern "C" fn hc_value_get(f: F, coll: u64, key: u64) -> u64 {
    guard(f, UNIT, |f| {
        let k = f.take_clone(key)?;
        let v = match f.get(coll)? {
            Value::Map(m) => m
                .get(&*k.canonical_key())
                .cloned()
                .map_or(Value::none(), Value::some),
            Value::Vec(items) => eval::vec_index(items, &k)?,
            Value::Pair(p) => match k {
                Value::Int(0) => p.0.clone(),
                _ => p.1.clone(),
            },
            other => return Err(RuntimeError::Type(format!("get on {}", other.kind_name()))),
        };
        Ok(f.put(v))
    })
}

/// `Option<T>` used as `T`: `what` names the expression for the error (0 a map entry, 1
/// metadata, 2 an Option), as the interpreter words it.
extern "C" fn hc_unwrap(f: F, h: u64, what: i64) -> u64 {
    guard(f, UNIT, |f| match f.get(h)? {
        Value::Opt(Some(v)) => {
            let v = (**v).clone();
            Ok(f.put(v))
        }
        Value::Opt(None) => Err(RuntimeError::UnwrapNone(
            match what {
                0 => "a missing map entry",
                1 => "metadata that was never set",
                _ => "an Option",
            }
            .into(),
        )),
        _ => Ok(h),
    })
}

extern "C" fn hc_make_pair(f: F, a: u64, b: u64) -> u64 {
    guard(f, UNIT, |f| {
        let p = Value::pair(f.take_clone(a)?, f.take_clone(b)?);
        Ok(f.put(p))
    })
}

extern "C" fn hc_make_some(f: F, h: u64) -> u64 {
    guard(f, UNIT, |f| {
        let v = Value::some(f.take_clone(h)?);
        Ok(f.put(v))
    })
}

/// One half of a pair (`which` 0 or 1).
extern "C" fn hc_unpack(f: F, h: u64, which: i64) -> u64 {
    guard(f, UNIT, |f| match f.get(h)? {
        Value::Pair(p) => {
            let v = if which == 0 { p.0.clone() } else { p.1.clone() };
            Ok(f.put(v))
        }
        other => Err(RuntimeError::Type(format!(
            "unpacking a {}",
            other.kind_name()
        ))),
    })
}

/// 1 for `Some`, 0 for `None`, 2 for a value that is not an Option (no pattern binds it).
extern "C" fn hc_opt_is_some(f: F, h: u64) -> i64 {
    guard(f, 2, |f| {
        Ok(match f.get(h)? {
            Value::Opt(Some(_)) => 1,
            Value::Opt(None) => 0,
            _ => 2,
        })
    })
}

extern "C" fn hc_opt_inner(f: F, h: u64) -> u64 {
    guard(f, UNIT, |f| match f.get(h)? {
        Value::Opt(Some(v)) => {
            let v = (**v).clone();
            Ok(f.put(v))
        }
        _ => Err(RuntimeError::Type("binding the inside of None".into())),
    })
}

/// A `match` literal pattern: the language's `==`.
extern "C" fn hc_lit_eq(f: F, h: u64, id: u64) -> i64 {
    guard(f, 0, |f| {
        let lit = usize::try_from(id)
            .ok()
            .and_then(|i| f.tables.consts.get(i))
            .ok_or_else(|| RuntimeError::Type(format!("constant {id}")))?;
        Ok(i64::from(lit.lang_eq(f.get(h)?)))
    })
}

/// The items `foreach` walks over a value: a vector's elements or a map's pairs.
extern "C" fn hc_items(f: F, h: u64) -> u64 {
    guard(f, UNIT, |f| {
        let items = match f.get(h)? {
            Value::Vec(_) => return Ok(h),
            Value::Map(m) => m
                .iter()
                .map(|(k, v)| Value::pair(k.clone(), v.clone()))
                .collect(),
            other => {
                return Err(RuntimeError::Type(format!(
                    "foreach over {}",
                    other.kind_name()
                )));
            }
        };
        Ok(f.put(Value::Vec(items)))
    })
}

extern "C" fn hc_items_len(f: F, h: u64) -> i64 {
    guard(f, 0, |f| match f.get(h)? {
        Value::Vec(v) => Ok(v.len() as i64),
        other => Err(RuntimeError::Type(format!(
            "foreach over {}",
            other.kind_name()
        ))),
    })
}

/// Item `i` of a `foreach`, uncounted ([`HostFn::ItemAt`], for older objects).
extern "C" fn hc_item_at(f: F, h: u64, i: i64) -> u64 {
    guard(f, UNIT, |f| item_at(f, h, i))
}

/// The arena's length: a `foreach` loop's floor for [`Sweep`].
extern "C" fn hc_arena_len(f: F) -> u64 {
    f.arena.len() as u64
}

// A back edge makes one call per handle-typed local (the first also begins the sweep, the
// last also ends it), or one call when there is at most one: a counting loop paid 10 ns per
// iteration with a call of its own to begin and to end.

extern "C" fn hc_sweep_begin(f: F, floor: u64, h: u64) -> u64 {
    f.sweep.begin(floor);
    f.sweep.keep(f.arena, h)
}

extern "C" fn hc_sweep_keep(f: F, h: u64) -> u64 {
    f.sweep.keep(f.arena, h)
}

extern "C" fn hc_sweep_end(f: F, h: u64) -> u64 {
    let kept = f.sweep.keep(f.arena, h);
    sweep_end(f);
    kept
}

extern "C" fn hc_sweep_only(f: F, floor: u64, h: u64) -> u64 {
    f.sweep.begin(floor);
    let kept = f.sweep.keep(f.arena, h);
    sweep_end(f);
    kept
}

/// Drops every value above the kept ones; the frame's own handles follow their values.
fn sweep_end(f: &mut Frame<'_, '_, '_>) {
    let sweep = &*f.sweep;
    // Compiled code sets these only where a handler ends, never inside a loop; they follow
    // their values anyway rather than rely on that.
    f.ctx.msg = sweep.moved(f.ctx.msg).unwrap_or(UNIT);
    f.ctx.entry_msg = sweep.moved(f.ctx.entry_msg).unwrap_or(UNIT);
    // The extraction is a cache of one message's fields: it follows the message, or is
    // dropped with it.
    f.extracted.msg = sweep.moved(f.extracted.msg).unwrap_or(UNIT);
    f.sweep.end(f.arena);
}

/// Item `i` of a `foreach` of element `elem`, counted as one more iteration of its handler.
extern "C" fn hc_item_at_counted(f: F, h: u64, i: i64, elem: i64) -> u64 {
    guard(f, UNIT, |f| {
        let max = f.instance(elem)?.max_iterations;
        f.iterations.count(elem, max)?;
        item_at(f, h, i)
    })
}

fn item_at(f: &mut Frame<'_, '_, '_>, h: u64, i: i64) -> Result<u64, RuntimeError> {
    let v = match f.get(h)? {
        Value::Vec(v) => usize::try_from(i).ok().and_then(|i| v.get(i)).cloned(),
        _ => None,
    }
    .ok_or_else(|| RuntimeError::Type(format!("foreach item {i}")))?;
    Ok(f.put(v))
}

fn field(tables: &Tables, id: u64) -> Result<&FieldPath, RuntimeError> {
    usize::try_from(id)
        .ok()
        .and_then(|i| tables.fields.get(i))
        .ok_or_else(|| RuntimeError::Type(format!("field {id}")))
}

/// A field of a message: from the frame's extraction pass when the field is part of it (one
/// scan of the bytes serves every such field the segment reads), otherwise `wire::read`.
fn read_field(f: &mut Frame<'_, '_, '_>, msg: u64, id: u64) -> Result<Value, RuntimeError> {
    if let Some(x) = extracted_field(f.tables, f.arena, f.extracted, msg, id)? {
        return Ok(wire::decode_found(x.bytes, x.leaf, x.found)?);
    }
    let path = field(f.tables, id)?;
    Ok(wire::read(&f.msg(msg)?.bytes, path)?)
}

/// A field found by the frame's extraction pass: where it lies in its message's bytes.
struct ExtractedField<'f> {
    bytes: &'f [u8],
    leaf: &'f FieldStep,
    found: Option<wire::Found>,
}

/// Field `id` of message `msg` from the extraction pass (run now if this message has not
/// had it); `None` when the field is not part of the pass or `msg` is not a message.
/// Inlined, the offsets go to the caller in registers: returned through memory, the pair
/// the pass had just stored one word at a time was copied out with a 16-byte load, which
/// the CPU cannot forward from those stores (a stall, seen in `perf annotate`).
#[inline(always)]
fn extracted_field<'f>(
    tables: &'f Tables,
    arena: &'f [Value],
    extracted: &mut Extraction,
    msg: u64,
    id: u64,
) -> Result<Option<ExtractedField<'f>>, RuntimeError> {
    let Some(slot) = usize::try_from(id)
        .ok()
        .and_then(|i| tables.extract_slot.get(i).copied().flatten())
    else {
        return Ok(None);
    };
    let m = match usize::try_from(msg).ok().and_then(|i| arena.get(i)) {
        Some(Value::Msg(m)) => m,
        _ => return Ok(None),
    };
    if extracted.msg != msg {
        wire::extract(&m.bytes, &tables.extract, &mut extracted.fields);
        extracted.msg = msg;
    }
    match (tables.extract.get(slot), extracted.fields.get(slot)) {
        (Some(leaf), Some(got)) => Ok(Some(ExtractedField {
            bytes: &m.bytes,
            leaf,
            found: match got {
                Ok(found) => *found,
                Err(e) => return Err(e.clone().into()),
            },
        })),
        _ => Err(RuntimeError::Type(format!("field {id} is not extracted"))),
    }
}

/// `get(map_state, str(get(rpc, field)))` under patterns that bind nothing: the string is
/// looked up where it lies in the message (`StateStore::contains_str`), not copied out.
extern "C" fn hc_state_contains_field(f: F, elem: i64, var: u64, msg: u64, id: u64) -> u64 {
    guard(f, NONE, |f| {
        let var = var as usize;
        // The fields apart, so the key can stay borrowed from the arena while the store is
        // borrowed from the instances.
        let found = match extracted_field(f.tables, f.arena, f.extracted, msg, id)? {
            Some(x) => wire::found_str(x.bytes, x.leaf, x.found),
            None => None,
        };
        let present = match found {
            Some(key) => {
                let key = key?;
                store_of(f.instances, elem)?.contains_str(var, key)?
            }
            None => {
                // Not a string the extraction pass found: read it as `get(rpc, field)` does.
                let key = read_field(f, msg, id)?;
                store_of(f.instances, elem)?.contains(var, &key)?
            }
        };
        Ok(if present { 0 } else { NONE })
    })
}

extern "C" fn hc_field_read(f: F, msg: u64, id: u64) -> u64 {
    guard(f, UNIT, |f| {
        let v = read_field(f, msg, id)?;
        Ok(f.put(v))
    })
}

extern "C" fn hc_field_read_int(f: F, msg: u64, id: u64) -> i64 {
    guard(f, 0, |f| int_of(&read_field(f, msg, id)?))
}

extern "C" fn hc_field_read_float(f: F, msg: u64, id: u64) -> f64 {
    guard(f, 0.0, |f| float_of(&read_field(f, msg, id)?))
}

/// `set(rpc, field, v)`: a new message with the field re-encoded (everything else, unknown
/// fields included, kept byte for byte).
extern "C" fn hc_field_write(f: F, msg: u64, id: u64, value: u64) -> u64 {
    guard(f, UNIT, |f| {
        let path = field(f.tables, id)?;
        let m = f.msg(msg)?;
        let bytes = wire::write(&m.bytes, path, f.get(value)?)?;
        let mut m = Arc::clone(m);
        Arc::make_mut(&mut m).bytes = bytes;
        Ok(f.put(Value::Msg(m)))
    })
}

/// `byte_size(rpc)` (`id` < 0) or `byte_size(rpc, field)`.
extern "C" fn hc_byte_size(f: F, msg: u64, id: i64) -> i64 {
    guard(f, 0, |f| {
        let m = f.msg(msg)?;
        match u64::try_from(id) {
            Err(_) => Ok(m.bytes.len() as i64),
            Ok(id) => Ok(wire::byte_size(&m.bytes, field(f.tables, id)?)? as i64),
        }
    })
}

extern "C" fn hc_meta_status(f: F, msg: u64) -> u64 {
    guard(f, UNIT, |f| {
        let ok = f.msg(msg)?.code == Code::Ok;
        Ok(f.put(Value::str(if ok { "success" } else { "failure" })))
    })
}

extern "C" fn hc_meta_code(f: F, msg: u64) -> i64 {
    guard(f, 0, |f| Ok(i64::from(f.msg(msg)?.code.number())))
}

extern "C" fn hc_header_get(f: F, msg: u64, name: u64) -> u64 {
    guard(f, UNIT, |f| {
        let Value::Str(n) = f.get(name)? else {
            return Err(RuntimeError::Type("header name".into()));
        };
        let v = Value::str(f.msg(msg)?.element_header(n));
        Ok(f.put(v))
    })
}

extern "C" fn hc_header_set(f: F, msg: u64, name: u64, value: u64) -> u64 {
    guard(f, UNIT, |f| {
        let (Value::Str(n), Value::Str(v)) = (f.take_clone(name)?, f.take_clone(value)?) else {
            return Err(RuntimeError::Type(
                "header name and value must be strings".into(),
            ));
        };
        let mut m = Arc::clone(f.msg(msg)?);
        Arc::make_mut(&mut m).set_header(n, v)?;
        Ok(f.put(Value::Msg(m)))
    })
}

extern "C" fn hc_metadata_get(f: F, elem: i64, key: u64) -> u64 {
    guard(f, UNIT, |f| {
        let v = f.scratch_slot(elem, key)?.clone();
        Ok(f.put(v.map_or(Value::none(), Value::some)))
    })
}

/// `get_metadata(key)` under a `Some`/`None` match: the value, or [`NONE`].
extern "C" fn hc_metadata_probe(f: F, elem: i64, key: u64) -> u64 {
    guard(f, NONE, |f| match f.scratch_slot(elem, key)?.clone() {
        Some(v) => Ok(f.put(v)),
        None => Ok(NONE),
    })
}

/// `get(map_state, k)` under a `Some`/`None` match: the value, or [`NONE`].
extern "C" fn hc_state_probe(f: F, elem: i64, var: u64, key: u64) -> u64 {
    guard(f, NONE, |f| {
        let got = with_state_key(f, elem, key, |store, k| Ok(store.get(var as usize, k)?))?;
        Ok(got.map_or(NONE, |v| f.put(v)))
    })
}

extern "C" fn hc_metadata_set(f: F, elem: i64, key: u64, value: u64) {
    guard(f, (), |f| {
        let v = f.take_clone(value)?;
        *f.scratch_slot(elem, key)? = Some(v);
        Ok(())
    })
}

extern "C" fn hc_channel_emit(f: F, elem: i64, chan: u64, value: u64) {
    guard(f, (), |f| {
        if !f.records {
            return Ok(());
        }
        match f.get(value)? {
            // A message (what logging sends) has a path of its own, so its value is built
            // inside the record: made by `Value::clone` and moved there, its narrow stores
            // were reread with wide loads, which stall.
            Value::Msg(m) => {
                let m = Arc::clone(m);
                record(f, elem, chan, |_| Value::Msg(m))
            }
            _ => record(f, elem, chan, |arena| {
                match usize::try_from(value).ok().and_then(|i| arena.get(i)) {
                    Some(v) => v.clone(),
                    // `UNIT`, the only handle `get` accepts outside the arena.
                    None => Value::Unit,
                }
            }),
        }
    })
}

fn scalar_kind(kind: i64) -> Result<ScalarKind, RuntimeError> {
    ScalarKind::from_i64(kind).ok_or_else(|| RuntimeError::Type(format!("scalar kind {kind}")))
}

#[cold]
fn int_register_mismatch(kind: ScalarKind) -> RuntimeError {
    RuntimeError::Type(format!("scalar kind {kind:?} in an integer register"))
}

#[cold]
fn float_register_mismatch(kind: ScalarKind) -> RuntimeError {
    RuntimeError::Type(format!("scalar kind {kind:?} in a float register"))
}

extern "C" fn hc_channel_emit_i(f: F, elem: i64, chan: u64, v: i64, kind: i64) {
    guard(f, (), |f| {
        if !f.records {
            return Ok(());
        }
        // One variant per call of `record`: made inside the record from the register, as
        // `record` asks, with a tag the compiler knows (no `Value` moved in).
        match scalar_kind(kind)? {
            ScalarKind::Bool => record(f, elem, chan, |_| Value::Bool(v != 0)),
            ScalarKind::Int => record(f, elem, chan, |_| Value::Int(v)),
            ScalarKind::Uint => record(f, elem, chan, |_| Value::Uint(v as u64)),
            kind => Err(int_register_mismatch(kind)),
        }
    })
}

extern "C" fn hc_channel_emit_f(f: F, elem: i64, chan: u64, v: f64, kind: i64) {
    guard(f, (), |f| {
        if !f.records {
            return Ok(());
        }
        // As in `hc_channel_emit_i`.
        match scalar_kind(kind)? {
            ScalarKind::Float => record(f, elem, chan, |_| Value::Float(v)),
            ScalarKind::Instant => record(f, elem, chan, |_| Value::Instant(v)),
            kind => Err(float_register_mismatch(kind)),
        }
    })
}

// The value is written into the slot variant by variant, not made first and moved there:
// moved, its tag and payload (two narrow stores) were reread with one wide load, which the
// CPU cannot forward (a stall per call, seen in `perf annotate`).
extern "C" fn hc_metadata_set_i(f: F, elem: i64, key: u64, v: i64, kind: i64) {
    guard(f, (), |f| {
        let kind = scalar_kind(kind)?;
        let slot = f.scratch_slot(elem, key)?;
        match kind {
            ScalarKind::Bool => *slot = Some(Value::Bool(v != 0)),
            ScalarKind::Int => *slot = Some(Value::Int(v)),
            ScalarKind::Uint => *slot = Some(Value::Uint(v as u64)),
            _ => return Err(int_register_mismatch(kind)),
        }
        Ok(())
    })
}

extern "C" fn hc_metadata_set_f(f: F, elem: i64, key: u64, v: f64, kind: i64) {
    guard(f, (), |f| {
        let kind = scalar_kind(kind)?;
        let slot = f.scratch_slot(elem, key)?;
        match kind {
            ScalarKind::Float => *slot = Some(Value::Float(v)),
            ScalarKind::Instant => *slot = Some(Value::Instant(v)),
            _ => return Err(float_register_mismatch(kind)),
        }
        Ok(())
    })
}

/// `get_metadata(key)` bound to an integer-register scalar of `kind` (the unboxing
/// [`hc_unbox_int`] or [`hc_unbox_bool`] would do); presence in `ctx.found`.
extern "C" fn hc_metadata_probe_i(f: F, elem: i64, key: u64, kind: i64) -> i64 {
    f.ctx.found = 0;
    guard(f, 0, |f| {
        let bool_kind = kind == ScalarKind::Bool as i64;
        let r = match f.scratch_slot(elem, key)? {
            None => return Ok(0),
            Some(Value::Bool(b)) if bool_kind => i64::from(*b),
            Some(other) if bool_kind => {
                return Err(RuntimeError::Type(format!(
                    "expected a bool, got {}",
                    other.kind_name()
                )));
            }
            Some(v) => int_of(v)?,
        };
        f.ctx.found = 1;
        Ok(r)
    })
}

/// `get_metadata(key)` bound to a float or Instant; presence in `ctx.found`.
extern "C" fn hc_metadata_probe_f(f: F, elem: i64, key: u64) -> f64 {
    f.ctx.found = 0;
    guard(f, 0.0, |f| {
        let r = match f.scratch_slot(elem, key)? {
            None => return Ok(0.0),
            Some(v) => float_of(v)?,
        };
        f.ctx.found = 1;
        Ok(r)
    })
}

/// `get(map_state, k)` under patterns that bind nothing: 0 when present, [`NONE`] if not.
extern "C" fn hc_state_contains(f: F, elem: i64, var: u64, key: u64) -> u64 {
    guard(f, NONE, |f| {
        let present = with_state_key(
            f,
            elem,
            key,
            |store, k| Ok(store.contains(var as usize, k)?),
        )?;
        Ok(if present { 0 } else { NONE })
    })
}

/// Emits a channel record with the element's interned names; its value is made by `value`
/// (from the arena, or from a register) inside the record, so it is built where it stays:
/// a `Value` made before and moved in is copied with wide loads over its narrow stores.
/// Callers ask the sink first whether it wants records (through the C ABI nothing observes
/// them yet), so nothing is made or cloned for a sink that does not.
fn record(
    f: &mut Frame<'_, '_, '_>,
    elem: i64,
    chan: u64,
    value: impl FnOnce(&[Value]) -> Value,
) -> Result<(), RuntimeError> {
    // Copied out of the frame, so the element stays borrowed past the sink's `&mut` below.
    let elements = f.elements;
    let e = usize::try_from(elem)
        .ok()
        .and_then(|k| elements.get(k))
        .ok_or_else(|| RuntimeError::Type(format!("no element {elem} in the segment")))?;
    let channel = usize::try_from(chan)
        .ok()
        .and_then(|c| e.record_channel_ref(c))
        .ok_or_else(|| RuntimeError::Type(format!("channel {chan}")))?;
    let time = f.host.now();
    let rpc_id = &f.rpc.id;
    // The names are read where the element keeps them, not from copies in this frame: a
    // two-word name copied to the stack with two narrow stores and read back with one wide
    // load, to be written into the record, stalled (`perf annotate`).
    let record = |value: Value| ChannelRecord {
        element: *e.record_element_ref(),
        channel: *channel,
        rpc_id: *rpc_id,
        time,
        value,
    };
    match f.host.channels.collected() {
        // Made where it stays (`ChannelSink::collected`). A `push` that may grow the vector
        // makes the record on the stack first (the slot is known only after) and copies it,
        // which stalled as `emit` did; with room checked first, it is written in place.
        Some(records) if records.len() < records.capacity() => records.push(record(value(f.arena))),
        Some(records) => records.push(record(value(f.arena))),
        None => f.host.channels.emit(record(value(f.arena))),
    }
    Ok(())
}

/// A request-side rejection's message text (the code and element are out-params).
extern "C" fn hc_reject(f: F, text: u64) {
    guard(f, (), |f| match f.take_last_use(text)? {
        Value::Str(s) => {
            f.reject = s;
            Ok(())
        }
        _ => Err(RuntimeError::Type("error message".into())),
    })
}

/// A response-side rejection: the error response that travels on up, keeping the headers
/// of the response the element received (`entry`).
extern "C" fn hc_resp_reject(f: F, entry: u64, code: i64, text: u64) -> u64 {
    guard(f, UNIT, |f| {
        let Value::Str(s) = f.take_last_use(text)? else {
            return Err(RuntimeError::Type("error message".into()));
        };
        let headers = f.msg(entry)?.headers.clone();
        let code = u32::try_from(code)
            .ok()
            .and_then(Code::from_number)
            .unwrap_or(Code::Internal);
        Ok(f.put(Value::Msg(Arc::new(Message {
            headers,
            ..Message::error(code, s)
        }))))
    })
}

/// A response handler failed: counts the error against the element and turns the response
/// into the error, as the interpreter does. Clears the error flag.
extern "C" fn hc_resp_error(f: F, elem: i64, entry: u64) -> u64 {
    let err = f
        .error
        .take()
        .unwrap_or_else(|| RuntimeError::Type("unknown failure".into()));
    f.ctx.err = 0;
    let name = f.element(elem).map(|e| e.name.clone()).unwrap_or_default();
    if let Ok(inst) = f.instance(elem) {
        inst.count_error(&err);
    }
    let headers = f.msg(entry).map(|m| m.headers.clone()).unwrap_or_default();
    f.put(Value::Msg(Arc::new(Message {
        headers,
        ..Message::error(err.code(), format!("{name}: {err}"))
    })))
}

/// The parameter and result types of a host function, after the context pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    I,
    F,
}

pub struct Sig {
    pub params: &'static [Ty],
    pub ret: Option<Ty>,
}

const fn sig(params: &'static [Ty], ret: Option<Ty>) -> Sig {
    Sig { params, ret }
}

use Ty::{F as Fl, I};

/// The address and signature of every host function.
pub fn host_fn(id: HostFn) -> (*const u8, Sig) {
    use HostFn::*;
    match id {
        Fail => (hc_fail as *const u8, sig(&[I, I, I], None)),
        BoxInt => (hc_box_int as *const u8, sig(&[I], Some(I))),
        BoxUint => (hc_box_uint as *const u8, sig(&[I], Some(I))),
        BoxFloat => (hc_box_float as *const u8, sig(&[Fl], Some(I))),
        BoxBool => (hc_box_bool as *const u8, sig(&[I], Some(I))),
        BoxInstant => (hc_box_instant as *const u8, sig(&[Fl], Some(I))),
        BoxUnit => (hc_box_unit as *const u8, sig(&[], Some(I))),
        UnboxInt => (hc_unbox_int as *const u8, sig(&[I], Some(I))),
        UnboxFloat => (hc_unbox_float as *const u8, sig(&[I], Some(Fl))),
        UnboxBool => (hc_unbox_bool as *const u8, sig(&[I], Some(I))),
        Const => (hc_const as *const u8, sig(&[I], Some(I))),
        Unary => (hc_unary as *const u8, sig(&[I, I], Some(I))),
        Binary => (hc_binary as *const u8, sig(&[I, I, I], Some(I))),
        Convert => (hc_convert as *const u8, sig(&[I, I], Some(I))),
        CallPure => (hc_call_pure as *const u8, sig(&[I, I, I, I, I], Some(I))),
        RandomF => (hc_random_f as *const u8, sig(&[I, Fl, Fl], Some(Fl))),
        RandomI => (hc_random_i as *const u8, sig(&[I, I, I], Some(I))),
        RandomChoices => (hc_random_choices as *const u8, sig(&[I, I, I], Some(I))),
        Encrypt => (hc_encrypt as *const u8, sig(&[I, I, I], Some(I))),
        Now => (hc_now as *const u8, sig(&[], Some(Fl))),
        RpcId => (hc_rpc_id as *const u8, sig(&[], Some(I))),
        Method => (hc_method as *const u8, sig(&[], Some(I))),
        Src => (hc_src as *const u8, sig(&[], Some(I))),
        Dst => (hc_dst as *const u8, sig(&[I], Some(I))),
        StateGet => (hc_state_get as *const u8, sig(&[I, I, I], Some(I))),
        StateLoad => (hc_state_load as *const u8, sig(&[I, I, I], Some(I))),
        StateSet => (hc_state_set as *const u8, sig(&[I, I, I, I], None)),
        StateDelete => (hc_state_delete as *const u8, sig(&[I, I, I], None)),
        StateSize => (hc_state_size as *const u8, sig(&[I, I], Some(I))),
        StateItems => (hc_state_items as *const u8, sig(&[I, I], Some(I))),
        RmwBegin => (hc_rmw_begin as *const u8, sig(&[I, I, I, I], Some(I))),
        LocalSet => (hc_local_set as *const u8, sig(&[I, I, I], Some(I))),
        LocalDelete => (hc_local_delete as *const u8, sig(&[I, I], Some(I))),
        ValueGet => (hc_value_get as *const u8, sig(&[I, I], Some(I))),
        Unwrap => (hc_unwrap as *const u8, sig(&[I, I], Some(I))),
        MakePair => (hc_make_pair as *const u8, sig(&[I, I], Some(I))),
        MakeSome => (hc_make_some as *const u8, sig(&[I], Some(I))),
        Unpack => (hc_unpack as *const u8, sig(&[I, I], Some(I))),
        OptIsSome => (hc_opt_is_some as *const u8, sig(&[I], Some(I))),
        OptInner => (hc_opt_inner as *const u8, sig(&[I], Some(I))),
        LitEq => (hc_lit_eq as *const u8, sig(&[I, I], Some(I))),
        Items => (hc_items as *const u8, sig(&[I], Some(I))),
        ItemsLen => (hc_items_len as *const u8, sig(&[I], Some(I))),
        ItemAt => (hc_item_at as *const u8, sig(&[I, I], Some(I))),
        ItemAtCounted => (hc_item_at_counted as *const u8, sig(&[I, I, I], Some(I))),
        FieldRead => (hc_field_read as *const u8, sig(&[I, I], Some(I))),
        FieldReadInt => (hc_field_read_int as *const u8, sig(&[I, I], Some(I))),
        FieldReadFloat => (hc_field_read_float as *const u8, sig(&[I, I], Some(Fl))),
        FieldWrite => (hc_field_write as *const u8, sig(&[I, I, I], Some(I))),
        ByteSize => (hc_byte_size as *const u8, sig(&[I, I], Some(I))),
        MetaStatus => (hc_meta_status as *const u8, sig(&[I], Some(I))),
        MetaCode => (hc_meta_code as *const u8, sig(&[I], Some(I))),
        HeaderGet => (hc_header_get as *const u8, sig(&[I, I], Some(I))),
        HeaderSet => (hc_header_set as *const u8, sig(&[I, I, I], Some(I))),
        MetadataGet => (hc_metadata_get as *const u8, sig(&[I, I], Some(I))),
        MetadataSet => (hc_metadata_set as *const u8, sig(&[I, I, I], None)),
        ChannelEmit => (hc_channel_emit as *const u8, sig(&[I, I, I], None)),
        Reject => (hc_reject as *const u8, sig(&[I], None)),
        RespReject => (hc_resp_reject as *const u8, sig(&[I, I, I], Some(I))),
        RespError => (hc_resp_error as *const u8, sig(&[I, I], Some(I))),
        StateProbe => (hc_state_probe as *const u8, sig(&[I, I, I], Some(I))),
        MetadataProbe => (hc_metadata_probe as *const u8, sig(&[I, I], Some(I))),
        MetadataSetI => (hc_metadata_set_i as *const u8, sig(&[I, I, I, I], None)),
        MetadataSetF => (hc_metadata_set_f as *const u8, sig(&[I, I, Fl, I], None)),
        MetadataProbeI => (hc_metadata_probe_i as *const u8, sig(&[I, I, I], Some(I))),
        MetadataProbeF => (hc_metadata_probe_f as *const u8, sig(&[I, I], Some(Fl))),
        ChannelEmitI => (hc_channel_emit_i as *const u8, sig(&[I, I, I, I], None)),
        ChannelEmitF => (hc_channel_emit_f as *const u8, sig(&[I, I, Fl, I], None)),
        StateContains => (hc_state_contains as *const u8, sig(&[I, I, I], Some(I))),
        StateContainsField => (
            hc_state_contains_field as *const u8,
            sig(&[I, I, I, I], Some(I)),
        ),
        RmwEnd => (hc_rmw_end as *const u8, sig(&[I, I, I, I, I], None)),
        ArenaLen => (hc_arena_len as *const u8, sig(&[], Some(I))),
        SweepBegin => (hc_sweep_begin as *const u8, sig(&[I, I], Some(I))),
        SweepKeep => (hc_sweep_keep as *const u8, sig(&[I], Some(I))),
        SweepEnd => (hc_sweep_end as *const u8, sig(&[I], Some(I))),
        SweepOnly => (hc_sweep_only as *const u8, sig(&[I, I], Some(I))),
    }
}

/// Every host function, for registering symbols with a JIT module.
pub const ALL: &[HostFn] = &{
    use HostFn::*;
    [
        Fail,
        BoxInt,
        BoxUint,
        BoxFloat,
        BoxBool,
        BoxInstant,
        BoxUnit,
        UnboxInt,
        UnboxFloat,
        UnboxBool,
        Const,
        Unary,
        Binary,
        Convert,
        CallPure,
        RandomF,
        RandomI,
        RandomChoices,
        Encrypt,
        Now,
        RpcId,
        Method,
        Src,
        Dst,
        StateGet,
        StateLoad,
        StateSet,
        StateDelete,
        StateSize,
        StateItems,
        RmwBegin,
        LocalSet,
        LocalDelete,
        ValueGet,
        Unwrap,
        MakePair,
        MakeSome,
        Unpack,
        OptIsSome,
        OptInner,
        LitEq,
        Items,
        ItemsLen,
        ItemAt,
        FieldRead,
        FieldReadInt,
        FieldReadFloat,
        FieldWrite,
        ByteSize,
        MetaStatus,
        MetaCode,
        HeaderGet,
        HeaderSet,
        MetadataGet,
        MetadataSet,
        ChannelEmit,
        Reject,
        RespReject,
        RespError,
        StateProbe,
        MetadataProbe,
        MetadataSetI,
        MetadataSetF,
        MetadataProbeI,
        MetadataProbeF,
        ChannelEmitI,
        ChannelEmitF,
        StateContains,
        StateContainsField,
        RmwEnd,
        ItemAtCounted,
        ArenaLen,
        SweepBegin,
        SweepKeep,
        SweepEnd,
        SweepOnly,
    ]
};

#[cfg(test)]
mod tests {
    use super::*;

    /// Kept values move down to the floor in the order they are kept; a handle two locals
    /// share moves once; handles below the floor, past the arena and unit stay; the rest of
    /// the slots above the floor go.
    #[test]
    fn a_sweep_keeps_what_the_locals_hold_and_drops_the_rest() {
        let mut arena: Vec<Value> = (0..8).map(Value::Int).collect();
        let mut sweep = Sweep::default();
        sweep.begin(3);
        let kept: Vec<u64> = [6, 1, 6, 4, UNIT, 9]
            .into_iter()
            .map(|h| sweep.keep(&mut arena, h))
            .collect();
        assert_eq!(kept, [3, 1, 3, 4, UNIT, 9]);
        assert_eq!(
            [5, 6, 4, 1, UNIT].map(|h| sweep.moved(h)),
            [None, Some(3), Some(4), Some(1), Some(UNIT)]
        );
        sweep.end(&mut arena);
        assert_eq!(arena, [0, 1, 2, 6, 4].map(Value::Int));
        // The next sweep starts afresh.
        sweep.begin(3);
        assert_eq!(sweep.keep(&mut arena, 4), 3);
        sweep.end(&mut arena);
        assert_eq!(arena, [0, 1, 2, 4].map(Value::Int));
    }

    #[test]
    fn every_host_function_id_is_listed_once() {
        let mut ids: Vec<u32> = ALL.iter().map(|f| *f as u32).collect();
        ids.sort_unstable();
        let last = ids.last().copied().unwrap_or(0);
        let expected: Vec<u32> = (0..=last)
            .filter(|id| !weft_hostcalls::abi::RETIRED_HOST_FN_IDS.contains(id))
            .collect();
        assert_eq!(ids, expected);
    }
}
