//! One installed version of this service's chains: the config it was built from, its content
//! digest, every segment compiled, and the element instances that run them.
//!
//! A version owns its compiled code and its element state. The engine holds the current one;
//! every RPC in flight holds the version it started in, so a version (and its machine code)
//! is freed exactly when it is no longer current and its last RPC has finished.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use weft_hostcalls::channel::{ChannelRecord, ChannelSink};
use weft_hostcalls::clock::Clock;
use weft_hostcalls::rng::SeededRng;
use weft_hostcalls::state::{LocalStore, SharedState};
use weft_ir::abstraction::{ElementAbs, HandlerAbs, Input, Target, abstract_element};
use weft_ir::config::{Config, Side};
use weft_ir::interp::{Host, Instance, RpcInfo};
use weft_ir::layout::Layout;
use weft_ir::load::{
    LoadedEdge, element_candidates, element_source, load_edge_with_schema, load_schema_with_inputs,
};
use weft_ir::schema::{MethodSchema, ProtoInput};
use weft_ir::sim::{var_specs, write_state};
use weft_ir::wire_check::WireCheck;
use weft_jit::{Compiled, Fusion, block_store, compile};

use crate::engine::{ROUTE_HEADER, RpcCounters, VERSION_HEADER};
use crate::error::EngineError;
use crate::placement::{in_process_layout, side_elements};
use crate::watch;

/// Where a version's config comes from.
#[derive(Clone, Debug)]
pub enum ConfigSource {
    /// A `weft.yaml` on disk; reloads read it again.
    File(PathBuf),
    /// YAML text; relative paths in it are resolved against `base_dir`.
    Yaml { text: String, base_dir: PathBuf },
}

/// Receives every channel record (`send(rpc, log)`) the elements emit, with the method of
/// the RPC that emitted it (`None` for records of `init`), whose schema renders the
/// messages a record may hold. It runs on the RPC's thread while the element's segment is
/// locked, so it must not call back into the engine (a call would wait for that lock, or
/// for a reload waiting for it); hand the record to another thread to do more.
pub type ChannelObserver = Arc<dyn Fn(ChannelRecord, Option<&Arc<MethodSchema>>) + Send + Sync>;

/// How the engine builds and runs versions.
#[derive(Clone)]
pub struct EngineOptions {
    /// The clock elements read (`current_time()`); real monotonic time by default, a virtual
    /// clock in tests that compare with the simulator.
    pub clock: Arc<dyn Clock>,
    /// `Some`: every element instance's random stream is reproducible from this seed and the
    /// instance (as in the simulator), for tests. `None` (the default): each instance's stream
    /// is keyed from the operating system's entropy when its version is built, so no two
    /// instances, versions, restarts or replicas draw the same numbers and no one can
    /// predict them, which `encrypt`'s nonces need.
    pub seed: Option<u64>,
    /// Search states the planner's exact search may visit per edge before the configured
    /// placement is kept. A count, not a time, so the client and the server of an edge give
    /// up at the same point and agree on the layout. The default (10⁶) is about 2 s on the
    /// machine of docs/benchmarks.md, 14× the most that 100 random 12-element chains needed.
    pub plan_steps: u64,
    /// Poll the config files this often and reload when their content changes; `None` turns
    /// watching off.
    pub watch_interval: Option<Duration>,
    /// Channel records go here; without an observer they are dropped.
    pub channels: Option<ChannelObserver>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            clock: Arc::new(weft_hostcalls::clock::MonotonicClock::new()),
            seed: None,
            plan_steps: 1_000_000,
            watch_interval: Some(Duration::from_secs(1)),
            channels: None,
        }
    }
}

/// The random stream of the instance of `scope` (`edge/element`) in this service's version
/// `version` (see [`EngineOptions::seed`]). With a fixed seed, version 1 draws the stream the
/// simulator draws for the same instance and each later version a stream of its own, so a
/// reload does not replay the numbers (the nonces) already drawn.
fn instance_rng(
    options: &EngineOptions,
    scope: &str,
    service: &str,
    version: u64,
) -> Result<SeededRng, String> {
    match options.seed {
        Some(seed) => {
            let mut stream = format!("{scope}@{service}");
            if version > 1 {
                stream.push_str(&format!("#{version}"));
            }
            Ok(SeededRng::for_stream(seed, &stream))
        }
        None => {
            let mut key = [0u8; 32];
            getrandom::fill(&mut key).map_err(|e| {
                format!("the operating system gave no entropy for its random stream: {e}")
            })?;
            Ok(SeededRng::from_key(key))
        }
    }
}

/// Counters shared by every version of one engine.
#[derive(Debug, Default)]
pub struct VersionCounters {
    /// Versions installed: the first, and each a reload made current.
    pub installed: AtomicU64,
    /// Installed versions whose code and state were freed (dropped after their last RPC).
    /// A version built but never installed (a reload that failed or changed nothing) is
    /// counted in neither.
    pub freed: AtomicU64,
    /// Malformed messages and run-time errors counted by instances that are gone: those of
    /// elements a reload removed, added when their segment's last RPC finished. An instance
    /// a later version took over passes its counts on instead ([`copy_state`]).
    retired_malformed: AtomicU64,
    retired_errors: AtomicU64,
    retired_iteration_limited: AtomicU64,
    /// Messages a segment's whole-message check refused before its first element
    /// ([`message_checks`]); no instance saw them.
    pub(crate) refused_malformed: AtomicU64,
    /// Requests refused because edges from several services lead into their method and
    /// they named none of them ([`crate::Engine::refuse_caller`]).
    pub(crate) unknown_callers: AtomicU64,
    /// Every segment's instances while they live, whichever version they belong to.
    segments: Segments,
}

/// The engine's segment states, held weakly: a version's segment may outlive the version
/// (an older version's RPCs reach the state the next one took over through it). A state
/// leaves the list only in its own `Drop`, with this lock held while it retires its counts,
/// so a sum that holds the lock sees every state either listed or retired, never neither.
#[derive(Default)]
/// Each is listed with its [`SegmentState::id`]: a state leaving the list may have been moved
/// out of its `Arc` (the unlinking in its `Drop`), so its address no longer names it.
struct Segments(Mutex<Vec<(u64, Weak<SegmentState>)>>);

impl std::fmt::Debug for Segments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Segments")
    }
}

impl VersionCounters {
    /// Malformed messages and run-time errors counted so far: by instances that are gone, and
    /// by every live instance whose state no later version took over (a taken-over
    /// instance's counts went with its state). Call it with installs excluded: during one,
    /// counts are being copied to the next version.
    pub(crate) fn rejected(&self) -> RpcCounters {
        // The states are held while they are summed, so none is dropped (retiring its
        // counts) between reading the retired counts and summing it: nothing counted twice.
        let (alive, mut counts) = loop {
            let states = self
                .segments
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let upgraded: Vec<Option<Arc<SegmentState>>> =
                states.iter().map(|(_, s)| s.upgrade()).collect();
            if upgraded.iter().all(Option::is_some) {
                let retired = RpcCounters {
                    malformed: self.retired_malformed.load(Ordering::Relaxed)
                        + self.refused_malformed.load(Ordering::Relaxed),
                    element_errors: self.retired_errors.load(Ordering::Relaxed),
                    iteration_limited: self.retired_iteration_limited.load(Ordering::Relaxed),
                    unknown_callers: self.unknown_callers.load(Ordering::Relaxed),
                };
                break (upgraded.into_iter().flatten().collect::<Vec<_>>(), retired);
            }
            // A state is being dropped: its counts are neither readable nor retired yet.
            // It retires them and leaves the list as soon as it gets the lock. The states
            // upgraded here are released after the lock: one may be the last reference,
            // and its drop takes the lock.
            drop(states);
            drop(upgraded);
            std::thread::yield_now();
        };
        for state in &alive {
            counts += kept_counts(&state.instances(), state.successor.get());
        }
        counts
    }
}

