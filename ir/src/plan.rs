//! The placement planner: the cheapest placement (order, side and processor of every
//! element) that the equivalence checker proves equivalent to the configured chain.
//!
//! - **Exact search** (chains up to [`PlanOptions::exact_limit`] elements, 12 by default):
//!   a depth-first search that adds one element at a time at a stage no earlier in the
//!   pipeline than the last, pruned as soon as an element's request-path outputs differ from
//!   the configured chain's ([`Checker::push`]), and memoised on (elements placed, current
//!   stage, sync already paid in the current segment, the checker's fingerprint of the
//!   prefix): the same subproblem is solved once, so the search is a dynamic program over
//!   subsets rather than over permutations.
//! - **Multi-start simulated annealing** beyond that (appnet-nsdi25.txt, Appendix E,
//!   Algorithm 4): mutations move one element, swap two, or change one element's side;
//!   each candidate is checked for equivalence (memoised) and gets the cheapest processors
//!   for its order by a small dynamic program, since processors never change semantics.
//!   Cooling restarts until 15 in a row bring no improvement or the time budget runs out.
//! - **Brute force** ([`Problem::brute_force`]) enumerates every order and every stage
//!   assignment, for tests.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};

use crate::config::{Observation, Side};
use crate::cost::{CostTable, ElementCost, placement_cost};
use crate::equiv::{Checker, EquivError, Partial};
use crate::layout::Layout;
use crate::load::LoadedEdge;
use crate::placement::{Allowed, PlacementError, Stage, allowed, processor_name, side_name};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Equiv(#[from] EquivError),
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// No placement satisfies the constraints (the configured one included).
    #[error("edge `{edge}`: {message}")]
    Infeasible { edge: String, message: String },
}

#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// Wall-clock budget for the whole search.
    pub time_budget: Duration,
    /// Chains up to this many elements are searched exactly.
    pub exact_limit: usize,
    /// Seed of the annealer's random choices.
    pub seed: u64,
    /// Overrides the edge's `consistency`.
    pub consistency: Option<Observation>,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            time_budget: Duration::from_secs(5),
            exact_limit: 12,
            seed: 1,
            consistency: None,
        }
    }
}

/// An order and a stage per element.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Placement {
    pub order: Vec<usize>,
    /// By element index.
    pub stages: Vec<Stage>,
}

impl Placement {
    pub fn layout(&self) -> Layout {
        Layout {
            order: self.order.clone(),
            sides: self.stages.iter().map(|s| s.side).collect(),
        }
    }

