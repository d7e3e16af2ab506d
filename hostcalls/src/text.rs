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

/// Why `set_rpc_header` may not write a header: the checker reports it for literals, and
/// both executors fail the RPC with it for names and values computed at run time. Without
/// the run-time half, a field value carrying CR/LF, or a computed `grpc-status`, reached
/// the wire. The name is the one the write would have used (lower-cased), for the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Pseudo-headers, `grpc-…`, `content-type` and `te` belong to the transport (a
    /// `grpc-status` written into an OK response contradicted its status), `weft-version`
    /// to the engine (it picks the version of the chain a request runs and, on a server
    /// several callers' edges lead into, the edge).
    #[error("header {} belongs to gRPC or to Weft; an element cannot write it", Quoted(.name))]
    Reserved { name: String },
    #[error("the header name is empty; {KEY_CHARS}")]
    EmptyName,
    /// `at` is the byte offset of the first character a key cannot hold.
    #[error("{} is not a gRPC metadata key: {:?} at byte {at}; {KEY_CHARS}", Quoted(.name), .bad)]
    NotAKey { name: String, bad: char, at: usize },
    /// HTTP/2 refuses (or, with CR/LF, splits) anything else in a header value.
    #[error(
        "the value for header {} is not printable ASCII: byte {at} is {}; only a key ending in `-bin` carries other bytes",
        Quoted(.name), Byte(*.byte)
    )]
    NotPrintable { name: String, at: usize, byte: u8 },
}

const KEY_CHARS: &str = "keys are lower-case letters, digits, `-`, `_` and `.`";

/// Whether an element may write header `name` (as messages keep it, [`header_name`]) with
/// `value`: the one rule for literals at check time (`value` `None` when only the name is
/// a literal) and for computed names and values at run time. An empty value, which
/// removes the header, passes; a reserved name cannot be removed either.
pub fn writable_header(name: &str, value: Option<&str>) -> Result<(), HeaderError> {
    let reserved = name.starts_with(':')
        || name.starts_with("grpc-")
        || matches!(name, "content-type" | "te" | "weft-version");
    if reserved {
        return Err(HeaderError::Reserved { name: name.into() });
    }
    if name.is_empty() {
        return Err(HeaderError::EmptyName);
    }
    if let Some((at, bad)) = name
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c)))
    {
        return Err(HeaderError::NotAKey {
            name: name.into(),
            bad,
            at,
        });
    }
    if let Some(v) = value
        && !name.ends_with("-bin")
        && let Some(at) = v.bytes().position(|b| !(0x20..0x7f).contains(&b))
    {
        return Err(HeaderError::NotPrintable {
            name: name.into(),
            at,
            byte: v.as_bytes()[at],
        });
    }
    Ok(())
}

/// A header name in a message: quoted, with control characters escaped (a name may be a
/// field's value), and cut short when long, since the message goes to the caller and to logs.
struct Quoted<'a>(&'a str);

impl std::fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const SHOWN: usize = 64;
        let mut chars = self.0.chars();
        write!(f, "'")?;
        for c in chars.by_ref().take(SHOWN) {
            write!(f, "{}", c.escape_debug())?;
        }
        if chars.next().is_some() {
            write!(f, "…' ({} bytes)", self.0.len())
        } else {
            write!(f, "'")
        }
    }
}

/// A value's byte, as an operator reads it: `0x0d (CR)`.
struct Byte(u8);

impl std::fmt::Display for Byte {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.0 {
            b'\r' => " (CR)",
            b'\n' => " (LF)",
            b'\t' => " (tab)",
            0 => " (NUL)",
            0x7f => " (DEL)",
            0x80.. => " (part of a non-ASCII character)",
            _ => "",
        };
        write!(f, "0x{:02x}{name}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::{HeaderError, header_name, utf8, writable_header};

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

    #[test]
    fn writable_headers_are_metadata_keys_of_the_elements_own_with_printable_values() {
        for ok in ["x-tenant.id_2", "dst", "x-trace-bin", "0"] {
            assert_eq!(writable_header(ok, Some("blue sky ~")), Ok(()), "{ok}");
        }
        // An empty value removes the header; a `-bin` key carries any bytes.
        assert_eq!(writable_header("x-user", Some("")), Ok(()));
        assert_eq!(
            writable_header("x-trace-bin", Some("caf\u{e9}\r\n")),
            Ok(())
        );
        for reserved in [
            "grpc-status",
            ":authority",
            "content-type",
            "te",
            "weft-version",
        ] {
            let e = writable_header(reserved, Some("")).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "header '{reserved}' belongs to gRPC or to Weft; an element cannot write it"
                )
            );
        }
        assert_eq!(writable_header("", None), Err(HeaderError::EmptyName));
        assert_eq!(
            writable_header("x-bad value", None)
                .unwrap_err()
                .to_string(),
            "'x-bad value' is not a gRPC metadata key: ' ' at byte 5; keys are lower-case letters, digits, `-`, `_` and `.`"
        );
        // Only the first 64 characters of a long name, escaped.
        let long = format!("x\n{}", "a".repeat(100));
        assert_eq!(
            writable_header(&long, None).unwrap_err().to_string(),
            format!(
                "'x\\n{}…' (102 bytes) is not a gRPC metadata key: '\\n' at byte 1; keys are lower-case letters, digits, `-`, `_` and `.`",
                "a".repeat(62)
            )
        );
        assert_eq!(
            writable_header("x-tenant", Some("a\r\nInjected: 1"))
                .unwrap_err()
                .to_string(),
            "the value for header 'x-tenant' is not printable ASCII: byte 1 is 0x0d (CR); only a key ending in `-bin` carries other bytes"
        );
        assert_eq!(
            writable_header("x-tenant", Some("caf\u{e9}")),
            Err(HeaderError::NotPrintable {
                name: "x-tenant".into(),
                at: 3,
                byte: 0xc3
            })
        );
        // Without the value (not a literal), only the name is checked.
        assert_eq!(writable_header("x-tenant", None), Ok(()));
    }
}
