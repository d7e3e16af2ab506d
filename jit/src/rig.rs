//! A chain run in one process without the simulator, for measuring: every element of an
//! edge gets one instance, and each run sends one pre-encoded request down the chain and,
//! when it reaches the server, one pre-encoded response back up. `weft bench` and the
//! criterion benchmarks use it.
//!
//! An RPC consumes its own copies of the two messages, as a service's chain consumes what
//! the network delivered. [`Rig::run`] makes them as part of the RPC; [`Rig::input`] makes
//! them ahead, and keeps the messages an RPC hands on (the request the server got, the
//! answer the client got) until [`Rig::drain`], so [`Rig::run_input`] times only the chain:
//! copying messages in, releasing them after delivery and reading the records belong to the
//! transport and to whoever reads the channels, not to the chain. (Criterion's
//! `iter_batched` draws the same line: inputs made before, outputs dropped after.)

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_hostcalls::channel::ChannelRecord;
use weft_hostcalls::clock::{Clock, MonotonicClock};
use weft_hostcalls::state::{SharedState, StateStore};
use weft_hostcalls::{Message, SeededRng, Value, VirtualClock};
use weft_ir::interp::{self, Host, Instance, RpcInfo, RpcScratch, Verdict};
use weft_ir::ir::Element;
use weft_ir::sim::{Executor, Interp, var_specs};

use crate::compile::{Compiled, Fusion, compile};
use crate::error::JitError;
use crate::exec::{Buffers, SharedVerdict, block_store, emptied};

/// Which executor a rig runs.
pub enum Runner {
    Interp,
    Jit(Box<Compiled>, Buffers),
}

/// One RPC's inputs, made before it runs: its id, the virtual time it runs at, and its own
/// copies of the request and of the server's response, in the form the runner takes.
pub struct RpcInput {
    id: u64,
    at: f64,
    messages: Messages,
}

enum Messages {
    /// The interpreter takes messages by value. Boxed, so an input of compiled code stays
    /// four words and moving one costs nothing next to the chain.
    Owned(Box<(Message, Message)>),
    /// Compiled code shares them (a channel record may hold one), as the runtime does.
    Shared(Arc<Message>, Arc<Message>),
}

impl Messages {
    // An input made by a rig of the other kind still runs; only its timing is off.
    #[inline(always)]
    fn owned(self) -> (Message, Message) {
        match self {
            Messages::Owned(pair) => *pair,
            Messages::Shared(req, resp) => (Arc::unwrap_or_clone(req), Arc::unwrap_or_clone(resp)),
        }
    }

    #[inline(always)]
    fn shared(self) -> (Arc<Message>, Arc<Message>) {
        match self {
            Messages::Shared(req, resp) => (req, resp),
            Messages::Owned(pair) => (Arc::new(pair.0), Arc::new(pair.1)),
        }
    }
}

/// What one run did, so benchmarks can check they measure the path they mean to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    Forwarded,
    Replied(usize),
    Rejected(usize),
}

pub struct Rig {
    pub elements: Vec<Arc<Element>>,
    pub instances: Vec<Instance>,
    pub clock: VirtualClock,
    /// The system clock, when [`Rig::use_system_clock`] put it in the virtual one's place.
    system_clock: Option<MonotonicClock>,
    /// Virtual seconds between runs (a rate limiter sees time pass).
    pub tick: f64,
    pub channels: Vec<ChannelRecord>,
    /// What the RPCs since the last [`Rig::drain`] handed on: by the interpreter, and by
    /// compiled code. Two vectors, so compiled code's push writes one pointer (a push of an
    /// enum as large as a message copies it through the stack, and stalls).
    delivered_owned: Vec<Message>,
    delivered_shared: Vec<Arc<Message>>,
    /// The copies an RPC did not use (the response of one that did not reach the server)
    /// and the boxes the interpreter's inputs came in: dropped at the drain too, so no
    /// executor frees harness memory while it is timed.
    unused_owned: Vec<Message>,
    unused_shared: Vec<Arc<Message>>,
    // The boxes themselves are what is kept: freeing one is the cost to keep out.
    #[allow(clippy::vec_box)]
    spent_boxes: Vec<Box<(Message, Message)>>,
    /// The requests the RPCs take in turn, starting over after the last: never empty (the
    /// one the rig was made with, then any [`Rig::add_requests`] added).
    requests: Vec<Message>,
    pub response: Message,
    runner: Runner,
    rpc: RpcInfo,
    /// The id and virtual time of the last input made.
    last_id: u64,
    last_at: f64,
    /// The allocation behind each run's `Vec<&mut Instance>`, kept empty between runs.
    spare: Vec<&'static mut Instance>,
}