/// Which segment and method a (side, method) resolves to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MethodRoute {
    pub segment: usize,
    pub method: usize,
}

/// What compiled code sees of an RPC, minus the id, with a key no other template shares:
/// a thread that ran the same template last keeps its copy of the strings, and the key
/// tells it so without comparing them (three string comparisons per call direction).
#[derive(Debug)]
pub struct RpcTemplate {
    pub key: u64,
    pub info: RpcInfo,
}

impl RpcTemplate {
    fn new(info: RpcInfo) -> RpcTemplate {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        RpcTemplate {
            key: NEXT.fetch_add(1, Ordering::Relaxed),
            info,
        }
    }
}

/// The elements of one edge that run on one side in this process, fused per method.
pub(crate) struct Segment {
    pub edge: String,
    pub side: Side,
    /// Instance names in chain order.
    pub names: Vec<String>,
    /// Per instance, what its starting state was made from (see [`Origin`]).
    origins: Vec<Origin>,
    /// The instances, and where later versions took their state ([`SegmentState`]).
    state: Arc<SegmentState>,
    /// By method index: what a call of that method needs of the segment.
    pub methods: Vec<SegmentMethod>,
    /// The instances that take over the state of the previous version's instance of the
    /// same element when this version is installed ([`Version::take_over_state`]).
    take_over: Vec<TakeOver>,
    /// What the instances' `init` sent, held until the version is installed: a version that
    /// is never installed (a reload that failed, or changed nothing) sends nothing.
    init_records: Vec<ChannelRecord>,
}

/// A segment's instances: shared, so that an older version's segment can point at them
/// without keeping this version's code alive.
struct SegmentState {
    /// Names this state in the engine's list of them ([`Segments`]); unique in the process.
    id: u64,
    /// One instance per element, whatever the method (as in the simulator). The lock is per
    /// segment: RPCs of other edges, sides and versions never wait for it.
    instances: Mutex<Vec<Instance>>,
    /// Set when the next version takes over some of these instances' state: where that
    /// state lives from then on. RPCs still running in this version use it there
    /// ([`Segment::lock`]), so what they write is neither lost nor split from what the
    /// newer version's RPCs write.
    successor: OnceLock<Successor>,
    /// Where the counts of instances no later version took over go when this is dropped;
    /// set when its version is installed. A version built but never installed (a reload
    /// that failed, or changed nothing) retires nothing: counts it copied from the current
    /// version are still counted there.
    counters: OnceLock<Arc<VersionCounters>>,
}

impl Drop for SegmentState {
    fn drop(&mut self) {
        self.retire_counts();
        // The links to later versions' states, unlinked one by one: dropped by recursion, a
        // chain as long as the reloads one RPC was held across overflowed the stack. A state
        // taken out of its `Arc` here is dropped moved, which is why the list of states
        // names them by id, not by address.
        let mut next = self.successor.take().map(|s| s.state);
        while let Some(state) = next {
            next = Arc::into_inner(state)
                .and_then(|mut s| s.successor.take())
                .map(|s| s.state);
        }
    }
}

impl SegmentState {
    fn retire_counts(&mut self) {
        let Some(counters) = self.counters.get() else {
            return;
        };
        let instances = self
            .instances
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let kept = kept_counts(instances, self.successor.get());
        let this = self.id;
        // Retired and unlisted under the list's lock, as one step for a sum ([`Segments`]).
        let mut states = counters
            .segments
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        counters
            .retired_malformed
            .fetch_add(kept.malformed, Ordering::Relaxed);
        counters
            .retired_errors
            .fetch_add(kept.element_errors, Ordering::Relaxed);
        counters
            .retired_iteration_limited
            .fetch_add(kept.iteration_limited, Ordering::Relaxed);
        states.retain(|(id, _)| *id != this);
    }
}

/// The malformed messages and run-time errors counted by those of `instances` whose state
/// no later version took over (a taken-over instance's counts went with its state).
fn kept_counts(instances: &[Instance], successor: Option<&Successor>) -> RpcCounters {
    let taken_over =
        |i: usize| successor.is_some_and(|s| s.instance.get(i).copied().flatten().is_some());
    instances
        .iter()
        .enumerate()
        .filter(|&(i, _)| !taken_over(i))
        .fold(RpcCounters::default(), |mut sum, (_, inst)| {
            sum += RpcCounters {
                malformed: inst.malformed,
                element_errors: inst.errors,
                iteration_limited: inst.iteration_limited,
                unknown_callers: 0,
            };
            sum
        })
}

impl SegmentState {
    fn instances(&self) -> MutexGuard<'_, Vec<Instance>> {
        // A panic while the lock was held was caught at the call boundary; the instances'
        // state is whatever the handlers had written, as after a run-time error.
        self.instances
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Where the next version keeps the state of a segment's instances it took over.
struct Successor {
    /// Kept alive as long as the segment that points here.
    state: Arc<SegmentState>,
    /// By instance of that segment: the instance here that holds its state.
    instance: Vec<Option<usize>>,
}

/// A segment's instances, locked for one call: the segment's own, and, once a later version
/// has taken over some of their state, where that state is now.
pub(crate) struct Locked<'a> {
    own: MutexGuard<'a, Vec<Instance>>,
    /// `None` in the usual case (boxed, so that case stays small and its drop is only the
    /// unlock).
    moved: Option<Box<Moved<'a>>>,
}

/// The later versions' segments a call's instances moved to, locked in version order, and
/// where each instance of the call's segment is now: (0 for its own segment, else 1 + the
/// index into `guards`; the index into that segment's instances).
pub(crate) struct Moved<'a> {
    guards: Vec<MutexGuard<'a, Vec<Instance>>>,
    places: Vec<(usize, usize)>,
}

impl Locked<'_> {
    /// The instances in this segment's chain order, each where its state lives now, into
    /// `list` (emptied first), which keeps its allocation.
    #[inline]
    pub fn fill<'l>(&'l mut self, list: &mut Vec<&'l mut Instance>) {
        list.clear();
        match &mut self.moved {
            None => list.extend(self.own.iter_mut()),
            Some(moved) => fill_moved(&mut self.own, moved, list),
        }
    }
}

