//! Tool schemas as each model API accepts them.
//!
//! Tool schemas come from many places (schemars, MCP servers written in
//! every language) and model APIs each accept a different part of JSON
//! Schema. [`inline_refs`] resolves every local `$ref` (to `$defs`,
//! `definitions` or any JSON pointer into the schema, such as
//! `#/properties/a`), since many OpenAI-compatible servers reject `$ref`;
//! [`sanitize`] rewrites a schema into what one API accepts; [`violations`]
//! lists what an API would reject, for tests and diagnostics.
//!
//! | dialect | rules |
//! |---|---|
//! | [`SchemaDialect::OpenAi`] | an object at the root; no `$ref`; bookkeeping keywords (`$schema`, `$id`, `$comment`) dropped |
//! | [`SchemaDialect::OpenAiStrict`] | structured outputs' strict mode: every object closed (`additionalProperties: false`) with every property required (optional ones made nullable), only supported keywords |
//! | [`SchemaDialect::Anthropic`] | an object at the root, without `oneOf`/`anyOf`/`allOf` at the top level |
//! | [`SchemaDialect::Gemini`] | the OpenAPI 3.0 subset: one `type` per schema (`nullable` for null), string `enum`s, no `const`, `additionalProperties`, `$ref` or combinators other than `anyOf` |
//!
//! ```
//! use kinet_core::schema::{SchemaDialect, sanitize, violations};
//! use serde_json::json;
//!
//! let schema = json!({
//!     "type": "object",
//!     "properties": {
//!         "thought": {"type": "string"},
//!         "revises": {"$ref": "#/properties/thought"}
//!     },
//!     "required": ["thought"]
//! });
//! let clean = sanitize(&schema, SchemaDialect::OpenAi);
//! assert_eq!(clean["properties"]["revises"], json!({"type": "string"}));
//! for dialect in SchemaDialect::ALL {
//!     assert!(violations(&sanitize(&schema, dialect), dialect).is_empty());
//! }
//! ```

use serde_json::{Map, Value, json};

/// Which API's rules a schema must follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchemaDialect {
    /// OpenAI Chat Completions / Responses function parameters (not
    /// strict), and the OpenAI-compatible servers (vLLM, Ollama, llama.cpp,
    /// GLM, DeepSeek).
    OpenAi,
    /// OpenAI's strict mode (structured outputs, strict functions).
    OpenAiStrict,
    /// Anthropic Messages `input_schema`.
    Anthropic,
    /// Google Gemini function declarations (also through its
    /// OpenAI-compatible endpoint).
    Gemini,
}

impl SchemaDialect {
    /// Every dialect.
    pub const ALL: [SchemaDialect; 4] = [
        SchemaDialect::OpenAi,
        SchemaDialect::OpenAiStrict,
        SchemaDialect::Anthropic,
        SchemaDialect::Gemini,
    ];
}

/// How deep refs are followed; a recursive schema is cut there.
const MAX_DEPTH: usize = 24;

/// `schema` as `dialect` needs it, borrowed when it already is. Tool
/// schemas are made for [`SchemaDialect::OpenAi`] when a tool is added
/// (refs inlined), so the common cases cost one shallow check per request.
pub fn for_dialect(schema: &Value, dialect: SchemaDialect) -> std::borrow::Cow<'_, Value> {
    use std::borrow::Cow;
    let root_ok = schema.get("type").and_then(Value::as_str) == Some("object");
    let combinators = ["anyOf", "oneOf", "allOf"]
        .iter()
        .any(|k| schema.get(*k).is_some());
    match dialect {
        SchemaDialect::OpenAi if root_ok => Cow::Borrowed(schema),
        SchemaDialect::Anthropic if root_ok && !combinators => Cow::Borrowed(schema),
        _ => Cow::Owned(sanitize(schema, dialect)),
    }
}

/// Keywords that only annotate or bookkeep and that some API rejects.
const BOOKKEEPING: [&str; 5] = ["$schema", "$id", "$comment", "$anchor", "$dynamicAnchor"];

