//! `weft_stats`: the gauges a long-running process watches for leaks follow what the
//! runtime holds, and come back down once the RPCs that needed it end.
// Drives the library through its C ABI, as a binding does.
#![allow(unsafe_code)]
// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::CString;

use common::{echo_edge, examples, two_strings};
use weft_runtime::ffi::{
    WEFT_E_ARGUMENT, WEFT_OK, WEFT_SIDE_CLIENT, WeftBuf, WeftCall, WeftRuntime, WeftStats,
    weft_close, weft_open_yaml, weft_records, weft_reload_yaml, weft_request, weft_response,
    weft_stats,
};

fn stats(rt: *mut WeftRuntime) -> WeftStats {
    let mut s = WeftStats::default();
    // SAFETY: a live runtime and a writable struct.
    assert_eq!(unsafe { weft_stats(rt, &mut s) }, WEFT_OK);
    s
}

fn reload(rt: *mut WeftRuntime, yaml: &str) {
    let yaml = CString::new(yaml).unwrap();
    let dir = CString::new(examples().join("echo").to_str().unwrap()).unwrap();
    // SAFETY: a live runtime and NUL-terminated strings that outlive the call.
    assert_eq!(
        unsafe { weft_reload_yaml(rt, yaml.as_ptr(), dir.as_ptr()) },
        WEFT_OK
    );
}

/// The C ABI's request or response call.
type Entry = unsafe extern "C" fn(*mut WeftRuntime, i32, *mut WeftCall) -> i32;

/// One client-side call of `entry` on `/echo.Echo/Say` with `message`, for RPC `rpc` (0 for
/// a request); the call's RPC handle.
fn client_call(rt: *mut WeftRuntime, entry: Entry, message: &[u8], rpc: u64) -> u64 {
    let method = b"/echo.Echo/Say";
    let (mut m, mut meta, mut route) = (vec![0u8; 256], vec![0u8; 256], vec![0u8; 64]);
    let mut call = WeftCall {
        method: method.as_ptr(),
        method_len: method.len(),
        message: message.as_ptr(),
        message_len: message.len(),
        rpc,
        out_message: WeftBuf::over(&mut m),
        out_metadata: WeftBuf::over(&mut meta),
        route: WeftBuf::over(&mut route),
        ..WeftCall::default()
    };
    // SAFETY: a live runtime and a call whose pointers are valid for their lengths.
    assert_eq!(unsafe { entry(rt, WEFT_SIDE_CLIENT, &mut call) }, WEFT_OK);
    call.rpc
}

/// A client request through `logging` (which waits for the response): its handle.
fn request(rt: *mut WeftRuntime) -> u64 {
    let rpc = client_call(rt, weft_request, &two_strings("alice", "hi"), 0);
    assert_ne!(rpc, 0);
    rpc
}

fn respond(rt: *mut WeftRuntime, rpc: u64) {
    client_call(rt, weft_response, &two_strings("hi", "echo-0"), rpc);
}

#[test]
fn stats_follow_waiting_rpcs_and_the_versions_they_hold() {
    let v1 = echo_edge(&["logging"], &[]);
    let v2 = echo_edge(&["logging", "metrics"], &[]);
    let yaml = CString::new(v1.as_str()).unwrap();
    let dir = CString::new(examples().join("echo").to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated strings that outlive the call.
    let rt = unsafe { weft_open_yaml(yaml.as_ptr(), dir.as_ptr(), c"frontend".as_ptr(), 16) };
    assert!(!rt.is_null());
    let start = stats(rt);
    assert_eq!(
        (
            start.rpcs_waiting,
            start.versions_installed,
            start.versions_freed
        ),
        (0, 1, 0)
    );

    // Two requests of version 1 wait while two reloads replace it: version 1 stays, with
    // its RPCs, and version 2, which none runs in, is freed by the second reload.
    let (a, b) = (request(rt), request(rt));
    reload(rt, &v2);
    reload(rt, &v1);
    let held = stats(rt);
    assert_eq!(held.rpcs_waiting, 2);
    assert_eq!((held.versions_installed, held.versions_freed), (3, 1));
    assert_eq!(held.versions_draining, 1);
    // logging sent each request to its channel; the records keep the messages alive.
    assert_eq!(held.records_queued, 2);
    assert!(held.records_bytes > 0);
    let mut buf = vec![0u8; 1 << 16];
    let mut out = WeftBuf::over(&mut buf);
    // SAFETY: a live runtime and a buffer writable for its capacity.
    assert_eq!(
        unsafe { weft_records(rt, &mut out, std::ptr::null_mut()) },
        WEFT_OK
    );
    assert!(out.len > 0);
    let collected = stats(rt);
    assert_eq!((collected.records_queued, collected.records_bytes), (0, 0));

    respond(rt, a);
    assert_eq!(
        stats(rt).versions_draining,
        1,
        "one RPC of version 1 still runs"
    );
    respond(rt, b);
    let end = stats(rt);
    assert_eq!(end.rpcs_waiting, 0);
    assert_eq!((end.versions_installed, end.versions_freed), (3, 2));
    assert_eq!(end.versions_draining, 0);
    assert_eq!(end.kept_outputs, 0);

    // SAFETY: a NULL runtime and a NULL out are refused, not read or written.
    unsafe {
        assert_eq!(weft_stats(rt, std::ptr::null_mut()), WEFT_E_ARGUMENT);
        assert_eq!(
            weft_stats(std::ptr::null(), &mut WeftStats::default()),
            WEFT_E_ARGUMENT
        );
        weft_close(rt);
    }
}
