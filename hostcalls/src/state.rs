//! Element state: the store abstraction every executor reads and writes through, a plain
//! single-instance store, and an in-process simulation of several instances sharing state.
//!
//! A state variable is one *cell*: a scalar, an ordered map or a vector. Where the cell lives
//! depends on its declared consistency: `Local` cells belong to one instance, `Strong` cells
//! are one linearizable cell shared by every instance of the element, and `Weak` cells are
//! per-instance replicas that converge when they are synchronised, merged with the variable's
//! combiner. [`SharedState`] simulates all three in one process, deterministically, so elements
//! declaring `@consistency` can be tested before a distributed backend exists.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::abi::ScalarBlock;
use crate::value::{MapKey, Value};

/// A state variable's index in the element's declaration order.
pub type VarId = usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellKind {
    /// One value; its key is [`Value::Unit`].
    Scalar,
    /// Keys of any kind, kept in [`Value`]'s total order.
    Map,
    /// Keys are [`Value::Int`] indices `0..len`.
    Vec,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consistency {
    Local,
    Strong,
    Weak,
}

/// How weak replicas of a variable merge when synchronised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combiner {
    /// Per key, the latest write (set or delete) wins.
    Lww,
    /// Per key, the changes every replica made are added up.
    Sum,
    /// Per key, the greatest value wins ([`Value`]'s total order).
    Max,
    /// Per key, the least value wins ([`Value`]'s total order).
    Min,
}

/// A state variable's declaration.
#[derive(Clone, Debug)]
pub struct VarSpec {
    pub name: String,
    pub kind: CellKind,
    pub consistency: Consistency,
    pub combiner: Combiner,
    /// The initial value of a scalar cell, and what `delete` resets a scalar to.
    ///
    /// A weak variable combined with `Sum` also takes its numeric kind from `zero` (`Int(0)`,
    /// `Uint(0)` or `Float(0.0)`), for maps too: every value written must have that kind, and
    /// `delete` on a map key writes `zero`.
    pub zero: Value,
    /// A map's most entries (`@capacity`): a `set` that adds a key to a full map first
    /// removes the entry inserted longest ago. `None` is unbounded.
    pub capacity: Option<usize>,
}

impl VarSpec {
    /// A local variable combined last-writer-wins (the combiner only matters for weak ones).
    pub fn new(name: impl Into<String>, kind: CellKind, zero: Value) -> Self {
        VarSpec {
            name: name.into(),
            kind,
            consistency: Consistency::Local,
            combiner: Combiner::Lww,
            zero,
            capacity: None,
        }
    }

    /// A map holding at most `capacity` entries, evicting the oldest inserted.
    pub fn bounded(mut self, capacity: usize) -> Self {
        self.capacity = Some(capacity);
        self
    }

    pub fn strong(mut self) -> Self {
        self.consistency = Consistency::Strong;
        self
    }

    pub fn weak(mut self, combiner: Combiner) -> Self {
        self.consistency = Consistency::Weak;
        self.combiner = combiner;
        self
    }

    /// Whether every store can hold this variable. Stores run this on construction and answer
    /// every access to a rejected variable with the error; callers may also check up front.
    pub fn validate(&self) -> Result<(), StateError> {
        if self.kind == CellKind::Vec && self.consistency != Consistency::Local {
            return Err(StateError::UnsupportedVec {
                var: self.name.clone(),
                consistency: consistency_name(self.consistency),
            });
        }
        if self.sum_combined() && !is_summable(&self.zero) {
            return Err(StateError::BadZero {
                var: self.name.clone(),
                found: self.zero.kind_name(),
            });
        }
        if let Some(capacity) = self.capacity {
            // Weak replicas evict on their own and merge key by key, so a merge could
            // bring back what one replica evicted and leave the map above its capacity.
            if self.kind != CellKind::Map || self.consistency == Consistency::Weak {
                return Err(StateError::UnsupportedCapacity {
                    var: self.name.clone(),
                    what: if self.kind == CellKind::Map {
                        "a weak map"
                    } else {
                        "not a map"
                    },
                });
            }
            if capacity == 0 {
                return Err(StateError::ZeroCapacity {
                    var: self.name.clone(),
                });
            }
        }
        Ok(())
    }

    fn sum_combined(&self) -> bool {
        self.consistency == Consistency::Weak && self.combiner == Combiner::Sum
    }

    /// Two instances may share a variable only if they agree on everything but the name.
    fn same_shape(&self, other: &VarSpec) -> bool {
        self.kind == other.kind
            && self.consistency == other.consistency
            && self.combiner == other.combiner
            && self.zero == other.zero
            && self.capacity == other.capacity
    }

    fn describe(&self) -> String {
        let kind = match self.kind {
            CellKind::Scalar => "scalar",
            CellKind::Map => "Map",
            CellKind::Vec => "Vec",
        };
        let capacity = match self.capacity {
            Some(n) => format!(", capacity {n}"),
            None => String::new(),
        };
        format!(
            "{kind}, {} consistency, {:?} combiner, zero {:?}{capacity}",
            consistency_name(self.consistency),
            self.combiner,
            self.zero
        )
    }
}

/// A state access the variable's declaration does not allow.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum StateError {
    #[error("state variable #{var} is not declared by this element")]
    UnknownVar { var: VarId },
    #[error("`{var}[{index}]` is out of range: the Vec has {len} elements")]
    IndexOutOfRange { var: String, index: i64, len: usize },
    #[error("`{var}` is a {cell} and takes {expected} keys, not {found}")]
    WrongKey {
        var: String,
        cell: &'static str,
        expected: &'static str,
        found: &'static str,
    },
    #[error("`{var}` is combined with sum, so it holds numbers; cannot store {found}")]
    NotNumeric { var: String, found: &'static str },
    #[error("`{var}` is combined with sum over {expected} values; cannot store {found}")]
    KindMismatch {
        var: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error(
        "`{var}` is combined with sum but its zero is {found}; declare a numeric zero \
         (int, uint or float) so every replica adds the same kind"
    )]
    BadZero { var: String, found: &'static str },
    #[error("`{var}` is a Vec with {consistency} consistency; only local Vec state is supported")]
    UnsupportedVec {
        var: String,
        consistency: &'static str,
    },
    #[error("`{var}` has a capacity but is {what}; only local and strong maps take one")]
    UnsupportedCapacity { var: String, what: &'static str },
    #[error("`{var}` has a capacity of 0; a map must be able to hold at least one entry")]
    ZeroCapacity { var: String },
    #[error(
        "`{var}` in scope `{scope}` is already declared as {existing} by another instance; \
         every instance sharing a scope must declare its shared state identically"
    )]
    SpecConflict {
        var: String,
        scope: String,
        existing: String,
    },
}

/// Where an executor's state reads and writes go.
///
/// Keys: [`Value::Unit`] for scalars, any value for maps, [`Value::Int`] indices for vectors.
/// A store looks up and stores [`Value::canonical_key`] of the key it is given, so `-0.0`
/// reaches the entry of `0.0` and every NaN one entry, in every store and every executor.
pub trait StateStore {
    /// A scalar always has a value (its zero until written); map and vector lookups of absent
    /// keys or out-of-range indices give `None`.
    fn get(&mut self, var: VarId, key: &Value) -> Result<Option<Value>, StateError>;
    /// Whether [`StateStore::get`] would find a value, without copying it out.
    fn contains(&mut self, var: VarId, key: &Value) -> Result<bool, StateError> {
        Ok(self.get(var, key)?.is_some())
    }
    /// [`StateStore::contains`] of `Value::Str(key)`, for a caller that holds the string
    /// borrowed (a message's field): a store that can look it up as it is need not copy it.
    /// A wrapping store must pass this on, or it pays for the copy.
    fn contains_str(&mut self, var: VarId, key: &str) -> Result<bool, StateError> {
        self.contains(var, &Value::Str(key.to_owned()))
    }
    /// Scalars are replaced; maps insert or replace; vectors replace at `0..len` and append at
    /// `len`, and any other index is [`StateError::IndexOutOfRange`].
    fn set(&mut self, var: VarId, key: Value, value: Value) -> Result<(), StateError>;
    /// Scalars reset to their zero; maps remove the key (absent keys are fine); vectors remove
    /// the element and shift the rest down (an index outside `0..len` is an error).
    fn delete(&mut self, var: VarId, key: &Value) -> Result<(), StateError>;
    /// 1 for a scalar, the number of entries otherwise.
    fn len(&mut self, var: VarId) -> Result<usize, StateError>;
    /// Entries in key order: `(Unit, v)` for a scalar, `(Int(i), v)` for a vector.
    fn entries(&mut self, var: VarId) -> Result<Vec<(Value, Value)>, StateError>;
    /// [`StateStore::entries`], but a map with a capacity gives them oldest inserted first:
    /// written back in this order into an empty store, they evict in the same order again
    /// (how a reload carries state over). A wrapping store must pass this on.
    fn entries_inserted(&mut self, var: VarId) -> Result<Vec<(Value, Value)>, StateError> {
        self.entries(var)
    }
    /// Every variable as a whole value (scalar, `Value::Map`, `Value::Vec`), by name, as this
    /// instance sees it (for state dumps and differential tests).
    fn snapshot(&mut self) -> Vec<(String, Value)>;
    /// The block of 8-byte slots where this store keeps local scalars that compiled code
    /// addresses directly (see [`crate::abi::BlockStore`]); `None` for every other store.
    /// Shared, so the instance running compiled code holds the block for the whole call: the
    /// store itself is handed out `&mut` to host calls during it, and may drop its own.
    fn scalar_block(&mut self) -> Option<&Arc<ScalarBlock>> {
        None
    }
}