/// Resolves every local `$ref` (`#`, `#/$defs/X`, `#/definitions/X`,
/// `#/properties/a/items`, with `~0`/`~1` escapes) by copying its target in
/// place (sibling keywords of the `$ref` are kept). A ref that recursion
/// reaches again, one 24 refs deep, or one past a budget of inlined nodes
/// (a few KB of shared refs can stand for billions of nodes) becomes an
/// open schema (`{}` with the ref's description), so the result never
/// holds a `$ref`; `$defs` and `definitions` are removed. Remote refs
/// become open schemas too.
pub fn inline_refs(schema: &Value) -> Value {
    let mut walk = Walk {
        root: schema,
        stack: Vec::new(),
        budget: MAX_INLINED_NODES,
    };
    let mut out = walk.resolve(schema, 0);
    visit(&mut out, &mut |object| {
        object.remove("$defs");
        object.remove("definitions");
    });
    out
}

/// Nodes `$ref` inlining may add before further refs are left open.
const MAX_INLINED_NODES: usize = 20_000;

fn pointer_target<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    // JSON pointers in a URI fragment may be percent-encoded.
    let decoded = pointer.replace("%25", "%").replace("%22", "\"");
    root.pointer(&decoded)
}

fn nodes(value: &Value) -> usize {
    match value {
        Value::Object(object) => 1 + object.values().map(nodes).sum::<usize>(),
        Value::Array(items) => 1 + items.iter().map(nodes).sum::<usize>(),
        _ => 1,
    }
}

/// One inlining pass: the root refs point into, the refs being followed,
/// and the nodes still allowed.
struct Walk<'a> {
    root: &'a Value,
    stack: Vec<String>,
    budget: usize,
}

impl Walk<'_> {
    /// `value` with its refs inlined; `refs` is how many refs deep it is.
    fn resolve(&mut self, value: &Value, refs: usize) -> Value {
        match value {
            Value::Object(object) => {
                if let Some(Value::String(reference)) = object.get("$ref") {
                    return self.inline(object, reference, refs);
                }
                Value::Object(
                    object
                        .iter()
                        .map(|(k, v)| (k.clone(), self.resolve(v, refs)))
                        .collect(),
                )
            }
            Value::Array(items) => {
                Value::Array(items.iter().map(|item| self.resolve(item, refs)).collect())
            }
            other => other.clone(),
        }
    }

    fn inline(&mut self, object: &Map<String, Value>, reference: &str, refs: usize) -> Value {
        let mut siblings: Map<String, Value> = object
            .iter()
            .filter(|(k, _)| k.as_str() != "$ref")
            .map(|(k, v)| (k.clone(), self.resolve(v, refs)))
            .collect();
        let root = self.root;
        let target = pointer_target(root, reference)
            .filter(|_| refs < MAX_DEPTH && !self.stack.iter().any(|r| r == reference))
            .map(|target| (target, nodes(target)))
            .filter(|(_, size)| *size <= self.budget);
        let Some((target, size)) = target else {
            // Recursive, too deep, over budget, remote or dangling: open.
            siblings.entry("description").or_insert_with(|| {
                Value::String(format!("(a nested value of the same shape as {reference})"))
            });
            return Value::Object(siblings);
        };
        self.budget -= size;
        self.stack.push(reference.to_owned());
        let resolved = self.resolve(target, refs + 1);
        self.stack.pop();
        if let Value::Object(fields) = resolved {
            for (key, field) in fields {
                siblings.entry(key).or_insert(field);
            }
        }
        Value::Object(siblings)
    }
}

/// `schema` rewritten into what `dialect` accepts: refs inlined,
/// bookkeeping keywords dropped, an object at the root, then the
/// dialect's own rules (see the module table). Descriptions are kept.
pub fn sanitize(schema: &Value, dialect: SchemaDialect) -> Value {
    let mut out = inline_refs(schema);
    strip_bookkeeping(&mut out);
    root_object(&mut out);
    match dialect {
        SchemaDialect::OpenAi => {}
        SchemaDialect::Anthropic => flatten_root_combinators(&mut out),
        SchemaDialect::OpenAiStrict => {
            flatten_root_combinators(&mut out);
            strict(&mut out);
        }
        SchemaDialect::Gemini => {
            flatten_root_combinators(&mut out);
            gemini(&mut out);
        }
    }
    out
}

