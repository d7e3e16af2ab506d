//! The language's built-in functions that need more than an operator: hashing, AEAD,
//! compression, quantiles, conversions and the numeric helpers.
//!
//! Every executor calls these functions rather than re-implementing them, so their exact
//! results (including edge cases such as NaN, overflow and malformed input) are the language's
//! semantics. Changing an output here changes the behaviour of deployed elements.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chacha20poly1305::aead::Aead;
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::xxh3_64;

use crate::rng::RandomSource;
use crate::value::{Message, MsgKind, Value, canonical_float};

/// A built-in was called with arguments it has no answer for.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum BuiltinError {
    #[error("randomi({lo}, {hi}): the range is empty; `hi` must be greater than `lo`")]
    EmptyRange { lo: i64, hi: i64 },
    // Floats in messages as `str` writes them (`Debug`): `Display` spells 1e308 out in
    // 309 digits.
    #[error("randomf({lo:?}, {hi:?}): both bounds must be finite numbers")]
    NonFiniteBound { lo: f64, hi: f64 },
    #[error("quantile of an empty collection is undefined")]
    EmptyQuantile,
    /// NaN, or outside [0, 1]: numpy's `quantile`, whose default the built-in follows,
    /// refuses those too (clamping them answered a question nobody asked).
    #[error("quantile: q is {q:?}; it must be a number between 0 and 1")]
    QuantileOutOfRange { q: f64 },
    /// `int(x)` or `uint(x)` of a value the result cannot hold: nothing loses data silently.
    #[error("{function}({value}): {reason}")]
    NotRepresentable {
        function: &'static str,
        /// The argument as `str` would write it.
        value: String,
        reason: &'static str,
    },
    #[error("{function}: expected {expected}, got {found}")]
    WrongKind {
        function: &'static str,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{function}: both arguments must be the same kind of number, got {left} and {right}")]
    MixedKinds {
        function: &'static str,
        left: &'static str,
        right: &'static str,
    },
    #[error("{function}: input of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        function: &'static str,
        len: usize,
        max: usize,
    },
    /// The value a built-in (or `+`) would build is longer than [`MAX_VALUE_LEN`].
    #[error("{function}: the result would be {len} bytes, over the limit of {max} bytes")]
    ResultTooLarge {
        function: &'static str,
        len: usize,
        max: usize,
    },
}

