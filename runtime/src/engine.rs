//! The engine: this service's chains, compiled, and the versions RPCs run in.
//!
//! The hot path takes no process-wide lock: the version table is read through an
//! [`ArcSwap`], an RPC holds an `Arc` of the version it runs in (that count is the version's
//! in-flight count), and the only lock it takes is its segment's, which guards that
//! segment's element instances.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use weft_hostcalls::clock::Clock;
use weft_hostcalls::{Code, Message, MsgKind};
use weft_ir::config::Side;
use weft_ir::interp::{Host, Instance, RpcInfo, RpcScratch};
use weft_ir::layout::Layout;
use weft_jit::Buffers;
use weft_jit::exec::{SharedVerdict, emptied};

use crate::error::EngineError;
use crate::version::{
    Channels, ConfigSource, EngineOptions, FilesRead, Locked, MethodRoute, Route, RpcTemplate,
    Version, VersionCounters, build, side_name,
};
use crate::watch::Watcher;

/// The metadata key the first Weft hop stamps with the version's content digest and its own
/// service, `<digest>/<service>` ([`split_stamp`]).
pub const VERSION_HEADER: &str = "weft-version";
/// The metadata key a routing element writes the chosen replica into.
pub const ROUTE_HEADER: &str = "dst";

/// gRPC metadata as elements see it: lower-case keys, one value each.
pub type Metadata = BTreeMap<String, String>;

thread_local! {
    // Compiled code's scratch arenas, reused by every call on this thread: a call allocates
    // only what its values need, and threads never share (or wait for) them.
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
    // The `RpcInfo`s compiled code reads, kept per thread with the key of the template each
    // was made from: a call sets the id and the route instead of cloning the template's three
    // strings (and freeing them again). Several, because one thread serves calls of several
    // templates in turn: a service's server side and its client side, both sides of a
    // benchmark, several runtimes. With one kept, alternating calls cloned every time
    // (`ffi_iters both`: ~700 instructions per pair of RPCs).
    static INFO: RefCell<Vec<(u64, RpcInfo)>> = const { RefCell::new(Vec::new()) };
    // The allocation behind each call's list of instances, kept empty between calls.
    static INSTANCE_LIST: Cell<Vec<&'static mut Instance>> = const { Cell::new(Vec::new()) };
    // A message the caller handed back ([`recycle`]): the next call's input is made in its
    // `Arc` and byte buffer, two allocations and two frees fewer per call direction.
    static SPARE_MESSAGE: Cell<Option<Arc<Message>>> = const { Cell::new(None) };
}

/// The word behind [`Engine::version_word`]. Its own function, so that the LeakSanitizer
/// suppression for it (scripts/sanitizers/lsan.supp) matches no other allocation:
/// `weft_version_word` keeps a reference for the life of the process by contract, one per
/// call, so the word is never freed.
fn new_version_word(first: u64) -> Arc<AtomicU64> {
    Arc::new(AtomicU64::new(first))
}

/// How many `RpcInfo`s a thread keeps (see `INFO`); a lookup is a linear scan of their keys.
const INFOS_KEPT: usize = 8;

/// Byte buffers larger than this are not kept for reuse: one large message must not pin its
/// memory to a thread.
const SPARE_BYTES_MAX: usize = 64 * 1024;

/// A `weft-version` value's version digest and, after a `/`, the service that sent the
/// request: a server into whose method edges from several services lead runs the edge from
/// that service. A stamp without a `/` (or before the stamp carried the service) names no
/// caller. The digest is empty on a call no edge of the caller's covered
/// ([`Engine::caller_stamp`]) unless the call passed on a copied stamp's: it names no
/// version, so the server runs its current one. The service travels in the stamp rather
/// than a header of its own: a second header cost grpc-go five allocations and about
/// 1.2 KB per RPC (twenty-ninth session).
pub fn split_stamp(stamp: &str) -> (&str, Option<&str>) {
    match stamp.split_once('/') {
        Some((digest, caller)) => (digest, Some(caller)),
        None => (stamp, None),
    }
}

