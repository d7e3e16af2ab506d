//! Running compiled segments: the simulator's [`Executor`] for the JIT, and the call
//! wrappers that set up a frame, enter the code and read the verdict back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use weft_hostcalls::abi::{BlockStore, BlockVar, RpcCtx, verdict};
use weft_hostcalls::state::StateStore;
use weft_hostcalls::{Code, Message, Value};
use weft_ir::eval::RuntimeError;
use weft_ir::interp::{Host, Instance, RpcInfo, RpcScratch, Verdict};
use weft_ir::ir::{Element, Handler};
use weft_ir::sim::{Executor, Interp, SegmentRequest};

use crate::compile::{Compiled, Fusion, Part, compile};
use crate::host::{Extraction, Frame, Iterations, Sweep, UNIT};
use crate::lower::{block_vars, code_of};

/// Buffers reused from call to call, so a call allocates only what its values need.
#[derive(Default)]
pub struct Buffers {
    arena: Vec<Value>,
    /// Per element of the segment: its state block (null when its code needs none, or when
    /// its store has none). Valid only while the instances they came from stay borrowed:
    /// filled at the start of a call and cleared at its end.
    blocks: Vec<*mut u64>,
    extracted: Extraction,
    sweep: Sweep,
}

/// Wraps a new instance's store so the element's local scalars live in a block compiled code
/// addresses directly.
pub fn block_store(ir: &Element, store: Box<dyn StateStore + Send>) -> Box<dyn StateStore + Send> {
    let vars: Vec<Option<BlockVar>> = block_vars(ir)
        .into_iter()
        .zip(&ir.state)
        .map(|(k, v)| {
            k.map(|kind| BlockVar {
                name: v.name.clone(),
                kind,
                zero: v.value_type().zero_value(),
            })
        })
        .collect();
    if vars.iter().all(Option::is_none) {
        return store;
    }
    Box::new(BlockStore::new(store, vars))
}

/// An empty vector of references with another lifetime, in `v`'s allocation, so the list of
/// instances a call takes can be rebuilt per call without allocating: `collect` from a
/// `vec::IntoIter` reuses the buffer when the element layout is the same, and the vector is
/// emptied first, so no reference outlives its borrow.
pub fn emptied<'b, T>(mut v: Vec<&mut T>) -> Vec<&'b mut T> {
    v.clear();
    // `filter` would keep the old lifetime; producing the new type is the point.
    #[allow(clippy::unnecessary_filter_map)]
    v.into_iter().filter_map(|_| None).collect()
}

/// A request verdict with messages shared, as compiled code leaves them.
#[derive(Clone, Debug)]
pub enum SharedVerdict {
    Forward(Arc<Message>),
    Reply(Arc<Message>),
    Reject { code: Code, message: String },
}

/// [`SegmentRequest`] with shared messages.
#[derive(Clone, Debug)]
pub struct SharedRequest {
    pub decided: usize,
    pub verdict: SharedVerdict,
    pub routed: Option<String>,
}

impl SharedRequest {
    /// What travels back up a segment of `n` elements after this request outcome, as
    /// `(start, message)`: the response handlers of elements `start - 1` down to 0 run on
    /// `message`, which is the server's response (`respond`) when the request passed all
    /// `n`, else the early answer of the element that decided.
    // Inlined: out of line, the pair came back through memory.
    #[inline(always)]
    fn answer(&self, n: usize, respond: impl FnOnce() -> Arc<Message>) -> (usize, Arc<Message>) {
        match &self.verdict {
            SharedVerdict::Forward(_) => (n, respond()),
            SharedVerdict::Reply(m) => (self.decided, Arc::clone(m)),
            SharedVerdict::Reject { code, message } => (
                self.decided,
                Arc::new(Message::error(*code, message.clone())),
            ),
        }
    }

    pub(crate) fn unshared(self) -> SegmentRequest {
        SegmentRequest {
            decided: self.decided,
            routed: self.routed,
            verdict: match self.verdict {
                SharedVerdict::Forward(m) => Verdict::Forward(Arc::unwrap_or_clone(m)),
                SharedVerdict::Reply(m) => Verdict::Reply(Arc::unwrap_or_clone(m)),
                SharedVerdict::Reject { code, message } => Verdict::Reject { code, message },
            },
        }
    }
}

