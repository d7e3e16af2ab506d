//! Runs code that `weft_jit::compile_object` made for aarch64 (the BlueField DPU cores) on
//! an aarch64 machine, or under `qemu-aarch64`, and checks it against the interpreter.
//!
//! `compile_object` was only ever checked to produce a verified object; nothing ran it. The
//! `fused` and `unfused` binaries link the object of cross_isa.rs's chain (build.rs makes it
//! on the build machine) and run a few hundred RPCs of a seeded stream through the
//! simulator twice, with the interpreter and with the linked code (`Compiled::from_linked`,
//! through the same calls as the JIT's own code), and require the same verdicts, messages,
//! final state, error counters and channel records. `make aarch64-test` builds and runs
//! both.
//!
//! The object imports each host function as `weft_hc_<id>`. [`host_trampolines!`] defines
//! those symbols in the binary as short jumps through [`HOST_FNS`], which [`run`]
//! fills from `weft_jit::host::host_fn` before any call: the host functions are private to
//! `weft-jit` and only reachable by address, and a jump (unlike a Rust wrapper per
//! function) needs no knowledge of each function's signature, since it leaves every
//! argument and return register as the caller set it. It uses x16 and x17 (IP0/IP1), which
//! the AAPCS64 lets any call clobber between caller and callee (linker veneers use them).
//! Each jump also counts itself in [`HOST_CALLS`], so a run can tell that the linked code
//! really ran (`Compiled` falls back to the interpreter for a state store without blocks).

pub mod chain;

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use weft_hostcalls::rng::random_int;
use weft_hostcalls::state::{SharedState, StateStore};
use weft_hostcalls::{Message, SeededRng, Value};
use weft_ir::interp::{Host, Instance, RpcInfo, RpcScratch};
use weft_ir::ir::Element;
use weft_ir::sim::{
    self, Executor, Interp, Outcome, SegmentRequest, SimOptions, SimReport, parse_trace, var_specs,
};
use weft_jit::host::{ALL, host_fn};
use weft_jit::{Buffers, Compiled, Fusion, block_store, difftest};

/// One more than the largest host function id (ids are never reused, so they may have gaps).
const SLOTS: usize = {
    let (mut n, mut i) = (0, 0);
    while i < ALL.len() {
        if ALL[i] as usize >= n {
            n = ALL[i] as usize + 1;
        }
        i += 1;
    }
    n
};

/// Per host function id, its address; read by the `weft_hc_<id>` jumps.
pub static HOST_FNS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

/// How many host calls the linked code made (incremented by the jumps, not atomically:
/// the simulator runs on one thread).
pub static HOST_CALLS: AtomicU64 = AtomicU64::new(0);

/// Defines the `weft_hc_<id>` symbols the linked object imports (see the crate's docs).
/// Expanded in each binary, not here: an object in a library archive is linked only when
/// something already needs a symbol of it, and the segment object's imports come later on
/// the linker's command line.
#[macro_export]
macro_rules! host_trampolines {
    () => {
        ::core::arch::global_asm!(
            include_str!(concat!(env!("OUT_DIR"), "/host_trampolines.s")),
            calls = sym $crate::HOST_CALLS,
            table = sym $crate::HOST_FNS,
        );
    };
}

/// The simulator's executor for the linked segment.
///
/// The simulator creates an element's instance when a request first reaches it, and until
/// all of a segment's exist it runs the segment one element at a time: those runs, which
/// only the first RPC of the stream (the warm-up) may cause, go to the interpreter. Any
/// other segment is refused, so nothing runs in the interpreter unnoticed.
///
/// After an element rejects or replies, the simulator hands the response handlers only the
/// elements before it (a segment of its own for the JIT, which compiles it apart). The
/// linked code is the whole chain's: like a runtime holding the whole segment (`round_trip`)
/// it takes every instance and runs the response handlers from `start` down, so the
/// instances of the elements that did not run are stand-ins (`spares`), which the code must
/// leave as they were (checked at the end).
struct Linked {
    elements: Vec<Arc<Element>>,
    compiled: Compiled,
    bufs: Mutex<Buffers>,
    spares: Mutex<Vec<Instance>>,
    /// Requests the linked code ran.
    requests: AtomicU64,
}

const WARM_UP: u64 = 1;

impl Linked {
    /// Whether `elements` is the linked segment, or for a response a start of it (else the
    /// interpreter runs it).
    fn is_linked(&self, elements: &[Arc<Element>], rpc: &RpcInfo, prefix: bool) -> bool {
        let linked = (elements.len() == self.elements.len()
            || prefix && !elements.is_empty() && elements.len() < self.elements.len())
            && elements
                .iter()
                .zip(&self.elements)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        assert!(
            linked || rpc.id == WARM_UP,
            "rpc {}: the simulator ran a part of the chain (did the warm-up RPC not reach \
             the server?)",
            rpc.id
        );
        linked
    }

