//! The C ABI the language bindings link against (`runtime/include/weft.h`, generated from
//! this file by cbindgen; the contract is docs/c-abi.md, the design docs/engine.md).
//!
//! Every entry point runs under `catch_unwind`, so nothing unwinds into the caller; errors
//! are return codes plus a thread-local message ([`weft_last_error`]). Outputs go into
//! buffers the caller owns; when one is too small the call returns `WEFT_E_BUFFER`, keeps
//! its outputs, and [`weft_call_output`] copies them once the caller has grown the buffers,
//! so a chain never runs twice for one call.
//!
//! All `unsafe` of the crate is here: turning the caller's pointers into references and
//! slices. Each block states the part of the contract that makes it sound.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use weft_hostcalls::Code;
use weft_hostcalls::text::utf8;

use crate::Side;
use crate::engine::{
    self, Engine, Metadata, Prepared, Rpc, ServerResponse, VERSION_HEADER, Verdict,
};
use crate::error::EngineError;
use crate::handles::HandleTable;
use crate::metadata::{self, Decoded, Keys};
use crate::records::{Collector, RecordQueue};
use crate::version::EngineOptions;

pub const WEFT_SIDE_CLIENT: i32 = 0;
pub const WEFT_SIDE_SERVER: i32 = 1;

/// Send on; `out_message` / `out_metadata` hold rewrites when `*_changed`.
pub const WEFT_VERDICT_FORWARD: i32 = 0;
/// Fail the RPC with `code`; `out_message` holds the status message (UTF-8).
pub const WEFT_VERDICT_REJECT: i32 = 1;
/// Local reply: `out_message` holds the response bytes; do not call the server.
pub const WEFT_VERDICT_REPLY: i32 = 2;

pub const WEFT_OK: i32 = 0;
/// NULL pointer, bad UTF-8, bad metadata encoding, unknown rpc handle.
pub const WEFT_E_ARGUMENT: i32 = 1;
/// Config/YAML/element/proto error: `weft_last_error()` has the full diagnostic.
pub const WEFT_E_CONFIG: i32 = 2;
/// No edge of this service matches (side, method): pass the RPC through untouched, but
/// for the caller's stamp on the client side (`weft_caller_stamp`).
pub const WEFT_E_NO_EDGE: i32 = 3;
/// An out buffer was too small: each `WeftBuf.len` holds the size needed; call
/// `weft_call_output`.
pub const WEFT_E_BUFFER: i32 = 4;
/// A bug, caught at the boundary: fail the RPC with INTERNAL.
pub const WEFT_E_PANIC: i32 = 5;
/// `metadata_keys_version` names another version than the one this request runs in: call
/// again with the complete metadata (and `metadata_keys_version` 0). Nothing has run. From
/// `weft_server_exchange`: the version cannot wait for the response; run the request path.
pub const WEFT_E_METADATA: i32 = 6;

/// `weft_metadata_keys`' `messages` bit: the request handlers can observe the request message.
pub const WEFT_OBSERVES_REQUEST_MESSAGE: u32 = 1;
/// `weft_metadata_keys`' `messages` bit: the response handlers can observe the response
/// message.
pub const WEFT_OBSERVES_RESPONSE_MESSAGE: u32 = 2;
/// `weft_metadata_keys`' `messages` bit, server side only: the request path can wait for
/// the response. For a request stamped with this version's stamp, skip `weft_request` and
/// hand the stamp and the request's age to `weft_server_exchange` with the response.
pub const WEFT_DEFERRABLE_REQUEST: u32 = 4;
/// The length of a `weft-version` stamp, as `weft_metadata_keys` writes it.
pub const WEFT_STAMP_LEN: usize = 16;

/// A caller-owned output buffer: `ptr` holds `cap` bytes; Weft sets `len`. An output buffer
/// must not overlap any input of the same call (method, metadata, message, status message):
/// entries passed through unseen are still read from the input while outputs are written.
#[repr(C)]
pub struct WeftBuf {
    pub ptr: *mut u8,
    pub cap: usize,
    pub len: usize,
}

/// What went wrong with RPCs over the runtime's life, every version included
/// (`weft_counters`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct WeftCounters {
    /// RPCs rejected with INVALID_ARGUMENT because an element read a message whose bytes are
    /// not a valid message of its type.
    pub malformed: u64,
    /// RPCs rejected with INTERNAL because an element's handler failed at run time.
    pub element_errors: u64,
    /// Of `element_errors`, those that passed an element's `max_iterations`.
    pub iteration_limited: u64,
    /// Requests rejected with PERMISSION_DENIED because edges from several services lead
    /// into their method and their `weft-version` stamp named none of those services.
    pub unknown_callers: u64,
}

/// What the runtime holds that grows with use and must shrink again (`weft_stats`): gauges
/// a long-running process (or a soak test) watches for leaks.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct WeftStats {
    /// RPC handles waiting for their response (`weft_rpcs_waiting`).
    pub rpcs_waiting: u64,
    /// Outputs kept after `WEFT_E_BUFFER` that `weft_call_output` has not taken yet.
    pub kept_outputs: u64,
    /// Channel records queued for `weft_records`.
    pub records_queued: u64,
    /// The bytes of messages and strings those records keep alive, bounded by
    /// `WEFT_RECORD_BYTES` (64 MiB by default).
    pub records_bytes: u64,
    /// Versions installed so far: the first, and one per reload that changed something.
    pub versions_installed: u64,
    /// Installed versions freed after their last RPC.
    pub versions_freed: u64,
    /// Versions no longer current that are still alive (RPCs running in them).
    pub versions_draining: u64,
}

/// One call of `weft_request` / `weft_response`: inputs, then outputs.
#[repr(C)]
pub struct WeftCall {
    /// `"/echo.Echo/Say"` (leading slash optional).
    pub method: *const u8,
    pub method_len: usize,
    /// Encoded as repeated `{u32 LE key_len, key, u32 LE value_len, value}`.
    pub metadata: *const u8,
    pub metadata_len: usize,
    /// Protobuf wire bytes as the codec produced them (the response on `weft_response`).
    pub message: *const u8,
    pub message_len: usize,
    /// `weft_request`: out (0 = nothing to do on the response path); `weft_response`: in.
    pub rpc: u64,
    /// `weft_response` only: the server's status (0 = OK); on an error set `message_len` 0.
    pub status_code: i32,
    pub status_message: *const u8,
    pub status_message_len: usize,
    /// `weft_request` only. 0: `metadata` is complete. Otherwise the version
    /// `weft_metadata_keys` returned, and `metadata` holds (at least) the keys it listed:
    /// the only ones the chain observes, so the others need not be passed. Out metadata then
    /// holds the keys passed (and any the chain added) to replace theirs in the request's
    /// own: a key passed but missing from it was removed by the chain.
    pub metadata_keys_version: u64,
    /// `WEFT_VERDICT_*`.
    pub verdict: i32,
    /// gRPC status code for `WEFT_VERDICT_REJECT`.
    pub code: i32,
    /// 1: `out_message` holds the message to use (forward rewrite, reply, reject text).
    pub message_changed: i32,
    /// 1: `out_metadata` holds the complete new metadata.
    pub metadata_changed: i32,
    pub out_message: WeftBuf,
    pub out_metadata: WeftBuf,
    /// The replica chosen via the `dst` header; len 0 if none.
    pub route: WeftBuf,
}

/// An empty buffer (NULL, capacity 0), for Rust callers to fill in.
impl Default for WeftBuf {
    fn default() -> Self {
        WeftBuf {
            ptr: std::ptr::null_mut(),
            cap: 0,
            len: 0,
        }
    }
}

impl WeftBuf {
    /// An empty output buffer over `bytes`, for Rust callers (C and Go fill in the fields).
    /// The buffer must outlive every call that writes to it.
    pub fn over(bytes: &mut [u8]) -> WeftBuf {
        WeftBuf {
            ptr: bytes.as_mut_ptr(),
            cap: bytes.len(),
            len: 0,
        }
    }
}

/// A call with no inputs and empty output buffers, for Rust callers to fill in.
impl Default for WeftCall {
    fn default() -> Self {
        WeftCall {
            method: std::ptr::null(),
            method_len: 0,
            metadata: std::ptr::null(),
            metadata_len: 0,
            message: std::ptr::null(),
            message_len: 0,
            rpc: 0,
            status_code: 0,
            status_message: std::ptr::null(),
            status_message_len: 0,
            metadata_keys_version: 0,
            verdict: 0,
            code: 0,
            message_changed: 0,
            metadata_changed: 0,
            out_message: WeftBuf::default(),
            out_metadata: WeftBuf::default(),
            route: WeftBuf::default(),
        }
    }
}

/// An engine plus the handles of RPCs between request and response. Opaque to C.
pub struct WeftRuntime {
    engine: Engine,
    /// Channel records waiting for `weft_records`; `None` when opened without a queue.
    records: Option<Arc<RecordQueue>>,
    /// `weft_records`' side of the queue (with a record that did not fit the caller's
    /// buffer, for the next call); the lock also keeps two collectors from interleaving.
    record_collector: Mutex<Collector>,
    rpcs: HandleTable<Rpc>,
    /// Outputs of calls that returned `WEFT_E_BUFFER`, by the address of their `WeftCall`
    /// (rare, so one lock is fine). An entry lives until `weft_call_output` takes it, or
    /// the same `WeftCall` makes another call ([`Pending::forget_stale`]).
    pending: Pending,
}

/// The outputs kept after `WEFT_E_BUFFER`, and how many there are, so that calls need not
/// take the lock to learn that there are none.
#[derive(Default)]
struct Pending {
    kept: Mutex<HashMap<usize, Outputs>>,
    count: AtomicUsize,
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, HashMap<usize, Outputs>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn keep(&self, call: usize, outputs: Outputs) {
        let mut kept = self.lock();
        kept.insert(call, outputs);
        self.count.store(kept.len(), Ordering::Relaxed);
    }

    fn remove(&self, call: usize) {
        let mut kept = self.lock();
        kept.remove(&call);
        self.count.store(kept.len(), Ordering::Relaxed);
    }

    /// A new call on a `WeftCall` whose last call left outputs uncollected: those outputs
    /// can no longer be asked for, and a `weft_call_output` after this call must not
    /// return them.
    fn forget_stale(&self, call: usize) {
        if self.count.load(Ordering::Relaxed) > 0 {
            self.remove(call);
        }
    }
}

