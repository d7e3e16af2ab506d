#![allow(clippy::unwrap_used)]
//! Property analysis (AppNet Appendix B): for every standard element, instantiated as a chain
//! config would instantiate it, the record the planner builds its transfer functions from —
//! fields read and written, state read and written, whether the element may drop an RPC and
//! on what, reordering (never), channels, routing, and the scope of each state variable.
//! Every expectation is derived by hand from the element's source; the comments give the
//! reasoning where it is not a direct reading.

use std::collections::BTreeSet;
use std::path::Path;

use weft_hostcalls::Value;
use weft_ir::check::{CheckEnv, check};
use weft_ir::diag::{SourceFile, render_all};
use weft_ir::ir::Params;
use weft_ir::parser::parse;
use weft_ir::props::{ElementProps, HandlerProps, Scope, analyse};
use weft_ir::schema::Schema;

use Scope::{Global, PerClientReplica, PerServerReplica};

/// Checks `src` against `props.Echo/Say` with `params`, as `load::load_edge` does (a chain
/// config always passes its parameter map, empty or not), and analyses it.
fn props_of(name: &str, src: &str, params: &[(&str, Value)]) -> ElementProps {
    let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/protos/props.proto");
    let schema = Schema::load(&[proto], &[]).unwrap();
    let method = schema.method("props.Echo/Say").unwrap();
    let params: Params = params
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    let file = SourceFile::new(format!("{name}.weft"), src);
    let (ast, mut diags) = parse(&file);
    let (element, more) = check(
        &ast,
        &CheckEnv {
            name: name.into(),
            method: Some(&method),
            params: Some(&params),
        },
    );
    diags.extend(more);
    assert!(diags.is_empty(), "{}", render_all(&file, &diags));
    analyse(&element.unwrap())
}

fn std_props(name: &str, params: &[(&str, Value)]) -> ElementProps {
    props_of(name, weft_ir::stdlib::source(name).unwrap(), params)
}

/// What one handler is expected to do. `drop_deps` is checked whenever the handler may drop.
#[derive(Clone, Copy)]
struct Expect {
    fields_read: &'static [&'static str],
    fields_written: &'static [&'static str],
    state_read: &'static [&'static str],
    state_written: &'static [&'static str],
    may_drop: bool,
    may_reply: bool,
    drop_deps: &'static [&'static str],
    channels: &'static [&'static str],
    routes: bool,
}

/// A handler that touches nothing: forwards the message unchanged.
const NOTHING: Expect = Expect {
    fields_read: &[],
    fields_written: &[],
    state_read: &[],
    state_written: &[],
    may_drop: false,
    may_reply: false,
    drop_deps: &[],
    channels: &[],
    routes: false,
};

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn assert_handler(what: &str, got: &HandlerProps, want: Expect) {
    assert_eq!(
        got.fields_read,
        set(want.fields_read),
        "{what}: fields read"
    );
    assert_eq!(
        got.fields_written,
        set(want.fields_written),
        "{what}: fields written"
    );
    assert_eq!(got.state_read, set(want.state_read), "{what}: state read");
    assert_eq!(
        got.state_written,
        set(want.state_written),
        "{what}: state written"
    );
    assert_eq!(got.may_drop, want.may_drop, "{what}: may drop");
    assert_eq!(got.may_reply, want.may_reply, "{what}: may reply");
    assert_eq!(got.drop_deps, set(want.drop_deps), "{what}: drop deps");
    assert_eq!(
        got.drop_depends_on_random,
        want.drop_deps.contains(&"random"),
        "{what}: drop depends on random"
    );
    assert!(!got.may_reorder, "{what}: no construct reorders RPCs");
    assert_eq!(got.channels, set(want.channels), "{what}: channels");
    assert_eq!(got.routes, want.routes, "{what}: routes");
}

