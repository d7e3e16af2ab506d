//! The C ABI hands elements only the metadata keys they can observe; every other key must
//! come back unchanged whenever the chain returns new metadata. And what one call leaves
//! behind for reuse (its message's buffers) must never show in the next.
// Drives the library through its C ABI, as a binding does.
#![allow(unsafe_code)]
// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::{CStr, CString};

use common::{echo_edge, encode_metadata, examples, two_strings};
use weft_runtime::ffi::{
    WEFT_OK, WEFT_SIDE_CLIENT, WEFT_SIDE_SERVER, WEFT_VERDICT_FORWARD, WEFT_VERDICT_REJECT,
    WEFT_VERDICT_REPLY, WeftBuf, WeftCall, WeftRuntime, weft_close, weft_open_yaml, weft_request,
    weft_response, weft_rpc_abandon,
};
use weft_runtime::metadata::{self, Keys};

fn call_with(md: &[u8], m: &mut [u8], meta: &mut [u8], route: &mut [u8]) -> WeftCall {
    let method = b"/echo.Echo/Say";
    WeftCall {
        method: method.as_ptr(),
        method_len: method.len(),
        metadata: md.as_ptr(),
        metadata_len: md.len(),
        out_message: WeftBuf::over(m),
        out_metadata: WeftBuf::over(meta),
        route: WeftBuf::over(route),
        ..WeftCall::default()
    }
}

#[test]
fn keys_no_element_observes_survive_the_stamp() {
    // ratelimit reads no header, so the client side decodes only weft-version and dst.
    let rt = open_client(&["ratelimit: {capacity: 100.0, rate: 100.0}"]);
    let md = encode_metadata(&[
        ("X-Tenant", b"t1"),
        ("trace-bin", &[0xff, 0x00]),
        ("x-tenant", b"t2"),
        ("user-agent", b"grpc-go"),
    ]);
    let (mut m, mut meta, mut route) = (vec![0u8; 256], vec![0u8; 256], vec![0u8; 64]);
    let mut call = call_with(&md, &mut m, &mut meta, &mut route);
    // SAFETY: a live runtime and a call whose pointers are valid for their lengths.
    assert_eq!(
        unsafe { weft_request(rt, WEFT_SIDE_CLIENT, &mut call) },
        WEFT_OK
    );
    assert_eq!(call.metadata_changed, 1, "the client side stamps");
    let back = metadata::decode(&meta[..call.out_metadata.len], Keys::All).unwrap();
    assert_eq!(back.visible["x-tenant"], "t1");
    assert_eq!(back.visible["user-agent"], "grpc-go");
    assert!(back.visible.contains_key("weft-version"));
    assert!(back.visible["weft-version"].ends_with("/frontend"));
    let mut rest: Vec<(String, Vec<u8>)> = back
        .passthrough
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect();
    rest.sort();
    assert_eq!(
        rest,
        [
            ("trace-bin".to_owned(), vec![0xff, 0x00]),
            ("x-tenant".to_owned(), b"t2".to_vec())
        ]
    );
    // SAFETY: the runtime is live and used by no other thread.
    unsafe {
        weft_rpc_abandon(rt, call.rpc);
        weft_close(rt);
    }
}

