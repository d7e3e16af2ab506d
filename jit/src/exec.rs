//! Running compiled segments: the simulator's [`Executor`] for the JIT, and the call
//! wrappers that set up a frame, enter the code and read the verdict back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use weft_hostcalls::abi::{BlockStore, BlockVar, RpcCtx, verdict};
use weft_hostcalls::state::StateStore;
use weft_hostcalls::{Code, Message, Value};
use weft_ir::eval::RuntimeError;
use weft_ir::interp::{Host, Instance, RpcInfo, Verdict};
use weft_ir::ir::{Element, Handler};
use weft_ir::sim::{Executor, Interp, SegmentRequest};

use crate::compile::{Compiled, Fusion, Part, compile};
use crate::host::Frame;
use crate::lower::{block_vars, code_of};

/// Buffers reused from call to call, so a call allocates only what its values need.
#[derive(Default)]
pub struct Buffers {
    arena: Vec<Value>,
    blocks: Vec<*mut u64>,
}

// SAFETY-free note: `Buffers` holds raw block pointers only between the start and the end of
// one call; they are cleared before it returns. It is `Send` so executors can be moved.
unsafe impl Send for Buffers {}

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

impl Compiled {
    /// Runs the segment's request handlers (as [`Executor::request`]).
    pub fn request(
        &self,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        mut msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
    ) -> SegmentRequest {
        let mut last = None;
        for part in &self.parts {
            let r = part.range.clone();
            let out = self.run_request(part, bufs, &mut instances[r.clone()], msg, rpc, host);
            match out.verdict {
                Verdict::Forward(m) => {
                    msg = m;
                    last = Some(out.routed);
                }
                verdict => {
                    return SegmentRequest {
                        decided: r.start + out.decided,
                        verdict,
                        routed: out.routed,
                    };
                }
            }
        }
        SegmentRequest {
            decided: self.elements.len(),
            routed: last.flatten(),
            verdict: Verdict::Forward(msg),
        }
    }

    /// Runs the response handlers of elements `start..=0` (as [`Executor::response`]).
    pub fn response(
        &self,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        start: usize,
        mut msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
    ) -> Message {
        for part in self.parts.iter().rev() {
            let r = part.range.clone();
            if r.start > start {
                continue;
            }
            let local_start = start.min(r.end - 1) - r.start;
            msg = self.run_response(part, bufs, &mut instances[r], local_start, msg, rpc, host);
        }
        msg
    }