impl Buffers {
    /// How many values the calls so far held at once, at most (the arena keeps its
    /// capacity): loops reclaim their iterations' values, so this stays near the number
    /// of values a handler keeps, not the number it makes.
    pub fn arena_capacity(&self) -> usize {
        self.arena.capacity()
    }
}

impl Compiled {
    /// Runs the segment's request handlers (as [`Executor::request`]).
    pub fn request(
        &self,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        scratch: &mut RpcScratch,
    ) -> SegmentRequest {
        self.request_shared(bufs, instances, Arc::new(msg), rpc, host, scratch)
            .unshared()
    }

    /// Runs the segment's request handlers on a shared message; the verdict's message is
    /// shared too (a channel record may hold it), so nothing is copied.
    pub fn request_shared(
        &self,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        msg: Arc<Message>,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        scratch: &mut RpcScratch,
    ) -> SharedRequest {
        host.start_pass();
        self.collect_blocks(instances, &mut bufs.blocks);
        let slots = scratch.slots(self.scratch_len());
        let out = self.request_parts(bufs, instances, msg, rpc, host, slots);
        bufs.blocks.clear();
        out
    }

    /// One whole RPC, as a process that holds the instances from the request to its response
    /// (the benchmark rig) runs it: the request down the segment; then, if it was forwarded,
    /// the response `respond` gives, or else the early answer, back up from the element that
    /// answered. The state blocks are collected once for both directions. The response
    /// handlers see the routing the request decided (`rpc.routed` becomes the outcome's
    /// `routed`, as the simulator does between the directions). Returns the request's
    /// outcome and the response that leaves the segment (`None` when the first element
    /// answered, so no response handler ran).
    #[allow(clippy::too_many_arguments)]
    pub fn round_trip(
        &self,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        msg: Arc<Message>,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        scratch: &mut RpcScratch,
        respond: impl FnOnce() -> Arc<Message>,
    ) -> (SharedRequest, Option<Arc<Message>>) {
        host.start_pass();
        self.collect_blocks(instances, &mut bufs.blocks);
        let slots = scratch.slots(self.scratch_len());
        if let [part] = self.parts.as_slice()
            && self.has_blocks(part, &bufs.blocks)
        {
            // SAFETY: the only part, and `has_blocks` held for it just above.
            #[allow(unsafe_code)]
            let out = unsafe {
                self.round_trip_fused(part, bufs, instances, msg, rpc, host, slots, respond)
            };
            bufs.blocks.clear();
            return out;
        }
        let out = self.request_parts(bufs, instances, msg, rpc, host, slots);
        let (start, resp) = out.answer(self.elements.len(), respond);
        let rpc = routed(rpc, &out);
        let back = (start > 0).then(|| {
            host.start_pass();
            self.response_parts(bufs, instances, start - 1, resp, &rpc, host, slots)
        });
        bufs.blocks.clear();
        (out, back)
    }

    fn request_parts(
        &self,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        mut msg: Arc<Message>,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        slots: &mut [Option<Value>],
    ) -> SharedRequest {
        let mut last = None;
        for part in &self.parts {
            let r = part.range.clone();
            let insts = &mut instances[r.clone()];
            let out = self.run_request(part, bufs, insts, msg, rpc, host, slots);
            match out.verdict {
                SharedVerdict::Forward(m) => {
                    msg = m;
                    last = Some(out.routed);
                }
                verdict => {
                    return SharedRequest {
                        decided: r.start + out.decided,
                        verdict,
                        routed: out.routed,
                    };
                }
            }
        }
        SharedRequest {
            decided: self.elements.len(),
            routed: last.flatten(),
            verdict: SharedVerdict::Forward(msg),
        }
    }

    /// Runs the response handlers of elements `start..=0` (as [`Executor::response`]).
    #[allow(clippy::too_many_arguments)]
    pub fn response(
        &self,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        start: usize,
        msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        scratch: &mut RpcScratch,
    ) -> Message {
        let msg = Arc::new(msg);
        Arc::unwrap_or_clone(self.response_shared(bufs, instances, start, msg, rpc, host, scratch))
    }