#[cold]
fn fill_moved<'l>(
    own: &'l mut [Instance],
    moved: &'l mut Moved<'_>,
    list: &mut Vec<&'l mut Instance>,
) {
    let Moved { guards, places } = moved;
    let mut slots: Vec<Vec<Option<&mut Instance>>> = std::iter::once(own)
        .chain(guards.iter_mut().map(|g| g.as_mut_slice()))
        .map(|instances| instances.iter_mut().map(Some).collect())
        .collect();
    list.extend(places.iter().map(|&(g, i)| {
        slots[g][i]
            .take()
            .expect("a take-over maps distinct instances to distinct instances")
    }));
}

/// What a call needs of its segment for one method, together: the fields every call reads
/// come first and fit one cache line (`repr(C)` keeps them there), instead of one line in
/// each of six vectors.
#[repr(C)]
pub(crate) struct SegmentMethod {
    /// `None` when no element of the edge runs on this side.
    pub compiled: Option<Arc<Compiled>>,
    /// The keys decoded for elements to see ([`HeaderKeys::visible`]).
    pub visible_keys: Option<Vec<String>>,
    /// No response handler of the segment can have an effect (no write, no stop, no
    /// reorder, and channel records only when nothing observes them), so a forwarded
    /// request needs no response call.
    pub response_inert: bool,
    /// The request handlers can wait for the response call ([`request_deferrable`]).
    pub request_deferrable: bool,
    /// Whether the request handlers, and the response handlers, can observe the message's
    /// bytes ([`message_observed`]), or the segment checks them ([`message_checks`]).
    pub message_observed: [bool; 2],
    /// The whole-message checks of the request (`[0]`) and the response (`[1]`) this side
    /// runs before its elements ([`message_checks`]).
    pub message_checks: [Option<Arc<WireCheck>>; 2],
    /// What `rpc_id()`, `method()`, `src()`, `dst()` see, minus the id (its key is read on
    /// every call, its strings only by a thread that ran another template last).
    pub rpc_template: RpcTemplate,
    /// The metadata keys elements can observe ([`header_keys`]); `None` when some element
    /// sees the message whole. Read by `weft_metadata_keys`, not by calls.
    pub header_keys: Option<Vec<String>>,
    /// The method's schema, handed to the channel observer with each record.
    pub schema: Arc<MethodSchema>,
}

/// Instance `new` of a segment starts from the state of instance `old` of the previous
/// version's segment of the same edge and side: the same element, unchanged.
struct TakeOver {
    new: usize,
    old: usize,
    ir: Arc<weft_ir::ir::Element>,
}

/// What an instance's starting state is made from: the element as configured (name,
/// parameters, control-plane `state:`) and its source. Equal origins in two versions start
/// equal state, so the newer version takes over the state the older one has built up.
#[derive(Clone, PartialEq)]
struct Origin {
    use_: weft_ir::config::ElementUse,
    source: String,
    /// The edge's compiled protos ([`weft_ir::schema::Schema::encoded`]): a cache holding
    /// responses, or any state built from messages, is kept only while they mean the same.
    schema: Arc<[u8]>,
}

impl Segment {
    /// The segment's instances for a call, following the state later versions took over
    /// ([`Locked`]). Locks are taken from this version towards newer ones, never back, and
    /// an install holds only the version it replaces, so no two calls wait on each other in
    /// a cycle.
    #[inline]
    pub fn lock(&self) -> Locked<'_> {
        Locked {
            own: self.state.instances(),
            moved: self
                .state
                .successor
                .get()
                .and_then(|first| Self::lock_moved(first)),
        }
    }

    /// [`Segment::lock`] once a later version has taken over state: only RPCs that were
    /// running across a reload, or that carry an older version's stamp.
    #[cold]
    fn lock_moved(first: &Successor) -> Option<Box<Moved<'_>>> {
        let mut guards = Vec::new();
        let mut places: Vec<(usize, usize)> = (0..first.instance.len()).map(|i| (0, i)).collect();
        let mut link = Some(first);
        while let Some(next) = link {
            let level = guards.len();
            let moves = |&(g, i): &(usize, usize)| {
                (g == level).then(|| next.instance.get(i).copied().flatten())?
            };
            if !places.iter().any(|p| moves(p).is_some()) {
                break;
            }
            let segment = &*next.state;
            // Its successor, if any, was set before its lock was released at that install:
            // read under the lock, it is final.
            guards.push(segment.instances());
            for p in places.iter_mut() {
                if let Some(j) = moves(p) {
                    *p = (level + 1, j);
                }
            }
            link = segment.successor.get();
        }
        (!guards.is_empty()).then(|| Box::new(Moved { guards, places }))
    }

    pub fn instances(&self) -> MutexGuard<'_, Vec<Instance>> {
        self.state.instances()
    }
}

pub(crate) struct Version {
    /// The local install counter: 1, 2, … (logs, tests, `weft_version()`).
    pub number: u64,
    /// 16 hex digits of the content digest.
    pub digest: String,
    /// The `weft-version` stamp a client sends: `<digest>/<service>`
    /// ([`crate::engine::split_stamp`]).
    pub stamp: String,
    /// By full method name (without the leading `/`). A service has a handful of methods:
    /// a B-tree lookup is a few string compares, where hashing the name with SipHash cost
    /// about 290 instructions per call (callgrind, `runtime/examples/ffi_iters`).
    pub client: BTreeMap<String, MethodRoute>,
    /// The edges into each method, each with the service it comes from. An RPC carries no
    /// edge, only its method and, from a Weft client, its caller's service in the
    /// `weft-version` stamp. A method one edge leads into runs that edge whoever calls (as
    /// before callers were named, so services without Weft keep working); of several, the
    /// caller picks one, and an RPC naming none of them is refused: a policy that depends
    /// on the caller must not be guessed.
    pub server: BTreeMap<String, Vec<CallerRoute>>,
    pub segments: Vec<Segment>,
    /// Per edge of this service: the planned order and sides.
    pub layouts: Vec<(String, Layout)>,
    /// What loading this service's edges warned of, rendered as `weft check --config`
    /// prints it (a name where an enum's number is read, code after a `send`, …): the
    /// runtime still runs the version, and the binding hands this to the operator.
    pub warnings: String,
    /// The compiled protos, encoded ([`Origin::schema`]): one copy for every segment, and
    /// the previous version's when the protos did not change. Encoded per segment, a mesh's
    /// protos (1 MB for 51 files of 2 000 messages) were held once per edge, 100 MB per
    /// version for a service at the end of 100 edges, twice that during a reload.
    schema: Arc<[u8]>,
    counters: Arc<VersionCounters>,
    /// Set by [`Version::mark_installed`].
    installed: bool,
}

