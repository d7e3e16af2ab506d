//! Run-time values of the element language.
//!
//! One representation serves the interpreter, the state stores and the built-in functions, so
//! that every executor shares the exact semantics of equality, ordering and conversion.

use std::borrow::{Borrow, Cow};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::status::Code;
use crate::text::{HeaderError, writable_header};

/// A value of the element language.
///
/// Maps are ordered by key ([`Value`]'s total order) so iteration with `foreach` is
/// deterministic in every executor.
#[derive(Clone, Debug)]
pub enum Value {
    /// The value of a statement or of a lambda without `return`.
    Unit,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    /// Monotonic time in seconds.
    Instant(f64),
    Pair(Box<(Value, Value)>),
    Vec(Vec<Value>),
    Map(BTreeMap<Value, Value>),
    Opt(Option<Box<Value>>),
    /// A request or response; shared because caches keep responses in state.
    Msg(Arc<Message>),
}

/// Whether a message travels towards the server or back to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MsgKind {
    Request,
    Response,
}

/// A message as the runtime keeps it: protobuf wire bytes plus gRPC metadata.
///
/// The bytes are never decoded as a whole; field reads and writes go through the schema-aware
/// wire codec, so unknown fields survive every element.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Message {
    pub kind: MsgKind,
    pub bytes: Vec<u8>,
    /// gRPC metadata (headers for requests, headers and trailers for responses).
    pub headers: BTreeMap<String, String>,
    /// The status of a response; `Code::Ok` for requests and successful responses.
    pub code: Code,
    /// The status message of a failed response (empty otherwise).
    pub status_message: String,
}

impl Message {
    pub fn request(bytes: Vec<u8>) -> Self {
        Message {
            kind: MsgKind::Request,
            bytes,
            headers: BTreeMap::new(),
            code: Code::Ok,
            status_message: String::new(),
        }
    }

    pub fn response(bytes: Vec<u8>) -> Self {
        Message {
            kind: MsgKind::Response,
            ..Message::request(bytes)
        }
    }

    /// A failed response: no payload, a status code and message.
    pub fn error(code: Code, message: impl Into<String>) -> Self {
        Message {
            kind: MsgKind::Response,
            bytes: Vec::new(),
            headers: BTreeMap::new(),
            code,
            status_message: message.into(),
        }
    }

    /// `get_rpc_header(rpc, name)`: the header's value, `''` when absent. A `-bin` key
    /// reads as absent whatever it holds: the runtime never shows elements the binary values
    /// it receives (docs/c-abi.md), so were one written here readable, an element beside the
    /// writer would read it and one across the network would not, and moving it would change
    /// what it reads where the planner cannot see.
    pub fn element_header(&self, name: &str) -> &str {
        let name = crate::text::header_name(name);
        if name.ends_with("-bin") {
            return "";
        }
        self.headers.get(&*name).map_or("", String::as_str)
    }

    /// `set_rpc_header(rpc, name, value)`, as every executor runs it. The name is
    /// lower-cased ([`crate::text::header_name`]), then checked with the rule the checker
    /// applies to literals ([`crate::text::writable_header`]). An empty value removes the
    /// header: `get_rpc_header` gives `''` for a missing one, so nothing in the language
    /// tells the two apart, and removing is how an element keeps a header from going on.
    pub fn set_header(&mut self, name: String, value: String) -> Result<(), HeaderError> {
        // As `header_name`, in place: the name is ours.
        let mut name = name;
        name.make_ascii_lowercase();
        writable_header(&name, Some(&value))?;
        if value.is_empty() {
            self.headers.remove(&name);
        } else {
            self.headers.insert(name, value);
        }
        Ok(())
    }
}

impl Value {
    pub fn str(s: impl Into<String>) -> Self {
        Value::Str(s.into())
    }

    pub fn pair(a: Value, b: Value) -> Self {
        Value::Pair(Box::new((a, b)))
    }

    pub fn some(v: Value) -> Self {
        Value::Opt(Some(Box::new(v)))
    }

    pub fn none() -> Self {
        Value::Opt(None)
    }

