//! Random chains, layouts and RPC streams for the planner's property tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use weft_ir::config::{Config, Side};
use weft_ir::layout::Layout;
use weft_ir::load::{LoadError, LoadedEdge, load_edge};
use weft_ir::sim::{SimReport, TraceLine, parse_trace};

/// SplitMix64: small, seedable, good enough for test generation.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    pub fn float(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const USERS: &[&str] = &["alice", "bob", "mallory", "eve"];
const FIELDS: &[&str] = &["user", "body"];

/// The schema a generated edge runs over: method `echo.Echo/Say` of examples/echo/echo.proto,
/// or of ir/tests/protos/planner_oneof.proto, the same messages with oneofs (`body`, `alt`
/// and the message `who` share one, and so do `who.name` and `who.team`; in the response,
/// `served_by` and `note`), so elements on different fields of one oneof interact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schema {
    Echo,
    Oneof,
}

impl Schema {
    fn proto(self) -> PathBuf {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        match self {
            Schema::Echo => root.join("../examples/echo/echo.proto"),
            Schema::Oneof => root.join("tests/protos/planner_oneof.proto"),
        }
    }

    /// String fields of the request that elements read and write.
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            Schema::Echo => FIELDS,
            Schema::Oneof => &["user", "body", "alt", "who.name", "who.team"],
        }
    }

    /// String fields of the response.
    pub fn resp_fields(self) -> &'static [&'static str] {
        match self {
            Schema::Echo => &["body", "served_by"],
            Schema::Oneof => &["body", "served_by", "note"],
        }
    }
}

/// One element of a generated chain: its YAML entry (without the list) and control lines.
pub struct Gen {
    pub kind: &'static str,
    pub params: String,
    pub state: String,
}

/// Element kinds the generator draws from: the standard library plus the test elements in
/// ir/tests/elements (shared strong and weak state, response-path rewriting, a route set
/// inside a read-modify-write lambda).
pub const KINDS: &[&str] = &[
    "logging",
    "metrics",
    "mutation",
    "firewall",
    "fault",
    "ratelimit",
    "bandwidthlimit",
    "cache",
    "circuitbreaker",
    "admissioncontrol",
    "loadbalance",
    "prequal_client",
    "prequal_server",
    "servicerouter_client",
    "servicerouter_server",
    "ratelimit_replica",
    "hits_weak",
    "users_strong",
    "boot_strong",
    "tagger",
    "respguard",
    "stamp",
    "fallback",
    "dynheader",
    "headerguard",
    "rmwroute_echo",
];

/// More test elements for the soundness test (not the optimality test, whose chains and
/// timings stay as they were):
/// - writes decided inside read-modify-write lambdas: a route from the count the lambda
///   updates, a field write behind an early `return`, a weak map whose unchanged entries are
///   not written, a response handler's, nested lambdas with a computed header name and
///   metadata;
/// - field writers: of the response, and of the request one that cannot fail (`mutation`'s
///   join can, which ties its order to every element that stops or counts requests); with
///   the oneof schema a writer of one member clears the others;
/// - shared state that `init` writes or copies while the control plane (trace control
///   lines, config `state:`) changes it;
/// - counts that skip requests a header marks, through an early `return` or the right side
///   of an `or`, and the element that marks them;
/// - a header named by a parameter with capitals (`DST` routes), and a response handler
///   that writes a header named at run time and then may turn the response into an error.
pub const MORE_KINDS: &[&str] = &[
    "rmwsticky",
    "rmwmark",
    "rmwweak",
    "rmwresp",
    "rmwnest",
    "respfield",
    "fieldset",
    "gate_strong",
    "snap_level",
    "viptag",
    "vipcount",
    "viporcount",
    "headerset",
    "resperr",
];

/// Elements that need the oneof schema: `who_size` reads the size of the message `who`.
pub const ONEOF_KINDS: &[&str] = &["who_size"];

pub fn gen_element(rng: &mut Rng, kind: &'static str) -> Gen {
    gen_element_in(rng, kind, Schema::Echo)
}