impl<S: StateStore + ?Sized> StateStore for &mut S {
    fn snapshot(&mut self) -> Vec<(String, Value)> {
        (**self).snapshot()
    }
    fn scalar_block(&mut self) -> Option<&Arc<ScalarBlock>> {
        (**self).scalar_block()
    }
    fn get(&mut self, var: VarId, key: &Value) -> Result<Option<Value>, StateError> {
        (**self).get(var, key)
    }
    fn contains(&mut self, var: VarId, key: &Value) -> Result<bool, StateError> {
        (**self).contains(var, key)
    }
    fn contains_str(&mut self, var: VarId, key: &str) -> Result<bool, StateError> {
        (**self).contains_str(var, key)
    }
    fn set(&mut self, var: VarId, key: Value, value: Value) -> Result<(), StateError> {
        (**self).set(var, key, value)
    }
    fn delete(&mut self, var: VarId, key: &Value) -> Result<(), StateError> {
        (**self).delete(var, key)
    }
    fn len(&mut self, var: VarId) -> Result<usize, StateError> {
        (**self).len(var)
    }
    fn entries(&mut self, var: VarId) -> Result<Vec<(Value, Value)>, StateError> {
        (**self).entries(var)
    }
    fn entries_inserted(&mut self, var: VarId) -> Result<Vec<(Value, Value)>, StateError> {
        (**self).entries_inserted(var)
    }
}

// ---------------------------------------------------------------------------------------------
// cells

#[derive(Clone, Debug, PartialEq)]
enum Cell {
    Scalar(Value),
    Map(BTreeMap<Value, Value>),
    /// A map with a capacity.
    Fifo(Fifo),
    Vec(Vec<Value>),
}

/// A map that holds at most `capacity` entries: adding a key to a full map first removes the
/// entry inserted longest ago. Replacing a present key's value keeps its place and reads never
/// reorder, so a `get` stays a pure read (least-recently-used order would make every read a
/// write, for the equivalence checker and for shared state alike). Eviction depends only on
/// the order of writes, so every executor and every seeded run evicts the same keys.
#[derive(Clone, Debug, PartialEq)]
struct Fifo {
    capacity: usize,
    /// Each key's value and insertion stamp.
    entries: BTreeMap<Value, (u64, Value)>,
    /// Insertion stamp -> key, oldest first.
    order: BTreeMap<u64, Value>,
    next: u64,
}

impl Fifo {
    fn new(capacity: usize) -> Self {
        Fifo {
            capacity,
            entries: BTreeMap::new(),
            order: BTreeMap::new(),
            next: 0,
        }
    }

    fn insert(&mut self, key: Value, value: Value) {
        if let Some(slot) = self.entries.get_mut(&key) {
            slot.1 = value;
            return;
        }
        while self.entries.len() >= self.capacity.max(1) {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        let stamp = self.next;
        self.next += 1;
        self.order.insert(stamp, key.clone());
        self.entries.insert(key, (stamp, value));
    }

    fn remove(&mut self, key: &Value) {
        if let Some((stamp, _)) = self.entries.remove(key) {
            self.order.remove(&stamp);
        }
    }

    fn to_map(&self) -> BTreeMap<Value, Value> {
        self.entries
            .iter()
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect()
    }

    /// Entries oldest first.
    fn inserted(&self) -> Vec<(Value, Value)> {
        self.order
            .values()
            .filter_map(|k| Some((k.clone(), self.entries.get(k)?.1.clone())))
            .collect()
    }
}

impl Cell {
    fn new(spec: &VarSpec) -> Cell {
        match (spec.kind, spec.capacity) {
            (CellKind::Scalar, _) => Cell::Scalar(spec.zero.clone()),
            (CellKind::Map, Some(capacity)) => Cell::Fifo(Fifo::new(capacity)),
            (CellKind::Map, None) => Cell::Map(BTreeMap::new()),
            (CellKind::Vec, _) => Cell::Vec(Vec::new()),
        }
    }

    /// Rejects a key the cell cannot take, before any state changes.
    fn check_key(&self, spec: &VarSpec, key: &Value) -> Result<(), StateError> {
        let wrong = |cell, expected| {
            Err(StateError::WrongKey {
                var: spec.name.clone(),
                cell,
                expected,
                found: key.kind_name(),
            })
        };
        match (self, key) {
            (Cell::Scalar(_), Value::Unit)
            | (Cell::Map(_) | Cell::Fifo(_), _)
            | (Cell::Vec(_), Value::Int(_)) => Ok(()),
            (Cell::Scalar(_), _) => wrong("scalar", "unit"),
            (Cell::Vec(_), _) => wrong("Vec", "int"),
        }
    }

    fn get(&self, spec: &VarSpec, key: &Value) -> Result<Option<Value>, StateError> {
        self.check_key(spec, key)?;
        Ok(match (self, key) {
            (Cell::Scalar(v), _) => Some(v.clone()),
            (Cell::Map(m), _) => m.get(key).cloned(),
            (Cell::Fifo(f), _) => f.entries.get(key).map(|(_, v)| v.clone()),
            (Cell::Vec(xs), Value::Int(i)) => {
                usize::try_from(*i).ok().and_then(|i| xs.get(i)).cloned()
            }
            (Cell::Vec(_), _) => None,
        })
    }

    fn contains(&self, spec: &VarSpec, key: &Value) -> Result<bool, StateError> {
        self.check_key(spec, key)?;
        Ok(match (self, key) {
            (Cell::Scalar(_), _) => true,
            (Cell::Map(m), _) => m.contains_key(key),
            (Cell::Fifo(f), _) => f.entries.contains_key(key),
            (Cell::Vec(xs), Value::Int(i)) => usize::try_from(*i).is_ok_and(|i| i < xs.len()),
            (Cell::Vec(_), _) => false,
        })
    }

    /// [`Cell::contains`] of `Value::Str(key)`. Strings are canonical keys already.
    fn contains_str(&self, spec: &VarSpec, key: &str) -> Result<bool, StateError> {
        match self.map_contains_str(key) {
            Some(found) => Ok(found),
            // A scalar or vector refuses a string key, with the error any key gets.
            None => self.contains(spec, &Value::Str(key.to_owned())),
        }
    }

    /// Whether a map cell holds `key`; `None` for other cells. Small and without an error,
    /// so that the stores' local path inlines it and its answer comes back in a register.
    #[inline]
    fn map_contains_str(&self, key: &str) -> Option<bool> {
        let probe: &dyn MapKey = &key;
        match self {
            Cell::Map(m) => Some(m.contains_key(probe)),
            Cell::Fifo(f) => Some(f.entries.contains_key(probe)),
            Cell::Scalar(_) | Cell::Vec(_) => None,
        }
    }

    fn set(&mut self, spec: &VarSpec, key: Value, value: Value) -> Result<(), StateError> {
        self.check_key(spec, &key)?;
        match (self, key) {
            (Cell::Scalar(v), _) => *v = value,
            (Cell::Map(m), key) => {
                m.insert(key, value);
            }
            (Cell::Fifo(f), key) => f.insert(key, value),
            (Cell::Vec(xs), Value::Int(i)) => match usize::try_from(i) {
                Ok(at) if at < xs.len() => xs[at] = value,
                Ok(at) if at == xs.len() => xs.push(value),
                _ => return Err(out_of_range(spec, i, xs.len())),
            },
            (Cell::Vec(_), _) => {}
        }
        Ok(())
    }

    fn delete(&mut self, spec: &VarSpec, key: &Value) -> Result<(), StateError> {
        self.check_key(spec, key)?;
        match (self, key) {
            (Cell::Scalar(v), _) => *v = spec.zero.clone(),
            (Cell::Map(m), _) => {
                m.remove(key);
            }
            (Cell::Fifo(f), _) => f.remove(key),
            (Cell::Vec(xs), Value::Int(i)) => match usize::try_from(*i) {
                Ok(at) if at < xs.len() => {
                    xs.remove(at);
                }
                _ => return Err(out_of_range(spec, *i, xs.len())),
            },
            (Cell::Vec(_), _) => {}
        }
        Ok(())
    }

    fn len(&self) -> usize {
        match self {
            Cell::Scalar(_) => 1,
            Cell::Map(m) => m.len(),
            Cell::Fifo(f) => f.entries.len(),
            Cell::Vec(xs) => xs.len(),
        }
    }

    fn entries(&self) -> Vec<(Value, Value)> {
        match self {
            Cell::Scalar(v) => vec![(Value::Unit, v.clone())],
            Cell::Map(m) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Cell::Fifo(f) => f
                .entries
                .iter()
                .map(|(k, (_, v))| (k.clone(), v.clone()))
                .collect(),
            Cell::Vec(xs) => xs
                .iter()
                .enumerate()
                .map(|(i, v)| (Value::Int(i as i64), v.clone()))
                .collect(),
        }
    }

    fn to_value(&self) -> Value {
        match self {
            Cell::Scalar(v) => v.clone(),
            Cell::Map(m) => Value::Map(m.clone()),
            Cell::Fifo(f) => Value::Map(f.to_map()),
            Cell::Vec(xs) => Value::Vec(xs.clone()),
        }
    }

    /// Entries in the order they were inserted, oldest first, where the cell keeps one (a
    /// map with a capacity); [`Cell::entries`] otherwise.
    fn entries_inserted(&self) -> Vec<(Value, Value)> {
        match self {
            Cell::Fifo(f) => f.inserted(),
            other => other.entries(),
        }
    }
}

fn out_of_range(spec: &VarSpec, index: i64, len: usize) -> StateError {
    StateError::IndexOutOfRange {
        var: spec.name.clone(),
        index,
        len,
    }
}

fn consistency_name(c: Consistency) -> &'static str {
    match c {
        Consistency::Local => "local",
        Consistency::Strong => "strong",
        Consistency::Weak => "weak",
    }
}

fn is_summable(v: &Value) -> bool {
    matches!(v, Value::Int(_) | Value::Uint(_) | Value::Float(_))
}

/// A value written to a sum-combined variable must be a number of the zero's kind, so every
/// replica's deltas add up without a kind conflict at merge time.
fn check_sum_value(spec: &VarSpec, value: &Value) -> Result<(), StateError> {
    if !is_summable(value) {
        return Err(StateError::NotNumeric {
            var: spec.name.clone(),
            found: value.kind_name(),
        });
    }
    if std::mem::discriminant(value) != std::mem::discriminant(&spec.zero) {
        return Err(StateError::KindMismatch {
            var: spec.name.clone(),
            expected: spec.zero.kind_name(),
            found: value.kind_name(),
        });
    }
    Ok(())
}