impl Drop for Version {
    fn drop(&mut self) {
        if self.installed {
            self.counters.freed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Version {
    /// Counts this version installed, sends what its instances' `init` sent to `observer`,
    /// lets the engine's counters find its instances, and its segments retire their counts
    /// when dropped. Called when it is installed: until
    /// then its segments must not be shared ([`Version::take_over_state`]).
    pub(crate) fn mark_installed(&mut self, observer: Option<&ChannelObserver>) {
        self.installed = true;
        for seg in &mut self.segments {
            for record in std::mem::take(&mut seg.init_records) {
                if let Some(f) = observer {
                    f(record, None);
                }
            }
        }
        self.counters.installed.fetch_add(1, Ordering::Relaxed);
        let mut states = self
            .counters
            .segments
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for seg in &self.segments {
            // Installed once: a version is registered when it becomes current, only then.
            let _ = seg.state.counters.set(Arc::clone(&self.counters));
            states.push((seg.state.id, Arc::downgrade(&seg.state)));
        }
    }

    /// The segment and method an RPC of `method` runs on `side`; on the server side,
    /// `caller` (the service the request's stamp names) picks among edges from several
    /// services.
    pub fn route(&self, side: Side, method: &str, caller: Option<&str>) -> Route<'_> {
        let method = method.strip_prefix('/').unwrap_or(method);
        match side {
            Side::Client => self
                .client
                .get(method)
                .copied()
                .map_or(Route::None, Route::Found),
            Side::Server => match self.server.get(method).map(Vec::as_slice) {
                None | Some([]) => Route::None,
                Some([only]) => Route::Found(only.route),
                Some(edges) => edges
                    .iter()
                    .find(|e| Some(e.caller.as_str()) == caller)
                    .map_or(Route::UnknownCaller(edges), |e| Route::Found(e.route)),
            },
        }
    }
}

/// An edge into a server-side method, and the service it comes from.
#[derive(Debug)]
pub(crate) struct CallerRoute {
    /// The edge's `from`.
    pub caller: String,
    pub route: MethodRoute,
}

/// What [`Version::route`] found.
pub(crate) enum Route<'a> {
    Found(MethodRoute),
    /// No edge of this service covers the method on that side.
    None,
    /// Several edges lead into the method and the RPC named none of their callers.
    UnknownCaller(&'a [CallerRoute]),
}

/// Channel records go to the observer, if any.
pub(crate) struct Channels<'a> {
    pub observer: Option<&'a ChannelObserver>,
    pub method: Option<&'a Arc<MethodSchema>>,
}

impl ChannelSink for Channels<'_> {
    fn emit(&mut self, record: ChannelRecord) {
        if let Some(f) = self.observer {
            f(record, self.method);
        }
    }

    fn enabled(&self) -> bool {
        self.observer.is_some()
    }
}

/// Reads and parses the config text.
fn read_config(source: &ConfigSource) -> Result<(Config, String), EngineError> {
    match source {
        ConfigSource::File(path) => {
            let text = std::fs::read_to_string(path).map_err(|error| EngineError::ReadConfig {
                path: path.display().to_string(),
                error,
            })?;
            let dir = path.parent().unwrap_or(Path::new("."));
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            let config = Config::parse(&path.display().to_string(), dir, &text)?;
            Ok((config, text))
        }
        ConfigSource::Yaml { text, base_dir } => {
            let config = Config::parse("<weft.yaml text>", base_dir, text)?;
            Ok((config, text.clone()))
        }
    }
}