fn assert_element(
    name: &str,
    p: &ElementProps,
    [init, req, resp]: [Expect; 3],
    scopes: &[(&str, Scope)],
) {
    assert_handler(&format!("{name} init"), &p.init, init);
    assert_handler(&format!("{name} req"), &p.req, req);
    assert_handler(&format!("{name} resp"), &p.resp, resp);
    let got: Vec<(&str, Scope)> = p.state.iter().map(|s| (s.name.as_str(), s.scope)).collect();
    assert_eq!(got, scopes, "{name}: state scopes");
}

// ---- the standard elements -----------------------------------------------------------------

#[test]
fn admissioncontrol() {
    let p = std_props("admissioncontrol", &[]);
    // Both handlers bring the counts up to the current bucket (the bucket maps and
    // `current`, from the clock and `start`) before counting into them.
    let counts = &[
        "accepts",
        "bucket_accepts",
        "bucket_requests",
        "current",
        "requests",
    ];
    let read = &[
        "accepts",
        "bucket_accepts",
        "bucket_requests",
        "current",
        "requests",
        "start",
    ];
    assert_element(
        "admissioncontrol",
        &p,
        [
            Expect {
                state_written: &["start"],
                ..NOTHING
            },
            Expect {
                state_read: read,
                state_written: counts,
                may_drop: true,
                // The rejection test is `randomf(…) < max(0, (requests - multiplier *
                // accepts) / …)`. Deps name the state a decision reads, not what wrote it
                // earlier in the handler (that is in `write_deps`): the expiry of old buckets
                // (clock, `start`, the bucket maps) reaches the decision through them.
                drop_deps: &["random", "state:accepts", "state:requests"],
                ..NOTHING
            },
            Expect {
                fields_read: &["meta_status"],
                state_read: read,
                state_written: counts,
                ..NOTHING
            },
        ],
        &[
            ("requests", Global),
            ("accepts", Global),
            ("bucket_requests", Global),
            ("bucket_accepts", Global),
            ("current", Global),
            ("start", Global),
        ],
    );
}

#[test]
fn bandwidthlimit() {
    let p = std_props("bandwidthlimit", &[("capacity", Value::Float(1000.0))]);
    assert_element(
        "bandwidthlimit",
        &p,
        [
            Expect {
                state_written: &["last", "tokens"],
                ..NOTHING
            },
            Expect {
                // `byte_size(rpc)` depends on every field of the request.
                fields_read: &["*"],
                state_read: &["last", "tokens"],
                state_written: &["last", "tokens"],
                may_drop: true,
                drop_deps: &["message", "state:tokens"],
                ..NOTHING
            },
            NOTHING,
        ],
        &[("tokens", Global), ("last", Global)],
    );
}

#[test]
fn cache() {
    let p = std_props("cache", &[("field", Value::str("body"))]);
    assert_element(
        "cache",
        &p,
        [
            NOTHING,
            Expect {
                fields_read: &["body"],
                state_read: &["cache"],
                // A hit answers locally: the server never sees that request.
                may_drop: true,
                may_reply: true,
                // The key is the method and the field (one method's answer never reaches
                // another's caller).
                drop_deps: &["field:body", "method", "state:cache"],
                ..NOTHING
            },
            Expect {
                // The stored entry is the whole response.
                fields_read: &["*", "meta_status"],
                state_written: &["cache"],
                ..NOTHING
            },
        ],
        // Keyed by a request field.
        &[("cache", Global)],
    );
}

#[test]
fn circuitbreaker() {
    let p = std_props("circuitbreaker", &[("max_pending", Value::Int(10))]);
    assert_element(
        "circuitbreaker",
        &p,
        [
            NOTHING,
            Expect {
                state_read: &["pending"],
                state_written: &["pending"],
                may_drop: true,
                drop_deps: &["state:pending"],
                ..NOTHING
            },
            Expect {
                state_read: &["pending"],
                state_written: &["pending"],
                ..NOTHING
            },
        ],
        &[("pending", Global)],
    );
}

#[test]
fn decrypt() {
    let p = std_props(
        "decrypt",
        &[("field", Value::str("body")), ("key", Value::str("k"))],
    );
    assert_element(
        "decrypt",
        &p,
        [
            NOTHING,
            Expect {
                fields_read: &["body"],
                fields_written: &["body"],
                // Rejects when the field does not authenticate; decryption is deterministic.
                may_drop: true,
                drop_deps: &["field:body"],
                ..NOTHING
            },
            NOTHING,
        ],
        &[],
    );
}

