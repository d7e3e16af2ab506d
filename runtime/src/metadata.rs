//! The C ABI's metadata encoding: repeated `{u32 LE key_len, key, u32 LE value_len, value}`.
//!
//! Elements see metadata as text. A value that is not UTF-8 (gRPC `-bin` metadata) and any
//! repeated value of a key are kept aside, unseen by elements, and written back unchanged
//! whenever the chain hands the caller new metadata, so they are never lost.

use crate::engine::Metadata;

/// Metadata split into what elements see and what passes through untouched.
#[derive(Debug, Default, PartialEq)]
pub struct Decoded {
    pub visible: Metadata,
    pub passthrough: Vec<(String, Vec<u8>)>,
}

/// Decodes the ABI encoding; keys are made lower-case, as gRPC requires.
pub fn decode(mut bytes: &[u8]) -> Result<Decoded, String> {
    let mut out = Decoded::default();
    let mut entry = 0usize;
    while !bytes.is_empty() {
        let key = take(&mut bytes).ok_or_else(|| truncated(entry, "key"))?;
        let value = take(&mut bytes).ok_or_else(|| truncated(entry, "value"))?;
        if key.is_empty() || !key.is_ascii() {
            return Err(format!(
                "metadata entry {entry}: a key must be non-empty ASCII (gRPC metadata keys are), got {:?}",
                String::from_utf8_lossy(key)
            ));
        }
        let key = String::from_utf8_lossy(key).to_ascii_lowercase();
        match std::str::from_utf8(value) {
            Ok(v) if !out.visible.contains_key(&key) => {
                out.visible.insert(key, v.to_owned());
            }
            _ => out.passthrough.push((key, value.to_vec())),
        }
        entry += 1;
    }
    Ok(out)
}

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

/// The encoded size of `visible` followed by `passthrough`.
pub fn encoded_len(visible: &Metadata, passthrough: &[(String, Vec<u8>)]) -> usize {
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
pub fn encode_into(visible: &Metadata, passthrough: &[(String, Vec<u8>)], out: &mut [u8]) -> usize {
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
pub fn encode(visible: &Metadata, passthrough: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = vec![0; encoded_len(visible, passthrough)];
    encode_into(visible, passthrough, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_binary_and_repeated_values() {
        let mut visible = Metadata::new();
        visible.insert("user".into(), "alice".into());
        let pass = vec![
            ("trace-bin".to_owned(), vec![0xff, 0x00, 0xfe]),
            ("user".to_owned(), b"bob".to_vec()),
        ];
        let bytes = encode(&visible, &pass);
        assert_eq!(bytes.len(), encoded_len(&visible, &pass));
        let d = decode(&bytes).unwrap();
        assert_eq!(d.visible, visible);
        assert_eq!(d.passthrough, pass);
    }

    #[test]
    fn keys_are_lower_cased() {
        let mut v = Metadata::new();
        v.insert("X-User".into(), "a".into());
        let d = decode(&encode(&v, &[])).unwrap();
        assert_eq!(d.visible.get("x-user").map(String::as_str), Some("a"));
    }

    #[test]
    fn truncated_and_bad_keys_are_refused_with_the_entry() {
        let mut v = Metadata::new();
        v.insert("a".into(), "b".into());
        let bytes = encode(&v, &[]);
        for cut in 1..bytes.len() {
            let e = decode(&bytes[..cut]).unwrap_err();
            assert!(e.contains("entry 0"), "{e}");
        }
        let bad = encode(&Metadata::new(), &[("é".to_owned(), b"x".to_vec())]);
        assert!(decode(&bad).unwrap_err().contains("ASCII"));
    }
}
