//! Weft runtime.