/// A call's outputs kept after `WEFT_E_BUFFER`.
struct Outputs {
    message: Option<Vec<u8>>,
    metadata: Option<Vec<u8>>,
    route: Option<Vec<u8>>,
}

#[derive(Debug)]
struct FfiError {
    code: i32,
    message: String,
}

impl FfiError {
    fn argument(message: impl Into<String>) -> FfiError {
        FfiError {
            code: WEFT_E_ARGUMENT,
            message: message.into(),
        }
    }
}

impl From<EngineError> for FfiError {
    fn from(e: EngineError) -> FfiError {
        let code = match &e {
            EngineError::NoEdge { .. } => WEFT_E_NO_EDGE,
            EngineError::Argument(_) => WEFT_E_ARGUMENT,
            EngineError::NotDeferrable { .. } => WEFT_E_METADATA,
            _ => WEFT_E_CONFIG,
        };
        FfiError {
            code,
            message: e.to_string(),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<LastError> = RefCell::new(LastError::default());
}

/// The thread's last error message, as [`weft_last_error`] gives it.
#[derive(Default)]
struct LastError {
    text: CString,
    /// The parts of a `WEFT_E_NO_EDGE` answer's message, made into `text` only when
    /// [`weft_last_error`] asks: the answer comes for every call of a method without policy,
    /// where formatting it cost more than the rest of the call (about 2 900 of 3 300
    /// instructions) and the binding never reads it. The strings are reused.
    no_edge: NoEdgeParts,
}

#[derive(Default)]
struct NoEdgeParts {
    pending: bool,
    service: String,
    side: &'static str,
    method: String,
}

fn set_last_error(message: &str) {
    // An interior NUL would cut the message short in C; show it instead.
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // `try_with`: a call made while the thread exits (from a thread-local destructor) must
    // not panic here, outside `catch_unwind`; its message is then lost, its code is not.
    let _ = LAST_ERROR.try_with(|e| {
        let mut e = e.borrow_mut();
        e.text = text;
        e.no_edge.pending = false;
    });
}

/// Answers `WEFT_E_NO_EDGE` for a call of `method` on `side`, with the message
/// [`Engine::no_edge`] would give, made when asked for.
fn no_edge_answer(engine: &Engine, side: Side, method: &str) -> i32 {
    let _ = LAST_ERROR.try_with(|e| {
        let parts = &mut e.borrow_mut().no_edge;
        parts.pending = true;
        parts.service.clear();
        parts.service.push_str(engine.service());
        parts.side = crate::version::side_name(side);
        parts.method.clear();
        parts.method.push_str(method);
    });
    WEFT_E_NO_EDGE
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("internal error in Weft (a bug; please report it): {what}")
}

/// Runs an entry point: errors become return codes and the thread's last error.
fn guarded(f: impl FnOnce() -> Result<i32, FfiError>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            set_last_error(&e.message);
            e.code
        }
        Err(panic) => {
            set_last_error(&panic_message(&*panic));
            WEFT_E_PANIC
        }
    }
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid during the call.
unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, FfiError> {
    if p.is_null() {
        return Err(FfiError::argument(format!("`{what}` is NULL")));
    }
    // SAFETY: non-NULL, and the caller guarantees a NUL-terminated string valid for the call.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|e| FfiError::argument(format!("`{what}` is not UTF-8: {e}")))
}

/// A (pointer, length) byte argument; NULL is allowed for length 0.
///
/// # Safety
/// When `len > 0`, `p` points to `len` readable bytes that stay valid during the call.
unsafe fn bytes<'a>(p: *const u8, len: usize, what: &str) -> Result<&'a [u8], FfiError> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(FfiError::argument(format!(
            "`{what}` is NULL but its length is {len}"
        )));
    }
    // No buffer is longer (a slice of more is undefined behaviour): a length past it is a
    // caller's bug, a negative number cast to `size_t`, answered as one.
    if isize::try_from(len).is_err() {
        return Err(FfiError::argument(format!(
            "`{what}` has length {len}, longer than any buffer"
        )));
    }
    // SAFETY: non-NULL, at most `isize::MAX` long, and the caller guarantees `len` readable
    // bytes valid for the call.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// # Safety
/// `rt` is NULL or a pointer `weft_open*` returned and `weft_close` has not freed.
unsafe fn runtime<'a>(rt: *const WeftRuntime) -> Result<&'a WeftRuntime, FfiError> {
    if rt.is_null() {
        return Err(FfiError::argument("the runtime pointer is NULL"));
    }
    // SAFETY: a live runtime from `weft_open*` (the caller's contract); only shared
    // references are made, and `WeftRuntime` is `Sync`.
    Ok(unsafe { &*rt })
}

/// # Safety
/// `call` is NULL or points to a `WeftCall` the caller does not touch during the call.
unsafe fn call_mut<'a>(call: *mut WeftCall) -> Result<&'a mut WeftCall, FfiError> {
    if call.is_null() {
        return Err(FfiError::argument("the call pointer is NULL"));
    }
    // SAFETY: non-NULL, properly aligned (the caller allocated a `WeftCall`), and exclusively
    // ours for the duration of the call.
    Ok(unsafe { &mut *call })
}

fn side_of(side: i32) -> Result<Side, FfiError> {
    match side {
        WEFT_SIDE_CLIENT => Ok(Side::Client),
        WEFT_SIDE_SERVER => Ok(Side::Server),
        other => Err(FfiError::argument(format!(
            "side {other} is neither WEFT_SIDE_CLIENT (0) nor WEFT_SIDE_SERVER (1)"
        ))),
    }
}

/// Options from the environment: `WEFT_WATCH_MS` sets the config polling interval
/// (0 turns watching off); `WEFT_SEED` fixes the elements' random streams. (`WEFT_RECORD_BYTES`
/// bounds the record queue: [`open_with`].)
fn options_from_env(records: Option<&Arc<RecordQueue>>) -> Result<EngineOptions, FfiError> {
    let mut o = EngineOptions::default();
    if let Some(q) = records {
        let q = Arc::clone(q);
        o.channels = Some(Arc::new(move |record, method| q.push(record, method)));
    }
    if let Some(ms) = number_from_env::<u64>("WEFT_WATCH_MS", "milliseconds, 0 turns watching off")?
    {
        o.watch_interval = (ms > 0).then(|| std::time::Duration::from_millis(ms));
    }
    o.seed = number_from_env::<u64>("WEFT_SEED", "an unsigned 64-bit integer")?;
    Ok(o)
}

/// The number environment variable `name` holds; `None` when it is unset. A value that is
/// set but not a number refuses the open: ignored, a mistyped `WEFT_WATCH_MS` left watching
/// on at its default, and a mistyped `WEFT_RECORD_BYTES` the default limit, with nothing to
/// say so.
fn number_from_env<T: std::str::FromStr>(
    name: &str,
    expected: &str,
) -> Result<Option<T>, FfiError> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map(Some).map_err(|_| {
            FfiError::argument(format!(
                "environment variable {name} is `{v}`: expected {expected} (unset it for the default)"
            ))
        }),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(FfiError::argument(format!(
            "environment variable {name} is not UTF-8 ({v:?}): expected {expected}"
        ))),
    }
}

fn open_with(
    record_capacity: u32,
    f: impl FnOnce(EngineOptions) -> Result<Engine, FfiError>,
) -> *mut WeftRuntime {
    let mut out = std::ptr::null_mut();
    guarded(|| {
        // Read whether or not records are kept, so a mistyped value is found either way.
        let record_bytes = number_from_env("WEFT_RECORD_BYTES", "a number of bytes")?
            .unwrap_or(crate::records::DEFAULT_MAX_BYTES);
        let records = (record_capacity > 0).then(|| {
            Arc::new(RecordQueue::with_max_bytes(
                record_capacity as usize,
                record_bytes,
            ))
        });
        let engine = f(options_from_env(records.as_ref())?)?;
        out = Box::into_raw(Box::new(WeftRuntime {
            engine,
            records,
            record_collector: Mutex::new(Collector::default()),
            rpcs: HandleTable::new(),
            pending: Pending::default(),
        }));
        Ok(WEFT_OK)
    });
    out
}

/// Opens a runtime for `service` from the `weft.yaml` at `config_path`. NULL on error;
/// `weft_last_error()` says why. With `record_capacity` > 0 the channel records elements
/// emit (`logging`, `metrics`' latencies) are queued, up to that many and up to 64 MiB of
/// the messages they hold (`WEFT_RECORD_BYTES`), for [`weft_records`]; with 0 they are not
/// even built.
///
/// # Safety
/// Both strings are NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_open(
    config_path: *const c_char,
    service: *const c_char,
    record_capacity: u32,
) -> *mut WeftRuntime {
    open_with(record_capacity, |options| {
        // SAFETY: the caller passes NULL or NUL-terminated strings (this function's contract).
        let (path, service) = unsafe {
            (
                c_str(config_path, "config_path")?,
                c_str(service, "service")?,
            )
        };
        Ok(Engine::open(path, service, options)?)
    })
}

/// Opens a runtime from YAML text; relative paths in it are resolved from `base_dir`.
/// `record_capacity` as for [`weft_open`].
///
/// # Safety
/// Every string is NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_open_yaml(
    yaml: *const c_char,
    base_dir: *const c_char,
    service: *const c_char,
    record_capacity: u32,
) -> *mut WeftRuntime {
    open_with(record_capacity, |options| {
        // SAFETY: the caller passes NULL or NUL-terminated strings (this function's contract).
        let (yaml, dir, service) = unsafe {
            (
                c_str(yaml, "yaml")?,
                c_str(base_dir, "base_dir")?,
                c_str(service, "service")?,
            )
        };
        Ok(Engine::open_yaml(yaml, dir, service, options)?)
    })
}

/// Re-reads the config; on error the old version keeps running and the error is returned.
///
/// # Safety
/// `rt` is NULL or a live runtime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_reload(rt: *mut WeftRuntime) -> i32 {
    guarded(|| {
        // SAFETY: the caller passes NULL or a live runtime.
        let rt = unsafe { runtime(rt)? };
        rt.engine.reload()?;
        Ok(WEFT_OK)
    })
}