    /// [`Compiled::response`] on a shared message.
    #[allow(clippy::too_many_arguments)]
    pub fn response_shared(
        &self,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        start: usize,
        msg: Arc<Message>,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        scratch: &mut RpcScratch,
    ) -> Arc<Message> {
        host.start_pass();
        self.collect_blocks(instances, &mut bufs.blocks);
        let slots = scratch.slots(self.scratch_len());
        let out = self.response_parts(bufs, instances, start, msg, rpc, host, slots);
        bufs.blocks.clear();
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn response_parts(
        &self,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        start: usize,
        mut msg: Arc<Message>,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        slots: &mut [Option<Value>],
    ) -> Arc<Message> {
        for part in self.parts.iter().rev() {
            let r = part.range.clone();
            if r.start > start {
                continue;
            }
            let local_start = start.min(r.end - 1) - r.start;
            let insts = &mut instances[r];
            msg = self.run_response(part, bufs, insts, local_start, msg, rpc, host, slots);
        }
        msg
    }

    /// How many keys the segment's elements keep in an RPC's scratch.
    fn scratch_len(&self) -> usize {
        self.scratch_at.last().copied().unwrap_or(0)
    }

    #[allow(clippy::too_many_arguments)]
    // Inlined, the frame is built where the caller keeps it rather than copied there.
    #[inline(always)]
    fn frame<'a, 'i, 'h>(
        &'a self,
        part: &Part,
        bufs: &'a mut Buffers,
        instances: &'a mut [&'i mut Instance],
        handler: Handler,
        msg: Arc<Message>,
        rpc: &'a RpcInfo,
        host: &'a mut Host<'h>,
        slots: &'a mut [Option<Value>],
    ) -> Frame<'a, 'i, 'h> {
        first_value(&mut bufs.arena, msg);
        bufs.extracted.msg = UNIT;
        let blocks = bufs.blocks.get(part.range.start..).unwrap_or_default();
        Frame {
            ctx: RpcCtx {
                blocks: blocks.as_ptr(),
                ..RpcCtx::default()
            },
            arena: &mut bufs.arena,
            tables: &self.tables,
            elements: &self.elements[part.range.clone()],
            instances,
            scratch: slots,
            scratch_at: self.scratch_at.get(part.range.start..).unwrap_or_default(),
            rpc,
            handler,
            records: host.channels.enabled(),
            host,
            error: None,
            reject: String::new(),
            extracted: &mut bufs.extracted,
            iterations: Iterations::default(),
            sweep: &mut bufs.sweep,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_request(
        &self,
        part: &Part,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        msg: Arc<Message>,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        slots: &mut [Option<Value>],
    ) -> SharedRequest {
        if !self.has_blocks(part, &bufs.blocks) {
            // An instance whose store has no state block (made by another executor): the
            // interpreter runs it, reading the same store.
            let els = &self.elements[part.range.clone()];
            let msg = Arc::unwrap_or_clone(msg);
            let keys = self.part_slots(part, slots);
            let out = Interp.request_in(els, instances, msg, rpc, host, keys);
            return SharedRequest {
                decided: out.decided,
                routed: out.routed,
                verdict: match out.verdict {
                    Verdict::Forward(m) => SharedVerdict::Forward(Arc::new(m)),
                    Verdict::Reply(m) => SharedVerdict::Reply(Arc::new(m)),
                    Verdict::Reject { code, message } => SharedVerdict::Reject { code, message },
                },
            };
        }
        let mut frame = self.frame(part, bufs, instances, Handler::Req, msg, rpc, host, slots);
        // SAFETY: `has_blocks` held just above, and `frame` is the one built for `part`.
        #[allow(unsafe_code)]
        let out = unsafe { self.call_request(part, &mut frame) };
        spent(frame.arena);
        out
    }

    /// Runs the segment's request function in `frame` and reads its outcome. The context
    /// is read where compiled code wrote it, field by field: copying it out whole loads 16
    /// bytes at a time over its 4-byte stores, which the CPU cannot forward (a stall of a
    /// dozen cycles per load, visible in `perf annotate`).
    ///
    /// # Safety
    /// `frame` is the one [`Compiled::frame`] built for `part` of `self`, and
    /// [`Compiled::has_blocks`] held for `part` on the blocks it was built from.
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn call_request(&self, part: &Part, frame: &mut Frame<'_, '_, '_>) -> SharedRequest {
        // SAFETY: `part.req` was finalised in `self`'s module, alive while `self` is
        // borrowed; the caller guarantees every state block the code addresses is there
        // with the layout it was compiled for. Everything else the code reaches goes
        // through host functions, which check what they read.
        unsafe { (part.req)(frame) };
        // The error and the rejection text are taken only on the paths that use them:
        // `take` copies the whole `Option<RuntimeError>` with 16-byte loads, over the 8-byte
        // store that set it to `None` as the frame was built, a store-forwarding stall on
        // every call (42 % of `round_trip`'s samples on a chain of one `count` element).
        self.request_outcome(
            part,
            &frame.ctx,
            &mut frame.error,
            &mut frame.reject,
            frame.arena,
            frame.instances,
        )
    }

    /// What a request function left in its frame, as the segment's outcome; counts a failure
    /// against the deciding element.
    /// Inlined so the outcome is built where the caller returns it: built behind a call and
    /// copied back, its narrow stores were reread with wide loads, which stall.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn request_outcome(
        &self,
        part: &Part,
        ctx: &RpcCtx,
        error: &mut Option<RuntimeError>,
        reject: &mut String,
        arena: &mut [Value],
        instances: &mut [&mut Instance],
    ) -> SharedRequest {
        let n = part.range.len();
        let decided = (ctx.decided as usize).min(n);
        let routed = dst_of(arena, ctx.entry_msg);
        // An `Option` of one pointer stays in a register; a `Result` here went through the
        // stack and stalled the load that read it back. The forwarded request, the common
        // case, returns on a path of its own: matched as a pair with the other verdicts, the
        // verdict went through the stack with a 4-byte store and came back as part of an
        // 8-byte load, which stalled (15 % of `round_trip`'s samples on a chain of one
        // `count` element).
        if ctx.verdict == verdict::FORWARD
            && let Some(m) = msg_at(arena, ctx.msg)
        {
            return SharedRequest {
                decided: n,
                verdict: SharedVerdict::Forward(m),
                routed,
            };
        }
        // Taken again here only when it was not above: `msg_at` leaves the arena unchanged
        // when it finds no message.
        let taken = msg_at(arena, ctx.msg);
        let verdict = match (ctx.verdict, taken) {
            (verdict::REPLY, Some(m)) => SharedVerdict::Reply(m),
            (verdict::REJECT, _) => SharedVerdict::Reject {
                code: code_of(ctx.code),
                message: std::mem::take(reject),
            },
            (_, taken) => {
                let error = error.take();
                self.failure(part, decided, error, taken.is_some(), arena, ctx, instances)
            }
        };
        SharedRequest {
            decided,
            verdict,
            routed,
        }
    }

    /// The rejection for a request function that failed (a run-time error, or a verdict
    /// without a message to send), counted against the element that was deciding.
    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn failure(
        &self,
        part: &Part,
        decided: usize,
        error: Option<RuntimeError>,
        took_msg: bool,
        arena: &[Value],
        ctx: &RpcCtx,
        instances: &mut [&mut Instance],
    ) -> SharedVerdict {
        let err = match (error, took_msg) {
            (Some(e), _) => e,
            (None, false) => not_a_msg(arena, ctx.msg),
            (None, true) => RuntimeError::Type("unknown verdict".into()),
        };
        if let Some(inst) = instances.get_mut(decided) {
            inst.count_error(&err);
        }
        let els = &self.elements[part.range.clone()];
        let name = els.get(decided).map(|e| e.name.as_str()).unwrap_or("");
        SharedVerdict::Reject {
            code: err.code(),
            message: format!("{name}: {err}"),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_response(
        &self,
        part: &Part,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        start: usize,
        msg: Arc<Message>,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        slots: &mut [Option<Value>],
    ) -> Arc<Message> {
        if !self.has_blocks(part, &bufs.blocks) {
            let els = &self.elements[part.range.clone()];
            let msg = Arc::unwrap_or_clone(msg);
            let keys = self.part_slots(part, slots);
            let m = Interp.response_in(els, instances, start, msg, rpc, host, keys);
            return Arc::new(m);
        }
        let mut frame = self.frame(part, bufs, instances, Handler::Resp, msg, rpc, host, slots);
        frame.ctx.start = start as u32;
        // SAFETY: as in `call_request`: the module lives with `self`, `has_blocks` held
        // above, and `frame` was built for `part`.
        #[allow(unsafe_code)]
        unsafe {
            (part.resp)(&mut frame)
        };
        let out = response_outcome(frame.arena, &frame.ctx);
        spent(frame.arena);
        out
    }
}

/// The `RpcInfo` the response handlers of a round trip see: routed where the request went.
fn routed<'r>(rpc: &'r RpcInfo, out: &SharedRequest) -> std::borrow::Cow<'r, RpcInfo> {
    if out.routed == rpc.routed {
        std::borrow::Cow::Borrowed(rpc)
    } else {
        std::borrow::Cow::Owned(RpcInfo {
            routed: out.routed.clone(),
            ..rpc.clone()
        })
    }
}

