//! Tool input validation against JSON Schema.
//!
//! A tool's input schema is compiled once into an [`InputValidator`] and every
//! call's input is checked before the tool runs, so a tool only ever sees input
//! that matches what it advertised. [`check_schema`] is the load-time check
//! discovery and native tools apply to a declared schema: it must be a valid
//! JSON Schema whose top level describes an object, because model providers
//! only accept object-shaped tool arguments.
//!
//! `jsonschema` is built without its default features, so a `$ref` to a remote
//! or file URI is a compile error here instead of a network or disk fetch.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// The most validation messages reported for one input. A badly wrong input
/// can produce hundreds; the model and the person reading the trace only need
/// enough to correct it.
const MAX_ERRORS: usize = 20;

/// Longest single message kept. Messages quote the offending value, which may
/// be a very large string or object.
const MAX_MESSAGE_CHARS: usize = 300;

/// Why a schema cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// The schema is not valid JSON Schema (or names a `$ref` that cannot be
    /// resolved locally).
    #[error("invalid JSON Schema at {location}: {message}")]
    Invalid {
        /// Where in the schema the problem is, as a JSON pointer (`(root)`
        /// for the top level).
        location: String,
        /// What is wrong.
        message: String,
    },
}

/// A compiled JSON Schema that checks tool inputs.
#[derive(Clone)]
pub struct InputValidator {
    validator: Arc<jsonschema::Validator>,
}

impl fmt::Debug for InputValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InputValidator").finish_non_exhaustive()
    }
}

impl InputValidator {
    /// Compiles `schema`. The schema is meta-validated while compiling.
    pub fn new(schema: &Value) -> Result<Self, SchemaError> {
        let validator = jsonschema::validator_for(schema).map_err(|e| SchemaError::Invalid {
            location: display_path(e.instance_path().as_str()),
            message: truncate(&e.to_string()),
        })?;
        Ok(Self {
            validator: Arc::new(validator),
        })
    }

    /// Checks `input`. On failure returns one line per problem, each
    /// `<instance path>: <message>`, sorted, without duplicates, and at most
    /// 20 of them.
    pub fn validate(&self, input: &Value) -> Result<(), Vec<String>> {
        if self.validator.is_valid(input) {
            return Ok(());
        }
        let mut errors: Vec<String> = self
            .validator
            .iter_errors(input)
            .map(|e| {
                format!(
                    "{}: {}",
                    display_path(e.instance_path().as_str()),
                    truncate(&e.to_string())
                )
            })
            .collect();
        errors.sort();
        errors.dedup();
        errors.truncate(MAX_ERRORS);
        if errors.is_empty() {
            // `is_valid` and `iter_errors` disagreeing would be a bug in the
            // validator; still refuse the input rather than let it through.
            errors.push("(root): input does not match the schema".to_owned());
        }
        Err(errors)
    }
}

/// Checks that `schema` is a usable tool input schema: valid against its
/// meta-schema, compilable (local `$ref`s only), and `"type": "object"` at the
/// top level.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    let Some(object) = schema.as_object() else {
        return Err(format!(
            "input schema must be a JSON object, found {}",
            json_kind(schema)
        ));
    };
    jsonschema::meta::validate(schema).map_err(|e| {
        format!(
            "input schema is not valid JSON Schema at {}: {}",
            display_path(e.instance_path().as_str()),
            truncate(&e.to_string())
        )
    })?;
    match object.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        Some(other) => {
            return Err(format!(
                "input schema must have \"type\": \"object\" at the top level, found \"type\": {other}"
            ));
        }
        None => {
            return Err("input schema must have \"type\": \"object\" at the top level".to_owned());
        }
    }
    InputValidator::new(schema)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Shows the root pointer (empty string) as `(root)` so messages never start
/// with a bare colon.
fn display_path(pointer: &str) -> String {
    if pointer.is_empty() {
        "(root)".to_owned()
    } else {
        pointer.to_owned()
    }
}

