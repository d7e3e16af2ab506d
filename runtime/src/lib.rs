//! Weft runtime: the in-process engine (versions, dispatch, consistent updates), the config
//! watcher, and the C ABI the language bindings link against. See docs/engine.md.

pub mod engine;
pub mod error;
#[allow(unsafe_code)]
pub mod ffi;
mod handles;
pub mod metadata;
pub mod placement;
pub mod records;
pub mod version;
mod watch;

pub use engine::{
    Engine, Forwarded, Metadata, Reloaded, RequestOutcome, ResponseOutcome, Rpc, RpcCounters,
    ServerResponse, Verdict, VersionStats,
};
pub use error::EngineError;
pub use version::{ConfigSource, EngineOptions};
pub use weft_ir::config::Side;
