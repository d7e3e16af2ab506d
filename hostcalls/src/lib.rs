//! The host side of Weft, shared by every executor (interpreter, JIT, Wasm host).
//!
//! Compiled code and the interpreter reach the outside world only through what this crate
//! defines: values, the clock, the random source, state stores, channels and the built-in
//! functions (hashing, AEAD, compression, quantiles…). One implementation of each built-in
//! means one semantics.

pub mod abi;
pub mod builtins;
pub mod channel;
pub mod clock;
pub mod rng;
pub mod state;
pub mod status;
pub mod text;
pub mod value;

pub use builtins::BuiltinError;
pub use channel::{ChannelRecord, ChannelSink};
pub use clock::{Clock, MonotonicClock, VirtualClock};
pub use rng::{RandomSource, SeededRng};
pub use state::{
    CellKind, Combiner, Consistency, InstanceStore, LocalStore, SharedState, StateError,
    StateStore, VarId, VarSpec,
};
pub use status::Code;
pub use text::HeaderError;
pub use value::{Message, MsgKind, Value};