    /// Consecutive elements on one stage: the fused groups.
    pub fn segments(&self) -> Vec<(Stage, Vec<usize>)> {
        let mut out: Vec<(Stage, Vec<usize>)> = Vec::new();
        for &e in &self.order {
            let st = self.stages[e];
            match out.last_mut() {
                Some((s, v)) if *s == st => v.push(e),
                _ => out.push((st, vec![e])),
            }
        }
        out
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Search {
    Exact,
    Annealing,
}

impl Search {
    pub fn name(self) -> &'static str {
        match self {
            Search::Exact => "exact",
            Search::Annealing => "annealing",
        }
    }
}

/// A planned edge.
#[derive(Clone, Debug)]
pub struct Plan {
    pub edge: String,
    pub consistency: Observation,
    pub search: Search,
    pub names: Vec<String>,
    pub placement: Placement,
    pub cost: f64,
    /// The configured order and sides with the cheapest processors.
    pub configured_cost: f64,
    pub reasons: Vec<String>,
    pub elapsed: Duration,
}

/// The planning problem for one edge.
pub struct Problem {
    /// For each element, the elements that must come before it.
    must_follow: Vec<Vec<usize>>,
    /// For each element, the fixed pairs it belongs to.
    fixed_with: Vec<Vec<(usize, usize)>>,
    pub checker: Checker,
    pub allowed: Allowed,
    pub costs: Vec<ElementCost>,
    pub table: CostTable,
    pub obs: Observation,
    pub names: Vec<String>,
}

impl Problem {
    pub fn new(
        edge: &LoadedEdge,
        table: &CostTable,
        consistency: Option<Observation>,
    ) -> Result<Problem, PlanError> {
        let checker = Checker::new(edge)?;
        let n = edge.elements.len();
        let mut per_element: Vec<Vec<&crate::abstraction::ElementAbs>> = vec![Vec::new(); n];
        for (_, abs) in checker.abstractions() {
            for (k, a) in abs.iter().enumerate() {
                per_element[k].push(a);
            }
        }
        let allowed = allowed(edge, &per_element, &checker.canonical().sides)?;
        let names: Vec<String> = checker.names().to_vec();
        let costs = per_element
            .iter()
            .zip(&names)
            .map(|(a, name)| ElementCost::of(name, a, table))
            .collect();
        let obs = consistency.unwrap_or(edge.edge.consistency);
        let canon = checker.canonical().positions();
        let mut must_follow = vec![Vec::new(); n];
        let mut fixed_with = vec![Vec::new(); n];
        for a in 0..n {
            for b in 0..n {
                if canon[a] < canon[b] && checker.keeps_order(a, b, obs) {
                    must_follow[b].push(a);
                    fixed_with[a].push((a, b));
                    fixed_with[b].push((a, b));
                }
            }
        }
        Ok(Problem {
            must_follow,
            fixed_with,
            checker,
            allowed,
            costs,
            table: table.clone(),
            obs,
            names,
        })
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn cost(&self, p: &Placement) -> f64 {
        placement_cost(&p.order, &p.stages, &self.costs, &self.table)
    }

    fn fraction(&self, placed: impl Iterator<Item = usize>) -> f64 {
        placed
            .map(|e| 1.0 - self.costs[e].drop_rate)
            .product::<f64>()
    }

    /// Cost added by putting `e` on `st` after elements whose pass fraction is `frac`, in
    /// the segment `prev` (a stage index, `NONE` before the first) with `flags` (bit 0: strong
    /// sync paid, bit 1: weak) — the incremental form of [`placement_cost`].
    fn step(&self, frac: f64, prev: usize, flags: u8, e: usize, st: Stage) -> (f64, u8) {
        let t = &self.table;
        let mut inc = t.w_fraction * frac;
        let mut f = flags;
        if prev != st.index() {
            inc += t.base(st.processor);
            f = 0;
        }
        if self.costs[e].strong_on(st.side) && f & 1 == 0 {
            inc += t.w_strong;
            f |= 1;
        }
        if self.costs[e].weak_on(st.side) && f & 2 == 0 {
            inc += t.w_weak;
            f |= 2;
        }
        (inc, f)
    }

    /// The cheapest processors for a fixed order and sides (processors never change what
    /// the chain does, so this needs no equivalence check): a dynamic program over (stage of
    /// the previous element, sync already paid in its segment).
    pub fn assign_processors(&self, order: &[usize], sides: &[Side]) -> Option<(f64, Placement)> {
        const S: usize = 9 * 4; // (stage index or none) x flags
        let n = order.len();
        let slot = |stage: usize, flags: u8| -> usize {
            let st = if stage == NONE { 8 } else { stage };
            st * 4 + usize::from(flags)
        };
        // cost[i][s]: cheapest cost of the first i elements ending in state s; back[i][s]:
        // (previous state, stage chosen for element i - 1).
        let mut cost = vec![[f64::INFINITY; S]; n + 1];
        let mut back = vec![[(usize::MAX, 0u8); S]; n + 1];
        cost[0][slot(NONE, 0)] = 0.0;
        let mut frac = 1.0;
        for (i, &e) in order.iter().enumerate() {
            for s in 0..S {
                let c = cost[i][s];
                if !c.is_finite() {
                    continue;
                }
                let prev = if s / 4 == 8 { NONE } else { s / 4 };
                let flags = (s % 4) as u8;
                for &st in &self.allowed.stages[e] {
                    if st.side != sides[e] || (prev != NONE && st.index() < prev) {
                        continue;
                    }
                    let (inc, f) = self.step(frac, prev, flags, e, st);
                    let to = slot(st.index(), f);
                    if c + inc < cost[i + 1][to] - EPS {
                        cost[i + 1][to] = c + inc;
                        back[i + 1][to] = (s, st.index() as u8);
                    }
                }
            }
            frac *= 1.0 - self.costs[e].drop_rate;
        }
        let (mut s, best) = cost[n]
            .iter()
            .enumerate()
            .filter(|(_, c)| c.is_finite())
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map(|(s, c)| (s, *c))?;
        let mut stages = vec![Stage::new(Side::Client, crate::config::Processor::Lib); self.len()];
        for i in (1..=n).rev() {
            let (from, st) = back[i][s];
            stages[order[i - 1]] = crate::placement::PIPELINE[st as usize];
            s = from;
        }
        Some((
            best,
            Placement {
                order: order.to_vec(),
                stages,
            },
        ))
    }

    /// The configured order and sides, with the cheapest processors.
    pub fn configured(&self) -> Option<(f64, Placement)> {
        let c = self.checker.canonical().clone();
        self.assign_processors(&c.order, &c.sides)
    }

    // ----- exact search ------------------------------------------------------------------

    /// The cheapest equivalent placement, or `None` when the deadline passed first.
    pub fn exact(&mut self, deadline: Instant) -> Option<(f64, Placement)> {
        self.exact_within(Some(deadline), u64::MAX).0
    }

    /// [`Problem::exact`] that also gives up after `max_steps` states of the search, and the
    /// number of states it visited. Processes that must agree on a placement (the two ends
    /// of an edge) bound the search by steps: every process stops at the same point, where
    /// a deadline depends on the machine's load.
    pub fn exact_within(
        &mut self,
        deadline: Option<Instant>,
        max_steps: u64,
    ) -> (Option<(f64, Placement)>, u64) {
        let n = self.len();
        if n >= 64 {
            return (None, 0);
        }
        if n == 0 {
            let empty = Placement {
                order: Vec::new(),
                stages: Vec::new(),
            };
            return (Some((0.0, empty)), 0);
        }
        let start = self.checker.start();
        let fp = self.checker.fingerprint(&start, self.obs);
        let mut dp = Dp {
            nodes: vec![Node {
                partial: start,
                mask: 0,
                children: Vec::new(),
                complete: None,
            }],
            index: HashMap::from([((0u64, fp), 0usize)]),
            memo: HashMap::new(),
            deadline,
            max_steps,
            steps: 0,
            aborted: false,
        };
        let best = dp.solve(self, 0, NONE, 0);
        self.checker.reset_scratch();
        let steps = dp.steps;
        if dp.aborted {
            return (None, steps);
        }
        let Some(cost) = best.map(|b| b.0) else {
            return (None, steps);
        };
        // Follow the choices.
        let mut stages = vec![Stage::new(Side::Client, crate::config::Processor::Lib); n];
        let mut order = Vec::with_capacity(n);
        let mut state = (0usize, NONE, 0u8);
        while let Some(&Some((_, e, st, next))) = dp.memo.get(&state) {
            order.push(e);
            stages[e] = st;
            match next {
                Some(ns) => state = ns,
                None => break,
            }
        }
        let found = (order.len() == n).then_some((cost, Placement { order, stages }));
        (found, steps)
    }

    /// Every order, every side and every processor assignment (with only the checker's
    /// exact prefix cut), each costed by [`placement_cost`]: the reference the exact search
    /// is tested against.
    pub fn brute_force(&mut self) -> Option<(f64, Placement)> {
        let n = self.len();
        let mut best: Option<(f64, Placement)> = None;
        let start = self.checker.start();
        let mut order = Vec::new();
        let mut sides = vec![Side::Client; n];
        let mut used = vec![false; n];
        self.brute(&start, &mut order, &mut sides, &mut used, &mut best);
        self.checker.reset_scratch();
        best
    }

    fn brute(
        &mut self,
        p: &Partial,
        order: &mut Vec<usize>,
        sides: &mut Vec<Side>,
        used: &mut Vec<bool>,
        best: &mut Option<(f64, Placement)>,
    ) {
        let n = self.len();
        if order.len() == n {
            if self.checker.finish(p, self.obs) {
                let mut stages = vec![Stage::new(Side::Client, crate::config::Processor::Lib); n];
                self.brute_processors(order, sides, 0, NONE, &mut stages, best);
            }
            return;
        }
        let on_server = order.iter().any(|&x| sides[x] == Side::Server);
        for e in 0..n {
            if used[e] {
                continue;
            }
            for side in [Side::Client, Side::Server] {
                if (side == Side::Client && on_server)
                    || !self.allowed.stages[e].iter().any(|s| s.side == side)
                {
                    continue;
                }
                let mut child = p.clone();
                if !self.checker.push(&mut child, e, side, self.obs) {
                    continue;
                }
                used[e] = true;
                sides[e] = side;
                order.push(e);
                self.brute(&child, order, sides, used, best);
                order.pop();
                used[e] = false;
            }
        }
    }

    fn brute_processors(
        &self,
        order: &[usize],
        sides: &[Side],
        i: usize,
        prev: usize,
        stages: &mut Vec<Stage>,
        best: &mut Option<(f64, Placement)>,
    ) {
        if i == order.len() {
            let c = placement_cost(order, stages, &self.costs, &self.table);
            if best.as_ref().is_none_or(|(b, _)| c < *b - EPS) {
                *best = Some((
                    c,
                    Placement {
                        order: order.to_vec(),
                        stages: stages.clone(),
                    },
                ));
            }
            return;
        }
        let e = order[i];
        for &st in &self.allowed.stages[e] {
            if st.side != sides[e] || (prev != NONE && st.index() < prev) {
                continue;
            }
            stages[e] = st;
            self.brute_processors(order, sides, i + 1, st.index(), stages, best);
        }
    }

    // ----- simulated annealing -------------------------------------------------------------

    /// Multi-start simulated annealing from `start` until 15 coolings in a row bring nothing
    /// better or `deadline` passes.
    pub fn anneal(&mut self, start: &Placement, deadline: Instant, seed: u64) -> (f64, Placement) {
        let n = self.len();
        let flexible: Vec<usize> = (0..n)
            .filter(|&e| {
                let s = &self.allowed.stages[e];
                s.iter().any(|x| x.side == Side::Client) && s.iter().any(|x| x.side == Side::Server)
            })
            .collect();
        let mut rng = SplitMix(seed);
        let mut memo: HashMap<Vec<u16>, bool> = HashMap::new();
        let start_cost = self.cost(start);
        let mut best = (start_cost, start.clone());
        let mut current = self.current(start.layout(), start_cost);
        // Steps per temperature grow with the chain, more slowly than the space does: the
        // time budget, not the step count, bounds long chains.
        let steps = 20 + n / 5;
        let (t0, t_min, alpha) = (2.0, 0.01, 0.8);
        let mut idle = 0;
        let mut cooling = 0;
        'outer: while idle < 15 {
            let before = best.0;
            // Restart from the best so far, and every third time from the start.
            let from = if cooling % 3 == 2 {
                (start.layout(), start_cost)
            } else {
                (best.1.layout(), best.0)
            };
            if from.0 != current.layout {
                current = self.current(from.0, from.1);
            }
            cooling += 1;
            let mut t = t0;
            while t > t_min {
                for _ in 0..steps {
                    if Instant::now() >= deadline {
                        break 'outer;
                    }
                    let Some((c, cand)) = self.mutate(&current, &flexible, &mut rng, &mut memo)
                    else {
                        continue;
                    };
                    let delta = c - current.cost;
                    if delta <= 0.0 || rng.unit() < (-delta / t).exp() {
                        if c < best.0 - EPS {
                            best = (c, cand.clone());
                        }
                        current = self.advance(current, cand.layout(), c);
                    }
                }
                t *= alpha;
            }
            if best.0 < before - EPS {
                idle = 0;
            } else {
                idle += 1;
            }
        }
        self.checker.reset_scratch();
        best
    }

