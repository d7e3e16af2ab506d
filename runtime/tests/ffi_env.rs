//! The environment variables the C ABI reads at open (docs/c-abi.md): a value that is set
//! but is not a number refuses the open and names the variable, rather than being ignored.
//! One test in its own binary: it changes the process's environment.
// Drives the library through its C ABI, as a binding does.
#![allow(unsafe_code)]
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::{CStr, CString};

use common::{echo_edge, examples};
use weft_runtime::ffi::{WeftRuntime, weft_close, weft_last_error, weft_open_yaml};

/// Opens the echo server with `metrics`, keeping records; the runtime, or the open's error.
fn open() -> Result<*mut WeftRuntime, String> {
    let yaml = CString::new(echo_edge(&[], &["metrics"])).unwrap();
    let dir = CString::new(examples().join("echo").to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated strings that outlive the call.
    let rt = unsafe { weft_open_yaml(yaml.as_ptr(), dir.as_ptr(), c"echo".as_ptr(), 16) };
    if rt.is_null() {
        // SAFETY: valid until this thread's next call into Weft; copied before it.
        let e = unsafe { CStr::from_ptr(weft_last_error()) };
        return Err(e.to_string_lossy().into_owned());
    }
    Ok(rt)
}

fn set(name: &str, value: Option<&str>) {
    // SAFETY: this binary's only test sets the variables between opens, on its own thread;
    // no runtime is open meanwhile, so no thread of the library reads the environment.
    unsafe {
        match value {
            Some(v) => std::env::set_var(name, v),
            None => std::env::remove_var(name),
        }
    }
}

#[test]
fn a_mistyped_number_in_the_environment_refuses_the_open_naming_the_variable() {
    for name in ["WEFT_WATCH_MS", "WEFT_SEED", "WEFT_RECORD_BYTES"] {
        for bad in ["64M", "-1", "", "1e3"] {
            set(name, Some(bad));
            let err = open().map(|rt| {
                // SAFETY: a runtime opened above, closed once.
                unsafe { weft_close(rt) };
            });
            let err = err.expect_err(&format!("{name}={bad} was accepted"));
            assert!(
                err.contains(name) && err.contains(&format!("`{bad}`")),
                "{name}={bad}: {err}"
            );
        }
        // A number, with the spaces a shell file may leave, is taken.
        set(name, Some(" 5 "));
        let rt = open().unwrap_or_else(|e| panic!("{name}=5 was refused: {e}"));
        // SAFETY: the runtime just opened, closed once.
        unsafe { weft_close(rt) };
        set(name, None);
    }
    let rt = open().unwrap();
    // SAFETY: as above.
    unsafe { weft_close(rt) };
}