/// Whether `service` can be named in a stamp: a header value, which grpc-go sends only as
/// printable ASCII. A runtime whose service is the `from` of an edge refuses to open
/// otherwise (`EngineError::ServiceName`), and `weft check --config` warns.
pub fn fits_a_stamp(service: &str) -> bool {
    service.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

/// A call's input message, filled in by `fill` from a cleared one: this thread's spare when
/// there is one. With a `stamp` (a client's `<digest>/<service>`) the message carries it as
/// `weft-version` after `fill`; the result says whether it had to be added, that is, whether
/// the caller's metadata lacked it.
fn fresh_message(stamp: Option<&str>, fill: impl FnOnce(&mut Message)) -> (Arc<Message>, bool) {
    let mut arc = SPARE_MESSAGE
        .take()
        .unwrap_or_else(|| Arc::new(Message::request(Vec::new())));
    match Arc::get_mut(&mut arc) {
        Some(m) => {
            m.kind = MsgKind::Request;
            m.bytes.clear();
            // A client's last call left its stamp as the only header: its two strings and
            // the map's node serve this call's stamp (three allocations and three frees
            // fewer per call). Otherwise clear the map, unless it is empty already (clearing
            // walks even an empty map, about 70 instructions).
            let spare_stamp = match stamp {
                Some(_) if m.headers.len() == 1 => {
                    m.headers.pop_first().filter(|(k, _)| k == VERSION_HEADER)
                }
                _ => None,
            };
            if !m.headers.is_empty() {
                m.headers.clear();
            }
            m.code = Code::Ok;
            m.status_message.clear();
            fill(m);
            let stamped = stamp.is_some_and(|stamp| add_stamp(m, stamp, spare_stamp));
            (arc, stamped)
        }
        // Shared after all (an element kept it after `recycle` looked): leave it be.
        None => {
            let mut m = Message::request(Vec::new());
            fill(&mut m);
            let stamped = stamp.is_some_and(|stamp| add_stamp(&mut m, stamp, None));
            (Arc::new(m), stamped)
        }
    }
}

/// Stamps `m` with `stamp` unless the caller's metadata carried it already (an application
/// that copies its incoming metadata onto its own calls passes its caller's stamp, which
/// names another service); `spare` is an entry whose strings to reuse. True when it stamped.
fn add_stamp(m: &mut Message, stamp: &str, spare: Option<(String, String)>) -> bool {
    if m.headers.get(VERSION_HEADER).map(String::as_str) == Some(stamp) {
        return false;
    }
    let (key, mut value) = spare.unwrap_or_else(|| (VERSION_HEADER.to_owned(), String::new()));
    value.clear();
    value.push_str(stamp);
    m.headers.insert(key, value);
    true
}

/// Gives a fresh message (whose headers are empty) the call's metadata. Most calls have none
/// to give: an empty map owns no memory, and forgetting it skips `BTreeMap`'s drop, which
/// walks even an empty map (about 50 instructions per call direction).
fn set_headers(m: &mut Message, metadata: Metadata) {
    if metadata.is_empty() {
        std::mem::forget(metadata);
    } else {
        m.headers = metadata;
    }
}

/// Hands a finished call's verdict back, so its message can carry the next call's input on
/// this thread. Call it after the verdict's outputs have been copied out.
pub fn recycle(verdict: Verdict) {
    let m = match verdict {
        Verdict::Forward(f) | Verdict::Route { forward: f, .. } => f.message,
        Verdict::Reply(m) => m,
        Verdict::Reject { .. } => return,
    };
    // Only an unshared message can be reused (`fresh_message` checks again): one a cache
    // keeps stays the cache's.
    if Arc::strong_count(&m) == 1
        && Arc::weak_count(&m) == 0
        && m.bytes.capacity() <= SPARE_BYTES_MAX
    {
        // Gone only while the thread exits; the message is then simply freed.
        let _ = SPARE_MESSAGE.try_with(|slot| slot.set(Some(m)));
    }
}

/// A segment's instances as the list of references compiled code takes, built in this
/// thread's reused allocation (a `collect` per call was an allocation per RPC direction).
struct InstanceList<'a>(Vec<&'a mut Instance>);

impl<'a> InstanceList<'a> {
    // Out of line, it and the list it returns through memory cost ~50 instructions a call.
    #[inline(always)]
    fn new(locked: &'a mut Locked<'_>) -> Self {
        let mut list = emptied(INSTANCE_LIST.take());
        locked.fill(&mut list);
        InstanceList(list)
    }
}

impl Drop for InstanceList<'_> {
    fn drop(&mut self) {
        let spare = emptied(std::mem::take(&mut self.0));
        // Gone only while the thread exits; the allocation is then simply freed.
        let _ = INSTANCE_LIST.try_with(|slot| slot.set(spare));
    }
}

/// Runs `f` with the RPC's info: `template` with this id and route.
fn with_info<R>(
    template: &RpcTemplate,
    id: u64,
    routed: Option<&str>,
    f: impl FnOnce(&RpcInfo) -> R,
) -> R {
    INFO.with_borrow_mut(|kept| {
        let at = match kept.iter().position(|(key, _)| *key == template.key) {
            Some(at) => at,
            None => {
                if kept.len() >= INFOS_KEPT {
                    kept.remove(0);
                }
                kept.push((template.key, template.info.clone()));
                kept.len() - 1
            }
        };
        let info = &mut kept[at].1;
        info.id = id;
        if info.routed.as_deref() != routed {
            info.routed = routed.map(str::to_owned);
        }
        f(info)
    })
}

/// A message that continues on its way.
#[derive(Clone, Debug)]
pub struct Forwarded {
    /// The message to send on: the caller's own bytes and metadata unless a flag says an
    /// element changed them.
    pub message: Arc<Message>,
    pub message_changed: bool,
    pub metadata_changed: bool,
}

/// What the chain decided.
#[derive(Clone, Debug)]
pub enum Verdict {
    /// Send on (maybe rewritten).
    Forward(Forwarded),
    /// Send on to this replica (an element set `dst`); the metadata carries `dst` too.
    Route { replica: String, forward: Forwarded },
    /// Fail the RPC with this status.
    Reject { code: Code, message: String },
    /// Answer locally with this response; the server is not called.
    Reply(Arc<Message>),
}

/// The result of [`Engine::process_request`].
pub struct RequestOutcome {
    pub verdict: Verdict,
    /// Present when the request was forwarded and elements wait for its response: pass it to
    /// [`Engine::process_response`] (or drop it if no response will come).
    pub rpc: Option<Rpc>,
    /// The local install number of the version that ran.
    pub version: u64,
}

/// The result of [`Engine::process_response`]: `Forward` or `Reject`.
pub struct ResponseOutcome {
    pub verdict: Verdict,
    pub version: u64,
}

/// What the server answered.
#[derive(Clone, Debug)]
pub enum ServerResponse {
    Ok {
        message: Vec<u8>,
        metadata: Metadata,
    },
    Error {
        code: Code,
        message: String,
        metadata: Metadata,
    },
}

