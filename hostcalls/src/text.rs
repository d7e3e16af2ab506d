//! Text checks on the per-RPC path.

use std::str::Utf8Error;

/// `std::str::from_utf8`, with a fast path for ASCII. Method names, metadata and most string
/// fields are short ASCII; the standard validator spends about 130 instructions on 20 bytes
/// (callgrind, `runtime/examples/ffi_iters`), an ASCII check a fraction of that. Without the
/// fast path a server RPC took 300 more instructions (4 271 against 3 971), a client RPC 148
/// and the fused benchmark chain 47 (2026-11-23): the one `unsafe` outside the JIT and the C
/// ABI, kept for that.
#[allow(unsafe_code)]
pub fn utf8(bytes: &[u8]) -> Result<&str, Utf8Error> {
    if bytes.is_ascii() {
        // SAFETY: every ASCII byte sequence is valid UTF-8.
        Ok(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes)
    }
}

/// A header name as messages keep it: lower case, as HTTP/2 sends it and as the runtime
/// and the simulator store every key they receive. The checker refuses an upper-case name
/// literal; a computed one (a parameter, a field) is lower-cased here, so
/// `get_rpc_header(rpc, name)` finds the header whatever case `name` has and
/// `set_rpc_header` never makes a second, differently cased key.
pub fn header_name(name: &str) -> std::borrow::Cow<'_, str> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(name.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

#[cfg(test)]
mod tests {
    use super::{header_name, utf8};

    #[test]
    fn header_names_are_lower_cased_only_when_needed() {
        assert!(matches!(
            header_name("x-user"),
            std::borrow::Cow::Borrowed("x-user")
        ));
        assert_eq!(header_name("X-User"), "x-user");
        // Only ASCII letters change: HTTP/2 names are ASCII, others are left to fail there.
        assert_eq!(header_name("X-\u{c9}t\u{e9}"), "x-\u{c9}t\u{e9}");
    }

    #[test]
    fn agrees_with_the_standard_validator() {
        let cases: [&[u8]; 7] = [
            b"",
            b"weft-version",
            "h\u{e9}llo".as_bytes(),
            "\u{1f600} and ascii".as_bytes(),
            &[0xff],
            &[b'a', 0xc3],
            &[0xed, 0xa0, 0x80],
        ];
        for c in cases {
            assert_eq!(utf8(c), std::str::from_utf8(c), "{c:?}");
        }
    }
}