    /// Name of the variant, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Unit => "unit",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Uint(_) => "uint",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::Instant(_) => "Instant",
            Value::Pair(_) => "pair",
            Value::Vec(_) => "Vec",
            Value::Map(_) => "Map",
            Value::Opt(_) => "Option",
            Value::Msg(_) => "message",
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_float(&self) -> Option<f64> {
        match self {
            Value::Float(f) | Value::Instant(f) => Some(*f),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Rank of the variant in the total order across variants.
    fn rank(&self) -> u8 {
        match self {
            Value::Unit => 0,
            Value::Bool(_) => 1,
            Value::Int(_) => 2,
            Value::Uint(_) => 3,
            Value::Float(_) => 4,
            Value::Str(_) => STR_RANK,
            Value::Bytes(_) => 6,
            Value::Instant(_) => 7,
            Value::Pair(_) => 8,
            Value::Vec(_) => 9,
            Value::Map(_) => 10,
            Value::Opt(_) => 11,
            Value::Msg(_) => 12,
        }
    }

    /// The value as a map key: every float in it (instants too, inside pairs, vectors,
    /// options and maps) with `-0.0` made `0.0` and every NaN the one quiet NaN
    /// ([`canonical_float`]). The language cannot tell those apart (`0.0 == -0.0`, and a
    /// NaN's sign and payload never show), but [`Value`]'s total order can: a key that kept
    /// them would be two entries for one value, and a NaN key would differ between
    /// processors whose arithmetic makes different NaNs. Every store and every map value
    /// looks keys up and stores them in this form.
    pub fn canonical_key(&self) -> Cow<'_, Value> {
        if self.is_canonical() {
            Cow::Borrowed(self)
        } else {
            Cow::Owned(self.clone().canonical())
        }
    }

    /// [`Value::canonical_key`] of an owned value.
    pub fn into_canonical_key(self) -> Value {
        if self.is_canonical() {
            self
        } else {
            self.canonical()
        }
    }

    fn is_canonical(&self) -> bool {
        match self {
            Value::Float(f) | Value::Instant(f) => canonical_float(*f).to_bits() == f.to_bits(),
            Value::Pair(p) => p.0.is_canonical() && p.1.is_canonical(),
            Value::Vec(xs) => xs.iter().all(Value::is_canonical),
            Value::Map(m) => m.iter().all(|(k, v)| k.is_canonical() && v.is_canonical()),
            Value::Opt(Some(x)) => x.is_canonical(),
            _ => true,
        }
    }

    fn canonical(self) -> Value {
        match self {
            Value::Float(f) => Value::Float(canonical_float(f)),
            Value::Instant(f) => Value::Instant(canonical_float(f)),
            Value::Pair(p) => {
                let (a, b) = *p;
                Value::pair(a.canonical(), b.canonical())
            }
            Value::Vec(xs) => Value::Vec(xs.into_iter().map(Value::canonical).collect()),
            Value::Map(m) => Value::Map(
                m.into_iter()
                    .map(|(k, v)| (k.canonical(), v.canonical()))
                    .collect(),
            ),
            Value::Opt(Some(x)) => Value::some(x.canonical()),
            v => v,
        }
    }

    /// The language's `==`: IEEE equality for floats (NaN differs from itself), structural
    /// equality otherwise. Rust's `Eq` on [`Value`] is the total order used for map keys.
    pub fn lang_eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Float(a), Value::Float(b)) | (Value::Instant(a), Value::Instant(b)) => a == b,
            (Value::Pair(a), Value::Pair(b)) => a.0.lang_eq(&b.0) && a.1.lang_eq(&b.1),
            (Value::Vec(a), Value::Vec(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.lang_eq(y))
            }
            // Keys compare as the map orders them (they are canonical keys: one 0.0, one
            // NaN); values with the language's `==`, as in every other container.
            (Value::Map(a), Value::Map(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|((ka, va), (kb, vb))| ka == kb && va.lang_eq(vb))
            }
            (Value::Opt(a), Value::Opt(b)) => match (a, b) {
                (Some(a), Some(b)) => a.lang_eq(b),
                (None, None) => true,
                _ => false,
            },
            _ => self == other,
        }
    }
}