#[test]
fn a_servers_stamp_passes_through_undecoded_and_comes_back_once() {
    // A server reads `weft-version` only to pick the version, so elements do not see it; when
    // an element changes the metadata, the stamp must still go on, once and unchanged.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mark.weft"),
        "state:\n    pass\ninit():\n    pass\nreq(rpc):\n    set_rpc_header(rpc, 'x-seen', 'yes')\n    send(rpc, Down)\nresp(rpc):\n    send(rpc, Up)\n",
    )
    .unwrap();
    let yaml = echo_edge(&[], &["mark"]).replace(
        "protos: [echo.proto]",
        &format!(
            "protos: [echo.proto]\nelement_paths: [{}]",
            dir.path().display()
        ),
    );
    let rt = open(&yaml, c"echo");
    let md = encode_metadata(&[
        ("weft-version", b"from-the-client"),
        ("user-agent", b"grpc-go"),
    ]);
    let (mut m, mut meta, mut route) = (vec![0u8; 256], vec![0u8; 256], vec![0u8; 64]);
    let mut call = call_with(&md, &mut m, &mut meta, &mut route);
    // SAFETY: a live runtime and a call whose pointers are valid for their lengths.
    assert_eq!(
        unsafe { weft_request(rt, WEFT_SIDE_SERVER, &mut call) },
        WEFT_OK
    );
    assert_eq!(call.metadata_changed, 1);
    let back = metadata::decode(&meta[..call.out_metadata.len], Keys::All).unwrap();
    assert_eq!(back.visible["x-seen"], "yes");
    assert_eq!(back.visible["weft-version"], "from-the-client");
    assert_eq!(back.visible["user-agent"], "grpc-go");
    assert!(back.passthrough.is_empty(), "{:?}", back.passthrough);
    // SAFETY: the runtime is live and used by no other thread.
    unsafe {
        weft_rpc_abandon(rt, call.rpc);
        weft_close(rt);
    }
}

/// What one call returned: verdict, output message and metadata (when changed), rpc handle.
struct Returned {
    verdict: i32,
    message: Option<Vec<u8>>,
    metadata: Option<Vec<u8>>,
    rpc: u64,
}

/// One request (`rpc == 0`) or response call on the client side, with fresh buffers.
fn client_call(rt: *mut WeftRuntime, rpc: u64, md: &[u8], message: &[u8]) -> Returned {
    let (mut m, mut meta, mut route) = (vec![0u8; 256], vec![0u8; 256], vec![0u8; 64]);
    let mut call = call_with(md, &mut m, &mut meta, &mut route);
    call.message = message.as_ptr();
    call.message_len = message.len();
    call.rpc = rpc;
    // SAFETY: a live runtime and a call whose pointers are valid for their lengths.
    let rc = unsafe {
        if rpc == 0 {
            weft_request(rt, WEFT_SIDE_CLIENT, &mut call)
        } else {
            weft_response(rt, WEFT_SIDE_CLIENT, &mut call)
        }
    };
    assert_eq!(rc, WEFT_OK);
    Returned {
        verdict: call.verdict,
        message: (call.message_changed == 1 || call.verdict == WEFT_VERDICT_REPLY)
            .then(|| m[..call.out_message.len].to_vec()),
        metadata: (call.metadata_changed == 1).then(|| meta[..call.out_metadata.len].to_vec()),
        rpc: call.rpc,
    }
}

