//! Symbolic terms for the equivalence checker: primitive symbols and opaque functions of
//! other terms (appnet-nsdi25.txt, Appendix B, Table 3), hash-consed so that two terms are
//! equal exactly when their ids are.
//!
//! Equality is syntactic: an opaque function applied to equal arguments gives equal values
//! (every function here is deterministic in its arguments), which is the whole soundness
//! argument of the checker. Terms never get simplified behind its back; the one algebraic
//! rule the checker uses (decrypt undoes encrypt) is applied where the term is built.
//!
//! The arena supports checkpoints, so a search can evaluate a candidate and drop the terms it
//! built without losing the reference chain's.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

pub type TermId = u32;

/// Request or response path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    Req,
    Resp,
}

impl Dir {
    pub fn name(self) -> &'static str {
        match self {
            Dir::Req => "request",
            Dir::Resp => "response",
        }
    }
}

/// Part of a message: one field or header (an interned key), everything else, or a
/// response's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Part {
    Key(u16),
    Base,
    Status,
}

/// What a term is. `e` is an element index, `v` a state variable of that element, `c` one of
/// its channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// The request as the client sent it: one key, and everything no key names.
    ReqIn(u16),
    ReqBase,
    /// The server's response (constant per RPC in a trace).
    RespIn(u16),
    RespBase,
    RespStatus,
    /// The instance key on the client side: the calling replica.
    Src,
    /// A state variable before the RPC; argument: the instance key when per instance.
    State0(u16, u16),
    /// One key read from a message: arguments are the message's base and any written keys
    /// that overlap it (a nested path and its parent).
    Proj(u16),
    /// A tuple (a whole message, a signature).
    Tuple,
    /// An ordered list built one element at a time: (list so far, element).
    Cons,
    /// The empty list.
    Nil,
    /// Element `e` writes part of the message in direction `Dir`; arguments: what the write
    /// depends on, then the old value.
    Write(u16, Dir, Part),
    /// Element `e` writes state `v`; arguments: dependencies, old value, arrival.
    StateW(u16, Dir, u16),
    /// The decision (and the answer) of element `e` stopping a request: arguments are all it
    /// reads.
    Stop(u16),
    /// Element `e` turning a response into an error.
    RespStop(u16),
    /// After element `e` (which may stop requests): the stop's answer if it stopped, else
    /// the inner value. Arguments: the stop term, the inner value.
    Sel(u16, Part),
    /// After element `e`'s response handler may have turned the response into an error.
    RespStopApply(u16, Part),
    /// Records element `e` writes to channel `c`; arguments: reads, arrival.
    Chan(u16, Dir, u16),
    /// What element `e` keeps from a request for its response (`set_metadata`).
    Meta(u16),
    /// An instance starting and running `init` again on state `v`: old, instance key, arrival.
    Create(u16, u16),
    /// Channel records from `init` when an instance starts.
    CreateRec(u16),
    /// The reordering decision of element `e`.
    Reorder(u16),
    /// State `v` of element `e` when its response handler runs: after the request (same
    /// event), or whatever other RPCs left it (a later event). Arguments: post-request state,
    /// the drops of the request.
    RespPre(u16, u16),
    /// The time the response is processed: arguments, the drops of the request.
    RespTime,
    /// Where the request was routed, as `dst()` gives it in a response handler.
    Routed,
    /// Output labels in signatures.
    Label(u16),
}

#[derive(Clone, Copy, Debug)]
struct Node {
    op: Op,
    /// Arguments: `args[start..start + len]` of the arena.
    start: u32,
    len: u32,
    /// The next node with the same hash (`NIL` ends the chain).
    next: TermId,
}

const NIL: TermId = TermId::MAX;