fn truncate(message: &str) -> String {
    if message.chars().count() <= MAX_MESSAGE_CHARS {
        return message.to_owned();
    }
    let mut cut: String = message.chars().take(MAX_MESSAGE_CHARS).collect();
    cut.push_str("...");
    cut
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "city": { "type": "string" },
                "days": { "type": "integer", "minimum": 1, "maximum": 7 },
                "units": { "enum": ["metric", "imperial"] }
            },
            "required": ["city"],
            "additionalProperties": false
        })
    }

    #[test]
    fn valid_input_passes() {
        let v = InputValidator::new(&weather_schema()).unwrap();
        assert_eq!(v.validate(&json!({"city": "Paris", "days": 3})), Ok(()));
    }

    #[test]
    fn type_error_names_the_instance_path() {
        let v = InputValidator::new(&weather_schema()).unwrap();
        let errors = v.validate(&json!({"city": 5})).unwrap_err();
        assert_eq!(
            errors,
            vec!["/city: 5 is not of type \"string\"".to_owned()]
        );
    }

    #[test]
    fn root_errors_show_root_and_are_sorted() {
        let v = InputValidator::new(&weather_schema()).unwrap();
        let errors = v.validate(&json!({"days": 9, "extra": true})).unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        let mut sorted = errors.clone();
        sorted.sort();
        assert_eq!(errors, sorted);
        assert!(errors.iter().any(|e| e.starts_with("(root): ") && e.contains("\"city\" is a required property")), "{errors:?}");
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("(root): ") && e.contains("extra")),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("/days: ") && e.contains('7')),
            "{errors:?}"
        );
    }

    #[test]
    fn non_object_input_is_rejected_at_root() {
        let v = InputValidator::new(&weather_schema()).unwrap();
        let errors = v.validate(&json!("Paris")).unwrap_err();
        assert_eq!(
            errors,
            vec!["(root): \"Paris\" is not of type \"object\"".to_owned()]
        );
    }

    #[test]
    fn errors_are_capped() {
        let schema = json!({
            "type": "object",
            "additionalProperties": { "type": "string" }
        });
        let v = InputValidator::new(&schema).unwrap();
        let input: serde_json::Map<String, Value> =
            (0..50).map(|i| (format!("k{i:02}"), json!(i))).collect();
        let errors = v.validate(&Value::Object(input)).unwrap_err();
        assert_eq!(errors.len(), MAX_ERRORS);
        assert_eq!(errors[0], "/k00: 0 is not of type \"string\"");
    }

    #[test]
    fn duplicate_errors_are_merged() {
        // Both branches of the allOf report the same problem at the same place.
        let schema = json!({
            "type": "object",
            "allOf": [
                { "properties": { "a": { "type": "string" } } },
                { "properties": { "a": { "type": "string" } } }
            ]
        });
        let v = InputValidator::new(&schema).unwrap();
        let errors = v.validate(&json!({"a": 1})).unwrap_err();
        assert_eq!(errors, vec!["/a: 1 is not of type \"string\"".to_owned()]);
    }

    #[test]
    fn long_values_are_truncated_in_messages() {
        let v = InputValidator::new(&weather_schema()).unwrap();
        let long = "x".repeat(5000);
        let errors = v
            .validate(&json!({"city": "Paris", "units": long}))
            .unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("/units: "));
        assert!(errors[0].chars().count() < 400, "{}", errors[0].len());
    }

    #[test]
    fn invalid_schema_is_an_error() {
        let err = InputValidator::new(&json!({"type": "strin"})).unwrap_err();
        assert!(matches!(err, SchemaError::Invalid { .. }));
    }

    #[test]
    fn remote_refs_are_not_fetched() {
        let schema = json!({
            "type": "object",
            "properties": { "a": { "$ref": "https://example.invalid/schema.json" } }
        });
        assert!(InputValidator::new(&schema).is_err());
        assert!(check_schema(&schema).is_err());
    }

    #[test]
    fn local_defs_resolve() {
        let schema = json!({
            "type": "object",
            "properties": { "unit": { "$ref": "#/$defs/Unit" } },
            "$defs": { "Unit": { "type": "string", "enum": ["c", "f"] } }
        });
        check_schema(&schema).unwrap();
        let v = InputValidator::new(&schema).unwrap();
        assert!(v.validate(&json!({"unit": "c"})).is_ok());
        assert_eq!(v.validate(&json!({"unit": "k"})).unwrap_err().len(), 1);
    }

    #[test]
    fn check_schema_accepts_object_schemas() {
        check_schema(&weather_schema()).unwrap();
        check_schema(&json!({"type": "object"})).unwrap();
    }

    #[test]
    fn check_schema_requires_top_level_object() {
        let err = check_schema(&json!({"type": "string"})).unwrap_err();
        assert!(err.contains("\"type\": \"object\""), "{err}");
        let err = check_schema(&json!({"properties": {}})).unwrap_err();
        assert!(err.contains("\"type\": \"object\""), "{err}");
        let err = check_schema(&json!(["object"])).unwrap_err();
        assert!(err.contains("an array"), "{err}");
    }

    #[test]
    fn check_schema_meta_validates() {
        let err =
            check_schema(&json!({"type": "object", "properties": {"a": {"type": 5}}})).unwrap_err();
        assert!(
            err.starts_with("input schema is not valid JSON Schema"),
            "{err}"
        );
        assert!(err.contains("/properties/a/type"), "{err}");
        let err = check_schema(&json!({"type": "object", "required": "city"})).unwrap_err();
        assert!(err.contains("/required"), "{err}");
    }
}
