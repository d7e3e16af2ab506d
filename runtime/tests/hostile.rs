//! What a hostile client can send through the C ABI when it is not limited to the small
//! inputs the fuzzers try: messages nested far deeper than any schema means, messages of
//! gRPC's full 4 MiB made of tiny records, and metadata with many entries. Each must be
//! answered (forwarded, or refused with a status and a counter) in time linear in its size,
//! without recursing per level of nesting: a stack overflow aborts the whole process.
//!
//! `protos/deep.proto` is the schema: `deep.Node` nests itself, singly and in a list.
// Drives the library through its C ABI, as a binding does.
#![allow(unsafe_code)]
// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weft_runtime::ffi::{
    WEFT_E_BUFFER, WEFT_OK, WEFT_SIDE_CLIENT, WEFT_SIDE_SERVER, WEFT_VERDICT_FORWARD,
    WEFT_VERDICT_REJECT, WeftBuf, WeftCall, WeftCounters, WeftRuntime, weft_call_output,
    weft_close, weft_counters, weft_open_yaml, weft_records, weft_request,
};
use weft_runtime::records::{Decoded, decode};

const METHOD: &[u8] = b"/deep.Deep/Call";
/// gRPC's default limit on a received message.
const GRPC_MAX: usize = 4 << 20;

fn protos() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/protos")
}

/// One edge `front->deep` over `deep.Deep/Call`, with `client` and `server` as YAML list
/// items.
fn config(client: &[&str], server: &[&str]) -> String {
    common::one_edge(
        "deep.proto",
        ("front", "deep"),
        "deep.Deep/Call",
        client,
        server,
    )
}

struct Runtime(*mut WeftRuntime);

impl Drop for Runtime {
    fn drop(&mut self) {
        // SAFETY: a live runtime with no call in flight (tests call from one thread).
        unsafe { weft_close(self.0) };
    }
}

fn open(service: &str, client: &[&str], server: &[&str], records: u32) -> Runtime {
    let yaml = CString::new(config(client, server)).unwrap();
    let dir = CString::new(protos().to_str().unwrap()).unwrap();
    let service = CString::new(service).unwrap();
    // SAFETY: NUL-terminated strings that outlive the call.
    let rt = unsafe { weft_open_yaml(yaml.as_ptr(), dir.as_ptr(), service.as_ptr(), records) };
    assert!(!rt.is_null(), "the config loads");
    Runtime(rt)
}

#[derive(Debug)]
struct Answer {
    verdict: i32,
    code: i32,
    /// The out message when the chain changed it (the status text of a rejection).
    message: Option<Vec<u8>>,
    metadata: Option<Vec<u8>>,
}

/// `weft_request` on `side`, growing the output buffers once if they were too small.
fn request(rt: &Runtime, side: i32, md: &[u8], msg: &[u8]) -> Answer {
    let (mut m, mut meta, mut route) = (vec![0u8; 4096], vec![0u8; 4096], vec![0u8; 256]);
    let mut call = WeftCall {
        method: METHOD.as_ptr(),
        method_len: METHOD.len(),
        metadata: md.as_ptr(),
        metadata_len: md.len(),
        message: msg.as_ptr(),
        message_len: msg.len(),
        out_message: WeftBuf::over(&mut m),
        out_metadata: WeftBuf::over(&mut meta),
        route: WeftBuf::over(&mut route),
        ..WeftCall::default()
    };
    // SAFETY: a live runtime; the call's pointers are valid for their lengths.
    let mut rc = unsafe { weft_request(rt.0, side, &mut call) };
    if rc == WEFT_E_BUFFER {
        m = vec![0u8; call.out_message.len];
        meta = vec![0u8; call.out_metadata.len];
        route = vec![0u8; call.route.len];
        call.out_message = WeftBuf::over(&mut m);
        call.out_metadata = WeftBuf::over(&mut meta);
        call.route = WeftBuf::over(&mut route);
        // SAFETY: the same call, with bigger buffers.
        rc = unsafe { weft_call_output(rt.0, &mut call) };
    }
    assert_eq!(rc, WEFT_OK, "{}", last_error());
    Answer {
        verdict: call.verdict,
        code: call.code,
        message: (call.message_changed == 1).then(|| m[..call.out_message.len].to_vec()),
        metadata: (call.metadata_changed == 1).then(|| meta[..call.out_metadata.len].to_vec()),
    }
}

