//! The handles the C ABI gives callers for RPCs waiting for their response.
//!
//! A handle is a slot's index, its shard and the slot's generation. Taking the slot's value
//! frees the slot, and a new generation begins, so a stale handle (already answered or
//! abandoned) finds nothing. It is never someone else's RPC: the generation would have to
//! wrap around, after 2^26 reuses of the same slot while the stale handle was kept. Each
//! table starts its slots at a generation of its own, so a handle from another runtime
//! almost always finds nothing too (the hash map before did not tell them apart at all).
//!
//! Each thread inserts into its own shard (picked once per thread), so RPCs on different
//! threads seldom meet on one lock or one cache line. The response may come on another
//! thread; it takes from the shard the handle names. Until 2026-11-23 this was a hash map
//! per shard keyed by a global counter. That cost a hash, a probe, periodic rehashing of the
//! map's deleted entries, and a counter every thread wrote (docs/benchmarks.md, "Handles
//! from a slab").

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

const SHARDS: usize = 64;
const INDEX_BITS: u32 = 32;
const SHARD_BITS: u32 = 6;
const GENERATION_BITS: u32 = 64 - INDEX_BITS - SHARD_BITS;
const GENERATION_MASK: u32 = (1 << GENERATION_BITS) - 1;

pub(crate) struct HandleTable<T> {
    shards: Vec<Mutex<Slab<T>>>,
    /// The generation this table's new slots start at.
    first_generation: u32,
}

struct Slab<T> {
    slots: Vec<Slot<T>>,
    /// Indices of empty slots, reused last-freed first (the one most likely in cache).
    free: Vec<u32>,
    live: usize,
}

struct Slot<T> {
    /// 1 ..= GENERATION_MASK, so no handle is 0 (the ABI's "no RPC").
    generation: u32,
    value: Option<T>,
}

thread_local! {
    /// This thread's shard, picked round-robin the first time it inserts.
    static SHARD: Cell<Option<usize>> = const { Cell::new(None) };
}

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// Tables made so far in this process, to spread their first generations apart.
static TABLES: AtomicUsize = AtomicUsize::new(0);

fn this_threads_shard() -> usize {
    SHARD.with(|s| match s.get() {
        Some(shard) => shard,
        None => {
            let shard = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
            s.set(Some(shard));
            shard
        }
    })
}

