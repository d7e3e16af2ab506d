//! Helpers shared by the engine tests (a failed unwrap here is a failed test).
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weft_runtime::{EngineOptions, Metadata};

pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

pub mod mesh;

/// Options for tests: no watcher unless asked, a fixed seed.
pub fn options() -> EngineOptions {
    EngineOptions {
        watch_interval: None,
        seed: Some(1),
        ..EngineOptions::default()
    }
}

/// A config of one edge, `frontend->echo` over `echo.Echo/Say` (protos from
/// `examples/echo`), with `client` and `server` as YAML list items (one per line, each
/// `- item`); an empty side has no chain.
pub fn echo_edge(client: &[&str], server: &[&str]) -> String {
    one_edge(
        "echo.proto",
        ("frontend", "echo"),
        "echo.Echo/Say",
        client,
        server,
    )
}

/// A config of one edge `from->to` over `method`, its messages in `proto`, with `client`
/// and `server` as YAML list items (an empty side has no chain).
pub fn one_edge(
    proto: &str,
    (from, to): (&str, &str),
    method: &str,
    client: &[&str],
    server: &[&str],
) -> String {
    let side = |name: &str, items: &[&str]| match items {
        [] => String::new(),
        items => {
            let list: String = items.iter().map(|i| format!("      - {i}\n")).collect();
            format!("    {name}:\n{list}")
        }
    };
    format!(
        "protos: [{proto}]\nedges:\n  {from}->{to}:\n    from: {from}\n    to: {to}\n    method: {method}\n{}{}",
        side("client", client),
        side("server", server)
    )
}

/// Two length-delimited string fields 1 and 2: SayRequest{user, body}, SayReply{body,
/// served_by}.
pub fn two_strings(a: &str, b: &str) -> Vec<u8> {
    let mut out = vec![0x0a, a.len() as u8];
    out.extend_from_slice(a.as_bytes());
    out.push(0x12);
    out.push(b.len() as u8);
    out.extend_from_slice(b.as_bytes());
    out
}

/// A temporary directory for configs with `element_paths: [elements]`: `echo.proto` from
/// `examples/echo`, and `elements/` holding `elements` as (file name, source).
pub fn echo_dir_with_elements(elements: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        examples().join("echo/echo.proto"),
        dir.path().join("echo.proto"),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("elements")).unwrap();
    for (name, source) in elements {
        std::fs::write(dir.path().join("elements").join(name), source).unwrap();
    }
    dir
}

pub fn no_metadata() -> Metadata {
    Metadata::new()
}

/// Waits until `done` holds, checking every few milliseconds, for at most `limit`.
pub fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if done() {
            return true;
        }
        std::thread::park_timeout(Duration::from_millis(5));
    }
    done()
}

use weft_hostcalls::Code;
use weft_runtime::{Engine, ServerResponse, Side, Verdict};

/// What the calling application finally saw.
#[derive(Debug, PartialEq)]
pub enum Seen {
    /// The server answered (`reached`: the server application was called).
    Answer {
        bytes: Vec<u8>,
        headers: Metadata,
        reached: bool,
    },
    Error {
        code: Code,
        message: String,
        reached: bool,
    },
}

