//! The ABI between compiled element code and the host.
//!
//! A compiled segment is an `extern "C" fn(*mut RpcCtx) -> u32`. Scalars (int, uint, float,
//! bool, Instant) live in registers; every other value (strings, bytes, Vec, Map, pairs,
//! Options, messages) lives in a per-call arena owned by the host and is named by a *handle*
//! (its index). Compiled code reaches the host only through the functions listed in
//! [`HostFn`], each `extern "C"` with the context as its first argument, and through the
//! fields of [`RpcCtx`] (verdict out-params, per-element scalar state blocks).
//!
//! Host functions never unwind into compiled code: each one catches panics and reports them
//! as a failed call. A failed call sets [`RpcCtx::err`]; compiled code checks it after every
//! call that can fail and leaves the element with the error, which the host turns into the
//! same status and counters as the interpreter's.

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::state::{StateError, StateStore, VarId};
use crate::value::Value;

/// What a segment's request function decided ([`RpcCtx::verdict`]).
pub mod verdict {
    /// Every element forwarded the request; [`super::RpcCtx::msg`] is the request to send on.
    pub const FORWARD: u32 = 0;
    /// Element [`super::RpcCtx::decided`] answered locally with [`super::RpcCtx::msg`].
    pub const REPLY: u32 = 1;
    /// Element [`super::RpcCtx::decided`] rejected with [`super::RpcCtx::code`]; the message
    /// text is held by the host.
    pub const REJECT: u32 = 2;
    /// Element [`super::RpcCtx::decided`] failed at run time; the host holds the error.
    pub const ERROR: u32 = 3;
}

/// The per-RPC context a compiled function receives. The layout is part of the ABI: compiled
/// code reads and writes these fields at their `offset_of!` offsets.
#[repr(C)]
#[derive(Debug)]
pub struct RpcCtx {
    /// Nonzero once a host function failed; compiled code checks it after fallible calls.
    pub err: u32,
    /// The index in the segment of the element that rejected, replied or failed.
    pub decided: u32,
    /// One of the [`verdict`] constants.
    pub verdict: u32,
    /// The status code of a rejection.
    pub code: u32,
    /// Handle of the message the function ends with: the request it forwards, the local
    /// reply, or (in a response function) the response travelling up.
    pub msg: u64,
    /// Handle of the request as the deciding element received it.
    pub entry_msg: u64,
    /// Per element of the segment: its block of local scalar state (one 8-byte slot per
    /// state variable, indexed by variable id). Null for elements without such state.
    pub blocks: *const *mut u64,
    /// The response function's first element (it runs `start`, `start - 1`, …, 0).
    pub start: u32,
    /// Out-param of the scalar probes ([`HostFn::MetadataProbeI`], [`HostFn::MetadataProbeF`]):
    /// 1 when the value was there, 0 for `None`. Their result register carries the value.
    pub found: u32,
    /// The executor's per-call host data (arena, instances, clock, channels). Opaque to
    /// compiled code, which only passes the context back to host functions.
    pub host: *mut c_void,
}

impl Default for RpcCtx {
    fn default() -> Self {
        RpcCtx {
            err: 0,
            decided: 0,
            verdict: verdict::FORWARD,
            code: 0,
            msg: 0,
            entry_msg: 0,
            blocks: std::ptr::null(),
            start: 0,
            found: 0,
            host: std::ptr::null_mut(),
        }
    }
}

/// How a scalar kept in a state block is encoded in its 8-byte slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotKind {
    Bool,
    Int,
    Uint,
    Float,
    Instant,
}

impl SlotKind {
    /// The slot kind of a scalar value, if it has one.
    pub fn of(v: &Value) -> Option<SlotKind> {
        Some(match v {
            Value::Bool(_) => SlotKind::Bool,
            Value::Int(_) => SlotKind::Int,
            Value::Uint(_) => SlotKind::Uint,
            Value::Float(_) => SlotKind::Float,
            Value::Instant(_) => SlotKind::Instant,
            _ => return None,
        })
    }

