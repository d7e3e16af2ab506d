//! The semantic equivalence checker: symbolic execution of a chain (appnet-nsdi25.txt,
//! Appendix B, Algorithm 2) over the request **and** the response path, and comparison of two
//! layouts under strong or weak observation consistency (Algorithm 3), with a reason.
//!
//! # Model
//!
//! One RPC is executed symbolically. The request is a dictionary from keys (`f:field`,
//! `h:header`) to terms, plus a base term for everything no key names. Each element, in the
//! layout's order, reads terms and writes new ones — opaque functions of exactly what it read
//! ([`crate::abstraction`]). An element that may stop the request (reject, answer locally,
//! fail) contributes a stop term; the ordered list of stop terms before an element is its
//! *arrival*: state it writes and records it emits depend on it, because they happen only for
//! requests that reach it.
//!
//! The response starts as the server's and travels the order backwards. Above an element that
//! may stop requests, the response is `Sel(stop, below)`: that element's answer if it stopped,
//! else what came from below — so a response handler that reads the response depends on every
//! element after it that may stop or that rewrites the response, and its state updates depend
//! on its own arrival (its `resp` runs only if it forwarded the request).
//!
//! # Instances
//!
//! Each element runs as one instance per calling replica on the client side and one per
//! server replica (the `dst` header) on the server side. State that depends on the instance
//! (local state its handlers change, weak replicas, its random stream) is a term of the
//! instance key: the calling replica on the client side, the `dst` header as the element sees
//! it on the server side. Moving such an element across sides changes the key, so the checker
//! refuses it; shared strong state is one variable wherever it runs, so moving it only
//! changes cost. docs/planner.md has the full rule and the argument.
//!
//! # Soundness
//!
//! Every term is a deterministic function of its arguments, so equal terms denote equal
//! values for equal primitive inputs (the RPC, the state before it). State before each event
//! is equal by induction over the events of a stream, as in Appendix B. The outputs compared
//! are: the order of elements that stop the request and each one's stop term, the request as
//! the server sees it, every element's state after the request and after the response, every
//! channel record (strong only), and the response as the client sees it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use crate::abstraction::{Cipher, ElementAbs, Input, Target, abstract_element, keys_overlap};
use crate::config::{Observation, Side};
use crate::layout::{Layout, LayoutError};
use crate::load::LoadedEdge;
use crate::term::{Dir, Op, Part, TermId, Terms};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EquivError {
    // `error`, not `source`: the message has it already (`{:#}` would print it twice).
    #[error("edge `{edge}`: {error}")]
    Layout { edge: String, error: LayoutError },
    #[error("edge `{edge}`, element `{element}`: not checked for method {method}")]
    Missing {
        edge: String,
        element: String,
        method: String,
    },
    #[error("edge `{edge}` has more than {max} elements; the checker indexes elements in 16 bits")]
    TooLarge { edge: String, max: usize },
}

/// The answer for one layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub equivalent: bool,
    /// Equivalent even under strong observation consistency.
    pub strongly: bool,
    pub reason: String,
}

/// Resolved inputs: keys interned per method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum In {
    Key(u16),
    Status,
    Whole,
    State(u16),
    Time,
    Routed,
    Meta,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tgt {
    Key(u16),
    AnyHeader,
    Message,
    State(u16),
}

#[derive(Clone, Debug, Default)]
struct Resolved {
    reads: Vec<(In, Input)>,
    writes: Vec<(Tgt, Vec<In>)>,
    channels: Vec<u16>,
}

/// One method's model of the chain.
pub(crate) struct Model {
    pub(crate) method: String,
    pub(crate) elems: Vec<ElementAbs>,
    pub(crate) keys: Vec<String>,
    overlaps: Vec<Vec<u16>>,
    req_universe: Vec<u16>,
    resp_universe: Vec<u16>,
    dst: u16,
    /// Per element: request and response handler.
    res: Vec<[Resolved; 2]>,
    /// Pairs whose order on the response path can change its terms, by consistency
    /// (strong, weak); see [`resp_conflicts`].
    resp_conflict: [Vec<Vec<bool>>; 2],
}

/// What an element does to the response on its way back, for [`resp_conflicts`].
struct RespUse {
    /// Rewrites every part (may stop the request: its answer replaces the response; turns
    /// the response into an error; replaces the message or a computed header).
    all: bool,
    /// Keys it writes.
    writes: Vec<String>,
    /// Reads anything, or these keys (`None`: everything).
    reads: Option<Vec<String>>,
    /// Its response-path outputs depend on which requests reach it (state, records).
    arrival_sensitive: bool,
    stops: bool,
}

