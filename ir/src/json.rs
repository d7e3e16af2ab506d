//! Language values to and from JSON, for traces, state dumps and channel records.

use base64::Engine as _;
use serde_json::{Map, Value as Json, json};
use weft_hostcalls::Value;

use crate::types::Type;

/// Renders a value as JSON. Non-finite floats become the strings "inf", "-inf", "NaN";
/// bytes are base64; maps with string keys become objects, other maps lists of `[k, v]`;
/// messages render through `message` (which knows the schema) when given.
pub fn to_json(v: &Value, message: &dyn Fn(&weft_hostcalls::Message) -> Json) -> Json {
    match v {
        Value::Unit => Json::Null,
        Value::Bool(b) => json!(b),
        Value::Int(i) => json!(i),
        Value::Uint(u) => json!(u),
        Value::Float(f) | Value::Instant(f) => float(*f),
        Value::Str(s) => json!(s),
        Value::Bytes(b) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        Value::Pair(p) => json!([to_json(&p.0, message), to_json(&p.1, message)]),
        Value::Vec(items) => Json::Array(items.iter().map(|i| to_json(i, message)).collect()),
        Value::Map(m) => {
            if m.keys().all(|k| matches!(k, Value::Str(_))) {
                let mut o = Map::new();
                for (k, v) in m {
                    if let Value::Str(k) = k {
                        o.insert(k.clone(), to_json(v, message));
                    }
                }
                Json::Object(o)
            } else {
                Json::Array(
                    m.iter()
                        .map(|(k, v)| json!([to_json(k, message), to_json(v, message)]))
                        .collect(),
                )
            }
        }
        Value::Opt(None) => Json::Null,
        Value::Opt(Some(v)) => to_json(v, message),
        Value::Msg(m) => message(m),
    }
}

fn float(f: f64) -> Json {
    if f.is_nan() {
        json!("NaN")
    } else if f.is_infinite() {
        json!(if f > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(f)
    }
}

/// Reads a JSON value as a value of type `ty` (control-plane writes in traces).
pub fn from_json(j: &Json, ty: &Type) -> Result<Value, String> {
    let bad = || format!("expected {ty}, found {j}");
    Ok(match ty {
        Type::Bool => Value::Bool(j.as_bool().ok_or_else(bad)?),
        Type::Int => Value::Int(j.as_i64().ok_or_else(bad)?),
        Type::Uint => Value::Uint(j.as_u64().ok_or_else(bad)?),
        Type::Float => Value::Float(json_f64(j).ok_or_else(bad)?),
        Type::Instant => Value::Instant(json_f64(j).ok_or_else(bad)?),
        Type::Str => Value::Str(j.as_str().ok_or_else(bad)?.to_owned()),
        Type::Bytes => Value::Bytes(
            base64::engine::general_purpose::STANDARD
                .decode(j.as_str().ok_or_else(bad)?)
                .map_err(|e| e.to_string())?,
        ),
        Type::Pair(a, b) => {
            let items = j.as_array().filter(|a| a.len() == 2).ok_or_else(bad)?;
            Value::pair(from_json(&items[0], a)?, from_json(&items[1], b)?)
        }
        Type::Vec(t) => Value::Vec(
            j.as_array()
                .ok_or_else(bad)?
                .iter()
                .map(|i| from_json(i, t))
                .collect::<Result<_, _>>()?,
        ),
        Type::Map(k, v) => match j {
            Json::Object(o) => Value::Map(
                o.iter()
                    .map(|(key, val)| Ok((key_from_str(key, k)?, from_json(val, v)?)))
                    .collect::<Result<_, String>>()?,
            ),
            Json::Array(items) => Value::Map(
                items
                    .iter()
                    .map(|kv| {
                        let kv = kv.as_array().filter(|a| a.len() == 2).ok_or_else(bad)?;
                        Ok((from_json(&kv[0], k)?, from_json(&kv[1], v)?))
                    })
                    .collect::<Result<_, String>>()?,
            ),
            _ => return Err(bad()),
        },
        Type::Option(t) => match j {
            Json::Null => Value::none(),
            other => Value::some(from_json(other, t)?),
        },
        _ => return Err(format!("values of type {ty} cannot be written from JSON")),
    })
}

fn json_f64(j: &Json) -> Option<f64> {
    match j {
        Json::String(s) if s == "inf" => Some(f64::INFINITY),
        Json::String(s) if s == "-inf" => Some(f64::NEG_INFINITY),
        Json::String(s) if s == "NaN" => Some(f64::NAN),
        _ => j.as_f64(),
    }
}

/// JSON object keys are strings; read them as the map's key type.
fn key_from_str(key: &str, ty: &Type) -> Result<Value, String> {
    match ty {
        Type::Str => Ok(Value::Str(key.to_owned())),
        Type::Int => key
            .parse()
            .map(Value::Int)
            .map_err(|_| format!("map key `{key}` is not an int")),
        Type::Uint => key
            .parse()
            .map(Value::Uint)
            .map_err(|_| format!("map key `{key}` is not a uint")),
        Type::Bool => key
            .parse()
            .map(Value::Bool)
            .map_err(|_| format!("map key `{key}` is not a bool")),
        other => Err(format!(
            "map keys of type {other} must be given as a list of [key, value] pairs"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_json() {
        let ty = Type::map(Type::Str, Type::pair(Type::Int, Type::Float));
        let j = json!({"a": [1, 0.5], "b": [2, "inf"]});
        let v = from_json(&j, &ty).unwrap();
        assert_eq!(to_json(&v, &|_| Json::Null), j);
        let ints = from_json(&json!({"3": "x"}), &Type::map(Type::Int, Type::Str)).unwrap();
        assert_eq!(to_json(&ints, &|_| Json::Null), json!([[3, "x"]]));
        assert!(from_json(&json!("x"), &Type::Int).is_err());
    }
}