/// Installs a config given as YAML text (later reloads use it); on error the old version
/// keeps running.
///
/// # Safety
/// `rt` is NULL or a live runtime; the strings are NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_reload_yaml(
    rt: *mut WeftRuntime,
    yaml: *const c_char,
    base_dir: *const c_char,
) -> i32 {
    guarded(|| {
        // SAFETY: the caller passes NULL or a live runtime and NULL or NUL-terminated strings.
        let (rt, yaml, dir) = unsafe {
            (
                runtime(rt)?,
                c_str(yaml, "yaml")?,
                c_str(base_dir, "base_dir")?,
            )
        };
        rt.engine.reload_yaml(yaml, dir)?;
        Ok(WEFT_OK)
    })
}

/// The inputs every call has; the metadata still encoded, to be decoded once the engine
/// knows which keys the chain observes.
struct CallInput<'a> {
    method: &'a str,
    metadata: &'a [u8],
    message: &'a [u8],
}

/// # Safety
/// The pointers in `call` satisfy the `WeftCall` contract (readable for their lengths).
unsafe fn read_input<'a>(call: &WeftCall) -> Result<CallInput<'a>, FfiError> {
    // SAFETY: the caller guarantees each (pointer, length) pair is readable for the call.
    let (method, metadata, message) = unsafe {
        (
            bytes(call.method, call.method_len, "method")?,
            bytes(call.metadata, call.metadata_len, "metadata")?,
            bytes(call.message, call.message_len, "message")?,
        )
    };
    let method =
        utf8(method).map_err(|e| FfiError::argument(format!("`method` is not UTF-8: {e}")))?;
    Ok(CallInput {
        method,
        metadata,
        message,
    })
}

fn decode_metadata<'a>(bytes: &'a [u8], keys: Option<&[String]>) -> Result<Decoded<'a>, FfiError> {
    let keys = keys.map_or(Keys::All, Keys::Only);
    metadata::decode(bytes, keys).map_err(FfiError::argument)
}

/// Decodes a call's metadata for the keys its segment's elements observe. When they observe
/// none (a server running `metrics` or `logging`), nothing is decoded and every entry passes
/// through: the bytes are returned, and the list of entries is made only for a verdict that
/// writes metadata back ([`write_verdict`]).
fn call_metadata<'a>(
    bytes: &'a [u8],
    keys: Option<&[String]>,
) -> Result<(Decoded<'a>, Option<&'a [u8]>), FfiError> {
    if keys.is_some_and(<[String]>::is_empty) {
        return Ok((Decoded::default(), Some(bytes)));
    }
    Ok((decode_metadata(bytes, keys)?, None))
}

/// Runs the request path. See the contract for the verdicts and `rpc`.
///
/// # Safety
/// `rt` is NULL or a live runtime; `call` is NULL or a valid `WeftCall` whose input pointers
/// are readable and whose output buffers are writable for their `cap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_request(rt: *mut WeftRuntime, side: i32, call: *mut WeftCall) -> i32 {
    guarded(|| {
        let key = call as usize;
        // SAFETY: the caller passes NULL or a live runtime and a valid, exclusive call.
        let (rt, call) = unsafe { (runtime(rt)?, call_mut(call)?) };
        rt.pending.forget_stale(key);
        call.rpc = 0;
        let side = side_of(side)?;
        // SAFETY: the call's input pointers are readable (this function's contract).
        let input = unsafe { read_input(call)? };
        let stamp = metadata::find(input.metadata, VERSION_HEADER).map_err(FfiError::argument)?;
        let prepared = match rt.engine.prepare_if_covered(side, input.method, stamp) {
            Ok(Some(prepared)) => prepared,
            Ok(None) => return Ok(no_edge_answer(&rt.engine, side, input.method)),
            Err(e @ EngineError::UnknownCaller { .. }) => {
                return refuse_caller(rt, call, e, "pass the complete metadata");
            }
            Err(e) => return Err(e.into()),
        };
        keys_of_this_version(call, &prepared, "pass the complete metadata")?;
        let (metadata, undecoded) = call_metadata(input.metadata, prepared.visible_keys())?;
        let out = rt
            .engine
            .run_request_from(prepared, metadata.visible, input.message)?;
        let rc = write_verdict(
            rt,
            call,
            &out.verdict,
            (&metadata.passthrough, &metadata.seen),
            undecoded,
        )?;
        // Handed out only once the call succeeds: after an error (or a panic, which drops
        // it) the caller has no handle to answer, so the RPC ends here as cancelled.
        if let Some(rpc) = out.rpc {
            call.rpc = rt.rpcs.insert(rpc);
        }
        engine::recycle(out.verdict);
        Ok(rc)
    })
}

/// Runs the response path of the RPC `call.rpc` in the version its request ran in.
///
/// # Safety
/// As [`weft_request`]; `status_message` is readable for `status_message_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_response(
    rt: *mut WeftRuntime,
    side: i32,
    call: *mut WeftCall,
) -> i32 {
    guarded(|| {
        let key = call as usize;
        // SAFETY: the caller passes NULL or a live runtime and a valid, exclusive call.
        let (rt, call) = unsafe { (runtime(rt)?, call_mut(call)?) };
        rt.pending.forget_stale(key);
        side_of(side)?;
        // SAFETY: the call's input pointers are readable (this function's contract).
        let input = unsafe { read_input(call)? };
        // SAFETY: as above, for the status message.
        let status_message = unsafe {
            bytes(
                call.status_message,
                call.status_message_len,
                "status_message",
            )?
        };
        // Checked before the handle is taken, so a bad encoding leaves the RPC answerable.
        metadata::find(input.metadata, VERSION_HEADER).map_err(FfiError::argument)?;
        let Some(rpc) = rt.rpcs.take(call.rpc) else {
            return Err(FfiError::argument(format!(
                "unknown rpc handle {} (0, already answered, abandoned, or from another runtime)",
                call.rpc
            )));
        };
        let (metadata, undecoded) = call_metadata(input.metadata, rpc.visible_keys())?;
        let out = match call.status_code {
            0 => rt
                .engine
                .process_response_from(rpc, metadata.visible, input.message)?,
            n => {
                let response = error_response(n, status_message, metadata.visible);
                rt.engine.process_response(rpc, response)?
            }
        };
        let rc = write_verdict(
            rt,
            call,
            &out.verdict,
            (&metadata.passthrough, &metadata.seen),
            undecoded,
        );
        engine::recycle(out.verdict);
        rc
    })
}

/// A server RPC whose request path waited for its response (`WEFT_DEFERRABLE_REQUEST`):
/// runs the request path as it would have run `request_age_ns` nanoseconds ago, when the
/// request arrived, then the response path, and answers as `weft_response` does. `call`
/// holds the response as for `weft_response` (`rpc` is ignored); `stamp` is the request's
/// `weft-version` value, if it had one (`stamp_len` 0 if not). When the version the RPC
/// runs in cannot wait, or is not the one whose keys `metadata_keys_version` names (a reload
/// since `weft_metadata_keys`), returns `WEFT_E_METADATA` and nothing has run: call
/// `weft_request` with the request, then `weft_response`. When it
/// has no server chain for the method at all (a reload removed it), returns
/// `WEFT_E_NO_EDGE`, having run nothing: the response passes as without Weft.
///
/// # Safety
/// As [`weft_response`]; `stamp` is readable for `stamp_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_server_exchange(
    rt: *mut WeftRuntime,
    call: *mut WeftCall,
    stamp: *const u8,
    stamp_len: usize,
    request_age_ns: u64,
) -> i32 {
    guarded(|| {
        let key = call as usize;
        // SAFETY: the caller passes NULL or a live runtime and a valid, exclusive call.
        let (rt, call) = unsafe { (runtime(rt)?, call_mut(call)?) };
        rt.pending.forget_stale(key);
        call.rpc = 0;
        // SAFETY: the call's input pointers, the status message and the stamp are readable
        // (this function's contract).
        let (input, status_message, stamp) = unsafe {
            (
                read_input(call)?,
                bytes(
                    call.status_message,
                    call.status_message_len,
                    "status_message",
                )?,
                bytes(stamp, stamp_len, "stamp")?,
            )
        };
        let stamp = match stamp {
            [] => None,
            s => Some(
                utf8(s).map_err(|e| FfiError::argument(format!("`stamp` is not UTF-8: {e}")))?,
            ),
        };
        // The stamp comes in its own argument, but the encoding is checked as
        // `weft_request` checks it, before anything else: a chain that observes no header
        // never decodes the metadata, and `write_verdict` relies on it being valid.
        metadata::find(input.metadata, VERSION_HEADER).map_err(FfiError::argument)?;
        let prepared = match rt
            .engine
            .prepare_if_covered(Side::Server, input.method, stamp)
        {
            Ok(Some(prepared)) => prepared,
            Ok(None) => return Ok(no_edge_answer(&rt.engine, Side::Server, input.method)),
            Err(e @ EngineError::UnknownCaller { .. }) => {
                return refuse_caller(rt, call, e, "run the request path, then the response path");
            }
            Err(e) => return Err(e.into()),
        };
        // Without the request message, perhaps without the response, with only some headers:
        // another version, even one that can wait too, may read more.
        keys_of_this_version(
            call,
            &prepared,
            "run the request path, then the response path",
        )?;
        let (metadata, undecoded) = call_metadata(input.metadata, prepared.visible_keys())?;
        let age = Duration::from_nanos(request_age_ns);
        let out = match call.status_code {
            0 => rt
                .engine
                .exchange_from(prepared, age, metadata.visible, input.message)?,
            n => {
                let response = error_response(n, status_message, metadata.visible);
                rt.engine.exchange(prepared, age, response)?
            }
        };
        let rc = write_verdict(
            rt,
            call,
            &out.verdict,
            (&metadata.passthrough, &metadata.seen),
            undecoded,
        );
        engine::recycle(out.verdict);
        rc
    })
}

/// Answers a request whose stamp names none of the services with an edge into its method
/// with PERMISSION_DENIED, as a rejection verdict. Keys of another version would not have
/// left the stamp out (every version reads it), but that version may run the method with one
/// edge, which needs no caller: so `WEFT_E_METADATA` then, as for any RPC that runs in
/// another version than the keys' (`then` says what to do).
fn refuse_caller(
    rt: &WeftRuntime,
    call: &mut WeftCall,
    error: EngineError,
    then: &str,
) -> Result<i32, FfiError> {
    if let EngineError::UnknownCaller { version, .. } = &error {
        keys_of_version(call, *version, then)?;
    }
    let out = rt.engine.refuse_caller(error);
    let rc = write_verdict(rt, call, &out.verdict, (&[], &metadata::Seen::new()), None);
    engine::recycle(out.verdict);
    rc
}