    /// Panics unless every stand-in is as it was made (`fresh`, per element).
    fn check_spares(&self, fresh: &[Vec<(String, Value)>]) {
        let mut spares = self.spares.lock().expect("one thread");
        for (spare, fresh) in spares.iter_mut().zip(fresh) {
            assert_eq!(
                &spare.store.snapshot(),
                fresh,
                "{}: stand-in state",
                spare.name
            );
            assert_eq!((spare.errors, spare.malformed), (0, 0), "{}", spare.name);
        }
    }
}

impl Executor for Linked {
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
        if !self.is_linked(elements, rpc, false) {
            return Interp.request(elements, instances, msg, rpc, host, scratch);
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut bufs = self.bufs.lock().expect("one thread");
        self.compiled
            .request(&mut bufs, instances, msg, rpc, host, scratch)
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
        if !self.is_linked(elements, rpc, true) {
            return Interp.response(elements, instances, start, msg, rpc, host, scratch);
        }
        let mut bufs = self.bufs.lock().expect("one thread");
        let mut spares = self.spares.lock().expect("one thread");
        let mut all: Vec<&mut Instance> = instances.iter_mut().map(|i| &mut **i).collect();
        all.extend(spares.iter_mut().skip(elements.len()));
        self.compiled
            .response(&mut bufs, &mut all, start, msg, rpc, host, scratch)
    }
}