/// The response a response function left in its frame.
fn response_outcome(arena: &mut [Value], ctx: &RpcCtx) -> Arc<Message> {
    take_msg(arena, ctx.msg).unwrap_or_else(|e| {
        Arc::new(Message::error(
            Code::Internal,
            format!("response handler: {e}"),
        ))
    })
}

impl Compiled {
    /// [`Compiled::round_trip`] of a segment compiled as one part (fused): one frame serves
    /// the request and the response, so the arena, the extraction buffer and the context are
    /// set up once per RPC.
    ///
    /// # Safety
    /// `part` is `self`'s only part, and [`Compiled::has_blocks`] held for it on `bufs`.
    #[allow(clippy::too_many_arguments, unsafe_code)]
    unsafe fn round_trip_fused(
        &self,
        part: &Part,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        msg: Arc<Message>,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        slots: &mut [Option<Value>],
        respond: impl FnOnce() -> Arc<Message>,
    ) -> (SharedRequest, Option<Arc<Message>>) {
        let n = part.range.len();
        // Each result is assigned once where it stays, not returned from the frame's block
        // as a tuple: that moved the outcome (64 bytes, just written field by field) twice
        // more with 16-byte loads, which stall on the narrower stores.
        let out;
        let mut back = None;
        let mut rerouted_answer = None;
        // The frame lives in this block and is dropped where it is: `drop(frame)` moved all
        // of it first (a 240-byte copy per call).
        {
            let mut frame = self.frame(
                part,
                bufs,
                instances,
                Handler::Req,
                msg,
                rpc,
                host,
                &mut *slots,
            );
            // SAFETY: the caller checked `has_blocks` for this part; `frame` is its.
            #[allow(unsafe_code)]
            {
                out = unsafe { self.call_request(part, &mut frame) };
            }
            let (start, resp) = out.answer(n, respond);
            // A request that changed the routing needs another `RpcInfo` for the response,
            // which this frame cannot point at: that (rare) response gets a frame of its own
            // below. The answer is moved, never cloned: each reference count change is a
            // locked instruction, which waits for the CPU's store buffer to drain.
            match start {
                0 => {}
                _ if out.routed != rpc.routed => rerouted_answer = Some((start, resp)),
                _ => {
                    // The same frame, reset as `frame` would build it for the response.
                    first_value(frame.arena, resp);
                    frame.ctx = RpcCtx {
                        blocks: frame.ctx.blocks,
                        start: (start - 1).min(n - 1) as u32,
                        ..RpcCtx::default()
                    };
                    frame.handler = Handler::Resp;
                    frame.host.start_pass();
                    frame.error = None;
                    frame.iterations = Iterations::default();
                    frame.extracted.msg = UNIT;
                    // SAFETY: the request's frame, reset for the response: same part,
                    // same blocks, which the caller checked.
                    #[allow(unsafe_code)]
                    unsafe {
                        (part.resp)(&mut frame)
                    };
                    back = Some(response_outcome(frame.arena, &frame.ctx));
                }
            }
            spent(frame.arena);
        }
        if let Some((start, resp)) = rerouted_answer {
            let rpc = routed(rpc, &out);
            host.start_pass();
            let back = self.response_parts(bufs, instances, start - 1, resp, &rpc, host, slots);
            return (out, Some(back));
        }
        (out, back)
    }