/// `f` with `-0.0` made `0.0` and every NaN the quiet NaN `0x7ff8000000000000`: one float per
/// value the language can tell apart, for map keys and `hash`.
pub fn canonical_float(f: f64) -> f64 {
    if f.is_nan() {
        f64::NAN
    } else if f == 0.0 {
        0.0
    } else {
        f
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Value {}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A total order, so values can key ordered maps. Floats use IEEE `totalOrder`.
impl Ord for Value {
    fn cmp(&self, other: &Self) -> Ordering {
        use Value::*;
        match (self, other) {
            (Unit, Unit) => Ordering::Equal,
            (Bool(a), Bool(b)) => a.cmp(b),
            (Int(a), Int(b)) => a.cmp(b),
            (Uint(a), Uint(b)) => a.cmp(b),
            (Float(a), Float(b)) | (Instant(a), Instant(b)) => a.total_cmp(b),
            (Str(a), Str(b)) => a.cmp(b),
            (Bytes(a), Bytes(b)) => a.cmp(b),
            (Pair(a), Pair(b)) => a.cmp(b),
            (Vec(a), Vec(b)) => a.cmp(b),
            (Map(a), Map(b)) => a.cmp(b),
            (Opt(a), Opt(b)) => a.cmp(b),
            (Msg(a), Msg(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

/// A map key looked up in a `BTreeMap<Value, _>` without being made a [`Value`]: a string
/// borrowed from a message, say, which would otherwise be copied into a `Value::Str` for
/// every lookup. `Value` borrows as `dyn MapKey`, and both order exactly as [`Value`]'s own
/// `Ord` does (which `Borrow` requires of a map's key). A borrowed key must already be in
/// [`Value::canonical_key`] form; strings always are.
pub trait MapKey {
    fn key_ref(&self) -> KeyRef<'_>;
}

/// What a [`MapKey`] compares as. Its one field is private, so a string is always `Str`
/// whichever way it was made, and the order below agrees with [`Value`]'s.
#[derive(Clone, Copy, Debug)]
pub struct KeyRef<'a>(KeyRepr<'a>);

#[derive(Clone, Copy, Debug)]
enum KeyRepr<'a> {
    Str(&'a str),
    /// Never a `Value::Str`.
    Other(&'a Value),
}

impl<'a> KeyRef<'a> {
    pub fn str(s: &'a str) -> Self {
        KeyRef(KeyRepr::Str(s))
    }

    pub fn value(v: &'a Value) -> Self {
        match v {
            Value::Str(s) => KeyRef(KeyRepr::Str(s)),
            other => KeyRef(KeyRepr::Other(other)),
        }
    }
}

/// `a.cmp(b)`. Map keys looked up by string are mostly short names that differ in their
/// first bytes; a byte loop there costs a few instructions where `memcmp` costs a call
/// through the PLT and its set-up. Longer ones still go to `memcmp`.
#[inline]
fn short_str_cmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len().min(b.len()) > 16 {
        return a.cmp(b);
    }
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

/// [`Value::rank`] of a string, for comparing a borrowed string with another variant.
const STR_RANK: u8 = 5;

impl Ord for KeyRef<'_> {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.0, other.0) {
            (KeyRepr::Str(a), KeyRepr::Str(b)) => short_str_cmp(a, b),
            (KeyRepr::Other(a), KeyRepr::Other(b)) => a.cmp(b),
            (KeyRepr::Str(_), KeyRepr::Other(b)) => STR_RANK.cmp(&b.rank()),
            (KeyRepr::Other(a), KeyRepr::Str(_)) => a.rank().cmp(&STR_RANK),
        }
    }
}

impl PartialOrd for KeyRef<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for KeyRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for KeyRef<'_> {}

impl MapKey for Value {
    #[inline]
    fn key_ref(&self) -> KeyRef<'_> {
        KeyRef::value(self)
    }
}

impl MapKey for &str {
    #[inline]
    fn key_ref(&self) -> KeyRef<'_> {
        KeyRef::str(self)
    }
}

impl<'a> Borrow<dyn MapKey + 'a> for Value {
    fn borrow(&self) -> &(dyn MapKey + 'a) {
        self
    }
}

impl Ord for dyn MapKey + '_ {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        self.key_ref().cmp(&other.key_ref())
    }
}

