//! Several services calling one method, each over its own edge: the server runs the edge of
//! the service a request comes from (named in its `weft-version` stamp, `<digest>/<service>`,
//! by the caller's Weft), and refuses a request that names none of them rather than guess
//! whose policy applies.
// Drives the library through its C ABI too, as a binding does.
#![allow(unsafe_code)]
// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::CString;

use common::{echo_edge, encode_metadata, examples, options, two_strings};
use weft_hostcalls::Code;
use weft_runtime::ffi::{
    WEFT_E_ARGUMENT, WEFT_E_BUFFER, WEFT_E_METADATA, WEFT_OBSERVES_REQUEST_MESSAGE,
    WEFT_OBSERVES_RESPONSE_MESSAGE, WEFT_OK, WEFT_SIDE_SERVER, WEFT_VERDICT_FORWARD,
    WEFT_VERDICT_REJECT, WeftBuf, WeftCall, WeftCounters, WeftRuntime, weft_caller_stamp,
    weft_close, weft_counters, weft_open_yaml, weft_reload_yaml, weft_request, weft_rpc_abandon,
};
use weft_runtime::{Engine, EngineError, Metadata, RequestOutcome, Side, Verdict};

const METHOD: &str = "/echo.Echo/Say";
const STAMP: &str = "weft-version";

/// The service a stamp names.
fn caller(md: &Metadata) -> &str {
    md[STAMP]
        .split_once('/')
        .expect("a client's stamp names it")
        .1
}

/// Metadata whose stamp names `service` and no version this process has.
fn naming(service: &str) -> Metadata {
    let mut md = Metadata::new();
    md.insert(STAMP.into(), format!("/{service}"));
    md
}

/// `web` and `cart` both call `echo.Echo/Say`: `web`'s edge runs a firewall on the server
/// side, `cart`'s only metrics.
fn two_callers() -> String {
    format!(
        "{}  cart->echo:\n    from: cart\n    to: echo\n    method: echo.Echo/Say\n    server:\n      - metrics\n",
        web_only()
    )
}

/// Only `web`'s edge.
fn web_only() -> String {
    common::one_edge(
        "echo.proto",
        ("web", "echo"),
        "echo.Echo/Say",
        &[],
        &["firewall: {field: user, deny: [mallory]}"],
    )
}

fn open(yaml: &str, service: &str) -> Engine {
    Engine::open_yaml(yaml, examples().join("echo"), service, options()).unwrap()
}

/// The request `client` sends for `user`: its metadata once its client side has run.
fn sent_by(client: &Engine, user: &str) -> Metadata {
    let out = client
        .process_request(
            Side::Client,
            METHOD,
            Metadata::new(),
            two_strings(user, "hi"),
        )
        .unwrap();
    match out.verdict {
        Verdict::Forward(f) => f.message.headers.clone(),
        other => panic!("the client side forwards: {other:?}"),
    }
}

fn serve(server: &Engine, metadata: Metadata, user: &str) -> RequestOutcome {
    server
        .process_request(Side::Server, METHOD, metadata, two_strings(user, "hi"))
        .unwrap()
}

fn rejected(out: &RequestOutcome) -> Option<(Code, &str)> {
    match &out.verdict {
        Verdict::Reject { code, message } => Some((*code, message.as_str())),
        _ => None,
    }
}

#[test]
fn each_caller_runs_the_edge_from_its_service() {
    let yaml = two_callers();
    let (web, cart, echo) = (open(&yaml, "web"), open(&yaml, "cart"), open(&yaml, "echo"));
    let from_web = sent_by(&web, "mallory");
    assert_eq!(caller(&from_web), "web");
    let from_cart = sent_by(&cart, "mallory");
    assert_eq!(caller(&from_cart), "cart");

    let out = serve(&echo, from_web.clone(), "mallory");
    let (code, _) = rejected(&out).expect("web's edge runs the firewall");
    assert_eq!(code, Code::PermissionDenied);
    assert!(
        rejected(&serve(&echo, from_web, "alice")).is_none(),
        "the firewall lets alice through"
    );

    let out = serve(&echo, from_cart, "mallory");
    assert!(rejected(&out).is_none(), "cart's edge has no firewall");
    assert!(out.rpc.is_some(), "cart's edge runs metrics, which waits");
    assert_eq!(echo.rpc_counters().unknown_callers, 0);
}

