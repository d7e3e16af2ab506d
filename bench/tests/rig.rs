#![allow(clippy::unwrap_used)]
//! The benchmark rig measures what it claims to: over many RPCs, the interpreter, the fused
//! JIT (whose round trip shares one frame between request and response) and the unfused JIT
//! give the same outcomes, channel records, state and counters — on the forwarded path the
//! benchmark times and on the paths where an element rejects or fails.

use weft_bench::{FIVE, HandRig, counters, load_chain, request, response};
use weft_hostcalls::channel::ChannelRecord;
use weft_hostcalls::{Message, Value};
use weft_jit::Fusion;
use weft_jit::rig::{Rig, RunOutcome};

type Records = Vec<(String, String, u64, u64, Value)>;

fn records(rig: &Rig) -> Records {
    records_of(&rig.channels)
}

fn records_of(channels: &[ChannelRecord]) -> Records {
    channels
        .iter()
        .map(|r| {
            (
                r.element.to_string(),
                r.channel.to_string(),
                r.rpc_id,
                r.time.to_bits(),
                r.value.clone(),
            )
        })
        .collect()
}

type Counters = Vec<(Vec<(String, Value)>, u64, u64)>;

fn state(rig: &mut Rig) -> Counters {
    rig.instances
        .iter_mut()
        .map(|i| (i.store.snapshot(), i.errors, i.malformed))
        .collect()
}

/// Runs `n` RPCs through the chain on every executor and compares them run by run.
fn agree(items: &str, n: usize, expect: RunOutcome) {
    let (elements, method) = load_chain(items).unwrap();
    let (req, resp) = (request(&method).unwrap(), response(&method).unwrap());
    let mut rigs: Vec<Rig> = [None, Some(Fusion::Fused), Some(Fusion::Unfused)]
        .into_iter()
        .map(|f| Rig::new(&elements, f, req.clone(), resp.clone()).unwrap())
        .collect();
    for run in 0..n {
        let outcomes: Vec<RunOutcome> = rigs.iter_mut().map(Rig::run).collect();
        assert_eq!(outcomes[0], expect, "{items} run {run}");
        assert!(outcomes.iter().all(|o| *o == outcomes[0]), "{outcomes:?}");
        let recs: Vec<Records> = rigs.iter().map(records).collect();
        assert_eq!(recs[0], recs[1], "fused, {items} run {run}");
        assert_eq!(recs[0], recs[2], "unfused, {items} run {run}");
        let delivered: Vec<Vec<Message>> = rigs
            .iter()
            .map(|r| r.delivered().cloned().collect())
            .collect();
        // Only an answer of the first element leaves no response handler to run.
        let answered_first = outcomes[0] == RunOutcome::Rejected(0);
        assert_eq!(delivered[0].is_empty(), answered_first, "{items} run {run}");
        assert_eq!(delivered[0], delivered[1], "fused, {items} run {run}");
        assert_eq!(delivered[0], delivered[2], "unfused, {items} run {run}");
    }
    let states: Vec<Counters> = rigs.iter_mut().map(state).collect();
    assert_eq!(states[0], states[1], "fused, {items}");
    assert_eq!(states[0], states[2], "unfused, {items}");
}

#[test]
fn the_benchmark_chain_forwards_alike() {
    agree(FIVE, 40, RunOutcome::Forwarded);
}

#[test]
fn a_rejection_midway_runs_the_earlier_response_handlers_alike() {
    // The firewall denies the benchmark's user: ratelimit's `resp` sees the error.
    let items = FIVE.replace("deny: [mallory, eve]", "deny: [mallory, alice]");
    agree(&items, 20, RunOutcome::Rejected(1));
    // Fault rejects last: metrics and logging see the error going up.
    let items = FIVE.replace("prob_pass: 1.0", "prob_pass: 0.0");
    agree(&items, 20, RunOutcome::Rejected(4));
}

#[test]
fn the_first_element_rejecting_runs_no_response_handler() {
    // The firewall, moved first, denies the benchmark's user. (An empty token bucket was the
    // first element once; ratelimit now refuses a capacity below one token at start.)
    let firewall = "\n      - firewall: {field: user, deny: [mallory, eve]}";
    let items = FIVE
        .replace(firewall, "")
        .replace(
            "\n      - ratelimit",
            &format!("{firewall}\n      - ratelimit"),
        )
        .replace("deny: [mallory, eve]", "deny: [alice]");
    assert!(
        items.starts_with("\n      - firewall: {field: user, deny: [alice]}"),
        "{items}"
    );
    agree(&items, 10, RunOutcome::Rejected(0));
}