    pub fn encode(self, v: &Value) -> Option<u64> {
        Some(match (self, v) {
            (SlotKind::Bool, Value::Bool(b)) => u64::from(*b),
            (SlotKind::Int, Value::Int(i)) => *i as u64,
            (SlotKind::Uint, Value::Uint(u)) => *u,
            (SlotKind::Float, Value::Float(f)) | (SlotKind::Instant, Value::Instant(f)) => {
                f.to_bits()
            }
            _ => return None,
        })
    }

    pub fn decode(self, bits: u64) -> Value {
        match self {
            SlotKind::Bool => Value::Bool(bits != 0),
            SlotKind::Int => Value::Int(bits as i64),
            SlotKind::Uint => Value::Uint(bits),
            SlotKind::Float => Value::Float(f64::from_bits(bits)),
            SlotKind::Instant => Value::Instant(f64::from_bits(bits)),
        }
    }
}

/// One variable a [`BlockStore`] keeps in its block.
#[derive(Clone, Debug)]
pub struct BlockVar {
    pub name: String,
    pub kind: SlotKind,
    /// The initial value and what `delete` resets it to.
    pub zero: Value,
}

/// The slots where a store keeps the local scalars compiled code reads and writes directly:
/// slot `i` holds state variable `i`, encoded as the layout's kind `i` (`None`: the variable
/// lives elsewhere and its slot is unused). There is always one slot per kind. Compiled code
/// uses a block only when its layout is exactly the one the code was compiled for, so a store
/// cannot hand it memory of another shape.
#[derive(Debug)]
pub struct ScalarBlock {
    /// Atomics only so the host may read and write slots through shared references while
    /// compiled code holds a raw pointer to them; accesses are never concurrent.
    slots: Box<[AtomicU64]>,
    layout: BlockLayout,
}

impl ScalarBlock {
    /// A block of `layout`, every slot holding the bits of `init`'s value for it (0 where
    /// it has none).
    pub fn new(layout: BlockLayout, init: impl Fn(usize) -> u64) -> Self {
        let slots = (0..layout.kinds.len())
            .map(|i| AtomicU64::new(init(i)))
            .collect();
        ScalarBlock { slots, layout }
    }

    pub fn slots(&self) -> &[AtomicU64] {
        &self.slots
    }

    pub fn layout(&self) -> &BlockLayout {
        &self.layout
    }
}

/// The kinds of a state block's slots, with a number that identifies short layouts exactly
/// (computed once), so checking a block's layout costs a comparison, not a loop: it is
/// checked for every element of every call.
#[derive(Clone, Debug)]
pub struct BlockLayout {
    kinds: Box<[Option<SlotKind>]>,
    /// Three bits per slot (0 for none, 1 + the kind) under the slot count in the top four
    /// bits; [`BlockLayout::UNCODED`] for layouts longer than 15 slots.
    code: u64,
}

impl BlockLayout {
    /// Not the code of any layout: it would have slots of kind 7.
    const UNCODED: u64 = u64::MAX;

    pub fn new(kinds: impl Into<Box<[Option<SlotKind>]>>) -> Self {
        let kinds = kinds.into();
        let code = match kinds.len() {
            0..=15 => {
                let slots = kinds.iter().enumerate().fold(0u64, |acc, (i, k)| {
                    let v = match k {
                        None => 0,
                        Some(SlotKind::Bool) => 1,
                        Some(SlotKind::Int) => 2,
                        Some(SlotKind::Uint) => 3,
                        Some(SlotKind::Float) => 4,
                        Some(SlotKind::Instant) => 5,
                    };
                    acc | (v << (3 * i))
                });
                slots | ((kinds.len() as u64) << 60)
            }
            _ => Self::UNCODED,
        };
        BlockLayout { kinds, code }
    }

    pub fn kinds(&self) -> &[Option<SlotKind>] {
        &self.kinds
    }
}

impl PartialEq for BlockLayout {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code && (self.code != Self::UNCODED || self.kinds == other.kinds)
    }
}

impl Eq for BlockLayout {}

/// A state store that keeps some local scalar variables in a block of 8-byte slots that
/// compiled code reads and writes directly (no host call), and every other variable in the
/// store it wraps. Reads and writes through the [`StateStore`] trait see the same slots, so
/// `init`, control-plane writes and state dumps work unchanged.
pub struct BlockStore {
    inner: Box<dyn StateStore + Send>,
    /// Indexed by variable id; `None` for variables the inner store holds.
    vars: Vec<Option<BlockVar>>,
    /// `vars`' slots, laid out as compiled code checks.
    block: Arc<ScalarBlock>,
}

