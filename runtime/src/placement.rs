//! Where an edge's elements run in this process: the planner's choice, restricted to the
//! in-process `lib` processor, the only one this runtime has.
//!
//! The planner may still move an `any` element between the client and the server side (when
//! the equivalence checker proves that changes nothing observable), so the client and the
//! server process must reach the same answer from the same files. An element with state
//! shared beyond its instance (`strong`, `weak`) is not moved: here that state is per process. The exact search is
//! deterministic, and bounded by a number of search steps rather than by time so that every
//! process gives up at the same point however loaded its machine; the annealer is not (it
//! runs against a wall-clock budget), so chains too long for the exact search, or whose
//! exact search runs out of steps, keep their configured order and sides. See
//! docs/engine.md.

use weft_hostcalls::state::Consistency;
use weft_ir::config::{Processor, Side};
use weft_ir::cost::CostTable;
use weft_ir::layout::Layout;
use weft_ir::load::{LoadedEdge, LoadedElement};
use weft_ir::plan::{PlanError, Problem};

use crate::error::EngineError;

/// Chains up to this many elements are searched exactly (the planner's own default).
const EXACT_LIMIT: usize = 12;

/// The order and sides of an edge's elements, every one of them on the `lib` processor.
pub fn in_process_layout(edge: &LoadedEdge, max_steps: u64) -> Result<Layout, EngineError> {
    let name = edge.edge.name.clone();
    let plan_err = |error: PlanError| EngineError::Plan {
        edge: name.clone(),
        error,
    };
    let mut pb = Problem::new(edge, &CostTable::paper(), None).map_err(plan_err)?;
    for (k, stages) in pb.allowed.stages.iter_mut().enumerate() {
        stages.retain(|s| s.processor == Processor::Lib);
        if stages.is_empty() {
            let why = pb
                .allowed
                .why
                .get(k)
                .map(|w| w.join("; "))
                .unwrap_or_default();
            return Err(EngineError::NeedsOtherProcessor {
                edge: name.clone(),
                element: pb.names.get(k).cloned().unwrap_or_default(),
                reason: if why.is_empty() {
                    "its constraints exclude `lib`".into()
                } else {
                    why
                },
            });
        }
    }
    // The checker models `@consistency(strong)` and `(weak)` state as one store shared by
    // every process, but this runtime keeps it per process (docs/engine.md): moved to the
    // other side, such an element would count the other process's RPCs. It stays where the
    // config puts it.
    let sides = pb.checker.canonical().sides.clone();
    for (k, stages) in pb.allowed.stages.iter_mut().enumerate() {
        if let (Some(el), Some(side)) = (edge.elements.get(k), sides.get(k))
            && shares_state(el)
        {
            stages.retain(|s| s.side == *side);
        }
    }
    let configured = pb.configured().map(|(_, p)| p);
    let searched = if pb.len() <= EXACT_LIMIT {
        pb.exact_within(None, max_steps).0.map(|(_, p)| p)
    } else {
        None
    };
    let placement = match searched.or(configured) {
        Some(p) => p,
        None => {
            return Err(plan_err(PlanError::Infeasible {
                edge: name.clone(),
                message: "the configured chain cannot be placed in-process".into(),
            }));
        }
    };
    let layout = placement.layout();
    // The search only keeps layouts the checker accepted; checking once more means a planner
    // bug cannot make this process run a chain that behaves differently from the configured one.
    let verdict = pb.checker.check(&layout, pb.obs);
    if !verdict.equivalent {
        return Err(plan_err(PlanError::Infeasible {
            edge: name.clone(),
            message: format!(
                "internal error: the planned placement is not equivalent ({})",
                verdict.reason
            ),
        }));
    }
    Ok(layout)
}

/// Whether the element declares state that is meant to be shared beyond its instance.
fn shares_state(el: &LoadedElement) -> bool {
    el.ir
        .values()
        .flat_map(|e| &e.state)
        .any(|v| v.consistency != Consistency::Local)
}

/// The chain positions that run on `side`, in the order a request meets them.
pub fn side_elements(layout: &Layout, side: Side) -> Vec<usize> {
    layout
        .order
        .iter()
        .copied()
        .filter(|&k| layout.sides[k] == side)
        .collect()
}