pub fn gen_element_in(rng: &mut Rng, kind: &'static str, schema: Schema) -> Gen {
    let fields = schema.fields();
    let replicas = "[echo-0, echo-1, echo-2]";
    let (params, state) = match kind {
        "mutation" => (
            format!(
                "{{field: {}, prefix: {}}}",
                rng.pick(fields),
                rng.pick(&["x-", "y-"])
            ),
            String::new(),
        ),
        "firewall" => {
            let deny: Vec<&str> = USERS.iter().copied().filter(|_| rng.chance(0.4)).collect();
            (
                format!(
                    "{{field: {}, deny: [{}]}}",
                    rng.pick(fields),
                    deny.join(", ")
                ),
                String::new(),
            )
        }
        "fault" => (
            format!("{{prob_pass: {}}}", rng.pick(&["0.5", "0.8", "0.95"])),
            String::new(),
        ),
        "ratelimit" => (
            format!(
                "{{capacity: {}, rate: {}}}",
                rng.pick(&["2", "5"]),
                rng.pick(&["1", "5"])
            ),
            String::new(),
        ),
        "bandwidthlimit" => (
            format!(
                "{{capacity: {}, rate: {}}}",
                rng.pick(&["40", "100"]),
                rng.pick(&["50", "200"])
            ),
            String::new(),
        ),
        "cache" => (format!("{{field: {}}}", rng.pick(fields)), String::new()),
        "circuitbreaker" => (
            format!("{{max_pending: {}}}", rng.pick(&["1", "2", "3"])),
            String::new(),
        ),
        "admissioncontrol" => (
            format!(
                "{{multiplier: {}, window: {}, buckets: {}}}",
                rng.pick(&["1.0", "2.0"]),
                rng.pick(&["0.5", "1.0"]),
                rng.pick(&["1", "4"])
            ),
            String::new(),
        ),
        "loadbalance" => {
            let p = *rng.pick(&["round_robin", "random", "sticky"]);
            let params = if p == "sticky" {
                format!("{{policy: sticky, key_field: {}}}", rng.pick(fields))
            } else {
                format!("{{policy: {p}}}")
            };
            (params, format!("{{replicas: {replicas}}}"))
        }
        "prequal_client" => (
            format!("{{num_choices: {}}}", rng.pick(&["1", "2"])),
            format!("{{replicas: {replicas}}}"),
        ),
        "servicerouter_client" => (
            format!("{{key_field: {}, num_shards: 2}}", rng.pick(fields)),
            "{shards: {0: [echo-0, echo-1], 1: [echo-2]}}".into(),
        ),
        "ratelimit_replica" => (
            format!("{{limit: {}}}", rng.pick(&["1", "2", "3"])),
            String::new(),
        ),
        "users_strong" => (
            format!("{{limit: {}}}", rng.pick(&["1", "3"])),
            String::new(),
        ),
        "respguard" => (format!("{{who: {}}}", rng.pick(USERS)), String::new()),
        "rmwmark" => (
            format!(
                "{{field: {}, limit: {}}}",
                rng.pick(fields),
                rng.pick(&["1", "2"])
            ),
            String::new(),
        ),
        "rmwweak" => (format!("{{field: {}}}", rng.pick(fields)), String::new()),
        "fieldset" => (
            format!(
                "{{field: {}, value: {}}}",
                rng.pick(fields),
                rng.pick(USERS)
            ),
            String::new(),
        ),
        "rmwresp" => (
            format!("{{field: {}}}", rng.pick(schema.resp_fields())),
            String::new(),
        ),
        "respfield" => (
            format!(
                "{{source: {}, target: {}}}",
                rng.pick(schema.resp_fields()),
                rng.pick(schema.resp_fields())
            ),
            String::new(),
        ),
        "who_size" => (
            format!("{{limit: {}}}", rng.pick(&["3", "6", "12"])),
            String::new(),
        ),
        "headerset" => {
            let (name, value) = *rng.pick(&[
                ("X-Tier", "gold"),
                ("X-Vip", "yes"),
                ("X-User", "mallory"),
                ("DST", "echo-1"),
            ]);
            (format!("{{name: {name}, value: {value}}}"), String::new())
        }
        "gate_strong" if rng.chance(0.3) => (String::new(), "{open: false}".into()),
        _ => (String::new(), String::new()),
    };
    Gen {
        kind,
        params,
        state,
    }
}

/// A generated edge: its weft.yaml body and the element names in chain order.
pub struct Chain {
    pub yaml: String,
}