/// One RPC between its request and its response: the version it runs in (kept alive, code
/// included, until this is dropped), the elements whose response handlers must run, and
/// its scratch (`set_metadata`), dropped with it whether or not a response came.
pub struct Rpc {
    version: Arc<Version>,
    segment: usize,
    method: usize,
    id: u64,
    /// The replica the request was routed to, for `dst()` in response handlers.
    routed: Option<String>,
    /// Elements of the segment that forwarded the request; their `resp` handlers run.
    forwarded: usize,
    scratch: RpcScratch,
}

impl Rpc {
    /// The local install number of the version this RPC runs in.
    pub fn version(&self) -> u64 {
        self.version.number
    }

    /// The response metadata keys elements can observe ([`Prepared::header_keys`]).
    pub fn header_keys(&self) -> Option<&[String]> {
        self.version.segments[self.segment].methods[self.method]
            .header_keys
            .as_deref()
    }

    /// Of those, the keys to decode for elements ([`Prepared::visible_keys`]).
    pub fn visible_keys(&self) -> Option<&[String]> {
        self.version.segments[self.segment].methods[self.method]
            .visible_keys
            .as_deref()
    }
}

/// A request's version and segment, chosen before its metadata is decoded.
pub struct Prepared {
    version: Arc<Version>,
    route: MethodRoute,
    side: Side,
}

impl Prepared {
    /// The metadata keys the segment's elements can read or write (with those the engine
    /// reads: `weft-version`, and `dst` on the client side); `None` when they may observe
    /// all of it. Keys left out
    /// of the metadata given to [`Engine::run_request`] are neither seen nor changed by the
    /// chain, so a caller may keep them aside and pass them on as they were.
    pub fn header_keys(&self) -> Option<&[String]> {
        self.version.segments[self.route.segment].methods[self.route.method]
            .header_keys
            .as_deref()
    }

    /// Whether the segment's request handlers, and its response handlers, can observe the
    /// message's bytes. When one cannot and the caller passes only [`Prepared::header_keys`],
    /// it may pass an empty message for that direction: the chain reads nothing of it, and a
    /// forward verdict leaves the caller's own message unchanged.
    pub fn message_observed(&self) -> [bool; 2] {
        self.version.segments[self.route.segment].methods[self.route.method].message_observed
    }

    /// Of [`Prepared::header_keys`], the keys to decode into the metadata elements see: the
    /// rest (a server's `weft-version`, which only picks the version) can pass through
    /// undecoded. `None` when elements may observe all of it.
    pub fn visible_keys(&self) -> Option<&[String]> {
        self.version.segments[self.route.segment].methods[self.route.method]
            .visible_keys
            .as_deref()
    }

    /// The local install number of the version the request will run in.
    pub fn version(&self) -> u64 {
        self.version.number
    }

    /// That version's content digest, which a request's `weft-version` stamp starts with
    /// ([`split_stamp`]).
    pub fn digest(&self) -> &str {
        &self.version.digest
    }

    /// Whether the request path may wait for the response: on the server side, when no
    /// request handler does more than read the clock and keep per-RPC scratch, the caller
    /// may skip [`Engine::run_request`] and hand both halves to [`Engine::exchange`] once the
    /// response is there (docs/engine.md, "Deferred request paths").
    pub fn request_deferrable(&self) -> bool {
        self.version.segments[self.route.segment].methods[self.route.method].request_deferrable
    }
}

/// A clock read `by` seconds in the past: the time a deferred request path would have seen.
struct Earlier<'a> {
    clock: &'a dyn Clock,
    by: f64,
}

impl Clock for Earlier<'_> {
    fn now(&self) -> f64 {
        self.clock.now() - self.by
    }
}

struct Table {
    current: Arc<Version>,
    /// Versions replaced while RPCs still ran in them; alive only as long as those RPCs.
    older: Vec<Weak<Version>>,
}

/// Install and free counts, for tests and operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VersionStats {
    /// The current version's install number.
    pub current: u64,
    /// Versions made current: the first, and one per reload that changed something. A
    /// reload that failed or changed nothing builds a version and drops it, counted in
    /// neither this nor `freed`.
    pub installed: u64,
    /// Installed versions freed after their last RPC.
    pub freed: u64,
    /// Versions not current that are still alive (RPCs running in them).
    pub draining: usize,
}

/// What went wrong with RPCs, over the engine's life (every version, reloads included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RpcCounters {
    /// RPCs rejected with INVALID_ARGUMENT because an element read a message whose bytes are
    /// not a valid message of its type.
    pub malformed: u64,
    /// RPCs rejected with INTERNAL because an element's handler failed at run time (division
    /// by zero, an index out of range, …).
    pub element_errors: u64,
    /// Of `element_errors`, those where a handler made more `foreach` iterations than its
    /// element's `max_iterations`: a limit set too low for the state an element holds shows
    /// here, apart from elements that fail.
    pub iteration_limited: u64,
    /// Requests refused with PERMISSION_DENIED because edges from several services lead into
    /// their server-side method and their `weft-version` stamp named none of those services.
    pub unknown_callers: u64,
}

impl std::ops::AddAssign for RpcCounters {
    fn add_assign(&mut self, other: RpcCounters) {
        self.malformed += other.malformed;
        self.element_errors += other.element_errors;
        self.iteration_limited += other.iteration_limited;
        self.unknown_callers += other.unknown_callers;
    }
}

