//! The tools as Python functions, for the script tool's description, and
//! a call's Python arguments as the tool's JSON arguments.

use kinet_core::tool::ToolSpec;
use serde_json::{Map, Value};

/// A tool's parameters in the order the function takes them: required
/// ones first, each in the schema's order.
pub(super) fn parameters(spec: &ToolSpec) -> Vec<(String, bool, &Value)> {
    let properties = spec.parameters.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = spec
        .parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut list: Vec<(String, bool, &Value)> = properties
        .map(|props| {
            props
                .iter()
                .map(|(name, schema)| (name.clone(), required.contains(&name.as_str()), schema))
                .collect()
        })
        .unwrap_or_default();
    list.sort_by_key(|(_, required, _)| !required);
    list
}

/// The Python type of a JSON schema.
fn python_type(schema: &Value) -> &'static str {
    match schema.get("type") {
        Some(Value::String(kind)) => match kind.as_str() {
            "string" => "str",
            "integer" => "int",
            "number" => "float",
            "boolean" => "bool",
            "array" => "list",
            "object" => "dict",
            _ => "object",
        },
        _ => "object",
    }
}

/// `def name(a: str, b: int = None) -> str:` and its docstring.
pub(super) fn signature(spec: &ToolSpec) -> String {
    let params = parameters(spec);
    let args: Vec<String> = params
        .iter()
        .map(|(name, required, schema)| {
            let kind = python_type(schema);
            if *required {
                format!("{name}: {kind}")
            } else {
                format!("{name}: {kind} = None")
            }
        })
        .collect();
    let mut text = format!("def {}({}):\n", spec.name, args.join(", "));
    let summary = spec.description.lines().next().unwrap_or("").trim();
    text.push_str(&format!("    \"\"\"{summary}"));
    for (name, _, schema) in &params {
        if let Some(about) = schema.get("description").and_then(Value::as_str) {
            text.push_str(&format!(
                "\n    {name}: {}",
                about.lines().next().unwrap_or("")
            ));
        }
    }
    text.push_str("\"\"\"\n");
    text
}

/// Maps positional and keyword arguments to the tool's JSON object.
pub(super) fn arguments(
    spec: &ToolSpec,
    positional: Vec<Value>,
    keywords: Vec<(String, Value)>,
) -> Result<Value, String> {
    let params = parameters(spec);
    if positional.len() > params.len() {
        return Err(format!(
            "{}() takes {} arguments but {} were given",
            spec.name,
            params.len(),
            positional.len()
        ));
    }
    let mut object = Map::new();
    for ((name, _, _), value) in params.iter().zip(positional) {
        object.insert(name.clone(), value);
    }
    for (name, value) in keywords {
        if !params.iter().any(|(known, _, _)| *known == name) {
            return Err(format!(
                "{}() got an unexpected keyword argument '{name}'",
                spec.name
            ));
        }
        if object.insert(name.clone(), value).is_some() {
            return Err(format!(
                "{}() got multiple values for argument '{name}'",
                spec.name
            ));
        }
    }
    // `None` for an optional argument means "not given".
    object.retain(|_, value| !value.is_null());
    for (name, required, _) in &params {
        if *required && !object.contains_key(name) {
            return Err(format!(
                "{}() missing required argument: '{name}'",
                spec.name
            ));
        }
    }
    Ok(Value::Object(object))
}