/// The content digest every process loading the same files agrees on: the YAML, every proto
/// it lists, and the source of every element any edge uses (standard elements included, so
/// two builds of Weft with different standard libraries disagree, as they should). Paths
/// enter relative to the config's directory, so where the files live does not matter.
fn content_digest(
    config: &Config,
    yaml: &str,
    config_path: Option<&Path>,
    protos: &[ProtoInput],
) -> (String, Vec<PathBuf>, [u8; 32]) {
    let mut h = Sha256::new();
    let mut read: BTreeMap<PathBuf, Option<Vec<u8>>> = BTreeMap::new();
    if let Some(p) = config_path {
        read.insert(p.to_path_buf(), Some(yaml.as_bytes().to_vec()));
    }
    let mut feed = |label: &str, bytes: &[u8]| {
        h.update((label.len() as u64).to_le_bytes());
        h.update(label.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    feed("weft.yaml", yaml.as_bytes());
    for proto in &config.protos {
        let label = proto.strip_prefix(&config.dir).unwrap_or(proto);
        let bytes = std::fs::read(proto).ok();
        feed(
            &format!("proto:{}", label.display()),
            bytes.as_deref().unwrap_or_default(),
        );
        read.insert(proto.clone(), bytes);
    }
    // Every file the schema's compile opened, imports at any depth included, by import
    // name. The paths searched before the one it was read from are watched as missing: a
    // file appearing there would shadow it.
    for input in protos {
        let mut content = None;
        for candidate in &input.candidates {
            let bytes = match &input.read {
                Some((path, text)) if path == candidate => Some(text.as_bytes().to_vec()),
                Some(_) => None,
                // Not found, or did not parse: what is on disk now.
                None => std::fs::read(candidate).ok(),
            };
            let found = bytes.is_some();
            read.insert(candidate.clone(), bytes.clone());
            if found {
                content = bytes;
                break;
            }
        }
        match content {
            Some(bytes) => feed(&format!("proto-file:{}", input.name), &bytes),
            None => feed(&format!("proto-missing:{}", input.name), b""),
        }
    }
    for edge in &config.edges {
        for (_, use_) in edge.chain() {
            // Every candidate before the file found is watched as missing: one appearing
            // there (an override of a standard element, a file restored) changes the source.
            for candidate in element_candidates(config, use_) {
                let bytes = std::fs::read(&candidate).ok();
                let found = bytes.is_some();
                read.entry(candidate).or_insert(bytes);
                if found {
                    break;
                }
            }
            match element_source(config, use_) {
                Ok(Some(src)) => {
                    if !src.path.starts_with("<std>") {
                        read.insert(PathBuf::from(&src.path), Some(src.text.as_bytes().to_vec()));
                    }
                    feed(&format!("element:{}", use_.element), src.text.as_bytes());
                }
                Ok(None) => feed(&format!("missing-element:{}", use_.element), b""),
                // The build fails on it when it loads the edge; the digest only needs to
                // differ from that of a readable file.
                Err(e) => feed(
                    &format!("unreadable-element:{}", use_.element),
                    e.path.display().to_string().as_bytes(),
                ),
            }
        }
    }
    let sum = h.finalize();
    let hex: String = sum.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let fingerprint = watch::fingerprint_of(read.iter().map(|(p, b)| (p.as_path(), b.as_deref())));
    (hex, read.into_keys().collect(), fingerprint)
}

/// The files a build read (config, protos, element candidates) and their fingerprint as it
/// read them: what the watcher compares with next.
pub(crate) type FilesRead = (Vec<PathBuf>, [u8; 32]);

/// Builds a version: loads, plans and compiles every edge this service is an end of, and
/// starts every element instance (running `init` and the config's `state:`). `read` is set
/// once the config parses, even if the build fails later: the files a fix will touch (an
/// element the config newly lists) are then known.
pub(crate) fn build(
    source: &ConfigSource,
    service: &str,
    options: &EngineOptions,
    number: u64,
    counters: &Arc<VersionCounters>,
    previous: Option<&Version>,
    read: &mut Option<FilesRead>,
) -> Result<Version, EngineError> {
    let (config, yaml) = read_config(source)?;
    let config_path = match source {
        ConfigSource::File(p) => Some(p.as_path()),
        ConfigSource::Yaml { .. } => None,
    };
    // Compiled once for every edge, and before the digest: the digest covers the files the
    // compile opened (imports included) as it read them.
    let (schema, protos) = load_schema_with_inputs(&config);
    let (digest, files, fingerprint) = content_digest(&config, &yaml, config_path, &protos);
    // The watcher compares the files on disk with what this build read, so a write made
    // while the version was being built is not missed.
    *read = Some((files, fingerprint));
    let mine: Vec<&weft_ir::config::Edge> = config
        .edges
        .iter()
        .filter(|e| e.from == service || e.to == service)
        .collect();
    if mine.is_empty() {
        let mut known: Vec<String> = config
            .edges
            .iter()
            .flat_map(|e| [e.from.clone(), e.to.clone()])
            .collect();
        known.sort();
        known.dedup();
        return Err(EngineError::UnknownService {
            config: config.file.clone(),
            service: service.to_owned(),
            known,
        });
    }
    // A client names its service in every call's stamp, a header value, and grpc-go refuses
    // to send a call whose header values are not printable ASCII: every call of every edge
    // from this service would fail, each with INTERNAL. Said once, here.
    if mine.iter().any(|e| e.from == service) && !crate::engine::fits_a_stamp(service) {
        return Err(EngineError::ServiceName {
            service: service.to_owned(),
        });
    }
    // Weak replicas are not merged across processes yet (docs/engine.md): no merge logs.
    let shared = SharedState::unmerged();
    let mut version = Version {
        number,
        stamp: format!("{digest}/{service}"),
        digest,
        client: BTreeMap::new(),
        server: BTreeMap::new(),
        segments: Vec::new(),
        layouts: Vec::new(),
        warnings: String::new(),
        schema: Arc::from(&[][..]),
        counters: Arc::clone(counters),
        installed: false,
    };
    let schema = Arc::new(schema?);
    let encoded: Vec<u8> = schema.encoded();
    version.schema = match previous {
        Some(before) if *before.schema == *encoded => Arc::clone(&before.schema),
        _ => encoded.into(),
    };
    for edge in mine {
        let loaded = load_edge_with_schema(&config, &edge.name, Arc::clone(&schema))?;
        version.warnings.push_str(&loaded.warnings);
        let layout = in_process_layout(&loaded, options.plan_steps)?;
        for side in [Side::Client, Side::Server] {
            let end = match side {
                Side::Client => &edge.from,
                Side::Server => &edge.to,
            };
            if end != service {
                start_elsewhere(&loaded, &layout, side, &config, end, number, options)?;
                continue;
            }
            let before = previous.and_then(|v| {
                v.segments
                    .iter()
                    .find(|seg| seg.edge == edge.name && seg.side == side)
            });
            let ends = Ends {
                config: &config,
                service,
                version: number,
                options,
                shared: &shared,
                schema: &version.schema,
            };
            let segment = build_segment(&loaded, &layout, side, &ends, before)?;
            let index = version.segments.len();
            for (m, method) in loaded.methods.iter().enumerate() {
                let route = MethodRoute {
                    segment: index,
                    method: m,
                };
                let name = &method.full_name;
                let overlap = match side {
                    Side::Client => version.client.insert(name.clone(), route),
                    Side::Server => {
                        // Two edges from one caller would leave the RPC's edge undecidable.
                        let edges = version.server.entry(name.clone()).or_default();
                        let same = edges.iter().find(|e| e.caller == edge.from);
                        let same = same.map(|e| e.route);
                        if same.is_none() {
                            edges.push(CallerRoute {
                                caller: edge.from.clone(),
                                route,
                            });
                        }
                        same
                    }
                };
                if let Some(other) = overlap {
                    let other = &version.segments[other.segment].edge;
                    return Err(EngineError::OverlappingEdges {
                        first: other.clone(),
                        second: edge.name.clone(),
                        side: side_name(side),
                        method: name.clone(),
                        service: service.to_owned(),
                    });
                }
            }
            version.segments.push(segment);
        }
        version.layouts.push((edge.name.clone(), layout));
    }
    Ok(version)
}

pub fn side_name(side: Side) -> &'static str {
    match side {
        Side::Client => "client",
        Side::Server => "server",
    }
}

/// Starts, and drops, the instances the other end of the edge runs (`side`, in service
/// `end`), so that a parameter their `init` refuses fails this build as it fails the other
/// end's. Without it a server accepted a reload whose client-side `ratelimit` refused
/// `capacity: 0`: the two ends then ran different configs, the server's reload reporting
/// success, though `weft check --config` and the client refused it. The instances get
/// state stores of their own and send nothing.
fn start_elsewhere(
    loaded: &LoadedEdge,
    layout: &Layout,
    side: Side,
    config: &Config,
    end: &str,
    version: u64,
    options: &EngineOptions,
) -> Result<(), EngineError> {
    let shared = SharedState::unmerged();
    // The instances are dropped at once: nothing compares their origins.
    let no_schema: Arc<[u8]> = Arc::from(&[][..]);
    let ends = Ends {
        config,
        service: end,
        version,
        options,
        shared: &shared,
        schema: &no_schema,
    };
    let mut unobserved = InitRecords {
        records: Vec::new(),
        observed: false,
    };
    for k in side_elements(layout, side) {
        start_instance(loaded, k, &ends, &mut unobserved)?;
    }
    Ok(())
}

/// What every instance of one version in this service is built with.
struct Ends<'a> {
    /// The config the version is built from, for errors that point into it.
    config: &'a Config,
    service: &'a str,
    version: u64,
    options: &'a EngineOptions,
    shared: &'a SharedState,
    /// The version's encoded protos, which every instance's [`Origin`] shares.
    schema: &'a Arc<[u8]>,
}