pub(crate) struct Inner {
    service: String,
    options: EngineOptions,
    source: Mutex<ConfigSource>,
    table: ArcSwap<Table>,
    /// Serialises reloads (never taken by RPCs).
    reload_lock: Mutex<()>,
    /// Held while a reload copies state and counts to the new version and installs it (a
    /// short part of a reload), so counters are never summed halfway through.
    install_lock: Mutex<()>,
    counters: Arc<VersionCounters>,
    next_install: AtomicU64,
    /// The current version's install number, for bindings that check it without a call
    /// ([`Engine::version_word`]).
    installed: Arc<AtomicU64>,
    next_rpc: AtomicU64,
    /// What the watcher's last reload did (an error keeps the old version running).
    watch_result: Mutex<Option<Result<Reloaded, String>>>,
    /// What the last build that got as far as parsing the config read, installed or not:
    /// the files the watcher watches.
    files_read: Mutex<FilesRead>,
}

/// A running Weft engine for one service. Thread-safe; share it by reference or `Arc`.
pub struct Engine {
    inner: Arc<Inner>,
    _watcher: Option<Watcher>,
}

/// Who asked for a reload: the config watcher's results are kept for
/// [`Engine::last_watch_result`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReloadBy {
    Watcher,
    Caller,
}

/// What a successful reload did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// A new version was installed (its install number).
    Installed(u64),
    /// The files have the content of the current version; nothing changed.
    Unchanged(u64),
}

impl Engine {
    /// Loads `weft.yaml` at `path` for `service` (its name in the config's edges).
    pub fn open(
        path: impl AsRef<Path>,
        service: &str,
        options: EngineOptions,
    ) -> Result<Engine, EngineError> {
        Engine::start(
            ConfigSource::File(path.as_ref().to_path_buf()),
            service,
            options,
        )
    }

    /// Loads a config given as YAML text; relative paths in it are resolved from `base_dir`.
    pub fn open_yaml(
        yaml: &str,
        base_dir: impl AsRef<Path>,
        service: &str,
        options: EngineOptions,
    ) -> Result<Engine, EngineError> {
        let source = ConfigSource::Yaml {
            text: yaml.to_owned(),
            base_dir: base_dir.as_ref().to_path_buf(),
        };
        Engine::start(source, service, options)
    }

    fn start(
        source: ConfigSource,
        service: &str,
        options: EngineOptions,
    ) -> Result<Engine, EngineError> {
        let counters = Arc::new(VersionCounters::default());
        let mut read = None;
        let mut first = build(&source, service, &options, 1, &counters, None, &mut read)?;
        first.mark_installed(options.channels.as_ref());
        let files_read = read.unwrap_or_default();
        let inner = Arc::new(Inner {
            service: service.to_owned(),
            source: Mutex::new(source),
            table: ArcSwap::from_pointee(Table {
                current: Arc::new(first),
                older: Vec::new(),
            }),
            reload_lock: Mutex::new(()),
            install_lock: Mutex::new(()),
            counters,
            next_install: AtomicU64::new(2),
            installed: new_version_word(1),
            next_rpc: AtomicU64::new(1),
            watch_result: Mutex::new(None),
            files_read: Mutex::new(files_read),
            options,
        });
        let watcher = inner
            .options
            .watch_interval
            .map(|every| Watcher::start(Arc::downgrade(&inner), every));
        Ok(Engine {
            inner,
            _watcher: watcher,
        })
    }

    /// The service this engine runs for.
    pub fn service(&self) -> &str {
        &self.inner.service
    }

    /// The current version's local install number (1, 2, …).
    pub fn version(&self) -> u64 {
        self.inner.table.load().current.number
    }