impl Rig {
    /// A rig over `elements` (chain order), with `jit` set to the fusion to compile with, or
    /// `None` for the interpreter. Runs every element's `init`.
    pub fn new(
        elements: &[Arc<Element>],
        jit: Option<Fusion>,
        request: Message,
        response: Message,
    ) -> Result<Rig, JitError> {
        Rig::with_start(elements, jit, request, response, |k, inst, host| {
            let e = &elements[k];
            interp::run_init(inst, e, host)
                .map_err(|err| JitError::Init(e.name.clone(), err.to_string()))
        })
    }

    /// [`Rig::new`], with `start` starting each element's instance (by index) in place of
    /// running its `init` alone: `weft bench` starts them as the simulator does, with the
    /// config's iteration limit and `state:` values.
    pub fn with_start<E: From<JitError>>(
        elements: &[Arc<Element>],
        jit: Option<Fusion>,
        request: Message,
        response: Message,
        mut start: impl FnMut(usize, &mut Instance, &mut Host<'_>) -> Result<(), E>,
    ) -> Result<Rig, E> {
        let shared = SharedState::new();
        let clock = VirtualClock::new(0.0);
        let mut channels = Vec::new();
        let mut instances = Vec::new();
        for (k, e) in elements.iter().enumerate() {
            let store: Box<dyn StateStore + Send> =
                Box::new(shared.instance_store(&e.name, "bench", &var_specs(e)));
            let store = if jit.is_some() {
                block_store(e, store)
            } else {
                store
            };
            let rng = SeededRng::for_stream(1, &format!("{}@bench", e.name));
            let mut inst = Instance::new(e.name.clone(), store, Box::new(rng));
            let mut host = Host::new(&clock, &mut channels);
            start(k, &mut inst, &mut host)?;
            instances.push(inst);
        }
        let runner = match jit {
            None => Runner::Interp,
            Some(f) => Runner::Jit(Box::new(compile(elements, f)?), Buffers::default()),
        };
        Ok(Rig {
            elements: elements.to_vec(),
            instances,
            clock,
            system_clock: None,
            tick: 0.001,
            channels,
            delivered_owned: Vec::new(),
            delivered_shared: Vec::new(),
            unused_owned: Vec::new(),
            unused_shared: Vec::new(),
            spent_boxes: Vec::new(),
            requests: vec![request],
            response,
            runner,
            spare: Vec::new(),
            last_id: 0,
            // `input` starts from the clock, which `init` read.
            last_at: f64::NEG_INFINITY,
            rpc: RpcInfo {
                id: 0,
                method: String::new(),
                src: "bench".into(),
                service: "bench".into(),
                routed: None,
            },
        })
    }

    /// From now on the elements read the system clock, as a service's do, instead of the
    /// virtual one (which still numbers the inputs): a reading costs what it costs in
    /// production (a vDSO call), and time passes as it does there.
    pub fn use_system_clock(&mut self) {
        self.system_clock = Some(MonotonicClock::new());
    }

    /// Writes a state variable of element `k` (e.g. a control-plane value), through its store.
    pub fn set_state(&mut self, k: usize, var: &str, key: Value, value: Value) -> bool {
        let Some((e, inst)) = self.elements.get(k).zip(self.instances.get_mut(k)) else {
            return false;
        };
        match e.var(var) {
            Some(v) => inst.store.set(v, key, value).is_ok(),
            None => false,
        }
    }

    /// One RPC: the previous one's records and messages drained, the messages copied, the
    /// request down the chain, the response (or the early answer) back up.
    pub fn run(&mut self) -> RunOutcome {
        self.drain();
        let input = self.input();
        self.run_input(input)
    }

    /// What the RPCs since the last drain handed on, in order: per RPC, the request as the
    /// server got it (when it got there), then the answer the client got (when a response
    /// handler ran).
    pub fn delivered(&self) -> impl Iterator<Item = &Message> {
        // A rig runs one executor, so one of the two is empty.
        (self.delivered_owned.iter()).chain(self.delivered_shared.iter().map(|m| &**m))
    }

    /// More requests for the RPCs to take in turn after the rig's own, e.g. of several users,
    /// so a per-user limit is measured on the path most of its RPCs take.
    pub fn add_requests(&mut self, more: impl IntoIterator<Item = Message>) {
        self.requests.extend(more);
    }

    /// Drops the records and the delivered messages of the RPCs run since the last drain.
    pub fn drain(&mut self) {
        self.channels.clear();
        self.delivered_owned.clear();
        self.delivered_shared.clear();
        self.unused_owned.clear();
        self.unused_shared.clear();
        self.spent_boxes.clear();
    }

    /// The next RPC's inputs: `tick` virtual seconds after the last input made (or after
    /// the clock, if someone moved it further), with fresh copies of the messages.
    pub fn input(&mut self) -> RpcInput {
        self.last_id = self.last_id.wrapping_add(1);
        self.last_at = self.last_at.max(self.clock.now()) + self.tick;
        // Outside the timed part: the index costs the chain nothing.
        let turn = (self.last_id - 1) % self.requests.len() as u64;
        let (request, response) = (self.requests[turn as usize].clone(), self.response.clone());
        RpcInput {
            id: self.last_id,
            at: self.last_at,
            messages: match self.runner {
                Runner::Interp => Messages::Owned(Box::new((request, response))),
                Runner::Jit(..) => Messages::Shared(Arc::new(request), Arc::new(response)),
            },
        }
    }

    /// One RPC on inputs made by [`Rig::input`], in the order they were made; its records
    /// are added to `channels`, and the messages it hands on are kept until [`Rig::drain`].
    pub fn run_input(&mut self, input: RpcInput) -> RunOutcome {
        self.clock.set(input.at);
        self.rpc.id = input.id;
        let rpc = &self.rpc;
        let mut insts = emptied(std::mem::take(&mut self.spare));
        insts.extend(self.instances.iter_mut());
        let clock: &dyn Clock = match &self.system_clock {
            Some(system) => system,
            None => &self.clock,
        };
        let mut host = Host::new(clock, &mut self.channels);
        // The RPC's scratch, from its request to its response, as a runtime keeps it.
        let mut scratch = RpcScratch::default();
        let outcome = match &mut self.runner {
            Runner::Interp => {
                let (req, response) = match input.messages {
                    Messages::Owned(mut pair) => {
                        let empty = || Message::request(Vec::new());
                        let taken = std::mem::replace(&mut *pair, (empty(), empty()));
                        self.spent_boxes.push(pair);
                        taken
                    }
                    shared => shared.owned(),
                };
                let out = Interp.request(
                    &self.elements,
                    &mut insts,
                    req,
                    rpc,
                    &mut host,
                    &mut scratch,
                );
                let (start, resp, outcome) = match out.verdict {
                    Verdict::Forward(req) => {
                        self.delivered_owned.push(req);
                        (self.elements.len(), response, RunOutcome::Forwarded)
                    }
                    Verdict::Reply(m) => {
                        self.unused_owned.push(response);
                        (out.decided, m, RunOutcome::Replied(out.decided))
                    }
                    Verdict::Reject { code, message } => {
                        self.unused_owned.push(response);
                        let error = Message::error(code, message);
                        (out.decided, error, RunOutcome::Rejected(out.decided))
                    }
                };
                if start > 0 {
                    // The response handlers see where the request was routed, as in
                    // `Compiled::round_trip` and the simulator.
                    let rerouted;
                    let rpc = if out.routed == rpc.routed {
                        rpc
                    } else {
                        rerouted = RpcInfo {
                            routed: out.routed,
                            ..rpc.clone()
                        };
                        &rerouted
                    };
                    let answer = Interp.response(
                        &self.elements,
                        &mut insts,
                        start - 1,
                        resp,
                        rpc,
                        &mut host,
                        &mut scratch,
                    );
                    self.delivered_owned.push(answer);
                }
                outcome
            }
            Runner::Jit(c, bufs) => {
                // Messages stay shared end to end, as the runtime keeps them.
                let (req, response) = input.messages.shared();
                let mut response = Some(response);
                let scratch = &mut scratch;
                // Read where `round_trip` returned it: taken apart into two locals, the pair
                // was first copied with 16-byte loads over the narrower stores that wrote it,
                // which stalled.
                let done = c.round_trip(bufs, &mut insts, req, rpc, &mut host, scratch, || {
                    // `round_trip` asks at most once.
                    (response.take()).unwrap_or_else(|| Arc::new(Message::response(Vec::new())))
                });
                if let Some(unused) = response {
                    self.unused_shared.push(unused);
                }
                let decided = done.0.decided;
                let outcome = match done.0.verdict {
                    SharedVerdict::Forward(req) => {
                        self.delivered_shared.push(req);
                        RunOutcome::Forwarded
                    }
                    SharedVerdict::Reply(_) => RunOutcome::Replied(decided),
                    SharedVerdict::Reject { .. } => RunOutcome::Rejected(decided),
                };
                if let Some(answer) = done.1 {
                    self.delivered_shared.push(answer);
                }
                outcome
            }
        };
        self.spare = emptied(insts);
        outcome
    }
}

/// A rig whose RPC inputs can be made ahead: [`Rig`], and the benchmarks' hand-written chain.
pub trait Batched {
    type Input;
    type Outcome;
    fn input(&mut self) -> Self::Input;
    fn run_input(&mut self, input: Self::Input) -> Self::Outcome;
    fn drain(&mut self);
}

impl Batched for Rig {
    type Input = RpcInput;
    type Outcome = RunOutcome;
    fn input(&mut self) -> RpcInput {
        Rig::input(self)
    }
    fn run_input(&mut self, input: RpcInput) -> RunOutcome {
        Rig::run_input(self, input)
    }
    fn drain(&mut self) {
        Rig::drain(self)
    }
}

/// Nanoseconds per RPC of `n` RPCs that took `d` (0 RPCs count as 1).
pub fn ns_per_rpc(d: Duration, n: u64) -> f64 {
    d.as_nanos() as f64 / n.max(1) as f64
}

/// RPCs per timed batch of [`time_batches`]: their copies and records (about 1 KiB an RPC)
/// stay in the L2 cache, and the two clock reads come to 0.2 ns an RPC.
pub const BATCH: u64 = 256;

/// Runs `n` RPCs and returns the time spent in the chain alone: each batch's inputs are made
/// before its clock starts, and its records and messages dropped after it stops, as a
/// service's transport and channel reader do (and as criterion's `iter_batched` treats
/// inputs and outputs). `each` sees every RPC's outcome, inside the timed part (keep it
/// cheap).
pub fn time_batches<R: Batched>(
    rig: &mut R,
    n: u64,
    mut each: impl FnMut(&R::Outcome),
) -> Duration {
    let mut inputs = Vec::with_capacity(BATCH as usize);
    let (mut timed, mut left) = (Duration::ZERO, n);
    while left > 0 {
        let k = left.min(BATCH);
        rig.drain();
        inputs.extend((0..k).map(|_| rig.input()));
        let start = Instant::now();
        for input in inputs.drain(..) {
            let outcome = rig.run_input(input);
            each(&outcome);
            black_box(outcome);
        }
        timed += start.elapsed();
        left -= k;
    }
    rig.drain();
    timed
}