impl<T> HandleTable<T> {
    pub(crate) fn new() -> Self {
        HandleTable {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Slab {
                        slots: Vec::new(),
                        free: Vec::new(),
                        live: 0,
                    })
                })
                .collect(),
            // Consecutive tables far apart in the generation space (a golden-ratio step).
            first_generation: match (TABLES.fetch_add(1, Ordering::Relaxed) as u32)
                .wrapping_mul(0x9e37_79b9)
                & GENERATION_MASK
            {
                0 => 1,
                g => g,
            },
        }
    }

    fn shard(&self, shard: usize) -> MutexGuard<'_, Slab<T>> {
        // A panic under the lock was caught at the call boundary; a slab's fields are each
        // left consistent between statements that can panic (none of them can).
        self.shards[shard % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `value` and returns its handle (never 0).
    pub(crate) fn insert(&self, value: T) -> u64 {
        let shard = this_threads_shard();
        let mut slab = self.shard(shard);
        let first_generation = self.first_generation;
        let index = match slab.free.pop() {
            Some(i) => i,
            None => {
                slab.slots.push(Slot {
                    generation: first_generation,
                    value: None,
                });
                // More than 2^32 RPCs waiting in one shard would exhaust memory long before.
                (slab.slots.len() - 1) as u32
            }
        };
        let slot = &mut slab.slots[index as usize];
        slot.value = Some(value);
        let generation = slot.generation;
        slab.live += 1;
        (u64::from(generation) << (INDEX_BITS + SHARD_BITS))
            | ((shard as u64) << INDEX_BITS)
            | u64::from(index)
    }

    /// The value `handle` names, taken out; `None` when no value has that handle (any more).
    pub(crate) fn take(&self, handle: u64) -> Option<T> {
        let index = handle as u32 as usize;
        let shard = ((handle >> INDEX_BITS) as usize) & (SHARDS - 1);
        let generation = (handle >> (INDEX_BITS + SHARD_BITS)) as u32;
        let mut slab = self.shard(shard);
        let slot = slab
            .slots
            .get_mut(index)
            .filter(|s| s.generation == generation)?;
        let value = slot.value.take()?;
        slot.generation = match slot.generation & GENERATION_MASK {
            GENERATION_MASK => 1,
            g => g + 1,
        };
        slab.free.push(index as u32);
        slab.live -= 1;
        Some(value)
    }

    /// Values not yet taken. Shard by shard, so not one instant's count while calls run;
    /// exact when none does.
    pub(crate) fn len(&self) -> usize {
        (0..SHARDS).map(|i| self.shard(i).live).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_takes_its_value_once() {
        let t = HandleTable::new();
        let (a, b) = (t.insert("a"), t.insert("b"));
        assert_ne!(a, 0);
        assert_ne!(a, b);
        assert_eq!(t.len(), 2);
        assert_eq!(t.take(b), Some("b"));
        assert_eq!(t.take(b), None, "already taken");
        assert_eq!(t.take(a), Some("a"));
        assert_eq!(t.len(), 0);
        assert_eq!(t.take(0), None);
        assert_eq!(t.take(u64::MAX), None);
    }

    #[test]
    fn a_stale_handle_does_not_take_the_value_that_reused_its_slot() {
        let t = HandleTable::new();
        let old = t.insert(1);
        assert_eq!(t.take(old), Some(1));
        let new = t.insert(2);
        // The same slot, a new generation.
        assert_eq!(new as u32, old as u32);
        assert_ne!(new, old);
        assert_eq!(t.take(old), None);
        assert_eq!(t.take(new), Some(2));
    }

    #[test]
    fn generations_wrap_without_ever_making_handle_zero() {
        let t = HandleTable::new();
        let first = t.insert(0);
        t.take(first);
        // The slot as it is after 2^26 - 2 more RPCs.
        let shard = ((first >> INDEX_BITS) as usize) & (SHARDS - 1);
        t.shard(shard).slots[first as u32 as usize].generation = GENERATION_MASK;
        let last = t.insert(1);
        assert_eq!(
            last >> (INDEX_BITS + SHARD_BITS),
            u64::from(GENERATION_MASK)
        );
        assert_eq!(t.take(last), Some(1));
        let wrapped = t.insert(2);
        assert_eq!(
            wrapped >> (INDEX_BITS + SHARD_BITS),
            1,
            "the generation wrapped to 1, not 0"
        );
        assert_eq!(wrapped as u32, first as u32, "the same slot");
        assert_eq!(t.take(last), None);
        assert_eq!(t.take(wrapped), Some(2));
    }

    #[test]
    fn a_handle_from_another_table_finds_nothing() {
        let (a, b) = (HandleTable::new(), HandleTable::new());
        let from_a = a.insert("a");
        let from_b = b.insert("b");
        assert_eq!(
            from_a as u32, from_b as u32,
            "the same slot of the same shard"
        );
        assert_eq!(b.take(from_a), None);
        assert_eq!(a.take(from_b), None);
        assert_eq!((a.take(from_a), b.take(from_b)), (Some("a"), Some("b")));
    }

    #[test]
    fn values_inserted_on_one_thread_are_taken_on_others() {
        let t = std::sync::Arc::new(HandleTable::new());
        let handles: Vec<u64> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4u64)
                .map(|k| {
                    let t = &t;
                    s.spawn(move || {
                        (0..100u64)
                            .map(|i| t.insert(k * 1000 + i))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        assert_eq!(t.len(), 400);
        let mut taken: Vec<u64> = std::thread::scope(|s| {
            let t = &t;
            let (front, back) = handles.split_at(200);
            let a = s.spawn(move || front.iter().filter_map(|h| t.take(*h)).collect::<Vec<_>>());
            let b = s.spawn(move || back.iter().filter_map(|h| t.take(*h)).collect::<Vec<_>>());
            [a.join().unwrap(), b.join().unwrap()].concat()
        });
        taken.sort_unstable();
        let want: Vec<u64> = (0..4u64)
            .flat_map(|k| (0..100).map(move |i| k * 1000 + i))
            .collect();
        assert_eq!(taken, want);
        assert_eq!(t.len(), 0);
    }
}