#[test]
fn a_request_naming_no_caller_of_the_method_is_refused_and_counted() {
    let echo = open(&two_callers(), "echo");
    let out = serve(&echo, Metadata::new(), "alice");
    let (code, message) = rejected(&out).expect("unnamed: refused");
    assert_eq!(code, Code::PermissionDenied);
    assert!(message.contains("`weft-version: /<service>`"), "{message}");
    assert!(
        message.contains("`web`") && message.contains("`cart`"),
        "{message}"
    );
    assert!(out.rpc.is_none());

    let out = serve(&echo, naming("billing"), "alice");
    let (code, message) = rejected(&out).expect("a service without an edge: refused");
    assert_eq!(code, Code::PermissionDenied);
    assert!(message.contains("no edge from `billing`"), "{message}");
    assert_eq!(echo.rpc_counters().unknown_callers, 2);

    // `prepare` says why, for callers that pick the segment before decoding metadata.
    let e = echo
        .prepare(Side::Server, METHOD, Some("/billing"))
        .err()
        .unwrap();
    assert!(
        matches!(&e, EngineError::UnknownCaller { caller: Some(c), callers, .. }
            if c == "billing" && callers.len() == 2),
        "{e:?}"
    );
}

#[test]
fn a_method_with_one_edge_runs_it_whoever_calls() {
    // As before callers were stamped: a service without Weft, or one the config has no
    // edge from, gets the edge's policy.
    let echo = open(&web_only(), "echo");
    for caller in [None, Some("web"), Some("billing")] {
        let md = caller.map_or_else(Metadata::new, naming);
        let (code, _) = rejected(&serve(&echo, md, "mallory")).expect("the firewall runs");
        assert_eq!(code, Code::PermissionDenied, "{caller:?}");
    }
    assert_eq!(echo.rpc_counters().unknown_callers, 0);
}

#[test]
fn a_second_callers_edge_added_by_a_reload_leaves_the_first_callers_policy_in_place() {
    // The config rolls out service by service: `web` still runs the config of one edge when
    // the server has the new one. Its requests name it, so its edge keeps applying.
    let web = open(&web_only(), "web");
    let echo = open(&web_only(), "echo");
    echo.reload_yaml(&two_callers(), examples().join("echo"))
        .unwrap();
    let from_web = sent_by(&web, "mallory");
    assert_ne!(
        from_web["weft-version"],
        echo.digest(),
        "web is a version behind"
    );
    let (code, _) = rejected(&serve(&echo, from_web, "mallory")).expect("web's firewall");
    assert_eq!(code, Code::PermissionDenied);
    assert_eq!(echo.rpc_counters().unknown_callers, 0);
}

#[test]
fn two_edges_from_one_caller_into_one_method_are_refused() {
    let yaml = format!(
        "{}  again:\n    from: web\n    to: echo\n    method: echo.Echo/Say\n    server:\n      - metrics\n",
        web_only()
    );
    for service in ["web", "echo"] {
        let e = Engine::open_yaml(&yaml, examples().join("echo"), service, options())
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .contains("edges `web->echo` and `again` both apply"),
            "{service}: {e}"
        );
    }
}

fn open_c(yaml: &str, service: &std::ffi::CStr) -> *mut WeftRuntime {
    let yaml = CString::new(yaml).unwrap();
    let base = CString::new(examples().join("echo").display().to_string()).unwrap();
    // SAFETY: NUL-terminated strings that outlive the call.
    let rt = unsafe { weft_open_yaml(yaml.as_ptr(), base.as_ptr(), service.as_ptr(), 0) };
    assert!(!rt.is_null());
    rt
}

/// `weft_metadata_keys` for the server side of `echo.Echo/Say`: (version, message bits).
fn server_keys(rt: *mut WeftRuntime) -> (u64, u32) {
    let (version, messages, stamp) = common::echo_server_keys(rt);
    assert!(
        stamp.iter().all(u8::is_ascii_hexdigit),
        "a stamp is written"
    );
    (version, messages)
}

/// A server request through the C ABI: (rc, verdict, status code).
fn c_request(rt: *mut WeftRuntime, md: &[u8], keys_version: u64) -> (i32, i32, i32) {
    let message = two_strings("mallory", "hi");
    let (mut m, mut meta, mut route) = (vec![0u8; 1024], vec![0u8; 1024], vec![0u8; 64]);
    let method = METHOD.as_bytes();
    let mut call = WeftCall {
        method: method.as_ptr(),
        method_len: method.len(),
        metadata: md.as_ptr(),
        metadata_len: md.len(),
        message: message.as_ptr(),
        message_len: message.len(),
        metadata_keys_version: keys_version,
        out_message: WeftBuf::over(&mut m),
        out_metadata: WeftBuf::over(&mut meta),
        route: WeftBuf::over(&mut route),
        ..WeftCall::default()
    };
    // SAFETY: a live runtime and a call whose pointers are valid for their lengths.
    let rc = unsafe { weft_request(rt, WEFT_SIDE_SERVER, &mut call) };
    // SAFETY: a live runtime; 0 or a handle this call returned.
    unsafe { weft_rpc_abandon(rt, call.rpc) };
    (rc, call.verdict, call.code)
}

