//! The engine's errors, worded for the operator who has to fix the config or the call.

use weft_ir::config::ConfigError;
use weft_ir::load::LoadError;
use weft_ir::plan::PlanError;
use weft_jit::JitError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    // The cause is named `error`, not `source`: it is already in the message, and a field
    // named `source` would also be the error's source, printed a second time by `{:#}`.
    #[error("cannot read the Weft config `{path}`: {error}")]
    ReadConfig { path: String, error: std::io::Error },
    /// The YAML itself: unknown keys, bad values (the message has `file:line:col`).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Elements, protos, methods: the message has every diagnostic with its caret.
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("{config}: service `{service}` is neither the `from` nor the `to` of any edge{}", known_services(.service, .known))]
    UnknownService {
        config: String,
        service: String,
        known: Vec<String>,
    },
    /// The service calls others, so it names itself in each call's stamp, a header value.
    #[error(
        "service `{}` is the `from` of an edge, so it names itself in each call's `weft-version` header, where gRPC allows only printable ASCII: name the service in printable ASCII",
        .service.escape_debug()
    )]
    ServiceName { service: String },
    #[error("edge `{edge}`: {error}")]
    Plan { edge: String, error: PlanError },
    #[error(
        "edge `{edge}`, element `{element}` cannot run inside the application: {reason}; this runtime has only the in-process `lib` processor (the node agent, Wasm sandbox and SmartNIC are not built yet)"
    )]
    NeedsOtherProcessor {
        edge: String,
        element: String,
        reason: String,
    },
    #[error("edge `{edge}`, element `{element}`: {message}")]
    Instance {
        edge: String,
        element: String,
        message: String,
    },
    #[error("edge `{edge}`, {side} side, method `{method}`: compiling the chain failed: {error}")]
    Compile {
        edge: String,
        side: &'static str,
        method: String,
        error: JitError,
    },
    #[error("no edge of service `{service}` matches {side}-side method `{method}`")]
    NoEdge {
        service: String,
        side: &'static str,
        method: String,
    },
    /// Edges from several services lead into the method, and the request's `weft-version`
    /// stamp names none of them. The version is the one the RPC would have run in.
    #[error("{}", unknown_caller(.service, .method, .caller.as_deref(), .callers))]
    UnknownCaller {
        service: String,
        method: String,
        caller: Option<String>,
        callers: Vec<String>,
        version: u64,
    },
    #[error(
        "server-side method `{method}` runs request elements in version {version} that need the request itself; run its request path, then its response path"
    )]
    NotDeferrable { method: String, version: u64 },
    #[error("invalid argument: {0}")]
    Argument(String),
    /// A config mistake, so `WEFT_E_CONFIG` through the C ABI, not an argument error.
    #[error(
        "edges `{first}` and `{second}` both apply to {side}-side method `{method}` of service `{service}`; an RPC must belong to one edge"
    )]
    OverlappingEdges {
        first: String,
        second: String,
        side: &'static str,
        method: String,
        service: String,
    },
}

fn unknown_caller(service: &str, method: &str, caller: Option<&str>, callers: &[String]) -> String {
    let quoted: Vec<String> = callers.iter().map(|c| format!("`{c}`")).collect();
    let from = weft_ir::diag::some_of(quoted.iter().map(String::as_str), weft_ir::config::LISTED);
    match caller {
        Some(caller) => format!(
            "service `{service}` has no edge from `{}` into method `{method}`; edges into it come from {from}",
            shown_caller(caller)
        ),
        None => format!(
            "service `{service}` has edges from {from} into method `{method}`, and the request does not say which service it comes from: a Weft client stamps `weft-version: <digest>/<service>` on its calls (`/<service>` on those no edge of its covers), so this one comes from a service without Weft (or with an older Weft), which must send `weft-version: /<service>` itself"
        ),
    }
}

/// The bytes of a caller's service a refusal shows: the stamp is the client's to write (up
/// to grpc-go's 16 MB of headers), and the refusal goes back to it as the status message and
/// into the server's logs. Longer than any service name a config would hold.
const CALLER_SHOWN: usize = 64;

/// `caller` as a refusal shows it: cut to [`CALLER_SHOWN`] bytes, saying how long it was,
/// with control characters escaped.
fn shown_caller(caller: &str) -> String {
    let cut = caller.floor_char_boundary(CALLER_SHOWN);
    let mut shown: String = caller[..cut].escape_debug().collect();
    if cut < caller.len() {
        shown.push_str(&format!("… ({} bytes)", caller.len()));
    }
    shown
}

fn known_services(service: &str, known: &[String]) -> String {
    if known.is_empty() {
        "; the config lists no edges".to_owned()
    } else {
        let guess = weft_ir::diag::did_you_mean(service, known.iter().map(String::as_str))
            .map_or_else(|| ";".to_owned(), |g| format!("; {g}"));
        format!(
            "{guess} services in this config: {}",
            weft_ir::diag::some_of(known.iter().map(String::as_str), weft_ir::config::LISTED)
        )
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::EngineError;

    /// The cause is in the message, and is not also the error's source: printed with its
    /// chain (`{:#}` in the CLI), it would appear twice.
    #[test]
    fn a_cause_in_the_message_is_printed_once() {
        let e = EngineError::ReadConfig {
            path: "weft.yaml".into(),
            error: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        };
        assert_eq!(
            e.to_string(),
            "cannot read the Weft config `weft.yaml`: no such file"
        );
        assert!(e.source().is_none());
    }
}
