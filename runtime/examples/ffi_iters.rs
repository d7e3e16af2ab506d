//! Runs N request/response pairs of the echo edge through the C ABI, as the Go binding makes
//! them, for instruction counts (`valgrind --tool=callgrind`) and profiles of the runtime's
//! own path around the compiled chain (docs/benchmarks.md, "Go").
//!
//! `ffi_iters client|server N [cold|evict-only]`: the client side runs logging, ratelimit,
//! firewall and fault; the server side runs metrics, as in `BenchmarkEcho`.

// An example binary: a failed unwrap is a failed run, with its message.
#![allow(clippy::unwrap_used)]

use std::ffi::CString;

use weft_runtime::ffi::{
    WEFT_OBSERVES_REQUEST_MESSAGE, WEFT_OBSERVES_RESPONSE_MESSAGE, WEFT_OK, WEFT_SIDE_CLIENT,
    WEFT_SIDE_SERVER, WeftBuf, WeftCall, weft_close, weft_metadata_keys, weft_open_yaml,
    weft_request, weft_response,
};

const EDGE: &str = "protos: [echo.proto]
edges:
  frontend->echo:
    from: frontend
    to: echo
    method: echo.Echo/Say
    client:
      - logging
    any:
      - ratelimit: {capacity: 1000000000000.0, rate: 1000000000000.0}
      - firewall: {field: user, deny: [mallory]}
      - fault: {prob_pass: 1.0}
    server:
      - metrics
";

fn entry(out: &mut Vec<u8>, k: &str, v: &str) {
    for s in [k, v] {
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let server = match args.next().as_deref() {
        Some("server") => true,
        Some("client") => false,
        _ => panic!("usage: ffi_iters client|server N"),
    };
    let n: u64 = args.next().map_or(1_000_000, |s| s.parse().unwrap());
    // `cold`: before each RPC, write one byte per cache line of a buffer larger than a
    // core's L2, as the Go benchmarks' Cold variants do. Under `valgrind --tool=cachegrind
    // --cache-sim=yes` the misses per RPC, less those of `evict-only`, count the cache lines
    // the library touches: its footprint between two RPCs of a busy process.
    let mode = args.next().unwrap_or_default();
    let (cold, run_calls) = match mode.as_str() {
        "" => (false, true),
        "cold" => (true, true),
        "evict-only" => (true, false),
        other => panic!("unknown mode {other:?}: cold or evict-only"),
    };
    let mut evict = vec![0u8; if cold { 3 << 20 } else { 0 }];
    let yaml = CString::new(EDGE).unwrap();
    let base = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/echo");
    let base = CString::new(base).unwrap();
    let service = if server { c"echo" } else { c"frontend" };
    let side = if server {
        WEFT_SIDE_SERVER
    } else {
        WEFT_SIDE_CLIENT
    };
    // SAFETY: NUL-terminated strings that outlive the call.
    let rt = unsafe { weft_open_yaml(yaml.as_ptr(), base.as_ptr(), service.as_ptr(), 0) };
    assert!(!rt.is_null());
    // What a grpc-go server passes: the keys the chain observes, the stamp among them.
    let mut md = Vec::new();
    if server {
        entry(&mut md, "weft-version", "stamped-by-an-older-client");
    }
    let method = b"/echo.Echo/Say";
    // As the Go server does: pass only the observed keys, and no message the chain cannot
    // observe.
    let (mut keys_version, mut messages) = (0u64, 0u32);
    if server {
        let mut keys = vec![0u8; 256];
        let mut out = WeftBuf::over(&mut keys);
        // SAFETY: a live runtime, a readable method name and valid out-pointers.
        let rc = unsafe {
            weft_metadata_keys(
                rt,
                side,
                method.as_ptr(),
                method.len(),
                &mut out,
                &mut keys_version,
                &mut messages,
            )
        };
        assert_eq!(rc, WEFT_OK);
    }
    let observed = |bit: u32| !server || keys_version == 0 || messages & bit != 0;
    let full_request = b"\n\x05alice\x12\x0bhello, echo\x18\x03\"\x05bench";
    let full_reply = b"\n\x0bhello, echo\x12\x06echo-0";
    let request: &[u8] = if observed(WEFT_OBSERVES_REQUEST_MESSAGE) {
        full_request
    } else {
        &[]
    };
    let reply: &[u8] = if observed(WEFT_OBSERVES_RESPONSE_MESSAGE) {
        full_reply
    } else {
        &[]
    };
    let (mut m, mut meta, mut route) = (vec![0u8; 1024], vec![0u8; 512], vec![0u8; 64]);
    let mut call = WeftCall {
        method: method.as_ptr(),
        method_len: method.len(),
        out_message: WeftBuf::over(&mut m),
        out_metadata: WeftBuf::over(&mut meta),
        route: WeftBuf::over(&mut route),
        metadata_keys_version: keys_version,
        ..WeftCall::default()
    };
    let mut responses = 0u64;
    for _ in 0..n {
        for line in evict.iter_mut().step_by(64) {
            *line = line.wrapping_add(1);
        }
        std::hint::black_box(&mut evict);
        if !run_calls {
            continue;
        }
        call.metadata = md.as_ptr();
        call.metadata_len = md.len();
        call.message = request.as_ptr();
        call.message_len = request.len();
        // SAFETY: a live runtime and a call whose pointers are valid for their lengths.
        assert_eq!(unsafe { weft_request(rt, side, &mut call) }, WEFT_OK);
        if call.rpc != 0 {
            responses += 1;
            call.metadata_len = 0;
            call.message = reply.as_ptr();
            call.message_len = reply.len();
            // SAFETY: as above; `rpc` is the handle the request returned.
            assert_eq!(unsafe { weft_response(rt, side, &mut call) }, WEFT_OK);
        }
    }
    // SAFETY: the runtime is live and no call is in flight.
    unsafe { weft_close(rt) };
    println!("{n} requests, {responses} responses");
}