/// Two elements conflict on the response path when one changes a part of the response the
/// other reads or writes, or one may stop requests and the other's response-path state or
/// records count the requests that reach it. Elements that do not conflict produce the
/// same terms in either order (neither's terms mention the other's), which lets the exact
/// search memoise prefixes up to reordering them.
fn resp_conflicts(elems: &[ElementAbs], obs: Observation) -> Vec<Vec<bool>> {
    let uses: Vec<RespUse> = elems
        .iter()
        .map(|a| {
            let h = &a.resp;
            let stops = a.req.stops.any() || a.req.reorders;
            let all = stops
                || h.stops.any()
                || h.writes
                    .iter()
                    .any(|(t, _)| matches!(t, Target::AnyHeader | Target::Message));
            let writes = h
                .writes
                .iter()
                .filter_map(|(t, _)| match t {
                    Target::Key(k) => Some(k.clone()),
                    _ => None,
                })
                .collect();
            let whole = h
                .reads
                .iter()
                .chain(h.writes.iter().flat_map(|(_, d)| d.iter()))
                .any(|i| {
                    matches!(
                        i,
                        Input::Whole | Input::Status | Input::Time | Input::Routed
                    )
                });
            let reads = (!whole).then(|| {
                h.reads
                    .iter()
                    .chain(h.writes.iter().flat_map(|(_, d)| d.iter()))
                    .filter_map(|i| match i {
                        Input::Key(k) => Some(k.clone()),
                        _ => None,
                    })
                    .collect()
            });
            let arrival_sensitive = h.writes.iter().any(|(t, _)| matches!(t, Target::State(_)))
                || (obs == Observation::Strong && !h.channels.is_empty());
            RespUse {
                all,
                writes,
                reads,
                arrival_sensitive,
                stops,
            }
        })
        .collect();
    let touches = |u: &RespUse, key: &str| -> bool {
        u.all
            || u.writes.iter().any(|w| keys_overlap(w, key))
            || u.reads
                .as_ref()
                .is_none_or(|r| r.iter().any(|x| keys_overlap(x, key)))
    };
    let accesses_anything = |u: &RespUse| -> bool {
        u.all || !u.writes.is_empty() || u.reads.as_ref().is_none_or(|r| !r.is_empty())
    };
    let affects = |x: &RespUse, y: &RespUse| -> bool {
        (x.all && accesses_anything(y)) || x.writes.iter().any(|k| touches(y, k))
    };
    let n = elems.len();
    let mut c = vec![vec![false; n]; n];
    for a in 0..n {
        for b in 0..n {
            let (x, y) = (&uses[a], &uses[b]);
            c[a][b] = a != b
                && (affects(x, y)
                    || affects(y, x)
                    || (x.stops && y.arrival_sensitive)
                    || (y.stops && x.arrival_sensitive));
        }
    }
    c
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Dict {
    base: TermId,
    over: BTreeMap<u16, TermId>,
    status: Option<TermId>,
}

/// What the request pass recorded for one element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ElemReq {
    pub(crate) side: Side,
    pub(crate) key: TermId,
    /// How many stop terms came before it.
    pub(crate) stops_before: usize,
    /// The stops before it, as a list term.
    pub(crate) arrival: TermId,
    /// The same list with its own stop: what its response handler depends on.
    pub(crate) arrival_after: TermId,
    pub(crate) stop: Option<TermId>,
    /// State after its request handler, per variable.
    pub(crate) post: Vec<TermId>,
    /// Records per channel (and `u16::MAX` for records from `init`).
    pub(crate) chans: Vec<(u16, TermId)>,
    pub(crate) meta: Option<TermId>,
    pub(crate) inputs: Vec<(Input, TermId)>,
    /// Decrypt undid encrypt: nothing touched the field in between.
    pub(crate) undid_cipher: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ElemResp {
    pub(crate) post: Vec<(u16, TermId)>,
    pub(crate) chans: Vec<(u16, TermId)>,
    pub(crate) inputs: Vec<(Input, TermId)>,
    pub(crate) arrival: TermId,
}

/// The request pass over a prefix of a layout, for one method.
#[derive(Clone, Debug)]
pub(crate) struct Prefix {
    dict: Dict,
    pub(crate) stops: Vec<(usize, TermId)>,
    /// `stops` as a list term.
    arrival: TermId,
    pub(crate) elems: Vec<Option<Rc<ElemReq>>>,
    /// Encrypt outputs: (the field's term after encrypt, before encrypt).
    cipher_out: Vec<Option<(TermId, TermId)>>,
    pub(crate) order: Vec<usize>,
}

/// Observable outputs of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Out {
    ReqStop(usize),
    ReqState(usize, u16),
    ReqChan(usize, u16),
    StopOrder,
    FinalReq,
    RespState(usize, u16),
    RespChan(usize, u16),
    FinalResp,
}

impl Out {
    pub(crate) fn is_channel(self) -> bool {
        matches!(self, Out::ReqChan(..) | Out::RespChan(..))
    }
}

pub(crate) struct Run {
    pub(crate) prefix: Prefix,
    pub(crate) resp: Vec<Option<ElemResp>>,
    pub(crate) outputs: BTreeMap<Out, TermId>,
}

/// A partial layout being built by a search: one prefix per method.
#[derive(Clone, Debug)]
pub struct Partial {
    per_method: Vec<Prefix>,
}

