//! What loading warned of reaches the binding (`weft_warnings`), which logs it: a config
//! that type-checks but silently does nothing (a firewall denying an enum value by name)
//! otherwise runs without anyone told, since operators of a service rarely run
//! `weft check --config` on what the runtime loads.
// Drives the library through its C ABI, as a binding does.
#![allow(unsafe_code)]
// Helpers outside #[test] functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::ffi::CString;
use std::path::PathBuf;

use weft_runtime::ffi::{
    WEFT_E_ARGUMENT, WEFT_E_BUFFER, WEFT_OK, WeftBuf, WeftRuntime, weft_close, weft_open_yaml,
    weft_reload_yaml, weft_warnings,
};

/// A firewall on the enum field `speed` of `diag.Shop/Track` (`Speed`: `EXPRESS` is 2).
fn config(deny: &str) -> CString {
    CString::new(format!(
        "protos: [shop.proto]\nedges:\n  shop:\n    from: app\n    to: shop\n    method: diag.Shop/Track\n    client:\n      - firewall: {{field: speed, deny: [{deny}]}}\n"
    ))
    .unwrap()
}

fn base() -> CString {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ir/tests/diagnostics");
    CString::new(dir.display().to_string()).unwrap()
}

/// The runtime's warnings, read with a buffer grown once as a binding does.
fn warnings(rt: *const WeftRuntime) -> String {
    let mut small = [0u8; 8];
    let mut out = WeftBuf::over(&mut small);
    // SAFETY: a live runtime and a buffer writable for its cap.
    let rc = unsafe { weft_warnings(rt, &mut out) };
    if rc == WEFT_OK {
        return String::from_utf8(small[..out.len].to_vec()).unwrap();
    }
    assert_eq!(rc, WEFT_E_BUFFER);
    let mut big = vec![0u8; out.len];
    let mut out = WeftBuf::over(&mut big);
    // SAFETY: as above; the buffer now has the size the library asked for.
    assert_eq!(unsafe { weft_warnings(rt, &mut out) }, WEFT_OK);
    assert_eq!(out.len, big.len(), "exactly the size asked for");
    String::from_utf8(big).unwrap()
}

#[test]
fn the_binding_gets_what_loading_warned_of_and_a_reload_replaces_it() {
    let (yaml, base) = (config("EXPRESS"), base());
    // SAFETY: NUL-terminated strings that outlive the call.
    let rt = unsafe { weft_open_yaml(yaml.as_ptr(), base.as_ptr(), c"app".as_ptr(), 0) };
    assert!(!rt.is_null(), "the version runs despite the warning");
    let said = warnings(rt);
    assert_eq!(said.matches("warning:").count(), 1, "{said}");
    assert!(
        said.contains("`deny` has `EXPRESS`, the name of value 2 of enum `diag.Speed`"),
        "{said}"
    );
    assert!(said.contains("write the number, quoted: '2'"), "{said}");

    // Fixed: nothing left to say.
    let fixed = config("'2'");
    // SAFETY: a live runtime and NUL-terminated strings.
    assert_eq!(
        unsafe { weft_reload_yaml(rt, fixed.as_ptr(), base.as_ptr()) },
        WEFT_OK
    );
    assert_eq!(warnings(rt), "");

    // SAFETY: a live runtime; a NULL `out` is an argument error, not a crash. NULL `rt`
    // is refused too. Closed once.
    unsafe {
        assert_eq!(weft_warnings(rt, std::ptr::null_mut()), WEFT_E_ARGUMENT);
        let mut out = WeftBuf::over(&mut []);
        assert_ne!(weft_warnings(std::ptr::null(), &mut out), WEFT_OK);
        weft_close(rt);
    }
}
