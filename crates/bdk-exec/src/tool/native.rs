//! Rust-native tools: async Rust functions registered as tools.
//!
//! [`native_tool`] wraps a function taking a typed input; the input's JSON
//! Schema is derived with `schemars`, so the schema the model sees and the type
//! the function receives cannot drift apart. [`raw_tool`] wraps an untyped
//! function with a hand-written [`ToolSpec`] (built-ins and tests use it).
//!
//! Both produce a [`NativeTool`], which implements [`Tool`] exactly like a
//! manifest tool: same spec fields (effect, approval, timeout, output schema),
//! failures as error outputs rather than panics or dead turns, and prompt
//! cancellation through `ctx.cancel`.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use futures::future::BoxFuture;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::schema::check_schema;
use super::{Effect, Execution, Tool, ToolContext, ToolOutput, ToolSpec};

/// The untyped body of a native tool.
type Handler = Arc<dyn Fn(Value, ToolContext) -> BoxFuture<'static, ToolOutput> + Send + Sync>;

/// A tool implemented by a Rust function.
#[derive(Clone)]
pub struct NativeTool {
    spec: ToolSpec,
    handler: Handler,
    /// Why the input schema is unusable, when it is. Kept rather than
    /// panicking at construction so the host can report it as a diagnostic;
    /// calls fail with this message until it is fixed.
    schema_error: Option<String>,
}

impl fmt::Debug for NativeTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NativeTool")
            .field("spec", &self.spec)
            .field("schema_error", &self.schema_error)
            .finish_non_exhaustive()
    }
}

/// Builds a tool from an async function taking a typed input.
///
/// The input schema is derived from `I` (see [`input_schema_for`]). Input that
/// does not deserialize into `I` produces an error output naming the problem;
/// `Ok(value)` becomes [`ToolOutput::ok`] and `Err(message)` becomes
/// [`ToolOutput::error`]. The tool defaults to `effect = "write"`, like an
/// undeclared manifest tool; use [`NativeTool::effect`] for reads.
pub fn native_tool<I, F, Fut>(name: &str, description: &str, f: F) -> NativeTool
where
    I: JsonSchema + DeserializeOwned + Send + 'static,
    F: Fn(I, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, String>> + Send + 'static,
{
    let f = Arc::new(f);
    let tool_name = name.to_owned();
    let handler: Handler = Arc::new(move |input: Value, ctx: ToolContext| {
        let f = Arc::clone(&f);
        let tool_name = tool_name.clone();
        async move {
            let typed: I = match serde_json::from_value(input) {
                Ok(typed) => typed,
                Err(e) => {
                    return ToolOutput::error(format!("invalid input for tool `{tool_name}`: {e}"));
                }
            };
            match f(typed, ctx).await {
                Ok(value) => ToolOutput::ok(value),
                Err(message) => ToolOutput::error(message),
            }
        }
        .boxed()
    });
    let spec = ToolSpec {
        name: name.to_owned(),
        title: None,
        description: description.to_owned(),
        input_schema: input_schema_for::<I>(),
        output_schema: None,
        effect: Effect::Write,
        execution: Execution::Server,
        needs_approval: false,
        timeout_ms: None,
    };
    NativeTool::from_parts(spec, handler)
}

/// Builds a tool from a hand-written spec and an untyped function. The
/// function receives the (already validated) JSON input as is.
pub fn raw_tool(
    spec: ToolSpec,
    f: impl Fn(Value, ToolContext) -> BoxFuture<'static, ToolOutput> + Send + Sync + 'static,
) -> NativeTool {
    NativeTool::from_parts(spec, Arc::new(f))
}

/// The JSON Schema of a tool input type, in the shape models accept: no
/// `$schema` or root `title`, subschemas inlined (only recursive types keep a
/// `$ref` into `$defs`), describing what deserializes into `T`.
pub fn input_schema_for<T: JsonSchema>() -> Value {
    let settings = SchemaSettings::draft2020_12().for_deserialize();
    generate::<T>(settings)
}

/// The JSON Schema of a tool output type, in the same shape as
/// [`input_schema_for`] but describing what `T` serializes to.
pub fn output_schema_for<T: JsonSchema>() -> Value {
    let settings = SchemaSettings::draft2020_12().for_serialize();
    generate::<T>(settings)
}

fn generate<T: JsonSchema>(settings: SchemaSettings) -> Value {
    let settings = settings.with(|s| {
        // Models are told the schema inline with the tool; the meta-schema URI
        // is noise to them and the draft is implied.
        s.meta_schema = None;
        // Inlining keeps each property's shape next to it, which models follow
        // more reliably than `$ref` indirection.
        s.inline_subschemas = true;
    });
    let mut schema: Schema = settings.into_generator().into_root_schema_for::<T>();
    // The root title is the Rust type name, which says nothing to a model that
    // already knows the tool's name and description.
    schema.remove("title");
    schema.to_value()
}

impl NativeTool {
    fn from_parts(spec: ToolSpec, handler: Handler) -> Self {
        let schema_error = check_schema(&spec.input_schema)
            .err()
            .map(|e| format!("tool `{}` has an unusable input schema: {e}", spec.name));
        Self {
            spec,
            handler,
            schema_error,
        }
    }

    /// Declares whether the tool only reads (`Effect::Read`) or may write.
    #[must_use]
    pub fn effect(mut self, effect: Effect) -> Self {
        self.spec.effect = effect;
        self
    }

    /// Makes calls wait for a person's approval.
    #[must_use]
    pub fn needs_approval(mut self, needs_approval: bool) -> Self {
        self.spec.needs_approval = needs_approval;
        self
    }

    /// Sets the display title listings show beside the name.
    #[must_use]
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.spec.title = Some(title.into());
        self
    }

    /// Sets the per-call timeout.
    #[must_use]
    pub fn timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.spec.timeout_ms = Some(timeout_ms);
        self
    }

    /// Declares the output schema, derived from `O` as it serializes.
    #[must_use]
    pub fn output_schema<O: JsonSchema>(mut self) -> Self {
        self.spec.output_schema = Some(output_schema_for::<O>());
        self
    }

    /// Why the tool's input schema cannot be used (not an object schema, or
    /// invalid), if so. Hosts report this when the tool is registered.
    pub fn schema_error(&self) -> Option<&str> {
        self.schema_error.as_deref()
    }
}