    /// The current version's install number, as a word that follows every install: a binding
    /// reads it on each RPC to notice a reload (the file watcher's too) without a library
    /// call, and outlives the engine if it keeps the `Arc`.
    pub fn version_word(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.inner.installed)
    }

    /// The `weft-version` stamp of this service's calls that no edge covers, `/<service>`:
    /// an empty digest (this end ran no chain) and the calling service, for the binding to
    /// add to such a call's metadata (after the digest of a stamp the call carries already,
    /// copied from an incoming call, which names the version to keep). A server into whose
    /// method edges from several services lead picks the edge by the service, so a caller
    /// stays known while a config that gives it its first edge into a method reaches the
    /// server before it (`docs/config.md`, "Several callers of one method"). `None` when
    /// the service cannot be named in a header ([`fits_a_stamp`]).
    pub fn caller_stamp(&self) -> Option<String> {
        let service = &self.inner.service;
        fits_a_stamp(service).then(|| format!("/{service}"))
    }

    /// What loading the current version warned of (docs/config.md), as `weft check
    /// --config` prints it; empty when nothing. The version runs either way.
    pub fn warnings(&self) -> String {
        self.inner.table.load().current.warnings.clone()
    }

    /// The current version's content digest (the `weft-version` stamp).
    pub fn digest(&self) -> String {
        self.inner.table.load().current.digest.clone()
    }

    /// The order and sides the current version runs an edge's elements in.
    pub fn layout(&self, edge: &str) -> Option<Layout> {
        let table = self.inner.table.load();
        table
            .current
            .layouts
            .iter()
            .find(|(name, _)| name == edge)
            .map(|(_, l)| l.clone())
    }

    pub fn stats(&self) -> VersionStats {
        self.inner.stats()
    }

    /// RPCs rejected for malformed messages and for elements' run-time errors, so far, over
    /// every version (an element a reload removed included). Waits while a reload installs
    /// its version, not while it builds it.
    pub fn rpc_counters(&self) -> RpcCounters {
        self.inner.rpc_counters()
    }

    /// What the config watcher's last reload did, if it reloaded at all: the version it
    /// installed, or the diagnostic of a reload that failed (the old version kept running).
    /// A successful [`Engine::reload`] or [`Engine::reload_yaml`] after a failure clears it
    /// (`None`): it read the config since.
    pub fn last_watch_result(&self) -> Option<Result<Reloaded, String>> {
        self.inner
            .watch_result
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads the config source again and installs it beside the current version. On any
    /// error the current version keeps running and the error carries the diagnostic.
    pub fn reload(&self) -> Result<Reloaded, EngineError> {
        self.inner.reload(None, ReloadBy::Caller)
    }

    /// Replaces the config with YAML text and installs it (as [`Engine::reload`]); later
    /// reloads and the watcher use this text.
    pub fn reload_yaml(
        &self,
        yaml: &str,
        base_dir: impl AsRef<Path>,
    ) -> Result<Reloaded, EngineError> {
        self.inner.reload(
            Some(ConfigSource::Yaml {
                text: yaml.to_owned(),
                base_dir: base_dir.as_ref().to_path_buf(),
            }),
            ReloadBy::Caller,
        )
    }

    /// Runs the request path of `method`'s edge on `side`. The client side stamps
    /// `weft-version` (the first Weft hop); a stamped request runs the stamped version while
    /// this process still has it, anything else the current one.
    pub fn process_request(
        &self,
        side: Side,
        method: &str,
        metadata: Metadata,
        message: Vec<u8>,
    ) -> Result<RequestOutcome, EngineError> {
        let prepared = self.prepare(
            side,
            method,
            metadata.get(VERSION_HEADER).map(String::as_str),
        );
        match prepared {
            Ok(prepared) => self.run_request(prepared, metadata, message),
            Err(e @ EngineError::UnknownCaller { .. }) => Ok(self.refuse_caller(e)),
            Err(e) => Err(e),
        }
    }

    /// The answer to a request [`Engine::prepare`] could not give an edge for its caller:
    /// PERMISSION_DENIED, counted (`RpcCounters::unknown_callers`).
    pub fn refuse_caller(&self, error: EngineError) -> RequestOutcome {
        let version = match &error {
            EngineError::UnknownCaller { version, .. } => *version,
            _ => self.inner.current().number,
        };
        self.inner
            .counters
            .unknown_callers
            .fetch_add(1, Ordering::Relaxed);
        RequestOutcome {
            verdict: Verdict::Reject {
                code: Code::PermissionDenied,
                message: error.to_string(),
            },
            rpc: None,
            version,
        }
    }

    /// The first half of [`Engine::process_request`]: chooses the version (by the request's
    /// `weft-version` stamp) and the segment (on the server side, among edges from several
    /// services into the method, by the service the stamp names), so a caller can decode
    /// only the metadata keys that segment's elements observe ([`Prepared::header_keys`]).
    /// [`EngineError::UnknownCaller`] when the stamp names none of those services: answer
    /// the RPC with [`Engine::refuse_caller`].
    pub fn prepare(
        &self,
        side: Side,
        method: &str,
        stamp: Option<&str>,
    ) -> Result<Prepared, EngineError> {
        self.prepare_if_covered(side, method, stamp)?
            .ok_or_else(|| self.no_edge(side, method))
    }

    /// [`Engine::prepare`], with a method no edge covers answered `Ok(None)` rather than
    /// [`EngineError::NoEdge`]: that is the answer for every call of a method without
    /// policy, and building the error (two strings) is wasted on a caller that only passes
    /// the call on.
    pub fn prepare_if_covered(
        &self,
        side: Side,
        method: &str,
        stamp: Option<&str>,
    ) -> Result<Option<Prepared>, EngineError> {
        let (stamp, caller) = match stamp.map(split_stamp) {
            Some((digest, caller)) => (Some(digest), caller),
            None => (None, None),
        };
        let mut version = self.inner.version_for(stamp);
        let mut route = version.route(side, method, caller);
        if !matches!(route, Route::Found(_)) && stamp.is_some() {
            // The stamped version has no chain here for this caller, but the current one
            // may: a stamp only picks among versions that run the RPC, or anyone who can
            // set a header (or an app copying its incoming metadata) would skip the current
            // chain.
            let current = self.inner.current();
            if !Arc::ptr_eq(&current, &version) {
                version = current;
                route = version.route(side, method, caller);
            }
        }
        let route = match route {
            Route::Found(route) => route,
            Route::None => return Ok(None),
            Route::UnknownCaller(edges) => {
                return Err(EngineError::UnknownCaller {
                    service: self.inner.service.clone(),
                    method: method.strip_prefix('/').unwrap_or(method).to_owned(),
                    caller: caller.map(str::to_owned),
                    callers: edges.iter().map(|e| e.caller.clone()).collect(),
                    version: version.number,
                });
            }
        };
        Ok(Some(Prepared {
            version,
            route,
            side,
        }))
    }

    /// The error [`Engine::prepare`] gives for a method no edge of this service covers on
    /// `side`.
    pub fn no_edge(&self, side: Side, method: &str) -> EngineError {
        EngineError::NoEdge {
            service: self.inner.service.clone(),
            side: side_name(side),
            method: method.to_owned(),
        }
    }

    /// The second half of [`Engine::process_request`].
    pub fn run_request(
        &self,
        prepared: Prepared,
        metadata: Metadata,
        message: Vec<u8>,
    ) -> Result<RequestOutcome, EngineError> {
        self.run_request_with(prepared, 0.0, |m| {
            m.bytes = message;
            m.headers = metadata;
        })
    }

    /// [`Engine::run_request`] with the message's bytes borrowed: they are copied into a
    /// buffer this thread reuses (see [`recycle`]).
    pub fn run_request_from(
        &self,
        prepared: Prepared,
        metadata: Metadata,
        message: &[u8],
    ) -> Result<RequestOutcome, EngineError> {
        self.run_request_with(prepared, 0.0, |m| {
            m.bytes.extend_from_slice(message);
            set_headers(m, metadata);
        })
    }

    /// The request path, its clock reading `age` seconds in the past (0 but for a deferred
    /// request path, [`Engine::exchange`]).
    fn run_request_with(
        &self,
        prepared: Prepared,
        age: f64,
        fill: impl FnOnce(&mut Message),
    ) -> Result<RequestOutcome, EngineError> {
        let Prepared {
            version,
            route,
            side,
        } = prepared;
        let stamp = (side == Side::Client).then_some(version.stamp.as_str());
        let (input, stamped) = fresh_message(stamp, fill);
        let seg = &version.segments[route.segment];
        let of_method = &seg.methods[route.method];
        // Borrowed from the version this call holds, not cloned: an atomic add and subtract
        // on a count every thread shares.
        let Some(compiled) = of_method.compiled.as_deref() else {
            // No element of this edge runs on this side: the request passes as it came
            // (stamped, on the client side).
            return Ok(RequestOutcome {
                verdict: forward_verdict(&input, Arc::clone(&input), stamped),
                rpc: None,
                version: version.number,
            });
        };
        if let Some(check) = &of_method.message_checks[0]
            && let Err(e) = check.check(&input.bytes)
        {
            // Before any element: the RPC meets the chain nowhere (docs/engine.md,
            // "Malformed messages").
            return Ok(RequestOutcome {
                verdict: Verdict::Reject {
                    code: Code::InvalidArgument,
                    message: self.refused("request", of_method.schema.request.full_name(), &e),
                },
                rpc: None,
                version: version.number,
            });
        }
        let template = &of_method.rpc_template;
        let id = self.inner.next_rpc.fetch_add(1, Ordering::Relaxed);
        let mut channels = Channels {
            observer: self.inner.options.channels.as_ref(),
            method: Some(&of_method.schema),
        };
        let now: &dyn Clock = &*self.inner.options.clock;
        let earlier = Earlier {
            clock: now,
            by: age,
        };
        let mut host = Host::new(if age == 0.0 { now } else { &earlier }, &mut channels);
        let mut instances_guard = seg.lock();
        let mut instances = InstanceList::new(&mut instances_guard);
        let mut scratch = RpcScratch::default();
        let out = with_info(template, id, None, |info| {
            BUFFERS.with_borrow_mut(|bufs| {
                let input = Arc::clone(&input);
                let insts = &mut instances.0;
                compiled.request_shared(bufs, insts, input, info, &mut host, &mut scratch)
            })
        });
        let early = match out.verdict {
            SharedVerdict::Forward(m) if of_method.response_inert => {
                // No response handler can have an effect: spare the caller the response
                // call (the RPC's scratch goes with it).
                return Ok(RequestOutcome {
                    verdict: forward_verdict(&input, m, stamped),
                    rpc: None,
                    version: version.number,
                });
            }
            SharedVerdict::Forward(m) => {
                drop(instances);
                drop(instances_guard);
                let number = version.number;
                let forwarded = seg.names.len();
                return Ok(RequestOutcome {
                    verdict: forward_verdict(&input, m, stamped),
                    rpc: Some(Rpc {
                        version,
                        segment: route.segment,
                        method: route.method,
                        id,
                        routed: out.routed,
                        forwarded,
                        scratch,
                    }),
                    version: number,
                });
            }
            SharedVerdict::Reply(m) => m,
            SharedVerdict::Reject { code, message } => Arc::new(Message::error(code, message)),
        };
        // A rejection or local reply travels up through the response handlers of the
        // elements before the one that decided (LANGUAGE.md §6), here and now.
        let answer = if out.decided > 0 {
            with_info(template, id, out.routed.as_deref(), |info| {
                BUFFERS.with_borrow_mut(|bufs| {
                    compiled.response_shared(
                        bufs,
                        &mut instances.0,
                        out.decided - 1,
                        early,
                        info,
                        &mut host,
                        &mut scratch,
                    )
                })
            })
        } else {
            early
        };
        let verdict = if answer.code == Code::Ok {
            Verdict::Reply(answer)
        } else {
            Verdict::Reject {
                code: answer.code,
                message: answer.status_message.clone(),
            }
        };
        Ok(RequestOutcome {
            verdict,
            rpc: None,
            version: version.number,
        })
    }

    /// Runs the response path of an RPC in the version its request ran in. The verdict is
    /// `Forward` (maybe rewritten) or `Reject` (the server's error, or an element's).
    pub fn process_response(
        &self,
        rpc: Rpc,
        response: ServerResponse,
    ) -> Result<ResponseOutcome, EngineError> {
        self.process_response_with(rpc, fill_response(response))
    }

    /// [`Engine::process_response`] of a successful response whose bytes are borrowed: they
    /// are copied into a buffer this thread reuses (see [`recycle`]).
    pub fn process_response_from(
        &self,
        rpc: Rpc,
        metadata: Metadata,
        message: &[u8],
    ) -> Result<ResponseOutcome, EngineError> {
        self.process_response_with(rpc, |m| {
            m.kind = MsgKind::Response;
            m.bytes.extend_from_slice(message);
            set_headers(m, metadata);
        })
    }

    fn process_response_with(
        &self,
        mut rpc: Rpc,
        fill: impl FnOnce(&mut Message),
    ) -> Result<ResponseOutcome, EngineError> {
        let (mut input, _) = fresh_message(None, fill);
        // Borrowed, not cloned: an atomic add and subtract on a count every thread shares.
        let version = &rpc.version;
        let seg = &version.segments[rpc.segment];
        let of_method = &seg.methods[rpc.method];
        if let Some(check) = &of_method.message_checks[1]
            && input.code == Code::Ok
            && let Err(e) = check.check(&input.bytes)
        {
            // The response handlers see an error in its place, as they would a failed call.
            let message = self.refused("response", of_method.schema.response.full_name(), &e);
            input = Arc::new(Message {
                headers: input.headers.clone(),
                ..Message::error(Code::InvalidArgument, message)
            });
        }
        let answer = match (&of_method.compiled, rpc.forwarded) {
            (Some(compiled), n) if n > 0 => {
                let mut channels = Channels {
                    observer: self.inner.options.channels.as_ref(),
                    method: Some(&of_method.schema),
                };
                let mut host = Host::new(&*self.inner.options.clock, &mut channels);
                let mut guard = seg.lock();
                let mut instances = InstanceList::new(&mut guard);
                let template = &of_method.rpc_template;
                with_info(template, rpc.id, rpc.routed.as_deref(), |info| {
                    BUFFERS.with_borrow_mut(|bufs| {
                        compiled.response_shared(
                            bufs,
                            &mut instances.0,
                            n - 1,
                            Arc::clone(&input),
                            info,
                            &mut host,
                            &mut rpc.scratch,
                        )
                    })
                })
            }
            _ => Arc::clone(&input),
        };
        let verdict = if answer.code == Code::Ok {
            // A response goes back to its caller: a `dst` header on it routes nothing.
            match forward_verdict(&input, answer, false) {
                Verdict::Route { forward, .. } => Verdict::Forward(forward),
                verdict => verdict,
            }
        } else {
            Verdict::Reject {
                code: answer.code,
                message: answer.status_message.clone(),
            }
        };
        Ok(ResponseOutcome {
            verdict,
            version: version.number,
        })
    }
}

