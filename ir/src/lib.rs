//! Weft's element language: syntax, proto schemas, type checking, the typed IR, property
//! analysis and the reference interpreter (the semantic oracle for every other executor).

pub mod ast;
pub mod diag;
pub mod lexer;
pub mod parser;
pub mod printer;
pub mod schema;
pub mod types;
pub mod wire;

pub use diag::{Diagnostic, Severity, SourceFile, Span};
pub use types::Type;