/// `n` RPCs in virtual time from a seeded generator: a burst that drains the rate limiter
/// among quieter spells, `mallory` among the users (the firewall denies
/// her), bodies mostly from a small set (cache hits) and some unique, some slow answers
/// (RPCs in flight together) and some server errors (not cached).
fn trace(n: u64, seed: u64) -> String {
    let mut rng = SeededRng::new(seed);
    let mut pick = |lo: i64, hi: i64| random_int(&mut rng, lo, hi).expect("lo < hi");
    let users = ["alice", "bob", "carol", "dave", "mallory"];
    // The load balancer's replicas, from the control plane: one set, then another (sticky
    // users whose replica left pick again).
    let replicas = |t: f64, names: &str| {
        format!(
            r#"{{"t": {t}, "control": {{"element": "loadbalance", "var": "replicas", "value": [{names}]}}}}"#
        )
    };
    let mut lines = vec![
        replicas(0.0, r#""b-0", "b-1", "b-2""#),
        replicas(2.0, r#""b-1", "b-2", "b-3""#),
    ];
    // Every element's instance exists once a request has passed them all.
    lines.push(format!(
        r#"{{"id": {WARM_UP}, "t": 0, "method": "echo.Echo/Say", "src": "a-0", "req": {{"user": "alice", "body": "warm-up"}}, "resp": {{}}}}"#
    ));
    let mut t_ms = 0;
    for id in WARM_UP + 1..=n {
        // A third of the way in, 120 RPCs within about 60 ms: more than the rate limiter's
        // bucket (100 tokens, 100 a second) holds.
        t_ms += if (n / 3..n / 3 + 120).contains(&id) {
            pick(0, 2)
        } else if pick(0, 10) < 3 {
            pick(20, 60)
        } else {
            pick(0, 3)
        };
        let user = users[pick(0, users.len() as i64) as usize];
        let body = if pick(0, 4) == 0 {
            format!("unique{id}")
        } else {
            format!("common{}", pick(0, 6))
        };
        let mut line = format!(
            r#"{{"id": {id}, "t": {}, "method": "echo.Echo/Say", "src": "a-0", "req": {{"user": "{user}", "body": "{body}"}}, "resp": {{"body": "{body}", "served_by": "b-{}"}}"#,
            t_ms as f64 / 1000.0,
            pick(0, 3)
        );
        if pick(0, 4) == 0 {
            line += &format!(r#", "t_resp": {}"#, (t_ms + pick(1, 40)) as f64 / 1000.0);
        }
        if pick(0, 12) == 0 {
            line += r#", "status": "UNAVAILABLE", "status_message": "restarting""#;
        }
        lines.push(line + "}");
    }
    lines.join("\n")
}

/// Panics at the first difference between the interpreter's report and the linked code's.
fn assert_same(oracle: &SimReport, got: &SimReport, what: &str) {
    assert_eq!(oracle.results.len(), got.results.len(), "{what}: results");
    for (a, b) in oracle.results.iter().zip(&got.results) {
        assert_eq!(a, b, "{what}: rpc {} differs", a.id);
    }
    assert_eq!(oracle.errors, got.errors, "{what}: error counters differ");
    assert_eq!(oracle.state, got.state, "{what}: final state differs");
    let ra: Vec<_> = oracle.channels.iter().map(difftest::record_key).collect();
    let rb: Vec<_> = got.channels.iter().map(difftest::record_key).collect();
    assert_eq!(ra, rb, "{what}: channel records differ");
}

/// How many results the interpreter's report has of each kind the stream must reach, so a
/// change to the elements or the stream cannot quietly leave a path untested.
fn require_coverage(report: &SimReport) {
    let by = |outcome: Outcome, element: &str| {
        report
            .results
            .iter()
            .filter(|r| r.outcome == outcome && r.by.as_deref() == Some(element))
            .count()
    };
    let reached = report
        .results
        .iter()
        .filter(|r| r.outcome == Outcome::Ok)
        .count();
    let cases = [
        ("reached the server", reached),
        ("denied by the firewall", by(Outcome::Rejected, "firewall")),
        (
            "refused by the rate limiter",
            by(Outcome::Rejected, "ratelimit"),
        ),
        (
            "failed by the fault injector",
            by(Outcome::Rejected, "fault"),
        ),
        ("answered from the cache", by(Outcome::Replied, "cache")),
    ];
    for (what, n) in cases {
        assert!(n > 0, "no RPC {what}: the stream no longer covers it");
    }
    assert!(!report.channels.is_empty(), "no channel records");
    println!(
        "  {}",
        cases
            .iter()
            .map(|(what, n)| format!("{n} {what}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// Runs the comparison for the linked object of `fusion`, panicking at a difference.
///
/// # Safety
///
/// `functions` are the `weft_seg{i}_req`/`_resp` of `object` as linked into this binary,
/// which expands [`host_trampolines!`] for its imports.
#[allow(unsafe_code)]
pub unsafe fn run(fusion: Fusion, object: &[u8], functions: &[(*const u8, *const u8)]) {
    for &f in ALL {
        HOST_FNS[f as usize].store(host_fn(f).0 as usize, Ordering::Relaxed);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let config = chain::config(&root).expect("the chain's config");
    let edge = chain::edge(&config).expect("the chain loads");
    let elements = chain::elements(&edge);
    // SAFETY: the caller's contract, and the table the jumps read is filled above.
    let compiled = unsafe { Compiled::from_linked(&elements, fusion, object, functions) }
        .expect("the linked object is this chain's");
    let mut spares: Vec<Instance> = elements
        .iter()
        .map(|e| {
            let store = SharedState::new().instance_store(&e.name, "spare", &var_specs(e));
            let store = block_store(e, Box::new(store));
            Instance::new(e.name.clone(), store, Box::new(SeededRng::new(0)))
        })
        .collect();
    let fresh: Vec<_> = spares.iter_mut().map(|i| i.store.snapshot()).collect();
    let linked = Linked {
        elements,
        compiled,
        bufs: Mutex::new(Buffers::default()),
        spares: Mutex::new(spares),
        requests: AtomicU64::new(0),
    };
    let what = format!("{fusion:?} on {}", std::env::consts::ARCH);
    for seed in [1, 2] {
        let lines = parse_trace(&trace(300, seed)).expect("the stream parses");
        let opts = SimOptions { seed };
        let interval = config.sim.weak_sync_interval;
        let oracle = sim::simulate(&edge, &lines, opts, interval).expect("the interpreter runs");
        let before = HOST_CALLS.load(Ordering::Relaxed);
        linked.requests.store(0, Ordering::Relaxed);
        let got = sim::simulate_with(&edge, &lines, opts, interval, &linked)
            .expect("the linked code runs");
        let calls = HOST_CALLS.load(Ordering::Relaxed) - before;
        let rpcs = oracle.results.len() as u64;
        assert_eq!(
            linked.requests.load(Ordering::Relaxed),
            rpcs - 1,
            "{what}: every RPC but the warm-up runs the linked code"
        );
        assert!(
            calls >= rpcs,
            "{what}: the linked code made {calls} host calls in {rpcs} RPCs: it did not run"
        );
        assert_same(&oracle, &got, &what);
        linked.check_spares(&fresh);
        println!(
            "{what}, stream {seed}: {} RPCs and {} channel records as the interpreter's, {calls} host calls",
            got.results.len(),
            got.channels.len()
        );
        require_coverage(&oracle);
    }
}

/// What a binary built for another machine says: it has nothing it could check.
pub const NOT_AARCH64: &str = "built for aarch64 only: run `make aarch64-test`";

/// The `main` of a binary that runs the object build.rs made for `fusion` (`fused` or
/// `unfused`, the name of its `.rs` in `OUT_DIR`) against the interpreter; on any other
/// machine, a note and exit status 2.
#[macro_export]
macro_rules! linked_main {
    ($object:literal, $fusion:ident) => {
        #[cfg(target_arch = "aarch64")]
        mod linked {
            // The object build.rs linked into this binary and the addresses of its functions.
            include!(concat!(env!("OUT_DIR"), "/", $object, ".rs"));
        }

        #[cfg(target_arch = "aarch64")]
        $crate::host_trampolines!();

        #[cfg(target_arch = "aarch64")]
        fn main() {
            let functions = linked::functions();
            // SAFETY: build.rs linked `linked::OBJECT` into this binary and `functions` are
            // its segment functions; `host_trampolines!` above defines the host functions
            // it imports.
            #[allow(unsafe_code)]
            unsafe {
                $crate::run(weft_jit::Fusion::$fusion, linked::OBJECT, &functions)
            };
        }

        #[cfg(not(target_arch = "aarch64"))]
        fn main() -> std::process::ExitCode {
            eprintln!("{}", $crate::NOT_AARCH64);
            std::process::ExitCode::from(2)
        }
    };
}
