//! The C ABI from several threads at once, as a Go server calls it: RPCs through a client and
//! a server runtime on three threads (every other one deferred to `weft_server_exchange`)
//! while a fourth reloads both, collects their channel records, reads their counters and
//! polls the version word. Its assertions catch lost, unanswered or failed RPCs and lost
//! records; `make sanitize` runs it under ThreadSanitizer, which is what catches a data race
//! in the handle slabs, the kept outputs, the record queue or the version swap
//! (docs/sanitizers.md).
// Drives the library through its C ABI, as a binding does.
#![allow(unsafe_code)]
// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::{echo_edge, examples, two_strings};
use weft_runtime::engine::split_stamp;
use weft_runtime::ffi::{
    WEFT_DEFERRABLE_REQUEST, WEFT_E_BUFFER, WEFT_E_METADATA, WEFT_OK, WEFT_SIDE_CLIENT,
    WEFT_SIDE_SERVER, WEFT_VERDICT_FORWARD, WeftBuf, WeftCall, WeftCounters, WeftRuntime,
    weft_call_output, weft_close, weft_counters, weft_open_yaml, weft_records, weft_reload_yaml,
    weft_request, weft_response, weft_rpcs_waiting, weft_server_exchange, weft_version,
    weft_version_word,
};

const WORKERS: usize = 3;
const RPCS_PER_WORKER: usize = 150;
const RELOADS: usize = 12;

/// A runtime shared by the test's threads.
#[derive(Clone, Copy)]
struct Shared(*mut WeftRuntime);
// SAFETY: a `WeftRuntime` is thread-safe (weft.h); the pointer stays live until the threads
// are joined and `weft_close` runs.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

/// The config of `round`: the rate limiter's capacity changes every round, so each reload
/// installs a new version whose state is taken over from the last.
fn config(round: usize) -> CString {
    let capacity = 100_000 + round;
    CString::new(echo_edge(
        &[
            "logging",
            &format!("ratelimit: {{capacity: {capacity}, rate: 100000}}"),
            "firewall: {field: user, deny: [mallory]}",
        ],
        // Its request path only notes the time, so it can wait for the response.
        &["metrics"],
    ))
    .unwrap()
}

fn open(service: &str) -> Shared {
    let (yaml, dir, service) = (
        config(0),
        CString::new(examples().join("echo").to_str().unwrap()).unwrap(),
        CString::new(service).unwrap(),
    );
    // SAFETY: NUL-terminated strings.
    let rt = unsafe { weft_open_yaml(yaml.as_ptr(), dir.as_ptr(), service.as_ptr(), 16) };
    assert!(!rt.is_null(), "opening {service:?}");
    Shared(rt)
}

/// One direction of one RPC through `rt`. Every seventh call offers no room for its
/// outputs, so it takes the `WEFT_E_BUFFER` path and collects them with `weft_call_output`.
/// Returns the out metadata and the rpc handle.
fn pass(
    rt: Shared,
    side: i32,
    rpc: Option<u64>,
    metadata: &[u8],
    message: &[u8],
    nth: usize,
) -> (Vec<u8>, u64) {
    let method = b"/echo.Echo/Say";
    let (mut m, mut meta, mut route) = (vec![0u8; 512], vec![0u8; 512], vec![0u8; 64]);
    let tight = nth.is_multiple_of(7);
    let mut call = WeftCall {
        method: method.as_ptr(),
        method_len: method.len(),
        metadata: metadata.as_ptr(),
        metadata_len: metadata.len(),
        message: message.as_ptr(),
        message_len: message.len(),
        rpc: rpc.unwrap_or(0),
        out_message: WeftBuf::over(&mut m),
        out_metadata: WeftBuf::over(if tight { &mut meta[..1] } else { &mut meta }),
        route: WeftBuf::over(&mut route),
        ..WeftCall::default()
    };
    // SAFETY: a live runtime; the call's pointers are valid for their lengths and its
    // buffers outlive the calls.
    let mut code = unsafe {
        match rpc {
            None => weft_request(rt.0, side, &mut call),
            Some(_) => weft_response(rt.0, side, &mut call),
        }
    };
    if code == WEFT_E_BUFFER {
        assert!(tight, "WEFT_E_BUFFER with room for every output");
        call.out_metadata = WeftBuf::over(&mut meta);
        // SAFETY: as above, the same call.
        code = unsafe { weft_call_output(rt.0, &mut call) };
    }
    assert_eq!(code, WEFT_OK, "side {side}, rpc {rpc:?}, call {nth}");
    assert_eq!(
        call.verdict, WEFT_VERDICT_FORWARD,
        "side {side}, call {nth}"
    );
    let metadata = if call.metadata_changed == 1 {
        meta[..call.out_metadata.len].to_vec()
    } else {
        metadata.to_vec()
    };
    (metadata, call.rpc)
}

