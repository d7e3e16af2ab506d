//! Turning a chain segment into machine code: in this process through a `JITModule` (one per
//! compiled version, freed with it), or for another machine as a relocatable object.

use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use cranelift_codegen::ir::UserFuncName;
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::{Context, settings, settings::Configurable};
use cranelift_frontend::FunctionBuilderContext;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module, default_libcall_names};
use cranelift_object::{ObjectBuilder, ObjectModule};
use weft_hostcalls::abi::{BlockLayout, HostFn};
use weft_ir::ir::Element;

use crate::error::JitError;
use crate::host::{self, Frame, Tables};
use crate::lower::{self, Imports};

/// Whether a segment becomes one function per direction, or one per element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fusion {
    /// All elements of the segment inlined into one function per direction.
    Fused,
    /// One function per element and direction, called in turn (for comparison).
    Unfused,
}

/// A compiled segment function. The frame pointer is the only argument. Calling one is
/// sound only while its module is alive, on a frame whose state blocks have the layouts
/// the code was compiled for (see `Compiled::has_blocks`): hence `unsafe`, and private.
pub(crate) type SegmentFn = for<'x, 'a, 'i, 'h> unsafe extern "C" fn(&'x mut Frame<'a, 'i, 'h>);

/// The functions of consecutive elements `range` of the segment.
pub(crate) struct Part {
    pub(crate) range: Range<usize>,
    pub(crate) req: SegmentFn,
    pub(crate) resp: SegmentFn,
}

/// One compiled version of a segment. Its machine code lives as long as it does; it is
/// run only through its methods (`exec`), which check what the code assumes.
pub struct Compiled {
    pub(crate) elements: Vec<Arc<Element>>,
    /// Per element: the layout of the state block its code addresses, if it addresses one.
    pub(crate) blocks: Vec<Option<BlockLayout>>,
    /// The elements whose code addresses a state block, with its layout: what a call visits
    /// to collect the blocks, so the loop has one path (`Compiled::collect_blocks`).
    pub(crate) with_blocks: Vec<(usize, BlockLayout)>,
    /// Where each element's keys start in an RPC's scratch, and where the last one's end
    /// ([`weft_ir::interp::scratch_offsets`]).
    pub(crate) scratch_at: Vec<usize>,
    pub(crate) parts: Vec<Part>,
    pub(crate) tables: Tables,
    /// Only touched when the version is dropped; the mutex makes the version `Sync`.
    module: Mutex<Option<JITModule>>,
}