    /// A solution with the request pass after each of its prefixes, so a candidate that
    /// shares its first `i` elements is checked from there.
    fn current(&mut self, layout: Layout, cost: f64) -> Current {
        let mut prefixes = Vec::with_capacity(self.len() + 1);
        let mut p = self.checker.start();
        prefixes.push(p.clone());
        for &e in &layout.order {
            self.checker.push(&mut p, e, layout.sides[e], self.obs);
            prefixes.push(p.clone());
        }
        Current {
            layout,
            cost,
            prefixes,
        }
    }

    fn advance(&mut self, mut cur: Current, layout: Layout, cost: f64) -> Current {
        // Terms only grow during a search; start afresh when they take too much memory.
        if self.checker.scratch_len() > 4_000_000 {
            self.checker.reset_scratch();
            return self.current(layout, cost);
        }
        let i = first_change(&cur.layout, &layout);
        cur.prefixes.truncate(i + 1);
        let mut p = cur.prefixes[i].clone();
        for &e in &layout.order[i..] {
            self.checker.push(&mut p, e, layout.sides[e], self.obs);
            cur.prefixes.push(p.clone());
        }
        cur.layout = layout;
        cur.cost = cost;
        cur
    }

    /// Whether `layout` is equivalent, checked from the longest prefix it shares with the
    /// current solution.
    fn equivalent_from(&mut self, cur: &Current, layout: &Layout) -> bool {
        let i = first_change(&cur.layout, layout);
        let mut p = cur.prefixes[i].clone();
        for &e in &layout.order[i..] {
            if !self.checker.push(&mut p, e, layout.sides[e], self.obs) {
                return false;
            }
        }
        self.checker.finish(&p, self.obs)
    }