impl Engine {
    /// A server RPC whose request path waited for its response
    /// ([`Prepared::request_deferrable`]): runs the request path as it would have run when
    /// the request arrived, `request_age` ago (its clock reads that time; it is given no
    /// message and no metadata, which it cannot observe), then the response path, both in the
    /// version `prepared` chose. The outcome is the response's.
    ///
    /// A version whose request path cannot wait (a reload since the caller asked) is an
    /// [`EngineError::NotDeferrable`], and nothing has run: the caller runs both paths.
    pub fn exchange(
        &self,
        prepared: Prepared,
        request_age: Duration,
        response: ServerResponse,
    ) -> Result<ResponseOutcome, EngineError> {
        self.exchange_with(prepared, request_age, fill_response(response))
    }

    /// [`Engine::exchange`] of a successful response whose bytes are borrowed.
    pub fn exchange_from(
        &self,
        prepared: Prepared,
        request_age: Duration,
        metadata: Metadata,
        message: &[u8],
    ) -> Result<ResponseOutcome, EngineError> {
        self.exchange_with(prepared, request_age, |m| {
            m.kind = MsgKind::Response;
            m.bytes.extend_from_slice(message);
            set_headers(m, metadata);
        })
    }

    fn exchange_with(
        &self,
        prepared: Prepared,
        request_age: Duration,
        fill: impl FnOnce(&mut Message),
    ) -> Result<ResponseOutcome, EngineError> {
        if !prepared.request_deferrable() {
            let seg = &prepared.version.segments[prepared.route.segment];
            return Err(EngineError::NotDeferrable {
                method: seg.methods[prepared.route.method].schema.full_name.clone(),
                version: prepared.version(),
            });
        }
        let version = prepared.version();
        let out = self.run_request_with(prepared, request_age.as_secs_f64(), |_| {})?;
        match (out.rpc, out.verdict) {
            (Some(rpc), forwarded) => {
                recycle(forwarded);
                self.process_response_with(rpc, fill)
            }
            (None, Verdict::Forward(_) | Verdict::Route { .. }) => {
                // No response handler can have an effect: the response passes as it came.
                let (input, _) = fresh_message(None, fill);
                Ok(ResponseOutcome {
                    verdict: forward_verdict(&input, Arc::clone(&input), false),
                    version,
                })
            }
            // A deferrable request path neither stops nor fails; should one, its answer is
            // the RPC's, as it would have been on time.
            (None, stopped) => Ok(ResponseOutcome {
                verdict: stopped,
                version,
            }),
        }
    }
}

