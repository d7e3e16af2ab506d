//! The placement model: sides × processors, what each processor can run, and what the chain
//! config allows each element (list position, pins, `untrusted`, `hot_upgrade`).
//!
//! A request passes the processors of a side in a fixed pipeline: on the client side from
//! the application (`lib`) through the node agent (`sandbox` is Wasm hosted by the agent,
//! then the agent's native code) to the SmartNIC (`nic`); on the server side the reverse.
//! Elements placed on one (side, processor) are one *segment*, fused into one function, so
//! a placement is an order whose stages never go backwards along that pipeline. Which
//! processor runs an element never changes what it does (one semantics everywhere); the
//! side can, which is the equivalence checker's business.

use weft_hostcalls::state::Consistency;

use crate::abstraction::{ElementAbs, builtins_used};
use crate::config::{Position, Processor, Side};
use crate::ir::Builtin;
use crate::load::LoadedEdge;

/// One place an element can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stage {
    pub side: Side,
    pub processor: Processor,
}

/// The pipeline a request follows, in order.
pub const PIPELINE: [Stage; 8] = [
    Stage::new(Side::Client, Processor::Lib),
    Stage::new(Side::Client, Processor::Sandbox),
    Stage::new(Side::Client, Processor::Agent),
    Stage::new(Side::Client, Processor::Nic),
    Stage::new(Side::Server, Processor::Nic),
    Stage::new(Side::Server, Processor::Agent),
    Stage::new(Side::Server, Processor::Sandbox),
    Stage::new(Side::Server, Processor::Lib),
];

impl Stage {
    pub const fn new(side: Side, processor: Processor) -> Stage {
        Stage { side, processor }
    }

    /// Position in [`PIPELINE`].
    pub fn index(self) -> usize {
        let p = match self.processor {
            Processor::Lib => 0,
            Processor::Sandbox => 1,
            Processor::Agent => 2,
            Processor::Nic => 3,
        };
        match self.side {
            Side::Client => p,
            Side::Server => 7 - p,
        }
    }

    pub fn name(self) -> String {
        format!(
            "{}/{}",
            side_name(self.side),
            processor_name(self.processor)
        )
    }
}

pub fn side_name(s: Side) -> &'static str {
    match s {
        Side::Client => "client",
        Side::Server => "server",
    }
}

pub fn processor_name(p: Processor) -> &'static str {
    match p {
        Processor::Lib => "lib",
        Processor::Agent => "agent",
        Processor::Sandbox => "sandbox",
        Processor::Nic => "nic",
    }
}

/// What a processor can run.
#[derive(Clone, Copy, Debug)]
pub struct Capability {
    pub processor: Processor,
    /// Runs inside the application's process (so never untrusted code).
    pub in_app: bool,
    /// Can replace an element's code without restarting anything (`hot_upgrade`).
    pub live_swap: bool,
    /// Reaches the strongly consistent store (etcd) on the request path.
    pub strong_state: bool,
    /// Keeps weak replicas and syncs them in the background.
    pub weak_state: bool,
    /// Writes auxiliary channel records.
    pub channels: bool,
    /// Built-ins it cannot run.
    pub lacks: &'static [Builtin],
}

/// The capability table. `lib` and the agent run compiled code that the engine swaps per
/// chain version; the sandbox is Wasm in the agent; the SmartNIC datapath has no etcd client,
/// no background sync, no log sink, no AEAD or compression library, and is reloaded, not
/// swapped.
pub const CAPABILITIES: [Capability; 4] = [
    Capability {
        processor: Processor::Lib,
        in_app: true,
        live_swap: true,
        strong_state: true,
        weak_state: true,
        channels: true,
        lacks: &[],
    },
    Capability {
        processor: Processor::Sandbox,
        in_app: false,
        live_swap: true,
        strong_state: true,
        weak_state: true,
        channels: true,
        lacks: &[],
    },
    Capability {
        processor: Processor::Agent,
        in_app: false,
        live_swap: true,
        strong_state: true,
        weak_state: true,
        channels: true,
        lacks: &[],
    },
    Capability {
        processor: Processor::Nic,
        in_app: false,
        live_swap: false,
        strong_state: false,
        weak_state: false,
        channels: false,
        lacks: &[
            Builtin::Encrypt,
            Builtin::Decrypt,
            Builtin::Compress,
            Builtin::Decompress,
            Builtin::Quantile,
        ],
    },
];

