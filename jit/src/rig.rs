//! A chain run in one process without the simulator, for measuring: every element of an
//! edge gets one instance, and each run sends one pre-encoded request down the chain and,
//! when it reaches the server, one pre-encoded response back up. `weft bench` and the
//! criterion benchmarks use it.

use std::sync::Arc;

use weft_hostcalls::channel::ChannelRecord;
use weft_hostcalls::state::{SharedState, StateStore};
use weft_hostcalls::{Message, SeededRng, Value, VirtualClock};
use weft_ir::interp::{self, Host, Instance, RpcInfo, Verdict};
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
    /// Virtual seconds between runs (a rate limiter sees time pass).
    pub tick: f64,
    pub channels: Vec<ChannelRecord>,
    pub request: Message,
    pub response: Message,
    runner: Runner,
    rpc: RpcInfo,
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
        let shared = SharedState::new();
        let clock = VirtualClock::new(0.0);
        let mut channels = Vec::new();
        let mut instances = Vec::new();
        for e in elements {
            let store: Box<dyn StateStore + Send> =
                Box::new(shared.instance_store(&e.name, "bench", &var_specs(e)));
            let store = if jit.is_some() {
                block_store(e, store)
            } else {
                store
            };
            let rng = SeededRng::for_stream(1, &format!("{}@bench", e.name));
            let mut inst = Instance::new(e.name.clone(), store, Box::new(rng));
            let mut host = Host {
                clock: &clock,
                channels: &mut channels,
            };
            interp::run_init(&mut inst, e, &mut host)
                .map_err(|err| JitError::Init(e.name.clone(), err.to_string()))?;
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
            tick: 0.001,
            channels,
            request,
            response,
            runner,
            spare: Vec::new(),
            rpc: RpcInfo {
                id: 0,
                method: String::new(),
                src: "bench".into(),
                service: "bench".into(),
                routed: None,
            },
        })
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

    /// One RPC: the request down the chain, the response (or the early answer) back up.
    pub fn run(&mut self) -> RunOutcome {
        self.clock.advance(self.tick);
        self.channels.clear();
        self.rpc.id = self.rpc.id.wrapping_add(1);
        let rpc = &self.rpc;
        let mut insts = emptied(std::mem::take(&mut self.spare));
        insts.extend(self.instances.iter_mut());
        let mut host = Host {
            clock: &self.clock,
            channels: &mut self.channels,
        };
        let req = self.request.clone();
        let outcome = match &mut self.runner {
            Runner::Interp => {
                let out = Interp.request(&self.elements, &mut insts, req, rpc, &mut host);
                let (start, resp, outcome) = match out.verdict {
                    Verdict::Forward(_) => (
                        self.elements.len(),
                        self.response.clone(),
                        RunOutcome::Forwarded,
                    ),
                    Verdict::Reply(m) => (out.decided, m, RunOutcome::Replied(out.decided)),
                    Verdict::Reject { code, message } => (
                        out.decided,
                        Message::error(code, message),
                        RunOutcome::Rejected(out.decided),
                    ),
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
                    Interp.response(&self.elements, &mut insts, start - 1, resp, rpc, &mut host);
                }
                outcome
            }
            Runner::Jit(c, bufs) => {
                // Messages stay shared end to end, as the runtime keeps them.
                let response = &self.response;
                let (out, _) =
                    c.round_trip(bufs, &mut insts, Arc::new(req), rpc, &mut host, || {
                        Arc::new(response.clone())
                    });
                match out.verdict {
                    SharedVerdict::Forward(_) => RunOutcome::Forwarded,
                    SharedVerdict::Reply(_) => RunOutcome::Replied(out.decided),
                    SharedVerdict::Reject { .. } => RunOutcome::Rejected(out.decided),
                }
            }
        };
        self.spare = emptied(insts);
        outcome
    }
}
