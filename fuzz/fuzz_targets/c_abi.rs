//! Random call sequences against the C ABI (`runtime/include/weft.h`), through the same
//! `extern "C"` functions the C test and the Go binding call, with the pointers the
//! contract allows (NULL where it is allowed, empty and huge lengths, stale and made-up
//! handles) and never one it forbids.
//!
//! One runtime per input, opened from one of a few configs over `examples/echo` for the
//! service `svc`, which is the client of `svc->up` and the server of `down->svc` on
//! `echo.Echo/Say`, so both sides run elements. Besides "nothing panics", it checks what
//! docs/c-abi.md and docs/engine.md promise: the documented return codes and verdicts; a
//! request whose bytes are not an `echo.SayRequest` (decided by prost, not by Weft's own
//! checker) is refused with INVALID_ARGUMENT and counted once where the chain checks; the
//! firewall's verdict by the user prost decodes; metadata entries come back unless an
//! element wrote their key; counters never fall; every handle is answered at most once and
//! `weft_rpcs_waiting` counts exactly the unanswered ones; outputs kept after
//! `WEFT_E_BUFFER` are handed over once, and only to the call that kept them; records are
//! whole and well-formed.
#![no_main]

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString, c_char};
use std::hash::{Hash, Hasher};
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use prost::Message as _;
use weft_runtime::ffi::{
    WEFT_E_ARGUMENT, WEFT_E_BUFFER, WEFT_E_CONFIG, WEFT_E_METADATA, WEFT_E_NO_EDGE, WEFT_OK,
    WEFT_SIDE_CLIENT, WEFT_SIDE_SERVER, WEFT_STAMP_LEN, WEFT_VERDICT_FORWARD, WEFT_VERDICT_REJECT,
    WEFT_VERDICT_REPLY, WeftBuf, WeftCall, WeftCounters, WeftRuntime, weft_call_output,
    weft_caller_stamp, weft_close, weft_counters, weft_last_error, weft_metadata_keys,
    weft_open_yaml, weft_records, weft_reload, weft_reload_yaml, weft_request, weft_response,
    weft_rpc_abandon, weft_rpcs_waiting, weft_server_exchange, weft_version, weft_version_word,
};

/// `echo.SayRequest` and `echo.SayReply` (examples/echo/echo.proto), decoded by prost: the
/// reference for which bytes are a valid message, independent of `weft_ir::wire_check`.
#[derive(Clone, PartialEq, prost::Message)]
struct SayRequest {
    #[prost(string, tag = "1")]
    user: String,
    #[prost(string, tag = "2")]
    body: String,
    #[prost(int64, tag = "3")]
    priority: i64,
    #[prost(string, repeated, tag = "4")]
    tags: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SayReply {
    #[prost(string, tag = "1")]
    body: String,
    #[prost(string, tag = "2")]
    served_by: String,
}

// ---------------------------------------------------------------------------------------
// Configs and what the docs say each does.

/// Whether a side's chain checks a direction's message (docs/engine.md, "Malformed
/// messages"): `Maybe` where it depends on the planner or on rules the docs leave open.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Check {
    Always,
    Never,
    Maybe,
}

struct Config {
    yaml: &'static str,
    /// [client, server]
    request_check: [Check; 2],
    response_check: [Check; 2],
    /// The side's request path can only refuse `user: mallory` (PERMISSION_DENIED, "acl").
    firewall_only: [bool; 2],
    /// Whether the server's request path can wait for the response (`weft_server_exchange`).
    deferrable: Option<bool>,
}

const FIREWALL: &str = "firewall: {field: user, deny: [mallory]}";

const CONFIGS: [Config; 5] = [
    Config {
        yaml: "protos: [echo.proto]
edges:
  svc->up:
    from: svc
    to: up
    method: echo.Echo/Say
    client:
      - logging
      - firewall: {field: user, deny: [mallory]}
  down->svc:
    from: down
    to: svc
    method: echo.Echo/Say
    server:
      - metrics
      - firewall: {field: user, deny: [mallory]}
",
        request_check: [Check::Always, Check::Always],
        response_check: [Check::Never, Check::Never],
        firewall_only: [true, true],
        deferrable: Some(false),
    },
    Config {
        yaml: "protos: [echo.proto]
edges:
  svc->up:
    from: svc
    to: up
    method: echo.Echo/Say
    client:
      - logging
      - ratelimit: {capacity: 5.0, rate: 1.0}
      - fault: {prob_pass: 0.5}
      - firewall: {field: user, deny: [mallory]}
      - cache: {field: body}
  down->svc:
    from: down
    to: svc
    method: echo.Echo/Say
    server:
      - metrics
      - cache: {field: body}
      - firewall: {field: user, deny: [mallory]}
      - ratelimit: {capacity: 3.0, rate: 0.0}
      - logging
",
        request_check: [Check::Always, Check::Always],
        response_check: [Check::Maybe, Check::Maybe],
        firewall_only: [false, false],
        deferrable: Some(false),
    },
    // Header-only policy: no payload is ever parsed.
    Config {
        yaml: "protos: [echo.proto]
edges:
  svc->up:
    from: svc
    to: up
    method: echo.Echo/Say
    client:
      - ratelimit: {capacity: 2.0, rate: 0.0}
  down->svc:
    from: down
    to: svc
    method: echo.Echo/Say
    server:
      - metrics
",
        request_check: [Check::Never, Check::Never],
        response_check: [Check::Never, Check::Never],
        firewall_only: [false, false],
        deferrable: Some(true),
    },
    Config {
        yaml: "protos: [echo.proto]
edges:
  svc->up:
    from: svc
    to: up
    method: echo.Echo/Say
    client:
      - logging
  down->svc:
    from: down
    to: svc
    method: echo.Echo/Say
    server:
      - logging
      - metrics
",
        request_check: [Check::Maybe, Check::Maybe],
        response_check: [Check::Maybe, Check::Maybe],
        firewall_only: [true, true],
        deferrable: None,
    },
    // The planner may move `any` elements: the client still runs `logging`, so it checks.
    Config {
        yaml: "protos: [echo.proto]
edges:
  svc->up:
    from: svc
    to: up
    method: echo.Echo/Say
    client:
      - logging
    any:
      - ratelimit: {capacity: 5.0, rate: 1.0}
      - firewall: {field: user, deny: [mallory]}
      - cache: {field: body}
    server:
      - metrics
  down->svc:
    from: down
    to: svc
    method: echo.Echo/Say
    client:
      - logging
    any:
      - firewall: {field: user, deny: [mallory]}
    server:
      - metrics
",
        request_check: [Check::Always, Check::Maybe],
        response_check: [Check::Maybe, Check::Maybe],
        firewall_only: [false, false],
        deferrable: None,
    },
];

/// Configs every load refuses with `WEFT_E_CONFIG`.
const INVALID: [&str; 7] = [
    "edges: [",
    "protos: [echo.proto]\nedges:\n  svc->up:\n    from: svc\n    to: up\n    method: echo.Echo/Say\n    client:\n      - nosuchelement\n",
    "protos: [echo.proto]\nedges:\n  svc->up:\n    from: svc\n    to: up\n    method: echo.Echo/Say\n    client:\n      - firewall\n",
    "protos: [echo.proto]\nedges:\n  svc->up:\n    from: svc\n    to: up\n    method: echo.Echo/Say\n    client:\n      - ratelimit: {capacity: 0.5}\n",
    "protos: [missing.proto]\nedges:\n  svc->up:\n    from: svc\n    to: up\n    method: echo.Echo/Say\n    client:\n      - logging\n",
    "protos: [echo.proto]\nedges:\n  svc->up:\n    from: svc\n    to: up\n    method: echo.Echo/Nope\n    client:\n      - logging\n",
    // Two edges from one service into one method: edges from two services (`a`, `b`) are
    // a valid config since the stamp names the caller.
    "protos: [echo.proto]\nedges:\n  a->svc:\n    from: a\n    to: svc\n    method: echo.Echo/Say\n    server:\n      - metrics\n  again:\n    from: a\n    to: svc\n    method: echo.Echo/Say\n    server:\n      - metrics\n",
];

fn base_dir() -> &'static CStr {
    static DIR: std::sync::OnceLock<CString> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        CString::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/echo")).unwrap()
    })
}

// ---------------------------------------------------------------------------------------
// The input: a config, a queue size, and calls.

