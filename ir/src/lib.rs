//! Weft's element language: syntax, proto schemas, type checking, the typed IR, property
//! analysis and the reference interpreter (the semantic oracle for every other executor).
//!
//! Pipeline: [`parser`] (with [`lexer`]) → [`check`] against a [`schema`] → [`ir`] →
//! [`props`] for the planner, [`interp`] to run. [`config`] and [`load`] turn a chain config
//! into checked elements; [`sim`] runs an edge over a trace in virtual time.

pub mod abstraction;
pub mod ast;
pub mod check;
pub mod config;
pub mod cost;
pub mod diag;
mod enum_names;
pub mod equiv;
pub mod eval;
mod explain;
pub mod interp;
pub mod ir;
pub mod json;
pub mod layout;
pub mod lexer;
pub mod load;
pub mod parser;
pub mod placement;
pub mod plan;
pub mod printer;
pub mod props;
pub mod schema;
pub mod sim;
pub mod stdlib;
pub mod term;
pub mod testgen;
pub mod types;
pub mod wire;
pub mod wire_check;
pub mod wire_json;
pub mod yaml_places;

pub use diag::{Diagnostic, Severity, SourceFile, Span};
pub use types::Type;