/// The message of a call that ran past its timeout; kept in one place so
/// [`Tool::is_transient`] recognises exactly these outputs.
fn timeout_message(ms: u64) -> String {
    format!("tool timed out after {ms} ms")
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_owned()
    }
}

#[async_trait]
impl Tool for NativeTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        if let Some(error) = &self.schema_error {
            return ToolOutput::error(error.clone());
        }
        let cancel = ctx.cancel.clone();
        // A panic in user code must become an error result, not a dead turn:
        // the unwind is caught at the tool boundary.
        let run = AssertUnwindSafe((self.handler)(input, ctx))
            .catch_unwind()
            .map(|result| {
                result.unwrap_or_else(|payload| {
                    ToolOutput::error(format!("tool panicked: {}", panic_message(&*payload)))
                })
            });
        let timed = async {
            match self.spec.timeout_ms {
                Some(ms) => tokio::time::timeout(Duration::from_millis(ms), run)
                    .await
                    .unwrap_or_else(|_| ToolOutput::error(timeout_message(ms))),
                None => run.await,
            }
        };
        tokio::select! {
            // Checked first so a call whose turn is already cancelled never
            // starts its work.
            biased;
            () = cancel.cancelled() => ToolOutput::error("cancelled"),
            output = timed => output,
        }
    }

    fn is_transient(&self, output: &ToolOutput) -> bool {
        match (self.spec.timeout_ms, &output.content) {
            (Some(ms), Value::String(s)) => output.is_error && *s == timeout_message(ms),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, JsonSchema)]
    #[expect(dead_code, reason = "only the derived schema is inspected")]
    struct Tree {
        label: String,
        children: Vec<Tree>,
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[expect(dead_code, reason = "only the derived schema is inspected")]
    struct Forest {
        trees: Vec<Tree>,
    }

    #[test]
    fn recursive_types_keep_defs_and_validate() {
        let schema = input_schema_for::<Forest>();
        check_schema(&schema).unwrap();
        assert!(schema.get("$schema").is_none());
        assert!(schema.get("title").is_none());
        assert!(
            schema.get("$defs").and_then(|d| d.get("Tree")).is_some(),
            "{schema:#}"
        );
        let v = super::super::schema::InputValidator::new(&schema).unwrap();
        let ok = serde_json::json!({"trees": [{"label": "a", "children": [{"label": "b", "children": []}]}]});
        assert!(v.validate(&ok).is_ok());
        let bad = serde_json::json!({"trees": [{"label": "a", "children": [{"label": 1, "children": []}]}]});
        assert_eq!(
            v.validate(&bad).unwrap_err(),
            vec!["/trees/0/children/0/label: 1 is not of type \"string\"".to_owned()]
        );
    }

    #[test]
    fn non_object_inputs_are_reported() {
        let tool = native_tool("echo", "echoes", |s: String, _ctx| async move {
            Ok(Value::String(s))
        });
        let error = tool.schema_error().unwrap();
        assert!(
            error.contains("`echo`") && error.contains("\"type\": \"object\""),
            "{error}"
        );
    }
}
