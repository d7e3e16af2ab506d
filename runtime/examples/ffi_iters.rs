//! Runs N request/response pairs of the echo edge through the C ABI, as the Go binding makes
//! them, for instruction counts (`valgrind --tool=callgrind`) and profiles of the runtime's
//! own path around the compiled chain (docs/benchmarks.md, "Go").
//!
//! `ffi_iters client|server|exchange|both|no-edge N [cold|evict-only]`: the client side runs
//! logging, ratelimit, firewall and fault; the server side runs metrics, as in
//! `BenchmarkEcho`. `server` makes the request and the response call; `exchange` defers the
//! request path to the response's call (`weft_server_exchange`), as the Go server does for
//! a request stamped with its version. `no-edge` is a client call of a service that has no
//! edge for the method (echo's): the library answers `WEFT_E_NO_EDGE`, the cost of Weft on
//! a call it has no policy for.
//! `both` runs a client and a server runtime in one process and one thread, each RPC's
//! client call then its server calls, as the echo benchmark's process does (and any service
//! that calls others while it serves): its count against the sum of `client` and `server`
//! shows what the two runtimes cost each other.
// Drives the library through its C ABI, as a binding does.
#![allow(unsafe_code)]
// An example binary: a failed unwrap is a failed run, with its message.
#![allow(clippy::unwrap_used)]

use std::ffi::CString;

