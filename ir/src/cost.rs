//! The placement cost model of appnet-nsdi25.txt §4.2, with every constant in one table that
//! telemetry will later overwrite.
//!
//! Per element, a tuple (fraction of RPCs that reach it, needs strong sync, needs weak
//! sync): the fraction is the product of `1 − drop rate` over the elements before it that may
//! stop requests (default rate 0.05, 0 for elements that never do); sync is needed for shared
//! state whose keys are not aligned with the side it runs on (state keyed per server replica
//! on the server side, or per client replica on the client side, is touched by one replica
//! only and needs none). Per segment (side × processor) the fractions are summed and the sync
//! flags or-ed (one sync channel per segment); the tuple is weighted (0.5, 2, 1) and the
//! processor's base cost S_p added. A processor holding no element is bypassed and costs
//! nothing — the bypass bonus.

use std::collections::BTreeMap;

use weft_hostcalls::state::Consistency;

use crate::abstraction::ElementAbs;
use crate::config::{Processor, Side};
use crate::placement::Stage;
use crate::props::Scope;

/// The constants. `paper()` is AppNet's; fields are public so telemetry can replace them.
#[derive(Clone, Debug, PartialEq)]
pub struct CostTable {
    /// Weight of the summed RPC fraction of a segment.
    pub w_fraction: f64,
    /// Weight of a segment needing strong synchronisation.
    pub w_strong: f64,
    /// Weight of a segment needing weak synchronisation.
    pub w_weak: f64,
    /// S_p: base cost of using a processor at all (on one side).
    pub base_lib: f64,
    pub base_sandbox: f64,
    pub base_agent: f64,
    pub base_nic: f64,
    /// Drop rate of an element that may reject or answer requests, unless measured.
    pub default_drop_rate: f64,
    /// Measured drop rates by element name.
    pub drop_rates: BTreeMap<String, f64>,
}

impl CostTable {
    /// AppNet's constants (§4.2): weights (0.5, 2, 1); S_p = 0.1 for the RPC library, 2 for
    /// an out-of-process proxy (our agent). The paper has no sandbox or SmartNIC: the sandbox
    /// is the agent plus Wasm overhead (2.5); the NIC frees host CPU but adds a hop and
    /// offers less (1.0). Only the order of these matters, the paper notes.
    pub fn paper() -> CostTable {
        CostTable {
            w_fraction: 0.5,
            w_strong: 2.0,
            w_weak: 1.0,
            base_lib: 0.1,
            base_sandbox: 2.5,
            base_agent: 2.0,
            base_nic: 1.0,
            default_drop_rate: 0.05,
            drop_rates: BTreeMap::new(),
        }
    }

    pub fn base(&self, p: Processor) -> f64 {
        match p {
            Processor::Lib => self.base_lib,
            Processor::Sandbox => self.base_sandbox,
            Processor::Agent => self.base_agent,
            Processor::Nic => self.base_nic,
        }
    }
}

impl Default for CostTable {
    fn default() -> Self {
        CostTable::paper()
    }
}

/// An element's cost attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct ElementCost {
    /// Fraction of requests it stops.
    pub drop_rate: f64,
    /// Needs strong / weak sync when on the client side, the server side.
    pub strong: [bool; 2],
    pub weak: [bool; 2],
}

fn side_ix(s: Side) -> usize {
    match s {
        Side::Client => 0,
        Side::Server => 1,
    }
}

impl ElementCost {
    /// From the element's abstraction for each method of the edge.
    pub fn of(name: &str, abs: &[&ElementAbs], table: &CostTable) -> ElementCost {
        let stops = abs
            .iter()
            .any(|a| a.req.stops.rejects || a.req.stops.replies);
        let drop_rate = match table.drop_rates.get(name) {
            Some(r) => *r,
            None if stops => table.default_drop_rate,
            None => 0.0,
        };
        let mut strong = [false; 2];
        let mut weak = [false; 2];
        for a in abs {
            for v in a.vars.iter().filter(|v| !v.random_stream) {
                for side in [Side::Client, Side::Server] {
                    let aligned = matches!(
                        (v.scope, side),
                        (Scope::PerServerReplica, Side::Server)
                            | (Scope::PerClientReplica, Side::Client)
                    );
                    if aligned {
                        continue;
                    }
                    match v.consistency {
                        Consistency::Strong => strong[side_ix(side)] = true,
                        Consistency::Weak => weak[side_ix(side)] = true,
                        Consistency::Local => {}
                    }
                }
            }
        }
        ElementCost {
            drop_rate,
            strong,
            weak,
        }
    }

    pub fn strong_on(&self, s: Side) -> bool {
        self.strong[side_ix(s)]
    }

    pub fn weak_on(&self, s: Side) -> bool {
        self.weak[side_ix(s)]
    }
}

/// The cost of a placement: `order` with a stage per element (indexed by element). Written
/// as the paper states it — segments, then tuples — so the searches' incremental sums can be
/// checked against it.
pub fn placement_cost(
    order: &[usize],
    stages: &[Stage],
    costs: &[ElementCost],
    table: &CostTable,
) -> f64 {
    let mut fraction = 1.0;
    // Segment by stage: (sum of fractions, strong, weak).
    let mut segments: BTreeMap<usize, (f64, bool, bool, Processor)> = BTreeMap::new();
    for &e in order {
        let st = stages[e];
        let seg = segments
            .entry(st.index())
            .or_insert((0.0, false, false, st.processor));
        seg.0 += fraction;
        seg.1 |= costs[e].strong_on(st.side);
        seg.2 |= costs[e].weak_on(st.side);
        fraction *= 1.0 - costs[e].drop_rate;
    }
    // A fold from +0.0: an empty sum of floats is -0.0.
    segments.values().fold(0.0, |acc, (f, s, w, p)| {
        acc + table.w_fraction * f
            + if *s { table.w_strong } else { 0.0 }
            + if *w { table.w_weak } else { 0.0 }
            + table.base(*p)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_sum_fractions_and_pay_sync_and_base_once() {
        let t = CostTable::paper();
        let dropper = ElementCost {
            drop_rate: 0.05,
            strong: [true, false],
            weak: [false; 2],
        };
        let plain = ElementCost {
            drop_rate: 0.0,
            strong: [false; 2],
            weak: [false; 2],
        };
        let lib = Stage::new(Side::Client, Processor::Lib);
        let agent = Stage::new(Side::Server, Processor::Agent);
        // [dropper, plain] both in client lib: 0.5 * (1 + 0.95) + 2 (strong) + 0.1.
        let c = placement_cost(&[0, 1], &[lib, lib], &[dropper.clone(), plain.clone()], &t);
        assert!((c - (0.5 * 1.95 + 2.0 + 0.1)).abs() < 1e-12, "{c}");
        // The dropper on the server agent (no sync there), plain first in client lib:
        // client lib 0.5 * 1 + 0.1; server agent 0.5 * 1 + 2.
        let c = placement_cost(&[1, 0], &[agent, lib], &[dropper, plain], &t);
        assert!((c - (0.5 + 0.1 + 0.5 + 2.0)).abs() < 1e-12, "{c}");
    }
}