fn last_error() -> String {
    // SAFETY: valid until this thread's next call into Weft; copied before it.
    unsafe { std::ffi::CStr::from_ptr(weft_runtime::ffi::weft_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn counters(rt: &Runtime) -> WeftCounters {
    let mut c = WeftCounters::default();
    // SAFETY: a live runtime and a writable struct.
    assert_eq!(unsafe { weft_counters(rt.0, &mut c) }, WEFT_OK);
    c
}

/// Every queued channel record, decoded.
fn records(rt: &Runtime) -> Vec<Decoded> {
    let mut all = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let mut out = WeftBuf::over(&mut buf);
        // SAFETY: a live runtime and a buffer writable for its capacity.
        let rc = unsafe { weft_records(rt.0, &mut out, std::ptr::null_mut()) };
        if rc == WEFT_E_BUFFER {
            buf = vec![0u8; out.len];
            continue;
        }
        assert_eq!(rc, WEFT_OK, "{}", last_error());
        if out.len == 0 {
            return all;
        }
        let mut rest = &buf[..out.len];
        while !rest.is_empty() {
            let (record, after) = decode(rest).expect("whole records");
            all.push(record);
            rest = after;
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: usize) -> usize {
    let mut out = Vec::new();
    put_varint(&mut out, v as u64);
    out.len()
}

/// `inner` wrapped in `depth` length-delimited records of field key `key`, outermost first:
/// built in one pass (wrapping level by level would copy the message `depth` times).
fn nested(key: u8, depth: usize, inner: &[u8]) -> Vec<u8> {
    let mut lens = Vec::with_capacity(depth);
    let mut len = inner.len();
    for _ in 0..depth {
        lens.push(len);
        len += 1 + varint_len(len);
    }
    let mut out = Vec::with_capacity(len);
    for l in lens.iter().rev() {
        out.push(key);
        put_varint(&mut out, *l as u64);
    }
    out.extend_from_slice(inner);
    out
}

/// `Node.child` (field 1) and `Node.kids` (field 3).
const CHILD: u8 = 0x0a;
const KIDS: u8 = 0x1a;
/// `user: "alice"`.
const ALICE: &[u8] = &[0x12, 0x05, b'a', b'l', b'i', b'c', b'e'];

const FIREWALL: &str = "firewall: {field: user, deny: [mallory]}";

/// The whole-message check refuses nesting past prost's limit of 100 with
/// INVALID_ARGUMENT and counts it; shallower messages go on, and their records render
/// whole. A million levels (3 MiB) is refused as fast as a hundred and one.
#[test]
fn nesting_past_the_limit_is_refused_and_counted_without_recursing_per_level() {
    let rt = open("front", &["logging", FIREWALL], &[], 1024);
    let mut refused = 0;
    for key in [CHILD, KIDS] {
        for depth in [1, 63, 64, 65, 99, 100, 101, 1_000, 100_000, 1_000_000] {
            let msg = nested(key, depth, ALICE);
            let started = Instant::now();
            let a = request(&rt, WEFT_SIDE_CLIENT, &[], &msg);
            let took = started.elapsed();
            eprintln!(
                "key {key:#x} depth {depth}: {} bytes, verdict {}, {took:?}",
                msg.len(),
                a.verdict
            );
            if depth <= 100 {
                assert_eq!(a.verdict, WEFT_VERDICT_FORWARD, "depth {depth}");
            } else {
                refused += 1;
                assert_eq!(a.verdict, WEFT_VERDICT_REJECT, "depth {depth}");
                assert_eq!(a.code, 3, "INVALID_ARGUMENT at depth {depth}");
                let text = String::from_utf8(a.message.unwrap()).unwrap();
                assert!(text.contains("nests more than 100"), "{text}");
            }
            assert_eq!(counters(&rt).malformed, refused);
        }
    }
    // Each forwarded request is logged, its message rendered: none lost to a renderer with
    // a lower limit than the check's. (The JSON nests deeper than serde_json parses by
    // default, so it is read as text.)
    let logged = record_values(&rt);
    assert_eq!(logged.len(), 2 * 6);
    for value in &logged {
        assert!(
            value.contains(",\"message\":{") && value.matches("\"user\":\"alice\"").count() == 1,
            "a message the check accepted is logged whole: {value}"
        );
    }
}

/// The values (JSON text) of every queued channel record, unparsed.
fn record_values(rt: &Runtime) -> Vec<String> {
    let mut buf = vec![0u8; 16 << 20];
    let mut values = Vec::new();
    let text = |rest: &mut &[u8]| {
        let n = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
        let t = String::from_utf8(rest[4..4 + n].to_vec()).unwrap();
        *rest = &rest[4 + n..];
        t
    };
    // A few records of 4 MiB messages fill the buffer: collect until none is left.
    loop {
        let mut out = WeftBuf::over(&mut buf);
        // SAFETY: a live runtime and a buffer writable for its capacity.
        assert_eq!(
            unsafe { weft_records(rt.0, &mut out, std::ptr::null_mut()) },
            WEFT_OK
        );
        if out.len == 0 {
            return values;
        }
        let mut rest = &buf[..out.len];
        while !rest.is_empty() {
            text(&mut rest);
            text(&mut rest);
            rest = &rest[16..];
            values.push(text(&mut rest));
        }
    }
}

/// The shapes of a message of about `size` bytes that make a small input expensive: the
/// name and the bytes.
fn shapes(size: usize) -> Vec<(&'static str, Vec<u8>)> {
    let repeat = |record: &[u8]| record.repeat(size / record.len());
    let mut blob = vec![0x22];
    put_varint(&mut blob, size as u64);
    blob.extend(std::iter::repeat_n(0x01u8, size));
    let mut packed = vec![0x2a];
    put_varint(&mut packed, size as u64);
    packed.extend(std::iter::repeat_n(0x7fu8, size));
    let mut labels = Vec::new();
    for i in 0..size / 10 {
        labels.extend_from_slice(&[0x32, 0x08, 0x0a, 0x04]);
        labels.extend_from_slice(&(i as u32).to_le_bytes().map(|b| b'a' + (b & 15)));
        labels.extend_from_slice(&[0x12, 0x00]);
    }
    // A control character: six bytes of JSON each.
    let mut controls = vec![0x12];
    put_varint(&mut controls, size as u64);
    controls.extend(std::iter::repeat_n(0x01u8, size));
    vec![
        ("bytes field", blob),
        ("string of control characters", controls),
        ("empty tags", repeat(&[0x3a, 0x00])),
        ("repeated user", repeat(&[0x12, 0x00])),
        ("packed nums", packed),
        ("unknown fields", repeat(&[0xa0, 0x06, 0x00])),
        ("map entries", labels),
        ("alternating oneof", repeat(&[0x40, 0x00, 0x4a, 0x00])),
        ("empty kids", repeat(&[0x1a, 0x00])),
    ]
}

/// Time per RPC, and per channel record collected, for each shape from 1 KiB to 4 MiB:
/// `cargo test -p weft-runtime --release --test hostile -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: prints a table"]
fn time_per_rpc_grows_linearly_with_the_message() {
    let rt = open(
        "front",
        &["logging", FIREWALL, "mutation: {field: user}"],
        &[],
        16,
    );
    for size in [1 << 10, 16 << 10, 256 << 10, 1 << 20, GRPC_MAX] {
        for (name, msg) in shapes(size) {
            let runs = (4 << 20) / size.max(1 << 18);
            let started = Instant::now();
            let mut answer = None;
            for _ in 0..runs {
                answer = Some(request(&rt, WEFT_SIDE_CLIENT, &[], &msg));
            }
            let rpc = started.elapsed() / runs as u32;
            let started = Instant::now();
            let logged = records(&rt);
            let render = started.elapsed() / logged.len().max(1) as u32;
            let json: usize = logged
                .iter()
                .map(|r| r.value.to_string().len())
                .sum::<usize>()
                / logged.len().max(1);
            eprintln!(
                "{size:>8} B {name:<30} rpc {rpc:>10.1?} ({:>5.1} ns/B)  record {render:>10.1?} ({:>5.1} ns/B, {json} B JSON)  verdict {}",
                rpc.as_nanos() as f64 / msg.len() as f64,
                render.as_nanos() as f64 / msg.len() as f64,
                answer.unwrap().verdict,
            );
        }
    }
}

/// Metadata of `n` keys, each with two values (grpc-go groups a key's values, and a server
/// accepts 16 MiB of headers by default).
fn repeated_keys(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        let key = format!("x-k{i}");
        for value in ["a", "b"] {
            for item in [key.as_bytes(), value.as_bytes()] {
                out.extend_from_slice(&(item.len() as u32).to_le_bytes());
                out.extend_from_slice(item);
            }
        }
    }
    out
}

/// Time per request with many repeated header keys, on a server whose chain sees every key
/// (`logging` sends the whole RPC) and a client's, which writes the stamp back.
#[test]
#[ignore = "a measurement: prints a table"]
fn time_per_rpc_grows_linearly_with_the_metadata() {
    let server = open("deep", &[], &["logging"], 0);
    let client = open("front", &["logging"], &[], 0);
    for n in [1 << 10, 4 << 10, 16 << 10, 64 << 10] {
        let md = repeated_keys(n);
        for (name, rt, side) in [
            ("server", &server, WEFT_SIDE_SERVER),
            ("client", &client, WEFT_SIDE_CLIENT),
        ] {
            let started = Instant::now();
            let a = request(rt, side, &md, ALICE);
            eprintln!(
                "{n:>6} keys x2 ({:>8} B) {name}: {:?}, verdict {}",
                md.len(),
                started.elapsed(),
                a.verdict
            );
        }
    }
}

/// The entries of a metadata encoding, in order.
fn entries(mut bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    fn take(bytes: &mut &[u8]) -> Vec<u8> {
        let n = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        let item = bytes[4..4 + n].to_vec();
        *bytes = &bytes[4 + n..];
        item
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = String::from_utf8(take(&mut bytes)).unwrap();
        out.push((key, take(&mut bytes)));
    }
    out
}

/// Each repeated key was looked up in a list of the repeated keys seen so far, while the
/// metadata was decoded and again for each entry written back: quadratic in the number of
/// such keys. 40 000 of them (1 MiB of headers; grpc-go accepts 16 MiB) took seconds per
/// request. Every value still comes back.
///
/// Timed as a ratio, four times the keys against a quarter of them (about 4x when linear,
/// 16x as it was), each the shortest of three runs: an absolute limit failed whenever the
/// machine was busy.
#[test]
fn many_repeated_header_keys_cost_linear_time() {
    let n = 40_000;
    let (quarter, md) = (repeated_keys(n / 4), repeated_keys(n));
    let server = open("deep", &[], &["logging"], 0);
    let client = open("front", &["logging"], &[], 0);
    for (rt, side) in [(&server, WEFT_SIDE_SERVER), (&client, WEFT_SIDE_CLIENT)] {
        let time = |md: &[u8]| {
            shortest_of_three(|| {
                assert_eq!(request(rt, side, md, ALICE).verdict, WEFT_VERDICT_FORWARD)
            })
        };
        let (short, long) = (time(&quarter), time(&md));
        assert!(
            long < short * 8,
            "side {side}: {n} repeated keys took {long:?}, a quarter of them {short:?}"
        );
        let a = request(rt, side, &md, ALICE);
        assert_eq!(a.verdict, WEFT_VERDICT_FORWARD);
        if let Some(out) = a.metadata {
            let mut out = entries(&out);
            out.retain(|(k, _)| k != "weft-version");
            // A key's values keep their order; keys may come back in another.
            let mut sent = entries(&md);
            sent.sort_by(|a, b| a.0.cmp(&b.0));
            out.sort_by(|a, b| a.0.cmp(&b.0));
            assert!(out == sent, "every value comes back, each key's in order");
        }
    }
}

/// The shortest of three runs of `f`: the one the rest of the machine disturbed least.
fn shortest_of_three(mut f: impl FnMut()) -> Duration {
    (0..3)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .min()
        .unwrap_or_default()
}

/// A record keeps its message until it is collected, and a queue counted only records:
/// with the Go binding's 16 384, clients sending 4 MiB messages faster than the collector
/// renders them (up to a quarter of a second each) could make it hold 64 GiB. The queue
/// holds at most 64 MiB of messages; the rest are dropped and counted, as when it is full.
#[test]
fn queued_records_hold_a_bounded_number_of_bytes() {
    let rt = open("front", &["logging"], &[], 16_384);
    let mut msg = vec![0x22];
    put_varint(&mut msg, (GRPC_MAX - 8) as u64);
    msg.resize(GRPC_MAX, 0x01);
    for _ in 0..24 {
        assert_eq!(
            request(&rt, WEFT_SIDE_CLIENT, &[], &msg).verdict,
            WEFT_VERDICT_FORWARD
        );
    }
    let mut dropped = 0;
    let mut out = WeftBuf::default();
    // SAFETY: a live runtime; an empty buffer only learns the size of the first record.
    let rc = unsafe { weft_records(rt.0, &mut out, &mut dropped) };
    assert_eq!(rc, WEFT_E_BUFFER);
    assert_eq!(
        dropped,
        24 - 15,
        "15 messages of 4 MiB and their headers fit in 64 MiB"
    );
    let values = record_values(&rt);
    assert_eq!(values.len(), 15);
    // Collecting frees their room.
    request(&rt, WEFT_SIDE_CLIENT, &[], &msg);
    assert_eq!(record_values(&rt).len(), 1);
}

/// Lengths at the edges of the integer types: in a message (a varint), they are refused
/// against the bytes present, never allocated or added without a check; in the metadata
/// encoding (a u32) likewise.
#[test]
fn lengths_near_the_integer_limits_are_refused_not_trusted() {
    let rt = open("front", &[FIREWALL], &[], 0);
    let mut malformed = 0;
    for len in [
        u64::MAX,
        1 << 63,
        u64::from(u32::MAX),
        usize::MAX as u64 - 1,
        (GRPC_MAX as u64) + 1,
        5,
    ] {
        // `user`, then `nums` packed, each claiming `len` bytes with four present.
        for key in [0x12, 0x2a] {
            let mut msg = vec![key];
            put_varint(&mut msg, len);
            msg.extend_from_slice(b"abcd");
            let a = request(&rt, WEFT_SIDE_CLIENT, &[], &msg);
            malformed += 1;
            assert_eq!((a.verdict, a.code), (WEFT_VERDICT_REJECT, 3), "{msg:?}");
            let text = String::from_utf8(a.message.unwrap()).unwrap();
            assert!(text.contains("truncated"), "{text}");
            assert_eq!(counters(&rt).malformed, malformed);
        }
    }
    // A varint of eleven bytes.
    let mut msg = vec![0x28];
    msg.extend([0xff; 10]);
    msg.push(0x01);
    let a = request(&rt, WEFT_SIDE_CLIENT, &[], &msg);
    assert_eq!((a.verdict, a.code), (WEFT_VERDICT_REJECT, 3));
    // Metadata entries whose lengths run past the buffer, up to u32::MAX.
    for len in [u32::MAX, u32::MAX - 3, 1 << 31, 5] {
        for at in [0, 1] {
            let mut md = Vec::new();
            for i in 0..2 {
                let n = if i == at { len } else { 1 };
                md.extend_from_slice(&n.to_le_bytes());
                md.extend_from_slice(b"k");
            }
            let mut out = WeftCall {
                method: METHOD.as_ptr(),
                method_len: METHOD.len(),
                metadata: md.as_ptr(),
                metadata_len: md.len(),
                message: ALICE.as_ptr(),
                message_len: ALICE.len(),
                ..WeftCall::default()
            };
            // SAFETY: a live runtime; the call's pointers are valid for their lengths.
            let rc = unsafe { weft_request(rt.0, WEFT_SIDE_CLIENT, &mut out) };
            assert_eq!(rc, weft_runtime::ffi::WEFT_E_ARGUMENT, "{md:?}");
            assert!(
                last_error().contains("runs past the end"),
                "{}",
                last_error()
            );
        }
    }
    assert_eq!(counters(&rt).element_errors, 0);
}
