//! Differential testing of the JIT against the reference interpreter on generated programs
//! (`weft_ir::testgen`) and random — sometimes malformed — messages. Used by the cargo-fuzz
//! target `jit_vs_interp` and by the property tests.

use std::sync::Arc;

use weft_hostcalls::channel::ChannelRecord;
use weft_hostcalls::state::{SharedState, StateStore};
use weft_hostcalls::{Code, Message, SeededRng, Value, VirtualClock};
use weft_ir::check::{CheckEnv, check};
use weft_ir::diag::{SourceFile, has_errors};
use weft_ir::interp::{self, Host, Instance, RpcInfo, RpcScratch};
use weft_ir::ir::Element;
use weft_ir::parser::parse;
use weft_ir::schema::{FieldPath, MethodSchema, resolve_path};
use weft_ir::sim::{Executor, Interp, SegmentRequest, var_specs};
use weft_ir::testgen::{Entropy, Generated, random_message_bytes, request_fields, response_fields};
use weft_ir::types::Type;

use crate::compile::{Fusion, compile};
use crate::exec::{Buffers, block_store};

/// What a comparison covered, for statistics.
#[derive(Clone, Debug, Default)]
pub struct Compared {
    /// The program did not check (nothing to compare).
    pub skipped: bool,
    pub rpcs: usize,
    pub elements: usize,
    /// Requests the interpreter rejected at the iteration limit.
    pub limit_hits: usize,
}

fn fields(
    desc: &prost_reflect::MessageDescriptor,
    table: &[(&str, Type)],
) -> Vec<(FieldPath, Type)> {
    table
        .iter()
        .filter_map(|(p, t)| resolve_path(desc, p).ok().map(|fp| (fp, t.clone())))
        .collect()
}

/// One executor's world: state shared between its instances, the instances, the records.
struct World {
    shared: SharedState,
    instances: Vec<Instance>,
    channels: Vec<ChannelRecord>,
}

impl World {
    fn new(chain: &[Arc<Element>], seed: u64, jit: bool) -> World {
        let shared = SharedState::new();
        let instances = chain
            .iter()
            .map(|e| {
                let store: Box<dyn StateStore + Send> =
                    Box::new(shared.instance_store(&e.name, "a", &var_specs(e)));
                let store = if jit { block_store(e, store) } else { store };
                let rng = SeededRng::for_stream(seed, &format!("{}@a", e.name));
                Instance::new(e.name.clone(), store, Box::new(rng))
            })
            .collect();
        World {
            shared,
            instances,
            channels: Vec::new(),
        }
    }
}

fn random_headers(e: &mut Entropy, m: &mut Message) {
    for _ in 0..e.below(3) {
        let k = match e.below(4) {
            0 => "dst".to_owned(),
            1 => "x-gen".to_owned(),
            _ => format!("h{}", e.below(4)),
        };
        let v = format!("v{}", e.below(5));
        m.headers.insert(k, v);
    }
}

/// A channel record as two executors must agree on it: times bit for bit.
pub fn record_key(r: &ChannelRecord) -> (String, String, u64, u64, Value) {
    (
        r.element.to_string(),
        r.channel.to_string(),
        r.rpc_id,
        r.time.to_bits(),
        r.value.clone(),
    )
}