#[test]
fn encrypt() {
    let p = std_props(
        "encrypt",
        &[("field", Value::str("body")), ("key", Value::str("k"))],
    );
    assert_element(
        "encrypt",
        &p,
        [
            NOTHING,
            Expect {
                fields_read: &["body"],
                fields_written: &["body"],
                ..NOTHING
            },
            NOTHING,
        ],
        &[],
    );
    // The nonce is random: the written field depends on randomness, the drop decision (there
    // is none) does not.
    assert!(p.req.uses_random);
    assert_eq!(
        p.req.write_deps["body"],
        set(&["field:body", "random"]),
        "encrypt: what the new body depends on"
    );
}

#[test]
fn fault() {
    let p = std_props("fault", &[("prob_pass", Value::Float(0.9))]);
    assert_element(
        "fault",
        &p,
        [
            NOTHING,
            Expect {
                may_drop: true,
                drop_deps: &["random"],
                ..NOTHING
            },
            NOTHING,
        ],
        &[],
    );
}

#[test]
fn firewall() {
    let p = std_props(
        "firewall",
        &[
            ("field", Value::str("user")),
            ("deny", Value::Vec(vec![Value::str("mallory")])),
        ],
    );
    assert_element(
        "firewall",
        &p,
        [
            // `init` fills the deny set from the (constant) parameter list.
            Expect {
                state_written: &["denied"],
                ..NOTHING
            },
            Expect {
                fields_read: &["user"],
                state_read: &["denied"],
                may_drop: true,
                drop_deps: &["field:user", "state:denied"],
                ..NOTHING
            },
            NOTHING,
        ],
        &[("denied", Global)],
    );
}

/// loadbalance's `req` always reads `dst()` (in the "no replicas" rejection, which depends on
/// the size of `replicas`) and always routes.
#[test]
fn loadbalance_round_robin() {
    let p = std_props("loadbalance", &[("policy", Value::str("round_robin"))]);
    assert_element(
        "loadbalance(round_robin)",
        &p,
        [
            // `init` marks `next` unset (a round-robin start is drawn on first use).
            Expect {
                state_written: &["next"],
                ..NOTHING
            },
            Expect {
                fields_read: &["header:dst"],
                fields_written: &["header:dst"],
                state_read: &["next", "replicas"],
                state_written: &["next"],
                may_drop: true,
                drop_deps: &["state:replicas"],
                routes: true,
                ..NOTHING
            },
            NOTHING,
        ],
        // `replicas` is indexed by `next % n`; `sticky` is not used by this policy at all.
        &[("replicas", Global), ("next", Global), ("sticky", Global)],
    );
}

#[test]
fn loadbalance_random() {
    let p = std_props("loadbalance", &[("policy", Value::str("random"))]);
    assert_element(
        "loadbalance(random)",
        &p,
        [
            // `init` marks `next` unset (a round-robin start is drawn on first use).
            Expect {
                state_written: &["next"],
                ..NOTHING
            },
            Expect {
                fields_read: &["header:dst"],
                fields_written: &["header:dst"],
                state_read: &["replicas"],
                may_drop: true,
                drop_deps: &["state:replicas"],
                routes: true,
                ..NOTHING
            },
            NOTHING,
        ],
        &[("replicas", Global), ("next", Global), ("sticky", Global)],
    );
    assert!(p.req.uses_random);
}

#[test]
fn loadbalance_sticky() {
    let p = std_props(
        "loadbalance",
        &[
            ("policy", Value::str("sticky")),
            ("key_field", Value::str("user")),
        ],
    );
    assert_element(
        "loadbalance(sticky)",
        &p,
        [
            // `init` marks `next` unset (a round-robin start is drawn on first use).
            Expect {
                state_written: &["next"],
                ..NOTHING
            },
            Expect {
                fields_read: &["header:dst", "user"],
                fields_written: &["header:dst"],
                state_read: &["replicas", "sticky"],
                state_written: &["sticky"],
                may_drop: true,
                // The replica is random, but whether the RPC is rejected is not.
                drop_deps: &["state:replicas"],
                routes: true,
                ..NOTHING
            },
            NOTHING,
        ],
        // `sticky` is keyed by the request's `user`.
        &[("replicas", Global), ("next", Global), ("sticky", Global)],
    );
}