fn build_segment(
    loaded: &LoadedEdge,
    layout: &Layout,
    side: Side,
    ends: &Ends<'_>,
    before: Option<&Segment>,
) -> Result<Segment, EngineError> {
    let options = ends.options;
    let edge = &loaded.edge;
    let positions = side_elements(layout, side);
    let mut instances = Vec::with_capacity(positions.len());
    let mut origins = Vec::with_capacity(positions.len());
    let schema = ends.schema;
    let mut init_records = InitRecords {
        records: Vec::new(),
        observed: options.channels.is_some(),
    };
    for &k in &positions {
        instances.push(start_instance(loaded, k, ends, &mut init_records)?);
        origins.push(Origin {
            // The iteration limit bounds what a handler run may do, not the state an
            // instance starts from: a reload that changes only it keeps the state (the
            // way to let an element whose state grew past the limit work again).
            use_: weft_ir::config::ElementUse {
                max_iterations: None,
                ..loaded.elements[k].use_.clone()
            },
            source: loaded.elements[k].source.text.clone(),
            schema: Arc::clone(schema),
        });
    }
    let take_over = before.map_or_else(Vec::new, |before| {
        plan_take_over(loaded, &positions, &origins, &instances, before)
    });
    let mut methods = Vec::with_capacity(loaded.methods.len());
    for method in &loaded.methods {
        let (header_keys, visible_keys) =
            match header_keys(loaded, &positions, &method.full_name, side) {
                Some(HeaderKeys { passed, visible }) => (Some(passed), Some(visible)),
                None => (None, None),
            };
        let irs: Vec<_> = positions
            .iter()
            .filter_map(|&k| loaded.elements[k].ir.get(&method.full_name).cloned())
            .collect();
        let compiled = if irs.is_empty() {
            None
        } else {
            let c = compile(&irs, Fusion::Fused).map_err(|error| EngineError::Compile {
                edge: edge.name.clone(),
                side: side_name(side),
                method: method.full_name.clone(),
                error,
            })?;
            Some(Arc::new(c))
        };
        let message_checks = message_checks(loaded, layout, side, method);
        let mut message_observed = message_observed(loaded, &positions, &method.full_name);
        for (observed, check) in message_observed.iter_mut().zip(&message_checks) {
            *observed |= check.is_some();
        }
        let channels_unobserved = options.channels.is_none();
        let response_inert =
            response_inert(loaded, &positions, &method.full_name, channels_unobserved);
        // Only where it saves a call: without elements, or with an inert response path, the
        // request call is the only one already.
        let request_deferrable = side == Side::Server
            && compiled.is_some()
            && !response_inert
            && message_checks[0].is_none()
            && request_deferrable(loaded, &positions, &method.full_name, channels_unobserved);
        methods.push(SegmentMethod {
            compiled,
            visible_keys,
            response_inert,
            request_deferrable,
            message_observed,
            message_checks,
            rpc_template: RpcTemplate::new(RpcInfo {
                id: 0,
                method: method.full_name.clone(),
                // The server side does not know the calling replica; the calling service
                // stands for it (the simulator's `src` for a single caller).
                src: edge.from.clone(),
                service: edge.to.clone(),
                routed: None,
            }),
            header_keys,
            schema: Arc::new(method.clone()),
        });
    }
    Ok(Segment {
        edge: edge.name.clone(),
        side,
        origins,
        names: positions
            .iter()
            .map(|&k| loaded.elements[k].use_.name.clone())
            .collect(),
        state: Arc::new(SegmentState {
            id: {
                static NEXT: AtomicU64 = AtomicU64::new(1);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
            instances: Mutex::new(instances),
            successor: OnceLock::new(),
            counters: OnceLock::new(),
        }),
        methods,
        take_over,
        init_records: init_records.records,
    })
}

/// Where `init` sends while a version is built ([`Segment::init_records`]).
struct InitRecords {
    records: Vec<ChannelRecord>,
    /// Whether anyone will read them; if not, emitters skip building them.
    observed: bool,
}

impl ChannelSink for InitRecords {
    fn emit(&mut self, record: ChannelRecord) {
        if self.observed {
            self.records.push(record);
        }
    }

    fn enabled(&self) -> bool {
        self.observed
    }
}

/// The planner's abstraction of each element among `positions` that applies to `method`.
fn abstractions<'a>(
    loaded: &'a LoadedEdge,
    positions: &'a [usize],
    method: &'a str,
) -> impl Iterator<Item = ElementAbs> + 'a {
    positions.iter().filter_map(move |&k| {
        let el = &loaded.elements[k];
        el.ir.get(method).map(|ir| abstract_element(ir, &el.use_))
    })
}

/// Whether no response handler of the segment can do anything observable for one method:
/// each only passes the response on (and emits records nobody receives when
/// `channels_unobserved`). Reading time, the route or per-RPC scratch is no effect, and the
/// scratch goes with the request's `Rpc`.
fn response_inert(
    loaded: &LoadedEdge,
    positions: &[usize],
    method: &str,
    channels_unobserved: bool,
) -> bool {
    abstractions(loaded, positions, method)
        .all(|abs| quiet(&abs.resp, channels_unobserved) && !abs.resp.meta_write)
}

/// Whether a handler changes nothing others see: no write (of state, the message or a
/// header), no stop, no reordering, and no record anyone receives.
fn quiet(h: &HandlerAbs, channels_unobserved: bool) -> bool {
    h.writes.is_empty()
        && !h.stops.any()
        && !h.reorders
        && (h.channels.is_empty() || channels_unobserved)
}

/// Whether the request handlers of a segment can run late, in the response call, for one
/// method (docs/engine.md, "Deferred request paths"). They may read the clock, which the
/// deferred call sets back to the request's arrival, and keep per-RPC scratch for the
/// response handlers. Nothing else: no read of the message, a header or state (which other
/// RPCs change meanwhile), no write, no random draw (a write of the instance's stream), no
/// stop or run-time failure, no reordering, no record anyone receives, and no instance
/// start whose outcome depends on when it happens. Then running them late is running them
/// at their time, and nothing in between can tell.
fn request_deferrable(
    loaded: &LoadedEdge,
    positions: &[usize],
    method: &str,
    channels_unobserved: bool,
) -> bool {
    abstractions(loaded, positions, method).all(|abs| {
        let req = &abs.req;
        quiet(req, channels_unobserved)
            && req
                .reads
                .iter()
                .all(|i| matches!(i, Input::Time | Input::Meta))
            && !abs.vars.iter().any(|v| v.creation)
            && (!abs.creation_records || channels_unobserved)
    })
}

/// Whether a segment's request handlers (`[0]`) and response handlers (`[1]`) can observe
/// the message's bytes for one method: read or write a field, or use the message whole. A
/// caller passing only the observed header keys may leave out a message the chain cannot
/// observe (`weft_metadata_keys`). Like [`header_keys`], this is the planner's abstraction.
pub(crate) fn message_observed(
    loaded: &LoadedEdge,
    positions: &[usize],
    method: &str,
) -> [bool; 2] {
    fn body(input: &Input) -> bool {
        match input {
            Input::Whole => true,
            Input::Key(k) => !k.starts_with("h:"),
            _ => false,
        }
    }
    let mut seen = [false; 2];
    for abs in abstractions(loaded, positions, method) {
        for (seen, h) in seen.iter_mut().zip([&abs.req, &abs.resp]) {
            *seen |= h.reads.iter().any(body)
                || h.writes.iter().any(|(target, deps)| {
                    let writes_body = match target {
                        Target::Message | Target::AnyHeader => true,
                        Target::Key(k) => !k.starts_with("h:"),
                        Target::State(_) => false,
                    };
                    writes_body || deps.iter().any(body)
                });
        }
    }
    seen
}

/// The whole-message checks one side runs for one method: the request's (`[0]`) and the
/// response's (`[1]`), each a [`WireCheck`] of the message type, run before the side's first
/// element. A malformed message is rejected there, before any element of the edge has run,
/// so no element's field access can fail, and no placement changes what a malformed RPC
/// does (docs/engine.md, "Malformed messages").
///
/// A direction is checked only when some element of the edge, on either side, reads or
/// writes a field of its message, and only on a side that runs elements for the method:
/// - the request on the client side, or on the server when the client runs none;
/// - the response on the server side, and on the client side too: a server whose response
///   handlers are all inert skips the response call (and so the check) by its own
///   options, which the client cannot know. A response the server checked and found
///   malformed reaches the client as an error, which has no bytes to check again.
pub(crate) fn message_checks(
    loaded: &LoadedEdge,
    layout: &Layout,
    side: Side,
    method: &MethodSchema,
) -> [Option<Arc<WireCheck>>; 2] {
    let runs = |s: Side| {
        side_elements(layout, s)
            .iter()
            .any(|&k| loaded.elements[k].ir.contains_key(&method.full_name))
    };
    if !runs(side) {
        return [None, None];
    }
    let every: Vec<usize> = (0..loaded.elements.len()).collect();
    let parsed = fields_accessed(loaded, &every, &method.full_name);
    let checks_here = [side == Side::Client || !runs(Side::Client), true];
    let types = [&method.request, &method.response];
    std::array::from_fn(|d| {
        (parsed[d] && checks_here[d]).then(|| Arc::new(WireCheck::new(types[d])))
    })
}