    /// The keys of `part`'s elements in the segment's scratch `slots`.
    fn part_slots<'s>(
        &self,
        part: &Part,
        slots: &'s mut [Option<Value>],
    ) -> &'s mut [Option<Value>] {
        let at = |k: usize| self.scratch_at.get(k).copied().unwrap_or(0);
        slots
            .get_mut(at(part.range.start)..at(part.range.end))
            .unwrap_or_default()
    }

    /// Collects the state block of every element whose code needs one (null otherwise, and
    /// for an instance whose store has none, or one of another layout: it was made by
    /// another executor, or for another element). Only the elements with a block are
    /// visited: a loop over all of them, branching on whether each has one, took a third
    /// of `round_trip`'s own `perf` samples on the benchmark chain (two elements with
    /// blocks out of five); visiting two took fewer (docs/benchmarks.md, "Records written
    /// in place").
    #[inline(always)]
    fn collect_blocks(&self, instances: &mut [&mut Instance], out: &mut Vec<*mut u64>) {
        out.clear();
        out.resize(self.blocks.len().min(instances.len()), std::ptr::null_mut());
        for (k, layout) in &self.with_blocks {
            let (Some(i), Some(slot)) = (instances.get_mut(*k), out.get_mut(*k)) else {
                continue;
            };
            // `AtomicU64` has the layout of `u64`, and writes through a shared `AtomicU64`
            // are allowed; compiled code dereferences the pointer only during this call,
            // and the instance, borrowed for all of it, holds the block alive whatever the
            // store does in the host calls (`Instance::scalar_block`).
            if let Some(b) = i.scalar_block().filter(|b| b.layout() == layout) {
                *slot = b.slots().as_ptr().cast::<u64>().cast_mut();
            }
        }
    }

    /// Whether every element of `part` whose code needs a state block has one.
    fn has_blocks(&self, part: &Part, blocks: &[*mut u64]) -> bool {
        let r = part.range.clone();
        blocks.len() >= r.end
            && (self.with_blocks.iter())
                .filter(|(k, _)| r.contains(k))
                .all(|(k, _)| blocks.get(*k).is_some_and(|b| !b.is_null()))
    }
}

