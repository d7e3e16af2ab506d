//! Weft's element language: syntax, proto schemas, type checking, the typed IR, property
//! analysis and the reference interpreter (the semantic oracle for every other executor).

pub mod schema;
pub mod types;
pub mod wire;

pub use types::Type;