/// FxHash (rustc's): terms are small integers, so a fast non-cryptographic hash is right.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        for b in chunks.remainder() {
            self.add(u64::from(*b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl FxHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

pub type FxBuild = BuildHasherDefault<FxHasher>;
pub type FxMap<K, V> = HashMap<K, V, FxBuild>;

/// The hash-consing arena. Arguments live in one vector and nodes with equal hashes are
/// chained through the nodes themselves, so building a term allocates nothing in the common
/// case and finding an existing one never does (the planner's searches build millions).
#[derive(Default)]
pub struct Terms {
    nodes: Vec<Node>,
    args: Vec<TermId>,
    /// Hash of (op, args) -> the newest node with that hash.
    index: FxMap<u64, TermId>,
}

fn hash_node(op: &Op, args: &[TermId]) -> u64 {
    use std::hash::Hash;
    let mut h = FxHasher::default();
    op.hash(&mut h);
    args.hash(&mut h);
    h.finish()
}

impl Terms {
    pub fn new() -> Terms {
        Terms::default()
    }

    /// The term `op(args)`, shared with any equal term built before.
    pub fn mk(&mut self, op: Op, args: &[TermId]) -> TermId {
        let h = hash_node(&op, args);
        let head = self.index.get(&h).copied().unwrap_or(NIL);
        let mut at = head;
        while at != NIL {
            let n = self.nodes[at as usize];
            if n.op == op && self.args[n.start as usize..(n.start + n.len) as usize] == *args {
                return at;
            }
            at = n.next;
        }
        let id = self.nodes.len() as TermId;
        self.nodes.push(Node {
            op,
            start: self.args.len() as u32,
            len: args.len() as u32,
            next: head,
        });
        self.args.extend_from_slice(args);
        self.index.insert(h, id);
        id
    }

    pub fn leaf(&mut self, op: Op) -> TermId {
        self.mk(op, &[])
    }

    pub fn tuple(&mut self, args: &[TermId]) -> TermId {
        self.mk(Op::Tuple, args)
    }

    pub fn op(&self, t: TermId) -> Op {
        self.nodes[t as usize].op
    }

    pub fn args(&self, t: TermId) -> &[TermId] {
        let n = self.nodes[t as usize];
        &self.args[n.start as usize..(n.start + n.len) as usize]
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// A mark to [`Terms::rollback`] to.
    pub fn checkpoint(&self) -> usize {
        self.nodes.len()
    }

    /// Forgets every term built since `mark`; their ids must not be used again.
    pub fn rollback(&mut self, mark: usize) {
        while self.nodes.len() > mark {
            let id = (self.nodes.len() - 1) as TermId;
            let Some(node) = self.nodes.pop() else { break };
            let h = hash_node(&node.op, &self.args[node.start as usize..]);
            // The newest node of a chain is its head; unlink it.
            if self.index.get(&h) == Some(&id) {
                if node.next == NIL {
                    self.index.remove(&h);
                } else {
                    self.index.insert(h, node.next);
                }
            }
            self.args.truncate(node.start as usize);
        }
    }

    /// Whether `needle` occurs in `t` (for explanations).
    pub fn contains(&self, t: TermId, needle: TermId) -> bool {
        let mut stack = vec![t];
        let mut seen = std::collections::HashSet::new();
        while let Some(x) = stack.pop() {
            if x == needle {
                return true;
            }
            if seen.insert(x) {
                stack.extend_from_slice(self.args(x));
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_structure_gives_equal_ids_and_rollback_forgets() {
        let mut t = Terms::new();
        let a = t.leaf(Op::ReqIn(0));
        let b = t.leaf(Op::ReqIn(1));
        let f1 = t.mk(Op::Write(0, Dir::Req, Part::Key(1)), &[a, b]);
        let f2 = t.mk(Op::Write(0, Dir::Req, Part::Key(1)), &[a, b]);
        assert_eq!(f1, f2);
        let g = t.mk(Op::Write(0, Dir::Req, Part::Key(1)), &[b, a]);
        assert_ne!(f1, g, "argument order matters");
        let mark = t.checkpoint();
        let h = t.mk(Op::Stop(3), &[f1]);
        assert!(t.contains(h, a));
        t.rollback(mark);
        assert_eq!(t.len(), mark);
        let h2 = t.mk(Op::Stop(4), &[f1]);
        assert_eq!(h2 as usize, mark, "ids are reused after a rollback");
        assert_eq!(t.mk(Op::Write(0, Dir::Req, Part::Key(1)), &[a, b]), f1);
    }
}