/// Whether some element among `positions` reads or writes a field of the request (`[0]`)
/// or the response (`[1]`) of one method: the accesses that decode the message's bytes.
fn fields_accessed(loaded: &LoadedEdge, positions: &[usize], method: &str) -> [bool; 2] {
    let field = |key: &str| key.starts_with("f:");
    let mut accessed = [false; 2];
    for abs in abstractions(loaded, positions, method) {
        for (accessed, h) in accessed.iter_mut().zip([&abs.req, &abs.resp]) {
            *accessed |= h
                .reads
                .iter()
                .any(|i| matches!(i, Input::Key(key) if field(key)))
                || h.writes
                    .iter()
                    .any(|(t, _)| matches!(t, Target::Key(key) if field(key)));
        }
    }
    accessed
}

/// The metadata keys a segment's elements can read or write for one method, plus those the
/// engine reads itself (`weft-version`, and `dst` on the client side); `None` when an
/// element sees the message whole (forwards it into state or a channel, hashes it, reads a
/// header by a computed name, replaces it). Only these keys need decoding for elements: the
/// rest pass through unseen and unchanged, which they would be anyway. The planner's abstraction is the authority on what a handler
/// reads; the equivalence checker relies on the same sets.
pub(crate) fn header_keys(
    loaded: &LoadedEdge,
    positions: &[usize],
    method: &str,
    side: Side,
) -> Option<HeaderKeys> {
    fn add_input(keys: &mut Vec<String>, input: &Input) -> Option<()> {
        match input {
            Input::Whole => return None,
            Input::Key(k) => {
                if let Some(h) = k.strip_prefix("h:")
                    && !keys.iter().any(|x| x == h)
                {
                    keys.push(h.to_owned());
                }
            }
            _ => {}
        }
        Some(())
    }
    let mut keys = Vec::new();
    for abs in abstractions(loaded, positions, method) {
        for h in [&abs.req, &abs.resp] {
            for input in &h.reads {
                add_input(&mut keys, input)?;
            }
            for (target, deps) in &h.writes {
                match target {
                    Target::AnyHeader | Target::Message => return None,
                    Target::Key(k) => add_input(&mut keys, &Input::Key(k.clone()))?,
                    Target::State(_) => {}
                }
                for input in deps {
                    add_input(&mut keys, input)?;
                }
            }
        }
    }
    // The engine reads `dst` only to route a client's request: a server has been reached
    // already, and looking up a key a request lacks is what costs most in grpc-go
    // (`ValueFromIncomingContext` then compares every key, case-folded).
    let engine: &[&str] = match side {
        Side::Client => &[VERSION_HEADER, ROUTE_HEADER],
        Side::Server => &[VERSION_HEADER],
    };
    let mut passed: Vec<String> = engine.iter().map(|k| (*k).to_owned()).collect();
    passed.extend(
        keys.iter()
            .filter(|k| !engine.contains(&k.as_str()))
            .cloned(),
    );
    // A client stamps `weft-version` and routes by `dst` in the metadata elements see; a
    // server only reads the stamp to pick the version (from the encoding, not a map).
    let visible = match side {
        Side::Client => passed.clone(),
        Side::Server => keys,
    };
    Some(HeaderKeys { passed, visible })
}

/// The metadata keys of one method's segment ([`header_keys`]).
pub(crate) struct HeaderKeys {
    /// What a caller must pass: the keys elements observe and those the engine reads.
    pub passed: Vec<String>,
    /// What is decoded for elements to see; every other key passes through untouched.
    pub visible: Vec<String>,
}

/// Which new instances take over the state of the version before: each whose element is
/// unchanged (same name, parameters, `state:` and source as there). A reload that leaves an
/// element alone must not refill its rate limiter, empty its cache or zero its counters;
/// changed and new elements keep the state their `init` made. The state itself is copied
/// when the version is installed ([`Version::take_over_state`]), not here: writes that
/// RPCs make while the version is built must not be lost.
fn plan_take_over(
    loaded: &LoadedEdge,
    positions: &[usize],
    origins: &[Origin],
    instances: &[Instance],
    before: &Segment,
) -> Vec<TakeOver> {
    let mut plan = Vec::new();
    for (new, ((&k, origin), instance)) in positions.iter().zip(origins).zip(instances).enumerate()
    {
        let Some(old) = before.names.iter().position(|n| *n == instance.name) else {
            continue;
        };
        if before.origins.get(old) != Some(origin) {
            continue;
        }
        let ir = loaded
            .methods
            .first()
            .and_then(|m| loaded.elements[k].ir.get(&m.full_name));
        if let Some(ir) = ir {
            plan.push(TakeOver {
                new,
                old,
                ir: Arc::clone(ir),
            });
        }
    }
    plan
}

/// The previous version's segments whose state a new version took over, still locked, and
/// where each instance's state went ([`Version::take_over_state`]).
pub(crate) struct TakenOver<'a> {
    previous: &'a Version,
    guards: Vec<MutexGuard<'a, Vec<Instance>>>,
    /// (the previous version's segment, the new version's instances, by previous instance:
    /// the new instance that holds its state).
    links: Vec<(usize, Arc<SegmentState>, Vec<Option<usize>>)>,
}

impl TakenOver<'_> {
    /// Points the previous version's segments at the new version's instances, then unlocks
    /// them: an RPC of the previous version that was waiting for a lock finds its state
    /// where the new version keeps it. Called once the new version is installed.
    pub(crate) fn hand_over(mut self) {
        for ((old, state, instance), guard) in self.links.into_iter().zip(&mut self.guards) {
            // The previous version's copies of the state moved on are never read again (its
            // RPCs find the state through the link), so they are freed now rather than when
            // the previous version's last RPC ends: one RPC held across many reloads would
            // otherwise keep every version's copy in between.
            for (i, moved) in instance.iter().enumerate() {
                if let (Some(_), Some(inst)) = (moved, guard.get_mut(i)) {
                    inst.store = Box::new(LocalStore::new(&[]));
                }
            }
            let link = Successor { state, instance };
            // Only the current version is replaced, and only once.
            let first = self.previous.segments[old]
                .state
                .successor
                .set(link)
                .is_ok();
            debug_assert!(first, "a version was replaced twice");
        }
        drop(self.guards);
    }
}