#[derive(Arbitrary, Debug)]
struct Input {
    config: u8,
    capacity: Capacity,
    /// Reload operations run only when this is a multiple of 8: an input that reloads needs
    /// a runtime of its own, and opening one costs more than the rest of most inputs.
    reloads: u8,
    ops: Vec<Op>,
    /// Abandon every handle still waiting before `weft_close` (else close drops them).
    abandon_at_end: bool,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Capacity {
    None,
    One,
    Few,
    Many,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Request {
        slot: u8,
        side: SideArg,
        method: MethodArg,
        metadata: MetadataArg,
        message: RequestArg,
        keys: KeysArg,
        bufs: Bufs,
    },
    Response {
        slot: u8,
        side: SideArg,
        rpc: RpcArg,
        method: MethodArg,
        metadata: MetadataArg,
        message: ReplyArg,
        status: StatusArg,
        bufs: Bufs,
    },
    /// A request on `side`, then its response on the same call, when it waits for one.
    Rpc {
        slot: u8,
        side: bool,
        user: UserArg,
        body: BodyArg,
        metadata: MetadataArg,
        reply: ReplyArg,
        status: StatusArg,
    },
    Exchange {
        slot: u8,
        method: MethodArg,
        metadata: MetadataArg,
        message: ReplyArg,
        status: StatusArg,
        stamp: StampArg,
        age_ns: u64,
        keys: KeysArg,
        bufs: Bufs,
    },
    CallOutput {
        slot: u8,
        grow: bool,
    },
    Abandon(RpcArg),
    Reload(ReloadArg),
    Counters {
        null_out: bool,
    },
    Records {
        cap: u16,
        null_out: bool,
        null_ptr: bool,
        null_dropped: bool,
    },
    MetadataKeys {
        side: SideArg,
        method: MethodArg,
        cap: u8,
        null_out: bool,
        null_version: bool,
        null_messages: bool,
        null_stamp: bool,
    },
    NullRuntime(u8),
    NullCall(u8),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum SideArg {
    Client,
    Server,
    Raw(i32),
}

#[derive(Arbitrary, Debug)]
enum MethodArg {
    Say,
    SayNoSlash,
    SayStream,
    Unknown,
    Empty,
    Null,
    /// NULL with a length: refused before anything is read.
    NullWithLen(u8),
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum MetadataArg {
    Entries(Vec<Entry>),
    Raw(Vec<u8>),
    Null,
}

#[derive(Arbitrary, Debug)]
struct Entry {
    key: KeyArg,
    value: ValueArg,
}

#[derive(Arbitrary, Debug)]
enum KeyArg {
    Tenant,
    TenantUpper,
    Bin,
    Version,
    Dst,
    Authorization,
    Empty,
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum ValueArg {
    Text(String),
    Bytes(Vec<u8>),
    Huge {
        byte: u8,
        kib: u8,
    },
    /// A stamp seen earlier in this input (or an empty one).
    Stamp(u8),
    Empty,
}

#[derive(Arbitrary, Debug, Clone)]
enum UserArg {
    Alice,
    Mallory,
    Any(String),
}

#[derive(Arbitrary, Debug, Clone)]
enum BodyArg {
    Hi,
    Hello,
    Any(String),
}

#[derive(Arbitrary, Debug)]
struct Request {
    user: UserArg,
    body: BodyArg,
    priority: i64,
    tags: Vec<String>,
}

#[derive(Arbitrary, Debug)]
enum RequestArg {
    Valid(Request),
    Raw(Vec<u8>),
    Flipped(Request, Vec<(u16, u8)>),
    Truncated(Request, u16),
    Appended(Request, Vec<u8>),
    Empty,
    Null,
    NullWithLen(u8),
}

#[derive(Arbitrary, Debug)]
enum ReplyArg {
    Valid {
        body: BodyArg,
        served_by: String,
    },
    Raw(Vec<u8>),
    Flipped {
        body: BodyArg,
        flips: Vec<(u16, u8)>,
    },
    Empty,
    Null,
}

#[derive(Arbitrary, Debug)]
enum StatusArg {
    Ok,
    Error { code: u8, message: Vec<u8> },
    Raw { code: i32, message: Vec<u8> },
}

#[derive(Arbitrary, Debug)]
enum RpcArg {
    Live(u8),
    Stale(u8),
    Zero,
    Random(u64),
}

#[derive(Arbitrary, Debug)]
enum KeysArg {
    Complete,
    Current,
    Random(u64),
}

#[derive(Arbitrary, Debug)]
enum StampArg {
    None,
    Null,
    Seen(u8),
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum ReloadArg {
    Config(u8),
    Invalid(u8),
    Raw(String),
    NonUtf8,
    NullYaml,
    NullBase,
    MissingBase(u8),
    /// `weft_reload`: a runtime opened from YAML text has no file to re-read.
    File,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Bufs {
    message: BufArg,
    metadata: BufArg,
    route: BufArg,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum BufArg {
    Ample,
    Small(u8),
    Zero,
    Null,
    /// NULL with a capacity: holds nothing (ffi.rs `capacity`).
    NullCap(u8),
    Huge,
}

impl Bufs {
    const AMPLE: Bufs = Bufs {
        message: BufArg::Huge,
        metadata: BufArg::Huge,
        route: BufArg::Ample,
    };
}

// ---------------------------------------------------------------------------------------
// Encoding inputs.

fn side_arg(s: SideArg) -> i32 {
    match s {
        SideArg::Client => WEFT_SIDE_CLIENT,
        SideArg::Server => WEFT_SIDE_SERVER,
        SideArg::Raw(n) => n,
    }
}

/// What a method argument is: its bytes, whether the pointer is NULL, and whether it names
/// the edges' method (`Some(true)`), certainly none (`Some(false)`), or who knows.
struct Method {
    bytes: Vec<u8>,
    null: bool,
    say: Option<bool>,
}

fn method_arg(m: &MethodArg) -> Method {
    let (bytes, null, say) = match m {
        MethodArg::Say => (b"/echo.Echo/Say".to_vec(), false, Some(true)),
        MethodArg::SayNoSlash => (b"echo.Echo/Say".to_vec(), false, Some(true)),
        MethodArg::SayStream => (b"/echo.Echo/SayStream".to_vec(), false, Some(false)),
        MethodArg::Unknown => (b"/echo.Echo/Nope".to_vec(), false, Some(false)),
        MethodArg::Empty => (Vec::new(), false, Some(false)),
        MethodArg::Null => (Vec::new(), true, Some(false)),
        MethodArg::NullWithLen(n) => (vec![0; usize::from(*n).max(1)], true, None),
        MethodArg::Raw(b) => (b.clone(), false, None),
    };
    Method { bytes, null, say }
}

fn user(u: &UserArg) -> String {
    match u {
        UserArg::Alice => "alice".into(),
        UserArg::Mallory => "mallory".into(),
        UserArg::Any(s) => s.clone(),
    }
}

fn body(b: &BodyArg) -> String {
    match b {
        BodyArg::Hi => "hi".into(),
        BodyArg::Hello => "hello".into(),
        BodyArg::Any(s) => s.clone(),
    }
}

fn encode_request(r: &Request) -> Vec<u8> {
    SayRequest {
        user: user(&r.user),
        body: body(&r.body),
        priority: r.priority,
        tags: r.tags.iter().take(8).cloned().collect(),
    }
    .encode_to_vec()
}

fn flip(mut bytes: Vec<u8>, flips: &[(u16, u8)]) -> Vec<u8> {
    if !bytes.is_empty() {
        for &(at, x) in flips.iter().take(8) {
            let i = usize::from(at) % bytes.len();
            bytes[i] ^= x;
        }
    }
    bytes
}

/// (bytes, NULL pointer)
fn request_arg(m: &RequestArg) -> (Vec<u8>, bool) {
    match m {
        RequestArg::Valid(r) => (encode_request(r), false),
        RequestArg::Raw(b) => (b.clone(), false),
        RequestArg::Flipped(r, f) => (flip(encode_request(r), f), false),
        RequestArg::Truncated(r, n) => {
            let mut b = encode_request(r);
            b.truncate(usize::from(*n) % (b.len() + 1));
            (b, false)
        }
        RequestArg::Appended(r, extra) => {
            let mut b = encode_request(r);
            b.extend_from_slice(extra);
            (b, false)
        }
        RequestArg::Empty => (Vec::new(), false),
        RequestArg::Null => (Vec::new(), true),
        RequestArg::NullWithLen(n) => (vec![0; usize::from(*n).max(1)], true),
    }
}

fn reply_arg(m: &ReplyArg) -> (Vec<u8>, bool) {
    let encode = |b: &BodyArg, s: &str| {
        SayReply {
            body: body(b),
            served_by: s.to_owned(),
        }
        .encode_to_vec()
    };
    match m {
        ReplyArg::Valid { body, served_by } => (encode(body, served_by), false),
        ReplyArg::Raw(b) => (b.clone(), false),
        ReplyArg::Flipped { body, flips } => (flip(encode(body, "echo-1"), flips), false),
        ReplyArg::Empty => (Vec::new(), false),
        ReplyArg::Null => (Vec::new(), true),
    }
}

fn status_arg(s: &StatusArg) -> (i32, Vec<u8>) {
    match s {
        StatusArg::Ok => (0, Vec::new()),
        StatusArg::Error { code, message } => (i32::from(code % 16) + 1, message.clone()),
        StatusArg::Raw { code, message } => (*code, message.clone()),
    }
}

/// A response's bytes: none with an error status, as the contract asks (`message_len` 0).
fn with_status(message: (Vec<u8>, bool), status_code: i32) -> (Vec<u8>, bool) {
    if status_code == 0 {
        message
    } else {
        (Vec::new(), message.1)
    }
}

/// The code a server status becomes: gRPC's codes 1-16 as they are, anything else UNKNOWN.
fn mapped_status(code: i32) -> i32 {
    if (1..=16).contains(&code) { code } else { 2 }
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The ABI's metadata encoding, parsed by the rule in docs/c-abi.md: repeated
/// `{u32 LE key_len, key, u32 LE value_len, value}`, keys non-empty printable ASCII without
/// space. `None` when the bytes break the rule.
fn parse_metadata(mut bytes: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    fn take<'a>(b: &mut &'a [u8]) -> Option<&'a [u8]> {
        let (len, rest) = b.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return None;
        }
        let (item, rest) = rest.split_at(len);
        *b = rest;
        Some(item)
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = take(&mut bytes)?;
        let value = take(&mut bytes)?;
        if key.is_empty() || !key.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return None;
        }
        out.push((key.to_vec(), value.to_vec()));
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------
// Messages: prost decides validity; Weft also refuses groups (docs/engine.md).

fn varint(b: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Whether a top-level field of `bytes` is a group (wire type 3 or 4). Echo's messages
/// have no nested message fields, and unknown fields are checked for framing only, so the
/// top level is the only place one matters.
fn has_group(mut b: &[u8]) -> bool {
    while !b.is_empty() {
        let Some(key) = varint(&mut b) else {
            return false;
        };
        match key & 7 {
            0 => {
                if varint(&mut b).is_none() {
                    return false;
                }
            }
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                if b.len() < n {
                    return false;
                }
                b = &b[n..];
            }
            2 => {
                let Some(n) = varint(&mut b) else {
                    return false;
                };
                let Ok(n) = usize::try_from(n) else {
                    return false;
                };
                if b.len() < n {
                    return false;
                }
                b = &b[n..];
            }
            3 | 4 => return true,
            _ => return false,
        }
    }
    false
}

/// The decoded request, when the bytes are one Weft must accept.
fn valid_request(bytes: &[u8]) -> Option<SayRequest> {
    SayRequest::decode(bytes).ok().filter(|_| !has_group(bytes))
}

fn valid_reply(bytes: &[u8]) -> bool {
    SayReply::decode(bytes).is_ok() && !has_group(bytes)
}

// ---------------------------------------------------------------------------------------
// A call slot: a `WeftCall` at a fixed address (`weft_call_output` is keyed by it) and the
// memory its pointers point at.

#[derive(Default)]
struct Slot {
    method: Vec<u8>,
    metadata: Vec<u8>,
    message: Vec<u8>,
    status: Vec<u8>,
    out_message: Vec<u8>,
    out_metadata: Vec<u8>,
    route: Vec<u8>,
    /// The sizes the last call reported with `WEFT_E_BUFFER`, while its outputs are kept.
    pending: Option<[usize; 3]>,
    call: Option<Box<WeftCall>>,
}

fn buf(arg: BufArg, store: &mut Vec<u8>) -> WeftBuf {
    let sized = |store: &mut Vec<u8>, n: usize| {
        store.clear();
        store.resize(n, 0xa5);
        WeftBuf::over(store)
    };
    match arg {
        BufArg::Ample => sized(store, 4096),
        BufArg::Small(n) => sized(store, usize::from(n % 64)),
        BufArg::Zero => sized(store, 0),
        BufArg::Huge => sized(store, 1 << 20),
        BufArg::Null => WeftBuf::default(),
        BufArg::NullCap(n) => WeftBuf {
            ptr: std::ptr::null_mut(),
            cap: usize::from(n),
            len: 0,
        },
    }
}

/// A buffer's capacity as the ABI counts it: NULL holds nothing.
fn cap(b: &WeftBuf) -> usize {
    if b.ptr.is_null() { 0 } else { b.cap }
}

/// The bytes Weft wrote into a buffer. `len` is checked against `cap` first.
fn written(b: &WeftBuf) -> Vec<u8> {
    assert!(b.len <= cap(b), "len {} beyond capacity {}", b.len, cap(b));
    if b.len == 0 {
        return Vec::new();
    }
    // SAFETY: `ptr` is a live Vec's buffer of `cap >= len` bytes, which Weft initialised
    // up to `len` (and the Vec was initialised whole when made).
    unsafe { std::slice::from_raw_parts(b.ptr, b.len) }.to_vec()
}

impl Slot {
    /// Points the call at the slot's inputs and fresh output buffers; the call itself keeps
    /// its address.
    fn prepare(
        &mut self,
        nulls: [bool; 3],
        status_code: i32,
        rpc: u64,
        keys_version: u64,
        bufs: Bufs,
    ) -> &mut WeftCall {
        let ptr = |v: &Vec<u8>, null: bool| if null { std::ptr::null() } else { v.as_ptr() };
        let out_message = buf(bufs.message, &mut self.out_message);
        let out_metadata = buf(bufs.metadata, &mut self.out_metadata);
        let route = buf(bufs.route, &mut self.route);
        let call = self.call.get_or_insert_with(Box::default);
        **call = WeftCall {
            method: ptr(&self.method, nulls[0]),
            method_len: self.method.len(),
            metadata: ptr(&self.metadata, nulls[1]),
            metadata_len: self.metadata.len(),
            message: ptr(&self.message, nulls[2]),
            message_len: self.message.len(),
            rpc,
            status_code,
            status_message: self.status.as_ptr(),
            status_message_len: self.status.len(),
            metadata_keys_version: keys_version,
            // Outputs start as garbage: Weft must set what it reports.
            verdict: -7,
            code: -7,
            message_changed: -7,
            metadata_changed: -7,
            out_message,
            out_metadata,
            route,
        };
        call
    }
}

// ---------------------------------------------------------------------------------------
// The model of one runtime.

#[derive(Clone, Copy, PartialEq, Debug)]
enum Installed {
    Known(usize),
    /// A fuzzer-written YAML that loaded: nothing is known of it.
    Unknown,
}

struct Model {
    rt: *mut WeftRuntime,
    word: *const u64,
    capacity: u32,
    /// Every config this runtime installed; a stamped RPC may run any version still alive.
    installed: Vec<Installed>,
    current_yaml: String,
    live: Vec<u64>,
    stale: Vec<u64>,
    counters: WeftCounters,
    dropped: u64,
    stamps: Vec<Vec<u8>>,
    /// The stamp `weft_metadata_keys` gave for each version number.
    stamp_of: HashMap<u64, Vec<u8>>,
    /// Hashes of every response passed as OK: a cache's local reply is one of them.
    responses: HashSet<u64>,
    /// Inputs run on this runtime (a shared one is reopened now and then, so that what its
    /// cache and handle table hold stays bounded).
    uses: u32,
    last_record_time: f64,
    slots: Vec<Slot>,
}

const SLOTS: usize = 3;

impl Model {
    fn open(config: usize, capacity: u32) -> Model {
        let yaml = CString::new(CONFIGS[config].yaml).unwrap();
        // SAFETY: NUL-terminated strings that outlive the call.
        let rt = unsafe {
            weft_open_yaml(
                yaml.as_ptr(),
                base_dir().as_ptr(),
                c"svc".as_ptr(),
                capacity,
            )
        };
        assert!(!rt.is_null(), "open: {}", last_error());
        let word = version_word(rt);
        let mut m = Model {
            rt,
            word,
            capacity,
            installed: vec![Installed::Known(config)],
            current_yaml: CONFIGS[config].yaml.to_owned(),
            live: Vec::new(),
            stale: Vec::new(),
            counters: WeftCounters::default(),
            dropped: 0,
            stamps: Vec::new(),
            stamp_of: HashMap::new(),
            responses: HashSet::new(),
            uses: 0,
            last_record_time: f64::NEG_INFINITY,
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
        };
        assert_eq!(m.version(), 1, "the first version is 1");
        m.after_op();
        m
    }

    fn version(&self) -> u64 {
        // (the version word is checked against this in `after_op`)
        // SAFETY: a live runtime.
        unsafe { weft_version(self.rt) }
    }

    fn counters(&self) -> WeftCounters {
        let mut c = WeftCounters::default();
        // SAFETY: a live runtime and a writable struct.
        let rc = unsafe { weft_counters(self.rt, &mut c) };
        assert_eq!(rc, WEFT_OK, "weft_counters: {}", last_error());
        c
    }

    /// Every version this runtime installed checks (or not) this side's request.
    fn check(&self, f: impl Fn(&Config) -> Check) -> Check {
        let mut all = None;
        for i in &self.installed {
            let c = match i {
                Installed::Known(k) => f(&CONFIGS[*k]),
                Installed::Unknown => Check::Maybe,
            };
            all = match all {
                None => Some(c),
                Some(a) if a == c => Some(a),
                Some(_) => Some(Check::Maybe),
            };
        }
        all.unwrap_or(Check::Maybe)
    }

    fn all_known(&self, f: impl Fn(&Config) -> bool) -> bool {
        self.installed
            .iter()
            .all(|i| matches!(i, Installed::Known(k) if f(&CONFIGS[*k])))
    }

    fn any_known(&self, f: impl Fn(&Config) -> bool) -> bool {
        self.installed.iter().any(|i| {
            matches!(i, Installed::Unknown) || matches!(i, Installed::Known(k) if f(&CONFIGS[*k]))
        })
    }

    /// Every installed config has both edges on `echo.Echo/Say`.
    fn edges_known(&self) -> bool {
        self.all_known(|_| true)
    }

    fn stamp_value(&self, i: u8) -> Vec<u8> {
        if self.stamps.is_empty() {
            return Vec::new();
        }
        self.stamps[usize::from(i) % self.stamps.len()].clone()
    }

    fn metadata(&self, arg: &MetadataArg) -> (Vec<u8>, bool) {
        match arg {
            MetadataArg::Null => (Vec::new(), true),
            MetadataArg::Raw(b) => (b.clone(), false),
            MetadataArg::Entries(entries) => {
                let mut out = Vec::new();
                for e in entries.iter().take(12) {
                    let key: Vec<u8> = match &e.key {
                        KeyArg::Tenant => b"x-tenant".to_vec(),
                        KeyArg::TenantUpper => b"X-Tenant".to_vec(),
                        KeyArg::Bin => b"trace-bin".to_vec(),
                        KeyArg::Version => b"weft-version".to_vec(),
                        KeyArg::Dst => b"dst".to_vec(),
                        KeyArg::Authorization => b"authorization".to_vec(),
                        KeyArg::Empty => Vec::new(),
                        KeyArg::Raw(k) => k.clone(),
                    };
                    let value = match &e.value {
                        ValueArg::Text(s) => s.as_bytes().to_vec(),
                        ValueArg::Bytes(b) => b.clone(),
                        ValueArg::Huge { byte, kib } => vec![*byte; usize::from(*kib) * 1024 + 1],
                        ValueArg::Stamp(i) => self.stamp_value(*i),
                        ValueArg::Empty => Vec::new(),
                    };
                    put(&mut out, &key);
                    put(&mut out, &value);
                }
                (out, false)
            }
        }
    }

    fn rpc_id(&self, arg: &RpcArg) -> u64 {
        match arg {
            RpcArg::Live(i) if !self.live.is_empty() => {
                self.live[usize::from(*i) % self.live.len()]
            }
            RpcArg::Stale(i) if !self.stale.is_empty() => {
                self.stale[usize::from(*i) % self.stale.len()]
            }
            RpcArg::Random(n) => *n,
            _ => 0,
        }
    }

    fn keys_version(&self, arg: &KeysArg) -> u64 {
        match arg {
            KeysArg::Complete => 0,
            KeysArg::Current => self.version(),
            KeysArg::Random(n) => *n,
        }
    }

    /// Checks that hold after every call.
    fn after_op(&mut self) {
        let c = self.counters();
        assert!(
            c.malformed >= self.counters.malformed
                && c.element_errors >= self.counters.element_errors
                && c.iteration_limited >= self.counters.iteration_limited,
            "counters went down: {:?} -> {c:?}",
            self.counters
        );
        assert!(c.iteration_limited <= c.element_errors, "{c:?}");
        // No standard element here fails at run time.
        assert_eq!(c.element_errors, 0, "{c:?}");
        self.counters = c;
        // SAFETY: a live runtime.
        let waiting = unsafe { weft_rpcs_waiting(self.rt) };
        assert_eq!(
            waiting,
            self.live.len() as u64,
            "weft_rpcs_waiting disagrees with the handles given out and not answered"
        );
        if !self.word.is_null() {
            // SAFETY: the word is valid for the life of the process and only read
            // atomically; `AtomicU64` has the layout of `u64`.
            let word = unsafe { (*self.word.cast::<AtomicU64>()).load(Ordering::Acquire) };
            assert_eq!(word, self.version(), "the version word follows the version");
        }
    }

    /// Checks an `rc` against the codes a function may return, and the thread's error
    /// message after a failure.
    fn expect_rc(what: &str, rc: i32, allowed: &[i32]) {
        assert!(
            allowed.contains(&rc),
            "{what} returned {rc} (allowed {allowed:?}): {}",
            last_error()
        );
        // WEFT_E_BUFFER is no failure: only failures set the message.
        if rc != WEFT_OK && rc != WEFT_E_BUFFER {
            let e = last_error();
            assert!(!e.is_empty(), "{what} failed with {rc} and no message");
        }
    }

    /// Checks the outputs of a call that returned `WEFT_OK`: lengths, the verdict's fields,
    /// and the metadata written back. Returns (out_message, out_metadata entries).
    fn check_outputs(
        &self,
        call: &WeftCall,
        input_metadata: &[(Vec<u8>, Vec<u8>)],
    ) -> (Vec<u8>, Option<Vec<(Vec<u8>, Vec<u8>)>>) {
        assert!(
            matches!(
                call.verdict,
                WEFT_VERDICT_FORWARD | WEFT_VERDICT_REJECT | WEFT_VERDICT_REPLY
            ),
            "verdict {}",
            call.verdict
        );
        assert!(
            matches!(call.message_changed, 0 | 1),
            "message_changed {}",
            call.message_changed
        );
        assert!(
            matches!(call.metadata_changed, 0 | 1),
            "metadata_changed {}",
            call.metadata_changed
        );
        let message = written(&call.out_message);
        let metadata = written(&call.out_metadata);
        written(&call.route);
        if call.verdict == WEFT_VERDICT_REJECT {
            assert!(
                (1..=16).contains(&call.code),
                "reject with code {}",
                call.code
            );
            assert_eq!(call.message_changed, 1, "a reject carries its status text");
            assert!(
                std::str::from_utf8(&message).is_ok(),
                "status text is not UTF-8: {message:?}"
            );
        }
        if call.verdict == WEFT_VERDICT_REPLY {
            assert_eq!(call.message_changed, 1, "a reply carries its message");
        }
        if call.metadata_changed == 0 {
            return (message, None);
        }
        let entries = parse_metadata(&metadata)
            .unwrap_or_else(|| panic!("out_metadata is not the ABI's encoding: {metadata:?}"));
        for (k, _) in &entries {
            assert!(
                !k.iter().any(u8::is_ascii_uppercase),
                "out key {k:?} is not lower-case"
            );
        }
        if call.verdict == WEFT_VERDICT_FORWARD {
            // No element in these configs writes a header: every entry passed in comes back
            // (keys lower-cased), the stamp aside, which the first hop sets.
            let mut out: Vec<_> = entries
                .iter()
                .filter(|(k, _)| k != b"weft-version")
                .cloned()
                .collect();
            let mut inp: Vec<_> = input_metadata
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                .filter(|(k, _)| k != b"weft-version")
                .collect();
            out.sort();
            inp.sort();
            assert_eq!(
                summary(&out),
                summary(&inp),
                "a forward's metadata lost or gained entries"
            );
        }
        (message, Some(entries))
    }

    // -----------------------------------------------------------------------------------

    fn request(
        &mut self,
        slot_i: u8,
        side: SideArg,
        method: &MethodArg,
        metadata: &MetadataArg,
        message: &RequestArg,
        keys: &KeysArg,
        bufs: Bufs,
    ) -> u64 {
        let method = method_arg(method);
        let (md, md_null) = self.metadata(metadata);
        let (msg, msg_null) = request_arg(message);
        let keys_version = self.keys_version(keys);
        let side_n = side_arg(side);
        let before = self.counters;
        let waiting_live = self.live.clone();

        let md_entries = if md_null {
            Some(Vec::new())
        } else {
            parse_metadata(&md)
        };
        let args_ok = (side_n == WEFT_SIDE_CLIENT || side_n == WEFT_SIDE_SERVER)
            && !(method.null && !method.bytes.is_empty())
            && (method.null || std::str::from_utf8(&method.bytes).is_ok())
            && md_entries.is_some()
            && !(msg_null && !msg.is_empty());
        let has_stamp = md_entries.as_ref().is_some_and(|e| {
            e.iter()
                .any(|(k, _)| k.eq_ignore_ascii_case(b"weft-version"))
        });

        let slot = &mut self.slots[usize::from(slot_i) % SLOTS];
        slot.method = method.bytes.clone();
        slot.metadata = md;
        slot.message = msg.clone();
        slot.status.clear();
        slot.pending = None;
        let call = slot.prepare(
            [method.null, md_null, msg_null],
            0,
            u64::MAX,
            keys_version,
            bufs,
        );
        let call_ptr: *mut WeftCall = call;
        // SAFETY: a live runtime; the call's pointers are NULL only with length 0 or where
        // the ABI checks for NULL first, else point at the slot's Vecs, which outlive the
        // call; the output buffers are the slot's own, apart from every input.
        let rc = unsafe { weft_request(self.rt, side_n, call_ptr) };
        // SAFETY: the call is the slot's, not used by Weft after the call returned.
        let call = unsafe { &*call_ptr };
        Self::expect_rc(
            "weft_request",
            rc,
            &[
                WEFT_OK,
                WEFT_E_ARGUMENT,
                WEFT_E_NO_EDGE,
                WEFT_E_BUFFER,
                WEFT_E_METADATA,
            ],
        );
        let after = self.counters();
        let malformed = after.malformed - before.malformed.min(after.malformed);
        assert!(
            malformed <= 1,
            "one request counted {malformed} times as malformed"
        );

        if !args_ok {
            assert_eq!(rc, WEFT_E_ARGUMENT, "a bad argument was not refused");
        }
        if args_ok && method.say == Some(false) {
            assert_eq!(rc, WEFT_E_NO_EDGE, "a method no edge names");
        }
        if args_ok && method.say == Some(true) && self.edges_known() && keys_version == 0 {
            assert!(
                rc == WEFT_OK || rc == WEFT_E_BUFFER,
                "{rc}: {}",
                last_error()
            );
        }
        if rc != WEFT_OK && rc != WEFT_E_BUFFER {
            assert_eq!(call.rpc, 0, "a handle after an error ({rc})");
            assert_eq!(
                malformed, 0,
                "a failed call ({rc}) counted a malformed request"
            );
            self.after_op();
            assert_eq!(self.live, waiting_live);
            return 0;
        }
        let say = args_ok && method.say == Some(true) && self.edges_known();
        if args_ok && method.say == Some(false) {
            panic!("a method no edge names was run (rc {rc})");
        }
        if keys_version != 0 && !(1..=self.version()).contains(&keys_version) {
            panic!("metadata keys of version {keys_version}, which never was, were accepted");
        }
        assert!(
            matches!(
                call.verdict,
                WEFT_VERDICT_FORWARD | WEFT_VERDICT_REJECT | WEFT_VERDICT_REPLY
            ),
            "verdict {}",
            call.verdict
        );
        if call.verdict != WEFT_VERDICT_FORWARD {
            assert_eq!(call.rpc, 0, "a reject or reply has nothing to answer");
        }
        if call.rpc != 0 {
            assert!(
                !self.live.contains(&call.rpc),
                "handle {} given out twice",
                call.rpc
            );
            self.live.push(call.rpc);
        }
        let rejected_malformed = call.verdict == WEFT_VERDICT_REJECT && call.code == 3;
        if malformed == 1 {
            assert!(
                rejected_malformed,
                "counted malformed but verdict {} code {}",
                call.verdict, call.code
            );
        }
        let decoded = valid_request(&msg);
        if say && keys_version == 0 {
            let side_i = usize::from(side_n == WEFT_SIDE_SERVER);
            let check = self.check(|c| c.request_check[side_i]);
            match (&decoded, check) {
                (Some(_), _) => assert_eq!(malformed, 0, "a valid request counted as malformed"),
                (None, Check::Always) => {
                    assert!(
                        rejected_malformed,
                        "a malformed request was not refused: verdict {} code {}",
                        call.verdict, call.code
                    );
                    assert_eq!(malformed, 1, "a refused malformed request was not counted");
                }
                (None, Check::Never) => {
                    assert_eq!(
                        malformed, 0,
                        "a chain that reads no field counted a malformed request"
                    );
                    assert!(
                        !rejected_malformed,
                        "a chain that reads no field refused a request as malformed"
                    );
                }
                (None, Check::Maybe) => {
                    assert_eq!(
                        malformed == 1,
                        rejected_malformed,
                        "INVALID_ARGUMENT without the count, or the reverse"
                    );
                }
            }
            if let Some(r) = &decoded
                && self.all_known(|c| c.firewall_only[side_i])
                && self.check(|c| c.request_check[side_i]) != Check::Never
            {
                if r.user == "mallory" && self.all_known(|c| c.yaml.contains(FIREWALL)) {
                    assert_eq!(
                        (call.verdict, call.code),
                        (WEFT_VERDICT_REJECT, 7),
                        "the firewall let mallory in"
                    );
                } else if r.user != "mallory" {
                    assert_eq!(
                        call.verdict, WEFT_VERDICT_FORWARD,
                        "nothing here refuses user {:?}",
                        r.user
                    );
                }
            }
            if call.verdict == WEFT_VERDICT_REPLY {
                assert!(
                    self.any_known(|c| c.yaml.contains("cache")),
                    "a local reply without a cache"
                );
            }
        } else if !say && !self.edges_known() && decoded.is_some() {
            assert_eq!(malformed, 0, "a valid request counted as malformed");
        }
        if rc == WEFT_E_BUFFER {
            let c = call;
            let sizes = [c.out_message.len, c.out_metadata.len, c.route.len];
            assert!(
                sizes[0] > cap(&c.out_message)
                    || sizes[1] > cap(&c.out_metadata)
                    || sizes[2] > cap(&c.route),
                "WEFT_E_BUFFER with everything fitting: {sizes:?}"
            );
            self.slots[usize::from(slot_i) % SLOTS].pending = Some(sizes);
            self.after_op();
            return call.rpc;
        }
        let (out_msg, out_md) = self.check_outputs(call, md_entries.as_deref().unwrap_or(&[]));
        if call.verdict == WEFT_VERDICT_FORWARD {
            assert_eq!(
                call.message_changed, 0,
                "no element here rewrites a request"
            );
        }
        if call.verdict == WEFT_VERDICT_REJECT && malformed == 1 {
            let text = String::from_utf8_lossy(&out_msg);
            assert!(text.starts_with("malformed request: "), "{text}");
        }
        if call.verdict == WEFT_VERDICT_REPLY {
            assert!(
                self.responses.contains(&hash(&out_msg)),
                "a local reply that no server sent: {out_msg:?}"
            );
        }
        if side_n == WEFT_SIDE_CLIENT && call.verdict == WEFT_VERDICT_FORWARD && !has_stamp {
            assert_eq!(
                call.metadata_changed, 1,
                "the first hop stamps weft-version"
            );
            let out = out_md.unwrap_or_default();
            let stamps: Vec<_> = out.iter().filter(|(k, _)| k == b"weft-version").collect();
            assert_eq!(stamps.len(), 1, "one stamp");
            let stamp = &stamps[0].1;
            // `<digest>/<service>`: the version's digest and the service calling.
            assert!(stamp.len() > WEFT_STAMP_LEN, "stamp {stamp:?}");
            let (digest, service) = stamp.split_at(WEFT_STAMP_LEN);
            assert!(digest.iter().all(u8::is_ascii_hexdigit), "stamp {stamp:?}");
            assert_eq!(service, b"/svc", "stamp {stamp:?}");
            if let Some(known) = self.stamp_of.get(&self.version()) {
                assert_eq!(digest, known, "the stamp is not the current version's");
            }
            if !self.stamps.contains(stamp) {
                self.stamps.push(stamp.clone());
            }
        }
        self.after_op();
        call.rpc
    }

    #[allow(clippy::too_many_arguments)]
    fn response(
        &mut self,
        slot_i: u8,
        side: SideArg,
        rpc: u64,
        method: &MethodArg,
        metadata: &MetadataArg,
        message: &ReplyArg,
        status: &StatusArg,
        bufs: Bufs,
    ) {
        let method = method_arg(method);
        let (md, md_null) = self.metadata(metadata);
        let (status_code, status_text) = status_arg(status);
        let (msg, msg_null) = with_status(reply_arg(message), status_code);
        let side_n = side_arg(side);
        let before = self.counters;
        let md_entries = if md_null {
            Some(Vec::new())
        } else {
            parse_metadata(&md)
        };
        let args_ok = (side_n == WEFT_SIDE_CLIENT || side_n == WEFT_SIDE_SERVER)
            && !(method.null && !method.bytes.is_empty())
            && (method.null || std::str::from_utf8(&method.bytes).is_ok())
            && md_entries.is_some()
            && !(msg_null && !msg.is_empty());
        let live = self.live.contains(&rpc);

        let slot = &mut self.slots[usize::from(slot_i) % SLOTS];
        slot.method = method.bytes.clone();
        slot.metadata = md;
        slot.message = msg.clone();
        slot.status = status_text.clone();
        slot.pending = None;
        let call = slot.prepare([method.null, md_null, msg_null], status_code, rpc, 0, bufs);
        let call_ptr: *mut WeftCall = call;
        // SAFETY: as in `request`; the status message points at the slot's Vec.
        let rc = unsafe { weft_response(self.rt, side_n, call_ptr) };
        // SAFETY: the call is the slot's, not used by Weft after the call returned.
        let call = unsafe { &*call_ptr };
        Self::expect_rc(
            "weft_response",
            rc,
            &[WEFT_OK, WEFT_E_ARGUMENT, WEFT_E_BUFFER],
        );
        let after = self.counters();
        let malformed = after.malformed - before.malformed.min(after.malformed);
        assert!(
            malformed <= 1,
            "one response counted {malformed} times as malformed"
        );
        if !args_ok || !live {
            assert_eq!(
                rc, WEFT_E_ARGUMENT,
                "a bad argument or handle {rpc} was not refused"
            );
        }
        if rc == WEFT_E_ARGUMENT {
            assert_eq!(malformed, 0);
            if args_ok && live {
                panic!(
                    "a live handle with good arguments was refused: {}",
                    last_error()
                );
            }
            // A refused call leaves the handle answerable (checked before it is taken).
            self.after_op();
            return;
        }
        // The handle is answered.
        self.live.retain(|&h| h != rpc);
        self.stale.push(rpc);
        assert!(
            matches!(call.verdict, WEFT_VERDICT_FORWARD | WEFT_VERDICT_REJECT),
            "weft_response never replies: verdict {}",
            call.verdict
        );
        let rejected_malformed = call.verdict == WEFT_VERDICT_REJECT && call.code == 3;
        self.check_response_verdict(
            call,
            status_code,
            &msg,
            malformed,
            rejected_malformed,
            side_n,
        );
        if rc == WEFT_E_BUFFER {
            let c = call;
            let sizes = [c.out_message.len, c.out_metadata.len, c.route.len];
            self.slots[usize::from(slot_i) % SLOTS].pending = Some(sizes);
        } else {
            let (_, _) = self.check_outputs(call, md_entries.as_deref().unwrap_or(&[]));
            if call.verdict == WEFT_VERDICT_FORWARD {
                assert_eq!(
                    call.message_changed, 0,
                    "no element here rewrites a response"
                );
            }
        }
        self.after_op();
    }

    /// What a response path (`weft_response`, `weft_server_exchange`) must have decided.
    fn check_response_verdict(
        &mut self,
        call: &WeftCall,
        status_code: i32,
        msg: &[u8],
        malformed: u64,
        rejected_malformed: bool,
        side_n: i32,
    ) {
        if status_code != 0 {
            assert_eq!(malformed, 0, "an error response counted as malformed");
            assert_eq!(
                (call.verdict, call.code),
                (WEFT_VERDICT_REJECT, mapped_status(status_code)),
                "the server's status {status_code} did not come back"
            );
            return;
        }
        self.responses.insert(hash(msg));
        if malformed == 1 {
            assert!(
                rejected_malformed,
                "a malformed response counted but not refused"
            );
        }
        let side_i = usize::from(side_n == WEFT_SIDE_SERVER);
        if valid_reply(msg) {
            assert_eq!(malformed, 0, "a valid response counted as malformed");
            if self.edges_known() {
                assert_eq!(
                    call.verdict, WEFT_VERDICT_FORWARD,
                    "a valid response refused"
                );
            }
        } else {
            match self.check(|c| c.response_check[side_i]) {
                Check::Always => assert_eq!((malformed, rejected_malformed), (1, true)),
                Check::Never => {
                    assert_eq!(
                        malformed, 0,
                        "a chain that reads no response field counted one"
                    );
                    assert_eq!(call.verdict, WEFT_VERDICT_FORWARD);
                }
                Check::Maybe => assert_eq!(malformed == 1, rejected_malformed),
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn exchange(
        &mut self,
        slot_i: u8,
        method: &MethodArg,
        metadata: &MetadataArg,
        message: &ReplyArg,
        status: &StatusArg,
        stamp: &StampArg,
        age_ns: u64,
        keys: &KeysArg,
        bufs: Bufs,
    ) {
        let method = method_arg(method);
        let (md, md_null) = self.metadata(metadata);
        let (status_code, status_text) = status_arg(status);
        let (msg, msg_null) = with_status(reply_arg(message), status_code);
        let keys_version = self.keys_version(keys);
        let (stamp, stamp_null) = match stamp {
            StampArg::None => (Vec::new(), false),
            StampArg::Null => (Vec::new(), true),
            StampArg::Seen(i) => (self.stamp_value(*i), false),
            StampArg::Raw(b) => (b.clone(), false),
        };
        let before = self.counters;
        let md_entries = if md_null {
            Some(Vec::new())
        } else {
            parse_metadata(&md)
        };
        let args_ok = !(method.null && !method.bytes.is_empty())
            && (method.null || std::str::from_utf8(&method.bytes).is_ok())
            && md_entries.is_some()
            && !(msg_null && !msg.is_empty())
            && std::str::from_utf8(&stamp).is_ok();

        let slot = &mut self.slots[usize::from(slot_i) % SLOTS];
        slot.method = method.bytes.clone();
        slot.metadata = md;
        slot.message = msg.clone();
        slot.status = status_text;
        slot.pending = None;
        let call = slot.prepare(
            [method.null, md_null, msg_null],
            status_code,
            12345,
            keys_version,
            bufs,
        );
        let call_ptr: *mut WeftCall = call;
        let stamp_ptr = if stamp_null {
            std::ptr::null()
        } else {
            stamp.as_ptr()
        };
        // SAFETY: as in `response`; the stamp is NULL with length 0 or a live Vec.
        let rc = unsafe { weft_server_exchange(self.rt, call_ptr, stamp_ptr, stamp.len(), age_ns) };
        // SAFETY: the call is the slot's, not used by Weft after the call returned.
        let call = unsafe { &*call_ptr };
        Self::expect_rc(
            "weft_server_exchange",
            rc,
            &[
                WEFT_OK,
                WEFT_E_ARGUMENT,
                WEFT_E_NO_EDGE,
                WEFT_E_BUFFER,
                WEFT_E_METADATA,
            ],
        );
        assert_eq!(call.rpc, 0, "an exchange leaves no handle");
        let after = self.counters();
        let malformed = after.malformed - before.malformed.min(after.malformed);
        assert!(malformed <= 1);
        if !args_ok {
            assert_eq!(rc, WEFT_E_ARGUMENT, "a bad argument was not refused");
        }
        if rc != WEFT_OK && rc != WEFT_E_BUFFER {
            assert_eq!(malformed, 0, "an exchange that ran nothing ({rc}) counted");
            self.after_op();
            return;
        }
        if args_ok && method.say == Some(false) {
            panic!("a method no edge names was run");
        }
        if keys_version != 0 && !(1..=self.version()).contains(&keys_version) {
            panic!("keys of version {keys_version}, which never was, were accepted");
        }
        if self.all_known(|c| c.deferrable == Some(false)) {
            panic!("a request path that cannot wait was deferred");
        }
        assert!(
            matches!(call.verdict, WEFT_VERDICT_FORWARD | WEFT_VERDICT_REJECT),
            "an exchange answers as weft_response: verdict {}",
            call.verdict
        );
        let rejected_malformed = call.verdict == WEFT_VERDICT_REJECT && call.code == 3;
        if self.all_known(|c| c.deferrable == Some(true)) {
            self.check_response_verdict(
                call,
                status_code,
                &msg,
                malformed,
                rejected_malformed,
                WEFT_SIDE_SERVER,
            );
        }
        if rc == WEFT_E_BUFFER {
            let c = call;
            let sizes = [c.out_message.len, c.out_metadata.len, c.route.len];
            self.slots[usize::from(slot_i) % SLOTS].pending = Some(sizes);
        } else {
            self.check_outputs(call, md_entries.as_deref().unwrap_or(&[]));
        }
        self.after_op();
    }

    fn call_output(&mut self, slot_i: u8, grow: bool) {
        let slot = &mut self.slots[usize::from(slot_i) % SLOTS];
        let Some(call) = slot.call.as_deref_mut() else {
            return;
        };
        if grow && let Some(sizes) = slot.pending {
            for (store, (b, n)) in [
                &mut slot.out_message,
                &mut slot.out_metadata,
                &mut slot.route,
            ]
            .into_iter()
            .zip(
                [
                    &mut call.out_message,
                    &mut call.out_metadata,
                    &mut call.route,
                ]
                .into_iter()
                .zip(sizes),
            ) {
                store.clear();
                store.resize(n, 0x5a);
                *b = WeftBuf::over(store);
            }
        }
        let pending = slot.pending;
        let call_ptr: *mut WeftCall = call;
        // SAFETY: a live runtime and the slot's call, whose buffers point at the slot's
        // Vecs (grown just now, or as the last call left them), writable for their `cap`.
        let rc = unsafe { weft_call_output(self.rt, call_ptr) };
        // SAFETY: as above.
        let call = unsafe { &*call_ptr };
        Self::expect_rc(
            "weft_call_output",
            rc,
            &[WEFT_OK, WEFT_E_ARGUMENT, WEFT_E_BUFFER],
        );
        match pending {
            None => assert_eq!(
                rc, WEFT_E_ARGUMENT,
                "outputs handed over twice, or never kept"
            ),
            Some(sizes) => {
                assert_ne!(
                    rc,
                    WEFT_E_ARGUMENT,
                    "kept outputs were lost: {}",
                    last_error()
                );
                let lens = [call.out_message.len, call.out_metadata.len, call.route.len];
                assert_eq!(
                    lens, sizes,
                    "the sizes changed between the call and weft_call_output"
                );
                if rc == WEFT_OK {
                    for b in [&call.out_message, &call.out_metadata, &call.route] {
                        written(b);
                    }
                    if call.metadata_changed == 1 {
                        assert!(parse_metadata(&written(&call.out_metadata)).is_some());
                    }
                    if call.verdict == WEFT_VERDICT_REJECT {
                        assert!(std::str::from_utf8(&written(&call.out_message)).is_ok());
                    }
                    self.slots[usize::from(slot_i) % SLOTS].pending = None;
                } else {
                    assert!(!grow, "grown to the sizes asked for and still too small");
                }
            }
        }
        self.after_op();
    }

    fn abandon(&mut self, rpc: u64) {
        // SAFETY: a live runtime; any handle value is allowed.
        unsafe { weft_rpc_abandon(self.rt, rpc) };
        if self.live.contains(&rpc) {
            self.live.retain(|&h| h != rpc);
            self.stale.push(rpc);
        }
        self.after_op();
    }

    fn reload(&mut self, arg: &ReloadArg) {
        let before = self.version();
        let (yaml, dir): (Option<Vec<u8>>, Option<CString>) = match arg {
            ReloadArg::Config(i) => (
                Some(CONFIGS[usize::from(*i) % CONFIGS.len()].yaml.into()),
                Some(base_dir().to_owned()),
            ),
            ReloadArg::Invalid(i) => (
                Some(INVALID[usize::from(*i) % INVALID.len()].into()),
                Some(base_dir().to_owned()),
            ),
            ReloadArg::Raw(s) => (Some(s.as_bytes().to_vec()), Some(base_dir().to_owned())),
            ReloadArg::NonUtf8 => (
                Some(b"edges: \xff\xfe\n".to_vec()),
                Some(base_dir().to_owned()),
            ),
            ReloadArg::NullYaml => (None, Some(base_dir().to_owned())),
            ReloadArg::NullBase => (Some(CONFIGS[0].yaml.into()), None),
            ReloadArg::MissingBase(i) => (
                Some(CONFIGS[usize::from(*i) % CONFIGS.len()].yaml.into()),
                Some(CString::new("/nonexistent/weft-fuzz").unwrap()),
            ),
            ReloadArg::File => {
                // SAFETY: a live runtime.
                let rc = unsafe { weft_reload(self.rt) };
                Self::expect_rc(
                    "weft_reload",
                    rc,
                    &[WEFT_OK, WEFT_E_CONFIG, WEFT_E_ARGUMENT],
                );
                if rc == WEFT_OK {
                    assert_eq!(
                        self.version(),
                        before,
                        "re-reading YAML text changed nothing"
                    );
                } else {
                    assert_eq!(
                        self.version(),
                        before,
                        "a failed reload changed the version"
                    );
                }
                self.after_op();
                return;
            }
        };
        // Text cut at its first NUL, as C would see it.
        let yaml = yaml.map(|mut y| {
            if let Some(n) = y.iter().position(|&b| b == 0) {
                y.truncate(n);
            }
            CString::new(y).unwrap()
        });
        let yaml_ptr = yaml.as_ref().map_or(std::ptr::null(), |y| y.as_ptr());
        let dir_ptr = dir.as_ref().map_or(std::ptr::null(), |d| d.as_ptr());
        // SAFETY: a live runtime; NULL or NUL-terminated strings that outlive the call.
        let rc = unsafe { weft_reload_yaml(self.rt, yaml_ptr, dir_ptr) };
        Self::expect_rc(
            "weft_reload_yaml",
            rc,
            &[WEFT_OK, WEFT_E_CONFIG, WEFT_E_ARGUMENT],
        );
        let text = yaml
            .as_ref()
            .and_then(|y| y.to_str().ok())
            .map(str::to_owned);
        let expected = match arg {
            ReloadArg::Config(_) => Some(WEFT_OK),
            ReloadArg::Invalid(_) | ReloadArg::MissingBase(_) => Some(WEFT_E_CONFIG),
            ReloadArg::NonUtf8 | ReloadArg::NullYaml | ReloadArg::NullBase => Some(WEFT_E_ARGUMENT),
            ReloadArg::Raw(_) | ReloadArg::File => None,
        };
        if let Some(e) = expected {
            assert_eq!(rc, e, "reload {arg:?}: {}", last_error());
        }
        if rc != WEFT_OK {
            assert_eq!(
                self.version(),
                before,
                "a failed reload changed the version"
            );
        } else {
            let text = text.unwrap();
            if text == self.current_yaml {
                assert_eq!(self.version(), before, "the same config installed again");
            } else {
                assert_eq!(
                    self.version(),
                    before + 1,
                    "a new config is the next version"
                );
                let known = CONFIGS.iter().position(|c| c.yaml == text);
                self.installed
                    .push(known.map_or(Installed::Unknown, Installed::Known));
                self.current_yaml = text;
            }
        }
        self.after_op();
    }

    fn records(&mut self, cap_n: u16, null_out: bool, null_ptr: bool, null_dropped: bool) {
        let mut store = vec![0u8; usize::from(cap_n)];
        let mut out = if null_ptr {
            WeftBuf::default()
        } else {
            WeftBuf::over(&mut store)
        };
        let mut dropped = u64::MAX;
        let out_ptr: *mut WeftBuf = if null_out {
            std::ptr::null_mut()
        } else {
            &mut out
        };
        let dropped_ptr: *mut u64 = if null_dropped {
            std::ptr::null_mut()
        } else {
            &mut dropped
        };
        // SAFETY: a live runtime; `out` is NULL or a buffer over `store`, writable for its
        // `cap`; `dropped` is NULL or writable.
        let rc = unsafe { weft_records(self.rt, out_ptr, dropped_ptr) };
        Self::expect_rc(
            "weft_records",
            rc,
            &[WEFT_OK, WEFT_E_ARGUMENT, WEFT_E_BUFFER],
        );
        if null_out || self.capacity == 0 {
            assert_eq!(rc, WEFT_E_ARGUMENT);
            self.after_op();
            return;
        }
        assert_ne!(rc, WEFT_E_ARGUMENT, "{}", last_error());
        if !null_dropped {
            assert!(
                dropped >= self.dropped,
                "dropped went down: {} -> {dropped}",
                self.dropped
            );
            self.dropped = dropped;
        }
        if rc == WEFT_E_BUFFER {
            assert!(
                out.len > cap(&out),
                "WEFT_E_BUFFER for a record of {} bytes in {}",
                out.len,
                cap(&out)
            );
        } else {
            let bytes = written(&out);
            self.check_records(&bytes);
        }
        self.after_op();
    }

    /// Whole records, framed as docs/c-abi.md's table says, with JSON values.
    fn check_records(&mut self, mut b: &[u8]) {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> &'a [u8] {
            assert!(b.len() >= n, "a record cut short");
            let (head, rest) = b.split_at(n);
            *b = rest;
            head
        }
        fn text<'a>(b: &mut &'a [u8]) -> &'a str {
            let n = u32::from_le_bytes(take(b, 4).try_into().unwrap()) as usize;
            std::str::from_utf8(take(b, n)).expect("a record's text is UTF-8")
        }
        while !b.is_empty() {
            let element = text(&mut b);
            let channel = text(&mut b);
            let _rpc = u64::from_le_bytes(take(&mut b, 8).try_into().unwrap());
            let time = f64::from_le_bytes(take(&mut b, 8).try_into().unwrap());
            let value: serde_json::Value =
                serde_json::from_str(text(&mut b)).expect("a record's value is JSON");
            assert!(time.is_finite(), "record time {time}");
            assert!(
                time >= self.last_record_time,
                "records out of order: {} then {time}",
                self.last_record_time
            );
            self.last_record_time = time;
            match (element, channel) {
                ("logging", "log") => {
                    let o = value.as_object().expect("a log record is an object");
                    assert!(
                        (o.contains_key("message") && o.contains_key("headers"))
                            || (o.contains_key("status") && o.contains_key("message")),
                        "{value}"
                    );
                }
                ("metrics", "latency") => {
                    let l = value.as_f64().expect("a latency is a number");
                    assert!(l.is_finite(), "latency {l}");
                }
                other => panic!("a record from {other:?}"),
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn metadata_keys(
        &mut self,
        side: SideArg,
        method: &MethodArg,
        cap_n: u8,
        null_out: bool,
        null_version: bool,
        null_messages: bool,
        null_stamp: bool,
    ) {
        let method = method_arg(method);
        let mut store = vec![0u8; usize::from(cap_n)];
        let mut out = WeftBuf::over(&mut store);
        let (mut version, mut messages, mut stamp) = (u64::MAX, u32::MAX, [0u8; WEFT_STAMP_LEN]);
        let side_n = side_arg(side);
        let method_ptr = if method.null {
            std::ptr::null()
        } else {
            method.bytes.as_ptr()
        };
        // SAFETY: a live runtime; the method is NULL or a live Vec of its length; the other
        // pointers are NULL or point at locals of the right size.
        let rc = unsafe {
            weft_metadata_keys(
                self.rt,
                side_n,
                method_ptr,
                method.bytes.len(),
                if null_out {
                    std::ptr::null_mut()
                } else {
                    &mut out
                },
                if null_version {
                    std::ptr::null_mut()
                } else {
                    &mut version
                },
                if null_messages {
                    std::ptr::null_mut()
                } else {
                    &mut messages
                },
                if null_stamp {
                    std::ptr::null_mut()
                } else {
                    stamp.as_mut_ptr()
                },
            )
        };
        Self::expect_rc(
            "weft_metadata_keys",
            rc,
            &[WEFT_OK, WEFT_E_ARGUMENT, WEFT_E_NO_EDGE, WEFT_E_BUFFER],
        );
        let args_ok = (side_n == WEFT_SIDE_CLIENT || side_n == WEFT_SIDE_SERVER)
            && !(method.null && !method.bytes.is_empty())
            && (method.null || std::str::from_utf8(&method.bytes).is_ok())
            && !null_out
            && !null_version;
        if !args_ok {
            assert_eq!(rc, WEFT_E_ARGUMENT);
        }
        if args_ok && method.say == Some(false) {
            assert_eq!(rc, WEFT_E_NO_EDGE);
        }
        if args_ok && method.say == Some(true) && self.edges_known() {
            assert!(
                rc == WEFT_OK || rc == WEFT_E_BUFFER,
                "{rc}: {}",
                last_error()
            );
        }
        if rc == WEFT_OK || rc == WEFT_E_BUFFER {
            assert!(
                version == 0 || version == self.version(),
                "keys of version {version}"
            );
            if !null_messages {
                assert_eq!(messages & !7, 0, "messages {messages:#x}");
                if version == 0 {
                    assert_eq!(
                        messages & 3,
                        3,
                        "a chain that sees every key sees the messages"
                    );
                }
                if side_n == WEFT_SIDE_CLIENT {
                    assert_eq!(messages & 4, 0, "only a server defers");
                }
            }
            if !null_stamp {
                assert!(stamp.iter().all(u8::is_ascii_hexdigit), "stamp {stamp:?}");
                let known = self
                    .stamp_of
                    .entry(self.version())
                    .or_insert_with(|| stamp.to_vec());
                assert_eq!(known.as_slice(), stamp, "one version, two stamps");
                if !self.stamps.iter().any(|s| s == &stamp) {
                    self.stamps.push(stamp.to_vec());
                }
            }
        }
        if rc == WEFT_E_BUFFER {
            assert!(out.len > cap(&out));
        }
        if rc == WEFT_OK {
            let listed = written(&out);
            let mut rest = listed.as_slice();
            while !rest.is_empty() {
                assert!(rest.len() >= 4, "a key list cut short");
                let n = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
                assert!(rest.len() >= 4 + n, "a key list cut short");
                let key = &rest[4..4 + n];
                assert!(
                    !key.is_empty()
                        && key
                            .iter()
                            .all(|c| (0x21..=0x7e).contains(c) && !c.is_ascii_uppercase()),
                    "key {key:?}"
                );
                rest = &rest[4 + n..];
            }
            if version == 0 {
                assert_eq!(out.len, 0, "keys listed for a chain that sees every key");
            }
        }
        self.after_op();
    }

    /// Each entry point with a NULL runtime: refused, or a no-op.
    fn null_runtime(&mut self, which: u8) {
        let rt: *mut WeftRuntime = std::ptr::null_mut();
        let mut call = WeftCall::default();
        let mut counters = WeftCounters::default();
        let mut out = WeftBuf::default();
        let mut version = 0u64;
        // SAFETY: NULL runtimes are allowed everywhere; every other pointer is a local.
        unsafe {
            match which % 13 {
                0 => assert_eq!(weft_request(rt, 0, &mut call), WEFT_E_ARGUMENT),
                1 => assert_eq!(weft_response(rt, 0, &mut call), WEFT_E_ARGUMENT),
                2 => assert_eq!(
                    weft_server_exchange(rt, &mut call, std::ptr::null(), 0, 0),
                    WEFT_E_ARGUMENT
                ),
                3 => assert_eq!(weft_call_output(rt, &mut call), WEFT_E_ARGUMENT),
                4 => assert_eq!(weft_reload(rt), WEFT_E_ARGUMENT),
                5 => assert_eq!(
                    weft_reload_yaml(rt, c"edges: {}".as_ptr(), base_dir().as_ptr()),
                    WEFT_E_ARGUMENT
                ),
                6 => assert_eq!(weft_counters(rt, &mut counters), WEFT_E_ARGUMENT),
                7 => assert_eq!(
                    weft_records(rt, &mut out, std::ptr::null_mut()),
                    WEFT_E_ARGUMENT
                ),
                8 => assert_eq!(
                    weft_metadata_keys(
                        rt,
                        0,
                        std::ptr::null(),
                        0,
                        &mut out,
                        &mut version,
                        std::ptr::null_mut(),
                        std::ptr::null_mut()
                    ),
                    WEFT_E_ARGUMENT
                ),
                9 => {
                    assert_eq!(weft_version(rt), 0);
                    assert!(weft_version_word(rt).is_null());
                }
                10 => assert_eq!(weft_rpcs_waiting(rt), 0),
                11 => assert_eq!(weft_caller_stamp(rt, &mut out), WEFT_E_ARGUMENT),
                _ => {
                    weft_rpc_abandon(rt, 1);
                    weft_close(rt);
                }
            }
        }
        self.after_op();
    }

    /// Each call entry point with a NULL `WeftCall`: refused.
    fn null_call(&mut self, which: u8) {
        // SAFETY: a live runtime; a NULL call is allowed and refused.
        let rc = unsafe {
            match which % 4 {
                0 => weft_request(self.rt, WEFT_SIDE_CLIENT, std::ptr::null_mut()),
                1 => weft_response(self.rt, WEFT_SIDE_SERVER, std::ptr::null_mut()),
                2 => weft_server_exchange(self.rt, std::ptr::null_mut(), std::ptr::null(), 0, 0),
                _ => weft_call_output(self.rt, std::ptr::null_mut()),
            }
        };
        assert_eq!(rc, WEFT_E_ARGUMENT);
        // SAFETY: a live runtime; NULL `out` is refused.
        assert_eq!(
            unsafe { weft_counters(self.rt, std::ptr::null_mut()) },
            WEFT_E_ARGUMENT
        );
        // SAFETY: as above.
        assert_eq!(
            unsafe { weft_caller_stamp(self.rt, std::ptr::null_mut()) },
            WEFT_E_ARGUMENT
        );
        self.after_op();
    }

    fn abandon_all(&mut self) {
        for rpc in std::mem::take(&mut self.live) {
            // SAFETY: a live runtime and one of its handles.
            unsafe { weft_rpc_abandon(self.rt, rpc) };
            self.stale.push(rpc);
        }
        // SAFETY: a live runtime.
        assert_eq!(
            unsafe { weft_rpcs_waiting(self.rt) },
            0,
            "handles left after abandoning all"
        );
        let n = self.stale.len();
        self.stale.drain(..n.saturating_sub(64));
    }

    fn run(&mut self, ops: &[Op], reloads: bool) {
        for op in ops.iter().take(48) {
            if !reloads && matches!(op, Op::Reload(_)) {
                continue;
            }
            self.op(op);
        }
    }

    fn op(&mut self, op: &Op) {
        match op {
            Op::Request {
                slot,
                side,
                method,
                metadata,
                message,
                keys,
                bufs,
            } => {
                self.request(*slot, *side, method, metadata, message, keys, *bufs);
            }
            Op::Response {
                slot,
                side,
                rpc,
                method,
                metadata,
                message,
                status,
                bufs,
            } => {
                let rpc = self.rpc_id(rpc);
                self.response(*slot, *side, rpc, method, metadata, message, status, *bufs);
            }
            Op::Rpc {
                slot,
                side,
                user,
                body,
                metadata,
                reply,
                status,
            } => {
                let side = if *side {
                    SideArg::Server
                } else {
                    SideArg::Client
                };
                let request = RequestArg::Valid(Request {
                    user: user.clone(),
                    body: body.clone(),
                    priority: 0,
                    tags: Vec::new(),
                });
                let rpc = self.request(
                    *slot,
                    side,
                    &MethodArg::Say,
                    metadata,
                    &request,
                    &KeysArg::Complete,
                    Bufs::AMPLE,
                );
                if rpc != 0 {
                    self.response(
                        *slot,
                        side,
                        rpc,
                        &MethodArg::Say,
                        &MetadataArg::Null,
                        reply,
                        status,
                        Bufs::AMPLE,
                    );
                }
            }
            Op::Exchange {
                slot,
                method,
                metadata,
                message,
                status,
                stamp,
                age_ns,
                keys,
                bufs,
            } => {
                self.exchange(
                    *slot, method, metadata, message, status, stamp, *age_ns, keys, *bufs,
                );
            }
            Op::CallOutput { slot, grow } => self.call_output(*slot, *grow),
            Op::Abandon(rpc) => {
                let rpc = self.rpc_id(rpc);
                self.abandon(rpc);
            }
            Op::Reload(arg) => self.reload(arg),
            Op::Counters { null_out } => {
                if *null_out {
                    // SAFETY: a live runtime; NULL `out` is refused.
                    assert_eq!(
                        unsafe { weft_counters(self.rt, std::ptr::null_mut()) },
                        WEFT_E_ARGUMENT
                    );
                }
                self.after_op();
            }
            Op::Records {
                cap,
                null_out,
                null_ptr,
                null_dropped,
            } => {
                self.records(*cap, *null_out, *null_ptr, *null_dropped);
            }
            Op::MetadataKeys {
                side,
                method,
                cap,
                null_out,
                null_version,
                null_messages,
                null_stamp,
            } => {
                self.metadata_keys(
                    *side,
                    method,
                    *cap,
                    *null_out,
                    *null_version,
                    *null_messages,
                    *null_stamp,
                );
            }
            Op::NullRuntime(w) => self.null_runtime(*w),
            Op::NullCall(w) => self.null_call(*w),
        }
    }

    fn close(mut self, abandon: bool) {
        if abandon {
            self.abandon_all();
        }
        // SAFETY: the runtime is live and no call is in flight; it is not used after.
        unsafe { weft_close(self.rt) };
    }
}

fn hash(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Entries as text, so a failed comparison reads.
fn summary(entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<String> {
    entries
        .iter()
        .map(|(k, v)| {
            let v = if v.len() > 40 {
                format!("{} bytes", v.len())
            } else {
                format!("{v:?}")
            };
            format!("{}={v}", String::from_utf8_lossy(k))
        })
        .collect()
}

fn last_error() -> String {
    // SAFETY: `weft_last_error` returns a NUL-terminated string valid until this thread's
    // next call into Weft, and it is copied before that.
    unsafe { CStr::from_ptr(weft_last_error() as *const c_char) }
        .to_string_lossy()
        .into_owned()
}

/// `weft_version_word` for a new runtime, or NULL once enough words are kept. Each word
/// lives as long as the process (the contract), so they are kept reachable here, where the
/// leak checker sees them, and their number is bounded.
fn version_word(rt: *mut WeftRuntime) -> *const u64 {
    static WORDS: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
    let mut words = WORDS.lock().unwrap();
    if words.len() >= 100_000 {
        return std::ptr::null();
    }
    // SAFETY: a live runtime; called once per runtime, as the contract asks.
    let word = unsafe { weft_version_word(rt) };
    assert!(!word.is_null());
    words.push(word as usize);
    word
}

fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the first thing this target does, before any runtime (the only thing that
        // starts threads here, and with WEFT_WATCH_MS=0 none) exists; libFuzzer runs inputs
        // on this one thread.
        unsafe {
            std::env::set_var("WEFT_SEED", "7");
            std::env::set_var("WEFT_WATCH_MS", "0");
        }
    });
}

/// Set `WEFT_FUZZ_FRESH=1` to open a runtime for every input, so that an input found
/// with shared runtimes replays alone.
fn fresh_only() -> bool {
    static FRESH: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FRESH.get_or_init(|| std::env::var_os("WEFT_FUZZ_FRESH").is_some_and(|v| v == "1"))
}

thread_local! {
    /// Runtimes kept between inputs, by (config, record capacity): opening one compiles its
    /// chains, which took 80 ms an input under AddressSanitizer.
    static SHARED: std::cell::RefCell<HashMap<(usize, u32), Model>> =
        std::cell::RefCell::new(HashMap::new());
}

/// The shared runtimes' addresses, in a static the leak checker scans at exit (it no
/// longer sees the thread-local map then); they are open until the process ends.
static KEPT: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

fuzz_target!(|input: Input| {
    setup();
    let capacity = match input.capacity {
        Capacity::None => 0,
        Capacity::One => 1,
        Capacity::Few => 4,
        Capacity::Many => 64,
    };
    let config = usize::from(input.config) % CONFIGS.len();
    // An input that reloads gets a runtime of its own: what the oracles know of a runtime
    // depends on every config it ever installed.
    let reloads = input.reloads % 8 == 0;
    if fresh_only() || (reloads && input.ops.iter().any(|op| matches!(op, Op::Reload(_)))) {
        let mut m = Model::open(config, capacity);
        m.run(&input.ops, reloads);
        m.close(input.abandon_at_end);
        return;
    }
    SHARED.with_borrow_mut(|shared| {
        let key = (config, capacity);
        let m = shared.entry(key).or_insert_with(|| {
            let m = Model::open(config, capacity);
            KEPT.lock().unwrap().push(m.rt as usize);
            m
        });
        m.run(&input.ops, false);
        m.abandon_all();
        m.after_op();
        m.uses += 1;
        if m.uses >= 500
            && let Some(m) = shared.remove(&key)
        {
            KEPT.lock().unwrap().retain(|&rt| rt != m.rt as usize);
            m.close(input.abandon_at_end);
        }
    });
});
