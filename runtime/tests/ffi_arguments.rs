//! Arguments the C ABI must refuse, found by the `c_abi` fuzz target (fuzz/fuzz_targets/c_abi.rs):
//! each entry point answers a bad argument with `WEFT_E_ARGUMENT` before anything runs,
//! whatever else about the call (its method, its chain) would answer otherwise.
// Drives the library through its C ABI, as a binding does.
#![allow(unsafe_code)]
// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::{CStr, CString};

use common::{echo_edge, examples, two_strings};
use weft_runtime::ffi::{
    WEFT_E_ARGUMENT, WEFT_E_NO_EDGE, WEFT_OK, WEFT_SIDE_CLIENT, WeftBuf, WeftCall, WeftCounters,
    WeftRuntime, weft_close, weft_counters, weft_last_error, weft_open_yaml, weft_request,
    weft_server_exchange,
};

/// The echo server running `metrics`, whose request path can wait for the response.
fn open_server() -> *mut WeftRuntime {
    let yaml = CString::new(echo_edge(&[], &["metrics"])).unwrap();
    let dir = CString::new(examples().join("echo").to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated strings that outlive the call.
    let rt = unsafe { weft_open_yaml(yaml.as_ptr(), dir.as_ptr(), c"echo".as_ptr(), 0) };
    assert!(!rt.is_null());
    rt
}

/// `weft_server_exchange` of an OK response `reply` for `method` with metadata `md`:
/// (return code, the thread's last error).
fn exchange(rt: *mut WeftRuntime, method: &[u8], md: &[u8], reply: &[u8]) -> (i32, String) {
    with_call(method, md, reply, |call| {
        // SAFETY: a live runtime, a call whose pointers are valid for their lengths, no stamp.
        unsafe { weft_server_exchange(rt, call, std::ptr::null(), 0, 0) }
    })
}

/// `weft_request` on the client side of `method`, no metadata: (return code, last error).
fn client_request(rt: *mut WeftRuntime, method: &[u8]) -> (i32, String) {
    with_call(method, &[], &two_strings("alice", "hi"), |call| {
        // SAFETY: a live runtime and a call whose pointers are valid for their lengths.
        unsafe { weft_request(rt, WEFT_SIDE_CLIENT, call) }
    })
}

/// Runs `f` on a call of `method` with metadata `md` and message `message`, with room for
/// its outputs: (what `f` returns, the thread's last error).
fn with_call(
    method: &[u8],
    md: &[u8],
    message: &[u8],
    f: impl FnOnce(&mut WeftCall) -> i32,
) -> (i32, String) {
    let (mut m, mut meta, mut route) = (vec![0u8; 256], vec![0u8; 256], vec![0u8; 64]);
    let mut call = WeftCall {
        method: method.as_ptr(),
        method_len: method.len(),
        metadata: md.as_ptr(),
        metadata_len: md.len(),
        message: message.as_ptr(),
        message_len: message.len(),
        out_message: WeftBuf::over(&mut m),
        out_metadata: WeftBuf::over(&mut meta),
        route: WeftBuf::over(&mut route),
        ..WeftCall::default()
    };
    let rc = f(&mut call);
    (rc, last_error())
}

fn last_error() -> String {
    // SAFETY: valid until this thread's next call into Weft; copied before it.
    unsafe { CStr::from_ptr(weft_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// `WEFT_E_NO_EDGE` is an answer, given on every call of a method without policy, so its
/// message is made only when `weft_last_error` asks for it. It must still be that call's
/// message: the method and side of the last such call, and never shown after a later
/// failure of another kind.
#[test]
fn the_no_edge_answer_names_the_method_and_side_of_the_last_such_call() {
    let rt = open_server();
    let reply = two_strings("hi", "echo-1");
    let (rc, error) = exchange(rt, b"/echo.Echo/Nope", &[], &reply);
    assert_eq!(rc, WEFT_E_NO_EDGE);
    assert_eq!(
        error,
        "no edge of service `echo` matches server-side method `/echo.Echo/Nope`"
    );
    // Asked again, the same text.
    assert_eq!(last_error(), error);

    // Two answers before the message is asked for: the last call's.
    assert_eq!(client_request(rt, b"/echo.Echo/Other").0, WEFT_E_NO_EDGE);
    let (rc, error) = client_request(rt, b"/echo.Echo/Say");
    assert_eq!(rc, WEFT_E_NO_EDGE);
    assert_eq!(
        error,
        "no edge of service `echo` matches client-side method `/echo.Echo/Say`"
    );

    // A failure after an answer not yet read: its own message, not the answer's.
    assert_eq!(client_request(rt, b"/echo.Echo/Other").0, WEFT_E_NO_EDGE);
    let (rc, error) = exchange(rt, b"/echo.Echo/Say", &[0u8], &reply);
    assert_eq!(rc, WEFT_E_ARGUMENT);
    assert!(error.contains("metadata entry 0"), "{error}");
    // And a success leaves the last error as it was.
    assert_eq!(exchange(rt, b"/echo.Echo/Say", &[], &reply).0, WEFT_OK);
    assert_eq!(last_error(), error);
    // SAFETY: the runtime is live and no call is in flight.
    unsafe { weft_close(rt) };
}

fn element_runs(rt: *mut WeftRuntime) -> WeftCounters {
    let mut c = WeftCounters::default();
    // SAFETY: a live runtime and a writable struct.
    assert_eq!(unsafe { weft_counters(rt, &mut c) }, WEFT_OK);
    c
}

/// `weft_request` and `weft_response` refuse a metadata encoding that breaks the rule
/// before anything else; `weft_server_exchange` did not check it at all when the server's
/// chain observes no header (it passes every entry through undecoded), and answered
/// `WEFT_E_NO_EDGE` for a method without a chain, telling the caller to pass the call on.
#[test]
fn an_exchange_refuses_a_bad_metadata_encoding_whatever_the_method() {
    let rt = open_server();
    let reply = two_strings("hi", "echo-1");
    // A key length of 1 with no key after it; then a key with a space in it.
    let mut spaced = Vec::new();
    for s in [&b"x tenant"[..], b"v"] {
        spaced.extend_from_slice(&(s.len() as u32).to_le_bytes());
        spaced.extend_from_slice(s);
    }
    for md in [&[1u8, 0, 0, 0][..], &[0u8][..], &spaced] {
        for method in [&b"/echo.Echo/Say"[..], b"/echo.Echo/Nope"] {
            let (rc, error) = exchange(rt, method, md, &reply);
            assert_eq!(
                rc,
                WEFT_E_ARGUMENT,
                "{} with metadata {md:?}: {error}",
                String::from_utf8_lossy(method)
            );
            assert!(error.contains("metadata entry 0"), "{error}");
        }
    }
    // Nothing ran: a valid exchange still passes, and no error was counted.
    let (rc, error) = exchange(rt, b"/echo.Echo/Say", &[], &reply);
    assert_eq!(rc, WEFT_OK, "{error}");
    assert_eq!(element_runs(rt).element_errors, 0);
    // SAFETY: the runtime is live and no call is in flight.
    unsafe { weft_close(rt) };
}
