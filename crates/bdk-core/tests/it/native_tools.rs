#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Rust-native tools: derived schemas, typed calls, failures, cancellation.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bdk_core::tool::native::{native_tool, raw_tool};
use bdk_core::tool::schema::{InputValidator, check_schema};
use bdk_core::tool::{Effect, Execution, SessionInfo, Tool, ToolContext, ToolOutput, ToolSpec};
use bdk_events::SessionMode;
use futures::FutureExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Units for the forecast.
#[derive(Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Units {
    Metric,
    Imperial,
}

/// Input of the weather tool.
#[derive(Debug, Deserialize, JsonSchema)]
struct WeatherInput {
    /// City name.
    city: String,
    /// How many days to forecast.
    days: Option<u8>,
    /// Unit system.
    units: Units,
}

#[derive(Serialize, JsonSchema)]
struct WeatherReport {
    city: String,
    temp_c: f64,
}

fn ctx(cancel: CancellationToken) -> ToolContext {
    ToolContext {
        call_id: "call_test".to_owned(),
        session: SessionInfo {
            id: None,
            channel: "test".to_owned(),
            mode: SessionMode::Chat,
            principal: None,
        },
        workspace_dir: PathBuf::from("."),
        trees: Default::default(),
        state_root: PathBuf::from("."),
        now: chrono::Utc::now(),
        as_of_pinned: false,
        dry_run: false,
        approved_by: None,
        cancel,
        services: None,
        reporter: None,
    }
}

fn weather_tool() -> bdk_core::tool::native::NativeTool {
    native_tool(
        "get_weather",
        "Current weather for a city.",
        |input: WeatherInput, ctx: ToolContext| async move {
            if input.city.is_empty() {
                return Err("city must not be empty".to_owned());
            }
            Ok(json!({
                "city": input.city,
                "days": input.days.unwrap_or(1),
                "units": input.units,
                "callId": ctx.call_id,
            }))
        },
    )
}

/// Bounds a wait that should end promptly; failing here means the call hung.
async fn bounded<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("the call did not end within 10 s")
}

#[test]
fn derived_schema_is_a_plain_object_schema() {
    let tool = weather_tool();
    let schema = &tool.spec().input_schema;
    assert!(tool.schema_error().is_none(), "{:?}", tool.schema_error());
    assert_eq!(schema["type"], "object");
    assert!(schema.get("$schema").is_none(), "{schema:#}");
    assert!(schema.get("title").is_none(), "{schema:#}");
    assert!(
        !schema.to_string().contains("$ref"),
        "subschemas should be inlined: {schema:#}"
    );

    let mut required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort_unstable();
    assert_eq!(
        required,
        vec!["city", "units"],
        "optional fields are not required"
    );

    let props = &schema["properties"];
    assert_eq!(props["city"]["type"], "string");
    assert_eq!(props["city"]["description"], "City name.");
    assert_eq!(
        props["units"]["enum"],
        json!(["metric", "imperial"]),
        "{schema:#}"
    );
    assert!(
        props["days"]["type"]
            .as_array()
            .unwrap()
            .contains(&json!("null"))
    );
    check_schema(schema).unwrap();
}

#[test]
fn derived_schema_drives_input_validation() {
    let tool = weather_tool();
    let validator = InputValidator::new(&tool.spec().input_schema).unwrap();
    assert!(
        validator
            .validate(&json!({"city": "Oslo", "units": "metric"}))
            .is_ok()
    );
    assert!(
        validator
            .validate(&json!({"city": "Oslo", "units": "metric", "days": null}))
            .is_ok()
    );
    let errors = validator
        .validate(&json!({"city": 5, "units": "kelvin"}))
        .unwrap_err();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(errors[0], "/city: 5 is not of type \"string\"");
    assert!(errors[1].starts_with("/units: "), "{errors:?}");
    let errors = validator
        .validate(&json!({"city": "Oslo", "units": "metric", "days": 300}))
        .unwrap_err();
    assert!(errors[0].starts_with("/days: "), "{errors:?}");
}

