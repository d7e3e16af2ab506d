//! The C ABI's metadata encoding: repeated `{u32 LE key_len, key, u32 LE value_len, value}`.
//!
//! Elements see metadata as text. A `-bin` value (binary, whatever its bytes), any other
//! value that is not UTF-8, and any repeated value of a key are kept aside, unseen by
//! elements, and written back unchanged whenever the chain hands the caller new metadata,
//! so they are never lost — unless the chain wrote their key ([`standing`]): then they are
//! superseded. So is every key the segment's elements can neither read nor write
//! ([`Keys::Only`]): decoding a header into an owned map costs allocations on every call,
//! and most chains read none.

use std::borrow::Cow;
use std::collections::BTreeMap;

use smallvec::SmallVec;
use weft_hostcalls::text::utf8;

use crate::engine::Metadata;

/// Which keys elements may see: all of them, or only these (lower-case).
#[derive(Clone, Copy, Debug)]
pub enum Keys<'a> {
    All,
    Only(&'a [String]),
}

impl Keys<'_> {
    fn wants(&self, key: &str) -> bool {
        match self {
            Keys::All => true,
            Keys::Only(keys) => keys.iter().any(|k| k == key),
        }
    }
}

/// Metadata split into what elements see and what passes through untouched. The
/// pass-through entries borrow the caller's buffer, which outlives the call; a few fit
/// without an allocation (a server's stamp is one, on every request).
#[derive(Debug, Default, PartialEq)]
pub struct Decoded<'a> {
    pub visible: Metadata,
    pub passthrough: SmallVec<[Raw<'a>; 2]>,
    /// For each key with repeated values: the value elements see. An element that changed
    /// or removed it changed the key, whose other values then go ([`standing`]). Rare: no
    /// allocation without repeats. A map, not a list: a client chooses how many keys it
    /// repeats, and a list searched per entry made 40 000 of them take seconds.
    pub seen: Seen,
}

/// [`Decoded::seen`].
pub type Seen = BTreeMap<String, String>;

/// One entry as it stands in the buffer, its key validated and lower-cased.
struct Entry<'a> {
    key: Cow<'a, str>,
    value: &'a [u8],
}

/// Every entry of the encoding, or the first malformed one's description.
fn entries(mut bytes: &[u8]) -> impl Iterator<Item = Result<Entry<'_>, String>> {
    let mut entry = 0usize;
    std::iter::from_fn(move || {
        if bytes.is_empty() {
            return None;
        }
        let this = entry;
        entry += 1;
        let Some(key) = take(&mut bytes) else {
            bytes = &[];
            return Some(Err(truncated(this, "key")));
        };
        let Some(value) = take(&mut bytes) else {
            bytes = &[];
            return Some(Err(truncated(this, "value")));
        };
        let key = match utf8(key) {
            Ok(k) if valid_key(key) => k,
            _ => {
                bytes = &[];
                return Some(Err(bad_key(this, key)));
            }
        };
        let key = if key.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(key.to_ascii_lowercase())
        } else {
            Cow::Borrowed(key)
        };
        Some(Ok(Entry { key, value }))
    })
}

/// The value elements would see for `key` (lower-case): its first UTF-8 value. Checks the
/// whole encoding, as [`decode`] does.
pub fn find<'a>(bytes: &'a [u8], key: &str) -> Result<Option<&'a str>, String> {
    // Every call looks up the stamp: one pass over the bytes that checks each entry as
    // `entries` does but builds none (that iterator cost 360 instructions for one entry).
    let mut rest = bytes;
    let mut found = None;
    let mut entry = 0usize;
    while !rest.is_empty() {
        let k = take(&mut rest).ok_or_else(|| truncated(entry, "key"))?;
        let v = take(&mut rest).ok_or_else(|| truncated(entry, "value"))?;
        if !valid_key(k) {
            return Err(bad_key(entry, k));
        }
        // `key` is lower-case, and keys are compared lower-cased; HTTP/2 sends them
        // lower-case, so the byte comparison almost always decides.
        if found.is_none() && (k == key.as_bytes() || k.eq_ignore_ascii_case(key.as_bytes())) {
            found = utf8(v).ok();
        }
        entry += 1;
    }
    Ok(found)
}