#[test]
fn logging() {
    let p = std_props("logging", &[]);
    // Each record is the whole message, so it depends on every field.
    let logs = Expect {
        fields_read: &["*"],
        channels: &["log"],
        ..NOTHING
    };
    assert_element("logging", &p, [NOTHING, logs, logs], &[]);
}

#[test]
fn metrics() {
    let p = std_props("metrics", &[]);
    assert_element(
        "metrics",
        &p,
        [
            NOTHING,
            // Only the per-RPC start time, which is scratch, not state.
            NOTHING,
            Expect {
                fields_read: &["meta_status"],
                state_read: &["failed", "total"],
                state_written: &["failed", "total"],
                channels: &["latency"],
                ..NOTHING
            },
        ],
        &[("total", Global), ("failed", Global)],
    );
    assert!(p.req.uses_time && p.resp.uses_time);
}

#[test]
fn mutation() {
    let p = std_props("mutation", &[("field", Value::str("body"))]);
    assert_element(
        "mutation",
        &p,
        [
            NOTHING,
            Expect {
                fields_read: &["body"],
                fields_written: &["body"],
                ..NOTHING
            },
            NOTHING,
        ],
        &[],
    );
}

#[test]
fn prequal_client() {
    let p = std_props("prequal_client", &[("num_choices", Value::Int(2))]);
    assert_element(
        "prequal_client",
        &p,
        [
            NOTHING,
            Expect {
                fields_written: &["header:dst"],
                state_read: &["pool", "probes", "replicas"],
                may_drop: true,
                // Rejected when no replica was picked: `best` is assigned from the random
                // sample of `replicas`, under conditions on the probes (which count only
                // while fresh: the clock) and on the quantile of `pool`. (Value-wise only an
                // empty `replicas` leaves `best` empty, but the analysis follows flows, not
                // values.)
                drop_deps: &[
                    "random",
                    "state:pool",
                    "state:probes",
                    "state:replicas",
                    "time",
                ],
                routes: true,
                ..NOTHING
            },
            Expect {
                fields_read: &["header:dst", "header:prequal-latency", "header:prequal-rif"],
                // It removes the reports it read: they are not for the application.
                fields_written: &["header:prequal-latency", "header:prequal-rif"],
                state_read: &["slot"],
                state_written: &["pool", "probes", "slot"],
                ..NOTHING
            },
        ],
        // `probes` is written per `dst()` but read for the sampled replicas, so it is not
        // per server replica; `pool` is indexed by `slot`.
        &[
            ("replicas", Global),
            ("probes", Global),
            ("pool", Global),
            ("slot", Global),
        ],
    );
}

#[test]
fn prequal_server() {
    let p = std_props("prequal_server", &[]);
    assert_element(
        "prequal_server",
        &p,
        [
            NOTHING,
            Expect {
                state_read: &["in_flight"],
                state_written: &["in_flight"],
                ..NOTHING
            },
            Expect {
                fields_written: &["header:prequal-latency", "header:prequal-rif"],
                state_read: &["in_flight", "latency"],
                state_written: &["in_flight", "latency"],
                ..NOTHING
            },
        ],
        &[("in_flight", Global), ("latency", Global)],
    );
}

#[test]
fn ratelimit() {
    let p = std_props(
        "ratelimit",
        &[("capacity", Value::Int(5)), ("rate", Value::Int(1))],
    );
    assert_element(
        "ratelimit",
        &p,
        [
            Expect {
                state_written: &["last", "tokens"],
                ..NOTHING
            },
            Expect {
                state_read: &["last", "tokens"],
                state_written: &["last", "tokens"],
                may_drop: true,
                drop_deps: &["state:tokens"],
                ..NOTHING
            },
            NOTHING,
        ],
        &[("tokens", Global), ("last", Global)],
    );
}