#[test]
fn counters_agree() {
    agree(&counters(3), 10, RunOutcome::Forwarded);
}

#[test]
fn inputs_made_ahead_run_as_run_does() {
    // The chain-only benchmarks make a batch's inputs before running it; the RPCs must be the
    // ones `run` makes one at a time: same ids, times, records, deliveries and final state.
    let (elements, method) = load_chain(FIVE).unwrap();
    let (req, resp) = (request(&method).unwrap(), response(&method).unwrap());
    for fusion in [None, Some(Fusion::Fused)] {
        let mut one_by_one = Rig::new(&elements, fusion, req.clone(), resp.clone()).unwrap();
        let mut ahead = Rig::new(&elements, fusion, req.clone(), resp.clone()).unwrap();
        let (mut recs, mut delivered) = (Vec::new(), Vec::new());
        for _ in 0..6 {
            assert_eq!(one_by_one.run(), RunOutcome::Forwarded);
            recs.extend(records(&one_by_one));
            delivered.extend(one_by_one.delivered().cloned());
        }
        ahead.drain();
        let inputs: Vec<_> = (0..6).map(|_| ahead.input()).collect();
        for input in inputs {
            assert_eq!(ahead.run_input(input), RunOutcome::Forwarded);
        }
        assert_eq!(records(&ahead), recs, "{fusion:?}");
        assert_eq!(ahead.delivered().cloned().collect::<Vec<_>>(), delivered);
        assert_eq!(state(&mut ahead), state(&mut one_by_one), "{fusion:?}");
        let ids: Vec<u64> = recs.iter().map(|r| r.2).collect();
        assert!(ids.contains(&1) && ids.contains(&6), "ids {ids:?}");
    }
}

#[test]
fn the_hand_written_chain_does_what_the_executors_do() {
    // The benchmarks compare against it, so it must do the same observable work: the same
    // records (names, times, values), the same messages handed on, the same counts.
    let (elements, method) = load_chain(FIVE).unwrap();
    let (req, resp) = (request(&method).unwrap(), response(&method).unwrap());
    let mut rig = Rig::new(&elements, Some(Fusion::Fused), req, resp).unwrap();
    let mut hand = HandRig::new(&method).unwrap();
    for run in 0..20 {
        assert_eq!(rig.run(), RunOutcome::Forwarded, "run {run}");
        assert!(hand.run(), "run {run}");
        let recs = records(&rig);
        assert_eq!(recs.len(), 3, "run {run}: two log records and a latency");
        assert_eq!(recs, records_of(&hand.channels), "run {run}");
        let delivered: Vec<&Message> = rig.delivered().collect();
        assert_eq!(delivered, hand.delivered().collect::<Vec<_>>(), "run {run}");
    }
    let metrics = state(&mut rig)[3].0.clone();
    assert!(
        metrics.contains(&("total".into(), Value::Int(20))),
        "{metrics:?}"
    );
    assert_eq!(hand.chain.metrics.total, 20);
}

#[test]
fn the_hand_written_firewall_answers_malformed_bytes_as_the_executors_do() {
    use std::sync::Arc;
    use weft_bench::{Answer, Cx, HandChain};
    use weft_hostcalls::VirtualClock;
    let (elements, method) = load_chain(FIVE).unwrap();
    let garbled = Message::request(vec![0x0a, 0x7f, b'a']); // field 1, length 127, 1 byte
    let mut rig = Rig::new(
        &elements,
        Some(Fusion::Fused),
        garbled.clone(),
        response(&method).unwrap(),
    )
    .unwrap();
    assert_eq!(rig.run(), RunOutcome::Rejected(1));
    let answer = rig.delivered().last().cloned().unwrap();

    let user = weft_ir::schema::resolve_path(&method.request, "user").unwrap();
    let mut hand = HandChain::new(user, 0.0).unwrap();
    let clock = VirtualClock::new(0.001);
    let mut records = Vec::new();
    let mut cx = Cx {
        clock: &clock,
        channels: &mut records,
        rpc_id: 1,
    };
    let resp = Arc::new(response(&method).unwrap());
    match hand.rpc(&Arc::new(garbled), || resp, &mut cx) {
        Answer::Error(code, message) => {
            assert_eq!(code, answer.code);
            assert_eq!(message, answer.status_message);
            assert!(
                message.starts_with("firewall: malformed message"),
                "{message}"
            );
        }
        Answer::Response(_) => panic!("a malformed request reached the server"),
    }
}