use weft_runtime::ffi::{
    WEFT_DEFERRABLE_REQUEST, WEFT_E_NO_EDGE, WEFT_OBSERVES_REQUEST_MESSAGE,
    WEFT_OBSERVES_RESPONSE_MESSAGE, WEFT_OK, WEFT_SIDE_CLIENT, WEFT_SIDE_SERVER, WEFT_STAMP_LEN,
    WeftBuf, WeftCall, weft_close, weft_metadata_keys, weft_open_yaml, weft_request, weft_response,
    weft_server_exchange,
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

/// One side's runtime and the call it makes, set up as the Go binding sets them up.
struct Side {
    rt: *mut weft_runtime::ffi::WeftRuntime,
    side: i32,
    md: Vec<u8>,
    request: &'static [u8],
    reply: &'static [u8],
    call: WeftCall,
    /// The version's stamp, when the request path is deferred to the response's call.
    deferred: Option<[u8; WEFT_STAMP_LEN]>,
    /// What the request call returns: `WEFT_E_NO_EDGE` for a service without the edge.
    request_rc: i32,
    // The buffers `call` points into.
    _bufs: (Vec<u8>, Vec<u8>, Vec<u8>),
}

const METHOD: &[u8] = b"/echo.Echo/Say";
const FULL_REQUEST: &[u8] = b"\n\x05alice\x12\x0bhello, echo\x18\x03\"\x05bench";
const FULL_REPLY: &[u8] = b"\n\x0bhello, echo\x12\x06echo-0";

impl Side {
    fn open((server, defer, no_edge): (bool, bool, bool)) -> Side {
        let yaml = CString::new(EDGE).unwrap();
        let base = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/echo");
        let base = CString::new(base).unwrap();
        let service = if server || no_edge {
            c"echo"
        } else {
            c"frontend"
        };
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
        // As the Go server does: pass only the observed keys, and no message the chain
        // cannot observe.
        let (mut keys_version, mut messages) = (0u64, 0u32);
        let mut stamp = [0u8; WEFT_STAMP_LEN];
        if server {
            let mut keys = vec![0u8; 256];
            let mut out = WeftBuf::over(&mut keys);
            // SAFETY: a live runtime, a readable method name and valid out-pointers.
            let rc = unsafe {
                weft_metadata_keys(
                    rt,
                    side,
                    METHOD.as_ptr(),
                    METHOD.len(),
                    &mut out,
                    &mut keys_version,
                    &mut messages,
                    stamp.as_mut_ptr(),
                )
            };
            assert_eq!(rc, WEFT_OK);
        }
        let deferred = defer.then(|| {
            assert_ne!(
                messages & WEFT_DEFERRABLE_REQUEST,
                0,
                "metrics' request path waits"
            );
            stamp
        });
        let observed = |bit: u32| !server || keys_version == 0 || messages & bit != 0;
        let request: &'static [u8] = if observed(WEFT_OBSERVES_REQUEST_MESSAGE) {
            FULL_REQUEST
        } else {
            &[]
        };
        let reply: &'static [u8] = if observed(WEFT_OBSERVES_RESPONSE_MESSAGE) {
            FULL_REPLY
        } else {
            &[]
        };
        let (mut m, mut meta, mut route) = (vec![0u8; 1024], vec![0u8; 512], vec![0u8; 64]);
        let call = WeftCall {
            method: METHOD.as_ptr(),
            method_len: METHOD.len(),
            out_message: WeftBuf::over(&mut m),
            out_metadata: WeftBuf::over(&mut meta),
            route: WeftBuf::over(&mut route),
            metadata_keys_version: keys_version,
            ..WeftCall::default()
        };
        Side {
            rt,
            side,
            md,
            request,
            reply,
            call,
            deferred,
            request_rc: if no_edge { WEFT_E_NO_EDGE } else { WEFT_OK },
            _bufs: (m, meta, route),
        }
    }

    /// One RPC on this side: the request, and the response when the chain waits for it.
    /// True when the response call was made.
    fn rpc(&mut self) -> bool {
        let call = &mut self.call;
        if let Some(stamp) = &self.deferred {
            call.metadata_len = 0;
            call.message = self.reply.as_ptr();
            call.message_len = self.reply.len();
            // SAFETY: a live runtime, a call whose pointers are valid for their lengths, and
            // a stamp of WEFT_STAMP_LEN bytes.
            let rc =
                unsafe { weft_server_exchange(self.rt, call, stamp.as_ptr(), stamp.len(), 1000) };
            assert_eq!(rc, WEFT_OK);
            return true;
        }
        call.metadata = self.md.as_ptr();
        call.metadata_len = self.md.len();
        call.message = self.request.as_ptr();
        call.message_len = self.request.len();
        // SAFETY: a live runtime and a call whose pointers are valid for their lengths.
        let rc = unsafe { weft_request(self.rt, self.side, call) };
        assert_eq!(rc, self.request_rc);
        if call.rpc == 0 {
            return false;
        }
        call.metadata_len = 0;
        call.message = self.reply.as_ptr();
        call.message_len = self.reply.len();
        // SAFETY: as above; `rpc` is the handle the request returned.
        assert_eq!(unsafe { weft_response(self.rt, self.side, call) }, WEFT_OK);
        true
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        // SAFETY: the runtime is live and no call is in flight.
        unsafe { weft_close(self.rt) };
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    // (server, deferred, without the edge) of each runtime.
    let sides: Vec<(bool, bool, bool)> = match args.next().as_deref() {
        Some("server") => vec![(true, false, false)],
        Some("exchange") => vec![(true, true, false)],
        Some("client") => vec![(false, false, false)],
        Some("both") => vec![(false, false, false), (true, false, false)],
        Some("no-edge") => vec![(false, false, true)],
        _ => panic!("usage: ffi_iters client|server|exchange|both|no-edge N [cold|evict-only]"),
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
    let mut sides: Vec<Side> = sides.into_iter().map(Side::open).collect();
    let mut responses = 0u64;
    for _ in 0..n {
        for line in evict.iter_mut().step_by(64) {
            *line = line.wrapping_add(1);
        }
        std::hint::black_box(&mut evict);
        if !run_calls {
            continue;
        }
        for side in &mut sides {
            responses += u64::from(side.rpc());
        }
    }
    drop(sides);
    println!("{n} requests, {responses} responses");
}