    /// Algorithm 4: mutate until the result is a valid (equivalent) solution, a bounded
    /// number of times.
    fn mutate(
        &mut self,
        current: &Current,
        flexible: &[usize],
        rng: &mut SplitMix,
        memo: &mut HashMap<Vec<u16>, bool>,
    ) -> Option<(f64, Placement)> {
        let n = self.len();
        for _ in 0..16 {
            let mut order = current.layout.order.clone();
            let mut sides = current.layout.sides.clone();
            let coin = rng.unit();
            // The elements whose order relative to others changes.
            let moved: [usize; 2];
            if coin < 0.4 && n > 1 {
                let from = rng.below(n);
                let x = order.remove(from);
                let to = rng.below(n);
                order.insert(to, x);
                moved = [x, x];
            } else if coin < 0.8 && n > 1 {
                let (a, b) = (rng.below(n), rng.below(n));
                order.swap(a, b);
                moved = [order[a], order[b]];
            } else if !flexible.is_empty() {
                let e = flexible[rng.below(flexible.len())];
                sides[e] = match sides[e] {
                    Side::Client => Side::Server,
                    Side::Server => Side::Client,
                };
                moved = [e, e];
            } else {
                continue;
            }
            // Client-side elements come first.
            let mut normal: Vec<usize> = order
                .iter()
                .copied()
                .filter(|&e| sides[e] == Side::Client)
                .collect();
            normal.extend(order.iter().copied().filter(|&e| sides[e] == Side::Server));
            if normal == current.layout.order && sides == current.layout.sides {
                continue;
            }
            let mut pos = vec![0; n];
            for (i, &e) in normal.iter().enumerate() {
                pos[e] = i;
            }
            // Only pairs with a moved element can have changed their order.
            if moved
                .iter()
                .any(|&x| self.fixed_with[x].iter().any(|&(a, b)| pos[a] > pos[b]))
            {
                continue;
            }
            let key: Vec<u16> = normal
                .iter()
                .map(|&e| e as u16)
                .chain(sides.iter().map(|s| u16::from(*s == Side::Server)))
                .collect();
            let layout = Layout {
                order: normal,
                sides,
            };
            let ok = match memo.get(&key) {
                Some(&ok) => ok,
                None => {
                    let ok = self.equivalent_from(current, &layout);
                    if memo.len() > 1 << 20 {
                        memo.clear();
                    }
                    memo.insert(key, ok);
                    ok
                }
            };
            if !ok {
                continue;
            }
            if let Some(found) = self.assign_processors(&layout.order, &layout.sides) {
                return Some(found);
            }
        }
        None
    }
}

/// The annealer's current solution.
struct Current {
    layout: Layout,
    cost: f64,
    /// `prefixes[i]`: the request pass over the first `i` elements.
    prefixes: Vec<Partial>,
}

/// The first position where two layouts differ (in the element or its side).
fn first_change(a: &Layout, b: &Layout) -> usize {
    a.order
        .iter()
        .zip(&b.order)
        .position(|(&x, &y)| x != y || a.sides[x] != b.sides[y])
        .unwrap_or(a.order.len())
}

const NONE: usize = usize::MAX;
const EPS: f64 = 1e-9;

/// A DP state: (semantic node, stage of the last element, sync flags of its segment).
type State = (usize, usize, u8);
/// Best cost from a state, the element and stage chosen, and the state after (`None` when
/// the layout is complete).
type Choice = Option<(f64, usize, Stage, Option<State>)>;

/// A set of placed elements with one representative request pass; prefixes with the same
/// elements and the same checker fingerprint share a node.
struct Node {
    partial: Partial,
    mask: u64,
    /// (element, side) -> the node after adding it, once computed; `None` when the checker
    /// rejects it.
    children: Vec<((usize, Side), Option<usize>)>,
    /// For complete layouts: whether the response path and the messages match.
    complete: Option<bool>,
}

/// The exact search: semantic nodes (what the checker sees) are built once each; the cost
/// dynamic program runs over (node, stage, flags) on top, so the processor dimension never
/// repeats an equivalence check.
struct Dp {
    nodes: Vec<Node>,
    index: HashMap<(u64, Vec<u32>), usize>,
    memo: HashMap<State, Choice>,
    deadline: Option<Instant>,
    max_steps: u64,
    steps: u64,
    aborted: bool,
}

impl Dp {
    fn child(&mut self, pb: &mut Problem, node: usize, e: usize, side: Side) -> Option<usize> {
        if let Some((_, c)) = self.nodes[node]
            .children
            .iter()
            .find(|(k, _)| *k == (e, side))
        {
            return *c;
        }
        let mut p = self.nodes[node].partial.clone();
        let ok = pb.checker.push(&mut p, e, side, pb.obs);
        let found = if ok {
            let mask = self.nodes[node].mask | (1 << e);
            let key = (mask, pb.checker.fingerprint(&p, pb.obs));
            Some(match self.index.get(&key) {
                Some(&id) => id,
                None => {
                    let id = self.nodes.len();
                    self.nodes.push(Node {
                        partial: p,
                        mask,
                        children: Vec::new(),
                        complete: None,
                    });
                    self.index.insert(key, id);
                    id
                }
            })
        } else {
            None
        };
        self.nodes[node].children.push(((e, side), found));
        found
    }