/// `WEFT_E_METADATA` when the call's inputs were shaped by the keys of another version than
/// the one the RPC runs in (`metadata_keys_version`, 0 when complete): that version may
/// observe what the caller left out, so nothing runs on them. `then` says what to do.
fn keys_of_this_version(call: &WeftCall, prepared: &Prepared, then: &str) -> Result<(), FfiError> {
    keys_of_version(call, prepared.version(), then)
}

/// [`keys_of_this_version`] for an RPC that runs in `version`.
fn keys_of_version(call: &WeftCall, version: u64, then: &str) -> Result<(), FfiError> {
    let keys = call.metadata_keys_version;
    if keys == 0 || keys == version {
        return Ok(());
    }
    Err(FfiError {
        code: WEFT_E_METADATA,
        message: format!(
            "the call holds what version {keys} observes, but this RPC runs in version {version}: {then}"
        ),
    })
}

/// The server's error status as a response; an unknown code is UNKNOWN, as gRPC maps it.
fn error_response(code: i32, message: &[u8], metadata: Metadata) -> ServerResponse {
    ServerResponse::Error {
        code: u32::try_from(code)
            .ok()
            .and_then(Code::from_number)
            .unwrap_or(Code::Unknown),
        message: String::from_utf8_lossy(message).into_owned(),
        metadata,
    }
}

/// After `WEFT_E_BUFFER`: copies the outputs the call kept into the (now bigger) buffers.
///
/// # Safety
/// `rt` is NULL or a live runtime; `call` is the same `WeftCall` that returned
/// `WEFT_E_BUFFER`, its output buffers writable for their `cap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_call_output(rt: *mut WeftRuntime, call: *mut WeftCall) -> i32 {
    guarded(|| {
        let key = call as usize;
        // SAFETY: the caller passes NULL or a live runtime and a valid, exclusive call.
        let (rt, call) = unsafe { (runtime(rt)?, call_mut(call)?) };
        let pending = rt.pending.lock();
        let Some(p) = pending.get(&key) else {
            return Err(FfiError::argument(
                "this call has no pending output (weft_call_output follows a WEFT_E_BUFFER on the same WeftCall)",
            ));
        };
        let fits = fits(&call.out_message, p.message.as_deref())
            & fits(&call.out_metadata, p.metadata.as_deref())
            & fits(&call.route, p.route.as_deref());
        if !fits {
            // As after the call that kept them: each `len` says the size needed.
            call.out_message.len = p.message.as_ref().map_or(0, Vec::len);
            call.out_metadata.len = p.metadata.as_ref().map_or(0, Vec::len);
            call.route.len = p.route.as_ref().map_or(0, Vec::len);
            set_last_error(
                "an output buffer is still too small: each WeftBuf.len holds the size needed",
            );
            return Ok(WEFT_E_BUFFER);
        }
        // SAFETY: every buffer was checked to hold its output; the caller guarantees each is
        // writable for its `cap`.
        unsafe {
            copy_out(&mut call.out_message, p.message.as_deref());
            copy_out(&mut call.out_metadata, p.metadata.as_deref());
            copy_out(&mut call.route, p.route.as_deref());
        }
        drop(pending);
        rt.pending.remove(key);
        Ok(WEFT_OK)
    })
}

/// Forgets an RPC whose request was forwarded but whose response will never come
/// (cancelled); its elements' per-RPC scratch ends and its version may be freed.
///
/// # Safety
/// `rt` is NULL or a live runtime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_rpc_abandon(rt: *mut WeftRuntime, rpc: u64) {
    guarded(|| {
        // SAFETY: the caller passes NULL or a live runtime.
        let rt = unsafe { runtime(rt)? };
        drop(rt.rpcs.take(rpc));
        Ok(WEFT_OK)
    });
}

/// The metadata keys the current version's chain observes for `method` on `side`, for
/// callers that would rather not pass all of it: `out` gets them as repeated
/// `{u32 LE key_len, key}`, `*version` the version they belong to (0 when the chain observes
/// every key: pass the complete metadata). Pass that version as the `WeftCall`'s
/// `metadata_keys_version`. `WEFT_E_BUFFER` sets `out.len` to the size needed.
///
/// `*messages` (when `messages` is not NULL) gets `WEFT_OBSERVES_REQUEST_MESSAGE` if the
/// request handlers can observe the request message, and `WEFT_OBSERVES_RESPONSE_MESSAGE` if
/// the response handlers can observe the response; both when `*version` is 0. A caller that
/// sets `metadata_keys_version` may pass `message_len` 0 for a direction whose bit is clear:
/// the chain reads nothing of it, and a forward verdict then has `message_changed` 0.
/// `*messages` also gets `WEFT_DEFERRABLE_REQUEST` when the request path can wait for the
/// response (`weft_server_exchange`), and `stamp` (when not NULL) the version's
/// `weft-version` stamp, `WEFT_STAMP_LEN` bytes, which a request must carry to be deferred.
///
/// # Safety
/// `rt` is NULL or a live runtime; `method` is readable for `method_len` bytes; `out` and
/// `version` are NULL or valid, `out`'s buffer writable for its `cap`; `messages` is NULL or
/// valid; `stamp` is NULL or writable for `WEFT_STAMP_LEN` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_metadata_keys(
    rt: *const WeftRuntime,
    side: i32,
    method: *const u8,
    method_len: usize,
    out: *mut WeftBuf,
    version: *mut u64,
    messages: *mut u32,
    stamp: *mut u8,
) -> i32 {
    guarded(|| {
        // SAFETY: the caller passes NULL or a live runtime and a readable method name.
        let (rt, method) = unsafe { (runtime(rt)?, bytes(method, method_len, "method")?) };
        let method =
            utf8(method).map_err(|e| FfiError::argument(format!("`method` is not UTF-8: {e}")))?;
        if out.is_null() || version.is_null() {
            return Err(FfiError::argument("`out` or `version` is NULL"));
        }
        // SAFETY: both non-NULL, valid and exclusively ours for the call (the contract).
        let (out, version) = unsafe { (&mut *out, &mut *version) };
        let side = side_of(side)?;
        let prepared = match rt.engine.prepare_if_covered(side, method, None) {
            Ok(Some(prepared)) => prepared,
            Ok(None) => return Ok(no_edge_answer(&rt.engine, side, method)),
            Err(EngineError::UnknownCaller { .. }) => {
                // Edges from several services lead into the method, each observing its own
                // keys; which one runs depends on the service the request's stamp names.
                // Everything is
                // passed, and the request path cannot wait: a binding defers only with the
                // keys of a version (`*version` not 0).
                if !messages.is_null() {
                    // SAFETY: non-NULL and valid for the call (the contract).
                    unsafe {
                        *messages = WEFT_OBSERVES_REQUEST_MESSAGE | WEFT_OBSERVES_RESPONSE_MESSAGE
                    };
                }
                if !stamp.is_null() {
                    // SAFETY: non-NULL and writable for WEFT_STAMP_LEN bytes (the contract).
                    unsafe { write_stamp(&rt.engine.digest(), stamp)? };
                }
                out.len = 0;
                *version = 0;
                return Ok(WEFT_OK);
            }
            Err(e) => return Err(e.into()),
        };
        let keys = prepared.header_keys();
        if !messages.is_null() {
            let [request, response] = prepared.message_observed();
            let bit = |set: bool, bit: u32| if set { bit } else { 0 };
            let observed = match keys {
                Some(_) => {
                    bit(request, WEFT_OBSERVES_REQUEST_MESSAGE)
                        | bit(response, WEFT_OBSERVES_RESPONSE_MESSAGE)
                }
                None => WEFT_OBSERVES_REQUEST_MESSAGE | WEFT_OBSERVES_RESPONSE_MESSAGE,
            };
            let deferrable = bit(prepared.request_deferrable(), WEFT_DEFERRABLE_REQUEST);
            // SAFETY: non-NULL and valid for the call (the contract).
            unsafe { *messages = observed | deferrable };
        }
        if !stamp.is_null() {
            // SAFETY: non-NULL and writable for WEFT_STAMP_LEN bytes (the contract).
            unsafe { write_stamp(prepared.digest(), stamp)? };
        }
        let Some(keys) = keys else {
            out.len = 0;
            *version = 0;
            return Ok(WEFT_OK);
        };
        let mut encoded = Vec::with_capacity(keys.iter().map(|k| 4 + k.len()).sum());
        for k in keys {
            encoded.extend_from_slice(&(k.len() as u32).to_le_bytes());
            encoded.extend_from_slice(k.as_bytes());
        }
        *version = prepared.version();
        if !fits(out, Some(&encoded)) {
            out.len = encoded.len();
            return Ok(WEFT_E_BUFFER);
        }
        // SAFETY: the list fits (checked above); the caller guarantees `out` is writable for
        // its `cap`.
        unsafe { copy_out(out, Some(&encoded)) };
        Ok(WEFT_OK)
    })
}

/// Copies a version's `weft-version` stamp to `out`.
///
/// # Safety
/// `out` is writable for `WEFT_STAMP_LEN` bytes.
unsafe fn write_stamp(digest: &str, out: *mut u8) -> Result<(), FfiError> {
    if digest.len() != WEFT_STAMP_LEN {
        return Err(FfiError::argument(format!(
            "the version's stamp `{digest}` is not {WEFT_STAMP_LEN} bytes long"
        )));
    }
    // SAFETY: writable for WEFT_STAMP_LEN bytes (this function's contract), which cannot
    // overlap the digest, a string of the engine's.
    unsafe { std::ptr::copy_nonoverlapping(digest.as_ptr(), out, WEFT_STAMP_LEN) };
    Ok(())
}

