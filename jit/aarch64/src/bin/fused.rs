//! Runs the aarch64 object of the fused chain (one function per direction)
//! against the interpreter (see the crate's docs).

#[cfg(target_arch = "aarch64")]
mod linked {
    // The object build.rs linked into this binary and the addresses of its functions.
    include!(concat!(env!("OUT_DIR"), "/fused.rs"));
}

#[cfg(target_arch = "aarch64")]
weft_jit_aarch64::host_trampolines!();

#[cfg(target_arch = "aarch64")]
fn main() {
    let functions = linked::functions();
    // SAFETY: build.rs linked `linked::OBJECT` into this binary and `functions` are its
    // segment functions; `host_trampolines!` above defines the host functions it imports.
    #[allow(unsafe_code)]
    unsafe {
        weft_jit_aarch64::run(weft_jit::Fusion::Fused, linked::OBJECT, &functions)
    };
}

#[cfg(not(target_arch = "aarch64"))]
fn main() -> std::process::ExitCode {
    eprintln!("{}", weft_jit_aarch64::NOT_AARCH64);
    std::process::ExitCode::from(2)
}