#[test]
fn spec_defaults_and_builder() {
    let tool = weather_tool();
    let spec = tool.spec();
    assert_eq!(spec.name, "get_weather");
    assert_eq!(spec.description, "Current weather for a city.");
    assert_eq!(
        spec.effect,
        Effect::Write,
        "undeclared effect counts as write"
    );
    assert_eq!(spec.execution, Execution::Server);
    assert!(!spec.needs_approval);
    assert_eq!(spec.timeout_ms, None);
    assert_eq!(spec.output_schema, None);

    let tool = weather_tool()
        .effect(Effect::Read)
        .needs_approval(true)
        .timeout_ms(1500);
    let spec = tool.spec();
    assert_eq!(spec.effect, Effect::Read);
    assert!(spec.needs_approval);
    assert_eq!(spec.timeout_ms, Some(1500));
}

#[test]
fn output_schema_is_derived_from_the_output_type() {
    let tool = weather_tool().output_schema::<WeatherReport>();
    let schema = tool.spec().output_schema.clone().unwrap();
    assert_eq!(schema["type"], "object");
    assert!(schema.get("$schema").is_none());
    assert_eq!(schema["properties"]["city"]["type"], "string");
    assert_eq!(schema["properties"]["temp_c"]["type"], "number");
    let validator = InputValidator::new(&schema).unwrap();
    let report = serde_json::to_value(WeatherReport {
        city: "Oslo".to_owned(),
        temp_c: 3.5,
    })
    .unwrap();
    assert!(validator.validate(&report).is_ok());
}

#[tokio::test]
async fn typed_call_returns_the_function_result() {
    let tool = weather_tool();
    let out = tool
        .call(
            json!({"city": "Oslo", "units": "imperial", "days": 3}),
            ctx(CancellationToken::new()),
        )
        .await;
    assert_eq!(
        out,
        ToolOutput::ok(
            json!({"city": "Oslo", "days": 3, "units": "imperial", "callId": "call_test"})
        )
    );
}

#[tokio::test]
async fn function_errors_become_error_outputs() {
    let out = weather_tool()
        .call(
            json!({"city": "", "units": "metric"}),
            ctx(CancellationToken::new()),
        )
        .await;
    assert_eq!(out, ToolOutput::error("city must not be empty"));
}

#[tokio::test]
async fn bad_input_is_an_error_naming_the_problem() {
    let tool = weather_tool();
    let out = tool
        .call(json!({"units": "metric"}), ctx(CancellationToken::new()))
        .await;
    assert!(out.is_error);
    let text = out.to_text();
    assert!(
        text.contains("get_weather") && text.contains("missing field `city`"),
        "{text}"
    );

    let out = tool
        .call(
            json!({"city": "Oslo", "units": "kelvin"}),
            ctx(CancellationToken::new()),
        )
        .await;
    assert!(out.is_error);
    let text = out.to_text();
    assert!(text.contains("kelvin") && text.contains("metric"), "{text}");
}

#[tokio::test]
async fn cancellation_ends_a_running_call() {
    let started = Arc::new(tokio::sync::Notify::new());
    let started_in_tool = Arc::clone(&started);
    let tool = native_tool(
        "hang",
        "never finishes",
        move |_: serde_json::Map<String, Value>, _ctx| {
            let started = Arc::clone(&started_in_tool);
            async move {
                started.notify_one();
                futures::future::pending::<()>().await;
                Ok(Value::Null)
            }
        },
    );
    let cancel = CancellationToken::new();
    let call = tokio::spawn({
        let cancel = cancel.clone();
        async move { tool.call(json!({}), ctx(cancel)).await }
    });
    bounded(started.notified()).await;
    cancel.cancel();
    let out = bounded(call).await.unwrap();
    assert_eq!(out, ToolOutput::error("cancelled"));
}