/// How the config watcher's last reload went: `WEFT_OK` when it has not reloaded, or its
/// last reload installed a version or found nothing changed, or a `weft_reload` /
/// `weft_reload_yaml` has succeeded since; `WEFT_E_CONFIG` when it failed (the running
/// version stayed), with the diagnostic in `weft_last_error()`. Nothing else
/// tells an application that an edit of its config was refused.
///
/// # Safety
/// `rt` is NULL or a live runtime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_watch_result(rt: *const WeftRuntime) -> i32 {
    guarded(|| {
        // SAFETY: the caller passes NULL or a live runtime.
        let rt = unsafe { runtime(rt)? };
        match rt.engine.last_watch_result() {
            Some(Err(message)) => Err(FfiError {
                code: WEFT_E_CONFIG,
                message,
            }),
            _ => Ok(WEFT_OK),
        }
    })
}

/// The active config version's local install number (1, 2, …); 0 for NULL.
///
/// # Safety
/// `rt` is NULL or a live runtime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_version(rt: *const WeftRuntime) -> u64 {
    let mut v = 0;
    guarded(|| {
        // SAFETY: the caller passes NULL or a live runtime.
        v = unsafe { runtime(rt)? }.engine.version();
        Ok(WEFT_OK)
    });
    v
}

/// The address of a word holding the active version's install number (as `weft_version`
/// returns it), updated by every install, reloads by the file watcher included: a binding
/// that caches what a version told it (`weft_metadata_keys`) reads it with an atomic load
/// on each RPC to notice a reload without a library call. The word stays valid for the
/// life of the process, after `weft_close` too (it then keeps the last version's number);
/// call this once per runtime, since each call keeps one more reference to it. NULL for
/// NULL.
///
/// # Safety
/// `rt` is NULL or a live runtime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_version_word(rt: *const WeftRuntime) -> *const u64 {
    let mut word = std::ptr::null();
    guarded(|| {
        // SAFETY: the caller passes NULL or a live runtime.
        let engine = &unsafe { runtime(rt)? }.engine;
        // The reference is never given back, so the word outlives the runtime. `AtomicU64`
        // has the size and alignment of `u64`.
        word = Arc::into_raw(engine.version_word()).cast::<u64>();
        Ok(WEFT_OK)
    });
    word
}

/// The `weft-version` stamp to give a client call that `weft_request` answered with
/// `WEFT_E_NO_EDGE`: `/<service>`, an empty digest (no chain ran here) and this runtime's
/// service. A server into whose method edges from several services lead picks the edge by
/// the service, and refuses a request that names none; with this, a caller whose config
/// does not have its edge yet is still known. A call whose metadata has a `weft-version`
/// already (an application that copies its incoming metadata passes its caller's on, which
/// names a service whose client side did not run for this call) keeps that stamp's digest,
/// the part before its first `/`, followed by this (`<digest>/<service>`): the service is
/// replaced, as `weft_request` replaces it on a call it runs a chain for, and the server
/// runs the version the caller's caller ran while it has it. It is the same for the life
/// of the runtime: ask once. `out.len` 0 when the service cannot be named in a header (not
/// printable ASCII): then keep only the digest of a `weft-version` the call has.
/// `WEFT_E_BUFFER` sets `out.len` to the size needed.
///
/// # Safety
/// `rt` is NULL or a live runtime; `out` is NULL or valid, its buffer writable for its `cap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_caller_stamp(rt: *const WeftRuntime, out: *mut WeftBuf) -> i32 {
    // SAFETY: the caller's contract is `runtime_text`'s.
    unsafe { runtime_text(rt, out, |rt| rt.engine.caller_stamp()) }
}

/// A text of the runtime (`None`: nothing, `out.len` 0) copied into `out`, or
/// `WEFT_E_BUFFER` with `out.len` set to the size needed.
///
/// # Safety
/// `rt` is NULL or a live runtime; `out` is NULL or valid, its buffer writable for its `cap`.
unsafe fn runtime_text(
    rt: *const WeftRuntime,
    out: *mut WeftBuf,
    text: impl FnOnce(&WeftRuntime) -> Option<String>,
) -> i32 {
    guarded(|| {
        // SAFETY: the caller passes NULL or a live runtime.
        let rt = unsafe { runtime(rt)? };
        if out.is_null() {
            return Err(FfiError::argument("`out` is NULL"));
        }
        // SAFETY: non-NULL, valid and exclusively ours for the call (the contract).
        let out = unsafe { &mut *out };
        let text = text(rt);
        let text = text.as_deref().map(str::as_bytes);
        if !fits(out, text) {
            out.len = text.map_or(0, <[u8]>::len);
            return Ok(WEFT_E_BUFFER);
        }
        // SAFETY: the text fits (checked above); the caller guarantees `out` is writable
        // for its `cap`.
        unsafe { copy_out(out, text) };
        Ok(WEFT_OK)
    })
}

/// What loading the runtime's current version warned of, as `weft check --config` prints
/// it (a place in the config or an element, the line, carets, a hint; one or more lines per
/// warning), for the binding to log after `weft_open` and each reload: the version runs
/// either way. `out.len` 0 when there is nothing to say. `WEFT_E_BUFFER` sets `out.len` to
/// the size needed.
///
/// # Safety
/// `rt` is NULL or a live runtime; `out` is NULL or valid, its buffer writable for its `cap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_warnings(rt: *const WeftRuntime, out: *mut WeftBuf) -> i32 {
    // SAFETY: the caller's contract is `runtime_text`'s.
    unsafe { runtime_text(rt, out, |rt| Some(rt.engine.warnings())) }
}

/// The RPCs whose request ran and whose response path has not (nor `weft_rpc_abandon`):
/// requests waiting for their response. A count that only grows points at calls whose end
/// never reaches the runtime. 0 for NULL.
///
/// # Safety
/// `rt` is NULL or a live runtime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_rpcs_waiting(rt: *const WeftRuntime) -> u64 {
    let mut n = 0;
    guarded(|| {
        // SAFETY: the caller passes NULL or a live runtime.
        n = unsafe { runtime(rt)? }.rpcs.len() as u64;
        Ok(WEFT_OK)
    });
    n
}

/// Writes the runtime's gauges to `*out` ([`WeftStats`]). Live versions are
/// `versions_installed - versions_freed`: the current one plus those draining.
///
/// # Safety
/// `rt` is NULL or a live runtime; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_stats(rt: *const WeftRuntime, out: *mut WeftStats) -> i32 {
    guarded(|| {
        // SAFETY: the caller passes NULL or a live runtime.
        let rt = unsafe { runtime(rt)? };
        if out.is_null() {
            return Err(FfiError::argument("`out` is NULL"));
        }
        let v = rt.engine.stats();
        let stats = WeftStats {
            rpcs_waiting: rt.rpcs.len() as u64,
            kept_outputs: rt.pending.count.load(Ordering::Relaxed) as u64,
            records_queued: rt.records.as_ref().map_or(0, |q| q.queued() as u64),
            records_bytes: rt.records.as_ref().map_or(0, |q| q.queued_bytes() as u64),
            versions_installed: v.installed,
            versions_freed: v.freed,
            versions_draining: v.draining as u64,
        };
        // SAFETY: `out` is not NULL, and the caller guarantees it is writable.
        unsafe { out.write(stats) };
        Ok(WEFT_OK)
    })
}

/// Writes the runtime's counters to `*out`: every version's, an element a reload removed
/// included. Waits while a reload installs its version (not while it builds it).
///
/// # Safety
/// `rt` is NULL or a live runtime; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_counters(rt: *const WeftRuntime, out: *mut WeftCounters) -> i32 {
    guarded(|| {
        // SAFETY: the caller passes NULL or a live runtime.
        let rt = unsafe { runtime(rt)? };
        if out.is_null() {
            return Err(FfiError::argument("`out` is NULL"));
        }
        let c = rt.engine.rpc_counters();
        // SAFETY: `out` is not NULL, and the caller guarantees it is writable.
        unsafe {
            out.write(WeftCounters {
                malformed: c.malformed,
                element_errors: c.element_errors,
                iteration_limited: c.iteration_limited,
                unknown_callers: c.unknown_callers,
            });
        }
        Ok(WEFT_OK)
    })
}

/// Moves queued channel records into `out`, oldest first, each encoded as: the element's
/// name and the channel's (each a u32 LE length and UTF-8 bytes), the RPC id (u64 LE), the
/// time in seconds on the runtime's clock (f64 LE), and the value as a u32 LE length and
/// JSON, messages rendered by their method's schema as `weft sim --channels` renders them.
/// Only whole records are written; `out->len` is the number of bytes. When the oldest
/// record alone does not fit, returns `WEFT_E_BUFFER` with `out->len` set to its size and
/// keeps it for the next call.
/// `*dropped` (when not NULL) gets the number of records dropped so far because the queue
/// was full. `WEFT_E_ARGUMENT` when the runtime was opened with `record_capacity` 0.
///
/// # Safety
/// `rt` is NULL or a live runtime; `out` is NULL or a `WeftBuf` whose `ptr` is writable for
/// `cap` bytes; `dropped` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_records(
    rt: *const WeftRuntime,
    out: *mut WeftBuf,
    dropped: *mut u64,
) -> i32 {
    guarded(|| {
        // SAFETY: the caller passes NULL or a live runtime.
        let rt = unsafe { runtime(rt)? };
        if out.is_null() {
            return Err(FfiError::argument("the output buffer is NULL"));
        }
        // SAFETY: non-NULL, and the caller's `WeftBuf`, not touched by it during the call.
        let out = unsafe { &mut *out };
        let Some(queue) = &rt.records else {
            return Err(FfiError::argument(
                "this runtime keeps no channel records: open it with a record_capacity above 0",
            ));
        };
        if !dropped.is_null() {
            // SAFETY: non-NULL and writable (the caller's contract).
            unsafe { *dropped = queue.dropped() };
        }
        let mut collector = rt
            .record_collector
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (ptr, cap) = (out.ptr, capacity(out));
        let mut at = 0;
        let filled = collector.fill(queue, cap, |record| {
            // SAFETY: `fill` hands over at most `cap` bytes in all, so `ptr` is non-NULL and
            // `at + record.len() <= cap`: the bytes lie in the caller's buffer (the WeftBuf
            // contract), which Weft's own buffer cannot overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(record.as_ptr(), ptr.add(at), record.len());
            }
            at += record.len();
        });
        match filled {
            Ok(written) => {
                out.len = written;
                Ok(WEFT_OK)
            }
            Err(needed) => {
                out.len = needed;
                Ok(WEFT_E_BUFFER)
            }
        }
    })
}