/// The value of `key` in encoded metadata.
fn value_of<'a>(mut md: &'a [u8], key: &str) -> Option<&'a [u8]> {
    let field = |md: &mut &'a [u8]| {
        let len = u32::from_le_bytes(md[..4].try_into().unwrap()) as usize;
        let (value, rest) = md[4..].split_at(len);
        *md = rest;
        value
    };
    while !md.is_empty() {
        let (k, v) = (field(&mut md), field(&mut md));
        if k == key.as_bytes() {
            return Some(v);
        }
    }
    None
}

/// The server's side of an RPC in one call, as the Go binding makes it when the server's
/// request path can wait: `false` when it cannot (any more: a reload since the keys were
/// read), and the RPC must take the two calls.
fn exchange(rt: Shared, request_metadata: &[u8], reply: &[u8]) -> bool {
    let method = b"/echo.Echo/Say";
    let (version, messages, stamp) = common::echo_server_keys(rt.0);
    let stamped = value_of(request_metadata, "weft-version").unwrap();
    // A stamp names the version whose digest it starts with, before the caller's `/service`.
    let names_version =
        std::str::from_utf8(stamped).is_ok_and(|s| split_stamp(s).0.as_bytes() == stamp.as_slice());
    if messages & WEFT_DEFERRABLE_REQUEST == 0 || !names_version {
        return false;
    }
    let (mut m, mut meta, mut route) = (vec![0u8; 512], vec![0u8; 512], vec![0u8; 64]);
    let mut call = WeftCall {
        method: method.as_ptr(),
        method_len: method.len(),
        metadata: request_metadata.as_ptr(),
        metadata_len: request_metadata.len(),
        message: reply.as_ptr(),
        message_len: reply.len(),
        metadata_keys_version: version,
        out_message: WeftBuf::over(&mut m),
        out_metadata: WeftBuf::over(&mut meta),
        route: WeftBuf::over(&mut route),
        ..WeftCall::default()
    };
    // SAFETY: a live runtime; the call's pointers are valid for their lengths, the stamp
    // for its own.
    let code =
        unsafe { weft_server_exchange(rt.0, &mut call, stamped.as_ptr(), stamped.len(), 1000) };
    if code == WEFT_E_METADATA {
        return false;
    }
    assert_eq!(code, WEFT_OK);
    assert_eq!(call.verdict, WEFT_VERDICT_FORWARD);
    true
}

/// Whole records in `bytes` (the framing of docs/c-abi.md, "Channel records").
fn count_records(mut bytes: &[u8]) -> u64 {
    fn take<'a>(len: usize, bytes: &mut &'a [u8]) -> &'a [u8] {
        let (head, rest) = bytes.split_at(len);
        *bytes = rest;
        head
    }
    let mut n = 0;
    while !bytes.is_empty() {
        for field in 0..3 {
            let len = u32::from_le_bytes(take(4, &mut bytes).try_into().unwrap()) as usize;
            take(len, &mut bytes);
            if field == 1 {
                take(16, &mut bytes); // the RPC's number and the time
            }
        }
        n += 1;
    }
    n
}

/// Collects `rt`'s queued records; returns (records taken, dropped so far).
fn collect(rt: Shared) -> (u64, u64) {
    let mut bytes = vec![0u8; 64 * 1024];
    let mut out = WeftBuf::over(&mut bytes);
    let mut dropped = 0;
    // SAFETY: a live runtime, a buffer writable for its capacity, a writable count.
    let code = unsafe { weft_records(rt.0, &mut out, &mut dropped) };
    assert_eq!(code, WEFT_OK);
    (count_records(&bytes[..out.len]), dropped)
}