#[allow(unsafe_code)]
impl Drop for Compiled {
    fn drop(&mut self) {
        let module = match self.module.get_mut() {
            Ok(m) => m.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(m) = module {
            // SAFETY: the function pointers in `parts` are the only references into this
            // module's memory and they die with `self`; every call holds an `Arc` of this
            // version until it returns (see `lifetime`), so no call is running in it now.
            unsafe { m.free_memory() };
        }
    }
}

fn flags(pic: bool) -> Result<settings::Flags, JitError> {
    let mut b = settings::builder();
    // Compiled code is almost all host calls: "speed" (e-graph rewrites) gave no faster
    // chain and cost 30 % more compile time, over the 1 ms goal for ten elements. The
    // backtracking allocator keeps values in registers across the host calls where the
    // single-pass one spilled and reloaded them: the fused benchmark chain runs 12 % faster
    // for a third more compile time (docs/jit.md, "Code generation settings").
    b.set("opt_level", "none")?;
    b.set("regalloc_algorithm", "backtracking")?;
    b.set("use_colocated_libcalls", "false")?;
    b.set("is_pic", if pic { "true" } else { "false" })?;
    // The verifier doubles compile time; debug builds and the cross-ISA path keep it on.
    b.set(
        "enable_verifier",
        if cfg!(debug_assertions) {
            "true"
        } else {
            "false"
        },
    )?;
    Ok(settings::Flags::new(b))
}

fn native_isa() -> Result<OwnedTargetIsa, JitError> {
    static ISA: OnceLock<Result<OwnedTargetIsa, String>> = OnceLock::new();
    ISA.get_or_init(|| {
        let builder = cranelift_native::builder().map_err(str::to_owned)?;
        let f = flags(false).map_err(|e| e.to_string())?;
        builder.finish(f).map_err(|e| e.to_string())
    })
    .clone()
    .map_err(|e| JitError::Target("host".into(), e))
}

fn host_symbol(name: &str) -> Option<*const u8> {
    let id: u32 = name.strip_prefix("weft_hc_")?.parse().ok()?;
    host::ALL
        .iter()
        .find(|f| **f as u32 == id)
        .map(|f| host::host_fn(*f).0)
}

fn ranges(n: usize, fusion: Fusion) -> Vec<Range<usize>> {
    match fusion {
        Fusion::Fused => std::iter::once(0..n).collect(),
        Fusion::Unfused => (0..n).map(|k| k..k + 1).collect(),
    }
}

/// Cranelift's contexts for one compile, taken from a pool and put back after. A context
/// keeps the allocations of the functions it compiled (the register allocator's above all)
/// when cleared; made anew for each compile, they were allocated and freed again every time,
/// and glibc gave the freed memory back to the system and faulted it in again (`brk` on
/// every compile, 2 % of its instructions, a third of its page faults). A pool rather than
/// one pair, so compiles on several threads do not wait for each other. Only a compile that
/// got through puts its pair back: a lowering that failed half-way leaves the builder's
/// context holding that function (Cranelift clears it only when a function is finished).
struct Contexts {
    ctx: Context,
    fctx: FunctionBuilderContext,
    /// Set once the compile got through.
    reusable: bool,
}

/// More than the threads that compile at once in practice (one per reload).
const POOLED_CONTEXTS: usize = 4;

static POOL: Mutex<Vec<(Context, FunctionBuilderContext)>> = Mutex::new(Vec::new());

impl Contexts {
    fn take() -> Contexts {
        let pooled = POOL.lock().ok().and_then(|mut pool| pool.pop());
        let (ctx, fctx) = pooled.unwrap_or_else(|| (Context::new(), FunctionBuilderContext::new()));
        Contexts {
            ctx,
            fctx,
            reusable: false,
        }
    }
}

impl Drop for Contexts {
    fn drop(&mut self) {
        if !self.reusable {
            return;
        }
        if let Ok(mut pool) = POOL.lock()
            && pool.len() < POOLED_CONTEXTS
        {
            let mut ctx = std::mem::replace(&mut self.ctx, Context::new());
            ctx.clear();
            pool.push((ctx, std::mem::take(&mut self.fctx)));
        }
    }
}

/// Lowers every part of a segment into `module`; returns the ids of (request, response).
fn lower_all<M: Module>(
    module: &mut M,
    elements: &[Arc<Element>],
    fusion: Fusion,
    tables: &mut Tables,
    linkage: Linkage,
    mut verify: impl FnMut(&Context, &M) -> Result<(), JitError>,
) -> Result<Vec<(Range<usize>, FuncId, FuncId)>, JitError> {
    if elements.is_empty() {
        return Err(JitError::EmptySegment);
    }
    if let Some(e) = elements.iter().find(|e| !e.is_runnable()) {
        return Err(JitError::NotRunnable(e.name.clone()));
    }
    let mut imports = Imports::default();
    let mut contexts = Contexts::take();
    let mut out = Vec::new();
    for (i, r) in ranges(elements.len(), fusion).into_iter().enumerate() {
        let mut ids = [None, None];
        for (d, name) in ["req", "resp"].iter().enumerate() {
            let Contexts { ctx, fctx, .. } = &mut contexts;
            let sig = lower::segment_signature(module);
            let id = module.declare_function(&format!("weft_seg{i}_{name}"), linkage, &sig)?;
            ctx.func.signature = sig;
            ctx.func.name = UserFuncName::user(0, id.as_u32());
            let els = &elements[r.clone()];
            if d == 0 {
                lower::lower_request(module, &mut imports, tables, els, &mut ctx.func, fctx)?;
            } else {
                lower::lower_response(module, &mut imports, tables, els, &mut ctx.func, fctx)?;
            }
            let dump = std::env::var("WEFT_JIT_DUMP").ok();
            if dump.is_some() {
                eprintln!("{}", ctx.func.display());
            }
            // `WEFT_JIT_DUMP=asm`: the machine code too, after register allocation.
            ctx.set_disasm(dump.as_deref() == Some("asm"));
            let defined = verify(ctx, module).and_then(|()| Ok(module.define_function(id, ctx)?));
            if let Some(vcode) = ctx.compiled_code().and_then(|c| c.vcode.as_ref()) {
                eprintln!("{vcode}");
            }
            module.clear_context(ctx);
            defined?;
            ids[d] = Some(id);
        }
        if let [Some(req), Some(resp)] = ids {
            out.push((r, req, resp));
        }
    }
    contexts.reusable = true;
    Ok(out)
}

/// Compiles a segment for this machine.
pub fn compile(elements: &[Arc<Element>], fusion: Fusion) -> Result<Compiled, JitError> {
    let mut builder = JITBuilder::with_isa(native_isa()?, default_libcall_names());
    builder.symbol_lookup_fn(Box::new(host_symbol));
    let mut module = JITModule::new(builder);
    let mut tables = Tables::default();
    let lowered = lower_all(
        &mut module,
        elements,
        fusion,
        &mut tables,
        Linkage::Local,
        |_, _| Ok(()),
    )
    .and_then(|ids| {
        module.finalize_definitions()?;
        Ok(ids)
    });
    let ids = match lowered {
        Ok(ids) => ids,
        Err(e) => {
            // A `JITModule` does not free its memory when dropped: without this, every
            // failed compile (a reload that is refused) would leak what it had defined.
            // SAFETY: no pointer into the module's memory has been taken (that happens only
            // below, after success), so nothing can call or read what is freed.
            #[allow(unsafe_code)]
            unsafe {
                module.free_memory()
            };
            return Err(e);
        }
    };
    let mut parts = Vec::with_capacity(ids.len());
    for (range, req, resp) in ids {
        let req = module.get_finalized_function(req);
        let resp = module.get_finalized_function(resp);
        // SAFETY: both pointers are functions this module just finalised with the segment
        // signature (one pointer-sized argument, no result), which is `SegmentFn` on the C
        // ABI; the module outlives the pointers (they are dropped with `Compiled`).
        #[allow(unsafe_code)]
        let (req, resp) = unsafe {
            (
                std::mem::transmute::<*const u8, SegmentFn>(req),
                std::mem::transmute::<*const u8, SegmentFn>(resp),
            )
        };
        parts.push(Part { range, req, resp });
    }
    Ok(Compiled::new(elements, parts, tables, Some(module)))
}

impl Compiled {
    /// A version of `elements` whose code is `parts`; `module`, when the code was compiled
    /// here, is freed when the version is dropped.
    fn new(
        elements: &[Arc<Element>],
        parts: Vec<Part>,
        tables: Tables,
        module: Option<JITModule>,
    ) -> Compiled {
        let blocks = block_layouts(elements);
        let with_blocks = (blocks.iter().enumerate())
            .filter_map(|(k, l)| Some((k, l.clone()?)))
            .collect();
        Compiled {
            blocks,
            with_blocks,
            scratch_at: weft_ir::interp::scratch_offsets(elements),
            elements: elements.to_vec(),
            parts,
            tables,
            module: Mutex::new(module),
        }
    }
}

fn block_layouts(elements: &[Arc<Element>]) -> Vec<Option<BlockLayout>> {
    elements
        .iter()
        .map(|e| {
            let layout = lower::block_vars(e);
            layout
                .iter()
                .any(Option::is_some)
                .then(|| BlockLayout::new(layout))
        })
        .collect()
}

impl Compiled {
    /// A version whose code was not compiled here but linked into this process: the object
    /// [`compile_object`] made of `elements` for this machine's target, with `functions[i]`
    /// the addresses of its `weft_seg{i}_req` and `weft_seg{i}_resp`. It runs through the
    /// same calls as code from [`compile`], so a test on the object's machine (e.g. under
    /// `qemu-aarch64`, jit/aarch64) compares that code with the interpreter. `object` is the
    /// object that was linked: the constant and field tables the code refers to by number
    /// come from compiling `elements` again, which must give exactly those bytes.
    ///
    /// # Safety
    ///
    /// `functions` must be the addresses of those symbols of `object` as linked into this
    /// process, with every `weft_hc_<id>` it imports resolved to (code that jumps to)
    /// [`host::host_fn`] of that id, and the code must stay mapped while the result lives
    /// (as statically linked code does).
    #[allow(unsafe_code)]
    pub unsafe fn from_linked(
        elements: &[Arc<Element>],
        fusion: Fusion,
        object: &[u8],
        functions: &[(*const u8, *const u8)],
    ) -> Result<Compiled, JitError> {
        let triple = target_lexicon::HOST.to_string();
        let (bytes, tables) = compile_object(elements, &triple, fusion)?;
        if bytes != object {
            return Err(JitError::Linked(format!(
                "the object is not what `{triple}` compiles of these elements ({fusion:?})"
            )));
        }
        let ranges = ranges(elements.len(), fusion);
        if functions
            .iter()
            .any(|(req, resp)| req.is_null() || resp.is_null())
        {
            return Err(JitError::Linked("a null function".into()));
        }
        if ranges.len() != functions.len() {
            return Err(JitError::Linked(format!(
                "{} parts, {} pairs of functions",
                ranges.len(),
                functions.len()
            )));
        }
        let parts = ranges
            .into_iter()
            .zip(functions)
            .map(|(range, &(req, resp))| {
                // SAFETY: by the caller's contract these are the linked `weft_seg{i}_*` of an
                // object `compile_object` made (checked above to be the one these tables
                // belong to), compiled with the segment signature, which is `SegmentFn` on
                // the C ABI, and they stay valid while `self` lives.
                let (req, resp) = unsafe {
                    (
                        std::mem::transmute::<*const u8, SegmentFn>(req),
                        std::mem::transmute::<*const u8, SegmentFn>(resp),
                    )
                };
                Part { range, req, resp }
            })
            .collect();
        // Nothing to free: the code belongs to the process image.
        Ok(Compiled::new(elements, parts, tables, None))
    }
}

/// Compiles a segment for another target (e.g. `aarch64-unknown-linux-gnu`, the BlueField
/// DPU cores) into a relocatable object. Every function is checked by Cranelift's verifier.
/// The object exports `weft_seg{i}_req` / `weft_seg{i}_resp` and imports the host functions
/// by their stable symbols (`weft_hc_<id>`); the constant and field tables it refers to by
/// number are returned beside it.
pub fn compile_object(
    elements: &[Arc<Element>],
    triple: &str,
    fusion: Fusion,
) -> Result<(Vec<u8>, Tables), JitError> {
    let t: target_lexicon::Triple = triple
        .parse()
        .map_err(|e| JitError::Target(triple.into(), format!("{e}")))?;
    let isa = cranelift_codegen::isa::lookup(t)
        .map_err(|e| JitError::Target(triple.into(), e.to_string()))?
        .finish(flags(true)?)
        .map_err(|e| JitError::Target(triple.into(), e.to_string()))?;
    let builder = ObjectBuilder::new(isa, "weft_segment", default_libcall_names())?;
    let mut module = ObjectModule::new(builder);
    let mut tables = Tables::default();
    lower_all(
        &mut module,
        elements,
        fusion,
        &mut tables,
        Linkage::Export,
        |ctx, m| {
            cranelift_codegen::verifier::verify_function(&ctx.func, m.isa()).map_err(|e| {
                JitError::Verifier {
                    function: ctx.func.name.to_string(),
                    errors: e.to_string(),
                }
            })
        },
    )?;
    let bytes = module
        .finish()
        .emit()
        .map_err(|e| JitError::Object(e.to_string()))?;
    Ok((bytes, tables))
}

/// The symbol of a host function in compiled objects.
pub fn host_fn_symbol(f: HostFn) -> String {
    f.symbol()
}