#[test]
fn through_the_c_abi_a_binding_passes_all_metadata_for_a_method_of_several_callers() {
    let rt = open_c(&echo_edge(&[], &["metrics"]), c"echo");
    let (one_edge_version, _) = server_keys(rt);
    assert_ne!(
        one_edge_version, 0,
        "one edge: only the keys metrics observes"
    );
    let yaml = CString::new(
        two_callers()
            .replace("web->echo", "frontend->echo")
            .replace("from: web", "from: frontend"),
    )
    .unwrap();
    let base = CString::new(examples().join("echo").display().to_string()).unwrap();
    // SAFETY: a live runtime; NUL-terminated strings that outlive the call.
    assert_eq!(
        unsafe { weft_reload_yaml(rt, yaml.as_ptr(), base.as_ptr()) },
        WEFT_OK
    );
    let (version, messages) = server_keys(rt);
    assert_eq!(
        version, 0,
        "which edge's keys depends on the caller: pass everything"
    );
    assert_eq!(
        messages,
        WEFT_OBSERVES_REQUEST_MESSAGE | WEFT_OBSERVES_RESPONSE_MESSAGE,
        "both messages, and the request path cannot wait"
    );

    // Keys of the version before, whose only edge needed no caller: pass everything and
    // retry.
    let (rc, _, _) = c_request(rt, &[], one_edge_version);
    assert_eq!(rc, WEFT_E_METADATA);
    let md = encode_metadata(&[(STAMP, b"/frontend")]);
    assert_eq!(c_request(rt, &md, 0), (WEFT_OK, WEFT_VERDICT_REJECT, 7));
    let md = encode_metadata(&[(STAMP, b"/cart")]);
    assert_eq!(c_request(rt, &md, 0).1, WEFT_VERDICT_FORWARD);
    let (rc, verdict, code) = c_request(rt, &[], 0);
    assert_eq!((rc, verdict, code), (WEFT_OK, WEFT_VERDICT_REJECT, 7));

    let mut counters = WeftCounters::default();
    // SAFETY: a live runtime and a writable struct.
    assert_eq!(unsafe { weft_counters(rt, &mut counters) }, WEFT_OK);
    assert_eq!(
        counters.unknown_callers, 1,
        "the WEFT_E_METADATA retry is not counted"
    );
    // SAFETY: the runtime is live and no call is in flight.
    unsafe { weft_close(rt) };
}

#[test]
fn a_refusal_shows_a_hostile_stamps_service_cut_short_and_escaped() {
    // The stamp is the client's to write; the refusal goes back to it and into logs.
    let echo = open(&two_callers(), "echo");
    let huge = format!("/{}", "x".repeat(100_000));
    for (stamp, shown) in [
        (
            huge.as_str(),
            format!("`{}… (100000 bytes)`", "x".repeat(64)),
        ),
        ("/evil\nlog line", "`evil\\nlog line`".to_owned()),
        ("0123456789abcdef/web/x", "`web/x`".to_owned()),
        ("/", "``".to_owned()),
    ] {
        let mut md = Metadata::new();
        md.insert(STAMP.into(), stamp.to_owned());
        let out = serve(&echo, md, "alice");
        let (code, message) = rejected(&out).expect("refused");
        assert_eq!(code, Code::PermissionDenied);
        assert!(
            message.contains(&format!("no edge from {shown}")),
            "{message:.300}"
        );
        assert!(message.len() < 400, "{} bytes", message.len());
    }
    // A service name cut at 64 bytes keeps whole characters.
    let e = echo
        .prepare(Side::Server, METHOD, Some(&format!("/x{}", "é".repeat(40))))
        .err()
        .unwrap();
    assert!(e.to_string().contains("(81 bytes)"), "{e}");
    assert_eq!(echo.rpc_counters().unknown_callers, 4);
}