#[test]
fn servicerouter_client() {
    let p = std_props(
        "servicerouter_client",
        &[
            ("key_field", Value::str("user")),
            ("num_shards", Value::Int(4)),
        ],
    );
    assert_element(
        "servicerouter_client",
        &p,
        [
            NOTHING,
            Expect {
                fields_read: &["user"],
                fields_written: &["header:dst"],
                state_read: &["load", "shards"],
                may_drop: true,
                // Two rejections: no replicas for the shard (the shard comes from `user`), and
                // no replica picked from the random sample, whose choice compares loads from
                // `load` that count only while fresh (the clock).
                drop_deps: &["field:user", "random", "state:load", "state:shards", "time"],
                routes: true,
                ..NOTHING
            },
            Expect {
                fields_read: &["header:dst", "header:sr-load"],
                fields_written: &["header:sr-load"],
                state_written: &["load"],
                ..NOTHING
            },
        ],
        // `load` is written per `dst()` but read for the sampled replicas.
        &[("shards", Global), ("load", Global)],
    );
}

#[test]
fn servicerouter_server() {
    let p = std_props("servicerouter_server", &[]);
    let count = Expect {
        state_read: &["in_flight"],
        state_written: &["in_flight"],
        ..NOTHING
    };
    assert_element(
        "servicerouter_server",
        &p,
        [
            NOTHING,
            count,
            Expect {
                fields_written: &["header:sr-load"],
                ..count
            },
        ],
        &[("in_flight", Global)],
    );
}

#[test]
fn every_standard_element_has_a_property_test() {
    // Keep in step with the tests above: a new standard element needs its own expectation.
    let tested = [
        "admissioncontrol",
        "bandwidthlimit",
        "cache",
        "circuitbreaker",
        "decrypt",
        "encrypt",
        "fault",
        "firewall",
        "loadbalance",
        "logging",
        "metrics",
        "mutation",
        "prequal_client",
        "prequal_server",
        "ratelimit",
        "servicerouter_client",
        "servicerouter_server",
    ];
    let mut names: Vec<&str> = weft_ir::stdlib::names().collect();
    names.sort_unstable();
    assert_eq!(names, tested);
}

// ---- scope tagging ---------------------------------------------------------------------------

fn scopes(src: &str) -> Vec<(String, Scope)> {
    std_like(src)
        .state
        .into_iter()
        .map(|s| (s.name, s.scope))
        .collect()
}

fn std_like(src: &str) -> ElementProps {
    props_of("probe", src, &[])
}

fn owned(pairs: &[(&str, Scope)]) -> Vec<(String, Scope)> {
    pairs.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect()
}

#[test]
fn a_map_keyed_by_dst_is_per_server_replica() {
    let src = "state:
    served: Map<string, int>
    @consistency(weak) @combiner(sum)
    load: Map<string, int>

init():
    pass

req(rpc):
    set(served, dst(), 1)
    # Derived keys count too, and so does the routing header `dst` itself.
    key = dst() + '/load'
    get(load, key, lambda(n):
        n = n + 1
    )
    set(served, get_rpc_header(rpc, 'dst'), 2)
    send(rpc, Down)

resp(rpc):
    match get(served, dst()):
        Some(n) =>
            delete(served, dst())
        None =>
            pass
    send(rpc, Up)
";
    assert_eq!(
        scopes(src),
        owned(&[("served", PerServerReplica), ("load", PerServerReplica)])
    );
}

#[test]
fn a_map_keyed_by_src_is_per_client_replica() {
    let src = "state:
    calls: Map<string, int>

init():
    pass

req(rpc):
    match get(calls, src()):
        Some(n) =>
            set(calls, src(), n + 1)
        None =>
            set(calls, src(), 1)
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";
    assert_eq!(scopes(src), owned(&[("calls", PerClientReplica)]));
}