/// Empties `arena` and makes `v` its value 0. Written into the slot [`spent`] kept rather
/// than pushed: a push copies the value from where it was built with wide loads over its
/// narrow stores, which the CPU cannot forward (a stall per call, seen in `perf annotate`).
#[inline(always)]
fn first_value(arena: &mut Vec<Value>, msg: Arc<Message>) {
    arena.truncate(1);
    match arena.first_mut() {
        // Built in the slot: passed in as a `Value`, it was still built on the stack first.
        Some(slot) => overwrite(slot, Value::Msg(msg)),
        None => arena.push(Value::Msg(msg)),
    }
}

/// Ends a call's use of its arena: every value dropped (messages are not kept alive past
/// the call), slot 0 kept as `Unit` for the next call's [`first_value`].
fn spent(arena: &mut Vec<Value>) {
    arena.truncate(1);
    if let Some(slot) = arena.first_mut() {
        overwrite(slot, Value::Unit);
    }
}

/// `*slot = v`, without calling `Value`'s drop glue (out of line) for the `Unit` the slot
/// usually holds here: slot 0's message is taken as the verdict or the answer, and
/// [`spent`] leaves `Unit`. A `Unit` owns nothing, so forgetting it leaks nothing.
#[inline(always)]
fn overwrite(slot: &mut Value, v: Value) {
    let old = std::mem::replace(slot, v);
    if matches!(old, Value::Unit) {
        std::mem::forget(old);
    } else {
        drop(old);
    }
}

fn take_msg(arena: &mut [Value], h: u64) -> Result<Arc<Message>, RuntimeError> {
    msg_at(arena, h).ok_or_else(|| not_a_msg(arena, h))
}

/// The message at handle `h`, taken out of the arena; `None` (and the arena unchanged) when
/// `h` holds something else.
fn msg_at(arena: &mut [Value], h: u64) -> Option<Arc<Message>> {
    let slot = usize::try_from(h).ok().and_then(|i| arena.get_mut(i))?;
    if !matches!(slot, Value::Msg(_)) {
        return None;
    }
    // Written so that only the message's pointer is read: a `match` on the replaced value
    // whose other arm drops it made the compiler copy all 32 bytes of the slot with 16-byte
    // loads, over the narrow stores that wrote it just before the call (`first_value`), a
    // store-forwarding stall on every call (62 % of `response_outcome`'s samples on a chain
    // of one `count` element). The other arm cannot run (the slot held a message just
    // above); it forgets rather than drops so that no copy of the whole value is kept.
    let old = std::mem::replace(slot, Value::Unit);
    if let Value::Msg(m) = old {
        Some(m)
    } else {
        std::mem::forget(old);
        None
    }
}