/// Decodes the ABI encoding; keys are made lower-case, as gRPC requires. Keys that `keys`
/// leaves out pass through.
pub fn decode<'a>(bytes: &'a [u8], keys: Keys<'_>) -> Result<Decoded<'a>, String> {
    let mut out = Decoded::default();
    for e in entries(bytes) {
        let Entry { key, value } = e?;
        // A `-bin` value is binary even when its bytes happen to be UTF-8: elements never
        // see it, so whether they do cannot depend on the bytes.
        match utf8(value) {
            Ok(v)
                if !key.ends_with("-bin")
                    && keys.wants(&key)
                    && !out.visible.contains_key(key.as_ref()) =>
            {
                out.visible.insert(key.into_owned(), v.to_owned());
            }
            Ok(_) if out.visible.contains_key(key.as_ref()) => {
                if !out.seen.contains_key(key.as_ref()) {
                    let first = out.visible[key.as_ref()].clone();
                    out.seen.insert(key.to_string(), first);
                }
                out.passthrough.push((key, Cow::Borrowed(value)));
            }
            _ => out.passthrough.push((key, Cow::Borrowed(value))),
        }
    }
    Ok(out)
}

/// Whether the chain's metadata `out` supersedes pass-through entry `(key, _)`: the chain
/// changed or removed the value elements saw of its key (`seen`), or set a `-bin` key,
/// whose values elements never see. Written back anyway, `set_rpc_header(rpc, k, 'c')` on
/// a request sent with `k: a, b` reached the server as `k: c, b`.
fn superseded(out: &Metadata, seen: &Seen, (key, _): &Raw<'_>) -> bool {
    if key.ends_with("-bin") {
        return out.contains_key(key.as_ref());
    }
    seen.get(key.as_ref())
        .is_some_and(|first| out.get(key.as_ref()) != Some(first))
}

/// The pass-through entries that still stand once the chain's metadata `out` is written
/// back ([`superseded`]); borrowed, with no copy, when all do.
pub fn standing<'p, 'a>(
    out: &Metadata,
    passthrough: &'p [Raw<'a>],
    seen: &Seen,
) -> Cow<'p, [Raw<'a>]> {
    if passthrough.iter().any(|e| superseded(out, seen, e)) {
        Cow::Owned(
            passthrough
                .iter()
                .filter(|e| !superseded(out, seen, e))
                .cloned()
                .collect(),
        )
    } else {
        Cow::Borrowed(passthrough)
    }
}

/// A key is one or more bytes of printable ASCII other than space (0x21..=0x7E): what keeps
/// control characters, spaces and non-ASCII bytes from a C caller out of the metadata.
/// HTTP/2 header names are narrower (tokens, lower-case, `:` only to start a pseudo-header),
/// but gRPC peers already refuse those, and this runs on every key of every call (the
/// stamp lookup): eight bytes at a time, about the cost of the `is_ascii` it replaced.
fn valid_key(key: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Whether a byte of `w` is below 0x21 or above 0x7E ("hasless" and "hasmore" of
    // Anderson's bit hacks, exact for these bounds).
    let outside = |w: u64| {
        let below = w.wrapping_sub(ONES * 0x21) & !w;
        let above = w.wrapping_add(ONES) | w;
        (below | above) & HIGH != 0
    };
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        if outside(u64::from_le_bytes(std::array::from_fn(|i| c[i]))) {
            return false;
        }
    }
    let rest = chunks.remainder();
    let mut tail = [b'a'; 8];
    tail[..rest.len()].copy_from_slice(rest);
    !key.is_empty() && !outside(u64::from_le_bytes(tail))
}

#[cold]
fn bad_key(entry: usize, key: &[u8]) -> String {
    format!(
        "metadata entry {entry}: a key must be printable ASCII without spaces, as HTTP/2 header names are, got {:?}",
        String::from_utf8_lossy(key)
    )
}

#[cold]
fn truncated(entry: usize, what: &str) -> String {
    format!(
        "metadata entry {entry}: the {what} runs past the end of the buffer (expected repeated {{u32 LE key_len, key, u32 LE value_len, value}})"
    )
}