/// Refuses a result of `len` bytes longer than [`MAX_VALUE_LEN`], before it is built. Each
/// call that grows a value is bounded, so a loop of them (`s = encrypt(s, k)` per item of a
/// repeated field) fails cleanly instead of asking for more memory than there is: a failed
/// allocation aborts the process, and no guard can catch that.
pub fn result_within_limit(function: &'static str, len: usize) -> Result<(), BuiltinError> {
    if len > MAX_VALUE_LEN {
        return Err(BuiltinError::ResultTooLarge {
            function,
            len,
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

/// The length of the standard padded base64 of `n` bytes.
fn base64_len(n: usize) -> usize {
    n.div_ceil(3).saturating_mul(4)
}

// ---------------------------------------------------------------------------------------------
// hash

/// `hash(v)`: a stable, non-negative 63-bit hash, so `hash(k) % n` picks a shard.
///
/// The hash is `xxh3_64(canonical_bytes(v))` with the top bit cleared. It is the same on every
/// platform, in every executor and across releases; see [`canonical_bytes`] for the encoding.
/// Values equal under the language's `==` or under [`Value`]'s `Eq` hash equal.
pub fn hash(v: &Value) -> i64 {
    const MASK: u64 = i64::MAX as u64;
    let mut buf = Vec::with_capacity(32);
    encode(v, &mut buf);
    (xxh3_64(&buf) & MASK) as i64
}

/// The canonical byte encoding that [`hash`] digests.
///
/// Each value is a one-byte tag (the variant's rank) followed by its payload. Integers are
/// 8 bytes little-endian; lengths and counts are `u64` little-endian. Every encoding is
/// self-delimiting, so a concatenation of encodings splits back in exactly one way and distinct
/// values cannot collide before hashing.
///
/// | value | encoding |
/// |---|---|
/// | `Unit` | `00` |
/// | `Bool(b)` | `01` then `00`/`01` |
/// | `Int(i)` | `02` then `i` as i64 LE |
/// | `Uint(u)` | `03` then `u` as u64 LE |
/// | `Float(f)` | `04` then the bits of `canon(f)` as u64 LE |
/// | `Str(s)` | `05` then `len(s)` then the UTF-8 bytes |
/// | `Bytes(b)` | `06` then `len(b)` then the bytes |
/// | `Instant(t)` | `07` then the bits of `canon(t)` as u64 LE |
/// | `Pair(a, b)` | `08` then `enc(a)` then `enc(b)` |
/// | `Vec(xs)` | `09` then `len(xs)` then each `enc(x)` |
/// | `Map(m)` | `0a` then `len(m)` then `enc(k)` `enc(v)` per entry in key order |
/// | `Opt(None)` | `0b` `00` |
/// | `Opt(Some(x))` | `0b` `01` then `enc(x)` |
/// | `Msg(m)` | `0c`, kind (`00` request, `01` response), `len` + bytes, header count, then `len` + key, `len` + value per header in key order, status code as u32 LE, `len` + status message |
///
/// `canon` ([`canonical_float`]) maps `-0.0` to `0.0` and every NaN to the quiet NaN
/// `0x7ff8000000000000`, so that `0.0 == -0.0` in the language implies equal hashes.
pub fn canonical_bytes(v: &Value) -> Vec<u8> {
    let mut buf = Vec::new();
    encode(v, &mut buf);
    buf
}

fn encode(v: &Value, out: &mut Vec<u8>) {
    fn len(n: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(&(n as u64).to_le_bytes());
    }
    fn bytes(b: &[u8], out: &mut Vec<u8>) {
        len(b.len(), out);
        out.extend_from_slice(b);
    }
    fn float(f: f64, out: &mut Vec<u8>) {
        out.extend_from_slice(&canonical_float(f).to_bits().to_le_bytes());
    }
    fn message(m: &Message, out: &mut Vec<u8>) {
        out.push(match m.kind {
            MsgKind::Request => 0,
            MsgKind::Response => 1,
        });
        bytes(&m.bytes, out);
        len(m.headers.len(), out);
        for (k, v) in &m.headers {
            bytes(k.as_bytes(), out);
            bytes(v.as_bytes(), out);
        }
        out.extend_from_slice(&m.code.number().to_le_bytes());
        bytes(m.status_message.as_bytes(), out);
    }

    match v {
        Value::Unit => out.push(0x00),
        Value::Bool(b) => out.extend_from_slice(&[0x01, u8::from(*b)]),
        Value::Int(i) => {
            out.push(0x02);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::Uint(u) => {
            out.push(0x03);
            out.extend_from_slice(&u.to_le_bytes());
        }
        Value::Float(f) => {
            out.push(0x04);
            float(*f, out);
        }
        Value::Str(s) => {
            out.push(0x05);
            bytes(s.as_bytes(), out);
        }
        Value::Bytes(b) => {
            out.push(0x06);
            bytes(b, out);
        }
        Value::Instant(t) => {
            out.push(0x07);
            float(*t, out);
        }
        Value::Pair(p) => {
            out.push(0x08);
            encode(&p.0, out);
            encode(&p.1, out);
        }
        Value::Vec(xs) => {
            out.push(0x09);
            len(xs.len(), out);
            for x in xs {
                encode(x, out);
            }
        }
        Value::Map(m) => {
            out.push(0x0a);
            len(m.len(), out);
            for (k, x) in m {
                encode(k, out);
                encode(x, out);
            }
        }
        Value::Opt(None) => out.extend_from_slice(&[0x0b, 0x00]),
        Value::Opt(Some(x)) => {
            out.extend_from_slice(&[0x0b, 0x01]);
            encode(x, out);
        }
        Value::Msg(m) => {
            out.push(0x0c);
            message(m, out);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// AEAD

const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;

fn cipher(key: &str) -> XChaCha20Poly1305 {
    // Elements hold keys as strings (often from config); hashing gives a uniform 256-bit key
    // of any passphrase. It is not a password KDF: keys are expected to be high-entropy.
    let key: [u8; 32] = Sha256::digest(key.as_bytes()).into();
    XChaCha20Poly1305::new(&key.into())
}

/// Seals `plain` with XChaCha20-Poly1305 under `SHA-256(key)`: `nonce || ciphertext || tag`.
///
/// The 24-byte nonce is three words from `rng`, little-endian. Confidentiality depends on
/// nonces never repeating under one key, and so on the RNG: production executors must key it
/// from OS entropy ([`crate::rng::SeededRng::from_key`]); a fixed seed is for tests only.
///
/// # Panics
///
/// If `plain` exceeds XChaCha20's 256 GiB message limit, which no executor can hold in memory.
pub fn encrypt(plain: &[u8], key: &str, rng: &mut dyn RandomSource) -> Vec<u8> {
    let mut nonce = [0u8; NONCE_LEN];
    for chunk in nonce.chunks_exact_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    let sealed = cipher(key)
        .encrypt(&XNonce::from(nonce), plain)
        .expect("XChaCha20-Poly1305 fails only on messages over 256 GiB");
    let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&sealed);
    out
}

/// Opens what [`encrypt`] sealed; `None` if the input is too short to hold a nonce and tag, or
/// if authentication fails (wrong key, tampering, truncation).
pub fn decrypt(data: &[u8], key: &str) -> Option<Vec<u8>> {
    if data.len() < NONCE_LEN + TAG_LEN {
        return None;
    }
    let (nonce, sealed) = data.split_at(NONCE_LEN);
    let nonce: [u8; NONCE_LEN] = nonce.try_into().ok()?;
    cipher(key).decrypt(&XNonce::from(nonce), sealed).ok()
}

/// `encrypt(v, key)`: a string becomes a string holding the standard padded base64 of the
/// sealed bytes (so it can travel in headers and string fields); bytes stay bytes.
pub fn encrypt_value(
    v: &Value,
    key: &str,
    rng: &mut dyn RandomSource,
) -> Result<Value, BuiltinError> {
    let sealed_len = |plain: usize| plain.saturating_add(NONCE_LEN + TAG_LEN);
    match v {
        Value::Str(s) => {
            result_within_limit("encrypt", base64_len(sealed_len(s.len())))?;
            Ok(Value::Str(BASE64.encode(encrypt(s.as_bytes(), key, rng))))
        }
        Value::Bytes(b) => {
            result_within_limit("encrypt", sealed_len(b.len()))?;
            Ok(Value::Bytes(encrypt(b, key, rng)))
        }
        other => Err(wrong_kind("encrypt", "string or bytes", other)),
    }
}

/// `decrypt(v, key)`: the inverse of [`encrypt_value`], as an `Option`: `None` for anything
/// that does not open (bad base64, wrong key, tampering, or plaintext that is not UTF-8 when a
/// string is expected).
pub fn decrypt_value(v: &Value, key: &str) -> Result<Value, BuiltinError> {
    match v {
        Value::Str(s) => Ok(option(
            BASE64
                .decode(s)
                .ok()
                .and_then(|sealed| decrypt(&sealed, key))
                .and_then(|plain| String::from_utf8(plain).ok())
                .map(Value::Str),
        )),
        Value::Bytes(b) => Ok(option(decrypt(b, key).map(Value::Bytes))),
        other => Err(wrong_kind("decrypt", "string or bytes", other)),
    }
}

// ---------------------------------------------------------------------------------------------
// compression

/// The longest string or bytes value `+` builds (as long as the largest payload
/// [`decompress`] produces).
pub const MAX_VALUE_LEN: usize = MAX_DECOMPRESSED_LEN;

/// The largest payload [`decompress`] will produce. The snappy header declares the output
/// length up front; without a bound a 10-byte input could make us allocate 4 GiB.
pub const MAX_DECOMPRESSED_LEN: usize = 64 * 1024 * 1024;

/// Snappy raw (block) format, not the framed format.
///
/// # Panics
///
/// If `data` exceeds snappy's 4 GiB format limit; [`compress_value`] refuses anything over
/// [`MAX_DECOMPRESSED_LEN`] first, so elements never get here with such input.
pub fn compress(data: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new()
        .compress_vec(data)
        .expect("snappy compresses any input under 4 GiB")
}

/// Inverse of [`compress`]; `None` for malformed input or a declared length over
/// [`MAX_DECOMPRESSED_LEN`].
pub fn decompress(data: &[u8]) -> Option<Vec<u8>> {
    let declared = snap::raw::decompress_len(data).ok()?;
    if declared > MAX_DECOMPRESSED_LEN {
        return None;
    }
    snap::raw::Decoder::new().decompress_vec(data).ok()
}

/// `compress(v)`: strings become standard padded base64 of the compressed bytes; bytes stay
/// bytes. Input over [`MAX_DECOMPRESSED_LEN`] is refused, since it could never be decompressed.
pub fn compress_value(v: &Value) -> Result<Value, BuiltinError> {
    let check = |len: usize| {
        if len > MAX_DECOMPRESSED_LEN {
            Err(BuiltinError::TooLarge {
                function: "compress",
                len,
                max: MAX_DECOMPRESSED_LEN,
            })
        } else {
            Ok(())
        }
    };
    // Incompressible input comes out a little longer (and a string's base64 a third longer
    // again), so the result is checked too.
    match v {
        Value::Str(s) => {
            check(s.len())?;
            let packed = compress(s.as_bytes());
            result_within_limit("compress", base64_len(packed.len()))?;
            Ok(Value::Str(BASE64.encode(packed)))
        }
        Value::Bytes(b) => {
            check(b.len())?;
            let packed = compress(b);
            result_within_limit("compress", packed.len())?;
            Ok(Value::Bytes(packed))
        }
        other => Err(wrong_kind("compress", "string or bytes", other)),
    }
}

/// `decompress(v)`: the inverse of [`compress_value`], as an `Option` (`None` for bad base64,
/// malformed or oversized snappy data, or non-UTF-8 output when a string is expected).
pub fn decompress_value(v: &Value) -> Result<Value, BuiltinError> {
    match v {
        Value::Str(s) => Ok(option(
            BASE64
                .decode(s)
                .ok()
                .and_then(|packed| decompress(&packed))
                .and_then(|plain| String::from_utf8(plain).ok())
                .map(Value::Str),
        )),
        Value::Bytes(b) => Ok(option(decompress(b).map(Value::Bytes))),
        other => Err(wrong_kind("decompress", "string or bytes", other)),
    }
}

// ---------------------------------------------------------------------------------------------
// quantile

/// `quantile(xs, q)`: linear interpolation between closest ranks (Hyndman–Fan type 7, numpy's
/// default).
///
/// The values (ints, uints, floats or instants, converted to `f64`) are sorted by IEEE total
/// order; with `h = (n - 1) * q`, the result interpolates between the values at ranks
/// `floor(h)` and `ceil(h)`; a `q` outside [0, 1] is an error. A NaN among the values sorts
/// after +inf whatever its sign bit (which the language never shows, and which `0.0 / 0.0`
/// sets on x86-64 but not on AArch64), and is returned or propagated when it is involved in
/// the interpolation.
pub fn quantile(values: &[Value], q: f64) -> Result<f64, BuiltinError> {
    if !(0.0..=1.0).contains(&q) {
        return Err(BuiltinError::QuantileOutOfRange { q });
    }
    if values.is_empty() {
        return Err(BuiltinError::EmptyQuantile);
    }
    let mut xs = values
        .iter()
        .map(|v| match v {
            Value::Int(i) => Ok(*i as f64),
            Value::Uint(u) => Ok(*u as f64),
            Value::Float(f) | Value::Instant(f) => Ok(canonical_nan(*f)),
            other => Err(wrong_kind("quantile", "a collection of numbers", other)),
        })
        .collect::<Result<Vec<f64>, _>>()?;
    xs.sort_by(f64::total_cmp);
    let h = (xs.len() - 1) as f64 * q;
    let below = h.floor();
    let t = h - below;
    let a = xs[below as usize];
    if t == 0.0 {
        return Ok(a);
    }
    let b = xs[below as usize + 1];
    if a == b {
        // Also keeps inf from turning into NaN through inf - inf.
        return Ok(a);
    }
    // numpy's lerp: interpolate from the nearer end, so t = 1 gives exactly b and the result
    // is monotone in t.
    Ok(if t < 0.5 {
        a + (b - a) * t
    } else {
        b - (b - a) * (1.0 - t)
    })
}

/// `f` with any NaN made the positive quiet NaN, so that total order sorts it last; -0.0
/// stays, since total order keeps it before 0.0 wherever it came from.
fn canonical_nan(f: f64) -> f64 {
    if f.is_nan() { f64::NAN } else { f }
}

// ---------------------------------------------------------------------------------------------
// conversions

/// `str(x)`: ints and uints in decimal; bools as `true`/`false`; strings unchanged; floats
/// (and instants, as seconds) as the shortest text that parses back to the same float, always
/// with a `.` or an exponent: `1.0`, `0.5`, `1e16`, `1e-7`, `-0.0`, `inf`, `-inf`, `NaN`.
/// Scientific notation is used below 1e-4 and from 1e16 in magnitude.
pub fn to_str(v: &Value) -> Result<String, BuiltinError> {
    match v {
        Value::Int(i) => Ok(i.to_string()),
        Value::Uint(u) => Ok(u.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Str(s) => Ok(s.clone()),
        // Rust's `Debug` for floats is the shortest round-trip form and always marks a float
        // (the `Display` form prints `1.0` as `1`); the tests pin its exact output.
        Value::Float(f) | Value::Instant(f) => Ok(format!("{f:?}")),
        other => Err(wrong_kind("str", "a number, bool or string", other)),
    }
}

/// The bounds of [`to_int`] and [`to_uint`] on floats, as floats: a float `f` fits where
/// `f >= INT_LOW && f < INT_HIGH` (or `f > -1.0 && f < UINT_HIGH`), since truncation toward
/// zero keeps every other float in range. Compiled code tests the same bounds.
pub const INT_LOW: f64 = -9_223_372_036_854_775_808.0;
pub const INT_HIGH: f64 = 9_223_372_036_854_775_808.0;
pub const UINT_HIGH: f64 = 18_446_744_073_709_551_616.0;

const INT_RANGE: &str = "outside the int range, -9223372036854775808 to 9223372036854775807";
const UINT_RANGE: &str = "outside the uint range, 0 to 18446744073709551615";

fn not_representable(function: &'static str, v: &Value, range: &'static str) -> BuiltinError {
    let nan = matches!(v, Value::Float(f) | Value::Instant(f) if f.is_nan());
    BuiltinError::NotRepresentable {
        function,
        value: to_str(v).unwrap_or_else(|_| v.kind_name().to_owned()),
        reason: if nan {
            "NaN has no integer value"
        } else {
            range
        },
    }
}

/// `int(x)`: floats and instants truncate toward zero; bools give 0/1. A value an `int` cannot
/// hold after that (NaN, an infinity, a float or uint beyond `i64::MAX`, a float below
/// `i64::MIN`) is an error, never a saturated or wrapped number.
pub fn to_int(v: &Value) -> Result<i64, BuiltinError> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::Uint(u) => i64::try_from(*u).map_err(|_| not_representable("int", v, INT_RANGE)),
        Value::Float(f) | Value::Instant(f) if *f >= INT_LOW && *f < INT_HIGH => Ok(*f as i64),
        Value::Float(_) | Value::Instant(_) => Err(not_representable("int", v, INT_RANGE)),
        Value::Bool(b) => Ok(i64::from(*b)),
        other => Err(wrong_kind("int", "a number or bool", other)),
    }
}

/// `uint(x)`: as [`to_int`], for `0..=u64::MAX`: a negative int is an error, as is a float
/// that is still negative once truncated (`uint(-0.5)` is 0, `uint(-1.0)` an error).
pub fn to_uint(v: &Value) -> Result<u64, BuiltinError> {
    match v {
        Value::Int(i) => u64::try_from(*i).map_err(|_| not_representable("uint", v, UINT_RANGE)),
        Value::Uint(u) => Ok(*u),
        Value::Float(f) | Value::Instant(f) if *f > -1.0 && *f < UINT_HIGH => Ok(*f as u64),
        Value::Float(_) | Value::Instant(_) => Err(not_representable("uint", v, UINT_RANGE)),
        Value::Bool(b) => Ok(u64::from(*b)),
        other => Err(wrong_kind("uint", "a number or bool", other)),
    }
}

/// `float(x)`: ints and uints round to the nearest float (ties to even), instants give their
/// seconds, bools give 0.0/1.0.
pub fn to_float(v: &Value) -> Result<f64, BuiltinError> {
    match v {
        Value::Int(i) => Ok(*i as f64),
        Value::Uint(u) => Ok(*u as f64),
        Value::Float(f) | Value::Instant(f) => Ok(*f),
        Value::Bool(b) => Ok(f64::from(u8::from(*b))),
        other => Err(wrong_kind("float", "a number or bool", other)),
    }
}

/// `parse_int(s)`: optional sign then decimal digits, surrounding whitespace ignored; `None` on
/// anything else or on overflow.
pub fn parse_int(s: &str) -> Option<i64> {
    s.trim().parse().ok()
}

/// `parse_float(s)`: decimal or scientific notation (`1`, `-2.5`, `.5`, `1e3`), or
/// `inf`/`infinity`/`nan` in any case, with an optional sign; surrounding whitespace ignored.
/// Out-of-range magnitudes round to infinity or zero rather than failing.
pub fn parse_float(s: &str) -> Option<f64> {
    s.trim().parse().ok()
}

// ---------------------------------------------------------------------------------------------
// numeric helpers

/// `min(a, b)` for two values of the same kind (int, uint, float or instant).
///
/// Floats and instants follow IEEE 754-2019 `minimum`: a NaN operand gives NaN (the first NaN
/// operand, payload kept), and `-0.0` is less than `0.0`.
pub fn min_value(a: &Value, b: &Value) -> Result<Value, BuiltinError> {
    pick("min", a, b, Pick::Min)
}

/// `max(a, b)`: as [`min_value`], with IEEE 754-2019 `maximum` (`0.0` is greater than `-0.0`).
pub fn max_value(a: &Value, b: &Value) -> Result<Value, BuiltinError> {
    pick("max", a, b, Pick::Max)
}

#[derive(Clone, Copy)]
enum Pick {
    Min,
    Max,
}

fn pick(function: &'static str, a: &Value, b: &Value, which: Pick) -> Result<Value, BuiltinError> {
    let ints = |x: i128, y: i128| match which {
        Pick::Min => x <= y,
        Pick::Max => x >= y,
    };
    let floats = |x: f64, y: f64| -> f64 {
        if x.is_nan() {
            return x;
        }
        if y.is_nan() {
            return y;
        }
        let first = match (which, x.partial_cmp(&y)) {
            (_, Some(std::cmp::Ordering::Equal)) => match which {
                // Only ±0 compare equal with different bits; the sign decides.
                Pick::Min => x.is_sign_negative(),
                Pick::Max => x.is_sign_positive(),
            },
            (Pick::Min, ord) => ord == Some(std::cmp::Ordering::Less),
            (Pick::Max, ord) => ord == Some(std::cmp::Ordering::Greater),
        };
        if first { x } else { y }
    };
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Ok(Value::Int(if ints(i128::from(*x), i128::from(*y)) {
            *x
        } else {
            *y
        })),
        (Value::Uint(x), Value::Uint(y)) => {
            Ok(Value::Uint(if ints(i128::from(*x), i128::from(*y)) {
                *x
            } else {
                *y
            }))
        }
        (Value::Float(x), Value::Float(y)) => Ok(Value::Float(floats(*x, *y))),
        (Value::Instant(x), Value::Instant(y)) => Ok(Value::Instant(floats(*x, *y))),
        _ if !is_number(a) => Err(wrong_kind(function, "a number or Instant", a)),
        _ if !is_number(b) => Err(wrong_kind(function, "a number or Instant", b)),
        _ => Err(BuiltinError::MixedKinds {
            function,
            left: a.kind_name(),
            right: b.kind_name(),
        }),
    }
}

/// `abs(x)`: ints use `wrapping_abs` (so `abs(i64::MIN) == i64::MIN`), uints are unchanged,
/// floats clear the sign bit (`abs(-0.0) == 0.0`, `abs(NaN)` is NaN).
pub fn abs_value(v: &Value) -> Result<Value, BuiltinError> {
    match v {
        Value::Int(i) => Ok(Value::Int(i.wrapping_abs())),
        Value::Uint(u) => Ok(Value::Uint(*u)),
        Value::Float(f) => Ok(Value::Float(f.abs())),
        other => Err(wrong_kind("abs", "a number", other)),
    }
}

fn is_number(v: &Value) -> bool {
    matches!(
        v,
        Value::Int(_) | Value::Uint(_) | Value::Float(_) | Value::Instant(_)
    )
}

fn wrong_kind(function: &'static str, expected: &'static str, found: &Value) -> BuiltinError {
    BuiltinError::WrongKind {
        function,
        expected,
        found: found.kind_name(),
    }
}

fn option(v: Option<Value>) -> Value {
    Value::Opt(v.map(Box::new))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::rng::SeededRng;
    use crate::status::Code;

    fn xxh63(bytes: &[u8]) -> i64 {
        (xxh3_64(bytes) & (i64::MAX as u64)) as i64
    }

    // ----- hash

    #[test]
    fn hash_of_scalars_follows_the_documented_encoding() {
        assert_eq!(canonical_bytes(&Value::Unit), [0x00]);
        assert_eq!(canonical_bytes(&Value::Bool(true)), [0x01, 0x01]);
        assert_eq!(
            canonical_bytes(&Value::Int(1)),
            [0x02, 1, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            canonical_bytes(&Value::Int(-1)),
            [0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            canonical_bytes(&Value::Uint(1)),
            [0x03, 1, 0, 0, 0, 0, 0, 0, 0]
        );
        // 1.5 = 0x3ff8000000000000
        assert_eq!(
            canonical_bytes(&Value::Float(1.5)),
            [0x04, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f]
        );
        assert_eq!(
            canonical_bytes(&Value::str("ab")),
            [0x05, 2, 0, 0, 0, 0, 0, 0, 0, b'a', b'b']
        );
        assert_eq!(
            canonical_bytes(&Value::Bytes(vec![7])),
            [0x06, 1, 0, 0, 0, 0, 0, 0, 0, 7]
        );
        assert_eq!(
            canonical_bytes(&Value::Instant(0.0)),
            [0x07, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(hash(&Value::Int(1)), xxh63(&[0x02, 1, 0, 0, 0, 0, 0, 0, 0]));
    }

    #[test]
    fn hash_of_composites_follows_the_documented_encoding() {
        let pair = Value::pair(Value::Bool(false), Value::Unit);
        assert_eq!(canonical_bytes(&pair), [0x08, 0x01, 0x00, 0x00]);
        let vec = Value::Vec(vec![Value::Unit, Value::Unit]);
        assert_eq!(
            canonical_bytes(&vec),
            [0x09, 2, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x00]
        );
        let map = Value::Map(BTreeMap::from([(Value::Bool(true), Value::Unit)]));
        assert_eq!(
            canonical_bytes(&map),
            [0x0a, 1, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x01, 0x00]
        );
        assert_eq!(canonical_bytes(&Value::none()), [0x0b, 0x00]);
        assert_eq!(
            canonical_bytes(&Value::some(Value::Unit)),
            [0x0b, 0x01, 0x00]
        );

        let mut m = Message::error(Code::NotFound, "x");
        m.bytes = vec![9];
        m.headers.insert("k".into(), "v".into());
        let expected: Vec<u8> = [
            &[0x0c, 0x01][..],
            &[1, 0, 0, 0, 0, 0, 0, 0, 9],
            &[1, 0, 0, 0, 0, 0, 0, 0],
            &[1, 0, 0, 0, 0, 0, 0, 0, b'k'],
            &[1, 0, 0, 0, 0, 0, 0, 0, b'v'],
            &[5, 0, 0, 0],
            &[1, 0, 0, 0, 0, 0, 0, 0, b'x'],
        ]
        .concat();
        let msg = Value::Msg(Arc::new(m));
        assert_eq!(canonical_bytes(&msg), expected);
        assert_eq!(hash(&msg), xxh63(&expected));
    }

    #[test]
    fn hash_known_vectors() {
        // Computed with the reference xxHash implementation (python-xxhash 4.1 with libxxhash 0.8.4, xxh3_64) over
        // the documented encodings; these pin the hash across platforms and releases.
        assert_eq!(hash(&Value::Unit), KNOWN_UNIT);
        assert_eq!(hash(&Value::Int(1)), KNOWN_INT_1);
        assert_eq!(hash(&Value::str("user-42")), KNOWN_STR_USER42);
    }

    const KNOWN_UNIT: i64 = 4_921_273_257_020_026_075;
    const KNOWN_INT_1: i64 = 8_627_188_581_306_031_383;
    const KNOWN_STR_USER42: i64 = 6_696_156_071_707_503_223;

    #[test]
    fn hash_distinguishes_kinds_and_structure() {
        let h = |v: Value| hash(&v);
        assert_ne!(h(Value::Int(1)), h(Value::Uint(1)));
        assert_ne!(h(Value::Int(1)), h(Value::str("1")));
        assert_ne!(h(Value::Uint(1)), h(Value::str("1")));
        assert_ne!(h(Value::Float(1.0)), h(Value::Instant(1.0)));
        assert_ne!(h(Value::str("ab")), h(Value::Bytes(b"ab".to_vec())));
        // Length prefixes keep ("a", "bc") and ("ab", "c") apart.
        assert_ne!(
            h(Value::Vec(vec![Value::str("a"), Value::str("bc")])),
            h(Value::Vec(vec![Value::str("ab"), Value::str("c")]))
        );
        assert_ne!(h(Value::none()), h(Value::some(Value::Unit)));
        assert_ne!(h(Value::Vec(vec![])), h(Value::Map(BTreeMap::new())));
    }

    #[test]
    fn equal_values_hash_equal() {
        let build = || {
            let mut m = BTreeMap::new();
            m.insert(
                Value::str("b"),
                Value::Vec(vec![Value::Int(2), Value::Float(0.5)]),
            );
            m.insert(
                Value::str("a"),
                Value::some(Value::pair(Value::Uint(1), Value::Bool(true))),
            );
            Value::Map(m)
        };
        assert_eq!(hash(&build()), hash(&build()));
        // The language says 0.0 == -0.0; NaNs hash alike whatever their payload.
        assert_eq!(hash(&Value::Float(0.0)), hash(&Value::Float(-0.0)));
        assert_eq!(
            hash(&Value::Float(f64::NAN)),
            hash(&Value::Float(f64::from_bits(0xfff0_0000_0000_0001)))
        );
    }

    #[test]
    fn hash_is_non_negative() {
        let mut rng = SeededRng::new(5);
        for _ in 0..1000 {
            let v = Value::Uint(rng.next_u64());
            assert!(hash(&v) >= 0);
        }
    }

    // ----- AEAD

    #[test]
    fn encrypt_round_trips_and_lays_out_nonce_ciphertext_tag() {
        let mut rng = SeededRng::new(1);
        let sealed = encrypt(b"hello", "k1", &mut rng);
        assert_eq!(sealed.len(), 24 + 5 + 16);
        let mut again = SeededRng::new(1);
        let nonce: Vec<u8> = (0..3)
            .flat_map(|_| again.next_u64().to_le_bytes())
            .collect();
        assert_eq!(&sealed[..24], &nonce[..]);
        assert_eq!(decrypt(&sealed, "k1").as_deref(), Some(&b"hello"[..]));
        assert_eq!(decrypt(&encrypt(b"", "k1", &mut rng), "k1"), Some(vec![]));
    }

    #[test]
    fn encrypt_uses_a_fresh_nonce_each_time() {
        let mut rng = SeededRng::new(1);
        assert_ne!(
            encrypt(b"same", "k", &mut rng),
            encrypt(b"same", "k", &mut rng)
        );
    }

    #[test]
    fn decrypt_rejects_wrong_key_tampering_and_short_input() {
        let mut rng = SeededRng::new(2);
        let sealed = encrypt(b"secret", "right", &mut rng);
        assert_eq!(decrypt(&sealed, "wrong"), None);
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert_eq!(decrypt(&bad, "right"), None, "flip at byte {i}");
        }
        assert_eq!(decrypt(&sealed[..sealed.len() - 1], "right"), None);
        assert_eq!(decrypt(&sealed[..39], "right"), None);
        assert_eq!(decrypt(&[], "right"), None);
    }

    #[test]
    fn encrypt_is_xchacha20poly1305_under_sha256_of_the_key() {
        // Sealing with SHA-256("k") and the same nonce through the aead crate directly, without
        // associated data, must give exactly our ciphertext and tag.
        let mut rng = SeededRng::new(3);
        let sealed = encrypt(b"payload", "k", &mut rng);
        let key: [u8; 32] = Sha256::digest(b"k").into();
        let nonce: [u8; 24] = sealed[..24].try_into().unwrap();
        let direct = XChaCha20Poly1305::new(&key.into())
            .encrypt(&XNonce::from(nonce), &b"payload"[..])
            .unwrap();
        assert_eq!(&sealed[24..], &direct[..]);
    }

    #[test]
    fn encrypt_value_keeps_the_kind() {
        let mut rng = SeededRng::new(4);
        let s = encrypt_value(&Value::str("héllo"), "key", &mut rng).unwrap();
        let text = s.as_str().unwrap();
        assert!(BASE64.decode(text).is_ok(), "{text}");
        assert_eq!(
            decrypt_value(&s, "key").unwrap(),
            Value::some(Value::str("héllo"))
        );

        let b = encrypt_value(&Value::Bytes(vec![0, 255]), "key", &mut rng).unwrap();
        assert!(matches!(b, Value::Bytes(_)));
        assert_eq!(
            decrypt_value(&b, "key").unwrap(),
            Value::some(Value::Bytes(vec![0, 255]))
        );
    }

    /// Encrypting grows a value (a string's by a third, as base64): at the limit it is
    /// refused, so `s = encrypt(s, k)` in a loop fails cleanly rather than exhausting memory.
    #[test]
    fn encrypt_value_refuses_results_over_the_value_limit() {
        let mut rng = SeededRng::new(6);
        let overhead = NONCE_LEN + TAG_LEN;
        // The lengths the check predicts are the lengths encrypting makes.
        for n in [0, 1, 2, 3, 100, 1000] {
            let b = encrypt_value(&Value::Bytes(vec![7; n]), "k", &mut rng).unwrap();
            assert!(
                matches!(&b, Value::Bytes(b) if b.len() == n + overhead),
                "{n}"
            );
            let s = encrypt_value(&Value::Str("x".repeat(n)), "k", &mut rng).unwrap();
            let want = base64_len(n + overhead);
            assert!(matches!(&s, Value::Str(t) if t.len() == want), "{n}");
        }
        // One byte more than fits is refused before any work.
        let fits = MAX_VALUE_LEN - overhead;
        assert_eq!(
            encrypt_value(&Value::Bytes(vec![7; fits + 1]), "k", &mut rng),
            Err(BuiltinError::ResultTooLarge {
                function: "encrypt",
                len: MAX_VALUE_LEN + 1,
                max: MAX_VALUE_LEN
            })
        );
        assert_eq!(base64_len(MAX_VALUE_LEN / 4 * 3), MAX_VALUE_LEN);
        let text_fits = MAX_VALUE_LEN / 4 * 3 - overhead;
        assert!(matches!(
            encrypt_value(&Value::Str("x".repeat(text_fits + 1)), "k", &mut rng),
            Err(BuiltinError::ResultTooLarge { function: "encrypt", len, .. }) if len > MAX_VALUE_LEN
        ));
    }

    #[test]
    fn decrypt_value_failures_are_none() {
        let mut rng = SeededRng::new(5);
        let s = encrypt_value(&Value::str("x"), "key", &mut rng).unwrap();
        assert_eq!(decrypt_value(&s, "other").unwrap(), Value::none());
        assert_eq!(
            decrypt_value(&Value::str("not base64!"), "key").unwrap(),
            Value::none()
        );
        assert_eq!(
            decrypt_value(&Value::Bytes(vec![1, 2, 3]), "key").unwrap(),
            Value::none()
        );
        // Sealed bytes that are not UTF-8, opened as a string.
        let sealed = encrypt(&[0xff, 0xfe], "key", &mut rng);
        assert_eq!(
            decrypt_value(&Value::Str(BASE64.encode(sealed)), "key").unwrap(),
            Value::none()
        );
    }

    #[test]
    fn aead_rejects_other_kinds() {
        let mut rng = SeededRng::new(6);
        assert_eq!(
            encrypt_value(&Value::Int(1), "k", &mut rng),
            Err(BuiltinError::WrongKind {
                function: "encrypt",
                expected: "string or bytes",
                found: "int"
            })
        );
        assert!(decrypt_value(&Value::Unit, "k").is_err());
    }

    // ----- compression

    #[test]
    fn compress_round_trips_and_is_snappy_raw() {
        let data = b"abcabcabcabcabcabcabcabcabcabcabcabc".repeat(10);
        let packed = compress(&data);
        assert!(packed.len() < data.len());
        // The raw format starts with the uncompressed length as a varint: 360 = 0xe8 0x02.
        assert_eq!(&packed[..2], &[0xe8, 0x02]);
        assert_eq!(decompress(&packed), Some(data));
        assert_eq!(compress(b""), vec![0]);
        assert_eq!(decompress(&[0]), Some(vec![]));
        // A literal-only block written by hand: length 3, literal tag (len-1)<<2, bytes.
        assert_eq!(
            decompress(&[3, 2 << 2, b'x', b'y', b'z']),
            Some(b"xyz".to_vec())
        );
    }

    #[test]
    fn decompress_rejects_garbage_and_oversized_declarations() {
        assert_eq!(decompress(&[]), None);
        assert_eq!(decompress(&[5, 0xff]), None);
        // Declares 64 MiB + 1 (varint 0x81 0x80 0x80 0x20) with no body: refused before
        // allocating.
        assert_eq!(decompress(&[0x81, 0x80, 0x80, 0x20]), None);
        // Exactly 64 MiB of zeros is allowed.
        let big = vec![0u8; MAX_DECOMPRESSED_LEN];
        assert_eq!(
            decompress(&compress(&big)).map(|v| v.len()),
            Some(MAX_DECOMPRESSED_LEN)
        );
    }

    #[test]
    fn compress_value_conventions() {
        let s = compress_value(&Value::str("aaaaaaaaaaaaaaaaaaaaaaaa")).unwrap();
        assert!(BASE64.decode(s.as_str().unwrap()).is_ok());
        assert_eq!(
            decompress_value(&s).unwrap(),
            Value::some(Value::str("aaaaaaaaaaaaaaaaaaaaaaaa"))
        );
        let b = compress_value(&Value::Bytes(vec![1; 100])).unwrap();
        assert_eq!(
            decompress_value(&b).unwrap(),
            Value::some(Value::Bytes(vec![1; 100]))
        );
        assert_eq!(decompress_value(&Value::str("%%%")).unwrap(), Value::none());
        assert_eq!(
            decompress_value(&Value::Bytes(vec![9, 9])).unwrap(),
            Value::none()
        );
        let not_utf8 = Value::Str(BASE64.encode(compress(&[0xff])));
        assert_eq!(decompress_value(&not_utf8).unwrap(), Value::none());
        assert!(compress_value(&Value::Float(1.0)).is_err());
        assert!(decompress_value(&Value::Unit).is_err());
        // Incompressible input at the input limit: its base64 would pass the value limit.
        let mut x: u64 = 1;
        let noise: Vec<u8> = (0..MAX_DECOMPRESSED_LEN)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                b'!' + ((x >> 33) % 90) as u8
            })
            .collect();
        let noise = String::from_utf8(noise).unwrap();
        assert!(matches!(
            compress_value(&Value::Str(noise)),
            Err(BuiltinError::ResultTooLarge { function: "compress", len, .. }) if len > MAX_VALUE_LEN
        ));
        assert_eq!(
            compress_value(&Value::Bytes(vec![0; MAX_DECOMPRESSED_LEN + 1])),
            Err(BuiltinError::TooLarge {
                function: "compress",
                len: MAX_DECOMPRESSED_LEN + 1,
                max: MAX_DECOMPRESSED_LEN
            })
        );
    }

    // ----- quantile

    fn floats(xs: &[f64]) -> Vec<Value> {
        xs.iter().map(|&x| Value::Float(x)).collect()
    }

    #[test]
    fn quantile_matches_numpy_linear() {
        // numpy.quantile([1, 2, 3, 4], q): h = 3q.
        let xs = floats(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!(quantile(&xs, 0.0).unwrap(), 1.0);
        assert_eq!(quantile(&xs, 0.25).unwrap(), 1.75);
        assert_eq!(quantile(&xs, 0.5).unwrap(), 2.5);
        assert_eq!(quantile(&xs, 0.75).unwrap(), 3.25);
        assert_eq!(quantile(&xs, 1.0).unwrap(), 4.0);
        // numpy.quantile([10, 20, 30, 40, 50], 0.9) = 46.0 (h = 3.6).
        let ys = floats(&[50.0, 10.0, 40.0, 20.0, 30.0]);
        assert!((quantile(&ys, 0.9).unwrap() - 46.0).abs() < 1e-12);
        // numpy.quantile([1, 10], 0.1) = 1.9.
        assert!((quantile(&floats(&[1.0, 10.0]), 0.1).unwrap() - 1.9).abs() < 1e-12);
        // numpy.quantile([0, 1, 1, 100], 0.99) = 97.03 (h = 2.97).
        let zs = floats(&[0.0, 1.0, 1.0, 100.0]);
        assert!((quantile(&zs, 0.99).unwrap() - 97.03).abs() < 1e-9);
    }

    #[test]
    fn quantile_edge_cases() {
        assert_eq!(quantile(&[], 0.5), Err(BuiltinError::EmptyQuantile));
        assert_eq!(
            quantile(&floats(&[1.0]), f64::NAN).map_err(|e| e.to_string()),
            Err("quantile: q is NaN; it must be a number between 0 and 1".into())
        );
        for q in [-0.1, 1.5, f64::INFINITY] {
            assert_eq!(
                quantile(&floats(&[1.0, 2.0]), q),
                Err(BuiltinError::QuantileOutOfRange { q })
            );
        }
        // The message writes q as `str` would, not in 309 digits.
        assert_eq!(
            quantile(&floats(&[1.0]), 1e308).map_err(|e| e.to_string()),
            Err("quantile: q is 1e308; it must be a number between 0 and 1".into())
        );
        assert_eq!(
            BuiltinError::NonFiniteBound {
                lo: 0.0,
                hi: f64::INFINITY
            }
            .to_string(),
            "randomf(0.0, inf): both bounds must be finite numbers"
        );
        assert_eq!(quantile(&floats(&[7.0]), 0.3).unwrap(), 7.0);
        let inf = floats(&[f64::INFINITY, f64::INFINITY, 1.0]);
        assert_eq!(quantile(&inf, 0.9).unwrap(), f64::INFINITY);
        assert!(quantile(&floats(&[1.0, f64::NAN]), 1.0).unwrap().is_nan());
        assert_eq!(quantile(&floats(&[1.0, f64::NAN]), 0.0).unwrap(), 1.0);
    }

    #[test]
    fn quantile_accepts_every_numeric_kind() {
        let xs = vec![
            Value::Int(-2),
            Value::Uint(4),
            Value::Instant(1.0),
            Value::Float(3.0),
        ];
        // Sorted: -2, 1, 3, 4; h = 1.5.
        assert_eq!(quantile(&xs, 0.5).unwrap(), 2.0);
        assert!(matches!(
            quantile(&[Value::str("1")], 0.5),
            Err(BuiltinError::WrongKind {
                function: "quantile",
                ..
            })
        ));
    }

    // ----- conversions

    #[test]
    fn to_str_formats_numbers() {
        let s = |v: Value| to_str(&v).unwrap();
        assert_eq!(s(Value::Int(-12)), "-12");
        assert_eq!(s(Value::Uint(u64::MAX)), "18446744073709551615");
        assert_eq!(s(Value::Bool(true)), "true");
        assert_eq!(s(Value::Bool(false)), "false");
        assert_eq!(s(Value::str("as is")), "as is");
        assert_eq!(s(Value::Float(1.0)), "1.0");
        assert_eq!(s(Value::Float(0.5)), "0.5");
        assert_eq!(s(Value::Float(-0.0)), "-0.0");
        assert_eq!(s(Value::Float(0.1 + 0.2)), "0.30000000000000004");
        assert_eq!(s(Value::Float(1e15)), "1000000000000000.0");
        assert_eq!(s(Value::Float(1e16)), "1e16");
        assert_eq!(s(Value::Float(1.5e300)), "1.5e300");
        assert_eq!(s(Value::Float(0.0001)), "0.0001");
        assert_eq!(s(Value::Float(1e-5)), "1e-5");
        assert_eq!(s(Value::Float(f64::INFINITY)), "inf");
        assert_eq!(s(Value::Float(f64::NEG_INFINITY)), "-inf");
        assert_eq!(s(Value::Float(f64::NAN)), "NaN");
        assert_eq!(s(Value::Instant(2.5)), "2.5");
        assert!(to_str(&Value::Bytes(vec![])).is_err());
        assert!(to_str(&Value::Unit).is_err());
    }

    #[test]
    fn to_str_of_floats_round_trips() {
        let mut rng = SeededRng::new(8);
        for _ in 0..10_000 {
            let f = f64::from_bits(rng.next_u64());
            let text = to_str(&Value::Float(f)).unwrap();
            let back = parse_float(&text).unwrap();
            assert!(
                back.to_bits() == f.to_bits() || (f.is_nan() && back.is_nan()),
                "{text}"
            );
            assert!(text.contains(['.', 'e']) || text.ends_with("inf") || text == "NaN");
        }
    }

    #[test]
    fn to_int_semantics() {
        let i = |v: Value| to_int(&v).unwrap();
        assert_eq!(i(Value::Int(-5)), -5);
        assert_eq!(i(Value::Uint(i64::MAX as u64)), i64::MAX);
        assert_eq!(i(Value::Float(-2.9)), -2);
        assert_eq!(i(Value::Float(2.9)), 2);
        assert_eq!(i(Value::Float(-0.0)), 0);
        assert_eq!(i(Value::Float(INT_LOW)), i64::MIN);
        // The largest float below 2^63.
        assert_eq!(
            i(Value::Float(9_223_372_036_854_774_784.0)),
            9_223_372_036_854_774_784
        );
        assert_eq!(i(Value::Instant(3.5)), 3);
        assert_eq!(i(Value::Bool(true)), 1);
        assert!(to_int(&Value::str("3")).is_err());
    }

    #[test]
    fn to_uint_semantics() {
        let u = |v: Value| to_uint(&v).unwrap();
        assert_eq!(u(Value::Int(i64::MAX)), i64::MAX as u64);
        assert_eq!(u(Value::Int(0)), 0);
        assert_eq!(u(Value::Uint(7)), 7);
        assert_eq!(u(Value::Float(3.5)), 3);
        assert_eq!(u(Value::Float(-0.5)), 0);
        assert_eq!(u(Value::Float(-0.0)), 0);
        // The largest float below 2^64.
        assert_eq!(
            u(Value::Float(18_446_744_073_709_549_568.0)),
            u64::MAX - 2047
        );
        assert_eq!(u(Value::Bool(false)), 0);
        assert!(to_uint(&Value::Unit).is_err());
    }

    /// One rule for every source type: a value the result cannot hold is an error. (NaN gave
    /// 0, floats saturated and ints wrapped, so `uint(-9)` and `uint(-9.0)` disagreed.)
    #[test]
    fn int_and_uint_refuse_what_they_cannot_hold() {
        let refused =
            |f: fn(&Value) -> Result<i64, BuiltinError>, v: Value| f(&v).unwrap_err().to_string();
        let int = |v| refused(to_int, v);
        let uint = |v| refused(|v| to_uint(v).map(|u| u as i64), v);
        let range = "outside the int range, -9223372036854775808 to 9223372036854775807";
        assert_eq!(
            int(Value::Float(f64::NAN)),
            "int(NaN): NaN has no integer value"
        );
        assert_eq!(
            int(Value::Float(f64::INFINITY)),
            format!("int(inf): {range}")
        );
        assert_eq!(
            int(Value::Float(f64::NEG_INFINITY)),
            format!("int(-inf): {range}")
        );
        assert_eq!(
            int(Value::Float(INT_HIGH)),
            format!("int(9.223372036854776e18): {range}")
        );
        // The float below -2^63.
        assert!(int(Value::Float(-9_223_372_036_854_777_856.0)).contains(range));
        assert_eq!(int(Value::Instant(1e300)), format!("int(1e300): {range}"));
        assert_eq!(
            int(Value::Uint(i64::MAX as u64 + 1)),
            format!("int(9223372036854775808): {range}")
        );

        let range = "outside the uint range, 0 to 18446744073709551615";
        assert_eq!(uint(Value::Int(-9)), format!("uint(-9): {range}"));
        assert_eq!(uint(Value::Float(-9.0)), format!("uint(-9.0): {range}"));
        assert_eq!(uint(Value::Float(-1.0)), format!("uint(-1.0): {range}"));
        assert_eq!(
            uint(Value::Int(i64::MIN)),
            format!("uint(-9223372036854775808): {range}")
        );
        assert_eq!(
            uint(Value::Float(f64::NAN)),
            "uint(NaN): NaN has no integer value"
        );
        assert_eq!(
            uint(Value::Float(f64::INFINITY)),
            format!("uint(inf): {range}")
        );
        assert_eq!(
            uint(Value::Float(UINT_HIGH)),
            format!("uint(1.8446744073709552e19): {range}")
        );
        assert_eq!(
            uint(Value::Instant(f64::NAN)),
            "uint(NaN): NaN has no integer value"
        );
    }

    #[test]
    fn to_float_semantics() {
        let f = |v: Value| to_float(&v).unwrap();
        assert_eq!(f(Value::Int(-3)), -3.0);
        assert_eq!(f(Value::Int(i64::MAX)), 9_223_372_036_854_775_808.0);
        assert_eq!(f(Value::Uint(u64::MAX)), 18_446_744_073_709_551_616.0);
        assert_eq!(f(Value::Float(0.25)), 0.25);
        assert_eq!(f(Value::Instant(9.0)), 9.0);
        assert_eq!(f(Value::Bool(true)), 1.0);
        assert!(to_float(&Value::str("1.0")).is_err());
    }

    #[test]
    fn parse_int_and_float() {
        assert_eq!(parse_int(" 42 \n"), Some(42));
        assert_eq!(parse_int("-7"), Some(-7));
        assert_eq!(parse_int("+7"), Some(7));
        assert_eq!(parse_int("9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int("9223372036854775808"), None);
        assert_eq!(parse_int("1.0"), None);
        assert_eq!(parse_int("0x10"), None);
        assert_eq!(parse_int(""), None);
        assert_eq!(parse_int("1 2"), None);

        assert_eq!(parse_float(" 2.5 "), Some(2.5));
        assert_eq!(parse_float("1e3"), Some(1000.0));
        assert_eq!(parse_float(".5"), Some(0.5));
        assert_eq!(parse_float("-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_float("Infinity"), Some(f64::INFINITY));
        assert!(parse_float("NaN").unwrap().is_nan());
        assert_eq!(parse_float("1e999"), Some(f64::INFINITY));
        assert_eq!(parse_float("abc"), None);
        assert_eq!(parse_float(""), None);
    }

    // ----- numeric helpers

    #[test]
    fn min_max_of_integers() {
        assert_eq!(
            min_value(&Value::Int(-3), &Value::Int(2)).unwrap(),
            Value::Int(-3)
        );
        assert_eq!(
            max_value(&Value::Int(-3), &Value::Int(2)).unwrap(),
            Value::Int(2)
        );
        assert_eq!(
            min_value(&Value::Uint(u64::MAX), &Value::Uint(0)).unwrap(),
            Value::Uint(0)
        );
        assert_eq!(
            max_value(&Value::Uint(u64::MAX), &Value::Uint(0)).unwrap(),
            Value::Uint(u64::MAX)
        );
    }

    #[test]
    fn min_max_of_floats_follow_ieee_minimum_maximum() {
        let f = Value::Float;
        let min = |a, b| min_value(&f(a), &f(b)).unwrap().as_float().unwrap();
        let max = |a, b| max_value(&f(a), &f(b)).unwrap().as_float().unwrap();
        assert_eq!(min(1.0, 2.0), 1.0);
        assert_eq!(max(1.0, 2.0), 2.0);
        assert!(min(f64::NAN, 1.0).is_nan());
        assert!(min(1.0, f64::NAN).is_nan());
        assert!(max(f64::NAN, 1.0).is_nan());
        assert!(max(1.0, f64::NAN).is_nan());
        assert!(min(0.0, -0.0).is_sign_negative());
        assert!(min(-0.0, 0.0).is_sign_negative());
        assert!(max(0.0, -0.0).is_sign_positive());
        assert!(max(-0.0, 0.0).is_sign_positive());
        assert_eq!(min(f64::NEG_INFINITY, 0.0), f64::NEG_INFINITY);
        assert_eq!(
            max_value(&Value::Instant(1.0), &Value::Instant(4.0)).unwrap(),
            Value::Instant(4.0)
        );
    }

    #[test]
    fn min_max_reject_mixed_or_non_numeric() {
        assert_eq!(
            min_value(&Value::Int(1), &Value::Uint(1)),
            Err(BuiltinError::MixedKinds {
                function: "min",
                left: "int",
                right: "uint"
            })
        );
        assert_eq!(
            max_value(&Value::Float(1.0), &Value::Instant(1.0)),
            Err(BuiltinError::MixedKinds {
                function: "max",
                left: "float",
                right: "Instant"
            })
        );
        assert_eq!(
            max_value(&Value::str("a"), &Value::str("b")),
            Err(BuiltinError::WrongKind {
                function: "max",
                expected: "a number or Instant",
                found: "string"
            })
        );
    }

    #[test]
    fn abs_semantics() {
        assert_eq!(abs_value(&Value::Int(-5)).unwrap(), Value::Int(5));
        assert_eq!(
            abs_value(&Value::Int(i64::MIN)).unwrap(),
            Value::Int(i64::MIN)
        );
        assert_eq!(abs_value(&Value::Uint(5)).unwrap(), Value::Uint(5));
        assert_eq!(
            abs_value(&Value::Float(-0.0))
                .unwrap()
                .as_float()
                .unwrap()
                .to_bits(),
            0
        );
        assert_eq!(abs_value(&Value::Float(-2.5)).unwrap(), Value::Float(2.5));
        assert!(abs_value(&Value::str("x")).is_err());
    }

    #[test]
    fn errors_read_well() {
        assert_eq!(
            BuiltinError::EmptyRange { lo: 3, hi: 3 }.to_string(),
            "randomi(3, 3): the range is empty; `hi` must be greater than `lo`"
        );
        assert_eq!(
            wrong_kind("encrypt", "string or bytes", &Value::Int(1)).to_string(),
            "encrypt: expected string or bytes, got int"
        );
    }
}