impl Partial {
    pub fn len(&self) -> usize {
        self.per_method.first().map_or(0, |p| p.order.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn order(&self) -> &[usize] {
        self.per_method.first().map_or(&[], |p| p.order.as_slice())
    }
}

pub struct Checker {
    edge: String,
    pub(crate) names: Vec<String>,
    pub(crate) canonical: Layout,
    pub(crate) models: Vec<Model>,
    terms: Terms,
    pub(crate) canon: Vec<Run>,
    /// Terms of the canonical runs end here; everything after is scratch.
    mark: usize,
    /// Pairs whose relative order no equivalent layout changes, by consistency.
    fixed: [Vec<Vec<bool>>; 2],
    /// Keep what each element read, for explanations (off in searches).
    record: bool,
}

pub(crate) const NO_CHANNEL_INIT: u16 = u16::MAX;

impl Checker {
    pub fn new(edge: &LoadedEdge) -> Result<Checker, EquivError> {
        let canonical = Layout::canonical(&edge.edge).map_err(|error| EquivError::Layout {
            edge: edge.edge.name.clone(),
            error,
        })?;
        if edge.elements.len() >= u16::MAX as usize - 1 {
            return Err(EquivError::TooLarge {
                edge: edge.edge.name.clone(),
                max: u16::MAX as usize - 2,
            });
        }
        let mut models = Vec::new();
        for m in &edge.methods {
            let mut elems = Vec::new();
            for el in &edge.elements {
                let ir = el.ir.get(&m.full_name).ok_or_else(|| EquivError::Missing {
                    edge: edge.edge.name.clone(),
                    element: el.use_.name.clone(),
                    method: m.full_name.clone(),
                })?;
                elems.push(abstract_element(ir, &el.use_));
            }
            models.push(Model::new(m.full_name.clone(), elems));
        }
        Ok(Checker::from_models(
            edge.edge.name.clone(),
            edge.elements.iter().map(|e| e.use_.name.clone()).collect(),
            canonical,
            models,
        ))
    }

    fn from_models(
        edge: String,
        names: Vec<String>,
        canonical: Layout,
        models: Vec<Model>,
    ) -> Self {
        let mut c = Checker {
            edge,
            names,
            canonical,
            models,
            terms: Terms::new(),
            canon: Vec::new(),
            mark: 0,
            fixed: [Vec::new(), Vec::new()],
            record: true,
        };
        c.fixed = [
            c.compute_fixed(Observation::Strong),
            c.compute_fixed(Observation::Weak),
        ];
        let layout = c.canonical.clone();
        let runs: Vec<Run> = (0..c.models.len()).map(|m| c.run(m, &layout)).collect();
        c.canon = runs;
        c.mark = c.terms.checkpoint();
        c.record = false;
        c
    }

    pub fn edge(&self) -> &str {
        &self.edge
    }

    /// Whether every equivalent layout keeps `a` and `b` in their configured relative order:
    /// both may stop a request (the client would get the other's answer), or one may stop
    /// requests and the other updates state or (under strong consistency) writes records for
    /// every request that reaches it, or both write one field or header, or one may stop
    /// requests and the other routes them (a stopped request reports its `dst`). A necessary
    /// condition only — the searches use it to skip candidates the checker would reject
    /// anyway.
    pub fn keeps_order(&self, a: usize, b: usize, obs: Observation) -> bool {
        self.fixed[usize::from(obs == Observation::Weak)][a][b]
    }

    fn compute_fixed(&self, obs: Observation) -> Vec<Vec<bool>> {
        let n = self.names.len();
        let mut fixed = vec![vec![false; n]; n];
        for m in &self.models {
            let stopper = |e: usize| {
                let a = &m.elems[e];
                (a.req.stops.any() || a.req.reorders)
                    && !matches!(a.cipher, Some((Cipher::Decrypt, _, _)))
            };
            let sensitive = |e: usize| {
                let a = &m.elems[e];
                let strong = obs == Observation::Strong;
                a.req
                    .writes
                    .iter()
                    .any(|(t, _)| matches!(t, Target::State(_)))
                    || a.resp
                        .writes
                        .iter()
                        .any(|(t, _)| matches!(t, Target::State(_)))
                    || a.vars.iter().any(|v| v.creation)
                    || (strong
                        && (a.creation_records
                            || !a.req.channels.is_empty()
                            || !a.resp.channels.is_empty()))
            };
            // Two elements writing one key: the final message nests every write in order
            // (each write takes the old value as an argument), unless something replaces
            // the whole message in between, or encrypt/decrypt cancel.
            let keys_written = |e: usize, resp: bool| -> Vec<String> {
                let a = &m.elems[e];
                if a.cipher.is_some() {
                    return Vec::new();
                }
                a.handler(resp)
                    .writes
                    .iter()
                    .filter_map(|(t, _)| match t {
                        Target::Key(k) => Some(k.clone()),
                        Target::AnyHeader => Some("h:*".into()),
                        _ => None,
                    })
                    .collect()
            };
            let overlap = |a: &str, b: &str| {
                keys_overlap(a, b)
                    || (a == "h:*" && b.starts_with("h:"))
                    || (b == "h:*" && a.starts_with("h:"))
            };
            let replaced = |resp: bool| {
                m.elems.iter().any(|a| {
                    a.handler(resp)
                        .writes
                        .iter()
                        .any(|(t, _)| matches!(t, Target::Message))
                })
            };
            let (rq, rs) = (replaced(false), replaced(true));
            for (x, row) in fixed.iter_mut().enumerate() {
                for (y, cell) in row.iter_mut().enumerate() {
                    if x == y {
                        continue;
                    }
                    let same_key = |resp: bool| {
                        keys_written(x, resp)
                            .iter()
                            .any(|a| keys_written(y, resp).iter().any(|b| overlap(a, b)))
                    };
                    let routes = |e: usize| {
                        m.elems[e].req.writes.iter().any(|(t, _)| match t {
                            Target::Key(k) => k == "h:dst",
                            Target::AnyHeader | Target::Message => true,
                            Target::State(_) => false,
                        })
                    };
                    if (stopper(x) && stopper(y))
                        || (stopper(x) && sensitive(y))
                        || (sensitive(x) && stopper(y))
                        || (stopper(x) && routes(y))
                        || (routes(x) && stopper(y))
                        || (!rq && same_key(false))
                        || (!rs && same_key(true))
                    {
                        *cell = true;
                    }
                }
            }
        }
        fixed
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn canonical(&self) -> &Layout {
        &self.canonical
    }

    /// Abstractions of each element for each method (for the planner's cost model).
    pub fn abstractions(&self) -> impl Iterator<Item = (&str, &[ElementAbs])> {
        self.models
            .iter()
            .map(|m| (m.method.as_str(), m.elems.as_slice()))
    }

    /// Forgets the terms built by searches (the canonical runs stay).
    pub fn reset_scratch(&mut self) {
        self.terms.rollback(self.mark);
    }

    /// Terms built so far (to bound memory in long searches).
    pub fn scratch_len(&self) -> usize {
        self.terms.len() - self.mark
    }

    /// Whether `layout` is equivalent to the configured chain, with the reason.
    pub fn check(&mut self, layout: &Layout, obs: Observation) -> Verdict {
        let names: Vec<&str> = self.names.iter().map(String::as_str).collect();
        if let Err(e) = layout.validate(&names) {
            return Verdict {
                equivalent: false,
                strongly: false,
                reason: e.to_string(),
            };
        }
        let mark = self.terms.checkpoint();
        self.record = true;
        let mut verdict = Verdict {
            equivalent: true,
            strongly: true,
            reason: String::new(),
        };
        let mut weak_note = None;
        for m in 0..self.models.len() {
            let run = self.run(m, layout);
            let diff_strong = first_difference(&self.canon[m], &run, Observation::Strong, layout);
            let Some(d) = diff_strong else { continue };
            let diff_weak = if d.is_channel() {
                first_difference(&self.canon[m], &run, Observation::Weak, layout)
            } else {
                Some(d)
            };
            let method = if self.models.len() > 1 {
                format!(" (method {})", self.models[m].method)
            } else {
                String::new()
            };
            match diff_weak {
                Some(w) => {
                    let why = self.explain(m, &run, w, layout);
                    verdict = Verdict {
                        equivalent: false,
                        strongly: false,
                        reason: format!("not equivalent{method}: {why}"),
                    };
                    break;
                }
                None => {
                    verdict.strongly = false;
                    if weak_note.is_none() {
                        weak_note = Some(format!("{}{method}", self.explain(m, &run, d, layout)));
                    }
                    if obs == Observation::Strong {
                        verdict.equivalent = false;
                    }
                }
            }
        }
        if verdict.reason.is_empty() {
            verdict.reason = match (&weak_note, obs, verdict.equivalent) {
                (None, _, _) => {
                    "equivalent: every drop, message, state update and channel record is the same"
                        .into()
                }
                (Some(n), Observation::Weak, _) => format!(
                    "equivalent under weak observation consistency (channel records may differ: {n})"
                ),
                (Some(n), Observation::Strong, _) => format!(
                    "not equivalent under strong observation consistency (equivalent under weak): {n}"
                ),
            };
        }
        self.terms.rollback(mark);
        self.record = false;
        verdict
    }

    /// Fast yes/no (no reason), leaving no terms behind.
    pub fn equivalent(&mut self, layout: &Layout, obs: Observation) -> bool {
        let mark = self.terms.checkpoint();
        let mut p = self.start();
        let mut ok = true;
        for &e in &layout.order {
            if !self.push(&mut p, e, layout.sides[e], obs) {
                ok = false;
                break;
            }
        }
        ok = ok && self.finish(&p, obs);
        self.terms.rollback(mark);
        ok
    }

    /// An empty layout, for searches that add elements one by one.
    pub fn start(&mut self) -> Partial {
        let per_method = (0..self.models.len())
            .map(|m| self.empty_prefix(m))
            .collect();
        Partial { per_method }
    }

    /// Adds element `e` on `side` after the prefix. False when an output of `e` that the
    /// rest of the layout cannot change already differs from the configured chain's (its
    /// state after the request, its stop decision and their order, its request-path records
    /// under strong consistency): no completion of this prefix is equivalent.
    pub fn push(&mut self, p: &mut Partial, e: usize, side: Side, obs: Observation) -> bool {
        let mut ok = true;
        for m in 0..self.models.len() {
            let prefix = &mut p.per_method[m];
            self.step_req(m, prefix, e, side);
            if !ok {
                continue;
            }
            let (Some(got), Some(want)) = (&prefix.elems[e], &self.canon[m].prefix.elems[e]) else {
                ok = false;
                continue;
            };
            if got.stop != want.stop
                || got.post != want.post
                || (got.stop.is_some() && got.stops_before != want.stops_before)
                || (obs == Observation::Strong && got.chans != want.chans)
            {
                ok = false;
            }
        }
        ok
    }

    /// Whether a complete layout built with [`Checker::push`] is equivalent: the response
    /// pass and the final messages.
    pub fn finish(&mut self, p: &Partial, obs: Observation) -> bool {
        for m in 0..self.models.len() {
            let prefix = &p.per_method[m];
            if prefix.order.len() != self.names.len() {
                return false;
            }
            // The request path was compared element by element as it was built; what
            // remains is the stop order, the two messages and the response path.
            let canon = &self.canon[m];
            let stops_a = canon.prefix.stops.iter().map(|(e, _)| *e);
            if !stops_a.eq(prefix.stops.iter().map(|(e, _)| *e)) {
                return false;
            }
            let (resp, final_req, final_resp) = self.resp_pass(m, prefix);
            let canon = &self.canon[m];
            if canon.outputs.get(&Out::FinalReq) != Some(&final_req)
                || canon.outputs.get(&Out::FinalResp) != Some(&final_resp)
            {
                return false;
            }
            for (got, want) in resp.iter().zip(&canon.resp) {
                match (got, want) {
                    (None, None) => {}
                    (Some(g), Some(w)) => {
                        if g.post != w.post || (obs == Observation::Strong && g.chans != w.chans) {
                            return false;
                        }
                    }
                    _ => return false,
                }
            }
        }
        true
    }

    /// What the rest of a search depends on from a prefix that passed [`Checker::push`]:
    /// the request as it stands, the stops so far, and, for each element whose response
    /// handler matters, where it is and what it keeps. Two prefixes of the same elements
    /// with the same fingerprint have the same equivalent completions.
    pub fn fingerprint(&self, p: &Partial, obs: Observation) -> Vec<u32> {
        let mut fp = Vec::new();
        for (m, prefix) in p.per_method.iter().enumerate() {
            let model = &self.models[m];
            fp.push(prefix.dict.base);
            for (k, v) in &prefix.dict.over {
                fp.push(u32::from(*k));
                fp.push(*v);
            }
            fp.push(u32::MAX);
            fp.extend(prefix.stops.iter().map(|(_, t)| *t));
            fp.push(u32::MAX);
            let mut relevant: Vec<usize> = Vec::new();
            for &e in &prefix.order {
                let a = &model.elems[e];
                let resp_matters = match obs {
                    Observation::Strong => a.resp.active(),
                    Observation::Weak => {
                        !a.resp.writes.is_empty() || a.resp.stops.any() || a.resp.reorders
                    }
                };
                let Some(er) = &prefix.elems[e] else { continue };
                if resp_matters || er.stop.is_some() {
                    relevant.push(e);
                }
            }
            // Up to swapping neighbours that do not conflict on the response path: the
            // smallest-index-first linearisation of the prefix's conflict order (a trace's
            // normal form), so equivalent prefixes share one memo entry.
            let conflict = &model.resp_conflict[usize::from(obs == Observation::Weak)];
            while !relevant.is_empty() {
                let mut pick = None;
                for (i, &x) in relevant.iter().enumerate() {
                    let free = relevant[..i].iter().all(|&y| !conflict[x][y]);
                    if free && pick.is_none_or(|(_, p)| x < p) {
                        pick = Some((i, x));
                    }
                }
                let Some((i, e)) = pick else { break };
                relevant.remove(i);
                if let Some(er) = &prefix.elems[e] {
                    fp.push(e as u32);
                    fp.push(er.meta.unwrap_or(u32::MAX));
                    fp.push(er.stop.unwrap_or(u32::MAX));
                }
            }
            fp.push(u32::MAX - 1);
        }
        fp
    }

    fn empty_prefix(&mut self, _m: usize) -> Prefix {
        let n = self.names.len();
        let base = self.terms.leaf(Op::ReqBase);
        let nil = self.terms.leaf(Op::Nil);
        Prefix {
            dict: Dict {
                base,
                over: BTreeMap::new(),
                status: None,
            },
            stops: Vec::new(),
            arrival: nil,
            elems: vec![None; n],
            cipher_out: vec![None; n],
            order: Vec::new(),
        }
    }

    fn run(&mut self, m: usize, layout: &Layout) -> Run {
        let mut p = self.empty_prefix(m);
        for &e in &layout.order {
            self.step_req(m, &mut p, e, layout.sides[e]);
        }
        self.complete(m, p)
    }

    // ----- the request pass -------------------------------------------------------------

    fn step_req(&mut self, m: usize, p: &mut Prefix, e: usize, side: Side) {
        let model = &self.models[m];
        let t = &mut self.terms;
        let a = &model.elems[e];
        let ei = e as u16;
        let key = match side {
            Side::Client => t.leaf(Op::Src),
            Side::Server => read(t, model, &p.dict, model.dst),
        };
        let arrival = p.arrival;
        // State before the handler, then what an instance starting re-does.
        let mut cur: Vec<TermId> = Vec::with_capacity(a.vars.len());
        for (v, var) in a.vars.iter().enumerate() {
            let s0 = if var.keyed {
                t.mk(Op::State0(ei, v as u16), &[key])
            } else {
                t.mk(Op::State0(ei, v as u16), &[])
            };
            let s = if var.creation {
                t.mk(Op::Create(ei, v as u16), &[s0, key, arrival])
            } else {
                s0
            };
            cur.push(s);
        }
        let mut chans = Vec::new();
        if a.creation_records {
            chans.push((NO_CHANNEL_INIT, t.mk(Op::CreateRec(ei), &[key, arrival])));
        }
        // Decrypt of what encrypt produced, with nothing in between: the identity.
        if let Some((Cipher::Decrypt, fkey, ckey)) = &a.cipher
            && let Some(k) = model.key(fkey)
        {
            let current = read(t, model, &p.dict, k);
            let undo = model.elems.iter().enumerate().find_map(|(x, other)| {
                match (&other.cipher, p.cipher_out[x]) {
                    (Some((Cipher::Encrypt, f2, k2)), Some((out, input)))
                        if f2 == fkey && k2 == ckey && out == current =>
                    {
                        Some(input)
                    }
                    _ => None,
                }
            });
            if let Some(input) = undo {
                p.dict.over.insert(k, input);
                p.elems[e] = Some(Rc::new(ElemReq {
                    side,
                    key,
                    stops_before: p.stops.len(),
                    arrival,
                    arrival_after: arrival,
                    stop: None,
                    post: cur,
                    chans,
                    meta: None,
                    inputs: vec![(Input::Key(fkey.clone()), current)],
                    undid_cipher: true,
                }));
                p.order.push(e);
                return;
            }
        }
        let r = &model.res[e][0];
        let mut inputs = Vec::with_capacity(r.reads.len());
        let mut rv = Vec::with_capacity(r.reads.len());
        for (inp, orig) in &r.reads {
            let term = match inp {
                In::Key(k) => read(t, model, &p.dict, *k),
                In::Whole => whole(t, &p.dict, model, &model.req_universe),
                In::State(v) => cur[*v as usize],
                // A request has no status; time, routing and scratch are not request inputs.
                In::Status | In::Time | In::Routed | In::Meta => continue,
            };
            if self.record {
                inputs.push((orig.clone(), term));
            }
            rv.push(term);
        }
        let lookup = |i: In, t: &mut Terms| -> Option<TermId> {
            match i {
                In::Key(k) => Some(read(t, model, &p.dict, k)),
                In::Whole => Some(whole(t, &p.dict, model, &model.req_universe)),
                In::State(v) => Some(cur[v as usize]),
                _ => None,
            }
        };
        // A stopped request is reported with the replica it was routed to so far (the `dst`
        // header at the element that stopped it), so the stop term carries it too.
        let stop = (a.req.stops.any() || a.req.reorders).then(|| {
            let mut args = rv.clone();
            let dst = read(t, model, &p.dict, model.dst);
            if self.record {
                inputs.push((Input::Key("h:dst".into()), dst));
            }
            args.push(dst);
            if a.req.reorders {
                t.mk(Op::Reorder(ei), &args)
            } else {
                t.mk(Op::Stop(ei), &args)
            }
        });
        // Writes are simultaneous: each is a function of the values before the handler.
        let mut new_keys: Vec<(u16, TermId)> = Vec::new();
        let mut new_base = None;
        let mut replaced = false;
        let mut post = cur.clone();
        for (tgt, deps) in &r.writes {
            let mut args: Vec<TermId> = deps.iter().filter_map(|d| lookup(*d, t)).collect();
            match *tgt {
                Tgt::Key(k) => {
                    args.push(read(t, model, &p.dict, k));
                    new_keys.push((k, t.mk(Op::Write(ei, Dir::Req, Part::Key(k)), &args)));
                }
                Tgt::AnyHeader => {
                    for (&k, &old) in &p.dict.over {
                        if model.keys[k as usize].starts_with("h:") {
                            let mut a2 = args.clone();
                            a2.push(old);
                            new_keys.push((k, t.mk(Op::Write(ei, Dir::Req, Part::Key(k)), &a2)));
                        }
                    }
                    args.push(p.dict.base);
                    new_base = Some(t.mk(Op::Write(ei, Dir::Req, Part::Base), &args));
                }
                Tgt::Message => {
                    replaced = true;
                    new_base = Some(t.mk(Op::Write(ei, Dir::Req, Part::Base), &args));
                }
                Tgt::State(v) => {
                    args.push(cur[v as usize]);
                    args.push(arrival);
                    post[v as usize] = t.mk(Op::StateW(ei, Dir::Req, v), &args);
                }
            }
        }
        for &c in &r.channels {
            let mut args = rv.clone();
            args.push(arrival);
            chans.push((c, t.mk(Op::Chan(ei, Dir::Req, c), &args)));
        }
        let meta = a.req.meta_write.then(|| t.mk(Op::Meta(ei), &rv));
        if matches!(a.cipher, Some((Cipher::Encrypt, _, _)))
            && let Some((Cipher::Encrypt, fkey, _)) = &a.cipher
            && let Some(k) = model.key(fkey)
        {
            let before = read(t, model, &p.dict, k);
            if let Some(&(_, after)) = new_keys.iter().find(|(x, _)| *x == k) {
                p.cipher_out[e] = Some((after, before));
            }
        }
        if replaced {
            p.dict.over.clear();
        }
        if let Some(b) = new_base {
            p.dict.base = b;
        }
        for (k, v) in new_keys {
            p.dict.over.insert(k, v);
        }
        let stops_before = p.stops.len();
        if let Some(s) = stop {
            p.stops.push((e, s));
            p.arrival = t.mk(Op::Cons, &[p.arrival, s]);
        }
        p.elems[e] = Some(Rc::new(ElemReq {
            side,
            key,
            stops_before,
            arrival,
            arrival_after: p.arrival,
            stop,
            post,
            chans,
            meta,
            inputs,
            undid_cipher: false,
        }));
        p.order.push(e);
    }

    // ----- the response pass ------------------------------------------------------------

    fn complete(&mut self, m: usize, p: Prefix) -> Run {
        let (resp, final_req, final_resp) = self.resp_pass(m, &p);
        let t = &mut self.terms;
        let mut outputs = BTreeMap::new();
        for (e, er) in p.elems.iter().enumerate() {
            let Some(er) = er else { continue };
            if let Some(s) = er.stop {
                outputs.insert(Out::ReqStop(e), s);
            }
            for (v, &s) in er.post.iter().enumerate() {
                outputs.insert(Out::ReqState(e, v as u16), s);
            }
            for &(c, r) in &er.chans {
                outputs.insert(Out::ReqChan(e, c), r);
            }
        }
        for (e, r) in resp.iter().enumerate() {
            let Some(r) = r else { continue };
            for &(v, s) in &r.post {
                outputs.insert(Out::RespState(e, v), s);
            }
            for &(c, x) in &r.chans {
                outputs.insert(Out::RespChan(e, c), x);
            }
        }
        let labels: Vec<TermId> = p
            .stops
            .iter()
            .map(|(e, _)| t.leaf(Op::Label(*e as u16)))
            .collect();
        outputs.insert(Out::StopOrder, t.tuple(&labels));
        outputs.insert(Out::FinalReq, final_req);
        outputs.insert(Out::FinalResp, final_resp);
        Run {
            prefix: p,
            resp,
            outputs,
        }
    }

    /// The response pass: each element's response-path record, the request as the server
    /// sees it and the response as the client sees it.
    fn resp_pass(&mut self, m: usize, p: &Prefix) -> (Vec<Option<ElemResp>>, TermId, TermId) {
        let model = &self.models[m];
        let t = &mut self.terms;
        let n = model.elems.len();
        let drops = p.arrival;
        let final_dst = read(t, model, &p.dict, model.dst);
        let routed = t.mk(Op::Routed, &[drops, final_dst]);
        let time = t.mk(Op::RespTime, &[drops]);
        let rb = t.leaf(Op::RespBase);
        let rs = t.leaf(Op::RespStatus);
        let mut dict = Dict {
            base: rb,
            over: BTreeMap::new(),
            status: Some(rs),
        };
        let mut resp: Vec<Option<ElemResp>> = vec![None; n];
        for &e in p.order.iter().rev() {
            let Some(er) = &p.elems[e] else { continue };
            let a = &model.elems[e];
            let ei = e as u16;
            if a.resp.active() && !er.undid_cipher {
                let r = &model.res[e][1];
                let arrival = er.arrival_after;
                let mut cur: BTreeMap<u16, TermId> = BTreeMap::new();
                let env = RespEnv {
                    e: ei,
                    er,
                    drops,
                    time,
                    routed,
                    status0: rs,
                };
                let mut inputs = Vec::new();
                let mut rv = Vec::new();
                for (inp, orig) in &r.reads {
                    let term = env.lookup(*inp, t, model, &dict, &mut cur);
                    if self.record {
                        inputs.push((orig.clone(), term));
                    }
                    rv.push(term);
                }
                let mut next = dict.clone();
                let mut post = Vec::new();
                for (tgt, deps) in &r.writes {
                    let mut args: Vec<TermId> = deps
                        .iter()
                        .map(|d| env.lookup(*d, t, model, &dict, &mut cur))
                        .collect();
                    match *tgt {
                        Tgt::Key(k) => {
                            args.push(read(t, model, &dict, k));
                            let w = t.mk(Op::Write(ei, Dir::Resp, Part::Key(k)), &args);
                            next.over.insert(k, w);
                        }
                        Tgt::AnyHeader => {
                            for (&k, &old) in &dict.over {
                                if model.keys[k as usize].starts_with("h:") {
                                    let mut a2 = args.clone();
                                    a2.push(old);
                                    let w = t.mk(Op::Write(ei, Dir::Resp, Part::Key(k)), &a2);
                                    next.over.insert(k, w);
                                }
                            }
                            args.push(dict.base);
                            next.base = t.mk(Op::Write(ei, Dir::Resp, Part::Base), &args);
                        }
                        Tgt::Message => {
                            next.over.clear();
                            next.base = t.mk(Op::Write(ei, Dir::Resp, Part::Base), &args);
                            next.status = Some(t.mk(Op::Write(ei, Dir::Resp, Part::Status), &args));
                        }
                        Tgt::State(v) => {
                            let old = env.lookup(In::State(v), t, model, &dict, &mut cur);
                            args.push(old);
                            args.push(arrival);
                            post.push((v, t.mk(Op::StateW(ei, Dir::Resp, v), &args)));
                        }
                    }
                }
                if a.resp.stops.any() {
                    let stop = t.mk(Op::RespStop(ei), &rv);
                    next.base = t.mk(Op::RespStopApply(ei, Part::Base), &[stop, next.base]);
                    let st = next.status.unwrap_or(rs);
                    next.status = Some(t.mk(Op::RespStopApply(ei, Part::Status), &[stop, st]));
                    let keys: Vec<u16> = next.over.keys().copied().collect();
                    for k in keys {
                        if model.keys[k as usize].starts_with("f:")
                            && let Some(v) = next.over.get(&k).copied()
                        {
                            let w = t.mk(Op::RespStopApply(ei, Part::Key(k)), &[stop, v]);
                            next.over.insert(k, w);
                        }
                    }
                }
                let mut chans = Vec::new();
                for &c in &r.channels {
                    let mut args = rv.clone();
                    args.push(arrival);
                    chans.push((c, t.mk(Op::Chan(ei, Dir::Resp, c), &args)));
                }
                resp[e] = Some(ElemResp {
                    post,
                    chans,
                    inputs,
                    arrival,
                });
                dict = next;
            }
            if let Some(x) = er.stop {
                sel(t, ei, x, &mut dict);
            }
        }
        let final_req = whole(t, &p.dict, model, &model.req_universe);
        let final_resp = whole(t, &dict, model, &model.resp_universe);
        (resp, final_req, final_resp)
    }
}

/// What a response handler's inputs resolve to.
struct RespEnv<'a> {
    e: u16,
    er: &'a ElemReq,
    drops: TermId,
    time: TermId,
    routed: TermId,
    status0: TermId,
}

impl RespEnv<'_> {
    fn lookup(
        &self,
        i: In,
        t: &mut Terms,
        model: &Model,
        dict: &Dict,
        cur: &mut BTreeMap<u16, TermId>,
    ) -> TermId {
        match i {
            In::Key(k) => read(t, model, dict, k),
            In::Whole => whole(t, dict, model, &model.resp_universe),
            In::Status => dict.status.unwrap_or(self.status0),
            In::State(v) => match cur.get(&v) {
                Some(&s) => s,
                None => {
                    let post = self.er.post.get(v as usize).copied().unwrap_or(self.drops);
                    let s = t.mk(Op::RespPre(self.e, v), &[post, self.drops]);
                    cur.insert(v, s);
                    s
                }
            },
            In::Time => self.time,
            In::Routed => self.routed,
            In::Meta => self.er.meta.unwrap_or(self.drops),
        }
    }
}

fn sel(t: &mut Terms, e: u16, x: TermId, d: &mut Dict) {
    d.base = t.mk(Op::Sel(e, Part::Base), &[x, d.base]);
    for (&k, v) in d.over.iter_mut() {
        *v = t.mk(Op::Sel(e, Part::Key(k)), &[x, *v]);
    }
    if let Some(s) = d.status {
        d.status = Some(t.mk(Op::Sel(e, Part::Status), &[x, s]));
    }
}

/// One key of a message: the term written for it, or a projection of the base together with
/// any written key it overlaps.
fn read(t: &mut Terms, m: &Model, d: &Dict, k: u16) -> TermId {
    if let [only] = m.overlaps[k as usize].as_slice()
        && *only == k
    {
        return match d.over.get(&k) {
            Some(&v) => v,
            None => t.mk(Op::Proj(k), &[d.base]),
        };
    }
    let hits: Vec<(u16, TermId)> = m.overlaps[k as usize]
        .iter()
        .filter_map(|o| d.over.get(o).map(|v| (*o, *v)))
        .collect();
    if let [(only, v)] = hits.as_slice()
        && *only == k
    {
        return *v;
    }
    let mut args = vec![d.base];
    args.extend(hits.iter().map(|h| h.1));
    t.mk(Op::Proj(k), &args)
}

/// The whole message: its base, its status, and every key any element writes.
fn whole(t: &mut Terms, d: &Dict, m: &Model, universe: &[u16]) -> TermId {
    let mut args = vec![d.base];
    args.extend(d.status);
    for &k in universe {
        args.push(read(t, m, d, k));
    }
    t.tuple(&args)
}

impl Model {
    fn new(method: String, elems: Vec<ElementAbs>) -> Model {
        let mut names: BTreeSet<String> = BTreeSet::new();
        names.insert("h:dst".into());
        let mut req_written = BTreeSet::new();
        let mut resp_written = BTreeSet::new();
        for a in &elems {
            for (dir, h) in [(0, &a.req), (1, &a.resp)] {
                for r in &h.reads {
                    if let Input::Key(k) = r {
                        names.insert(k.clone());
                    }
                }
                for (tg, deps) in &h.writes {
                    if let Target::Key(k) = tg {
                        names.insert(k.clone());
                        if dir == 0 {
                            req_written.insert(k.clone());
                        } else {
                            resp_written.insert(k.clone());
                        }
                    }
                    for d in deps {
                        if let Input::Key(k) = d {
                            names.insert(k.clone());
                        }
                    }
                }
            }
            if let Some((_, f, _)) = &a.cipher {
                names.insert(f.clone());
            }
        }
        let keys: Vec<String> = names.into_iter().collect();
        let id: HashMap<&str, u16> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_str(), i as u16))
            .collect();
        let overlaps = keys
            .iter()
            .map(|k| {
                keys.iter()
                    .enumerate()
                    .filter(|(_, o)| keys_overlap(k, o))
                    .map(|(i, _)| i as u16)
                    .collect()
            })
            .collect();
        let universe = |w: &BTreeSet<String>| -> Vec<u16> {
            w.iter()
                .filter_map(|k| id.get(k.as_str()).copied())
                .collect()
        };
        let req_universe = universe(&req_written);
        let resp_universe = universe(&resp_written);
        let dst = id.get("h:dst").copied().unwrap_or(0);
        let resolve_in = |i: &Input| -> In {
            match i {
                Input::Key(k) => In::Key(id.get(k.as_str()).copied().unwrap_or(dst)),
                Input::Status => In::Status,
                Input::Whole => In::Whole,
                Input::State(v) => In::State(*v as u16),
                Input::Time => In::Time,
                Input::Routed => In::Routed,
                Input::Meta => In::Meta,
            }
        };
        let res = elems
            .iter()
            .map(|a| {
                [&a.req, &a.resp].map(|h| Resolved {
                    reads: h.reads.iter().map(|i| (resolve_in(i), i.clone())).collect(),
                    writes: h
                        .writes
                        .iter()
                        .map(|(tg, deps)| {
                            let tg = match tg {
                                Target::Key(k) => {
                                    Tgt::Key(id.get(k.as_str()).copied().unwrap_or(dst))
                                }
                                Target::AnyHeader => Tgt::AnyHeader,
                                Target::Message => Tgt::Message,
                                Target::State(v) => Tgt::State(*v as u16),
                            };
                            (tg, deps.iter().map(resolve_in).collect())
                        })
                        .collect(),
                    channels: h.channels.iter().map(|c| *c as u16).collect(),
                })
            })
            .collect();
        let keys_owned = keys.clone();
        let resp_conflict = [
            resp_conflicts(&elems, Observation::Strong),
            resp_conflicts(&elems, Observation::Weak),
        ];
        Model {
            resp_conflict,
            method,
            elems,
            keys: keys_owned,
            overlaps,
            req_universe,
            resp_universe,
            dst,
            res,
        }
    }

    fn key(&self, k: &str) -> Option<u16> {
        self.keys.iter().position(|x| x == k).map(|i| i as u16)
    }
}

