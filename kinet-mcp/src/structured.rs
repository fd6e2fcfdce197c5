//! `outputSchema` and `structuredContent`, checked both ways: a served
//! tool's structured result that does not match the schema it declares is
//! an error result, and a server's result that does not match the schema
//! its tool declared reaches the model as an error, not as a result.

use serde_json::Value;

/// A tool's declared output schema, compiled.
pub(crate) struct OutputShape {
    validator: Result<jsonschema::Validator, String>,
}

impl OutputShape {
    /// Compiles `schema` (no remote `$ref` is fetched); a schema that does
    /// not compile makes every check fail with the reason.
    pub(crate) fn new(schema: &Value) -> Self {
        Self {
            validator: jsonschema::validator_for(schema).map_err(|e| e.to_string()),
        }
    }

    /// Whether a successful result's `structured` content fits: `Err` says
    /// what does not (at most three places).
    pub(crate) fn check(&self, structured: Option<&Value>) -> Result<(), String> {
        let validator = self
            .validator
            .as_ref()
            .map_err(|e| format!("its outputSchema is not a valid JSON schema ({e})"))?;
        let Some(value) = structured else {
            return Err("it declares an outputSchema but returned no structuredContent".into());
        };
        let problems: Vec<String> = validator
            .iter_errors(value)
            .take(3)
            .map(|error| {
                let at = error.instance_path.to_string();
                if at.is_empty() {
                    error.to_string()
                } else {
                    format!("{error} (at {at})")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "its structuredContent does not match its outputSchema: {}",
                problems.join("; ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn structured_content_is_checked_against_the_schema() {
        let shape = OutputShape::new(&json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"]
        }));
        assert!(shape.check(Some(&json!({"n": 3}))).is_ok());
        let wrong = shape.check(Some(&json!({"n": "three"}))).unwrap_err();
        assert!(wrong.contains("/n"), "{wrong}");
        assert!(shape.check(Some(&json!({}))).unwrap_err().contains("n"));
        assert!(
            shape
                .check(None)
                .unwrap_err()
                .contains("no structuredContent")
        );
        let broken = OutputShape::new(&json!({"type": 5}));
        assert!(
            broken
                .check(Some(&json!({})))
                .unwrap_err()
                .contains("not a valid")
        );
    }

    #[test]
    fn remote_references_are_not_fetched() {
        let shape = OutputShape::new(&json!({"$ref": "http://127.0.0.1:9/schema.json"}));
        assert!(shape.check(Some(&json!({}))).is_err());
    }
}