#[test]
fn a_new_caller_is_named_by_its_caller_stamp_before_its_runtime_has_its_edge() {
    // The config that adds `cart`'s edge reaches the server first. `cart` runs Weft for
    // another edge but has none into `echo.Echo/Say` yet: the library runs nothing for the
    // call, and the binding adds the caller stamp, `/cart`, to its metadata.
    let before = format!(
        "{}  cart->web:\n    from: cart\n    to: web\n    method: echo.Echo/SayStream\n    client:\n      - metrics\n",
        web_only()
    );
    let cart_before = open(&before, "cart");
    let e = cart_before
        .process_request(
            Side::Client,
            METHOD,
            Metadata::new(),
            two_strings("mallory", "hi"),
        )
        .err()
        .unwrap();
    assert!(matches!(e, EngineError::NoEdge { .. }), "{e:?}");
    let stamp = cart_before.caller_stamp().expect("cart can be named");
    let mut md = Metadata::new();
    md.insert(STAMP.into(), stamp);
    assert_eq!(caller(&md), "cart");
    let echo_after = open(&two_callers(), "echo");
    let out = serve(&echo_after, md.clone(), "mallory");
    assert!(
        rejected(&out).is_none(),
        "cart's edge, which has no firewall"
    );
    assert!(out.rpc.is_some(), "cart's edge runs metrics, which waits");
    // On the config before, the server runs its one edge for anyone, as it did.
    let echo_before = open(&web_only(), "echo");
    let (code, _) =
        rejected(&serve(&echo_before, md, "mallory")).expect("web's firewall, the only edge");
    assert_eq!(code, Code::PermissionDenied);
    assert_eq!(echo_after.rpc_counters().unknown_callers, 0);

    // A request that carries no stamp at all (a caller without Weft) is still refused, and
    // the refusal says how to name a caller.
    let out = serve(&echo_after, Metadata::new(), "mallory");
    let (code, message) = rejected(&out).expect("refused");
    assert_eq!(code, Code::PermissionDenied);
    assert!(
        message.contains("`/<service>` on those no edge of its covers"),
        "the refusal says a Weft caller always names itself: {message}"
    );

    // The other order: `cart` has its edge first and names itself; the server on the config
    // before runs the one edge for it.
    let cart_after = open(&two_callers(), "cart");
    let (code, _) = rejected(&serve(
        &echo_before,
        sent_by(&cart_after, "mallory"),
        "mallory",
    ))
    .expect("web's firewall, the only edge");
    assert_eq!(code, Code::PermissionDenied);
    // Both on the new config: cart's own edge.
    assert!(
        rejected(&serve(
            &echo_after,
            sent_by(&cart_after, "mallory"),
            "mallory"
        ))
        .is_none()
    );
}

#[test]
fn the_c_abi_gives_the_caller_stamp_once_a_buffer_fits_it() {
    let rt = open_c(&two_callers(), c"cart");
    let mut small = [0u8; 3];
    let mut out = WeftBuf::over(&mut small);
    // SAFETY: a live runtime and a buffer writable for its cap.
    assert_eq!(unsafe { weft_caller_stamp(rt, &mut out) }, WEFT_E_BUFFER);
    assert_eq!(out.len, "/cart".len(), "the size needed");
    let mut big = [0u8; 64];
    out = WeftBuf::over(&mut big);
    // SAFETY: as above.
    assert_eq!(unsafe { weft_caller_stamp(rt, &mut out) }, WEFT_OK);
    assert_eq!(&big[..out.len], b"/cart");
    // SAFETY: a live runtime; a NULL `out` is an argument error, not a crash.
    assert_eq!(
        unsafe { weft_caller_stamp(rt, std::ptr::null_mut()) },
        WEFT_E_ARGUMENT
    );
    // SAFETY: NULL is allowed, and closed once.
    unsafe {
        assert_ne!(weft_caller_stamp(std::ptr::null(), &mut out), WEFT_OK);
        weft_close(rt);
    }

    // A service that only serves may have a name no header can carry: it has no stamp.
    let yaml = format!(
        "{}  web->caf\u{e9}:\n    from: web\n    to: caf\u{e9}\n    method: echo.Echo/SayStream\n    server:\n      - metrics\n",
        two_callers()
    );
    let rt = open_c(&yaml, c"caf\xc3\xa9");
    out.len = 99;
    // SAFETY: a live runtime and a buffer writable for its cap.
    assert_eq!(unsafe { weft_caller_stamp(rt, &mut out) }, WEFT_OK);
    assert_eq!(out.len, 0);
    // SAFETY: closed once.
    unsafe { weft_close(rt) };
}

#[test]
fn a_calling_service_whose_name_cannot_ride_in_a_header_is_refused_when_it_opens() {
    // grpc-go refuses to send a header value that is not printable ASCII, and a client's
    // stamp carries its service: every call would fail. A service that only serves sends
    // no stamp.
    let yaml = two_callers()
        .replace("cart->echo", "café->echo")
        .replace("from: cart", "from: café");
    let e = Engine::open_yaml(&yaml, examples().join("echo"), "café", options())
        .err()
        .unwrap();
    assert!(
        matches!(&e, EngineError::ServiceName { service } if service == "café"),
        "{e:?}"
    );
    assert!(e.to_string().contains("printable ASCII"), "{e}");
    let echo = open(&yaml, "echo");
    let mut md = Metadata::new();
    md.insert(STAMP.into(), "/café".into());
    assert!(
        rejected(&serve(&echo, md, "mallory")).is_none(),
        "café's edge"
    );
}