/// Rejects writes a weak variable could not merge, so a single-instance store refuses exactly
/// what the multi-instance one refuses.
fn check_write(spec: &VarSpec, value: &Value) -> Result<(), StateError> {
    if spec.sum_combined() {
        check_sum_value(spec, value)
    } else {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// LocalStore

/// Every variable held in this instance: the store for an element running alone.
///
/// Consistency and combiners do not change where values live here, but declarations and writes
/// are validated as [`SharedState`] validates them, so an element that works here does not
/// start failing once it has peers.
#[derive(Clone, Debug)]
pub struct LocalStore {
    vars: Vec<Result<(VarSpec, Cell), StateError>>,
}

impl LocalStore {
    pub fn new(vars: &[VarSpec]) -> Self {
        let vars = vars
            .iter()
            .map(|spec| spec.validate().map(|()| (spec.clone(), Cell::new(spec))))
            .collect();
        LocalStore { vars }
    }

    /// Each variable's whole cell, in declaration order, for state dumps: the scalar's value,
    /// a [`Value::Map`] or a [`Value::Vec`]. Rejected declarations are left out.
    pub fn snapshot(&mut self) -> Vec<(String, Value)> {
        self.vars
            .iter()
            .flatten()
            .map(|(spec, cell)| (spec.name.clone(), cell.to_value()))
            .collect()
    }

    fn var(&mut self, var: VarId) -> Result<(&VarSpec, &mut Cell), StateError> {
        match self.vars.get_mut(var) {
            Some(Ok((spec, cell))) => Ok((spec, cell)),
            Some(Err(e)) => Err(e.clone()),
            None => Err(StateError::UnknownVar { var }),
        }
    }
}

impl StateStore for LocalStore {
    fn snapshot(&mut self) -> Vec<(String, Value)> {
        LocalStore::snapshot(self)
    }

    fn get(&mut self, var: VarId, key: &Value) -> Result<Option<Value>, StateError> {
        let (spec, cell) = self.var(var)?;
        cell.get(spec, &key.canonical_key())
    }

    fn contains_str(&mut self, var: VarId, key: &str) -> Result<bool, StateError> {
        let (spec, cell) = self.var(var)?;
        cell.contains_str(spec, key)
    }

    fn set(&mut self, var: VarId, key: Value, value: Value) -> Result<(), StateError> {
        let (spec, cell) = self.var(var)?;
        check_write(spec, &value)?;
        cell.set(spec, key.into_canonical_key(), value)
    }

    fn delete(&mut self, var: VarId, key: &Value) -> Result<(), StateError> {
        let (spec, cell) = self.var(var)?;
        let key = &*key.canonical_key();
        if spec.sum_combined() {
            // As in a weak replica: a sum-combined key is reset to zero, not removed.
            return match cell.get(spec, key)? {
                Some(_) => cell.set(spec, key.clone(), spec.zero.clone()),
                None => Ok(()),
            };
        }
        cell.delete(spec, key)
    }

    fn len(&mut self, var: VarId) -> Result<usize, StateError> {
        let (_, cell) = self.var(var)?;
        Ok(cell.len())
    }

    fn entries(&mut self, var: VarId) -> Result<Vec<(Value, Value)>, StateError> {
        let (_, cell) = self.var(var)?;
        Ok(cell.entries())
    }

    fn entries_inserted(&mut self, var: VarId) -> Result<Vec<(Value, Value)>, StateError> {
        let (_, cell) = self.var(var)?;
        Ok(cell.entries_inserted())
    }
}

// ---------------------------------------------------------------------------------------------
// SharedState

/// An in-process simulation of several element instances and the state they share.
///
/// * `Local` variables live in each [`InstanceStore`] and die with it.
/// * `Strong` variables: every instance of one scope declaring the same name reads and writes
///   one cell, under one lock, so every access is linearizable.
/// * `Weak` variables: each instance reads and writes its own replica; [`SharedState::sync`]
///   merges all replicas with the variable's [`Combiner`] and resets every replica to the
///   result:
///   * `Lww`: per key, the write (set or delete) with the highest sequence number wins. The
///     sequence is one counter for the whole `SharedState`, bumped by every weak write, so the
///     outcome depends only on the order of operations, never on timing.
///   * `Sum`: per key, each replica's change since the last sync is its value now minus the
///     base; the merge is `base + Σ changes` (ints and uints wrap, floats round once per
///     replica, not once per write), and a key only one replica wrote takes that replica's
///     value as it is. `delete` writes `zero` to a present key (the key stays) and ignores an
///     absent one.
///   * `Max` / `Min`: per key, the greatest / least of the base and every replica's value;
///     a float NaN loses to any number (it is kept only where there is nothing else).
///     Deletes stay local until the sync and are not propagated: the merged value comes back
///     from the base or another replica, so a max-combined value can only grow.
///
/// Scopes separate elements: the same variable name in two scopes is two variables. A replica
/// is identified by (scope, instance name): opening the same instance again reattaches to its
/// replica, and a new instance starts from the state merged at the last sync.
#[derive(Clone, Debug, Default)]
pub struct SharedState {
    inner: Arc<Mutex<Shared>>,
}

#[derive(Debug, Default)]
struct Shared {
    /// The last sequence number handed to a last-writer-wins write.
    seq: u64,
    /// Weak replicas are never merged ([`SharedState::unmerged`]): writes keep no merge log.
    unmerged: bool,
    vars: Vec<SharedVar>,
    /// (scope, variable name) -> index into `vars`; indices are never invalidated.
    index: BTreeMap<(String, String), usize>,
}

#[derive(Debug)]
struct SharedVar {
    spec: VarSpec,
    body: Body,
}

#[derive(Debug)]
enum Body {
    Strong(Cell),
    Weak(WeakVar),
}

#[derive(Debug)]
struct WeakVar {
    /// The merged state as of the last sync.
    base: Cell,
    replicas: Vec<Replica>,
    /// Instance name -> index into `replicas`; merges walk replicas in name order so float
    /// sums are reproducible whatever order instances joined in.
    by_instance: BTreeMap<String, usize>,
}

#[derive(Debug)]
struct Replica {
    data: Cell,
    /// `Lww`: per key, the latest local write since the last sync and its sequence number
    /// (`None` is a delete).
    writes: BTreeMap<Value, (u64, Option<Value>)>,
    /// `Sum`: the keys written since the last sync. The change is read off `data` at the
    /// sync: summing `new - current` per write instead lost a float value to cancellation
    /// (1e20 then 1.0 merged as 0.0) and made NaN of an infinity written over.
    touched: BTreeSet<Value>,
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // Nothing panics while the lock is held, so a poisoned lock still guards consistent data;
    // one crashed test thread should not take the simulation down with it.
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SharedState {
    pub fn new() -> Self {
        SharedState::default()
    }

    /// State whose weak replicas are never merged, as in a runtime until state is shared
    /// across processes: each replica keeps its own data, writes keep no merge log (which
    /// would grow by one entry per key ever written), and [`SharedState::sync`] does nothing.
    pub fn unmerged() -> Self {
        let state = SharedState::default();
        lock(&state.inner).unmerged = true;
        state
    }

    /// The store instance `instance` of the element in `scope` runs against. `vars` are the
    /// element's declarations in [`VarId`] order.
    ///
    /// Declarations that cannot be honoured (a non-local `Vec`, a sum without a numeric zero, or
    /// a shared variable another instance of the scope declared differently) do not fail here:
    /// every access to such a variable returns the error, so the executor reports it where the
    /// element touches the variable.
    pub fn instance_store(&self, scope: &str, instance: &str, vars: &[VarSpec]) -> InstanceStore {
        let mut shared = lock(&self.inner);
        let slots = vars
            .iter()
            .map(|spec| shared.attach(scope, instance, spec))
            .collect();
        InstanceStore {
            shared: Arc::clone(&self.inner),
            slots,
        }
    }

    /// Merges every weak variable's replicas (see [`SharedState`] for each combiner) and resets
    /// each replica to the merged state.
    pub fn sync(&self) {
        let mut shared = lock(&self.inner);
        if shared.unmerged {
            return;
        }
        for var in &mut shared.vars {
            if let Body::Weak(weak) = &mut var.body {
                weak.sync(&var.spec);
            }
        }
    }
}

impl Shared {
    fn attach(&mut self, scope: &str, instance: &str, spec: &VarSpec) -> Slot {
        if let Err(e) = spec.validate() {
            return Slot::Rejected(e);
        }
        if spec.consistency == Consistency::Local {
            return Slot::Local(spec.clone(), Cell::new(spec));
        }
        let key = (scope.to_owned(), spec.name.clone());
        let var = match self.index.get(&key) {
            Some(&var) => var,
            None => {
                let body = match spec.consistency {
                    Consistency::Strong => Body::Strong(Cell::new(spec)),
                    _ => Body::Weak(WeakVar {
                        base: Cell::new(spec),
                        replicas: Vec::new(),
                        by_instance: BTreeMap::new(),
                    }),
                };
                self.vars.push(SharedVar {
                    spec: spec.clone(),
                    body,
                });
                self.index.insert(key, self.vars.len() - 1);
                self.vars.len() - 1
            }
        };
        let shared = &mut self.vars[var];
        if !shared.spec.same_shape(spec) {
            return Slot::Rejected(StateError::SpecConflict {
                var: spec.name.clone(),
                scope: scope.to_owned(),
                existing: shared.spec.describe(),
            });
        }
        let replica = match &mut shared.body {
            Body::Strong(_) => 0,
            Body::Weak(weak) => weak.replica_for(instance),
        };
        Slot::Shared { var, replica }
    }
}

impl WeakVar {
    fn replica_for(&mut self, instance: &str) -> usize {
        if let Some(&i) = self.by_instance.get(instance) {
            return i;
        }
        self.replicas.push(Replica {
            data: self.base.clone(),
            writes: BTreeMap::new(),
            touched: BTreeSet::new(),
        });
        let i = self.replicas.len() - 1;
        self.by_instance.insert(instance.to_owned(), i);
        i
    }

    fn sync(&mut self, spec: &VarSpec) {
        let mut merged = self.base.clone();
        let order: Vec<usize> = self.by_instance.values().copied().collect();
        match spec.combiner {
            Combiner::Lww => {
                let mut latest: BTreeMap<Value, (u64, Option<Value>)> = BTreeMap::new();
                for &r in &order {
                    for (key, write) in std::mem::take(&mut self.replicas[r].writes) {
                        if latest.get(&key).is_none_or(|(seq, _)| write.0 > *seq) {
                            latest.insert(key, write);
                        }
                    }
                }
                for (key, (_, value)) in latest {
                    match value {
                        Some(value) => merged.put(key, value),
                        None => merged.remove(&key),
                    }
                }
            }
            Combiner::Sum => {
                let mut writers: BTreeMap<Value, Vec<usize>> = BTreeMap::new();
                for &r in &order {
                    for key in std::mem::take(&mut self.replicas[r].touched) {
                        writers.entry(key).or_default().push(r);
                    }
                }
                for (key, rs) in writers {
                    let base = self.base.peek(&key).unwrap_or(&spec.zero);
                    let now = |r: usize| self.replicas[r].data.peek(&key).unwrap_or(&spec.zero);
                    // Writes were checked to be numbers of the zero's kind, so these add.
                    let sum = match rs.as_slice() {
                        [only] => Some(now(*only).clone()),
                        _ => rs.iter().try_fold(base.clone(), |sum, &r| {
                            let change = add_or_sub(now(r), base, true)?;
                            add_or_sub(&sum, &change, false)
                        }),
                    };
                    if let Some(sum) = sum {
                        merged.put(key, sum);
                    }
                }
            }
            Combiner::Max | Combiner::Min => {
                for &r in &order {
                    for (key, value) in self.replicas[r].data.entries() {
                        // A NaN is no extreme: in `Value`'s total order it would be the
                        // greatest float, and one replica's 0/0 would hold a max for good.
                        let nan = |v: &Value| matches!(v, Value::Float(x) if x.is_nan());
                        let wins = merged.peek(&key).is_none_or(|current| {
                            match (nan(&value), nan(current), spec.combiner) {
                                (true, _, _) => false,
                                (false, true, _) => true,
                                (false, false, Combiner::Max) => value > *current,
                                (false, false, _) => value < *current,
                            }
                        });
                        if wins {
                            merged.put(key, value);
                        }
                    }
                }
            }
        }
        for replica in &mut self.replicas {
            replica.data = merged.clone();
            replica.writes.clear();
            replica.touched.clear();
        }
        self.base = merged;
    }
}

/// Key-level access for merges, which only ever see scalar and map cells (non-local vectors
/// are rejected when declared) and keys that were checked when written.
impl Cell {
    fn peek(&self, key: &Value) -> Option<&Value> {
        match self {
            Cell::Scalar(v) => Some(v),
            Cell::Map(m) => m.get(key),
            Cell::Fifo(f) => f.entries.get(key).map(|(_, v)| v),
            Cell::Vec(_) => None,
        }
    }

    fn put(&mut self, key: Value, value: Value) {
        match self {
            Cell::Scalar(v) => *v = value,
            Cell::Map(m) => {
                m.insert(key, value);
            }
            Cell::Fifo(f) => f.insert(key, value),
            Cell::Vec(_) => {}
        }
    }

    /// Scalar deletes are recorded as writes of the zero, so only maps remove keys.
    fn remove(&mut self, key: &Value) {
        match self {
            Cell::Map(m) => {
                m.remove(key);
            }
            Cell::Fifo(f) => f.remove(key),
            Cell::Scalar(_) | Cell::Vec(_) => {}
        }
    }
}

fn add_or_sub(a: &Value, b: &Value, subtract: bool) -> Option<Value> {
    Some(match (a, b) {
        (Value::Int(x), Value::Int(y)) => Value::Int(if subtract {
            x.wrapping_sub(*y)
        } else {
            x.wrapping_add(*y)
        }),
        (Value::Uint(x), Value::Uint(y)) => Value::Uint(if subtract {
            x.wrapping_sub(*y)
        } else {
            x.wrapping_add(*y)
        }),
        (Value::Float(x), Value::Float(y)) => Value::Float(if subtract { x - y } else { x + y }),
        _ => return None,
    })
}

/// One instance's view of its element's state; see [`SharedState`].
#[derive(Debug)]
pub struct InstanceStore {
    shared: Arc<Mutex<Shared>>,
    slots: Vec<Slot>,
}

#[derive(Debug)]
enum Slot {
    Local(VarSpec, Cell),
    /// A strong or weak variable in `Shared::vars`; `replica` is this instance's replica of a
    /// weak one.
    Shared {
        var: usize,
        replica: usize,
    },
    Rejected(StateError),
}

/// What one access reaches: a cell with plain semantics (local or strong), or a weak replica.
enum Target<'a> {
    Cell(&'a VarSpec, &'a mut Cell),
    /// The sequence counter, or `None` when the state keeps no merge logs.
    Weak(&'a VarSpec, &'a mut Replica, Option<&'a mut u64>),
}

impl InstanceStore {
    /// Each variable's whole cell as this instance sees it, in declaration order: the scalar's
    /// value, a [`Value::Map`] or a [`Value::Vec`]. Rejected declarations are left out.
    pub fn snapshot(&mut self) -> Vec<(String, Value)> {
        let shared = lock(&self.shared);
        self.slots
            .iter()
            .filter_map(|slot| match slot {
                Slot::Local(spec, cell) => Some((spec.name.clone(), cell.to_value())),
                Slot::Shared { var, replica } => {
                    let var = shared.vars.get(*var)?;
                    let cell = match &var.body {
                        Body::Strong(cell) => cell,
                        Body::Weak(weak) => &weak.replicas.get(*replica)?.data,
                    };
                    Some((var.spec.name.clone(), cell.to_value()))
                }
                Slot::Rejected(_) => None,
            })
            .collect()
    }

    fn access<R>(
        &mut self,
        var: VarId,
        f: impl FnOnce(Target<'_>) -> Result<R, StateError>,
    ) -> Result<R, StateError> {
        match self.slots.get_mut(var) {
            None => Err(StateError::UnknownVar { var }),
            Some(Slot::Rejected(e)) => Err(e.clone()),
            Some(Slot::Local(spec, cell)) => f(Target::Cell(spec, cell)),
            Some(Slot::Shared {
                var: index,
                replica,
            }) => {
                let mut guard = lock(&self.shared);
                let Shared {
                    seq,
                    vars,
                    unmerged,
                    ..
                } = &mut *guard;
                let log = (!*unmerged).then_some(seq);
                // Slots hold indices handed out by `attach`, which are never invalidated; the
                // error arms are unreachable but cheaper to state than to prove to the compiler.
                let SharedVar { spec, body } =
                    vars.get_mut(*index).ok_or(StateError::UnknownVar { var })?;
                match body {
                    Body::Strong(cell) => f(Target::Cell(spec, cell)),
                    Body::Weak(weak) => {
                        let replica = weak
                            .replicas
                            .get_mut(*replica)
                            .ok_or(StateError::UnknownVar { var })?;
                        f(Target::Weak(spec, replica, log))
                    }
                }
            }
        }
    }
}

impl Replica {
    fn set(
        &mut self,
        spec: &VarSpec,
        log: Option<&mut u64>,
        key: Value,
        value: Value,
    ) -> Result<(), StateError> {
        check_write(spec, &value)?;
        self.data.check_key(spec, &key)?;
        match (spec.combiner, log) {
            (Combiner::Lww, None) => self.data.set(spec, key, value)?,
            (Combiner::Lww, Some(seq)) => {
                self.data.set(spec, key.clone(), value.clone())?;
                *seq += 1;
                self.writes.insert(key, (*seq, Some(value)));
            }
            (Combiner::Sum, log) => {
                let current = self.data.peek(&key).unwrap_or(&spec.zero);
                if add_or_sub(&value, current, true).is_none() {
                    // Only reachable if a stored value escaped validation; report the kind clash.
                    return Err(StateError::KindMismatch {
                        var: spec.name.clone(),
                        expected: current.kind_name(),
                        found: value.kind_name(),
                    });
                }
                if log.is_some() {
                    self.touched.insert(key.clone());
                }
                self.data.set(spec, key, value)?;
            }
            (Combiner::Max | Combiner::Min, _) => self.data.set(spec, key, value)?,
        }
        Ok(())
    }

    fn delete(
        &mut self,
        spec: &VarSpec,
        log: Option<&mut u64>,
        key: &Value,
    ) -> Result<(), StateError> {
        self.data.check_key(spec, key)?;
        match spec.combiner {
            Combiner::Lww => {
                self.data.delete(spec, key)?;
                let Some(seq) = log else { return Ok(()) };
                *seq += 1;
                let written = match self.data {
                    Cell::Scalar(_) => Some(spec.zero.clone()),
                    _ => None,
                };
                self.writes.insert(key.clone(), (*seq, written));
                Ok(())
            }
            Combiner::Sum => match self.data.peek(key) {
                Some(_) => self.set(spec, log, key.clone(), spec.zero.clone()),
                None => Ok(()),
            },
            Combiner::Max | Combiner::Min => self.data.delete(spec, key),
        }
    }
}

impl StateStore for InstanceStore {
    fn snapshot(&mut self) -> Vec<(String, Value)> {
        InstanceStore::snapshot(self)
    }

    fn get(&mut self, var: VarId, key: &Value) -> Result<Option<Value>, StateError> {
        let key = &*key.canonical_key();
        self.access(var, |target| match target {
            Target::Cell(spec, cell) => cell.get(spec, key),
            Target::Weak(spec, replica, _) => replica.data.get(spec, key),
        })
    }

    fn contains(&mut self, var: VarId, key: &Value) -> Result<bool, StateError> {
        let key = &*key.canonical_key();
        self.access(var, |target| match target {
            Target::Cell(spec, cell) => cell.contains(spec, key),
            Target::Weak(spec, replica, _) => replica.data.contains(spec, key),
        })
    }

    fn contains_str(&mut self, var: VarId, key: &str) -> Result<bool, StateError> {
        // A local map (the firewall's list) needs neither the lock nor a frame for it.
        if let Some(Slot::Local(_, cell)) = self.slots.get(var)
            && let Some(found) = cell.map_contains_str(key)
        {
            return Ok(found);
        }
        self.access(var, |target| match target {
            Target::Cell(spec, cell) => cell.contains_str(spec, key),
            Target::Weak(spec, replica, _) => replica.data.contains_str(spec, key),
        })
    }

    fn set(&mut self, var: VarId, key: Value, value: Value) -> Result<(), StateError> {
        let key = key.into_canonical_key();
        self.access(var, |target| match target {
            Target::Cell(spec, cell) => {
                check_write(spec, &value)?;
                cell.set(spec, key, value)
            }
            Target::Weak(spec, replica, seq) => replica.set(spec, seq, key, value),
        })
    }

    fn delete(&mut self, var: VarId, key: &Value) -> Result<(), StateError> {
        let key = &*key.canonical_key();
        self.access(var, |target| match target {
            Target::Cell(spec, cell) => cell.delete(spec, key),
            Target::Weak(spec, replica, seq) => replica.delete(spec, seq, key),
        })
    }

    fn len(&mut self, var: VarId) -> Result<usize, StateError> {
        self.access(var, |target| match target {
            Target::Cell(_, cell) => Ok(cell.len()),
            Target::Weak(_, replica, _) => Ok(replica.data.len()),
        })
    }

    fn entries(&mut self, var: VarId) -> Result<Vec<(Value, Value)>, StateError> {
        self.access(var, |target| match target {
            Target::Cell(_, cell) => Ok(cell.entries()),
            Target::Weak(_, replica, _) => Ok(replica.data.entries()),
        })
    }

    fn entries_inserted(&mut self, var: VarId) -> Result<Vec<(Value, Value)>, StateError> {
        self.access(var, |target| match target {
            Target::Cell(_, cell) => Ok(cell.entries_inserted()),
            Target::Weak(_, replica, _) => Ok(replica.data.entries_inserted()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(i: i64) -> Value {
        Value::Int(i)
    }

    fn scalar(name: &str, zero: Value) -> VarSpec {
        VarSpec::new(name, CellKind::Scalar, zero)
    }

    fn map(name: &str) -> VarSpec {
        VarSpec::new(name, CellKind::Map, Value::Unit)
    }

    fn vector(name: &str) -> VarSpec {
        VarSpec::new(name, CellKind::Vec, Value::Unit)
    }

    /// A weak map combined with `combiner` over ints.
    fn weak_map(name: &str, combiner: Combiner) -> VarSpec {
        VarSpec::new(name, CellKind::Map, int(0)).weak(combiner)
    }

    // ----- cell semantics, through both store kinds

    /// Runs `check` against a `LocalStore` and a `SharedState` instance built from `vars`.
    fn both_stores(vars: &[VarSpec], check: impl Fn(&mut dyn StateStore)) {
        check(&mut LocalStore::new(vars));
        check(&mut SharedState::new().instance_store("scope", "i0", vars));
    }

    #[test]
    fn scalar_cells() {
        for consistency in [Consistency::Local, Consistency::Strong, Consistency::Weak] {
            let mut spec = scalar("hits", int(7));
            spec.consistency = consistency;
            both_stores(&[spec], |s| {
                assert_eq!(s.get(0, &Value::Unit).unwrap(), Some(int(7)));
                s.set(0, Value::Unit, int(9)).unwrap();
                assert_eq!(s.get(0, &Value::Unit).unwrap(), Some(int(9)));
                assert_eq!(s.len(0).unwrap(), 1);
                assert_eq!(s.entries(0).unwrap(), vec![(Value::Unit, int(9))]);
                s.delete(0, &Value::Unit).unwrap();
                assert_eq!(s.get(0, &Value::Unit).unwrap(), Some(int(7)));
                assert_eq!(
                    s.set(0, int(0), int(1)),
                    Err(StateError::WrongKey {
                        var: "hits".into(),
                        cell: "scalar",
                        expected: "unit",
                        found: "int"
                    })
                );
                assert!(s.get(0, &Value::str("x")).is_err());
                assert!(s.delete(0, &int(0)).is_err());
            });
        }
    }

    #[test]
    fn map_cells_are_ordered_by_key() {
        for consistency in [Consistency::Local, Consistency::Strong, Consistency::Weak] {
            let mut spec = map("cache");
            spec.consistency = consistency;
            both_stores(&[spec], |s| {
                assert_eq!(s.get(0, &Value::str("a")).unwrap(), None);
                assert_eq!(s.len(0).unwrap(), 0);
                s.set(0, Value::str("b"), int(2)).unwrap();
                s.set(0, Value::str("a"), int(1)).unwrap();
                s.set(0, int(5), int(0)).unwrap();
                s.set(0, Value::str("b"), int(3)).unwrap();
                assert_eq!(s.get(0, &Value::str("b")).unwrap(), Some(int(3)));
                // Ints order before strings in Value's total order.
                assert_eq!(
                    s.entries(0).unwrap(),
                    vec![
                        (int(5), int(0)),
                        (Value::str("a"), int(1)),
                        (Value::str("b"), int(3))
                    ]
                );
                s.delete(0, &Value::str("a")).unwrap();
                s.delete(0, &Value::str("never there")).unwrap();
                assert_eq!(s.len(0).unwrap(), 2);
                assert_eq!(s.get(0, &Value::str("a")).unwrap(), None);
            });
        }
    }

    #[test]
    fn contains_agrees_with_get() {
        for consistency in [Consistency::Local, Consistency::Strong, Consistency::Weak] {
            // Vectors are local only.
            let specs = [scalar("hits", int(7)), map("cache"), vector("log")].map(|mut spec| {
                if spec.kind != CellKind::Vec {
                    spec.consistency = consistency;
                }
                spec
            });
            both_stores(&specs, |s| {
                s.set(1, Value::str("a"), int(1)).unwrap();
                s.set(2, int(0), Value::str("x")).unwrap();
                let probes = [
                    (0, Value::Unit),
                    (0, int(1)),
                    (1, Value::str("a")),
                    (1, Value::str("b")),
                    (1, int(1)),
                    (2, int(0)),
                    (2, int(1)),
                    (2, int(-1)),
                    (2, Value::str("a")),
                ];
                for (var, key) in probes {
                    let got = s.get(var, &key).map(|v| v.is_some());
                    assert_eq!(s.contains(var, &key), got, "var {var} key {key:?}");
                    if let Value::Str(k) = &key {
                        assert_eq!(s.contains_str(var, k), got, "var {var} key {k:?}");
                    }
                }
                assert_eq!(s.contains_str(3, "a"), s.contains(3, &Value::str("a")));
            });
        }
    }

    /// A borrowed string key finds what the `Value::Str` would, among keys of every kind
    /// (which order around strings by variant), in plain and bounded maps of every
    /// consistency.
    #[test]
    fn string_keys_are_found_borrowed() {
        let keys = [
            Value::Unit,
            Value::Bool(true),
            int(-3),
            Value::Uint(4),
            Value::Float(2.5),
            Value::str(""),
            Value::str("a"),
            Value::str("mallory"),
            Value::str("\u{e9}"),
            Value::Bytes(b"a".to_vec()),
            Value::Instant(1.0),
            Value::pair(Value::str("a"), int(1)),
            Value::Vec(vec![Value::str("a")]),
            Value::none(),
            Value::some(Value::str("a")),
        ];
        let probes = [
            "", "a", "b", "eve", "mallory", "mallory ", "\u{e9}", "zzz", "\0",
        ];
        for consistency in [Consistency::Local, Consistency::Strong, Consistency::Weak] {
            for capacity in [None, Some(64), Some(3)] {
                if capacity.is_some() && consistency == Consistency::Weak {
                    continue; // rejected when declared
                }
                let mut spec = map("m");
                spec.consistency = consistency;
                spec.capacity = capacity;
                both_stores(&[spec], |s| {
                    // Every subset of keys is too many; every prefix and every other key.
                    for (i, key) in keys.iter().enumerate() {
                        if i % 2 == 0 {
                            s.set(0, key.clone(), int(i as i64)).unwrap();
                        }
                        for p in probes {
                            let got = s.contains(0, &Value::str(p));
                            assert_eq!(s.contains_str(0, p), got, "{p:?} after {i} keys");
                        }
                    }
                    for key in &keys {
                        s.set(0, key.clone(), int(0)).unwrap();
                        for p in probes {
                            let got = s.contains(0, &Value::str(p));
                            assert_eq!(s.contains_str(0, p), got, "{p:?} after {key:?}");
                        }
                    }
                });
            }
        }
    }

    /// Keys the language cannot tell apart are one entry: `0.0 == -0.0`, and a NaN's sign and
    /// payload never show (but differ between processors). They were separate entries of
    /// `Value`'s total order.
    #[test]
    fn float_keys_of_one_value_are_one_entry() {
        let f = Value::Float;
        let neg_nan = f64::from_bits(0xfff8_0000_0000_0001);
        for consistency in [Consistency::Local, Consistency::Strong, Consistency::Weak] {
            let mut spec = map("m");
            spec.consistency = consistency;
            both_stores(&[spec], |s| {
                s.set(0, f(-0.0), int(1)).unwrap();
                assert_eq!(s.get(0, &f(0.0)).unwrap(), Some(int(1)));
                s.set(0, f(0.0), int(2)).unwrap();
                s.set(0, f(f64::NAN), int(3)).unwrap();
                s.set(0, f(neg_nan), int(4)).unwrap();
                s.set(0, Value::pair(f(-0.0), Value::Instant(-0.0)), int(5))
                    .unwrap();
                assert!(
                    s.contains(0, &Value::pair(f(0.0), Value::Instant(0.0)))
                        .unwrap()
                );
                let entries = s.entries(0).unwrap();
                assert_eq!(
                    entries,
                    vec![
                        (f(0.0), int(2)),
                        (f(f64::NAN), int(4)),
                        (Value::pair(f(0.0), Value::Instant(0.0)), int(5))
                    ]
                );
                // Stored as 0.0, which `str` and `1 / k` tell from -0.0.
                assert!(matches!(entries[0].0, Value::Float(k) if k.is_sign_positive()));
                s.delete(0, &f(-0.0)).unwrap();
                s.delete(0, &f(neg_nan)).unwrap();
                assert_eq!(s.len(0).unwrap(), 1);
            });
        }
        // Replicas that wrote the two zeros merge into one entry.
        let state = SharedState::new();
        let vars = [weak_map("m", Combiner::Lww)];
        let mut a = state.instance_store("x", "a", &vars);
        let mut b = state.instance_store("x", "b", &vars);
        a.set(0, f(0.0), int(1)).unwrap();
        b.set(0, f(-0.0), int(2)).unwrap();
        state.sync();
        assert_eq!(a.entries(0).unwrap(), vec![(f(0.0), int(2))]);
    }

    #[test]
    fn bounded_maps_evict_the_entry_inserted_longest_ago() {
        let s = Value::str;
        for strong in [false, true] {
            let spec = map("cache").bounded(3);
            let spec = if strong { spec.strong() } else { spec };
            both_stores(&[spec], |st| {
                for k in ["c", "a", "b"] {
                    st.set(0, s(k), int(1)).unwrap();
                }
                // Replacing a value and reading keep the order of insertion.
                st.set(0, s("c"), int(2)).unwrap();
                assert_eq!(st.get(0, &s("c")).unwrap(), Some(int(2)));
                st.set(0, s("d"), int(1)).unwrap();
                assert_eq!(st.len(0).unwrap(), 3);
                assert_eq!(st.get(0, &s("c")).unwrap(), None, "c was inserted first");
                // A delete frees a place: the next insert evicts nothing.
                st.delete(0, &s("b")).unwrap();
                st.set(0, s("e"), int(1)).unwrap();
                assert!(st.contains(0, &s("a")).unwrap());
                st.set(0, s("f"), int(1)).unwrap();
                assert_eq!(st.get(0, &s("a")).unwrap(), None);
                // Entries are still in key order; the insertion order is apart.
                let keys = |v: Vec<(Value, Value)>| v.into_iter().map(|e| e.0).collect::<Vec<_>>();
                assert_eq!(keys(st.entries(0).unwrap()), [s("d"), s("e"), s("f")]);
                st.set(0, s("a"), int(1)).unwrap();
                assert_eq!(
                    keys(st.entries_inserted(0).unwrap()),
                    [s("e"), s("f"), s("a")]
                );
            });
        }
        // A strong map is one cell: one instance's insert evicts another's entry.
        let state = SharedState::new();
        let spec = [map("m").strong().bounded(1)];
        let mut a = state.instance_store("x", "a", &spec);
        let mut b = state.instance_store("x", "b", &spec);
        a.set(0, int(1), int(1)).unwrap();
        b.set(0, int(2), int(2)).unwrap();
        assert_eq!(a.entries(0).unwrap(), [(int(2), int(2))]);
    }

    #[test]
    fn capacities_only_bound_local_and_strong_maps() {
        let weak = weak_map("w", Combiner::Lww).bounded(2);
        let vector = vector("v").bounded(2);
        let zero = map("z").bounded(0);
        both_stores(&[weak, vector, zero], |s| {
            let e = s.set(0, int(1), int(1)).unwrap_err();
            assert_eq!(
                e.to_string(),
                "`w` has a capacity but is a weak map; only local and strong maps take one"
            );
            assert!(matches!(
                s.set(1, int(0), int(1)),
                Err(StateError::UnsupportedCapacity { .. })
            ));
            assert!(matches!(s.len(2), Err(StateError::ZeroCapacity { .. })));
        });
        // Instances sharing a strong map must agree on its capacity.
        let state = SharedState::new();
        let _a = state.instance_store("x", "a", &[map("m").strong().bounded(2)]);
        let mut b = state.instance_store("x", "b", &[map("m").strong().bounded(3)]);
        let err = b.len(0).unwrap_err();
        assert!(err.to_string().contains("capacity 2"), "{err}");
    }

    #[test]
    fn vec_cells_append_replace_and_shift() {
        both_stores(&[vector("log")], |s| {
            s.set(0, int(0), Value::str("a")).unwrap();
            s.set(0, int(1), Value::str("b")).unwrap();
            s.set(0, int(2), Value::str("c")).unwrap();
            s.set(0, int(1), Value::str("B")).unwrap();
            assert_eq!(s.len(0).unwrap(), 3);
            assert_eq!(s.get(0, &int(1)).unwrap(), Some(Value::str("B")));
            assert_eq!(s.get(0, &int(3)).unwrap(), None);
            assert_eq!(s.get(0, &int(-1)).unwrap(), None);
            assert_eq!(
                s.set(0, int(4), Value::str("gap")),
                Err(StateError::IndexOutOfRange {
                    var: "log".into(),
                    index: 4,
                    len: 3
                })
            );
            assert_eq!(
                s.set(0, int(-1), Value::str("neg")),
                Err(StateError::IndexOutOfRange {
                    var: "log".into(),
                    index: -1,
                    len: 3
                })
            );
            s.delete(0, &int(0)).unwrap();
            assert_eq!(
                s.entries(0).unwrap(),
                vec![(int(0), Value::str("B")), (int(1), Value::str("c"))]
            );
            assert_eq!(
                s.delete(0, &int(2)),
                Err(StateError::IndexOutOfRange {
                    var: "log".into(),
                    index: 2,
                    len: 2
                })
            );
            assert!(s.delete(0, &int(-1)).is_err());
            assert_eq!(
                s.get(0, &Value::Uint(0)),
                Err(StateError::WrongKey {
                    var: "log".into(),
                    cell: "Vec",
                    expected: "int",
                    found: "uint"
                })
            );
        });
    }

    #[test]
    fn undeclared_variables_are_errors() {
        both_stores(&[map("m")], |s| {
            assert_eq!(
                s.get(1, &Value::Unit),
                Err(StateError::UnknownVar { var: 1 })
            );
            assert_eq!(
                s.set(7, Value::Unit, int(1)),
                Err(StateError::UnknownVar { var: 7 })
            );
            assert_eq!(s.len(1), Err(StateError::UnknownVar { var: 1 }));
        });
    }

    #[test]
    fn shared_vecs_and_sums_without_numeric_zero_are_rejected_on_access() {
        let vars = [
            vector("v").weak(Combiner::Lww),
            vector("w").strong(),
            map("m").weak(Combiner::Sum),
            map("ok"),
        ];
        both_stores(&vars, |s| {
            let weak_vec = StateError::UnsupportedVec {
                var: "v".into(),
                consistency: "weak",
            };
            assert_eq!(s.get(0, &int(0)), Err(weak_vec.clone()));
            assert_eq!(s.set(0, int(0), int(1)), Err(weak_vec.clone()));
            assert_eq!(s.entries(0), Err(weak_vec));
            assert_eq!(
                s.len(1),
                Err(StateError::UnsupportedVec {
                    var: "w".into(),
                    consistency: "strong"
                })
            );
            assert_eq!(
                s.set(2, int(0), int(1)),
                Err(StateError::BadZero {
                    var: "m".into(),
                    found: "unit"
                })
            );
            s.set(3, int(0), int(1)).unwrap();
        });
        assert!(vars[0].validate().is_err());
        assert!(vars[3].validate().is_ok());
    }

    #[test]
    fn sum_combined_writes_must_match_the_zero_kind() {
        let vars = [
            weak_map("counts", Combiner::Sum),
            scalar("total", Value::Float(0.0)).weak(Combiner::Sum),
        ];
        both_stores(&vars, |s| {
            assert_eq!(
                s.set(0, Value::str("k"), Value::str("x")),
                Err(StateError::NotNumeric {
                    var: "counts".into(),
                    found: "string"
                })
            );
            assert_eq!(
                s.set(0, Value::str("k"), Value::Float(1.0)),
                Err(StateError::KindMismatch {
                    var: "counts".into(),
                    expected: "int",
                    found: "float"
                })
            );
            assert_eq!(s.get(0, &Value::str("k")).unwrap(), None);
            s.set(0, Value::str("k"), int(3)).unwrap();
            // Deleting a sum-combined key writes zero; deleting an absent one does nothing.
            s.delete(0, &Value::str("k")).unwrap();
            s.delete(0, &Value::str("absent")).unwrap();
            assert_eq!(s.entries(0).unwrap(), vec![(Value::str("k"), int(0))]);
            s.set(1, Value::Unit, Value::Float(2.5)).unwrap();
            assert!(s.set(1, Value::Unit, int(2)).is_err());
        });
    }

    #[test]
    fn snapshots_dump_whole_cells_in_declaration_order() {
        let vars = [
            scalar("n", int(0)),
            map("m"),
            vector("v"),
            vector("bad").strong(),
        ];
        let fill = |s: &mut dyn StateStore| {
            s.set(0, Value::Unit, int(4)).unwrap();
            s.set(1, Value::str("k"), int(1)).unwrap();
            s.set(2, int(0), Value::Bool(true)).unwrap();
        };
        let expected = vec![
            ("n".to_owned(), int(4)),
            (
                "m".to_owned(),
                Value::Map(BTreeMap::from([(Value::str("k"), int(1))])),
            ),
            ("v".to_owned(), Value::Vec(vec![Value::Bool(true)])),
        ];
        let mut local = LocalStore::new(&vars);
        fill(&mut local);
        assert_eq!(local.snapshot(), expected);
        let mut instance = SharedState::new().instance_store("s", "i", &vars);
        fill(&mut instance);
        assert_eq!(instance.snapshot(), expected);
    }

    #[test]
    fn errors_read_well() {
        assert_eq!(
            StateError::IndexOutOfRange {
                var: "log".into(),
                index: 4,
                len: 3
            }
            .to_string(),
            "`log[4]` is out of range: the Vec has 3 elements"
        );
        assert_eq!(
            StateError::WrongKey {
                var: "n".into(),
                cell: "scalar",
                expected: "unit",
                found: "int"
            }
            .to_string(),
            "`n` is a scalar and takes unit keys, not int"
        );
    }

    // ----- sharing between instances

    #[test]
    fn strong_variables_are_one_cell_per_scope() {
        let state = SharedState::new();
        let vars = [scalar("n", int(0)).strong(), map("m").strong()];
        let mut a = state.instance_store("ratelimit", "a", &vars);
        let mut b = state.instance_store("ratelimit", "b", &vars);
        a.set(0, Value::Unit, int(5)).unwrap();
        assert_eq!(b.get(0, &Value::Unit).unwrap(), Some(int(5)));
        b.set(1, Value::str("k"), int(1)).unwrap();
        assert_eq!(a.entries(1).unwrap(), vec![(Value::str("k"), int(1))]);
        a.delete(1, &Value::str("k")).unwrap();
        assert_eq!(b.len(1).unwrap(), 0);

        // Later instances of the scope see what earlier ones wrote, even after those are gone.
        drop(a);
        drop(b);
        let mut c = state.instance_store("ratelimit", "c", &vars);
        assert_eq!(c.get(0, &Value::Unit).unwrap(), Some(int(5)));

        // Another scope with the same names is another variable.
        let mut other = state.instance_store("cache", "a", &vars);
        assert_eq!(other.get(0, &Value::Unit).unwrap(), Some(int(0)));
        other.set(0, Value::Unit, int(99)).unwrap();
        assert_eq!(c.get(0, &Value::Unit).unwrap(), Some(int(5)));
    }

    #[test]
    fn local_variables_belong_to_one_instance() {
        let state = SharedState::new();
        let vars = [scalar("n", int(0))];
        let mut a = state.instance_store("s", "a", &vars);
        let mut b = state.instance_store("s", "b", &vars);
        a.set(0, Value::Unit, int(1)).unwrap();
        state.sync();
        assert_eq!(b.get(0, &Value::Unit).unwrap(), Some(int(0)));
        assert_eq!(a.get(0, &Value::Unit).unwrap(), Some(int(1)));
    }

    #[test]
    fn weak_replicas_are_isolated_until_sync_and_scoped() {
        let state = SharedState::new();
        let vars = [weak_map("seen", Combiner::Lww)];
        let mut a = state.instance_store("s", "a", &vars);
        let mut b = state.instance_store("s", "b", &vars);
        let mut elsewhere = state.instance_store("t", "a", &vars);
        a.set(0, int(1), Value::str("from a")).unwrap();
        assert_eq!(b.get(0, &int(1)).unwrap(), None);
        state.sync();
        assert_eq!(b.get(0, &int(1)).unwrap(), Some(Value::str("from a")));
        assert_eq!(elsewhere.len(0).unwrap(), 0);

        // Reopening an instance reattaches to its replica; a newcomer starts from the merge.
        b.set(0, int(2), Value::str("unsynced")).unwrap();
        drop(b);
        let mut b_again = state.instance_store("s", "b", &vars);
        assert_eq!(
            b_again.get(0, &int(2)).unwrap(),
            Some(Value::str("unsynced"))
        );
        let mut newcomer = state.instance_store("s", "c", &vars);
        assert_eq!(
            newcomer.entries(0).unwrap(),
            vec![(int(1), Value::str("from a"))]
        );
    }

    /// The merge logs of every weak replica, in entries.
    fn logged(state: &SharedState) -> usize {
        lock(&state.inner)
            .vars
            .iter()
            .map(|v| match &v.body {
                Body::Weak(w) => w
                    .replicas
                    .iter()
                    .map(|r| r.writes.len() + r.touched.len())
                    .sum(),
                Body::Strong(_) => 0,
            })
            .sum()
    }

    /// A runtime never merges its replicas, so it must not log writes for a merge: the logs
    /// would grow by an entry per key ever written, even keys deleted long ago.
    #[test]
    fn unmerged_state_keeps_no_merge_log_and_reads_as_merged_state_does() {
        let vars = [
            weak_map("last", Combiner::Lww),
            weak_map("sum", Combiner::Sum),
            scalar("n", int(0)).weak(Combiner::Sum),
        ];
        let unmerged = SharedState::unmerged();
        let merged = SharedState::new();
        let mut u = unmerged.instance_store("x", "a", &vars);
        let mut m = merged.instance_store("x", "a", &vars);
        for k in 0..10_000 {
            for s in [&mut u, &mut m] {
                s.set(0, int(k), int(k)).unwrap();
                s.set(1, int(k % 7), int(k)).unwrap();
                s.set(2, Value::Unit, int(k)).unwrap();
                if k % 3 != 0 {
                    s.delete(0, &int(k)).unwrap();
                    s.delete(1, &int(k % 5)).unwrap();
                }
            }
        }
        for (var, spec) in vars.iter().enumerate() {
            assert_eq!(
                u.entries(var).unwrap(),
                m.entries(var).unwrap(),
                "{}",
                spec.name
            );
        }
        assert_eq!(logged(&unmerged), 0);
        assert!(
            logged(&merged) > 10_000,
            "the merged state logs for its syncs"
        );
        unmerged.sync();
        assert_eq!(
            u.entries(0).unwrap(),
            m.entries(0).unwrap(),
            "sync changes nothing"
        );
    }

    #[test]
    fn lww_takes_the_latest_write_including_deletes() {
        let state = SharedState::new();
        let vars = [
            weak_map("m", Combiner::Lww),
            scalar("s", int(0)).weak(Combiner::Lww),
        ];
        let mut a = state.instance_store("x", "a", &vars);
        let mut b = state.instance_store("x", "b", &vars);
        let mut c = state.instance_store("x", "c", &vars);
        a.set(0, int(1), int(10)).unwrap();
        b.set(0, int(1), int(20)).unwrap(); // later than a's: wins
        b.set(0, int(2), int(1)).unwrap();
        a.delete(0, &int(2)).unwrap(); // a delete later than b's write: wins
        c.set(1, Value::Unit, int(3)).unwrap();
        a.delete(1, &Value::Unit).unwrap(); // resets the scalar to zero, and is latest
        state.sync();
        for s in [&mut a, &mut b, &mut c] {
            assert_eq!(s.entries(0).unwrap(), vec![(int(1), int(20))]);
            assert_eq!(s.get(1, &Value::Unit).unwrap(), Some(int(0)));
        }
        // Without new writes a sync changes nothing.
        state.sync();
        assert_eq!(c.entries(0).unwrap(), vec![(int(1), int(20))]);
    }

    #[test]
    fn sum_adds_every_replicas_changes() {
        let state = SharedState::new();
        let vars = [
            weak_map("hits", Combiner::Sum),
            scalar("bytes", Value::Uint(0)).weak(Combiner::Sum),
        ];
        let mut stores: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|i| state.instance_store("x", i, &vars))
            .collect();
        let incr = |s: &mut InstanceStore, k: &str, by: i64| {
            let cur = s.get(0, &Value::str(k)).unwrap().unwrap_or(int(0));
            s.set(0, Value::str(k), int(cur.as_int().unwrap() + by))
                .unwrap();
        };
        incr(&mut stores[0], "x", 1);
        incr(&mut stores[0], "x", 1);
        incr(&mut stores[1], "x", 5);
        incr(&mut stores[2], "y", -3);
        assert_eq!(stores[1].get(0, &Value::str("x")).unwrap(), Some(int(5)));
        stores[0].set(1, Value::Unit, Value::Uint(10)).unwrap();
        stores[1]
            .set(1, Value::Unit, Value::Uint(u64::MAX))
            .unwrap(); // i.e. -1, wrapping
        state.sync();
        for s in &mut stores {
            assert_eq!(
                s.entries(0).unwrap(),
                vec![(Value::str("x"), int(7)), (Value::str("y"), int(-3))]
            );
            assert_eq!(s.get(1, &Value::Unit).unwrap(), Some(Value::Uint(9)));
        }
        // A delete zeroes the key locally, i.e. subtracts this replica's view of it.
        stores[2].delete(0, &Value::str("x")).unwrap();
        incr(&mut stores[0], "x", 2);
        state.sync();
        assert_eq!(stores[1].get(0, &Value::str("x")).unwrap(), Some(int(2)));
    }

    /// A replica's float value survives the merge as it was written, not as the sum of its
    /// writes' differences: no cancellation, and no NaN from an infinity written over.
    #[test]
    fn sum_of_floats_keeps_a_lone_writers_value_exactly() {
        let state = SharedState::new();
        let vars = [scalar("load", Value::Float(0.0)).weak(Combiner::Sum)];
        let mut a = state.instance_store("x", "a", &vars);
        let mut b = state.instance_store("x", "b", &vars);
        a.set(0, Value::Unit, Value::Float(1e20)).unwrap();
        a.set(0, Value::Unit, Value::Float(1.0)).unwrap();
        state.sync();
        assert_eq!(b.get(0, &Value::Unit).unwrap(), Some(Value::Float(1.0)));
        a.set(0, Value::Unit, Value::Float(f64::INFINITY)).unwrap();
        a.delete(0, &Value::Unit).unwrap();
        state.sync();
        assert_eq!(a.get(0, &Value::Unit).unwrap(), Some(Value::Float(0.0)));
        // Two writers: each one's change against the base, once.
        a.set(0, Value::Unit, Value::Float(1e20)).unwrap();
        a.set(0, Value::Unit, Value::Float(1.0)).unwrap();
        b.set(0, Value::Unit, Value::Float(2.0)).unwrap();
        state.sync();
        assert_eq!(a.get(0, &Value::Unit).unwrap(), Some(Value::Float(3.0)));
    }

    #[test]
    fn sum_of_floats() {
        let state = SharedState::new();
        let vars = [scalar("load", Value::Float(0.0)).weak(Combiner::Sum)];
        let mut a = state.instance_store("x", "a", &vars);
        let mut b = state.instance_store("x", "b", &vars);
        a.set(0, Value::Unit, Value::Float(0.5)).unwrap();
        b.set(0, Value::Unit, Value::Float(0.25)).unwrap();
        state.sync();
        assert_eq!(a.get(0, &Value::Unit).unwrap(), Some(Value::Float(0.75)));
    }

    /// NaN is not an extreme: a replica that stored one does not hold a max or min for good.
    #[test]
    fn max_and_min_of_floats_pass_over_nan() {
        let state = SharedState::new();
        let vars = [
            scalar("hi", Value::Float(0.0)).weak(Combiner::Max),
            scalar("lo", Value::Float(0.0)).weak(Combiner::Min),
        ];
        let mut a = state.instance_store("x", "a", &vars);
        let mut b = state.instance_store("x", "b", &vars);
        for var in [0, 1] {
            a.set(var, Value::Unit, Value::Float(f64::NAN)).unwrap();
            b.set(var, Value::Unit, Value::Float(2.0)).unwrap();
        }
        state.sync();
        assert_eq!(a.get(0, &Value::Unit).unwrap(), Some(Value::Float(2.0)));
        assert_eq!(a.get(1, &Value::Unit).unwrap(), Some(Value::Float(0.0)));
        // A NaN alone in the merge (the base and every replica) stays.
        let vars = [scalar("only", Value::Float(f64::NAN)).weak(Combiner::Max)];
        let mut c = state.instance_store("y", "c", &vars);
        state.sync();
        assert!(matches!(c.get(0, &Value::Unit).unwrap(), Some(Value::Float(x)) if x.is_nan()));
    }

    #[test]
    fn max_and_min_keep_the_extreme_and_ignore_deletes() {
        let state = SharedState::new();
        let vars = [weak_map("hi", Combiner::Max), weak_map("lo", Combiner::Min)];
        let mut a = state.instance_store("x", "a", &vars);
        let mut b = state.instance_store("x", "b", &vars);
        for (var, (va, vb)) in [(0, (3, 8)), (1, (3, 8))] {
            a.set(var, Value::str("k"), int(va)).unwrap();
            b.set(var, Value::str("k"), int(vb)).unwrap();
        }
        b.set(0, Value::str("only b"), int(-1)).unwrap();
        state.sync();
        assert_eq!(a.get(0, &Value::str("k")).unwrap(), Some(int(8)));
        assert_eq!(a.get(0, &Value::str("only b")).unwrap(), Some(int(-1)));
        assert_eq!(b.get(1, &Value::str("k")).unwrap(), Some(int(3)));

        // Lowering or deleting is local; the merge restores the maximum.
        a.set(0, Value::str("k"), int(1)).unwrap();
        b.delete(0, &Value::str("only b")).unwrap();
        assert_eq!(b.get(0, &Value::str("only b")).unwrap(), None);
        state.sync();
        assert_eq!(a.get(0, &Value::str("k")).unwrap(), Some(int(8)));
        assert_eq!(b.get(0, &Value::str("only b")).unwrap(), Some(int(-1)));
    }

    #[test]
    fn conflicting_declarations_in_one_scope_are_rejected() {
        let state = SharedState::new();
        let mut a = state.instance_store("x", "a", &[weak_map("m", Combiner::Sum)]);
        let mut b = state.instance_store("x", "b", &[weak_map("m", Combiner::Max)]);
        let mut c = state.instance_store("x", "c", &[map("m").strong()]);
        a.set(0, int(1), int(1)).unwrap();
        let err = b.get(0, &int(1)).unwrap_err();
        assert!(
            matches!(&err, StateError::SpecConflict { var, scope, .. } if var == "m" && scope == "x")
        );
        assert!(
            err.to_string().contains("weak consistency, Sum combiner"),
            "{err}"
        );
        assert!(c.len(0).is_err());
        // Another scope may declare the name however it likes.
        let mut d = state.instance_store("y", "a", &[map("m").strong()]);
        d.set(0, int(1), int(1)).unwrap();
    }

    #[test]
    fn instances_run_on_their_own_threads() {
        fn assert_send<T: Send>() {}
        assert_send::<InstanceStore>();
        let state = SharedState::new();
        let vars = [map("m").strong(), weak_map("w", Combiner::Sum)];
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let mut store = state.instance_store("x", &format!("i{t}"), &vars);
                std::thread::spawn(move || {
                    for i in 0..100 {
                        store.set(0, int(t * 100 + i), int(i)).unwrap();
                        store.set(1, int(0), int(i + 1)).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        state.sync();
        let mut reader = state.instance_store("x", "reader", &vars);
        assert_eq!(reader.len(0).unwrap(), 400);
        assert_eq!(reader.get(1, &int(0)).unwrap(), Some(int(400)));
    }

    // ----- convergence under random interleavings

    mod convergence {
        use proptest::prelude::*;

        use super::*;

        #[derive(Clone, Debug)]
        enum Op {
            Set {
                replica: usize,
                var: usize,
                key: i64,
                value: i64,
            },
            Delete {
                replica: usize,
                var: usize,
                key: i64,
            },
            Sync,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                6 => (0..3usize, 0..2usize, 0..4i64, -5..=5i64)
                    .prop_map(|(replica, var, key, value)| Op::Set { replica, var, key, value }),
                2 => (0..3usize, 0..2usize, 0..4i64)
                    .prop_map(|(replica, var, key)| Op::Delete { replica, var, key }),
                1 => Just(Op::Sync),
            ]
        }

        /// Var 0 is a map keyed by ints, var 1 a scalar (the op's key is ignored).
        fn key(var: usize, key: i64) -> Value {
            if var == 0 { int(key) } else { Value::Unit }
        }

        type View = BTreeMap<Value, Value>;

        fn view(s: &mut InstanceStore, var: usize) -> View {
            s.entries(var).unwrap().into_iter().collect()
        }

        fn as_i64(v: Option<&Value>) -> i64 {
            v.and_then(Value::as_int).unwrap_or(0)
        }

        /// Runs `ops` on three replicas and checks every sync (plus a final one) against what
        /// the combiner promises, from the replicas' states just before the sync.
        fn run(combiner: Combiner, ops: &[Op]) -> Result<(), TestCaseError> {
            let state = SharedState::new();
            let vars = [weak_map("m", combiner), scalar("s", int(0)).weak(combiner)];
            let mut stores: Vec<_> = ["r0", "r1", "r2"]
                .iter()
                .map(|i| state.instance_store("p", i, &vars))
                .collect();
            // Last-writer-wins must equal applying every write in program order.
            let mut sequential: [View; 2] = [View::new(), View::from([(Value::Unit, int(0))])];
            // Sums must equal the total of every change any replica made.
            let mut total_change: [BTreeMap<Value, i64>; 2] = Default::default();
            let mut base: [View; 2] = [View::new(), View::from([(Value::Unit, int(0))])];

            for op in ops.iter().chain([&Op::Sync]) {
                match *op {
                    Op::Set {
                        replica,
                        var,
                        key: k,
                        value,
                    } => {
                        let k = key(var, k);
                        let s = &mut stores[replica];
                        let current = as_i64(s.get(var, &k).unwrap().as_ref());
                        *total_change[var].entry(k.clone()).or_default() += value - current;
                        s.set(var, k.clone(), int(value)).unwrap();
                        sequential[var].insert(k, int(value));
                    }
                    Op::Delete {
                        replica,
                        var,
                        key: k,
                    } => {
                        let k = key(var, k);
                        let s = &mut stores[replica];
                        let current = s.get(var, &k).unwrap();
                        if combiner == Combiner::Sum && current.is_some() {
                            *total_change[var].entry(k.clone()).or_default() -=
                                as_i64(current.as_ref());
                        }
                        s.delete(var, &k).unwrap();
                        if var == 0 {
                            sequential[var].remove(&k);
                        } else {
                            sequential[var].insert(k, int(0));
                        }
                    }
                    Op::Sync => {
                        for var in 0..2 {
                            let before: Vec<View> =
                                stores.iter_mut().map(|s| view(s, var)).collect();
                            base[var] = match combiner {
                                // Last-writer-wins: the stronger claim, program order.
                                Combiner::Lww => sequential[var].clone(),
                                _ => expected_merge(combiner, &base[var], &before),
                            };
                        }
                        state.sync();
                        for (var, merged) in base.iter().enumerate() {
                            for s in &mut stores {
                                prop_assert_eq!(&view(s, var), merged);
                            }
                        }
                    }
                }
            }
            if combiner == Combiner::Sum {
                for var in 0..2 {
                    let merged: BTreeMap<Value, i64> = base[var]
                        .iter()
                        .map(|(k, v)| (k.clone(), as_i64(Some(v))))
                        .collect();
                    let mut expected = total_change[var].clone();
                    if var == 1 {
                        expected.entry(Value::Unit).or_default();
                    }
                    prop_assert_eq!(merged, expected);
                }
            }
            Ok(())
        }

        /// The merge `Sum`, `Max` and `Min` promise, from the last merged state and every
        /// replica's state before the sync.
        fn expected_merge(combiner: Combiner, base: &View, replicas: &[View]) -> View {
            let mut keys: Vec<&Value> = base.keys().collect();
            keys.extend(replicas.iter().flat_map(|r| r.keys()));
            keys.sort();
            keys.dedup();
            let mut out = View::new();
            for k in keys {
                let present = || replicas.iter().filter_map(|r| r.get(k)).chain(base.get(k));
                let merged = match combiner {
                    Combiner::Lww => unreachable!("checked against the sequential model"),
                    Combiner::Sum => {
                        let b = as_i64(base.get(k));
                        int(b + replicas.iter().map(|r| as_i64(r.get(k)) - b).sum::<i64>())
                    }
                    Combiner::Max => present().max().cloned().unwrap_or(Value::Unit),
                    Combiner::Min => present().min().cloned().unwrap_or(Value::Unit),
                };
                out.insert(k.clone(), merged);
            }
            out
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn lww_converges_to_the_latest_write(ops in prop::collection::vec(op(), 0..60)) {
                run(Combiner::Lww, &ops)?;
            }

            #[test]
            fn sum_converges_to_the_total_change(ops in prop::collection::vec(op(), 0..60)) {
                run(Combiner::Sum, &ops)?;
            }

            #[test]
            fn max_converges(ops in prop::collection::vec(op(), 0..60)) {
                run(Combiner::Max, &ops)?;
            }

            #[test]
            fn min_converges(ops in prop::collection::vec(op(), 0..60)) {
                run(Combiner::Min, &ops)?;
            }
        }
    }
}