fn first_difference(canon: &Run, run: &Run, obs: Observation, layout: &Layout) -> Option<Out> {
    // A causal order: request-path outputs in the candidate's order, then the stop order and
    // the request, then response-path outputs from the server up, then the response.
    let mut keys: Vec<Out> = canon
        .outputs
        .keys()
        .chain(run.outputs.keys())
        .copied()
        .collect();
    keys.sort();
    keys.dedup();
    let pos = layout.positions();
    // State updates before records before stop decisions: a state difference usually
    // explains the others.
    let rank = |o: &Out| -> (u8, usize, u8, Out) {
        match *o {
            Out::ReqState(e, _) => (0, pos[e], 0, *o),
            Out::ReqChan(e, _) => (0, pos[e] + pos.len(), 1, *o),
            Out::ReqStop(e) => (0, pos[e] + 2 * pos.len(), 2, *o),
            Out::StopOrder => (1, 0, 0, *o),
            Out::FinalReq => (2, 0, 0, *o),
            Out::RespState(e, _) => (3, usize::MAX - pos[e], 0, *o),
            Out::RespChan(e, _) => (3, usize::MAX - pos[e], 1, *o),
            Out::FinalResp => (4, 0, 0, *o),
        }
    };
    keys.sort_by_key(rank);
    keys.into_iter()
        .filter(|k| obs == Observation::Strong || !k.is_channel())
        .find(|k| canon.outputs.get(k) != run.outputs.get(k))
}