impl PartialOrd for dyn MapKey + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn MapKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for dyn MapKey + '_ {}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Uint(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.to_owned())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Borrow` requires a borrowed key to order as the owned one does.
    #[test]
    fn borrowed_keys_order_as_values_do() {
        let values = [
            Value::Unit,
            Value::Bool(false),
            Value::Int(-1),
            Value::Uint(1),
            Value::Float(f64::NAN),
            Value::str(""),
            Value::str("a"),
            Value::str("ab"),
            Value::str("b"),
            Value::str("abcdefghijklmnop"),
            Value::str("abcdefghijklmnopq"),
            Value::str("abcdefghijklmnopr"),
            Value::str("abcdefghijklmnoq"),
            Value::str("\u{e9}t\u{e9}"),
            Value::Bytes(b"a".to_vec()),
            Value::Instant(0.0),
            Value::pair(Value::str("a"), Value::Unit),
            Value::Vec(vec![]),
            Value::Map(BTreeMap::new()),
            Value::none(),
        ];
        for a in &values {
            for b in &values {
                let (ka, kb): (&dyn MapKey, &dyn MapKey) = (a, b);
                assert_eq!(ka.cmp(kb), a.cmp(b), "{a:?} against {b:?}");
                if let Value::Str(s) = a {
                    let borrowed: &dyn MapKey = &s.as_str();
                    assert_eq!(borrowed.cmp(kb), a.cmp(b), "{s:?} against {b:?}");
                    assert_eq!(kb.cmp(borrowed), b.cmp(a), "{b:?} against {s:?}");
                }
            }
        }
    }

    #[test]
    fn nan_is_not_equal_to_itself_in_the_language_but_orders_in_maps() {
        let nan = Value::Float(f64::NAN);
        assert!(!nan.lang_eq(&nan));
        let mut m = BTreeMap::new();
        m.insert(nan.clone(), Value::Int(1));
        assert_eq!(m.get(&nan), Some(&Value::Int(1)));
    }

    /// `==` on a map compares its values as `==` on a vector does: NaN differs from
    /// itself, 0.0 equals -0.0.
    #[test]
    fn map_equality_uses_the_languages_float_equality_for_values() {
        let map = |v: f64| Value::Map(BTreeMap::from([(Value::Int(1), Value::Float(v))]));
        let vec = |v: f64| Value::Vec(vec![Value::Float(v)]);
        for (a, b) in [(f64::NAN, f64::NAN), (0.0, -0.0), (1.0, 1.0), (1.0, 2.0)] {
            assert_eq!(
                map(a).lang_eq(&map(b)),
                vec(a).lang_eq(&vec(b)),
                "{a} == {b}"
            );
        }
    }

    #[test]
    fn canonical_keys_have_one_zero_and_one_nan() {
        let f = Value::Float;
        let bits = |v: &Value| match v {
            Value::Float(x) | Value::Instant(x) => x.to_bits(),
            _ => panic!("{v:?}"),
        };
        assert_eq!(bits(&f(-0.0).canonical_key()), 0);
        assert_eq!(bits(&Value::Instant(-0.0).into_canonical_key()), 0);
        for nan in [f64::NAN, -f64::NAN, f64::from_bits(0x7ff0_0000_0000_0001)] {
            assert_eq!(bits(&f(nan).canonical_key()), 0x7ff8_0000_0000_0000);
        }
        assert_eq!(bits(&f(-1.5).canonical_key()), (-1.5f64).to_bits());
        let nested = |z: f64| {
            Value::pair(
                Value::Vec(vec![Value::some(f(z))]),
                Value::Map(BTreeMap::from([(f(z), f(z))])),
            )
        };
        let key = nested(-0.0).into_canonical_key();
        assert_eq!(key, nested(0.0));
        assert!(matches!(key.canonical_key(), Cow::Borrowed(_)));
        assert!(matches!(Value::str("k").canonical_key(), Cow::Borrowed(_)));
    }

    #[test]
    fn order_is_total_across_variants() {
        let mut v = vec![
            Value::str("b"),
            Value::Int(3),
            Value::Bool(true),
            Value::str("a"),
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                Value::Bool(true),
                Value::Int(3),
                Value::str("a"),
                Value::str("b")
            ]
        );
    }
}