    fn frame<'a, 'i, 'h>(
        &'a self,
        part: &Part,
        bufs: &'a mut Buffers,
        instances: &'a mut [&'i mut Instance],
        handler: Handler,
        msg: Message,
        rpc: &'a RpcInfo,
        host: &'a mut Host<'h>,
    ) -> Frame<'a, 'i, 'h> {
        bufs.blocks.clear();
        for i in instances.iter_mut() {
            bufs.blocks
                .push(i.store.scalar_block().unwrap_or(std::ptr::null_mut()));
        }
        let mut arena = std::mem::take(&mut bufs.arena);
        arena.clear();
        arena.push(Value::Msg(Arc::new(msg)));
        Frame {
            ctx: RpcCtx {
                blocks: bufs.blocks.as_ptr(),
                ..RpcCtx::default()
            },
            arena,
            tables: &self.tables,
            elements: &self.elements[part.range.clone()],
            instances,
            rpc,
            handler,
            host,
            error: None,
            reject: String::new(),
        }
    }

    fn run_request(
        &self,
        part: &Part,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
    ) -> SegmentRequest {
        if !blocks_ready(&self.elements[part.range.clone()], instances) {
            // An instance whose store has no state block (made by another executor): the
            // interpreter runs it, reading the same store.
            let els = &self.elements[part.range.clone()];
            return Interp.request(els, instances, msg, rpc, host);
        }
        let n = part.range.len();
        let mut arena_back = Vec::new();
        let (ctx, error, reject) = {
            let mut frame = self.frame(part, bufs, instances, Handler::Req, msg, rpc, host);
            (part.req)(&mut frame);
            let out = (
                std::mem::take(&mut frame.ctx),
                frame.error.take(),
                std::mem::take(&mut frame.reject),
            );
            std::mem::swap(&mut arena_back, &mut frame.arena);
            out
        };
        bufs.blocks.clear();
        let decided = (ctx.decided as usize).min(n);
        let routed = dst_of(&arena_back, ctx.entry_msg);
        let taken = take_msg(&mut arena_back, ctx.msg);
        bufs.arena = arena_back;
        let els = &self.elements[part.range.clone()];
        let verdict = match (ctx.verdict, taken) {
            (verdict::FORWARD, Ok(m)) => {
                return SegmentRequest {
                    decided: n,
                    verdict: Verdict::Forward(m),
                    routed,
                };
            }
            (verdict::REPLY, Ok(m)) => Verdict::Reply(m),
            (verdict::REJECT, _) => Verdict::Reject {
                code: code_of(ctx.code),
                message: reject,
            },
            (_, taken) => {
                let err = match (error, taken) {
                    (Some(e), _) => e,
                    (None, Err(e)) => e,
                    (None, Ok(_)) => RuntimeError::Type("unknown verdict".into()),
                };
                if let Some(inst) = instances.get_mut(decided) {
                    inst.count_error(&err);
                }
                let name = els.get(decided).map(|e| e.name.as_str()).unwrap_or("");
                Verdict::Reject {
                    code: err.code(),
                    message: format!("{name}: {err}"),
                }
            }
        };
        if let Some(inst) = instances.get_mut(decided) {
            // This element's `resp` will not run for the RPC: its scratch ends here.
            inst.scratch_end(rpc.id);
        }
        SegmentRequest {
            decided,
            verdict,
            routed,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_response(
        &self,
        part: &Part,
        bufs: &mut Buffers,
        instances: &mut [&mut Instance],
        start: usize,
        msg: Message,
        rpc: &RpcInfo,
        host: &mut Host<'_>,
    ) -> Message {
        if !blocks_ready(&self.elements[part.range.clone()], instances) {
            let els = &self.elements[part.range.clone()];
            return Interp.response(els, instances, start, msg, rpc, host);
        }
        let mut arena_back = Vec::new();
        let ctx = {
            let mut frame = self.frame(part, bufs, instances, Handler::Resp, msg, rpc, host);
            frame.ctx.start = start as u32;
            (part.resp)(&mut frame);
            std::mem::swap(&mut arena_back, &mut frame.arena);
            std::mem::take(&mut frame.ctx)
        };
        bufs.blocks.clear();
        let out = take_msg(&mut arena_back, ctx.msg)
            .unwrap_or_else(|e| Message::error(Code::Internal, format!("response handler: {e}")));
        bufs.arena = arena_back;
        out
    }
}

fn blocks_ready(elements: &[Arc<Element>], instances: &mut [&mut Instance]) -> bool {
    elements.iter().zip(instances.iter_mut()).all(|(e, i)| {
        !block_vars(e).iter().any(Option::is_some) || i.store.scalar_block().is_some()
    })
}

fn take_msg(arena: &mut [Value], h: u64) -> Result<Message, RuntimeError> {
    let slot = usize::try_from(h).ok().and_then(|i| arena.get_mut(i));
    match slot.map(|s| std::mem::replace(s, Value::Unit)) {
        Some(Value::Msg(m)) => Ok(Arc::unwrap_or_clone(m)),
        Some(other) => Err(RuntimeError::Type(format!(
            "sending a {}",
            other.kind_name()
        ))),
        None => Err(RuntimeError::Type(format!("dangling message handle {h}"))),
    }
}

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
    ) -> SegmentRequest {
        match (self.segment(elements), self.bufs.lock()) {
            (Some(c), Ok(mut bufs)) => c.request(&mut bufs, instances, msg, rpc, host),
            _ => Interp.request(elements, instances, msg, rpc, host),
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
    ) -> Message {
        match (self.segment(elements), self.bufs.lock()) {
            (Some(c), Ok(mut bufs)) => c.response(&mut bufs, instances, start, msg, rpc, host),
            _ => Interp.response(elements, instances, start, msg, rpc, host),
        }
    }
}