#[test]
fn a_map_keyed_by_a_field_or_by_mixed_keys_is_global() {
    let src = "state:
    per_user: Map<string, int>
    mixed: Map<string, int>
    pair: Map<string, int>
    untouched: Map<string, int>
    counter: int

init():
    pass

req(rpc):
    set(per_user, get(rpc, 'user'), 1)
    set(mixed, dst(), 1)
    set(mixed, get(rpc, 'user'), 2)
    # A key that names both ends still confines each entry to one server replica.
    set(pair, src() + '>' + dst(), 1)
    counter = size(untouched)
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";
    assert_eq!(
        scopes(src),
        owned(&[
            ("per_user", Global),
            // One access not keyed by `dst()` is enough to share entries across replicas.
            ("mixed", Global),
            ("pair", PerServerReplica),
            // Never accessed by key, and scalars have no keys: nothing to confine.
            ("untouched", Global),
            ("counter", Global),
        ])
    );
}

#[test]
fn reading_a_whole_collection_confines_it_to_no_replica() {
    // Every key access is by `dst()`, but `size` counts and `foreach` visits the entries of
    // every server replica: without synchronisation a replica would see only its own.
    let src = "state:
    @consistency(weak)
    served: Map<string, int>
    @consistency(weak)
    seen: Map<string, int>

init():
    pass

req(rpc):
    set(served, dst(), 1)
    set(seen, dst(), 1)
    set_rpc_header(rpc, 'x-replicas', str(size(served)))
    foreach(seen, lambda(k, v):
        set_rpc_header(rpc, 'x-last', k)
    )
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";
    assert_eq!(scopes(src), owned(&[("served", Global), ("seen", Global)]));
}

// ---- what a drop depends on ------------------------------------------------------------------

fn req_props(req: &str) -> HandlerProps {
    let src = format!(
        "state:\n    pass\n\ninit():\n    pass\n\nreq(rpc):\n{}\nresp(rpc):\n    send(rpc, Up)\n",
        req.lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    );
    std_like(&src).req
}

#[test]
fn a_drop_on_a_field_does_not_depend_on_randomness() {
    let p = req_props("if get(rpc, 'priority') > 5:\n    send(err('busy'), Up)\nsend(rpc, Down)");
    assert_handler(
        "field drop",
        &p,
        Expect {
            fields_read: &["priority"],
            may_drop: true,
            drop_deps: &["field:priority"],
            ..NOTHING
        },
    );
}

#[test]
fn a_drop_on_randomness_is_found_through_control_flow() {
    // The rejection tests a flag, but the flag was set under a random condition.
    let p = req_props(
        "sampled = false
if randomf(0.0, 1.0) < 0.1:
    sampled = true
if sampled:
    send(err('sampled out'), Up)
send(rpc, Down)",
    );
    assert_handler(
        "random drop",
        &p,
        Expect {
            may_drop: true,
            drop_deps: &["random"],
            ..NOTHING
        },
    );
}

#[test]
fn randomness_that_only_shapes_a_field_is_no_drop() {
    let p = req_props("set(rpc, 'priority', randomi(0, 10))\nsend(rpc, Down)");
    assert_handler(
        "random write",
        &p,
        Expect {
            fields_written: &["priority"],
            ..NOTHING
        },
    );
    assert!(p.uses_random);
}

/// A header named at run time may be `dst`, so writing one counts as routing (the planner
/// keeps such an element on the client side); a literal name other than `dst` does not.
#[test]
fn a_header_named_at_run_time_may_route() {
    let src = |name: &str| {
        format!(
            "state:\n    pass\n\ninit():\n    pass\n\nreq(rpc):\n    set_rpc_header(rpc, {name}, 'v')\n    send(rpc, Down)\n\nresp(rpc):\n    send(rpc, Up)\n"
        )
    };
    for (name, routes) in [
        ("get(rpc, 'user')", true),
        ("'dst'", true),
        ("'x-tag'", false),
    ] {
        let p = props_of("h", &src(name), &[]);
        assert_eq!(p.req.routes, routes, "set_rpc_header(rpc, {name}, ..)");
    }
}