impl BlockStore {
    pub fn new(inner: Box<dyn StateStore + Send>, vars: Vec<Option<BlockVar>>) -> Self {
        let layout = BlockLayout::new(
            vars.iter()
                .map(|v| v.as_ref().map(|b| b.kind))
                .collect::<Vec<_>>(),
        );
        let block = ScalarBlock::new(layout, |i| {
            let var = vars.get(i).and_then(Option::as_ref);
            var.and_then(|b| b.kind.encode(&b.zero)).unwrap_or(0)
        });
        BlockStore {
            inner,
            vars,
            block: Arc::new(block),
        }
    }

    fn block_var(&self, var: VarId) -> Option<(&BlockVar, &AtomicU64)> {
        match (self.vars.get(var), self.block.slots.get(var)) {
            (Some(Some(b)), Some(slot)) => Some((b, slot)),
            _ => None,
        }
    }

    fn store(b: &BlockVar, slot: &AtomicU64, v: &Value) -> Result<(), StateError> {
        let bits = b.kind.encode(v).ok_or_else(|| StateError::KindMismatch {
            var: b.name.clone(),
            expected: b.zero.kind_name(),
            found: v.kind_name(),
        })?;
        slot.store(bits, Ordering::Relaxed);
        Ok(())
    }
}

impl StateStore for BlockStore {
    fn get(&mut self, var: VarId, key: &Value) -> Result<Option<Value>, StateError> {
        match self.block_var(var) {
            Some((b, slot)) => Ok(Some(b.kind.decode(slot.load(Ordering::Relaxed)))),
            None => self.inner.get(var, key),
        }
    }

    fn contains(&mut self, var: VarId, key: &Value) -> Result<bool, StateError> {
        match self.block_var(var) {
            Some(_) => Ok(true),
            None => self.inner.contains(var, key),
        }
    }

    fn contains_str(&mut self, var: VarId, key: &str) -> Result<bool, StateError> {
        match self.block_var(var) {
            Some(_) => Ok(true),
            None => self.inner.contains_str(var, key),
        }
    }

    fn set(&mut self, var: VarId, key: Value, value: Value) -> Result<(), StateError> {
        match self.block_var(var) {
            Some((b, slot)) => BlockStore::store(b, slot, &value),
            None => self.inner.set(var, key, value),
        }
    }

    fn delete(&mut self, var: VarId, key: &Value) -> Result<(), StateError> {
        match self.block_var(var) {
            Some((b, slot)) => BlockStore::store(b, slot, &b.zero),
            None => self.inner.delete(var, key),
        }
    }

    fn len(&mut self, var: VarId) -> Result<usize, StateError> {
        match self.block_var(var) {
            Some(_) => Ok(1),
            None => self.inner.len(var),
        }
    }

    fn entries(&mut self, var: VarId) -> Result<Vec<(Value, Value)>, StateError> {
        match self.block_var(var) {
            Some((b, slot)) => Ok(vec![(
                Value::Unit,
                b.kind.decode(slot.load(Ordering::Relaxed)),
            )]),
            None => self.inner.entries(var),
        }
    }

    fn entries_inserted(&mut self, var: VarId) -> Result<Vec<(Value, Value)>, StateError> {
        match self.block_var(var) {
            Some(_) => self.entries(var),
            None => self.inner.entries_inserted(var),
        }
    }

    fn snapshot(&mut self) -> Vec<(String, Value)> {
        let mut snap = self.inner.snapshot();
        for (b, slot) in self.vars.iter().zip(self.block.slots.iter()) {
            if let Some(b) = b
                && let Some(entry) = snap.iter_mut().find(|(n, _)| *n == b.name)
            {
                entry.1 = b.kind.decode(slot.load(Ordering::Relaxed));
            }
        }
        snap
    }

    fn scalar_block(&mut self) -> Option<&Arc<ScalarBlock>> {
        Some(&self.block)
    }
}