#[tokio::test]
async fn an_already_cancelled_call_never_runs() {
    let ran = Arc::new(AtomicBool::new(false));
    let ran_in_tool = Arc::clone(&ran);
    let tool = native_tool(
        "flag",
        "sets a flag",
        move |_: serde_json::Map<String, Value>, _ctx| {
            let ran = Arc::clone(&ran_in_tool);
            async move {
                ran.store(true, Ordering::SeqCst);
                Ok(Value::Null)
            }
        },
    );
    let cancel = CancellationToken::new();
    cancel.cancel();
    let out = tool.call(json!({}), ctx(cancel)).await;
    assert_eq!(out, ToolOutput::error("cancelled"));
    assert!(!ran.load(Ordering::SeqCst));
}

#[tokio::test]
async fn timeouts_are_error_outputs_and_transient() {
    let tool = native_tool(
        "slow",
        "never finishes",
        |_: serde_json::Map<String, Value>, _ctx| async {
            futures::future::pending::<()>().await;
            Ok(Value::Null)
        },
    )
    .effect(Effect::Read)
    .timeout_ms(20);
    let out = bounded(tool.call(json!({}), ctx(CancellationToken::new()))).await;
    assert_eq!(out, ToolOutput::error("tool timed out after 20 ms"));
    assert!(tool.is_transient(&out));
    assert!(!tool.is_transient(&ToolOutput::error("city must not be empty")));
}

#[tokio::test]
async fn panics_become_error_outputs() {
    let tool = native_tool(
        "boom",
        "panics",
        |input: serde_json::Map<String, Value>, _ctx| async move {
            if input.is_empty() {
                panic!("boom");
            }
            Ok(Value::Null)
        },
    );
    let out = tool.call(json!({}), ctx(CancellationToken::new())).await;
    assert_eq!(out, ToolOutput::error("tool panicked: boom"));
}

#[tokio::test]
async fn raw_tools_receive_json_and_respect_cancellation() {
    let spec = ToolSpec {
        name: "echo".to_owned(),
        title: None,
        description: "Echoes its input.".to_owned(),
        input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        output_schema: None,
        effect: Effect::Read,
        execution: Execution::Server,
        needs_approval: false,
        timeout_ms: None,
    };
    let tool = raw_tool(spec.clone(), |input, _ctx| {
        async move { ToolOutput::ok(input) }.boxed()
    });
    assert!(tool.schema_error().is_none());
    assert_eq!(tool.spec(), &spec);
    let out = tool
        .call(json!({"text": "hi"}), ctx(CancellationToken::new()))
        .await;
    assert_eq!(out, ToolOutput::ok(json!({"text": "hi"})));

    let hang = raw_tool(spec, |_input, _ctx| {
        futures::future::pending::<ToolOutput>().boxed()
    });
    let cancel = CancellationToken::new();
    let call = tokio::spawn({
        let cancel = cancel.clone();
        async move { hang.call(json!({}), ctx(cancel)).await }
    });
    cancel.cancel();
    assert_eq!(bounded(call).await.unwrap(), ToolOutput::error("cancelled"));
}

#[tokio::test]
async fn raw_tools_with_unusable_schemas_report_and_refuse() {
    let spec = ToolSpec {
        name: "bad".to_owned(),
        title: None,
        description: "Bad schema.".to_owned(),
        input_schema: json!({"type": "array"}),
        output_schema: None,
        effect: Effect::Read,
        execution: Execution::Server,
        needs_approval: false,
        timeout_ms: None,
    };
    let tool = raw_tool(spec, |input, _ctx| {
        async move { ToolOutput::ok(input) }.boxed()
    });
    let problem = tool.schema_error().unwrap().to_owned();
    assert!(problem.contains("`bad`"), "{problem}");
    let out = tool.call(json!([]), ctx(CancellationToken::new())).await;
    assert_eq!(out, ToolOutput::error(problem));
}