/// Why handle `h` names no message to send.
fn not_a_msg(arena: &[Value], h: u64) -> RuntimeError {
    match usize::try_from(h).ok().and_then(|i| arena.get(i)) {
        Some(other) => RuntimeError::Type(format!("sending a {}", other.kind_name())),
        None => RuntimeError::Type(format!("dangling message handle {h}")),
    }
}

/// Inlined, the routing is written once, where the outcome keeps it: returned from a call,
/// it was copied there with wide loads over the callee's narrow stores, which stall.
#[inline(always)]
fn dst_of(arena: &[Value], h: u64) -> Option<String> {
    match usize::try_from(h).ok().and_then(|i| arena.get(i)) {
        Some(Value::Msg(m)) => m.headers.get("dst").cloned(),
        _ => None,
    }
}

/// The JIT as a simulator executor: compiles each segment the first time it runs and keeps
/// the compiled version for the executor's lifetime.
pub struct Jit {
    fusion: Fusion,
    cache: Mutex<HashMap<Vec<usize>, Arc<Compiled>>>,
    bufs: Mutex<Buffers>,
    /// Segments that failed to compile (and ran in the interpreter instead).
    failures: AtomicUsize,
    last_error: Mutex<Option<String>>,
}

impl Default for Jit {
    fn default() -> Self {
        Jit::new(Fusion::Fused)
    }
}

impl Jit {
    pub fn new(fusion: Fusion) -> Self {
        Jit {
            fusion,
            cache: Mutex::new(HashMap::new()),
            bufs: Mutex::new(Buffers::default()),
            failures: AtomicUsize::new(0),
            last_error: Mutex::new(None),
        }
    }

    /// How many segments could not be compiled, and the last error.
    pub fn failures(&self) -> (usize, Option<String>) {
        let last = self
            .last_error
            .lock()
            .map(|g| g.clone())
            .unwrap_or_default();
        (self.failures.load(Ordering::Relaxed), last)
    }

    fn segment(&self, elements: &[Arc<Element>]) -> Option<Arc<Compiled>> {
        let key: Vec<usize> = elements.iter().map(|e| Arc::as_ptr(e) as usize).collect();
        let mut cache = self.cache.lock().ok()?;
        if let Some(c) = cache.get(&key) {
            return Some(Arc::clone(c));
        }
        match compile(elements, self.fusion) {
            Ok(c) => {
                let c = Arc::new(c);
                cache.insert(key, Arc::clone(&c));
                Some(c)
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut g) = self.last_error.lock() {
                    *g = Some(e.to_string());
                }
                None
            }
        }
    }
}

impl Executor for Jit {
    fn wrap_store(
        &self,
        ir: &Element,
        store: Box<dyn StateStore + Send>,
    ) -> Box<dyn StateStore + Send> {
        block_store(ir, store)
    }

    fn request(
        &self,
        elements: &[Arc<Element>],
        instances: &mut [&mut Instance],
        msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        scratch: &mut RpcScratch,
    ) -> SegmentRequest {
        match (self.segment(elements), self.bufs.lock()) {
            (Some(c), Ok(mut bufs)) => c.request(&mut bufs, instances, msg, rpc, host, scratch),
            _ => Interp.request(elements, instances, msg, rpc, host, scratch),
        }
    }

    fn response(
        &self,
        elements: &[Arc<Element>],
        instances: &mut [&mut Instance],
        start: usize,
        msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
        scratch: &mut RpcScratch,
    ) -> Message {
        match (self.segment(elements), self.bufs.lock()) {
            (Some(c), Ok(mut bufs)) => {
                c.response(&mut bufs, instances, start, msg, rpc, host, scratch)
            }
            _ => Interp.response(elements, instances, start, msg, rpc, host, scratch),
        }
    }
}