/// Host function ids no longer in use, never to be given to another function: an object
/// compiled against the old table must not call the wrong one. 58 and 59 began and ended an
/// RPC's scratch in each instance; the scratch now travels with the RPC
/// (`weft_ir::interp::RpcScratch`).
pub const RETIRED_HOST_FN_IDS: &[u32] = &[58, 59];

/// The stable ids of the host functions. Compiled code for another machine (the
/// cross-ISA object) imports them by [`HostFn::symbol`]; in-process code calls their
/// addresses. New functions are added at the end; an id is never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum HostFn {
    /// Records a run-time error raised by compiled code (division by zero, bad index).
    Fail = 0,
    BoxInt = 1,
    BoxUint = 2,
    BoxFloat = 3,
    BoxBool = 4,
    BoxInstant = 5,
    BoxUnit = 6,
    UnboxInt = 7,
    UnboxFloat = 8,
    Const = 9,
    Unary = 10,
    Binary = 11,
    Convert = 12,
    CallPure = 13,
    RandomF = 14,
    RandomI = 15,
    RandomChoices = 16,
    Encrypt = 17,
    Now = 18,
    RpcId = 19,
    Method = 20,
    Src = 21,
    Dst = 22,
    StateGet = 23,
    StateLoad = 24,
    StateSet = 25,
    StateDelete = 26,
    StateSize = 27,
    StateItems = 28,
    RmwBegin = 29,
    LocalSet = 30,
    LocalDelete = 31,
    ValueGet = 32,
    Unwrap = 33,
    MakePair = 34,
    MakeSome = 35,
    Unpack = 36,
    OptIsSome = 37,
    OptInner = 38,
    LitEq = 39,
    Items = 40,
    ItemsLen = 41,
    /// `(items, index)`: an item of a `foreach`, not counted. Kept for objects compiled
    /// before [`HostFn::ItemAtCounted`]; compiled code calls that now.
    ItemAt = 42,
    FieldRead = 43,
    FieldReadInt = 44,
    FieldReadFloat = 45,
    FieldWrite = 46,
    ByteSize = 47,
    MetaStatus = 48,
    MetaCode = 49,
    HeaderGet = 50,
    HeaderSet = 51,
    MetadataGet = 52,
    MetadataSet = 53,
    ChannelEmit = 54,
    Reject = 55,
    RespReject = 56,
    RespError = 57,
    // 58 and 59 are retired ([`RETIRED_HOST_FN_IDS`]).
    UnboxBool = 60,
    /// `get(map_state, k)` matched by `Some(v)`/`None` patterns: the value's handle, or
    /// [`NONE`] — no Option is built.
    StateProbe = 61,
    /// `get_metadata(k)` matched the same way.
    MetadataProbe = 62,
    /// `set_metadata(k, v)` of a scalar `v` in a register (int, uint, bool: `i64`; float,
    /// Instant: `f64`) with its [`ScalarKind`] — no arena value is made.
    MetadataSetI = 63,
    MetadataSetF = 64,
    /// `get_metadata(k)` under `Some(x)`/`None` with a scalar `x`: the value in the result
    /// register, presence in [`RpcCtx::found`].
    MetadataProbeI = 65,
    MetadataProbeF = 66,
    /// `send(v, channel)` of a scalar in a register, with its [`ScalarKind`].
    ChannelEmitI = 67,
    ChannelEmitF = 68,
    /// `get(map_state, k)` under `Some(_)`/`None` patterns that bind nothing: 0 when the key
    /// is there, [`NONE`] otherwise — the value is neither cloned nor stored.
    StateContains = 69,
    /// [`HostFn::StateContains`] whose key is a `string` field of a message: the key is
    /// looked up as it lies in the message bytes, and no string value is made.
    StateContainsField = 70,
    /// The end of a read-modify-write: stores the binder's final value unless it equals the
    /// value [`HostFn::RmwBegin`] gave (so a lambda that changes nothing writes nothing).
    RmwEnd = 71,
    /// `(items, index, element)`: an item of a `foreach`, counted as one more iteration of
    /// the element's handler run against its instance's iteration limit.
    ItemAtCounted = 72,
    /// The arena's length, taken where a `foreach` starts (after its collection): the
    /// floor of the loop's sweeps.
    ArenaLen = 73,
    /// A `foreach`'s back edge: `(floor, h)` starts reclaiming the iteration's values above
    /// the floor and keeps the value of the first handle-typed local the loop body assigns;
    /// returns its new handle.
    SweepBegin = 74,
    /// Keeps one more handle-typed local's value; returns its new handle.
    SweepKeep = 75,
    /// Keeps the last handle-typed local's value and drops every value above the kept ones.
    SweepEnd = 76,
    /// [`HostFn::SweepBegin`] and [`HostFn::SweepEnd`] in one call, for a loop whose body
    /// assigns one handle-typed local (or none: `h` is then unit).
    SweepOnly = 77,
}