/// One RPC through a client engine and a server engine; `server` plays the application.
pub fn round_trip(
    client: &Engine,
    server_engine: &Engine,
    metadata: Metadata,
    request: Vec<u8>,
    server: impl FnOnce(&[u8]) -> ServerResponse,
) -> Seen {
    let method = "/echo.Echo/Say";
    let out = client
        .process_request(Side::Client, method, metadata, request)
        .unwrap();
    let (sent, client_rpc) = match out.verdict {
        Verdict::Forward(f) | Verdict::Route { forward: f, .. } => (f.message, out.rpc),
        Verdict::Reject { code, message } => {
            return Seen::Error {
                code,
                message,
                reached: false,
            };
        }
        Verdict::Reply(m) => {
            return Seen::Answer {
                bytes: m.bytes.clone(),
                headers: m.headers.clone(),
                reached: false,
            };
        }
    };
    let out = server_engine
        .process_request(
            Side::Server,
            method,
            sent.headers.clone(),
            sent.bytes.clone(),
        )
        .unwrap();
    let mut reached = false;
    let back = match out.verdict {
        Verdict::Forward(f) | Verdict::Route { forward: f, .. } => {
            reached = true;
            let answer = server(&f.message.bytes);
            match out.rpc {
                Some(rpc) => server_engine.process_response(rpc, answer).unwrap().verdict,
                None => match answer {
                    ServerResponse::Ok { message, metadata } => {
                        let mut m = weft_hostcalls::Message::response(message);
                        m.headers = metadata;
                        Verdict::Reply(std::sync::Arc::new(m))
                    }
                    ServerResponse::Error { code, message, .. } => {
                        Verdict::Reject { code, message }
                    }
                },
            }
        }
        other => other,
    };
    let response = to_response(back);
    let Some(rpc) = client_rpc else {
        return match response {
            ServerResponse::Ok { message, metadata } => Seen::Answer {
                bytes: message,
                headers: metadata,
                reached,
            },
            ServerResponse::Error { code, message, .. } => Seen::Error {
                code,
                message,
                reached,
            },
        };
    };
    match client.process_response(rpc, response).unwrap().verdict {
        Verdict::Forward(f) | Verdict::Route { forward: f, .. } => Seen::Answer {
            bytes: f.message.bytes.clone(),
            headers: f.message.headers.clone(),
            reached,
        },
        Verdict::Reject { code, message } => Seen::Error {
            code,
            message,
            reached,
        },
        Verdict::Reply(_) => panic!("a response path never replies"),
    }
}

/// What travels back over the network for a server-side verdict.
fn to_response(v: Verdict) -> ServerResponse {
    match v {
        Verdict::Forward(f) | Verdict::Route { forward: f, .. } => ServerResponse::Ok {
            message: f.message.bytes.clone(),
            metadata: f.message.headers.clone(),
        },
        Verdict::Reply(m) => ServerResponse::Ok {
            message: m.bytes.clone(),
            metadata: m.headers.clone(),
        },
        Verdict::Reject { code, message } => ServerResponse::Error {
            code,
            message,
            metadata: Metadata::new(),
        },
    }
}

/// Metadata as the C ABI takes it: each key and value as a u32 LE length and its bytes.
pub fn encode_metadata(pairs: &[(&str, &[u8])]) -> Vec<u8> {
    let mut v = Vec::new();
    for (k, val) in pairs {
        v.extend_from_slice(&(k.len() as u32).to_le_bytes());
        v.extend_from_slice(k.as_bytes());
        v.extend_from_slice(&(val.len() as u32).to_le_bytes());
        v.extend_from_slice(val);
    }
    v
}

/// What `weft_metadata_keys` says of the server side of `echo.Echo/Say`, as a binding asks
/// before it passes a request's metadata: (keys' version, message bits, stamp). Panics
/// unless the call succeeds.
#[allow(unsafe_code)]
pub fn echo_server_keys(
    rt: *mut weft_runtime::ffi::WeftRuntime,
) -> (u64, u32, [u8; weft_runtime::ffi::WEFT_STAMP_LEN]) {
    use weft_runtime::ffi::{WEFT_OK, WEFT_SIDE_SERVER, WeftBuf, weft_metadata_keys};
    let method = b"/echo.Echo/Say";
    let mut keys = [0u8; 256];
    let mut out = WeftBuf::over(&mut keys);
    let (mut version, mut messages) = (u64::MAX, 0u32);
    let mut stamp = [0u8; weft_runtime::ffi::WEFT_STAMP_LEN];
    // SAFETY: the caller passes a live runtime; every pointer is valid and writable for its
    // length.
    let rc = unsafe {
        weft_metadata_keys(
            rt,
            WEFT_SIDE_SERVER,
            method.as_ptr(),
            method.len(),
            &mut out,
            &mut version,
            &mut messages,
            stamp.as_mut_ptr(),
        )
    };
    assert_eq!(rc, WEFT_OK);
    (version, messages, stamp)
}
