//! Runs the aarch64 object of the unfused chain (one function per element and direction)
//! against the interpreter (see the crate's docs).

weft_jit_aarch64::linked_main!("unfused", Unfused);