#[test]
fn rpcs_reloads_and_collections_on_many_threads() {
    let (client, server) = (open("frontend"), open("echo"));
    // SAFETY: live runtimes; each word stays valid for the process (weft.h), and it is an
    // `AtomicU64` inside, which is how a binding reads it.
    let words: [&AtomicU64; 2] =
        unsafe { [client, server].map(|rt| &*weft_version_word(rt.0).cast::<AtomicU64>()) };
    let finished = AtomicBool::new(false);
    let collected = AtomicU64::new(0);
    let exchanged = AtomicU64::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let exchanged = &exchanged;
                s.spawn(move || {
                    for i in 0..RPCS_PER_WORKER {
                        let nth = w * RPCS_PER_WORKER + i;
                        let request = two_strings(&format!("user{w}"), &format!("hi {i}"));
                        let (md, client_rpc) =
                            pass(client, WEFT_SIDE_CLIENT, None, &[], &request, nth);
                        let reply = two_strings(&format!("hi {i}"), "echo");
                        if !i.is_multiple_of(2) && exchange(server, &md, &reply) {
                            exchanged.fetch_add(1, Ordering::Relaxed);
                        } else {
                            let (_, server_rpc) =
                                pass(server, WEFT_SIDE_SERVER, None, &md, &request, nth);
                            if server_rpc != 0 {
                                pass(server, WEFT_SIDE_SERVER, Some(server_rpc), &[], &reply, nth);
                            }
                        }
                        if client_rpc != 0 {
                            pass(client, WEFT_SIDE_CLIENT, Some(client_rpc), &[], &reply, nth);
                        }
                    }
                })
            })
            .collect();
        let control = s.spawn(|| {
            let dir = CString::new(examples().join("echo").to_str().unwrap()).unwrap();
            let mut round = 0;
            while !finished.load(Ordering::Acquire) || round < RELOADS {
                if round < RELOADS {
                    round += 1;
                    let yaml = config(round);
                    for rt in [client, server] {
                        // SAFETY: a live runtime and NUL-terminated strings.
                        let code = unsafe { weft_reload_yaml(rt.0, yaml.as_ptr(), dir.as_ptr()) };
                        assert_eq!(code, WEFT_OK, "reload {round}");
                    }
                }
                for (rt, word) in [client, server].into_iter().zip(words) {
                    collected.fetch_add(collect(rt).0, Ordering::Relaxed);
                    let mut counters = WeftCounters::default();
                    // SAFETY: a live runtime and a writable struct.
                    assert_eq!(unsafe { weft_counters(rt.0, &mut counters) }, WEFT_OK);
                    assert_eq!(counters.malformed + counters.element_errors, 0);
                    let seen = word.load(Ordering::Acquire);
                    assert!((1..=RELOADS as u64 + 1).contains(&seen), "version {seen}");
                }
            }
        });
        for w in workers {
            w.join().unwrap();
        }
        finished.store(true, Ordering::Release);
        control.join().unwrap();
    });
    for (rt, word) in [client, server].into_iter().zip(words) {
        // SAFETY: a live runtime; no other thread uses it any more.
        let (waiting, version) = unsafe { (weft_rpcs_waiting(rt.0), weft_version(rt.0)) };
        assert_eq!(waiting, 0, "every RPC was answered");
        assert_eq!(version, RELOADS as u64 + 1, "every reload installed");
        assert_eq!(word.load(Ordering::Acquire), version);
        collected.fetch_add(collect(rt).0, Ordering::Relaxed);
    }
    assert!(
        exchanged.load(Ordering::Relaxed) > 0,
        "no server call was deferred to an exchange"
    );
    // logging records each request and response on the client; metrics a latency per RPC on
    // the server. The queues hold 16 each, so most are dropped, and counted.
    let (_, dropped_client) = collect(client);
    let (_, dropped_server) = collect(server);
    let total = (WORKERS * RPCS_PER_WORKER * 3) as u64;
    assert_eq!(
        collected.load(Ordering::Relaxed) + dropped_client + dropped_server,
        total,
        "each record collected or counted as dropped"
    );
    // SAFETY: live runtimes, closed once, no call running on them.
    unsafe {
        weft_close(client.0);
        weft_close(server.0);
    }
}