/// Opens the runtime of `service` from `yaml`, relative paths against examples/echo.
fn open(yaml: &str, service: &CStr) -> *mut WeftRuntime {
    let yaml = CString::new(yaml).unwrap();
    let dir = CString::new(examples().join("echo").to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated strings that outlive the call.
    let rt = unsafe { weft_open_yaml(yaml.as_ptr(), dir.as_ptr(), service.as_ptr(), 0) };
    assert!(!rt.is_null());
    rt
}

fn open_client(client: &[&str]) -> *mut WeftRuntime {
    open(&echo_edge(client, &[]), c"frontend")
}

#[test]
fn a_reused_message_carries_nothing_of_the_call_before() {
    let rt = open_client(&["mutation: {field: body, prefix: 'p-'}"]);
    let first = client_call(
        rt,
        0,
        &encode_metadata(&[("x-first", b"1")]),
        &two_strings("alice", "a long first body"),
    );
    assert_eq!(first.verdict, WEFT_VERDICT_FORWARD);
    assert_eq!(
        first.message.unwrap(),
        two_strings("alice", "p-a long first body")
    );
    // Shorter bytes and no metadata: the second call sees only its own.
    let second = client_call(rt, 0, &[], &two_strings("bob", "b"));
    assert_eq!(second.message.unwrap(), two_strings("bob", "p-b"));
    let stamped = second.metadata.unwrap();
    let md = metadata::decode(&stamped, Keys::All).unwrap();
    assert!(!md.visible.contains_key("x-first"), "{md:?}");
    // SAFETY: the runtime is live and used by no other thread.
    unsafe { weft_close(rt) };
}

#[test]
fn a_message_an_element_keeps_is_not_reused() {
    // The cache keeps the first response; the calls after it must not overwrite it.
    let rt = open_client(&["cache: {field: user}"]);
    let reply = two_strings("cached body", "echo-0");
    let first = client_call(rt, 0, &[], &two_strings("alice", "hi"));
    assert_eq!(first.verdict, WEFT_VERDICT_FORWARD);
    assert_ne!(first.rpc, 0);
    client_call(rt, first.rpc, &[], &reply);
    for user in ["bob", "carol"] {
        let miss = client_call(rt, 0, &[], &two_strings(user, "a different request"));
        assert_eq!(miss.verdict, WEFT_VERDICT_FORWARD);
        client_call(rt, miss.rpc, &[], &two_strings("another reply", user));
    }
    let hit = client_call(rt, 0, &[], &two_strings("alice", "hi"));
    assert_eq!(hit.verdict, WEFT_VERDICT_REPLY);
    assert_eq!(hit.message.unwrap(), reply);
    // SAFETY: the runtime is live and used by no other thread.
    unsafe { weft_close(rt) };
}

/// Refuses an RPC whose header, named by a parameter, says `deny`.
const HEADER_GATE: &str = "\
state:
    pass

init(name: string):
    pass

req(rpc):
    if get_rpc_header(rpc, name) == 'deny':
        send(err('gate', PERMISSION_DENIED), Up)
    else:
        send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

/// A header name from a parameter is not checked for case as a literal is: written
/// `X-Tenant`, it must still name the `x-tenant` key gRPC delivers. Before, the C ABI decoded
/// only the key as written, the element read an empty header, and the gate let every RPC
/// through (the engine's own API, which decodes every key, refused them).
#[test]
fn a_header_named_by_a_parameter_is_seen_whatever_its_case() {
    let dir = common::echo_dir_with_elements(&[("gate.weft", HEADER_GATE)]);
    for name in ["x-tenant", "X-Tenant"] {
        let yaml = format!(
            "protos: [echo.proto]\nelement_paths: [elements]\nedges:\n  frontend->echo:\n    \
             from: frontend\n    to: echo\n    method: echo.Echo/Say\n    server:\n      \
             - gate: {{name: {name}}}\n"
        );
        let yaml = CString::new(yaml).unwrap();
        let base = CString::new(dir.path().to_str().unwrap()).unwrap();
        // SAFETY: NUL-terminated strings that outlive the call.
        let rt = unsafe { weft_open_yaml(yaml.as_ptr(), base.as_ptr(), c"echo".as_ptr(), 0) };
        assert!(!rt.is_null());
        for (value, verdict) in [("deny", WEFT_VERDICT_REJECT), ("ok", WEFT_VERDICT_FORWARD)] {
            let md = encode_metadata(&[("x-tenant", value.as_bytes())]);
            let message = two_strings("alice", "hi");
            let (mut m, mut meta, mut route) = (vec![0u8; 256], vec![0u8; 256], vec![0u8; 64]);
            let mut call = call_with(&md, &mut m, &mut meta, &mut route);
            call.message = message.as_ptr();
            call.message_len = message.len();
            // SAFETY: a live runtime and a call whose pointers are valid for their lengths.
            let rc = unsafe { weft_request(rt, WEFT_SIDE_SERVER, &mut call) };
            assert_eq!(rc, WEFT_OK);
            assert_eq!(call.verdict, verdict, "name {name}, x-tenant: {value}");
            if call.rpc != 0 {
                // SAFETY: the handle this runtime just returned.
                unsafe { weft_rpc_abandon(rt, call.rpc) };
            }
        }
        // SAFETY: the runtime is live and used by no other thread.
        unsafe { weft_close(rt) };
    }
}

/// Sets, removes or keeps `x-tenant` as the request's `body` says; `x-trace-bin` likewise.
const TENANT_WRITER: &str = "\
state:
    pass

init():
    pass

req(rpc):
    match get(rpc, 'body'):
        'set' =>
            set_rpc_header(rpc, 'x-tenant', 'c')
        'remove' =>
            set_rpc_header(rpc, 'x-tenant', '')
        'bin' =>
            set_rpc_header(rpc, 'x-trace-bin', 'AQ')
        _ =>
            pass
    send(rpc, Down)

resp(rpc):
    send(rpc, Up)
";

#[test]
fn values_elements_never_saw_of_a_key_the_chain_wrote_do_not_come_back() {
    // A key's second value (and a `-bin` value) is not shown to elements; once an element
    // replaces or removes the key, or sets the `-bin` key, it is superseded. Written back, a
    // request sent with `x-tenant: a, b` and set to `c` reached the server as `c, b`.
    let dir = common::echo_dir_with_elements(&[("tenant.weft", TENANT_WRITER)]);
    let yaml = "protos: [echo.proto]\nelement_paths: [elements]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: echo.Echo/Say\n    client:\n      - tenant\n";
    let yaml = CString::new(yaml).unwrap();
    let base = CString::new(dir.path().to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated strings that outlive the call.
    let rt = unsafe { weft_open_yaml(yaml.as_ptr(), base.as_ptr(), c"frontend".as_ptr(), 0) };
    assert!(!rt.is_null());
    let md = encode_metadata(&[
        ("x-tenant", b"a"),
        ("x-tenant", b"b"),
        ("x-trace-bin", &[0xff]),
        ("x-other", b"o1"),
        ("x-other", b"o2"),
    ]);
    let values = |body: &str| -> Vec<(String, Vec<u8>)> {
        let out = client_call(rt, 0, &md, &two_strings("alice", body));
        assert_eq!(out.verdict, WEFT_VERDICT_FORWARD, "{body}");
        let bytes = out.metadata.unwrap();
        let back = metadata::decode(&bytes, Keys::All).unwrap();
        let mut all: Vec<(String, Vec<u8>)> = back
            .visible
            .iter()
            .map(|(k, v)| (k.clone(), v.as_bytes().to_vec()))
            .chain(
                back.passthrough
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_vec())),
            )
            .filter(|(k, _)| k != "weft-version")
            .collect();
        all.sort();
        all
    };
    let pair = |k: &str, v: &[u8]| (k.to_owned(), v.to_vec());
    let others = [pair("x-other", b"o1"), pair("x-other", b"o2")];
    let bin = pair("x-trace-bin", &[0xff]);
    let expect = |mut v: Vec<(String, Vec<u8>)>| {
        v.sort();
        v
    };
    // Untouched: every value comes back.
    assert_eq!(
        values("keep"),
        expect(
            [pair("x-tenant", b"a"), pair("x-tenant", b"b"), bin.clone()]
                .into_iter()
                .chain(others.clone())
                .collect()
        )
    );
    assert_eq!(
        values("set"),
        expect(
            [pair("x-tenant", b"c"), bin.clone()]
                .into_iter()
                .chain(others.clone())
                .collect()
        )
    );
    assert_eq!(
        values("remove"),
        expect([bin.clone()].into_iter().chain(others.clone()).collect())
    );
    assert_eq!(
        values("bin"),
        expect(
            [
                pair("x-tenant", b"a"),
                pair("x-tenant", b"b"),
                pair("x-trace-bin", b"AQ")
            ]
            .into_iter()
            .chain(others.clone())
            .collect()
        )
    );
    // SAFETY: the runtime is live and used by no other thread.
    unsafe { weft_close(rt) };
}