/// The message of the last failed call on this thread ("" if none); valid until the next
/// call on this thread.
#[unsafe(no_mangle)]
pub extern "C" fn weft_last_error() -> *const c_char {
    catch_unwind(|| {
        LAST_ERROR.with_borrow_mut(|e| {
            if e.no_edge.pending {
                e.no_edge.pending = false;
                let parts = &e.no_edge;
                let message = EngineError::NoEdge {
                    service: parts.service.clone(),
                    side: parts.side,
                    method: parts.method.clone(),
                }
                .to_string();
                e.text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
            }
            e.text.as_ptr()
        })
    })
    .unwrap_or(c"".as_ptr())
}

/// Closes a runtime: stops its config watcher, drops RPCs still waiting for a response and
/// frees every version. NULL is ignored.
///
/// # Safety
/// `rt` is NULL or a live runtime, not used by any other thread now or afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_close(rt: *mut WeftRuntime) {
    guarded(|| {
        if !rt.is_null() {
            // SAFETY: `rt` came from `Box::into_raw` in `weft_open*` and the caller hands it
            // back exactly once, with no call running on it.
            drop(unsafe { Box::from_raw(rt) });
        }
        Ok(WEFT_OK)
    });
}

/// What a buffer can take: a NULL buffer holds nothing, whatever its `cap` says.
fn capacity(buf: &WeftBuf) -> usize {
    if buf.ptr.is_null() { 0 } else { buf.cap }
}

fn fits(buf: &WeftBuf, out: Option<&[u8]>) -> bool {
    out.is_none_or(|o| o.len() <= capacity(buf))
}

/// Copies `out` into `buf` and sets its length (0 when there is nothing).
///
/// # Safety
/// `out` fits in [`capacity`] of `buf` (so `ptr` is non-NULL when `out` is not empty), and
/// `buf.ptr` is writable for `buf.cap` bytes.
unsafe fn copy_out(buf: &mut WeftBuf, out: Option<&[u8]>) {
    let out = out.unwrap_or(&[]);
    if !out.is_empty() {
        // SAFETY: `out.len() <= cap` (checked by the caller), `ptr` is writable for `cap`
        // bytes (the WeftBuf contract), and caller memory cannot overlap Weft's own.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), buf.ptr, out.len()) };
    }
    buf.len = out.len();
}

