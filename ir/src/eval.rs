//! Pure operations of the language: operators, conversions and pure built-ins.
//!
//! The checker folds constants with these functions and the interpreter evaluates with them,
//! so a folded expression and an evaluated one can never disagree.

use weft_hostcalls::builtins::{self, BuiltinError};
use weft_hostcalls::state::StateError;
use weft_hostcalls::{Code, HeaderError, Value};

use crate::ast::{BinOp, UnOp};
use crate::ir::Builtin;
use crate::types::Type;
use crate::wire::WireError;

/// Why an RPC could not be processed. Each maps to a gRPC status: malformed message bytes
/// are the caller's fault (INVALID_ARGUMENT); everything else is an element's run-time error
/// (INTERNAL) and counts against that element.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    #[error("integer division by zero")]
    DivisionByZero,
    #[error("index {index} is out of range for a vector of length {len}")]
    IndexOutOfRange { index: i64, len: usize },
    #[error("{0} is None")]
    UnwrapNone(String),
    #[error(transparent)]
    Builtin(#[from] BuiltinError),
    #[error(transparent)]
    State(#[from] StateError),
    /// A header name or value computed at run time that `set_rpc_header` may not write
    /// (the checker refuses such literals).
    #[error("set_rpc_header: {0}")]
    Header(#[from] HeaderError),
    /// The RPC's bytes do not decode where a handler reads or writes them
    /// (INVALID_ARGUMENT, counted as malformed).
    #[error("malformed message: {0}")]
    Malformed(WireError),
    /// A handler ran more `foreach` iterations than its element's limit (`max_iterations`
    /// in the config, [`MAX_ITERATIONS`] by default).
    #[error("more than {max} foreach iterations in one handler (nested loops over large state?)")]
    TooManyIterations { max: u64 },
    /// A `require(condition, message)` of `init` did not hold: the element refuses its
    /// parameters, in its own words.
    #[error("{0}")]
    Required(String),
    /// An operand had a kind the checker should have excluded; a bug, reported not panicked.
    #[error("internal type error: {0}")]
    Type(String),
}

/// The most `foreach` iterations one run of one element's handler may make, nested loops
/// counted together, unless the element's config sets `max_iterations`. Past it the RPC is rejected (INTERNAL) and the element's error counter
/// grows, as for any run-time error. Without a bound, two nested loops over a map the
/// element grows per RPC make the data path quadratic in the map, and one RPC can stall
/// its thread for minutes. A million iterations take tens of milliseconds interpreted.
pub const MAX_ITERATIONS: u64 = 1_000_000;

/// The highest `max_iterations` a config may set: a billion iterations already hold a
/// thread for about a minute interpreted, and a limit much above it bounds nothing.
pub const MAX_ITERATIONS_CEILING: u64 = 1_000_000_000;

/// One more `foreach` iteration of a handler run that has made `*done` so far, against the
/// element instance's limit `max` ([`MAX_ITERATIONS`] unless its config sets another).
pub fn count_iteration(done: &mut u64, max: u64) -> Result<(), RuntimeError> {
    *done += 1;
    if *done > max {
        return Err(RuntimeError::TooManyIterations { max });
    }
    Ok(())
}

impl RuntimeError {
    pub fn code(&self) -> Code {
        match self {
            RuntimeError::Malformed(_) => Code::InvalidArgument,
            _ => Code::Internal,
        }
    }
}

/// A wire error is about the RPC's bytes, except the two the checker rules out before any
/// RPC (a value of the wrong kind written to a field, a field path that does not resolve):
/// should one happen, it is Weft's bug, reported as INTERNAL, not as the caller's bad input.
impl From<WireError> for RuntimeError {
    fn from(e: WireError) -> RuntimeError {
        match e {
            WireError::WrongValueKind { .. } | WireError::InvalidPath { .. } => {
                RuntimeError::Type(e.to_string())
            }
            e => RuntimeError::Malformed(e),
        }
    }
}

fn type_error(what: &str, v: &Value) -> RuntimeError {
    RuntimeError::Type(format!("{what} got a {}", v.kind_name()))
}

pub fn unary(op: UnOp, v: &Value) -> Result<Value, RuntimeError> {
    Ok(match (op, v) {
        (UnOp::Not, Value::Bool(b)) => Value::Bool(!b),
        (UnOp::Neg, Value::Int(i)) => Value::Int(i.wrapping_neg()),
        (UnOp::Neg, Value::Float(f)) => Value::Float(-f),
        _ => return Err(type_error("unary operator", v)),
    })
}

/// Applies a binary operator to two evaluated operands of the same kind. `and`/`or` are
/// accepted too (the interpreter short-circuits before calling this).
pub fn binary(op: BinOp, a: &Value, b: &Value) -> Result<Value, RuntimeError> {
    use Value::*;
    if let Some(r) = compare(op, a, b)? {
        return Ok(Bool(r));
    }
    Ok(match (op, a, b) {
        (BinOp::And, Bool(x), Bool(y)) => Bool(*x && *y),
        (BinOp::Or, Bool(x), Bool(y)) => Bool(*x || *y),
        (BinOp::Add, Int(x), Int(y)) => Int(x.wrapping_add(*y)),
        (BinOp::Sub, Int(x), Int(y)) => Int(x.wrapping_sub(*y)),
        (BinOp::Mul, Int(x), Int(y)) => Int(x.wrapping_mul(*y)),
        (BinOp::Div, Int(_), Int(0)) | (BinOp::Rem, Int(_), Int(0)) => {
            return Err(RuntimeError::DivisionByZero);
        }
        (BinOp::Div, Int(x), Int(y)) => Int(x.wrapping_div(*y)),
        (BinOp::Rem, Int(x), Int(y)) => Int(x.wrapping_rem(*y)),
        (BinOp::Add, Uint(x), Uint(y)) => Uint(x.wrapping_add(*y)),
        (BinOp::Sub, Uint(x), Uint(y)) => Uint(x.wrapping_sub(*y)),
        (BinOp::Mul, Uint(x), Uint(y)) => Uint(x.wrapping_mul(*y)),
        (BinOp::Div, Uint(_), Uint(0)) | (BinOp::Rem, Uint(_), Uint(0)) => {
            return Err(RuntimeError::DivisionByZero);
        }
        (BinOp::Div, Uint(x), Uint(y)) => Uint(x / y),
        (BinOp::Rem, Uint(x), Uint(y)) => Uint(x % y),
        (BinOp::Add, Float(x), Float(y)) => Float(x + y),
        (BinOp::Sub, Float(x), Float(y)) => Float(x - y),
        (BinOp::Mul, Float(x), Float(y)) => Float(x * y),
        (BinOp::Div, Float(x), Float(y)) => Float(x / y),
        (BinOp::Rem, Float(x), Float(y)) => Float(x % y),
        (BinOp::Add, Str(x), Str(y)) => {
            joined_len(x.len(), y.len())?;
            Str(format!("{x}{y}"))
        }
        (BinOp::Add, Bytes(x), Bytes(y)) => {
            joined_len(x.len(), y.len())?;
            Bytes([x.as_slice(), y.as_slice()].concat())
        }
        _ => {
            return Err(RuntimeError::Type(format!(
                "`{}` on {} and {}",
                op.symbol(),
                a.kind_name(),
                b.kind_name()
            )));
        }
    })
}

/// Refuses a concatenation longer than [`builtins::MAX_VALUE_LEN`]. Without a bound, `s = s + s` in a
/// `foreach` over a request's repeated field doubles `s` per item: 45 items ask for 32 TiB,
/// and a failed allocation aborts the process (no unwinding, so no guard can catch it).
fn joined_len(a: usize, b: usize) -> Result<(), RuntimeError> {
    Ok(builtins::result_within_limit("+", a.saturating_add(b))?)
}

/// Comparison operators; `None` when `op` is not a comparison.
fn compare(op: BinOp, a: &Value, b: &Value) -> Result<Option<bool>, RuntimeError> {
    use std::cmp::Ordering;
    let ord = match op {
        BinOp::Eq => return Ok(Some(a.lang_eq(b))),
        BinOp::Ne => return Ok(Some(!a.lang_eq(b))),
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => match (a, b) {
            (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
            (Value::Uint(x), Value::Uint(y)) => Some(x.cmp(y)),
            // IEEE: every ordered comparison with NaN is false.
            (Value::Float(x), Value::Float(y)) | (Value::Instant(x), Value::Instant(y)) => {
                x.partial_cmp(y)
            }
            (Value::Str(x), Value::Str(y)) => Some(x.cmp(y)),
            (Value::Bytes(x), Value::Bytes(y)) => Some(x.cmp(y)),
            _ => {
                return Err(RuntimeError::Type(format!(
                    "`{}` on {} and {}",
                    op.symbol(),
                    a.kind_name(),
                    b.kind_name()
                )));
            }
        },
        _ => return Ok(None),
    };
    Ok(Some(match (op, ord) {
        (_, None) => false,
        (BinOp::Lt, Some(o)) => o == Ordering::Less,
        (BinOp::Le, Some(o)) => o != Ordering::Greater,
        (BinOp::Gt, Some(o)) => o == Ordering::Greater,
        (BinOp::Ge, Some(o)) => o != Ordering::Less,
        _ => false,
    }))
}

/// Converts a value to a numeric or string type (`int(x)`, `float(x)`, implicit widening).
pub fn convert(v: &Value, to: &Type) -> Result<Value, RuntimeError> {
    Ok(match to {
        Type::Float => Value::Float(builtins::to_float(v)?),
        Type::Int => Value::Int(builtins::to_int(v)?),
        Type::Uint => Value::Uint(builtins::to_uint(v)?),
        Type::Str => Value::Str(builtins::to_str(v)?),
        _ => return Err(RuntimeError::Type(format!("conversion to {to}"))),
    })
}

/// Evaluates a pure built-in. `None` for built-ins that need the host.
pub fn call_pure(b: Builtin, args: &[Value]) -> Option<Result<Value, RuntimeError>> {
    let arg = |i: usize| args.get(i).cloned().unwrap_or(Value::Unit);
    let r = match b {
        Builtin::TimeDiff => match (arg(0), arg(1)) {
            (Value::Instant(a), Value::Instant(b)) => Ok(Value::Float(a - b)),
            (a, _) => Err(type_error("time_diff", &a)),
        },
        Builtin::Min => builtins::min_value(&arg(0), &arg(1)).map_err(Into::into),
        Builtin::Max => builtins::max_value(&arg(0), &arg(1)).map_err(Into::into),
        Builtin::Abs => builtins::abs_value(&arg(0)).map_err(Into::into),
        Builtin::Hash => Ok(Value::Int(builtins::hash(&arg(0)))),
        Builtin::Decrypt => match arg(1) {
            Value::Str(key) => builtins::decrypt_value(&arg(0), &key).map_err(Into::into),
            k => Err(type_error("decrypt key", &k)),
        },
        Builtin::Compress => builtins::compress_value(&arg(0)).map_err(Into::into),
        Builtin::Decompress => builtins::decompress_value(&arg(0)).map_err(Into::into),
        Builtin::Quantile => match (arg(0), arg(1)) {
            (Value::Vec(v), Value::Float(q)) => builtins::quantile(&v, q)
                .map(Value::Float)
                .map_err(Into::into),
            (a, _) => Err(type_error("quantile", &a)),
        },
        Builtin::Size => match arg(0) {
            Value::Str(s) => Ok(Value::Int(s.len() as i64)),
            Value::Bytes(b) => Ok(Value::Int(b.len() as i64)),
            Value::Vec(v) => Ok(Value::Int(v.len() as i64)),
            Value::Map(m) => Ok(Value::Int(m.len() as i64)),
            a => Err(type_error("size", &a)),
        },
        Builtin::Require => match (arg(0), arg(1)) {
            (Value::Bool(true), _) => Ok(Value::Unit),
            (Value::Bool(false), Value::Str(message)) => Err(RuntimeError::Required(message)),
            (a, _) => Err(type_error("require", &a)),
        },
        Builtin::ToStr => convert(&arg(0), &Type::Str),
        Builtin::ToInt => convert(&arg(0), &Type::Int),
        Builtin::ToUint => convert(&arg(0), &Type::Uint),
        Builtin::ToFloat => convert(&arg(0), &Type::Float),
        Builtin::ParseInt => match arg(0) {
            Value::Str(s) => {
                Ok(builtins::parse_int(&s).map_or(Value::none(), |i| Value::some(Value::Int(i))))
            }
            a => Err(type_error("parse_int", &a)),
        },
        Builtin::ParseFloat => {
            match arg(0) {
                Value::Str(s) => Ok(builtins::parse_float(&s)
                    .map_or(Value::none(), |f| Value::some(Value::Float(f)))),
                a => Err(type_error("parse_float", &a)),
            }
        }
        _ => return None,
    };
    Some(r)
}

/// Index into a vector value with the language's bounds rule.
pub fn vec_index(items: &[Value], index: &Value) -> Result<Value, RuntimeError> {
    let i = match index {
        Value::Int(i) => *i,
        other => return Err(type_error("vector index", other)),
    };
    usize::try_from(i)
        .ok()
        .and_then(|u| items.get(u))
        .cloned()
        .ok_or(RuntimeError::IndexOutOfRange {
            index: i,
            len: items.len(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_hostcalls::builtins::MAX_VALUE_LEN;

    #[test]
    fn only_errors_about_the_bytes_are_malformed() {
        let bytes: RuntimeError = WireError::Truncated { offset: 3 }.into();
        assert_eq!(bytes.code(), Code::InvalidArgument);
        let ours: RuntimeError = WireError::InvalidPath {
            path: "a..b".into(),
            reason: "empty name".into(),
        }
        .into();
        assert!(matches!(ours, RuntimeError::Type(_)), "{ours:?}");
        assert_eq!(ours.code(), Code::Internal);
    }

    #[test]
    fn concatenation_is_bounded() {
        let half = Value::Str("a".repeat(MAX_VALUE_LEN / 2));
        let at_limit = binary(BinOp::Add, &half, &half).unwrap();
        assert!(matches!(&at_limit, Value::Str(s) if s.len() == MAX_VALUE_LEN));
        let over = binary(BinOp::Add, &at_limit, &Value::Str("b".into()));
        assert!(
            matches!(over, Err(RuntimeError::Builtin(BuiltinError::ResultTooLarge { len, .. })) if len == MAX_VALUE_LEN + 1),
            "{over:?}"
        );
        let bytes = Value::Bytes(vec![0; MAX_VALUE_LEN]);
        assert!(binary(BinOp::Add, &bytes, &Value::Bytes(vec![1])).is_err());
    }

    #[test]
    fn integer_arithmetic_wraps_and_division_by_zero_is_an_error() {
        assert_eq!(
            binary(BinOp::Add, &Value::Int(i64::MAX), &Value::Int(1)),
            Ok(Value::Int(i64::MIN))
        );
        assert_eq!(
            binary(BinOp::Div, &Value::Int(i64::MIN), &Value::Int(-1)),
            Ok(Value::Int(i64::MIN))
        );
        assert_eq!(
            binary(BinOp::Div, &Value::Int(7), &Value::Int(0)),
            Err(RuntimeError::DivisionByZero)
        );
        assert_eq!(
            binary(BinOp::Rem, &Value::Uint(7), &Value::Uint(0)),
            Err(RuntimeError::DivisionByZero)
        );
        assert_eq!(
            binary(BinOp::Div, &Value::Int(-7), &Value::Int(2)),
            Ok(Value::Int(-3))
        );
        assert_eq!(
            binary(BinOp::Rem, &Value::Int(-7), &Value::Int(2)),
            Ok(Value::Int(-1))
        );
        assert_eq!(
            binary(BinOp::Sub, &Value::Uint(0), &Value::Uint(1)),
            Ok(Value::Uint(u64::MAX))
        );
    }

    #[test]
    fn float_comparisons_follow_ieee() {
        let nan = Value::Float(f64::NAN);
        for op in [BinOp::Lt, BinOp::Le, BinOp::Gt, BinOp::Ge, BinOp::Eq] {
            assert_eq!(binary(op, &nan, &nan), Ok(Value::Bool(false)), "{op:?}");
        }
        assert_eq!(binary(BinOp::Ne, &nan, &nan), Ok(Value::Bool(true)));
        assert_eq!(
            binary(BinOp::Div, &Value::Float(1.0), &Value::Float(0.0)),
            Ok(Value::Float(f64::INFINITY))
        );
    }

    #[test]
    fn strings_concatenate_and_compare_bytewise() {
        assert_eq!(
            binary(BinOp::Add, &Value::str("ab"), &Value::str("c")),
            Ok(Value::str("abc"))
        );
        assert_eq!(
            binary(BinOp::Lt, &Value::str("B"), &Value::str("a")),
            Ok(Value::Bool(true))
        );
    }

    #[test]
    fn vector_index_is_bounds_checked() {
        let v = [Value::Int(1)];
        assert_eq!(vec_index(&v, &Value::Int(0)), Ok(Value::Int(1)));
        assert_eq!(
            vec_index(&v, &Value::Int(1)),
            Err(RuntimeError::IndexOutOfRange { index: 1, len: 1 })
        );
        assert_eq!(
            vec_index(&v, &Value::Int(-1)),
            Err(RuntimeError::IndexOutOfRange { index: -1, len: 1 })
        );
    }
}