impl Version {
    /// Gives each instance of this version, not yet installed, whose element is unchanged
    /// the state its predecessor in `previous` has now: its variables and its error
    /// counters (the scratch of RPCs in flight travels with each RPC). Each predecessor's segment stays locked
    /// until [`TakenOver::hand_over`], called once this version is installed, so that no RPC
    /// of `previous` writes state between the copy and the install; after it, RPCs of
    /// `previous` use the state here (docs/engine.md, "Reload").
    pub(crate) fn take_over_state<'a>(
        &mut self,
        previous: &'a Version,
    ) -> Result<TakenOver<'a>, EngineError> {
        let mut taken = TakenOver {
            previous,
            guards: Vec::new(),
            links: Vec::new(),
        };
        for seg in &mut self.segments {
            if seg.take_over.is_empty() {
                continue;
            }
            let Some(old_seg) = previous
                .segments
                .iter()
                .position(|b| b.edge == seg.edge && b.side == seg.side)
            else {
                continue;
            };
            // Only `hand_over` shares the instances, after this.
            let Some(state) = Arc::get_mut(&mut seg.state) else {
                return Err(EngineError::Instance {
                    edge: seg.edge.clone(),
                    element: String::new(),
                    message: "internal error: the instances were shared before the install".into(),
                });
            };
            let mut old = previous.segments[old_seg].instances();
            let new = state
                .instances
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            let mut moved = vec![None; old.len()];
            for t in &seg.take_over {
                let (Some(from), Some(to)) = (old.get_mut(t.old), new.get_mut(t.new)) else {
                    continue;
                };
                copy_state(from, to, &t.ir).map_err(|message| EngineError::Instance {
                    edge: seg.edge.clone(),
                    element: to.name.clone(),
                    message: format!("taking over the state of the previous version: {message}"),
                })?;
                moved[t.old] = Some(t.new);
            }
            taken.guards.push(old);
            taken.links.push((old_seg, Arc::clone(&seg.state), moved));
        }
        Ok(taken)
    }
}

/// Replaces `to`'s state with `from`'s, variable by variable (a map's entries from `init`
/// are removed first, so keys `from` no longer has do not come back).
fn copy_state(
    from: &mut Instance,
    to: &mut Instance,
    ir: &weft_ir::ir::Element,
) -> Result<(), String> {
    for (name, value) in from.store.snapshot() {
        let Some(var) = ir.var(&name) else { continue };
        if ir.state[var].kind == weft_hostcalls::state::CellKind::Map {
            for (key, _) in to.store.entries(var).map_err(|e| e.to_string())? {
                to.store.delete(var, &key).map_err(|e| e.to_string())?;
            }
            if ir.state[var].capacity.is_some() {
                // Written back oldest first, so the next eviction after the reload removes
                // the key it would have removed before (the snapshot is in key order). The
                // element is unchanged, so `var` names the same variable in `from`.
                for (key, value) in from
                    .store
                    .entries_inserted(var)
                    .map_err(|e| e.to_string())?
                {
                    to.store.set(var, key, value).map_err(|e| e.to_string())?;
                }
                continue;
            }
        }
        write_state(to.store.as_mut(), ir, &name, None, value)?;
    }
    to.errors = from.errors;
    to.malformed = from.malformed;
    to.iteration_limited = from.iteration_limited;
    Ok(())
}

/// Starts element `k`'s instance as the simulator does: state in the version's stores, its
/// own random stream, `init`, then the config's `state:` values.
fn start_instance(
    loaded: &LoadedEdge,
    k: usize,
    ends: &Ends<'_>,
    channels: &mut dyn ChannelSink,
) -> Result<Instance, EngineError> {
    let Ends {
        config,
        service,
        version,
        options,
        shared,
        ..
    } = *ends;
    let el = &loaded.elements[k];
    let err = |message: String| EngineError::Instance {
        edge: loaded.edge.name.clone(),
        element: el.use_.name.clone(),
        message,
    };
    let ir = loaded
        .methods
        .first()
        .and_then(|m| el.ir.get(&m.full_name))
        .cloned()
        .ok_or_else(|| err("was not checked against any method of the edge".into()))?;
    let scope = format!("{}/{}", loaded.edge.name, el.use_.name);
    let store = shared.instance_store(&scope, service, &var_specs(&ir));
    let store = block_store(&ir, Box::new(store));
    let rng = instance_rng(options, &scope, service, version).map_err(err)?;
    let mut instance = Instance::new(el.use_.name.clone(), store, Box::new(rng));
    let mut host = Host::new(&*options.clock, channels);
    // As the simulator and `weft bench` start one; this process holds the element's only
    // instance, so it writes the configured shared state too.
    weft_ir::sim::start_instance(&mut instance, &ir, &el.use_, true, &mut host).map_err(|e| {
        // A parameter value `init` refuses is shown where the config sets it, as `weft
        // check --config` shows it.
        if let Some(at) = weft_ir::load::refusal_in_config(config, loaded, &e) {
            return EngineError::from(at);
        }
        match e {
            weft_ir::sim::SimError::Element { message, .. } => err(message),
            other => err(other.to_string()),
        }
    })?;
    Ok(instance)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use super::{ConfigSource, EngineOptions, VersionCounters, build};

    /// A service at the end of many edges holds the encoded protos once per version, not
    /// once per edge, and a reload that leaves the protos alone shares them with the version
    /// it replaces (both are alive while the old one drains).
    #[test]
    fn every_segment_of_a_version_shares_one_copy_of_the_encoded_protos() {
        let dir = tempfile::tempdir().unwrap();
        let methods: String = (0..6)
            .map(|m| format!("  rpc M{m}(Req) returns (Resp);\n"))
            .collect();
        std::fs::write(
            dir.path().join("s.proto"),
            format!(
                "syntax = \"proto3\";\npackage p;\nmessage Req {{ string user = 1; }}\n\
                 message Resp {{ string body = 1; }}\nservice S {{\n{methods}}}\n"
            ),
        )
        .unwrap();
        let edges: String = (0..6)
            .map(|m| {
                format!(
                    "  e{m}:\n    from: a\n    to: b\n    method: p.S/M{m}\n    \
                     client: [ratelimit, {{firewall: {{field: user, deny: [eve]}}}}]\n"
                )
            })
            .collect();
        let source = |comment: &str| ConfigSource::Yaml {
            text: format!("protos: [s.proto]\nedges:\n{edges}# {comment}\n"),
            base_dir: dir.path().to_path_buf(),
        };
        let options = EngineOptions {
            watch_interval: None,
            seed: Some(1),
            ..EngineOptions::default()
        };
        let counters = Arc::new(VersionCounters::default());
        let mut read = None;
        let first = build(&source("1"), "a", &options, 1, &counters, None, &mut read).unwrap();
        assert_eq!(first.segments.len(), 6);
        assert!(!first.schema.is_empty());
        for seg in &first.segments {
            for origin in &seg.origins {
                assert!(Arc::ptr_eq(&origin.schema, &first.schema), "{}", seg.edge);
            }
        }
        let second = build(
            &source("2"),
            "a",
            &options,
            2,
            &counters,
            Some(&first),
            &mut read,
        )
        .unwrap();
        assert_ne!(second.digest, first.digest);
        assert!(Arc::ptr_eq(&second.schema, &first.schema));
        // Every instance is unchanged, so each takes over its predecessor's state.
        assert!(second.segments.iter().all(|s| s.take_over.len() == 2));
    }
}