pub fn capability(p: Processor) -> &'static Capability {
    match p {
        Processor::Lib => &CAPABILITIES[0],
        Processor::Sandbox => &CAPABILITIES[1],
        Processor::Agent => &CAPABILITIES[2],
        Processor::Nic => &CAPABILITIES[3],
    }
}

/// What an element needs from a processor (over every method of the edge).
#[derive(Clone, Debug, Default)]
pub struct Needs {
    pub strong: Option<String>,
    pub weak: Option<String>,
    pub channel: Option<String>,
    pub builtins: Vec<Builtin>,
    pub routes: bool,
}

impl Needs {
    pub fn of(abs: &[&ElementAbs], builtins: Vec<Builtin>) -> Needs {
        let mut n = Needs {
            builtins,
            ..Needs::default()
        };
        for a in abs {
            for v in a.vars.iter().filter(|v| !v.random_stream) {
                match v.consistency {
                    Consistency::Strong => n.strong = n.strong.take().or(Some(v.name.clone())),
                    Consistency::Weak => n.weak = n.weak.take().or(Some(v.name.clone())),
                    Consistency::Local => {}
                }
            }
            if let Some(c) = a.channels.first() {
                n.channel = n.channel.take().or(Some(c.clone()));
            }
            n.routes |= a.routes;
        }
        n
    }

    /// Why `p` cannot run it, if it cannot.
    pub fn missing(&self, p: Processor) -> Option<String> {
        let c = capability(p);
        let name = processor_name(p);
        if let (Some(v), false) = (&self.strong, c.strong_state) {
            return Some(format!(
                "{name} cannot run it: it uses strongly consistent state `{v}`"
            ));
        }
        if let (Some(v), false) = (&self.weak, c.weak_state) {
            return Some(format!(
                "{name} cannot run it: it uses weakly consistent state `{v}`"
            ));
        }
        if let (Some(ch), false) = (&self.channel, c.channels) {
            return Some(format!("{name} cannot run it: it writes channel `{ch}`"));
        }
        if let Some(b) = self.builtins.iter().find(|b| c.lacks.contains(b)) {
            return Some(format!(
                "{name} cannot run it: it calls `{}`",
                builtin_name(*b)
            ));
        }
        None
    }
}

fn builtin_name(b: Builtin) -> &'static str {
    match b {
        Builtin::Encrypt => "encrypt",
        Builtin::Decrypt => "decrypt",
        Builtin::Compress => "compress",
        Builtin::Decompress => "decompress",
        Builtin::Quantile => "quantile",
        _ => "a built-in",
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("edge `{edge}`, element `{element}`: {message}{}", hint.as_ref().map(|h| format!("\n  = hint: {h}")).unwrap_or_default())]
pub struct PlacementError {
    pub edge: String,
    pub element: String,
    pub message: String,
    pub hint: Option<String>,
}

/// Where each element may run, and why each restriction holds (for the plan's reasons).
#[derive(Clone, Debug)]
pub struct Allowed {
    /// Per element, the stages it may use, in pipeline order.
    pub stages: Vec<Vec<Stage>>,
    /// Per element, why its options are limited (empty when it may run anywhere).
    pub why: Vec<Vec<String>>,
}

