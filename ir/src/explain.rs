//! Reasons for the checker's verdicts: from the first output that differs between the
//! configured chain and a layout, back to the element whose input changed and the element
//! that moved across it, in words ("`firewall` reads `user`, which `mutation` writes; moving
//! it ahead of `mutation` changes what it reads").

use crate::abstraction::{Cipher, ElementAbs, Input};
use crate::config::Side;
use crate::equiv::{Checker, Model, NO_CHANNEL_INIT, Out, Run};
use crate::layout::Layout;

impl Checker {
    pub(crate) fn explain(&self, m: usize, run: &Run, out: Out, layout: &Layout) -> String {
        let x = Explainer {
            c: self,
            m,
            a: &self.canon[m],
            b: run,
            la: &self.canonical,
            lb: layout,
        };
        x.output(out)
    }
}

struct Explainer<'a> {
    c: &'a Checker,
    m: usize,
    a: &'a Run,
    b: &'a Run,
    la: &'a Layout,
    lb: &'a Layout,
}

fn key_name(k: &str) -> String {
    if let Some(f) = k.strip_prefix("f:") {
        format!("`{f}`")
    } else if let Some(h) = k.strip_prefix("h:") {
        format!("header `{h}`")
    } else {
        format!("`{k}`")
    }
}

impl Explainer<'_> {
    fn model(&self) -> &Model {
        &self.c.models[self.m]
    }

    fn name(&self, e: usize) -> &str {
        &self.c.names[e]
    }

    fn elem(&self, e: usize) -> &ElementAbs {
        &self.model().elems[e]
    }

    fn var(&self, e: usize, v: u16) -> String {
        self.elem(e)
            .vars
            .get(v as usize)
            .map_or_else(|| "?".into(), |x| x.name.clone())
    }

    fn chan(&self, e: usize, c: u16) -> String {
        if c == NO_CHANNEL_INIT {
            return "its start-up records".into();
        }
        format!(
            "channel `{}`",
            self.elem(e)
                .channels
                .get(c as usize)
                .cloned()
                .unwrap_or_default()
        )
    }

    fn before(layout: &Layout, x: usize, y: usize) -> bool {
        let p = layout.positions();
        p[x] < p[y]
    }

    /// "ahead of" / "behind", for moving `e` relative to `m` from layout A to B.
    fn moving(&self, e: usize, m: usize) -> String {
        let ahead = Self::before(self.lb, e, m);
        format!(
            "moving `{}` {} `{}`",
            self.name(e),
            if ahead { "ahead of" } else { "behind" },
            self.name(m)
        )
    }

    fn output(&self, out: Out) -> String {
        match out {
            Out::ReqState(e, v) => {
                let what = format!("its state update of `{}`", self.var(e, v));
                let acts = format!("updates its state `{}`", self.var(e, v));
                self.req_cause(e, &what, &acts)
            }
            Out::ReqChan(e, c) => {
                let what = format!("what it records on {}", self.chan(e, c));
                let acts = format!("writes a record on {}", self.chan(e, c));
                self.req_cause(e, &what, &acts)
            }
            Out::ReqStop(e) => {
                let what = "its decision to stop the request".to_owned();
                self.req_cause(e, &what, "decides")
            }
            Out::StopOrder => self.stop_order(),
            Out::FinalReq => self.final_message(false),
            Out::RespState(e, v) => {
                let what = format!(
                    "its state update of `{}` on the response path",
                    self.var(e, v)
                );
                self.resp_cause(e, &what)
            }
            Out::RespChan(e, c) => {
                let what = format!("what it records on {} for responses", self.chan(e, c));
                self.resp_cause(e, &what)
            }
            Out::FinalResp => self.final_message(true),
        }
    }

    fn stop_order(&self) -> String {
        let sa: Vec<usize> = self.a.prefix.stops.iter().map(|(e, _)| *e).collect();
        let sb: Vec<usize> = self.b.prefix.stops.iter().map(|(e, _)| *e).collect();
        for &e in &sb {
            if !sa.contains(&e) {
                return self.cipher_broken(e);
            }
        }
        for &e in &sa {
            if !sb.contains(&e) {
                return self.cipher_broken(e);
            }
        }
        for (&x, &y) in sa.iter().zip(&sb) {
            if x != y {
                let (dx, dy) = (
                    self.elem(x).req.stops.describe(false),
                    self.elem(y).req.stops.describe(false),
                );
                return format!(
                    "`{}` {dx} and `{}` {dy}; with `{}` first, a request both would stop gets `{}`'s answer instead of `{}`'s (request path)",
                    self.name(x),
                    self.name(y),
                    self.name(y),
                    self.name(y),
                    self.name(x)
                );
            }
        }
        "the elements that can stop a request differ".into()
    }

    fn cipher_broken(&self, d: usize) -> String {
        let field = self
            .elem(d)
            .cipher
            .as_ref()
            .map(|(_, f, _)| key_name(f))
            .unwrap_or_else(|| "its field".into());
        let (undid, layout) = match &self.a.prefix.elems[d] {
            Some(x) if x.undid_cipher => (true, self.lb),
            _ => (false, self.la),
        };
        let pos = layout.positions();
        let enc = self
            .model()
            .elems
            .iter()
            .position(|x| matches!(&x.cipher, Some((Cipher::Encrypt, f, _)) if Some(f) == self.elem(d).cipher.as_ref().map(|c| &c.1)));
        let between: Vec<&str> = (0..self.c.names.len())
            .filter(|&x| {
                enc.is_some_and(|en| pos[en] < pos[x] && pos[x] < pos[d])
                    && self
                        .elem(x)
                        .req
                        .writes_key(self.elem(d).cipher.as_ref().map_or("", |c| c.1.as_str()))
            })
            .map(|x| self.name(x))
            .collect();
        let who = if between.is_empty() {
            "something".to_owned()
        } else {
            format!("`{}`", between.join("`, `"))
        };
        let layout_word = if undid {
            "the new order"
        } else {
            "the configured chain"
        };
        format!(
            "`{}` decrypts {field}, and in {layout_word} {who} writes {field} between the encryption and `{}`: nothing that reads or writes a paired field may change its position relative to the pair",
            self.name(d),
            self.name(d)
        )
    }

    fn writers_before(&self, layout: &Layout, run: &Run, e: usize, key: &str) -> Vec<usize> {
        let pos = layout.positions();
        let mut w: Vec<usize> = (0..self.c.names.len())
            .filter(|&x| x != e && pos[x] < pos[e] && self.elem(x).req.writes_key(key))
            .filter(|&x| !run.prefix.elems[x].as_ref().is_some_and(|r| r.undid_cipher))
            .collect();
        w.sort_by_key(|&x| pos[x]);
        w
    }

    fn stoppers_before(&self, run: &Run, e: usize, inclusive: bool) -> Vec<usize> {
        let Some(er) = &run.prefix.elems[e] else {
            return Vec::new();
        };
        let n = er.stops_before + usize::from(inclusive && er.stop.is_some());
        run.prefix.stops[..n].iter().map(|(x, _)| *x).collect()
    }

    /// Why element `e`'s request-path output `what` differs; `acts` says what it does for
    /// each request that reaches it ("updates its state `next`").
    fn req_cause(&self, e: usize, what: &str, acts: &str) -> String {
        let (Some(ra), Some(rb)) = (&self.a.prefix.elems[e], &self.b.prefix.elems[e]) else {
            return format!("`{}`: {what} differs", self.name(e));
        };
        let n = self.name(e);
        // The instance: side, or the routed replica on the server side.
        if ra.key != rb.key && self.elem(e).keyed() {
            return self.instance_cause(e, ra.side, rb.side, what);
        }
        for ((inp, ta), (_, tb)) in ra.inputs.iter().zip(&rb.inputs) {
            if ta == tb {
                continue;
            }
            if let Some(s) = self.input_cause(e, inp, false, what) {
                return s;
            }
        }
        // What it reads is the same; only which requests reach it differs.
        if ra.arrival != rb.arrival {
            let sa = self.stoppers_before(self.a, e, false);
            let sb = self.stoppers_before(self.b, e, false);
            let v = acts;
            if let Some(&m) = sb.iter().find(|x| !sa.contains(x)) {
                return format!(
                    "`{n}` {v} for every request that reaches it, and `{m}` {}; behind `{m}` it no longer sees the requests `{m}` stops, so {} changes {what} (request path)",
                    self.elem(m).req.stops.describe(false),
                    self.moving(e, m),
                    m = self.name(m)
                );
            }
            if let Some(&m) = sa.iter().find(|x| !sb.contains(x)) {
                return format!(
                    "`{n}` {v} for every request that reaches it, and `{m}` {}; ahead of `{m}` it also sees the requests `{m}` stops, so {} changes {what} (request path)",
                    self.elem(m).req.stops.describe(false),
                    self.moving(e, m),
                    m = self.name(m)
                );
            }
            return format!(
                "`{n}` {v} only for requests that reach it, and the elements that can stop a request before it come in a different order, which changes {what}"
            );
        }
        format!("{what} of `{n}` differs (request path)")
    }

    fn instance_cause(&self, e: usize, sa: Side, sb: Side, what: &str) -> String {
        let a = self.elem(e);
        let why = a
            .vars
            .iter()
            .find(|v| v.keyed || v.creation)
            .map(|v| {
                if v.random_stream {
                    "draws from its own random stream".to_owned()
                } else if v.creation && !v.keyed {
                    format!(
                        "re-initialises its shared state `{}` whenever a new instance starts",
                        v.name
                    )
                } else {
                    match v.consistency {
                        weft_hostcalls::state::Consistency::Weak => {
                            format!("keeps a weak replica of `{}` per instance", v.name)
                        }
                        _ => format!("keeps local state `{}` per instance", v.name),
                    }
                }
            })
            .unwrap_or_else(|| "records when an instance starts".into());
        let n = self.name(e);
        if sa != sb {
            let side = |s: Side| match s {
                Side::Client => "client",
                Side::Server => "server",
            };
            return format!(
                "`{n}` {why}; on the client side there is one instance per calling replica, on the server side one per server replica, so moving it to the {} side changes which requests share an instance, and so {what}",
                side(sb)
            );
        }
        let pos_b = self.lb.positions();
        let pos_a = self.la.positions();
        let routers: Vec<usize> = (0..self.c.names.len())
            .filter(|&x| self.elem(x).req.writes_key("h:dst"))
            .filter(|&x| (pos_a[x] < pos_a[e]) != (pos_b[x] < pos_b[e]))
            .collect();
        match routers.first() {
            Some(&r) => format!(
                "`{n}` {why}; on the server side its instance is the replica in the `dst` header, which `{}` writes, so {} changes which instance handles a request, and so {what}",
                self.name(r),
                self.moving(e, r)
            ),
            None => {
                format!("`{n}` {why}, and it would run in a different instance: {what} differs")
            }
        }
    }

    fn input_cause(&self, e: usize, inp: &Input, resp: bool, what: &str) -> Option<String> {
        let n = self.name(e);
        match inp {
            Input::Key(k) if !resp => {
                let wa = self.writers_before(self.la, self.a, e, k);
                let wb = self.writers_before(self.lb, self.b, e, k);
                if let Some(&m) = wa.iter().find(|x| !wb.contains(x)) {
                    return Some(format!(
                        "`{n}` reads {}, which `{}` writes; {} changes what it reads, and so {what} (request path)",
                        key_name(k),
                        self.name(m),
                        self.moving(e, m)
                    ));
                }
                if let Some(&m) = wb.iter().find(|x| !wa.contains(x)) {
                    return Some(format!(
                        "`{n}` reads {}, which `{}` writes; {} changes what it reads, and so {what} (request path)",
                        key_name(k),
                        self.name(m),
                        self.moving(e, m)
                    ));
                }
                if wa != wb && wa.len() >= 2 {
                    return Some(format!(
                        "`{}` and `{}` both write {} before `{n}` reads it, in a different order, which changes {what} (request path)",
                        self.name(wa[0]),
                        self.name(wa[1]),
                        key_name(k)
                    ));
                }
                // Same writers in the same order: one of them computed something else.
                let last = wa.last().copied()?;
                let inner = self.req_cause(
                    last,
                    &format!("what it writes into {}", key_name(k)),
                    &format!("writes {}", key_name(k)),
                );
                Some(format!(
                    "`{n}` reads {} as `{}` leaves it, and {inner}",
                    key_name(k),
                    self.name(last)
                ))
            }
            Input::Whole if !resp => {
                let keys: Vec<String> = self.model().keys.clone();
                for k in keys {
                    let wa = self.writers_before(self.la, self.a, e, &k);
                    let wb = self.writers_before(self.lb, self.b, e, &k);
                    if let Some(&m) = wa
                        .iter()
                        .chain(&wb)
                        .find(|x| wa.contains(x) != wb.contains(x))
                    {
                        return Some(format!(
                            "`{n}` reads the whole request, and `{}` writes {}; {} changes {what} (request path)",
                            self.name(m),
                            key_name(&k),
                            self.moving(e, m)
                        ));
                    }
                }
                None
            }
            Input::State(_) => None,
            Input::Key(_) | Input::Whole | Input::Status => {
                let key = match inp {
                    Input::Key(k) => k.clone(),
                    Input::Status => "status".into(),
                    _ => String::new(),
                };
                let label = match inp {
                    Input::Key(k) => format!("the response's {}", key_name(k)),
                    Input::Status => "the response's status".into(),
                    _ => "the whole response".into(),
                };
                let below = |layout: &Layout, run: &Run| -> Vec<usize> {
                    let pos = layout.positions();
                    (0..self.c.names.len())
                        .filter(|&x| pos[x] > pos[e])
                        .filter(|&x| {
                            let r = run.prefix.elems[x].as_ref();
                            r.is_some_and(|r| r.stop.is_some())
                                || (!r.is_some_and(|r| r.undid_cipher)
                                    && (self.elem(x).resp.stops.any()
                                        || key.is_empty()
                                        || self.elem(x).resp.writes_key(&key)))
                        })
                        .collect()
                };
                let ba = below(self.la, self.a);
                let bb = below(self.lb, self.b);
                let m = ba
                    .iter()
                    .chain(&bb)
                    .copied()
                    .find(|x| ba.contains(x) != bb.contains(x))?;
                let how = if self.elem(m).req.stops.any() {
                    format!(
                        "`{}` {}, and its answer travels up through the elements ahead of it",
                        self.name(m),
                        self.elem(m).req.stops.describe(false)
                    )
                } else if self.elem(m).resp.stops.any()
                    && (key.is_empty() || !self.elem(m).resp.writes_key(&key))
                {
                    // It is below for turning responses into errors, not for writing this.
                    format!(
                        "`{}` {} on the way back",
                        self.name(m),
                        self.elem(m).resp.stops.describe(true)
                    )
                } else {
                    format!("`{}` changes it on the way back", self.name(m))
                };
                Some(format!(
                    "`{n}` reads {label} on the way back; {how}, so {} changes what `{n}` sees, and so {what} (response path)",
                    self.moving(e, m)
                ))
            }
            Input::Meta => {
                let (Some(ra), Some(rb)) = (&self.a.prefix.elems[e], &self.b.prefix.elems[e])
                else {
                    return None;
                };
                for ((inp, ta), (_, tb)) in ra.inputs.iter().zip(&rb.inputs) {
                    if ta != tb
                        && let Some(s) =
                            self.input_cause(e, inp, false, "what it keeps for the response")
                    {
                        return Some(format!("{s}; the response path then {what}"));
                    }
                }
                None
            }
            Input::Time | Input::Routed => Some(format!(
                "`{n}`'s response handler reads {} , which depends on whether the request reached the server: {}",
                if matches!(inp, Input::Time) {
                    "the time"
                } else {
                    "where the request was routed"
                },
                self.stop_order()
            )),
        }
    }

    fn resp_cause(&self, e: usize, what: &str) -> String {
        let n = self.name(e);
        let (Some(ra), Some(rb)) = (&self.a.resp[e], &self.b.resp[e]) else {
            return format!("`{n}`: {what} differs");
        };
        if let (Some(qa), Some(qb)) = (&self.a.prefix.elems[e], &self.b.prefix.elems[e])
            && qa.key != qb.key
            && self.elem(e).keyed()
        {
            return self.instance_cause(e, qa.side, qb.side, what);
        }
        for ((inp, ta), (_, tb)) in ra.inputs.iter().zip(&rb.inputs) {
            if ta == tb {
                continue;
            }
            if let Some(s) = self.input_cause(e, inp, true, what) {
                return s;
            }
        }
        if ra.arrival != rb.arrival {
            let sa = self.stoppers_before(self.a, e, true);
            let sb = self.stoppers_before(self.b, e, true);
            if let Some(&m) = sa
                .iter()
                .chain(&sb)
                .find(|x| sa.contains(x) != sb.contains(x))
            {
                return format!(
                    "`{n}`'s response handler runs only for requests it forwarded, and `{}` {}; {} changes which responses it sees, and so {what}",
                    self.name(m),
                    self.elem(m).req.stops.describe(false),
                    self.moving(e, m)
                );
            }
        }
        // State it reads on the way back came from its request handler.
        self.req_cause(e, what, "acts")
    }

    fn final_message(&self, resp: bool) -> String {
        let pos_a = self.la.positions();
        let pos_b = self.lb.positions();
        let keys = self.model().keys.clone();
        for k in &keys {
            let writers = |pos: &[usize], run: &Run| -> Vec<usize> {
                let mut w: Vec<usize> = (0..self.c.names.len())
                    .filter(|&x| {
                        let h = self.elem(x).handler(resp);
                        h.writes_key(k)
                            && !run.prefix.elems[x].as_ref().is_some_and(|r| r.undid_cipher)
                    })
                    .collect();
                w.sort_by_key(|&x| pos[x]);
                w
            };
            let wa = writers(&pos_a, self.a);
            let wb = writers(&pos_b, self.b);
            if wa != wb && wa.len() >= 2 {
                return format!(
                    "`{}` and `{}` both write {} on the {} path, and the new order swaps them: the {} sees a different value",
                    self.name(wa[0]),
                    self.name(wa[1]),
                    key_name(k),
                    if resp { "response" } else { "request" },
                    if resp { "client" } else { "server" }
                );
            }
            if let Some(&last) = wa.last() {
                let (ta, tb) = if resp {
                    (
                        self.a.resp[last].as_ref().map(|r| &r.inputs),
                        self.b.resp[last].as_ref().map(|r| &r.inputs),
                    )
                } else {
                    (
                        self.a.prefix.elems[last].as_ref().map(|r| &r.inputs),
                        self.b.prefix.elems[last].as_ref().map(|r| &r.inputs),
                    )
                };
                if ta != tb {
                    let what = format!("what it writes into {}", key_name(k));
                    let inner = if resp {
                        self.resp_cause(last, &what)
                    } else {
                        self.req_cause(last, &what, &format!("writes {}", key_name(k)))
                    };
                    return format!(
                        "the {} sees {} as `{}` writes it last: {inner}",
                        if resp { "client" } else { "server" },
                        key_name(k),
                        self.name(last)
                    );
                }
            }
        }
        if resp {
            // The response also depends on which element stops a request.
            for &(x, _) in &self.b.prefix.stops {
                let below = |pos: &[usize]| -> Vec<usize> {
                    (0..self.c.names.len())
                        .filter(|&y| pos[y] < pos[x] && self.elem(y).resp.active())
                        .collect()
                };
                let (ba, bb) = (below(&pos_a), below(&pos_b));
                if let Some(&y) = ba
                    .iter()
                    .chain(&bb)
                    .find(|y| ba.contains(y) != bb.contains(y))
                {
                    return format!(
                        "`{}` {}, and its answer travels up through the response handlers of the elements ahead of it; {} changes whether `{}`'s response handler sees that answer (response path)",
                        self.name(x),
                        self.elem(x).req.stops.describe(false),
                        self.moving(y, x),
                        self.name(y)
                    );
                }
            }
        }
        format!(
            "the {} as the {} sees it differs",
            if resp { "response" } else { "request" },
            if resp { "client" } else { "server" }
        )
    }
}