fn entry(g: &Gen, name: &str, side: Option<&str>, extra: &str) -> String {
    let mut s = format!("{{element: {}, name: {name}{extra}", g.kind);
    if !g.params.is_empty() {
        s.push_str(&format!(", params: {}", g.params));
    }
    if !g.state.is_empty() {
        s.push_str(&format!(", state: {}", g.state));
    }
    if let Some(side) = side {
        s.push_str(&format!(", side: {side}"));
    }
    s.push('}');
    s
}

/// A random chain of `n` elements over client/any/server lists (and sometimes an
/// encrypt/decrypt pair), as weft.yaml.
pub fn gen_chain(rng: &mut Rng, n: usize, kinds: &[&'static str], consistency: &str) -> Chain {
    gen_chain_with(rng, n, kinds, consistency, false)
}

/// As [`gen_chain`]; with `constrain`, some elements are `untrusted`, need `hot_upgrade` or
/// are pinned to a processor, so processor choice and segment grouping matter.
pub fn gen_chain_with(
    rng: &mut Rng,
    n: usize,
    kinds: &[&'static str],
    consistency: &str,
    constrain: bool,
) -> Chain {
    gen_chain_in(rng, n, kinds, consistency, constrain, Schema::Echo)
}

/// As [`gen_chain_with`], over `schema`'s fields.
pub fn gen_chain_in(
    rng: &mut Rng,
    n: usize,
    kinds: &[&'static str],
    consistency: &str,
    constrain: bool,
    schema: Schema,
) -> Chain {
    let mut lists: [Vec<String>; 3] = Default::default();
    let mut pair = None;
    let mut count = 0;
    if n >= 2 && rng.chance(0.15) {
        let f = rng.pick(schema.fields());
        pair = Some(format!(
            "[{{element: encrypt, name: enc, params: {{field: {f}, key: k1}}}}, {{element: decrypt, name: dec, params: {{field: {f}, key: k1}}}}]"
        ));
        count += 2;
    }
    let mut i = 0;
    while count < n {
        let kind = *rng.pick(kinds);
        let g = gen_element_in(rng, kind, schema);
        let name = format!("{kind}_{i}");
        i += 1;
        let list = match rng.below(10) {
            0..=1 => 0,
            2..=7 => 1,
            _ => 2,
        };
        let side = (list == 1 && rng.chance(0.15)).then(|| *rng.pick(&["client", "server"]));
        let extra = if constrain {
            match rng.below(10) {
                0 | 1 => ", untrusted: true",
                2 => ", hot_upgrade: true",
                3 => ", processor: agent",
                _ => "",
            }
        } else {
            ""
        };
        lists[list].push(entry(&g, &name, side, extra));
        count += 1;
    }
    // A client pin after a server pin in `any` contradicts itself; keep server pins last.
    lists[1].sort_by_key(|e| {
        if e.contains("side: server") {
            2
        } else if e.contains("side: client") {
            0
        } else {
            1
        }
    });
    let mut yaml = format!("    consistency: {consistency}\n");
    for (k, l) in ["client", "any", "server"].iter().zip(&lists) {
        if !l.is_empty() {
            yaml.push_str(&format!("    {k}:\n"));
            for e in l {
                yaml.push_str(&format!("      - {e}\n"));
            }
        }
    }
    if let Some(p) = pair {
        yaml.push_str(&format!("    pair:\n      - {p}\n"));
    }
    Chain { yaml }
}

pub fn load(chain: &str) -> Result<LoadedEdge, LoadError> {
    load_in(chain, Schema::Echo)
}

pub fn load_in(chain: &str, schema: Schema) -> Result<LoadedEdge, LoadError> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = format!(
        "protos: [{}]\nelement_paths: [{}]\nsim:\n  weak_sync_interval: 0.5\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: echo.Echo/Say\n{chain}",
        schema.proto().display(),
        root.join("tests/elements").display(),
    );
    let cfg = Config::parse("weft.yaml", root, &text)?;
    load_edge(&cfg, "frontend->echo")
}

/// A random RPC stream: several callers, overlapping RPCs, server errors, response headers
/// the routing elements read.
pub fn gen_trace(rng: &mut Rng, rpcs: usize, edge: &LoadedEdge) -> Vec<TraceLine> {
    gen_trace_in(rng, rpcs, edge, Schema::Echo)
}

/// As [`gen_trace`]; with the oneof schema, each request sets one member of its oneof
/// (`body`, `alt`, or `who` with `name` or `team`) and each response one of `served_by`
/// and `note`.
pub fn gen_trace_in(
    rng: &mut Rng,
    rpcs: usize,
    edge: &LoadedEdge,
    schema: Schema,
) -> Vec<TraceLine> {
    let mut lines = Vec::new();
    for el in &edge.elements {
        if el.use_.element == "loadbalance" && rng.chance(0.5) {
            lines.push(format!(
                r#"{{"t": 0, "control": {{"element": "{}", "var": "replicas", "value": ["echo-0", "echo-1"]}}}}"#,
                el.use_.name
            ));
        }
        // Shared state the control plane changes while instances start.
        let control = match el.use_.element.as_str() {
            "gate_strong" => Some(("open", ["false", "true"])),
            "snap_level" => Some(("level", ["1", "0"])),
            _ => None,
        };
        if let Some((var, values)) = control {
            for k in 0..1 + rng.below(2) {
                let value = values[k % 2];
                lines.push(format!(
                    r#"{{"t": {}, "control": {{"element": "{}", "var": "{var}", "value": {value}}}}}"#,
                    rng.float() * 0.4 * rpcs as f64 / 2.0,
                    el.use_.name
                ));
            }
        }
    }
    let mut t = 0.0;
    for i in 0..rpcs {
        t += rng.float() * 0.4;
        let src = format!("frontend-{}", rng.below(3));
        let user = rng.pick(USERS);
        let body = rng.pick(&["hi", "hello", "a longer body text", ""]);
        let status = if rng.chance(0.1) { "UNAVAILABLE" } else { "OK" };
        let mut hdrs = Vec::new();
        if rng.chance(0.3) {
            hdrs.push(format!(r#""sr-load": "{}""#, rng.below(5)));
        }
        if rng.chance(0.3) {
            hdrs.push(format!(
                r#""prequal-rif": "{}", "prequal-latency": "0.0{}""#,
                rng.below(4),
                rng.below(9)
            ));
        }
        let t_resp = if rng.chance(0.6) {
            format!(r#", "t_resp": {}"#, t + rng.float() * 0.8)
        } else {
            String::new()
        };
        let req_headers = if rng.chance(0.2) {
            r#", "headers": {"x-tier": "gold"}"#
        } else {
            ""
        };
        let (content, origin) = match schema {
            Schema::Echo => (format!(r#""body": "{body}""#), r#""served_by": "s""#),
            Schema::Oneof => {
                // Member values come from the users too, so a firewall on any member denies.
                let value = if rng.chance(0.5) {
                    body
                } else {
                    rng.pick(USERS)
                };
                let content = match rng.below(4) {
                    0 | 1 => format!(r#""body": "{value}""#),
                    2 => format!(r#""alt": "{value}""#),
                    _ => format!(r#""who": {{"{}": "{value}"}}"#, rng.pick(&["name", "team"])),
                };
                let origin = if rng.chance(0.5) {
                    r#""served_by": "s""#
                } else {
                    r#""note": "n""#
                };
                (content, origin)
            }
        };
        lines.push(format!(
            r#"{{"id": {}, "t": {t}, "src": "{src}", "req": {{"user": "{user}", {content}}}, "resp": {{"body": "r{i}", {origin}}}, "resp_headers": {{{}}}, "status": "{status}"{t_resp}{req_headers}}}"#,
            i + 1,
            hdrs.join(", ")
        ));
    }
    parse_trace(&lines.join("\n")).unwrap()
}

/// Elements whose side the layout may change: unpinned `any` elements.
pub fn flexible(edge: &LoadedEdge) -> Vec<bool> {
    edge.elements
        .iter()
        .map(|e| e.position == weft_ir::config::Position::Any && e.use_.constraints.side.is_none())
        .collect()
}

/// A random valid layout: a priority order and sides, client side first.
pub fn normalise(priority: &[usize], sides: &[Side]) -> Layout {
    let mut order: Vec<usize> = priority
        .iter()
        .copied()
        .filter(|&k| sides[k] == Side::Client)
        .collect();
    order.extend(
        priority
            .iter()
            .copied()
            .filter(|&k| sides[k] == Side::Server),
    );
    Layout {
        order,
        sides: sides.to_vec(),
    }
}

/// One of Algorithm 4's mutations (move, swap, change side) applied to a layout.
pub fn mutate(rng: &mut Rng, l: &Layout, flexible: &[bool]) -> Layout {
    let mut order = l.order.clone();
    let mut sides = l.sides.clone();
    let n = order.len();
    match rng.below(3) {
        0 if n > 1 => {
            let from = rng.below(n);
            let x = order.remove(from);
            let to = rng.below(n);
            order.insert(to, x);
        }
        1 if n > 1 => {
            let (a, b) = (rng.below(n), rng.below(n));
            order.swap(a, b);
        }
        _ => {
            let flex: Vec<usize> = (0..n).filter(|&k| flexible[k]).collect();
            if !flex.is_empty() {
                let k = *rng.pick(&flex);
                sides[k] = match sides[k] {
                    Side::Client => Side::Server,
                    Side::Server => Side::Client,
                };
            }
        }
    }
    normalise(&order, &sides)
}

/// What a simulation shows, normalised so layouts can be compared: state by instance for
/// elements whose state depends on the instance (`keyed`), else the set of values each
/// variable takes over all instances (shared state is one value; read-only local state is
/// the same in every instance, however many there are); error counts per element; channel
/// records per element and channel.
#[derive(Debug, PartialEq)]
pub struct Observed {
    pub results: Vec<String>,
    pub state: BTreeMap<String, String>,
    pub errors: BTreeMap<String, (u64, u64)>,
    pub channels: BTreeMap<String, Vec<String>>,
}

/// Per element: whether its state depends on the instance, and the variables its handlers
/// write (the others are the same in every instance that exists, so whether an instance was
/// ever started does not show).
pub struct Shape {
    pub keyed: bool,
    pub written: Vec<String>,
}

pub fn shapes(edge: &LoadedEdge) -> Vec<Shape> {
    edge.elements
        .iter()
        .map(|e| {
            let abs: Vec<_> =
                e.ir.values()
                    .map(|ir| weft_ir::abstraction::abstract_element(ir, &e.use_))
                    .collect();
            Shape {
                keyed: abs.iter().any(|a| a.keyed()),
                written: abs
                    .iter()
                    .flat_map(|a| a.vars.iter())
                    .filter(|v| v.written_by_handlers && !v.random_stream)
                    .map(|v| v.name.clone())
                    .collect(),
            }
        })
        .collect()
}

pub fn observe(edge: &LoadedEdge, r: &SimReport, shapes: &[Shape], channels: bool) -> Observed {
    let results = r.results.iter().map(|x| format!("{x:?}")).collect();
    let mut state = BTreeMap::new();
    let mut by_element: BTreeMap<String, BTreeMap<String, std::collections::BTreeSet<String>>> =
        BTreeMap::new();
    for (inst, vars) in &r.state {
        let (name, _) = inst.rsplit_once('@').unwrap_or((inst, ""));
        let k = edge
            .elements
            .iter()
            .position(|e| e.use_.name == name)
            .unwrap();
        if shapes[k].keyed {
            state.insert(inst.clone(), format!("{vars:?}"));
        } else {
            for (v, val) in vars.iter().filter(|(v, _)| shapes[k].written.contains(v)) {
                by_element
                    .entry(name.to_owned())
                    .or_default()
                    .entry(v.clone())
                    .or_default()
                    .insert(format!("{val:?}"));
            }
        }
    }
    for (name, vars) in by_element {
        state.insert(format!("{name} (all instances)"), format!("{vars:?}"));
    }
    let mut errors: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (inst, (e, m)) in r.errors.iter().filter(|(_, c)| **c != (0, 0)) {
        let (name, _) = inst.rsplit_once('@').unwrap_or((inst, ""));
        let slot = errors.entry(name.to_owned()).or_default();
        slot.0 += e;
        slot.1 += m;
    }
    let mut chans: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if channels {
        for c in &r.channels {
            chans
                .entry(format!("{}/{}", c.element, c.channel))
                .or_default()
                .push(format!("{} {} {:?}", c.rpc_id, c.time, c.value));
        }
    }
    Observed {
        results,
        state,
        errors,
        channels: chans,
    }
}