/// Computes the allowed stages from the config and the processors' capabilities; an element
/// with no stage left, or pinned where it cannot run, is an error naming it.
pub fn allowed(
    edge: &LoadedEdge,
    abstractions: &[Vec<&ElementAbs>],
    canonical_sides: &[Side],
) -> Result<Allowed, PlacementError> {
    let mut stages = Vec::new();
    let mut why = Vec::new();
    for (k, el) in edge.elements.iter().enumerate() {
        let c = &el.use_.constraints;
        let err = |message: String, hint: Option<&str>| PlacementError {
            edge: edge.edge.name.clone(),
            element: el.use_.name.clone(),
            message,
            hint: hint.map(str::to_owned),
        };
        let mut builtins = Vec::new();
        for ir in el.ir.values() {
            for b in builtins_used(ir) {
                if !builtins.contains(&b) {
                    builtins.push(b);
                }
            }
        }
        let needs = Needs::of(&abstractions[k], builtins);
        let mut reasons = Vec::new();
        let sides: Vec<Side> = match el.position {
            Position::Client | Position::PairFirst(_) => {
                reasons.push(match el.position {
                    Position::Client => "listed under `client:`".to_owned(),
                    _ => "the first of a pair runs on the client side".to_owned(),
                });
                vec![Side::Client]
            }
            Position::Server | Position::PairSecond(_) => {
                reasons.push(match el.position {
                    Position::Server => "listed under `server:`".to_owned(),
                    _ => "the second of a pair runs on the server side".to_owned(),
                });
                vec![Side::Server]
            }
            Position::Any => match c.side {
                Some(s) => {
                    reasons.push(format!("pinned to the {} side", side_name(s)));
                    vec![s]
                }
                None if needs.routes && canonical_sides[k] == Side::Client => {
                    reasons.push(
                        "it routes requests (writes `dst`, or a header whose name is computed at run time), which only the client side can do: the server side runs on the replica a request already reached"
                            .into(),
                    );
                    vec![Side::Client]
                }
                None => vec![Side::Client, Side::Server],
            },
        };
        let mut procs = Vec::new();
        let candidates: Vec<Processor> = match c.processor {
            Some(p) => {
                reasons.push(format!("pinned to `processor: {}`", processor_name(p)));
                vec![p]
            }
            None => vec![
                Processor::Lib,
                Processor::Sandbox,
                Processor::Agent,
                Processor::Nic,
            ],
        };
        for p in candidates {
            let cap = capability(p);
            let pinned = c.processor.is_some();
            let no = if c.untrusted && cap.in_app {
                Some((
                    format!(
                        "`untrusted` keeps it out of the application, so not `{}`",
                        processor_name(p)
                    ),
                    "pin it to `agent` or `sandbox`, or drop `untrusted`",
                ))
            } else if c.hot_upgrade && !cap.live_swap {
                Some((
                    format!(
                        "`hot_upgrade` needs a processor that swaps code live, which `{}` does not",
                        processor_name(p)
                    ),
                    "pin it to `lib`, `agent` or `sandbox`, or drop `hot_upgrade`",
                ))
            } else {
                needs.missing(p).map(|m| {
                    (
                        m,
                        "pin it to a processor that can run it, or remove the pin",
                    )
                })
            };
            match no {
                Some((m, hint)) if pinned => {
                    return Err(err(
                        format!("pinned to `processor: {}`, but {m}", processor_name(p)),
                        Some(hint),
                    ));
                }
                Some((m, _)) => reasons.push(m),
                None => procs.push(p),
            }
        }
        if procs.is_empty() {
            return Err(err(
                "no processor can run it under its constraints".into(),
                Some("drop `untrusted`/`hot_upgrade`, or run it where its state can live"),
            ));
        }
        let mut st: Vec<Stage> = sides
            .iter()
            .flat_map(|&s| procs.iter().map(move |&p| Stage::new(s, p)))
            .collect();
        st.sort_by_key(|s| s.index());
        stages.push(st);
        why.push(reasons);
    }
    Ok(Allowed { stages, why })
}