impl Engine {
    /// Counts a message the whole-message check refused and words the rejection.
    fn refused(&self, what: &str, ty: &str, e: &weft_ir::wire::WireError) -> String {
        self.inner
            .counters
            .refused_malformed
            .fetch_add(1, Ordering::Relaxed);
        format!("malformed {what}: not a valid `{ty}`: {e}")
    }
}

/// Makes a cleared message the server's response.
fn fill_response(response: ServerResponse) -> impl FnOnce(&mut Message) {
    move |m| match response {
        ServerResponse::Ok { message, metadata } => {
            m.kind = MsgKind::Response;
            m.bytes = message;
            m.headers = metadata;
        }
        ServerResponse::Error {
            code,
            message,
            metadata,
        } => {
            *m = Message::error(code, message);
            m.headers = metadata;
        }
    }
}

/// A forward (or route) verdict, flagging what differs from what the caller passed in.
fn forward_verdict(input: &Arc<Message>, out: Arc<Message>, stamped: bool) -> Verdict {
    let same = Arc::ptr_eq(input, &out);
    let message_changed = !same && out.bytes != input.bytes;
    let metadata_changed = stamped || (!same && out.headers != input.headers);
    let forward = Forwarded {
        message: out,
        message_changed,
        metadata_changed,
    };
    match forward.message.headers.get(ROUTE_HEADER) {
        Some(replica) => Verdict::Route {
            replica: replica.clone(),
            forward,
        },
        None => Verdict::Forward(forward),
    }
}