fn strip_bookkeeping(value: &mut Value) {
    visit(value, &mut |object| {
        for key in BOOKKEEPING {
            object.remove(key);
        }
    });
}

/// Calls `f` on every schema object (not on `properties` maps themselves).
fn visit(value: &mut Value, f: &mut impl FnMut(&mut Map<String, Value>)) {
    match value {
        Value::Object(object) => {
            f(object);
            for (key, child) in object.iter_mut() {
                match key.as_str() {
                    "properties" | "patternProperties" | "$defs" | "definitions" => {
                        if let Value::Object(map) = child {
                            for sub in map.values_mut() {
                                visit(sub, f);
                            }
                        }
                    }
                    "enum" | "const" | "default" | "examples" | "required" => {}
                    _ => visit(child, f),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                visit(item, f);
            }
        }
        _ => {}
    }
}

fn root_object(schema: &mut Value) {
    if !schema.is_object() {
        *schema = json!({});
    }
    if let Some(object) = schema.as_object_mut() {
        object.insert("type".into(), "object".into());
        object
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Top-level `anyOf`/`oneOf`/`allOf`: the branches' properties merged into
/// one object (required only where every branch requires it, or `allOf`).
fn flatten_root_combinators(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let mut properties = object
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut required: Vec<String> = names(object.get("required"));
    for key in ["allOf", "anyOf", "oneOf"] {
        let Some(Value::Array(branches)) = object.remove(key) else {
            continue;
        };
        let mut common: Option<Vec<String>> = None;
        for branch in &branches {
            if let Some(props) = branch.get("properties").and_then(Value::as_object) {
                for (name, prop) in props {
                    properties
                        .entry(name.clone())
                        .or_insert_with(|| prop.clone());
                }
            }
            let branch_required = names(branch.get("required"));
            common = Some(match common {
                None => branch_required,
                Some(c) => c
                    .into_iter()
                    .filter(|n| branch_required.contains(n))
                    .collect(),
            });
            if key == "allOf" {
                required.extend(names(branch.get("required")));
            }
        }
        if key != "allOf" {
            required.extend(common.unwrap_or_default());
        }
    }
    required.sort();
    required.dedup();
    object.insert("type".into(), "object".into());
    object.insert("properties".into(), Value::Object(properties));
    if required.is_empty() {
        object.remove("required");
    } else {
        object.insert(
            "required".into(),
            Value::Array(required.into_iter().map(Value::String).collect()),
        );
    }
}

fn names(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `oneOf` read as `anyOf`, and `allOf` branches merged into the object,
/// so each object has one shape (neither strict mode nor Gemini takes
/// them).
fn one_type_per_object(object: &mut Map<String, Value>) {
    if let Some(Value::Array(branches)) = object.remove("oneOf") {
        object.insert("anyOf".into(), Value::Array(branches));
    }
    if let Some(Value::Array(branches)) = object.remove("allOf") {
        for branch in branches {
            if let Value::Object(fields) = branch {
                for (k, v) in fields {
                    object.entry(k).or_insert(v);
                }
            }
        }
    }
}

/// Keywords strict mode accepts.
const STRICT_KEYWORDS: [&str; 22] = [
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "description",
    "title",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "$defs",
    "definitions",
    "$ref",
];

fn strict(schema: &mut Value) {
    visit(schema, &mut |object| {
        // One `type` per object, so the others do not need to be closed.
        one_type_per_object(object);
        object.retain(|k, _| STRICT_KEYWORDS.contains(&k.as_str()));
        let is_object = is_object_type(object.get("type")) || object.contains_key("properties");
        if is_object {
            // An optional object property was made `["object", "null"]` by
            // its parent: it stays nullable.
            let nullable = matches!(object.get("type"), Some(Value::Array(kinds)) if kinds.iter().any(|k| k == "null"));
            object.insert(
                "type".into(),
                if nullable {
                    json!(["object", "null"])
                } else {
                    "object".into()
                },
            );
            object
                .entry("properties")
                .or_insert_with(|| Value::Object(Map::new()));
            let required = names(object.get("required"));
            if let Some(Value::Object(properties)) = object.get_mut("properties") {
                for (name, property) in properties.iter_mut() {
                    if !required.contains(name) {
                        make_nullable(property);
                    }
                }
                let all: Vec<Value> = properties.keys().cloned().map(Value::String).collect();
                object.insert("required".into(), Value::Array(all));
            }
            object.insert("additionalProperties".into(), Value::Bool(false));
        }
    });
}

/// `"object"`, or a list of types holding it.
fn is_object_type(kind: Option<&Value>) -> bool {
    match kind {
        Some(Value::String(kind)) => kind == "object",
        Some(Value::Array(kinds)) => kinds.iter().any(|k| k == "object"),
        _ => false,
    }
}

/// An optional property in strict mode: it must be listed as required, so
/// it accepts `null` instead.
fn make_nullable(property: &mut Value) {
    let Some(object) = property.as_object_mut() else {
        return;
    };
    match object.get_mut("type") {
        Some(Value::String(kind)) if kind != "null" => {
            let kind = kind.clone();
            object.insert("type".into(), json!([kind, "null"]));
        }
        Some(Value::Array(kinds)) if !kinds.iter().any(|k| k == "null") => {
            kinds.push("null".into());
        }
        None => {
            let inner = std::mem::take(object);
            object.insert(
                "anyOf".into(),
                json!([Value::Object(inner), {"type": "null"}]),
            );
        }
        _ => {}
    }
    if let Some(Value::Array(values)) = object.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
}

/// Keywords Gemini's schema subset accepts.
const GEMINI_KEYWORDS: [&str; 17] = [
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "properties",
    "required",
    "items",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "anyOf",
];

fn gemini(schema: &mut Value) {
    visit(schema, &mut |object| {
        if let Some(value) = object.remove("const") {
            object.insert("enum".into(), Value::Array(vec![value]));
        }
        one_type_per_object(object);
        if let Some(Value::Array(kinds)) = object.get("type").cloned() {
            let nullable = kinds.iter().any(|k| k == "null");
            let rest: Vec<&Value> = kinds.iter().filter(|k| *k != "null").collect();
            match rest.as_slice() {
                [one] => {
                    object.insert("type".into(), (*one).clone());
                }
                [] => {
                    object.remove("type");
                }
                many => {
                    object.remove("type");
                    object.insert(
                        "anyOf".into(),
                        Value::Array(many.iter().map(|k| json!({"type": k})).collect()),
                    );
                }
            }
            if nullable {
                object.insert("nullable".into(), Value::Bool(true));
            }
        }
        if object.get("type").and_then(Value::as_str) == Some("null") {
            object.remove("type");
            object.insert("nullable".into(), Value::Bool(true));
        }
        // Enums are strings there.
        if let Some(Value::Array(values)) = object.get_mut("enum") {
            let strings: Vec<Value> = values
                .iter()
                .filter(|v| !v.is_null())
                .map(|v| match v {
                    Value::String(_) => v.clone(),
                    other => Value::String(other.to_string()),
                })
                .collect();
            *values = strings;
            object.insert("type".into(), "string".into());
        }
        if object.get("type").and_then(Value::as_str) == Some("string")
            && let Some(Value::String(format)) = object.get("format")
            && !matches!(format.as_str(), "enum" | "date-time")
        {
            object.remove("format");
        }
        object.retain(|k, _| GEMINI_KEYWORDS.contains(&k.as_str()));
        // Gemini rejects an object schema with empty `properties`.
        if object
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
        {
            object.remove("properties");
            object.remove("required");
        }
    });
}

/// What `dialect` would reject in `schema`, as one line each with the JSON
/// pointer of the place.
pub fn violations(schema: &Value, dialect: SchemaDialect) -> Vec<String> {
    let mut found = Vec::new();
    match schema.as_object() {
        Some(root) => {
            if root.get("type").and_then(Value::as_str) != Some("object") {
                found.push("/: the root is not `\"type\": \"object\"`".to_owned());
            }
            if dialect != SchemaDialect::OpenAi {
                for key in ["anyOf", "oneOf", "allOf"] {
                    if root.contains_key(key) {
                        found.push(format!("/: `{key}` at the top level"));
                    }
                }
            }
        }
        None => found.push("/: not an object".to_owned()),
    }
    check(schema, dialect, "", &mut found);
    found
}

fn check(value: &Value, dialect: SchemaDialect, at: &str, found: &mut Vec<String>) {
    let Some(object) = value.as_object() else {
        if let Value::Array(items) = value {
            for (i, item) in items.iter().enumerate() {
                check(item, dialect, &format!("{at}/{i}"), found);
            }
        }
        return;
    };
    for key in object.keys() {
        let bad = match dialect {
            _ if key == "$ref" => true,
            _ if BOOKKEEPING.contains(&key.as_str()) => true,
            SchemaDialect::OpenAiStrict => !STRICT_KEYWORDS.contains(&key.as_str()),
            SchemaDialect::Gemini => !GEMINI_KEYWORDS.contains(&key.as_str()),
            _ => false,
        };
        if bad {
            found.push(format!("{at}: `{key}` is not accepted"));
        }
    }
    match dialect {
        SchemaDialect::OpenAiStrict if is_object_type(object.get("type")) => {
            if object.get("additionalProperties") != Some(&Value::Bool(false)) {
                found.push(format!(
                    "{at}: an object without `additionalProperties: false`"
                ));
            }
            let required = names(object.get("required"));
            if let Some(props) = object.get("properties").and_then(Value::as_object) {
                for name in props.keys() {
                    if !required.contains(name) {
                        found.push(format!("{at}: property `{name}` is not required"));
                    }
                }
            }
        }
        SchemaDialect::Gemini => {
            if object
                .get("properties")
                .and_then(Value::as_object)
                .is_some_and(Map::is_empty)
            {
                found.push(format!("{at}: empty `properties`"));
            }
            if object.get("type").is_some_and(|t| !t.is_string()) {
                found.push(format!("{at}: `type` is not a single type"));
            }
            if let Some(Value::Array(values)) = object.get("enum")
                && values.iter().any(|v| !v.is_string())
            {
                found.push(format!("{at}: an `enum` with values that are not strings"));
            }
        }
        _ => {}
    }
    for (key, child) in object {
        match key.as_str() {
            "properties" | "patternProperties" | "$defs" | "definitions" => {
                if let Value::Object(map) = child {
                    for (name, sub) in map {
                        check(sub, dialect, &format!("{at}/{key}/{name}"), found);
                    }
                }
            }
            "enum" | "const" | "default" | "examples" | "required" => {}
            _ => check(child, dialect, &format!("{at}/{key}"), found),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_refs_cannot_blow_up() {
        // 8 levels of 30 properties each referring to the next level: 30^8
        // nodes if inlined naively.
        let mut defs = Map::new();
        for level in 1..=8 {
            let next = if level == 8 {
                json!({"type": "string"})
            } else {
                json!({"$ref": format!("#/$defs/L{}", level + 1)})
            };
            let properties: Map<String, Value> =
                (0..30).map(|i| (format!("p{i}"), next.clone())).collect();
            defs.insert(
                format!("L{level}"),
                json!({"type": "object", "properties": properties}),
            );
        }
        let schema = json!({"type": "object", "properties": {"root": {"$ref": "#/$defs/L1"}}, "$defs": defs});
        let started = std::time::Instant::now();
        let out = inline_refs(&schema);
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert!(
            out.to_string().len() < 4_000_000,
            "{}",
            out.to_string().len()
        );
        assert!(!out.to_string().contains("$ref"));
        // A property named `definitions` is a property, not a keyword.
        let named = json!({"type": "object", "properties": {"definitions": {"$ref": "#/$defs/D"}}, "$defs": {"D": {"type": "integer"}}});
        assert_eq!(
            inline_refs(&named)["properties"]["definitions"],
            json!({"type": "integer"})
        );
    }

    #[test]
    fn pointer_refs_defs_and_recursion_are_inlined() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "thoughtNumber": {"type": "integer", "minimum": 1},
                "revisesThought": {"$ref": "#/properties/thoughtNumber", "description": "which"},
                "node": {"$ref": "#/$defs/Node"},
                "escaped": {"$ref": "#/$defs/a~1b"}
            },
            "$defs": {
                "Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}},
                "a/b": {"type": "boolean"}
            }
        });
        let out = inline_refs(&schema);
        assert_eq!(
            out["properties"]["revisesThought"],
            json!({"type": "integer", "minimum": 1, "description": "which"})
        );
        assert_eq!(out["properties"]["escaped"], json!({"type": "boolean"}));
        let child = &out["properties"]["node"]["properties"]["child"];
        assert!(
            child.get("$ref").is_none() && child.get("properties").is_none(),
            "{child}"
        );
        assert!(!out.to_string().contains("$ref") && out.get("$defs").is_none());
    }

    #[test]
    fn each_dialect_gets_a_schema_it_accepts() {
        let schema = json!({
            "type": "object",
            "properties": {
                "mode": {"enum": ["a", "b", 3]},
                "limit": {"type": ["integer", "null"], "default": 10, "minimum": 0},
                "tags": {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": true},
                "fixed": {"const": "x"},
                "meta": {"type": "object", "additionalProperties": {"type": "string"}},
                "when": {"type": "string", "format": "uri"}
            },
            "required": ["mode"],
            "anyOf": [{"required": ["tags"]}, {"required": ["fixed"]}]
        });
        for dialect in SchemaDialect::ALL {
            let clean = sanitize(&schema, dialect);
            let problems = violations(&clean, dialect);
            assert!(problems.is_empty(), "{dialect:?}: {problems:?}\n{clean:#}");
            assert!(clean["properties"]["mode"].is_object(), "{dialect:?}");
        }
        let strict = sanitize(&schema, SchemaDialect::OpenAiStrict);
        assert_eq!(
            strict["properties"]["limit"]["type"],
            json!(["integer", "null"])
        );
        assert_eq!(
            strict["properties"]["tags"]["type"],
            json!(["array", "null"])
        );
        let gemini = sanitize(&schema, SchemaDialect::Gemini);
        assert_eq!(
            gemini["properties"]["limit"],
            json!({"type": "integer", "nullable": true, "minimum": 0})
        );
        assert_eq!(gemini["properties"]["mode"]["enum"], json!(["a", "b", "3"]));
        assert_eq!(gemini["properties"]["fixed"]["enum"], json!(["x"]));
        // An optional object stays nullable and closed in strict mode.
        let optional_object = json!({
            "type": "object",
            "properties": {
                "opts": {"type": "object", "properties": {"a": {"type": "string"}}},
                "map": {"type": "object", "additionalProperties": {"type": "string"}}
            }
        });
        let strict = sanitize(&optional_object, SchemaDialect::OpenAiStrict);
        assert_eq!(
            strict["properties"]["opts"]["type"],
            json!(["object", "null"])
        );
        assert_eq!(
            strict["properties"]["map"]["additionalProperties"],
            json!(false)
        );
        assert!(
            violations(&strict, SchemaDialect::OpenAiStrict).is_empty(),
            "{strict:#}"
        );
        // No arguments: Gemini gets no empty `properties`.
        let empty = sanitize(
            &json!({"type": "object", "properties": {}}),
            SchemaDialect::Gemini,
        );
        assert_eq!(empty, json!({"type": "object"}));
        // Violations are found where they are.
        assert!(
            violations(&schema, SchemaDialect::Gemini)
                .iter()
                .any(|v| v.starts_with("/properties/limit: `default`"))
        );
    }
}
