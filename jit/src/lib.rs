//! Weft's Cranelift JIT.
//!
//! A chain segment placed in one processor becomes one native function per direction, with
//! every element inlined in chain order ([`compile::Fusion::Fused`]): no per-element
//! dispatch, no dynamic messages, no interpreter. Compiled code reaches the host only through
//! the ABI in [`weft_hostcalls::abi`], whose functions ([`host`]) wrap the very code the
//! reference interpreter runs, so the two executors share every built-in. See docs/jit.md.

pub mod compile;
pub mod difftest;
pub mod error;
pub mod exec;
pub mod host;
pub mod lifetime;
pub mod lower;
pub mod rig;
pub mod sync;

pub use compile::{Compiled, Fusion, compile, compile_object};
pub use error::JitError;
pub use exec::{Buffers, Jit, block_store};