/// Runs a generated element — alone, or as a fused chain of two instances of it — through
/// the interpreter and the JIT on `rpcs` random requests and responses (some malformed),
/// and returns the first difference: a verdict, a response, a counter, the final state or
/// the channel records.
pub fn compare_program(
    g: &Generated,
    method: &MethodSchema,
    e: &mut Entropy,
    rpcs: usize,
) -> Result<Compared, String> {
    let src = SourceFile::new("generated.weft", g.source.clone());
    let (ast, diags) = parse(&src);
    if !diags.is_empty() {
        return Ok(Compared {
            skipped: true,
            ..Compared::default()
        });
    }
    let env = CheckEnv {
        name: "gen".into(),
        method: Some(method),
        params: Some(&g.params),
    };
    let (element, diags) = check(&ast, &env);
    let Some(element) = element.filter(|el| !has_errors(&diags) && el.is_runnable()) else {
        return Ok(Compared {
            skipped: true,
            ..Compared::default()
        });
    };
    let n = 1 + e.below(2);
    let chain: Vec<Arc<Element>> = (0..n)
        .map(|i| {
            let mut el = element.clone();
            el.set_name(format!("gen{i}"));
            Arc::new(el)
        })
        .collect();
    let fusion = if e.chance(1, 4) {
        Fusion::Unfused
    } else {
        Fusion::Fused
    };
    let compiled =
        compile(&chain, fusion).map_err(|err| format!("compile: {err}\n{}", g.source))?;
    let req_fields = fields(&method.request, &request_fields());
    let resp_fields = fields(&method.response, &response_fields());
    let seed = e.next_u64();
    let clock = VirtualClock::new(0.0);
    // The interpreter; the JIT called per direction (as the simulator and a runtime call
    // it); the JIT running whole round trips (as the benchmark rig does).
    let mut worlds = [
        World::new(&chain, seed, false),
        World::new(&chain, seed, true),
        World::new(&chain, seed, true),
    ];
    // Now and then a small iteration limit per element, so loops stop part-way and the
    // executors are compared at the limit too (generated loops are too small for the
    // default).
    let limits: Vec<u64> = (0..n)
        .map(|_| {
            if e.chance(1, 3) {
                1 + e.below(4) as u64
            } else {
                weft_ir::eval::MAX_ITERATIONS
            }
        })
        .collect();
    for w in &mut worlds {
        for (inst, limit) in w.instances.iter_mut().zip(&limits) {
            inst.max_iterations = *limit;
        }
    }
    let mut init_ok = true;
    for w in &mut worlds {
        for (inst, el) in w.instances.iter_mut().zip(&chain) {
            let mut host = Host::new(&clock, &mut w.channels);
            if interp::run_init(inst, el, &mut host).is_err() {
                init_ok = false;
            }
        }
    }
    if !init_ok {
        return Ok(Compared {
            skipped: true,
            ..Compared::default()
        });
    }
    let mut bufs = Buffers::default();
    let mut limit_hits = 0;
    let fail = |what: String| {
        Err(format!(
            "{what}\n--- program ({fusion:?}, {n} elements)\n{}",
            g.source
        ))
    };
    for i in 0..rpcs {
        clock.advance(e.below(2000) as f64 / 1000.0);
        if e.chance(1, 4) {
            for w in &worlds {
                w.shared.sync();
            }
        }
        let mut req = Message::request(random_message_bytes(e, &req_fields));
        random_headers(e, &mut req);
        let mut rpc = RpcInfo {
            id: i as u64 + 1,
            method: method.full_name.clone(),
            src: "client-a".into(),
            service: "gen-svc".into(),
            routed: None,
        };
        let request_rpc = rpc.clone();
        let mut outs: Vec<SegmentRequest> = Vec::new();
        // The RPC's scratch in each world, from its request to its response.
        let mut scratches = [RpcScratch::default(), RpcScratch::default()];
        for ((j, w), scratch) in worlds.iter_mut().take(2).enumerate().zip(&mut scratches) {
            let mut insts: Vec<&mut Instance> = w.instances.iter_mut().collect();
            let mut host = Host::new(&clock, &mut w.channels);
            outs.push(if j == 0 {
                Interp.request(&chain, &mut insts, req.clone(), &rpc, &mut host, scratch)
            } else {
                compiled.request(&mut bufs, &mut insts, req.clone(), &rpc, &mut host, scratch)
            });
        }
        if outs[0] == outs[1] && scratches[0] != scratches[1] {
            return fail(format!(
                "rpc {}: the request handlers left different scratch\n interp: {:?}\n    jit: {:?}",
                i + 1,
                scratches[0],
                scratches[1]
            ));
        }
        if outs[0] != outs[1] {
            return fail(format!(
                "rpc {}: request verdicts differ\n interp: {:?}\n    jit: {:?}\n request: {req:?}",
                i + 1,
                outs[0],
                outs[1]
            ));
        }
        let out = &outs[0];
        if let interp::Verdict::Reject { message, .. } = &out.verdict
            && message.contains("foreach iterations")
        {
            limit_hits += 1;
        }
        rpc.routed = out.routed.clone();
        let (start, resp) = match &out.verdict {
            interp::Verdict::Forward(_) => {
                let mut resp = if e.chance(1, 6) {
                    let code =
                        Code::from_number(1 + e.below(16) as u32).unwrap_or(Code::Unavailable);
                    Message::error(code, "upstream failed")
                } else {
                    Message::response(random_message_bytes(e, &resp_fields))
                };
                random_headers(e, &mut resp);
                (n, resp)
            }
            interp::Verdict::Reply(m) => (out.decided, m.clone()),
            interp::Verdict::Reject { code, message } => {
                (out.decided, Message::error(*code, message.clone()))
            }
        };
        let (trip_out, trip_back) = {
            let w = &mut worlds[2];
            let mut insts: Vec<&mut Instance> = w.instances.iter_mut().collect();
            let mut host = Host::new(&clock, &mut w.channels);
            compiled.round_trip(
                &mut bufs,
                &mut insts,
                Arc::new(req.clone()),
                &request_rpc,
                &mut host,
                &mut RpcScratch::default(),
                || Arc::new(resp.clone()),
            )
        };
        let trip_out = trip_out.unshared();
        if trip_out != outs[0] {
            return fail(format!(
                "rpc {}: round-trip request verdicts differ\n interp: {:?}\n    jit: {:?}\n request: {req:?}",
                i + 1,
                outs[0],
                trip_out
            ));
        }
        if start == 0 {
            if let Some(b) = trip_back {
                return fail(format!(
                    "rpc {}: the round trip ran response handlers: {b:?}",
                    i + 1
                ));
            }
            continue;
        }
        let mut backs = Vec::new();
        for ((j, w), scratch) in worlds.iter_mut().take(2).enumerate().zip(&mut scratches) {
            let mut insts: Vec<&mut Instance> = w.instances.iter_mut().collect();
            let mut host = Host::new(&clock, &mut w.channels);
            backs.push(if j == 0 {
                let resp = resp.clone();
                Interp.response(
                    &chain,
                    &mut insts,
                    start - 1,
                    resp,
                    &rpc,
                    &mut host,
                    scratch,
                )
            } else {
                compiled.response(
                    &mut bufs,
                    &mut insts,
                    start - 1,
                    resp.clone(),
                    &rpc,
                    &mut host,
                    scratch,
                )
            });
        }
        if backs[0] == backs[1] && scratches[0] != scratches[1] {
            return fail(format!(
                "rpc {}: the response handlers left different scratch\n interp: {:?}\n    jit: {:?}",
                i + 1,
                scratches[0],
                scratches[1]
            ));
        }
        if backs[0] != backs[1] {
            return fail(format!(
                "rpc {}: responses differ\n interp: {:?}\n    jit: {:?}\n response in: {resp:?}",
                i + 1,
                backs[0],
                backs[1]
            ));
        }
        if trip_back.as_deref() != Some(&backs[0]) {
            return fail(format!(
                "rpc {}: round-trip responses differ\n interp: {:?}\n    jit: {:?}\n response in: {resp:?}",
                i + 1,
                backs[0],
                trip_back
            ));
        }
    }
    let [a, rest @ ..] = &mut worlds;
    for b in rest {
        if let Err(e) = same_worlds(a, b) {
            return fail(e);
        }
    }
    Ok(Compared {
        skipped: false,
        rpcs,
        elements: n,
        limit_hits,
    })
}

/// Compares a JIT world with the interpreter's after a stream of RPCs: counters, final
/// state and channel records.
fn same_worlds(a: &mut World, b: &mut World) -> Result<(), String> {
    for (x, y) in a.instances.iter_mut().zip(b.instances.iter_mut()) {
        let counters = |i: &Instance| (i.errors, i.iteration_limited, i.malformed);
        if counters(x) != counters(y) {
            return Err(format!(
                "{}: counters (errors, iteration-limited, malformed) differ: \
                 interp {:?}, jit {:?}",
                x.name,
                counters(x),
                counters(y)
            ));
        }
        let (sx, sy) = (x.store.snapshot(), y.store.snapshot());
        if sx != sy {
            return Err(format!(
                "{}: final state differs\n interp: {sx:?}\n    jit: {sy:?}",
                x.name
            ));
        }
    }
    let ra: Vec<_> = a.channels.iter().map(record_key).collect();
    let rb: Vec<_> = b.channels.iter().map(record_key).collect();
    if ra != rb {
        return Err(format!(
            "channel records differ\n interp: {ra:?}\n    jit: {rb:?}"
        ));
    }
    Ok(())
}