fn take<'a>(bytes: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (len, rest) = bytes.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
    if rest.len() < len {
        return None;
    }
    let (item, rest) = rest.split_at(len);
    *bytes = rest;
    Some(item)
}

/// A pass-through entry: a key and its raw value.
pub type Raw<'a> = (Cow<'a, str>, Cow<'a, [u8]>);

/// The encoded size of `visible` followed by `passthrough`.
pub fn encoded_len(visible: &Metadata, passthrough: &[Raw<'_>]) -> usize {
    let entry = |k: usize, v: usize| 8 + k + v;
    visible
        .iter()
        .map(|(k, v)| entry(k.len(), v.len()))
        .sum::<usize>()
        + passthrough
            .iter()
            .map(|(k, v)| entry(k.len(), v.len()))
            .sum::<usize>()
}

/// Encodes into `out`, which must hold [`encoded_len`] bytes; returns the bytes written.
pub fn encode_into(visible: &Metadata, passthrough: &[Raw<'_>], out: &mut [u8]) -> usize {
    let mut at = 0;
    let mut put = |b: &[u8]| {
        let len = (b.len() as u32).to_le_bytes();
        out[at..at + 4].copy_from_slice(&len);
        out[at + 4..at + 4 + b.len()].copy_from_slice(b);
        at += 4 + b.len();
    };
    for (k, v) in visible {
        put(k.as_bytes());
        put(v.as_bytes());
    }
    for (k, v) in passthrough {
        put(k.as_bytes());
        put(v);
    }
    at
}

/// Encodes into a new vector (tests, and outputs kept for `weft_call_output`).
pub fn encode(visible: &Metadata, passthrough: &[Raw<'_>]) -> Vec<u8> {
    let mut out = vec![0; encoded_len(visible, passthrough)];
    encode_into(visible, passthrough, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(k: &str, v: &[u8]) -> Raw<'static> {
        (Cow::Owned(k.to_owned()), Cow::Owned(v.to_vec()))
    }

    #[test]
    fn round_trip_keeps_binary_and_repeated_values() {
        let mut visible = Metadata::new();
        visible.insert("user".into(), "alice".into());
        let pass = vec![raw("trace-bin", &[0xff, 0x00, 0xfe]), raw("user", b"bob")];
        let bytes = encode(&visible, &pass);
        assert_eq!(bytes.len(), encoded_len(&visible, &pass));
        let d = decode(&bytes, Keys::All).unwrap();
        assert_eq!(d.visible, visible);
        assert_eq!(d.passthrough.as_slice(), pass.as_slice());
    }

    #[test]
    fn keys_are_lower_cased() {
        let mut v = Metadata::new();
        v.insert("X-User".into(), "a".into());
        let bytes = encode(&v, &[]);
        let d = decode(&bytes, Keys::All).unwrap();
        assert_eq!(d.visible.get("x-user").map(String::as_str), Some("a"));
    }

    #[test]
    fn keys_left_out_pass_through_and_come_back() {
        let mut v = Metadata::new();
        v.insert("user-agent".into(), "grpc-go".into());
        v.insert("weft-version".into(), "abc".into());
        v.insert("X-Tenant".into(), "t1".into());
        let bytes = encode(&v, &[raw("trace-bin", &[0xff])]);
        let only = ["weft-version".to_owned(), "x-tenant".to_owned()];
        let d = decode(&bytes, Keys::Only(&only)).unwrap();
        assert_eq!(
            d.visible.keys().collect::<Vec<_>>(),
            ["weft-version", "x-tenant"]
        );
        assert_eq!(d.passthrough.len(), 2);
        let again = encode(&d.visible, &d.passthrough);
        let all = decode(&again, Keys::All).unwrap();
        assert_eq!(all.visible.len(), 3);
        assert_eq!(all.visible["user-agent"], "grpc-go");
        assert_eq!(all.passthrough.as_slice(), [raw("trace-bin", &[0xff])]);
    }

    #[test]
    fn binary_values_pass_through_even_when_they_are_text() {
        // Whether an element sees a `-bin` value must not depend on its bytes; and a key's
        // values keep their order when written back.
        let bytes = encode(
            &Metadata::new(),
            &[
                raw("trace-bin", b"looks like text"),
                raw("trace-bin", &[0xff]),
                raw("user", b"bob"),
            ],
        );
        let d = decode(&bytes, Keys::All).unwrap();
        assert_eq!(d.visible.keys().collect::<Vec<_>>(), ["user"]);
        assert_eq!(
            d.passthrough.as_slice(),
            [
                raw("trace-bin", b"looks like text"),
                raw("trace-bin", &[0xff])
            ]
        );
    }

    #[test]
    fn find_sees_what_elements_would() {
        let bytes = encode(
            &Metadata::new(),
            &[
                raw("Weft-Version", &[0xff]),
                raw("weft-version", b"v1"),
                raw("weft-version", b"v2"),
            ],
        );
        assert_eq!(find(&bytes, "weft-version").unwrap(), Some("v1"));
        assert_eq!(find(&bytes, "dst").unwrap(), None);
        assert!(find(&bytes[..bytes.len() - 1], "dst").is_err());
    }

    /// `find` is the stamp's fast path; `decode` is what elements see. They must agree on
    /// every encoding, well-formed or not.
    #[test]
    fn find_agrees_with_decode_on_random_encodings() {
        let keys: [&[u8]; 6] = [
            b"weft-version",
            b"Weft-Version",
            b"dst",
            b"",
            "é".as_bytes(),
            b"x",
        ];
        let values: [&[u8]; 4] = [b"v1", b"", &[0xff, 0xfe], b"v2"];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..5_000 {
            let mut bytes = Vec::new();
            for _ in 0..next(4) {
                for item in [keys[next(keys.len())], values[next(values.len())]] {
                    bytes.extend_from_slice(&(item.len() as u32).to_le_bytes());
                    bytes.extend_from_slice(item);
                }
            }
            if next(3) == 0 && !bytes.is_empty() {
                bytes.truncate(next(bytes.len()));
            }
            for key in ["weft-version", "dst"] {
                let expected = decode(&bytes, Keys::All).map(|d| d.visible.get(key).cloned());
                let got = find(&bytes, key).map(|v| v.map(str::to_owned));
                assert_eq!(got, expected, "{bytes:?}");
            }
        }
    }

    #[test]
    fn truncated_and_bad_keys_are_refused_with_the_entry() {
        let mut v = Metadata::new();
        v.insert("a".into(), "b".into());
        let bytes = encode(&v, &[]);
        for cut in 1..bytes.len() {
            let e = decode(&bytes[..cut], Keys::All).unwrap_err();
            assert!(e.contains("entry 0"), "{e}");
        }
        for key in [
            "é",
            "",
            "a b",
            "tab\t",
            "nul\0",
            "del\x7f",
            "long-enough-key\n",
        ] {
            let bad = encode(&Metadata::new(), &[raw(key, b"x")]);
            let e = decode(&bad, Keys::All).unwrap_err();
            assert!(e.contains("printable ASCII"), "{key:?}: {e}");
            assert!(find(&bad, "dst").is_err(), "{key:?}");
        }
        for key in [
            ":authority",
            "x-b3-traceid",
            "user-agent",
            "grpc-timeout",
            "!~",
        ] {
            let good = encode(&Metadata::new(), &[raw(key, b"x")]);
            assert!(decode(&good, Keys::All).is_ok(), "{key:?}");
            assert!(find(&good, "dst").is_ok(), "{key:?}");
        }
    }

    /// The word-at-a-time check agrees with the byte-at-a-time rule on every length and
    /// every byte value in every position.
    #[test]
    fn key_check_agrees_with_the_rule_byte_by_byte() {
        let rule = |k: &[u8]| !k.is_empty() && k.iter().all(|b| (0x21..=0x7e).contains(b));
        for len in 0..=20 {
            for pos in 0..len {
                for b in 0..=255u8 {
                    let mut key = vec![b'k'; len];
                    key[pos] = b;
                    assert_eq!(valid_key(&key), rule(&key), "{key:?}");
                }
            }
            assert_eq!(valid_key(&vec![b'k'; len]), len > 0);
        }
    }
}
