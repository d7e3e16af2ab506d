//! Static types of the element language.

use std::fmt;

use weft_hostcalls::Value;

/// A type of the element language (LANGUAGE.md §2).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// The type of statements and of lambdas without `return`.
    Unit,
    Bool,
    Int,
    Uint,
    Float,
    Str,
    Bytes,
    Instant,
    Pair(Box<Type>, Box<Type>),
    Vec(Box<Type>),
    Map(Box<Type>, Box<Type>),
    Option(Box<Type>),
    /// A request message of the edge's method.
    Request,
    /// A response message of the edge's method.
    Response,
    /// An auxiliary output channel (declared in `state`).
    Channel,
    /// A message field whose schema is not known at check time (no `--proto`, or a field name
    /// that comes from an unbound parameter). It is compatible with every type; a chain that
    /// runs always has the schema, so no executor ever sees it.
    Dyn,
}

impl Type {
    pub fn pair(a: Type, b: Type) -> Type {
        Type::Pair(Box::new(a), Box::new(b))
    }

    pub fn vec(t: Type) -> Type {
        Type::Vec(Box::new(t))
    }

    pub fn map(k: Type, v: Type) -> Type {
        Type::Map(Box::new(k), Box::new(v))
    }

    pub fn option(t: Type) -> Type {
        Type::Option(Box::new(t))
    }

    pub fn is_numeric(&self) -> bool {
        matches!(self, Type::Int | Type::Uint | Type::Float | Type::Dyn)
    }

    pub fn is_integer(&self) -> bool {
        matches!(self, Type::Int | Type::Uint | Type::Dyn)
    }

    pub fn is_message(&self) -> bool {
        matches!(self, Type::Request | Type::Response)
    }

    /// Whether a value of this type may be a map key or be compared with `==`.
    pub fn is_comparable(&self) -> bool {
        match self {
            Type::Channel | Type::Unit => false,
            Type::Pair(a, b) => a.is_comparable() && b.is_comparable(),
            Type::Vec(t) | Type::Option(t) => t.is_comparable(),
            Type::Map(k, v) => k.is_comparable() && v.is_comparable(),
            _ => true,
        }
    }

    /// Whether the type mentions [`Type::Dyn`] anywhere.
    pub fn has_dyn(&self) -> bool {
        match self {
            Type::Dyn => true,
            Type::Pair(a, b) | Type::Map(a, b) => a.has_dyn() || b.has_dyn(),
            Type::Vec(t) | Type::Option(t) => t.has_dyn(),
            _ => false,
        }
    }

    /// The value a missing map entry or an unset field reads as (`get` with a lambda on a
    /// missing key starts from it).
    pub fn zero_value(&self) -> Value {
        match self {
            Type::Unit | Type::Channel | Type::Dyn => Value::Unit,
            Type::Bool => Value::Bool(false),
            Type::Int => Value::Int(0),
            Type::Uint => Value::Uint(0),
            Type::Float => Value::Float(0.0),
            Type::Str => Value::Str(String::new()),
            Type::Bytes => Value::Bytes(Vec::new()),
            Type::Instant => Value::Instant(0.0),
            Type::Pair(a, b) => Value::pair(a.zero_value(), b.zero_value()),
            Type::Vec(_) => Value::Vec(Vec::new()),
            Type::Map(_, _) => Value::Map(Default::default()),
            Type::Option(_) => Value::none(),
            Type::Request => Value::Msg(std::sync::Arc::new(weft_hostcalls::Message::request(
                Vec::new(),
            ))),
            Type::Response => Value::Msg(std::sync::Arc::new(weft_hostcalls::Message::response(
                Vec::new(),
            ))),
        }
    }

    /// Whether `v` is a value of this type (used to validate parameters and control-plane
    /// writes, which arrive from outside the type checker).
    pub fn admits(&self, v: &Value) -> bool {
        match (self, v) {
            (Type::Dyn, _) => true,
            (Type::Unit, Value::Unit)
            | (Type::Bool, Value::Bool(_))
            | (Type::Int, Value::Int(_))
            | (Type::Uint, Value::Uint(_))
            | (Type::Float, Value::Float(_))
            | (Type::Str, Value::Str(_))
            | (Type::Bytes, Value::Bytes(_))
            | (Type::Instant, Value::Instant(_)) => true,
            (Type::Pair(a, b), Value::Pair(p)) => a.admits(&p.0) && b.admits(&p.1),
            (Type::Vec(t), Value::Vec(items)) => items.iter().all(|i| t.admits(i)),
            (Type::Map(k, val), Value::Map(m)) => {
                m.iter().all(|(mk, mv)| k.admits(mk) && val.admits(mv))
            }
            (Type::Option(t), Value::Opt(o)) => o.as_ref().is_none_or(|x| t.admits(x)),
            (Type::Request, Value::Msg(m)) => m.kind == weft_hostcalls::MsgKind::Request,
            (Type::Response, Value::Msg(m)) => m.kind == weft_hostcalls::MsgKind::Response,
            _ => false,
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Unit => f.write_str("()"),
            Type::Bool => f.write_str("bool"),
            Type::Int => f.write_str("int"),
            Type::Uint => f.write_str("uint"),
            Type::Float => f.write_str("float"),
            Type::Str => f.write_str("string"),
            Type::Bytes => f.write_str("bytes"),
            Type::Instant => f.write_str("Instant"),
            Type::Pair(a, b) => write!(f, "<{a}, {b}>"),
            Type::Vec(t) => write!(f, "Vec<{t}>"),
            Type::Map(k, v) => write!(f, "Map<{k}, {v}>"),
            Type::Option(t) => write!(f, "Option<{t}>"),
            Type::Request => f.write_str("Request"),
            Type::Response => f.write_str("Response"),
            Type::Channel => f.write_str("Channel"),
            Type::Dyn => f.write_str("<unknown field type>"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_uses_source_syntax() {
        let t = Type::map(Type::Int, Type::pair(Type::Int, Type::Instant));
        assert_eq!(t.to_string(), "Map<int, <int, Instant>>");
        assert_eq!(
            Type::option(Type::vec(Type::Float)).to_string(),
            "Option<Vec<float>>"
        );
    }

    #[test]
    fn admits_checks_nested_values() {
        let t = Type::vec(Type::Str);
        assert!(t.admits(&Value::Vec(vec![Value::str("a")])));
        assert!(!t.admits(&Value::Vec(vec![Value::Int(1)])));
        assert!(Type::option(Type::Int).admits(&Value::none()));
    }
}