/// Fills the call's verdict fields and output buffers, or keeps the outputs for
/// `weft_call_output` when a buffer is too small.
fn write_verdict(
    rt: &WeftRuntime,
    call: &mut WeftCall,
    verdict: &Verdict,
    (passthrough, seen): (&[metadata::Raw<'_>], &metadata::Seen),
    undecoded: Option<&[u8]>,
) -> Result<i32, FfiError> {
    if let Verdict::Forward(f) = verdict
        && !f.message_changed
        && !f.metadata_changed
    {
        // The usual verdict: everything goes on as the caller passed it, nothing to copy.
        call.verdict = WEFT_VERDICT_FORWARD;
        call.code = 0;
        call.message_changed = 0;
        call.metadata_changed = 0;
        call.out_message.len = 0;
        call.out_metadata.len = 0;
        call.route.len = 0;
        return Ok(WEFT_OK);
    }
    let (kind, code, message, metadata, route): (
        i32,
        i32,
        Option<&[u8]>,
        Option<&Metadata>,
        Option<&str>,
    ) = match verdict {
        Verdict::Forward(f) => (
            WEFT_VERDICT_FORWARD,
            0,
            f.message_changed.then_some(f.message.bytes.as_slice()),
            f.metadata_changed.then_some(&f.message.headers),
            None,
        ),
        Verdict::Route { replica, forward } => (
            WEFT_VERDICT_FORWARD,
            0,
            forward
                .message_changed
                .then_some(forward.message.bytes.as_slice()),
            forward.metadata_changed.then_some(&forward.message.headers),
            Some(replica.as_str()),
        ),
        Verdict::Reject { code, message } => (
            WEFT_VERDICT_REJECT,
            code.number() as i32,
            Some(message.as_bytes()),
            None,
            None,
        ),
        Verdict::Reply(m) => (
            WEFT_VERDICT_REPLY,
            0,
            Some(m.bytes.as_slice()),
            (!m.headers.is_empty()).then_some(&m.headers),
            None,
        ),
    };
    call.verdict = kind;
    call.code = code;
    call.message_changed = i32::from(message.is_some());
    call.metadata_changed = i32::from(metadata.is_some());
    // The metadata `call_metadata` left undecoded (all of it passes through), decoded now
    // that it is written back. `metadata::find` checked the encoding, so this cannot fail.
    // A local reply is a response: its metadata is its own headers, and the request's
    // entries that passed through unseen (its `authorization`, say) stay out of it.
    let deferred;
    let passthrough = match undecoded {
        _ if kind == WEFT_VERDICT_REPLY => &[],
        Some(bytes) if metadata.is_some() => {
            deferred = decode_metadata(bytes, Some(&[]))?.passthrough;
            deferred.as_slice()
        }
        _ => passthrough,
    };
    // What the chain wrote supersedes the values elements never saw of those keys.
    let passthrough = match metadata {
        Some(m) => metadata::standing(m, passthrough, seen),
        None => std::borrow::Cow::Borrowed(passthrough),
    };
    let passthrough = passthrough.as_ref();
    let metadata_len = metadata.map(|m| metadata::encoded_len(m, passthrough));
    let route = route.map(str::as_bytes);
    let fit = fits(&call.out_message, message)
        && metadata_len.is_none_or(|n| n <= capacity(&call.out_metadata))
        && fits(&call.route, route);
    if !fit {
        call.out_message.len = message.map_or(0, <[u8]>::len);
        call.out_metadata.len = metadata_len.unwrap_or(0);
        call.route.len = route.map_or(0, <[u8]>::len);
        let outputs = Outputs {
            message: message.map(<[u8]>::to_vec),
            metadata: metadata.map(|m| metadata::encode(m, passthrough)),
            route: route.map(<[u8]>::to_vec),
        };
        rt.pending.keep(call as *mut WeftCall as usize, outputs);
        set_last_error(
            "an output buffer is too small: each WeftBuf.len holds the size needed; grow them and call weft_call_output",
        );
        return Ok(WEFT_E_BUFFER);
    }
    // SAFETY: each output fits its buffer (checked above), and the caller guarantees the
    // buffers are writable for their `cap`.
    unsafe {
        copy_out(&mut call.out_message, message);
        copy_out(&mut call.route, route);
    }
    match (metadata, metadata_len) {
        (Some(m), Some(n)) if n > 0 => {
            // SAFETY: `ptr` is non-NULL and writable for `cap >= n` bytes (checked above; the
            // WeftBuf contract), and nothing else refers to that memory during the call.
            let out = unsafe { std::slice::from_raw_parts_mut(call.out_metadata.ptr, n) };
            call.out_metadata.len = metadata::encode_into(m, passthrough, out);
        }
        _ => call.out_metadata.len = 0,
    }
    Ok(WEFT_OK)
}

#[cfg(test)]
mod tests {
    // A failed unwrap is a failed test.
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use weft_hostcalls::Message;

    use super::*;
    use crate::engine::Forwarded;
    use crate::records::Decoded;

    const SERVER_METRICS: &str = "protos: [echo.proto]
edges:
  frontend->echo:
    from: frontend
    to: echo
    method: echo.Echo/Say
    server:
      - metrics
";

    fn entry(out: &mut Vec<u8>, k: &str, v: &[u8]) {
        for s in [k.as_bytes(), v] {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s);
        }
    }

    /// Every entry of an encoding in order, as (key, raw value).
    fn entries(mut bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        let next = |b: &mut &[u8]| {
            let (len, rest) = b.split_at(4);
            let n = u32::from_le_bytes(len.try_into().unwrap()) as usize;
            let (item, rest) = rest.split_at(n);
            *b = rest;
            item.to_vec()
        };
        while !bytes.is_empty() {
            let k = next(&mut bytes);
            let v = next(&mut bytes);
            out.push((String::from_utf8(k).unwrap(), v));
        }
        out
    }

    fn open_server() -> *mut WeftRuntime {
        let yaml = CString::new(SERVER_METRICS).unwrap();
        let base = CString::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/echo")).unwrap();
        // SAFETY: NUL-terminated strings that outlive the call.
        let rt = unsafe { weft_open_yaml(yaml.as_ptr(), base.as_ptr(), c"echo".as_ptr(), 0) };
        assert!(!rt.is_null());
        rt
    }

    #[test]
    fn metadata_left_undecoded_comes_back_whole_when_a_verdict_writes_metadata() {
        // `metrics` observes no key, so a server leaves the metadata undecoded. A verdict that
        // writes metadata back (a forward with new metadata) must still carry every entry, the
        // non-UTF-8 one included; a local reply carries only its own headers.
        let rt = open_server();
        let mut md = Vec::new();
        entry(&mut md, "weft-version", b"from-the-client");
        entry(&mut md, "trace-bin", &[0xff, 0x00]);
        let (keys, undecoded) = call_metadata(&md, Some(&[])).unwrap();
        assert_eq!(undecoded, Some(md.as_slice()));
        assert!(keys.visible.is_empty() && keys.passthrough.is_empty());

        let mut reply = Message::response(b"\n\x02hi".to_vec());
        reply.headers.insert("x-cache".into(), "hit".into());
        let (mut m, mut meta) = (vec![0u8; 64], vec![0u8; 128]);
        let mut call = WeftCall {
            out_message: WeftBuf::over(&mut m),
            out_metadata: WeftBuf::over(&mut meta),
            ..WeftCall::default()
        };
        // SAFETY: `rt` is live and used by this thread only.
        let runtime = unsafe { runtime(rt) }.unwrap();
        let reply = Arc::new(reply);
        let mut forwarded = Message::request(Vec::new());
        forwarded.headers = reply.headers.clone();
        let forward = Verdict::Forward(Forwarded {
            message: Arc::new(forwarded),
            message_changed: false,
            metadata_changed: true,
        });
        let rc = write_verdict(
            runtime,
            &mut call,
            &forward,
            (&[], &Default::default()),
            undecoded,
        )
        .unwrap();
        assert_eq!(rc, WEFT_OK);
        assert_eq!(call.metadata_changed, 1);
        let mut back = entries(&meta[..call.out_metadata.len]);
        back.sort();
        assert_eq!(
            back,
            vec![
                ("trace-bin".to_owned(), vec![0xff, 0x00]),
                ("weft-version".to_owned(), b"from-the-client".to_vec()),
                ("x-cache".to_owned(), b"hit".to_vec()),
            ]
        );

        let rc = write_verdict(
            runtime,
            &mut call,
            &Verdict::Reply(reply),
            (&[], &Default::default()),
            undecoded,
        )
        .unwrap();
        assert_eq!(rc, WEFT_OK);
        assert_eq!(call.metadata_changed, 1);
        assert_eq!(
            entries(&meta[..call.out_metadata.len]),
            vec![("x-cache".to_owned(), b"hit".to_vec())],
            "the request's entries must not come back as the reply's headers"
        );

        // A forward that changes nothing writes no metadata, so nothing is decoded.
        assert_eq!(server_request(rt, &md), (WEFT_OK, 0));
        // SAFETY: the runtime is live and no call is in flight.
        unsafe { weft_close(rt) };
    }

    /// `weft_metadata_keys` for the server side of the echo edge running `server`:
    /// (version, messages).
    fn observed_on_server(server: &str) -> (u64, u32) {
        let yaml = SERVER_METRICS.replace("- metrics", server);
        let yaml = CString::new(yaml).unwrap();
        let base = CString::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/echo")).unwrap();
        // SAFETY: NUL-terminated strings that outlive the call.
        let rt = unsafe { weft_open_yaml(yaml.as_ptr(), base.as_ptr(), c"echo".as_ptr(), 0) };
        assert!(!rt.is_null());
        let method = b"/echo.Echo/Say";
        let mut keys = vec![0u8; 256];
        let (mut out, mut version, mut messages) = (WeftBuf::over(&mut keys), 7u64, 99u32);
        // SAFETY: a live runtime, a readable method name and valid out-pointers.
        let rc = unsafe {
            weft_metadata_keys(
                rt,
                WEFT_SIDE_SERVER,
                method.as_ptr(),
                method.len(),
                &mut out,
                &mut version,
                &mut messages,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(rc, WEFT_OK);
        // SAFETY: the runtime is live and no call is in flight.
        unsafe { weft_close(rt) };
        (version, messages)
    }

    #[test]
    fn metadata_keys_say_which_messages_the_chain_observes() {
        let both = WEFT_OBSERVES_REQUEST_MESSAGE | WEFT_OBSERVES_RESPONSE_MESSAGE;
        // metrics reads the time, the status and its scratch: no message, and its request
        // path, which only reads the clock, can wait for the response.
        let (version, messages) = observed_on_server("- metrics");
        assert_ne!(version, 0);
        assert_eq!(messages, WEFT_DEFERRABLE_REQUEST);
        // A firewall reads a request field.
        let (version, messages) = observed_on_server("- firewall: {field: user, deny: [mallory]}");
        assert_ne!(version, 0);
        assert_eq!(messages, WEFT_OBSERVES_REQUEST_MESSAGE);
        // logging sends messages whole: every key and both messages.
        assert_eq!(observed_on_server("- logging"), (0, both));
    }

    #[test]
    fn a_message_the_chain_cannot_observe_may_be_left_out() {
        let rt = open_server();
        let (version, messages) = observed_on_server("- metrics");
        assert_eq!(
            messages & (WEFT_OBSERVES_REQUEST_MESSAGE | WEFT_OBSERVES_RESPONSE_MESSAGE),
            0
        );
        let mut md = Vec::new();
        entry(&mut md, "weft-version", b"from-the-client");
        // Both runtimes were built from the same config, so their first versions agree.
        let request = run_call(rt, WEFT_SIDE_SERVER, 0, &md, version, &[]);
        assert_eq!(request.rc, WEFT_OK);
        assert_eq!(
            (request.verdict, request.message_changed),
            (WEFT_VERDICT_FORWARD, 0)
        );
        assert_ne!(request.rpc, 0, "metrics waits for the response");
        let response = run_call(rt, WEFT_SIDE_SERVER, request.rpc, &[], version, &[]);
        assert_eq!(response.rc, WEFT_OK);
        assert_eq!(
            (response.verdict, response.message_changed),
            (WEFT_VERDICT_FORWARD, 0)
        );
        // SAFETY: the runtime is live and no call is in flight.
        unsafe { weft_close(rt) };
    }

    #[test]
    fn waiting_rpcs_count_requests_until_their_response_or_abandonment() {
        let rt = open_server();
        let (version, _) = observed_on_server("- metrics");
        let mut md = Vec::new();
        entry(&mut md, "weft-version", b"from-the-client");
        // SAFETY (each `weft_rpcs_waiting` below): a live runtime.
        let waiting = || unsafe { weft_rpcs_waiting(rt) };
        let first = run_call(rt, WEFT_SIDE_SERVER, 0, &md, version, &[]);
        let second = run_call(rt, WEFT_SIDE_SERVER, 0, &md, version, &[]);
        assert_eq!((first.rc, second.rc), (WEFT_OK, WEFT_OK));
        assert_eq!(waiting(), 2);
        let response = run_call(rt, WEFT_SIDE_SERVER, first.rpc, &[], version, &[]);
        assert_eq!(response.rc, WEFT_OK);
        assert_eq!(waiting(), 1);
        // SAFETY: a live runtime; the handle came from this runtime's request.
        unsafe { weft_rpc_abandon(rt, second.rpc) };
        assert_eq!(waiting(), 0);
        // SAFETY: NULL is allowed.
        assert_eq!(unsafe { weft_rpcs_waiting(std::ptr::null()) }, 0);
        // SAFETY: the runtime is live and no call is in flight.
        unsafe { weft_close(rt) };
    }

    /// What one call returned, copied out of its `WeftCall`.
    struct Outcome {
        rc: i32,
        rpc: u64,
        verdict: i32,
        message_changed: i32,
        metadata_changed: i32,
        metadata: Vec<(String, Vec<u8>)>,
    }

    /// `weft_request` (`rpc` 0) or `weft_response` (the request's handle) for
    /// `echo.Echo/Say` on `side`.
    fn run_call(
        rt: *mut WeftRuntime,
        side: i32,
        rpc: u64,
        md: &[u8],
        keys_version: u64,
        message: &[u8],
    ) -> Outcome {
        let method = b"/echo.Echo/Say";
        let (mut m, mut meta, mut route) = (vec![0u8; 64], vec![0u8; 256], vec![0u8; 16]);
        let mut call = WeftCall {
            method: method.as_ptr(),
            method_len: method.len(),
            metadata: md.as_ptr(),
            metadata_len: md.len(),
            message: message.as_ptr(),
            message_len: message.len(),
            rpc,
            metadata_keys_version: keys_version,
            out_message: WeftBuf::over(&mut m),
            out_metadata: WeftBuf::over(&mut meta),
            route: WeftBuf::over(&mut route),
            ..WeftCall::default()
        };
        // SAFETY: a live runtime and a call whose pointers are valid for their lengths.
        let rc = unsafe {
            if rpc == 0 {
                weft_request(rt, side, &mut call)
            } else {
                weft_response(rt, side, &mut call)
            }
        };
        Outcome {
            rc,
            rpc: call.rpc,
            verdict: call.verdict,
            message_changed: call.message_changed,
            metadata_changed: call.metadata_changed,
            metadata: entries(&meta[..call.out_metadata.len]),
        }
    }

    /// A client request with metadata `md`: (metadata_changed, the metadata written back).
    fn client_request(rt: *mut WeftRuntime, md: &[u8]) -> (i32, Vec<(String, Vec<u8>)>) {
        let out = run_call(rt, WEFT_SIDE_CLIENT, 0, md, 0, b"\n\x05alice");
        assert_eq!(out.rc, WEFT_OK);
        assert_eq!(out.rpc, 0, "no client-side element waits for the response");
        (out.metadata_changed, out.metadata)
    }

    #[test]
    fn each_client_call_is_stamped_with_the_current_version_and_its_service() {
        // A thread reuses its last call's stamp entry: after a reload the stamp must still be
        // the new version's, and a caller's own current stamp is left alone.
        let yaml = CString::new(SERVER_METRICS).unwrap();
        let base = CString::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/echo")).unwrap();
        // SAFETY: NUL-terminated strings that outlive the call.
        let rt = unsafe { weft_open_yaml(yaml.as_ptr(), base.as_ptr(), c"frontend".as_ptr(), 0) };
        assert!(!rt.is_null());
        let (changed, first) = client_request(rt, &[]);
        assert_eq!(changed, 1);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].0, "weft-version");
        let (digest, service) = first[0].1.split_at(16);
        assert!(digest.iter().all(u8::is_ascii_hexdigit), "{first:?}");
        assert_eq!(service, b"/frontend");
        assert_eq!(client_request(rt, &[]), (1, first.clone()));

        let next = CString::new(SERVER_METRICS.replace("- metrics", "- metrics\n      - logging"))
            .unwrap();
        // SAFETY: a live runtime; NUL-terminated strings that outlive the call.
        assert_eq!(
            unsafe { weft_reload_yaml(rt, next.as_ptr(), base.as_ptr()) },
            WEFT_OK
        );
        let (changed, second) = client_request(rt, &[]);
        assert_eq!(changed, 1);
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].0, "weft-version");
        assert_ne!(second[0].1, first[0].1, "the stamp names the new version");
        assert!(second[0].1.ends_with(b"/frontend"));

        let mut md = Vec::new();
        entry(&mut md, "weft-version", &second[0].1);
        assert_eq!(client_request(rt, &md), (0, vec![]), "already stamped");
        // An application passing on its own caller's metadata: the version is the same (one
        // config), the service this one now.
        let mut from_web = second[0].1[..16].to_vec();
        from_web.extend_from_slice(b"/web");
        let mut md = Vec::new();
        entry(&mut md, "weft-version", &from_web);
        assert_eq!(client_request(rt, &md), (1, second.clone()), "restamped");
        let mut md = Vec::new();
        entry(&mut md, "x-tenant", b"t1");
        let (changed, mut back) = client_request(rt, &md);
        back.sort();
        assert_eq!(changed, 1);
        assert_eq!(
            back,
            vec![
                ("weft-version".to_owned(), second[0].1.clone()),
                ("x-tenant".to_owned(), b"t1".to_vec()),
            ]
        );
        assert_eq!(client_request(rt, &[]), (1, second));
        // SAFETY: the runtime is live and no call is in flight.
        unsafe { weft_close(rt) };
    }

    #[test]
    fn the_version_word_follows_reloads_and_outlives_the_runtime() {
        let yaml = CString::new(SERVER_METRICS).unwrap();
        let base = CString::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/echo")).unwrap();
        // SAFETY: NUL-terminated strings that outlive the call.
        let rt = unsafe { weft_open_yaml(yaml.as_ptr(), base.as_ptr(), c"echo".as_ptr(), 0) };
        assert!(!rt.is_null());
        // SAFETY: a live runtime, and NULL.
        let (word, none) = unsafe { (weft_version_word(rt), weft_version_word(std::ptr::null())) };
        assert!(none.is_null());
        // SAFETY: the word is valid for the life of the process, and only read atomically.
        let read =
            || unsafe { (*word.cast::<std::sync::atomic::AtomicU64>()).load(Ordering::Acquire) };
        // SAFETY: a live runtime.
        assert_eq!(read(), unsafe { weft_version(rt) });
        assert_eq!(read(), 1);
        let next = CString::new(SERVER_METRICS.replace("- metrics", "- metrics\n      - logging"))
            .unwrap();
        // SAFETY: a live runtime; NUL-terminated strings that outlive the call.
        assert_eq!(
            unsafe { weft_reload_yaml(rt, next.as_ptr(), base.as_ptr()) },
            WEFT_OK
        );
        // SAFETY: a live runtime.
        assert_eq!(read(), unsafe { weft_version(rt) });
        assert_eq!(read(), 2);
        // SAFETY: the runtime is live and no call is in flight.
        unsafe { weft_close(rt) };
        assert_eq!(read(), 2, "the word outlives the runtime");
    }

    /// A length no buffer can have (a negative number cast to `size_t`) is refused before
    /// anything is read.
    #[test]
    fn a_length_longer_than_any_buffer_is_an_argument_error() {
        let rt = open_server();
        let method = b"/echo.Echo/Say";
        let message = [0u8; 4];
        let mut call = WeftCall {
            method: method.as_ptr(),
            method_len: method.len(),
            message: message.as_ptr(),
            message_len: usize::MAX,
            ..WeftCall::default()
        };
        // SAFETY: a live runtime; the message pointer is valid, its length is the error.
        let rc = unsafe { weft_request(rt, WEFT_SIDE_SERVER, &mut call) };
        // SAFETY: the message is valid until the next failing call on this thread.
        let message = unsafe { CStr::from_ptr(weft_last_error()) }
            .to_string_lossy()
            .into_owned();
        assert_eq!(rc, WEFT_E_ARGUMENT, "{message}");
        assert!(message.contains("longer than any buffer"), "{message}");
        // SAFETY: the runtime is live and no call is in flight.
        unsafe { weft_close(rt) };
    }

    /// Two edges from one caller on one method is a mistake in the config: `WEFT_E_CONFIG`,
    /// which a binding reports as such, not `WEFT_E_ARGUMENT` (a caller's bad pointer or
    /// handle). The running version stays.
    #[test]
    fn a_config_with_two_edges_from_one_caller_on_one_method_is_a_config_error() {
        let rt = open_server();
        let second = SERVER_METRICS.replace("edges:\n", "edges:\n  again:\n    from: frontend\n    to: echo\n    method: echo.Echo/Say\n    server:\n      - metrics\n");
        let next = CString::new(second).unwrap();
        let base = CString::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/echo")).unwrap();
        // SAFETY: a live runtime; NUL-terminated strings that outlive the call.
        let rc = unsafe { weft_reload_yaml(rt, next.as_ptr(), base.as_ptr()) };
        // SAFETY: the message is valid until the next failing call on this thread.
        let message = unsafe { CStr::from_ptr(weft_last_error()) }
            .to_string_lossy()
            .into_owned();
        assert_eq!(rc, WEFT_E_CONFIG, "{message}");
        assert!(
            message.contains("both apply to server-side method `echo.Echo/Say`"),
            "{message}"
        );
        // SAFETY: a live runtime.
        assert_eq!(unsafe { weft_version(rt) }, 1);
        // SAFETY: the runtime is live and no call is in flight.
        unsafe { weft_close(rt) };
    }

    /// Opens the echo server running `logging` then `metrics`, queueing up to `capacity`
    /// channel records, and sends `rpcs` RPCs through it: (runtime, records emitted).
    fn server_with_records(capacity: u32, rpcs: usize) -> (*mut WeftRuntime, usize) {
        let yaml = SERVER_METRICS.replace("- metrics", "- logging\n      - metrics");
        let yaml = CString::new(yaml).unwrap();
        let base = CString::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/echo")).unwrap();
        // SAFETY: NUL-terminated strings that outlive the call.
        let rt =
            unsafe { weft_open_yaml(yaml.as_ptr(), base.as_ptr(), c"echo".as_ptr(), capacity) };
        assert!(!rt.is_null());
        for _ in 0..rpcs {
            let request = run_call(rt, WEFT_SIDE_SERVER, 0, &[], 0, b"\n\x05alice");
            assert_eq!(
                (request.rc, request.verdict),
                (WEFT_OK, WEFT_VERDICT_FORWARD)
            );
            assert_ne!(request.rpc, 0);
            let response = run_call(rt, WEFT_SIDE_SERVER, request.rpc, &[], 0, b"\n\x02hi");
            assert_eq!(
                (response.rc, response.verdict),
                (WEFT_OK, WEFT_VERDICT_FORWARD)
            );
        }
        // Per RPC: logging's request and response, and metrics' latency.
        (rt, 3 * rpcs)
    }

    /// `weft_records` into a buffer of `cap` bytes: (return code, the records, `out->len`,
    /// records dropped so far).
    fn collect(rt: *mut WeftRuntime, cap: usize) -> (i32, Vec<Decoded>, usize, u64) {
        let mut bytes = vec![0u8; cap];
        let mut out = WeftBuf::over(&mut bytes);
        let mut dropped = u64::MAX;
        // SAFETY: a live runtime, a buffer writable for its `cap`, a writable counter.
        let rc = unsafe { weft_records(rt, &mut out, &mut dropped) };
        let len = out.len;
        let mut records = Vec::new();
        if rc == WEFT_OK {
            let mut rest = &bytes[..len];
            while !rest.is_empty() {
                let (record, after) = crate::records::decode(rest).unwrap();
                records.push(record);
                rest = after;
            }
        }
        (rc, records, len, dropped)
    }

    #[test]
    fn channel_records_are_collected_whole_and_in_order() {
        let (rt, emitted) = server_with_records(64, 2);
        // The oldest record does not fit in 8 bytes: nothing is lost, its size is reported.
        let (rc, lines, needed, dropped) = collect(rt, 8);
        assert_eq!((rc, lines.len(), dropped), (WEFT_E_BUFFER, 0, 0));
        assert!(needed > 8);
        // Exactly that much takes exactly that record.
        let (rc, first, len, _) = collect(rt, needed);
        assert_eq!((rc, first.len(), len), (WEFT_OK, 1, needed));
        let (rc, rest, _, dropped) = collect(rt, 1 << 16);
        assert_eq!((rc, dropped), (WEFT_OK, 0));
        let all: Vec<_> = first.into_iter().chain(rest).collect();
        assert_eq!(all.len(), emitted);

        let on = |channel: &str| -> Vec<&Decoded> {
            all.iter().filter(|r| r.channel == channel).collect()
        };
        let (logs, latencies) = (on("log"), on("latency"));
        assert_eq!((logs.len(), latencies.len()), (4, 2));
        // logging sends the messages whole, rendered by the method's schema.
        assert!(logs.iter().all(|r| r.element == "logging"));
        assert_eq!(logs[0].value["message"]["user"], "alice");
        assert_eq!(logs[1].value["message"]["body"], "hi");
        // One RPC's records share its id; the two RPCs' differ.
        assert_eq!(logs[0].rpc_id, logs[1].rpc_id);
        assert_eq!(logs[0].rpc_id, latencies[0].rpc_id);
        assert_ne!(latencies[0].rpc_id, latencies[1].rpc_id);
        assert!(latencies.iter().all(|r| r.value.as_f64().unwrap() >= 0.0));
        assert!(latencies[0].time >= logs[0].time);
        // Collected records are gone.
        let (rc, lines, len, _) = collect(rt, 1 << 16);
        assert_eq!((rc, lines.len(), len), (WEFT_OK, 0, 0));
        // SAFETY: the runtime is live and no call is in flight.
        unsafe { weft_close(rt) };
    }

    #[test]
    fn records_beyond_the_queue_are_dropped_and_counted() {
        let (rt, emitted) = server_with_records(4, 5);
        let (rc, lines, _, dropped) = collect(rt, 1 << 16);
        assert_eq!(rc, WEFT_OK);
        assert_eq!(lines.len(), 4);
        assert_eq!(dropped, (emitted - 4) as u64);
        // The queue keeps the oldest: the first RPC's request record comes first.
        assert_eq!(lines[0].value["message"]["user"], "alice");
        // SAFETY: the runtime is live and no call is in flight.
        unsafe { weft_close(rt) };
    }

    #[test]
    fn records_need_a_queue() {
        let rt = open_server();
        let (rc, lines, _, _) = collect(rt, 64);
        assert_eq!((rc, lines.len()), (WEFT_E_ARGUMENT, 0));
        // SAFETY: a pointer from `weft_last_error`, valid until this thread's next call.
        let err = unsafe { CStr::from_ptr(weft_last_error()) }
            .to_str()
            .unwrap();
        assert!(err.contains("record_capacity"), "{err}");
        // SAFETY: the runtime is live and no call is in flight.
        unsafe { weft_close(rt) };
    }

    /// A server request through `metrics` with metadata `md`: (return code, metadata_changed).
    fn server_request(rt: *mut WeftRuntime, md: &[u8]) -> (i32, i32) {
        let out = run_call(rt, WEFT_SIDE_SERVER, 0, md, 0, b"\n\x05alice");
        // SAFETY: a live runtime; the handle is this call's.
        unsafe { weft_rpc_abandon(rt, out.rpc) };
        (out.rc, out.metadata_changed)
    }
}