    fn complete_ok(&mut self, pb: &mut Problem, node: usize) -> bool {
        if let Some(ok) = self.nodes[node].complete {
            return ok;
        }
        let ok = pb.checker.finish(&self.nodes[node].partial, pb.obs);
        self.nodes[node].complete = Some(ok);
        ok
    }

    fn solve(&mut self, pb: &mut Problem, node: usize, prev: usize, flags: u8) -> Choice {
        let state = (node, prev, flags);
        if let Some(c) = self.memo.get(&state) {
            return *c;
        }
        self.steps += 1;
        if self.steps > self.max_steps
            || (self.steps.is_multiple_of(256)
                && self.deadline.is_some_and(|d| Instant::now() >= d))
        {
            self.aborted = true;
        }
        if self.aborted {
            return None;
        }
        let n = pb.len();
        let mask = self.nodes[node].mask;
        let frac = pb.fraction((0..n).filter(|e| mask & (1 << e) != 0));
        let mut best: Choice = None;
        for e in 0..n {
            if mask & (1 << e) != 0 || pb.must_follow[e].iter().any(|&f| mask & (1 << f) == 0) {
                continue;
            }
            for st in pb.allowed.stages[e].clone() {
                if prev != NONE && st.index() < prev {
                    continue;
                }
                let Some(child) = self.child(pb, node, e, st.side) else {
                    continue;
                };
                let (inc, f) = pb.step(frac, prev, flags, e, st);
                let full = self.nodes[child].mask.count_ones() as usize == n;
                let (rest, next) = if full {
                    if !self.complete_ok(pb, child) {
                        continue;
                    }
                    (0.0, None)
                } else {
                    let ns = (child, st.index(), f);
                    match self.solve(pb, ns.0, ns.1, ns.2) {
                        Some((c, ..)) => (c, Some(ns)),
                        None => continue,
                    }
                };
                if self.aborted {
                    return None;
                }
                let total = inc + rest;
                if best.is_none_or(|(b, ..)| total < b - EPS) {
                    best = Some((total, e, st, next));
                }
            }
        }
        self.memo.insert(state, best);
        best
    }
}

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

// ----- planning an edge ---------------------------------------------------------------------

/// Plans one edge.
pub fn plan_edge(
    edge: &LoadedEdge,
    table: &CostTable,
    opts: &PlanOptions,
) -> Result<Plan, PlanError> {
    let started = Instant::now();
    let deadline = started + opts.time_budget;
    let mut pb = Problem::new(edge, table, opts.consistency)?;
    let (configured_cost, configured) = pb.configured().ok_or_else(|| PlanError::Infeasible {
        edge: edge.edge.name.clone(),
        message: "the configured chain cannot be placed: its elements' sides and processors contradict the pipeline order".into(),
    })?;
    let mut search = Search::Exact;
    let exact = if pb.len() <= opts.exact_limit {
        pb.exact(deadline)
    } else {
        None
    };
    let (cost, placement) = match exact {
        Some(x) => x,
        None => {
            search = Search::Annealing;
            pb.anneal(&configured, deadline, opts.seed)
        }
    };
    // The search only ever keeps layouts the checker accepted; check once more with reasons
    // so a bug cannot ship a wrong plan.
    let verdict = pb.checker.check(&placement.layout(), pb.obs);
    if !verdict.equivalent {
        return Err(PlanError::Infeasible {
            edge: edge.edge.name.clone(),
            message: format!(
                "internal error: the chosen placement is not equivalent ({})",
                verdict.reason
            ),
        });
    }
    let reasons = reasons(&mut pb, &placement);
    Ok(Plan {
        edge: edge.edge.name.clone(),
        consistency: pb.obs,
        search,
        names: pb.names.clone(),
        placement,
        cost,
        configured_cost,
        reasons,
        elapsed: started.elapsed(),
    })
}

/// Why each element is where it is, and which orders the checker kept.
fn reasons(pb: &mut Problem, p: &Placement) -> Vec<String> {
    let mut out = Vec::new();
    let n = pb.len();
    let canonical = pb.checker.canonical().clone();
    for &e in &p.order {
        let st = p.stages[e];
        // Processors it cannot use matter only when it is not on the cheapest one.
        let mut why: Vec<String> = pb.allowed.why[e]
            .iter()
            .filter(|w| {
                st.processor != crate::config::Processor::Lib || !w.contains(" cannot run it")
            })
            .cloned()
            .collect();
        let c = &pb.costs[e];
        let other = match st.side {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        };
        if c.strong_on(other) && !c.strong_on(st.side) {
            why.push(format!(
                "its strongly consistent state is keyed per {} replica, so on the {} side it needs no synchronisation",
                side_name(st.side),
                side_name(st.side)
            ));
        }
        if c.weak_on(other) && !c.weak_on(st.side) {
            why.push(format!(
                "its weakly consistent state is keyed per {} replica, so on the {} side it needs no synchronisation",
                side_name(st.side),
                side_name(st.side)
            ));
        }
        out.push(format!(
            "`{}` runs on {}{}",
            pb.names[e],
            st.name(),
            if why.is_empty() {
                String::new()
            } else {
                format!(": {}", why.join("; "))
            }
        ));
    }
    // Flexible elements that stayed on their side: would the other side be equivalent?
    let layout = p.layout();
    let budget = 40;
    for e in 0..n {
        if out.len() > budget + n {
            break;
        }
        let sides_ok: Vec<Side> = pb.allowed.stages[e].iter().map(|s| s.side).collect();
        let st = p.stages[e].side;
        let other = match st {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        };
        if !sides_ok.contains(&other) {
            continue;
        }
        let mut sides = layout.sides.clone();
        sides[e] = other;
        // Keep it next to where it is: last on the client side or first on the server side.
        let mut order: Vec<usize> = layout.order.iter().copied().filter(|&x| x != e).collect();
        let client_count = order.iter().filter(|&&x| sides[x] == Side::Client).count();
        order.insert(client_count, e);
        let alt = Layout { order, sides };
        let v = pb.checker.check(&alt, pb.obs);
        if !v.equivalent {
            let moving = match other {
                Side::Server => "after every client-side element",
                Side::Client => "before every server-side element",
            };
            out.push(format!(
                "`{}` stays on the {} side: on the {} side (which puts it {moving}) it would not be equivalent — {}",
                pb.names[e],
                side_name(st),
                side_name(other),
                strip_verdict(&v.reason)
            ));
        }
    }
    // Neighbours the checker keeps in order.
    for w in layout.order.windows(2) {
        if out.len() > budget + n {
            break;
        }
        let (a, b) = (w[0], w[1]);
        if layout.sides[a] != layout.sides[b] {
            continue;
        }
        let mut order = layout.order.clone();
        let (i, j) = (
            order.iter().position(|&x| x == a).unwrap_or(0),
            order.iter().position(|&x| x == b).unwrap_or(0),
        );
        order.swap(i, j);
        let alt = Layout {
            order,
            sides: layout.sides.clone(),
        };
        let v = pb.checker.check(&alt, pb.obs);
        if !v.equivalent {
            out.push(format!(
                "`{}` stays before `{}`: {}",
                pb.names[a],
                pb.names[b],
                strip_verdict(&v.reason)
            ));
        }
    }
    if layout == canonical {
        out.push("the configured order and sides are kept".into());
    }
    out
}

fn strip_verdict(r: &str) -> &str {
    r.strip_prefix("not equivalent: ")
        .or_else(|| {
            r.strip_prefix(
                "not equivalent under strong observation consistency (equivalent under weak): ",
            )
        })
        .unwrap_or(r)
}

impl Plan {
    pub fn to_json(&self) -> Json {
        let pos = self.placement.layout().positions();
        let elements: Vec<Json> = (0..self.names.len())
            .map(|e| {
                let st = self.placement.stages[e];
                json!({
                    "name": self.names[e],
                    "side": side_name(st.side),
                    "processor": processor_name(st.processor),
                    "position": pos[e],
                })
            })
            .collect();
        let mut elements = elements;
        elements.sort_by_key(|j| j["position"].as_u64().unwrap_or(0));
        let segments: Vec<Json> = self
            .placement
            .segments()
            .iter()
            .map(|(st, es)| {
                json!({
                    "side": side_name(st.side),
                    "processor": processor_name(st.processor),
                    "elements": es.iter().map(|&e| self.names[e].clone()).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "edge": self.edge,
            "consistency": match self.consistency { Observation::Strong => "strong", Observation::Weak => "weak" },
            "search": self.search.name(),
            "cost": round6(self.cost),
            "configured_cost": round6(self.configured_cost),
            "elapsed_ms": round6(self.elapsed.as_secs_f64() * 1000.0),
            "elements": elements,
            "segments": segments,
            "reasons": self.reasons,
        })
    }

    pub fn render_text(&self) -> String {
        let mut s = format!(
            "edge {} ({} observation consistency, {} search, {:.1} ms)\n",
            self.edge,
            match self.consistency {
                Observation::Strong => "strong",
                Observation::Weak => "weak",
            },
            self.search.name(),
            self.elapsed.as_secs_f64() * 1000.0
        );
        s.push_str("  order (request path):\n");
        for (i, &e) in self.placement.order.iter().enumerate() {
            let st = self.placement.stages[e];
            s.push_str(&format!(
                "    {:>2}. {:<24} {}/{}\n",
                i + 1,
                self.names[e],
                side_name(st.side),
                processor_name(st.processor)
            ));
        }
        s.push_str("  segments (each fused into one function):\n");
        for (st, es) in self.placement.segments() {
            let names: Vec<&str> = es.iter().map(|&e| self.names[e].as_str()).collect();
            s.push_str(&format!("    {:<16} [{}]\n", st.name(), names.join(", ")));
        }
        s.push_str(&format!(
            "  cost {:.4} (configured order with the cheapest processors: {:.4})\n  reasons:\n",
            self.cost, self.configured_cost
        ));
        for r in &self.reasons {
            s.push_str(&format!("    - {r}\n"));
        }
        s
    }
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}