/// The type of a scalar passed in a register, as the `*I`/`*F` host functions receive it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i64)]
pub enum ScalarKind {
    Bool = 0,
    Int = 1,
    Uint = 2,
    Float = 3,
    Instant = 4,
}

impl ScalarKind {
    pub fn from_i64(k: i64) -> Option<ScalarKind> {
        Some(match k {
            0 => ScalarKind::Bool,
            1 => ScalarKind::Int,
            2 => ScalarKind::Uint,
            3 => ScalarKind::Float,
            4 => ScalarKind::Instant,
            _ => return None,
        })
    }

    /// The value of an integer-register scalar (bool, int, uint).
    #[inline]
    pub fn int_value(self, v: i64) -> Option<Value> {
        Some(match self {
            ScalarKind::Bool => Value::Bool(v != 0),
            ScalarKind::Int => Value::Int(v),
            ScalarKind::Uint => Value::Uint(v as u64),
            _ => return None,
        })
    }

    /// The value of a float-register scalar (float, Instant).
    #[inline]
    pub fn float_value(self, v: f64) -> Option<Value> {
        Some(match self {
            ScalarKind::Float => Value::Float(v),
            ScalarKind::Instant => Value::Instant(v),
            _ => return None,
        })
    }
}

/// What a probe host function returns for a missing value.
pub const NONE: u64 = u64::MAX - 1;

impl HostFn {
    /// The symbol compiled objects import the function by.
    pub fn symbol(self) -> String {
        format!("weft_hc_{}", self as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::{BlockLayout, SlotKind};

    const KINDS: [Option<SlotKind>; 6] = [
        None,
        Some(SlotKind::Bool),
        Some(SlotKind::Int),
        Some(SlotKind::Uint),
        Some(SlotKind::Float),
        Some(SlotKind::Instant),
    ];

    /// Every layout of up to `n` slots.
    fn layouts(n: usize) -> Vec<Vec<Option<SlotKind>>> {
        let mut all = vec![vec![]];
        let mut last = vec![vec![]];
        for _ in 0..n {
            last = last
                .iter()
                .flat_map(|l: &Vec<_>| {
                    KINDS.iter().map(move |k| {
                        let mut l = l.clone();
                        l.push(*k);
                        l
                    })
                })
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    #[test]
    fn layouts_are_equal_exactly_when_their_kinds_are() {
        let all = layouts(4);
        for a in &all {
            for b in &all {
                assert_eq!(
                    BlockLayout::new(a.clone()) == BlockLayout::new(b.clone()),
                    a == b,
                    "{a:?} vs {b:?}"
                );
            }
        }
        // Past the length the number encodes, the kinds themselves are compared; the last
        // slot is the only difference.
        let long: Vec<_> = (0..20).map(|i| KINDS[i % 6]).collect();
        for a in &all {
            let (mut x, mut y) = (long.clone(), long.clone());
            x.extend(a);
            y.extend(a);
            assert!(BlockLayout::new(x.clone()) == BlockLayout::new(y.clone()));
            y.push(None);
            x.push(Some(SlotKind::Int));
            assert!(BlockLayout::new(x) != BlockLayout::new(y), "{a:?}");
        }
        // 15 slots is the longest layout with a number; 16 is compared by kinds.
        let (fifteen, sixteen) = (vec![KINDS[5]; 15], vec![KINDS[5]; 16]);
        assert!(BlockLayout::new(fifteen.clone()) != BlockLayout::new(sixteen.clone()));
        assert!(BlockLayout::new(sixteen.clone()) == BlockLayout::new(sixteen));
    }
}
