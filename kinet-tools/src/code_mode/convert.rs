//! Values between the interpreter and JSON.

use monty_types::MontyObject;
use serde_json::{Map, Number, Value};

/// A script's value as JSON; `None` for what JSON cannot hold.
pub(super) fn to_json(value: &MontyObject) -> Option<Value> {
    Some(match value {
        MontyObject::None => Value::Null,
        MontyObject::Bool(b) => Value::Bool(*b),
        MontyObject::Int(n) => Value::Number((*n).into()),
        MontyObject::Float(f) => Value::Number(Number::from_f64(*f)?),
        MontyObject::String(s) => Value::String(s.clone()),
        MontyObject::List(items) | MontyObject::Tuple(items) => {
            Value::Array(items.iter().map(to_json).collect::<Option<_>>()?)
        }
        MontyObject::Dict(pairs) => {
            let mut object = Map::new();
            for (key, value) in pairs {
                let MontyObject::String(key) = key else {
                    return None;
                };
                object.insert(key.clone(), to_json(value)?);
            }
            Value::Object(object)
        }
        _ => return None,
    })
}

/// JSON as a script's value.
pub(super) fn from_json(value: &Value) -> MontyObject {
    match value {
        Value::Null => MontyObject::None,
        Value::Bool(b) => MontyObject::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => MontyObject::Int(i),
            None => MontyObject::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => MontyObject::String(s.clone()),
        Value::Array(items) => MontyObject::List(items.iter().map(from_json).collect()),
        Value::Object(map) => MontyObject::dict(
            map.iter()
                .map(|(k, v)| (MontyObject::String(k.clone()), from_json(v)))
                .collect::<Vec<_>>(),
        ),
    }
}