impl Inner {
    /// The version an RPC runs in: the stamped one while it is alive here, else the current.
    /// When the same content was installed twice (A, B, then A again), the newest of them.
    fn version_for(&self, stamp: Option<&str>) -> Arc<Version> {
        let table = self.table.load();
        if let Some(stamp) = stamp
            && stamp != table.current.digest
        {
            for v in table.older.iter().rev() {
                if let Some(v) = v.upgrade()
                    && v.digest == stamp
                {
                    return v;
                }
            }
        }
        Arc::clone(&table.current)
    }

    fn current(&self) -> Arc<Version> {
        Arc::clone(&self.table.load().current)
    }

    pub(crate) fn stats(&self) -> VersionStats {
        let table = self.table.load();
        VersionStats {
            current: table.current.number,
            installed: self.counters.installed.load(Ordering::Relaxed),
            freed: self.counters.freed.load(Ordering::Relaxed),
            draining: table.older.iter().filter(|v| v.strong_count() > 0).count(),
        }
    }

    /// Waits for a reload's install, when counts are being copied to the next version (not
    /// for its build).
    pub(crate) fn rpc_counters(&self) -> RpcCounters {
        let _installed = self
            .install_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.counters.rejected()
    }

    /// The files the last build read (see [`FilesRead`]), and the fingerprint of their
    /// content as it read them. After a failed build these are the failed build's files, so
    /// fixing a file only the new config lists is noticed.
    pub(crate) fn watched(&self) -> FilesRead {
        self.files_read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reloads, and keeps what the watcher needs to tell ([`Engine::last_watch_result`]),
    /// under the reload lock so that results are kept in the order the reloads ran.
    pub(crate) fn reload(
        &self,
        new_source: Option<ConfigSource>,
        by: ReloadBy,
    ) -> Result<Reloaded, EngineError> {
        let _serial = self
            .reload_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let result = self.reload_serially(new_source);
        let mut watched = self
            .watch_result
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match (by, &result) {
            (ReloadBy::Watcher, _) => {
                *watched = Some(result.as_ref().copied().map_err(|e| e.to_string()));
            }
            // The caller's reload read the config since the watcher failed (or replaced it):
            // that failure no longer describes what runs.
            (ReloadBy::Caller, Ok(_)) if matches!(*watched, Some(Err(_))) => *watched = None,
            (ReloadBy::Caller, _) => {}
        }
        result
    }

    /// [`Inner::reload`]'s work; the caller holds the reload lock.
    fn reload_serially(&self, new_source: Option<ConfigSource>) -> Result<Reloaded, EngineError> {
        let source = match new_source {
            Some(s) => s,
            None => self
                .source
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        };
        let number = self.next_install.load(Ordering::Relaxed);
        // Held through the build and the install, which takes over its elements' state: an
        // `Arc`, not a short-lived guard.
        let current = self.table.load_full();
        let mut read = None;
        let built = build(
            &source,
            &self.service,
            &self.options,
            number,
            &self.counters,
            Some(&current.current),
            &mut read,
        );
        if let Some(read) = read {
            *self
                .files_read
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = read;
        }
        let mut built = built?;
        // The source is kept only once the reload cannot fail any more: a failed reload
        // leaves both the version and what later reloads read as they were.
        let keep_source =
            |source| *self.source.lock().unwrap_or_else(PoisonError::into_inner) = source;
        if built.digest == current.current.digest {
            // Same content, same stamp: installing it again would only reset element state.
            keep_source(source);
            return Ok(Reloaded::Unchanged(current.current.number));
        }
        let installing = self
            .install_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // The state is copied now, with the current version's segments locked until the new
        // one is installed: what RPCs wrote during the build is carried over.
        let taken = built.take_over_state(&current.current)?;
        keep_source(source);
        built.mark_installed(self.options.channels.as_ref());
        self.next_install.fetch_add(1, Ordering::Relaxed);
        let mut older: Vec<Weak<Version>> = current
            .older
            .iter()
            .filter(|v| v.strong_count() > 0)
            .cloned()
            .collect();
        older.push(Arc::downgrade(&current.current));
        let built = Arc::new(built);
        // Only the reload lock's holder stores, so a plain store cannot lose an update.
        self.table.store(Arc::new(Table {
            current: Arc::clone(&built),
            older,
        }));
        // After the table: a binding that sees the new number finds the new version.
        self.installed.store(number, Ordering::Release);
        taken.hand_over();
        drop(installing);
        // Outside the install lock: if no RPC runs in the replaced version, this frees it,
        // its code included, and a scrape of the counters need not wait for that.
        drop(current);
        Ok(Reloaded::Installed(number))
    }
}
