#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! OpenTelemetry export from the real `bdk` binary to an in-test OTLP/gRPC
//! receiver (the collector's trace and metrics services over tonic).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use assert_cmd::cargo::CommandCargoExt;
use bdk_testkit::poll;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{Metric, metric, number_data_point};
use opentelemetry_proto::tonic::trace::v1::{Span, status};
use serde_json::{Value, json};

use crate::common;
use common::{Server, client, post, read_until, weather};

/// What the receiver was sent.
#[derive(Clone, Default)]
struct Receiver {
    traces: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    metrics: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.traces.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tonic::async_trait]
impl MetricsService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.metrics.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: None,
        }))
    }
}

impl Receiver {
    /// Serves both collector services on 127.0.0.1:0; returns the endpoint.
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(self.clone()))
            .add_service(MetricsServiceServer::new(self.clone()));
        tokio::spawn(
            router.serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        format!("http://{addr}")
    }

    fn spans(&self) -> Vec<Span> {
        self.traces
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| s.spans.clone())
            .collect()
    }

    /// The latest export of each metric (exports are cumulative).
    fn metrics(&self) -> BTreeMap<String, Metric> {
        let mut out = BTreeMap::new();
        for request in self.metrics.lock().unwrap().iter() {
            for rm in &request.resource_metrics {
                for sm in &rm.scope_metrics {
                    for m in &sm.metrics {
                        out.insert(m.name.clone(), m.clone());
                    }
                }
            }
        }
        out
    }

    fn requests(&self) -> usize {
        self.traces.lock().unwrap().len() + self.metrics.lock().unwrap().len()
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

fn str_attr<'a>(attrs: &'a [KeyValue], key: &str) -> &'a str {
    match attr(attrs, key) {
        Some(any_value::Value::StringValue(s)) => s,
        other => panic!("attribute {key}: expected a string, got {other:?}"),
    }
}

fn int_attr(attrs: &[KeyValue], key: &str) -> i64 {
    match attr(attrs, key) {
        Some(any_value::Value::IntValue(i)) => *i,
        other => panic!("attribute {key}: expected an int, got {other:?}"),
    }
}

/// Sum of a counter's points whose attributes include every `(key, value)`.
fn counter(metrics: &BTreeMap<String, Metric>, name: &str, filter: &[(&str, &str)]) -> i64 {
    let m = metrics
        .get(name)
        .unwrap_or_else(|| panic!("metric {name} missing; got {:?}", metrics.keys()));
    let Some(metric::Data::Sum(sum)) = &m.data else {
        panic!("{name} is not a sum: {:?}", m.data)
    };
    assert!(sum.is_monotonic, "{name} should be a counter");
    sum.data_points
        .iter()
        .filter(|p| {
            filter.iter().all(|(k, v)| {
                matches!(attr(&p.attributes, k), Some(any_value::Value::StringValue(s)) if s == v)
            })
        })
        .map(|p| match p.value {
            Some(number_data_point::Value::AsInt(i)) => i,
            other => panic!("{name}: expected an int point, got {other:?}"),
        })
        .sum()
}

/// Total count of a histogram's points whose attributes include `filter`.
fn histogram_count(metrics: &BTreeMap<String, Metric>, name: &str, filter: &[(&str, &str)]) -> u64 {
    let m = metrics
        .get(name)
        .unwrap_or_else(|| panic!("metric {name} missing; got {:?}", metrics.keys()));
    let Some(metric::Data::Histogram(h)) = &m.data else {
        panic!("{name} is not a histogram: {:?}", m.data)
    };
    h.data_points
        .iter()
        .filter(|p| {
            filter.iter().all(|(k, v)| {
                matches!(attr(&p.attributes, k), Some(any_value::Value::StringValue(s)) if s == v)
            })
        })
        .map(|p| p.count)
        .sum()
}

/// Waits (polling: the collector's records announce nothing) until `ready`
/// holds.
async fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    poll::until(what, || std::future::ready(ready())).await;
}

/// A `bdk` command with no OTEL_* settings inherited from the test's
/// environment, and short export intervals.
fn bdk() -> Command {
    let mut cmd = Command::cargo_bin("bdk").unwrap();
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("OTEL_") {
            cmd.env_remove(key);
        }
    }
    cmd.env_remove("BDK_STATE_ROOT")
        .env_remove("BDK_BEARER_TOKEN")
        .env_remove("BDK_LOG")
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "500");
    cmd
}

fn serve(dir: &Path, extra: &[&str]) -> Server {
    let mut cmd = bdk();
    cmd.arg("serve").arg(dir).args(["--port", "0"]).args(extra);
    Server::spawn(cmd)
}

/// Runs one weather turn over HTTP; returns the session id and its events.
async fn weather_turn(server: &Server) -> (String, Vec<Value>) {
    let c = client();
    let (status, started) = post(
        &c,
        &format!("{}/weather/v1/session", server.base),
        json!({"message": "What's the weather in Paris?"}),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let resp = c
        .get(format!(
            "{}/weather/v1/session/{id}/stream?startIndex=0",
            server.base
        ))
        .send()
        .await
        .unwrap();
    let (events, _) = read_until(resp, |e| e["type"] == "session.waiting").await;
    assert!(
        events.iter().any(|e| e["type"] == "turn.completed"),
        "{events:?}"
    );
    (id, events)
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_exports_turn_step_and_tool_spans_and_metrics_over_otlp() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let (_tmp, dir) = weather();
    let mut server = serve(&dir, &["--otlp-endpoint", &endpoint]);
    let (session_id, events) = weather_turn(&server).await;
    let call_id = events
        .iter()
        .find(|e| e["type"] == "action.result")
        .and_then(|e| e["data"]["callId"].as_str())
        .unwrap()
        .to_owned();
    let turn_id = events
        .iter()
        .find(|e| e["type"] == "turn.completed")
        .and_then(|e| e["turnId"].as_str())
        .unwrap()
        .to_owned();
    // SIGTERM: the server drains, then flushes both providers before exiting.
    assert_eq!(server.terminate(), 0, "{}", server.stderr.lock().unwrap());
    wait_for("the turn span", || {
        receiver
            .spans()
            .iter()
            .any(|s| s.name.starts_with("invoke_agent"))
    })
    .await;

    let spans = receiver.spans();
    let named = |prefix: &str| -> Vec<&Span> {
        spans
            .iter()
            .filter(|s| s.name.starts_with(prefix))
            .collect()
    };
    let turns = named("invoke_agent");
    assert_eq!(turns.len(), 1, "{spans:#?}");
    let turn = turns[0];
    assert_eq!(turn.name, "invoke_agent weather");
    assert!(turn.parent_span_id.is_empty(), "the turn is a root span");
    assert_eq!(
        str_attr(&turn.attributes, "gen_ai.operation.name"),
        "invoke_agent"
    );
    assert_eq!(str_attr(&turn.attributes, "gen_ai.agent.name"), "weather");
    assert_eq!(
        str_attr(&turn.attributes, "gen_ai.conversation.id"),
        session_id
    );
    assert_eq!(str_attr(&turn.attributes, "bdk.turn.id"), turn_id);
    assert_eq!(str_attr(&turn.attributes, "bdk.turn.status"), "completed");
    assert_eq!(
        str_attr(&turn.attributes, "gen_ai.provider.name"),
        "scripted"
    );
    // Usage of the two steps of the scripted weather rules.
    assert_eq!(int_attr(&turn.attributes, "gen_ai.usage.input_tokens"), 280);
    assert_eq!(int_attr(&turn.attributes, "gen_ai.usage.output_tokens"), 55);
    assert!(attr(&turn.attributes, "error.type").is_none());

    let mut steps = named("chat");
    steps.sort_by_key(|s| s.start_time_unix_nano);
    assert_eq!(steps.len(), 2, "{spans:#?}");
    for (step, (n, input, output, finish)) in steps
        .iter()
        .zip([(1, 120, 30, "tool_calls"), (2, 160, 25, "stop")])
    {
        assert_eq!(step.trace_id, turn.trace_id);
        assert_eq!(
            step.parent_span_id, turn.span_id,
            "a step is a child of the turn"
        );
        assert_eq!(str_attr(&step.attributes, "gen_ai.operation.name"), "chat");
        assert_eq!(
            str_attr(&step.attributes, "gen_ai.provider.name"),
            "scripted"
        );
        assert_eq!(str_attr(&step.attributes, "gen_ai.system"), "scripted");
        let model = str_attr(&step.attributes, "gen_ai.request.model");
        assert_eq!(step.name, format!("chat {model}"));
        assert_eq!(str_attr(&step.attributes, "gen_ai.response.model"), model);
        assert_eq!(
            str_attr(&step.attributes, "gen_ai.conversation.id"),
            session_id
        );
        assert_eq!(int_attr(&step.attributes, "bdk.step"), n);
        assert_eq!(
            int_attr(&step.attributes, "gen_ai.usage.input_tokens"),
            input
        );
        assert_eq!(
            int_attr(&step.attributes, "gen_ai.usage.output_tokens"),
            output
        );
        assert_eq!(
            str_attr(&step.attributes, "gen_ai.response.finish_reasons"),
            finish
        );
        // Client kind: the step is a call out to a model.
        assert_eq!(step.kind, 3, "SPAN_KIND_CLIENT");
    }

    let tools = named("execute_tool");
    assert_eq!(tools.len(), 1, "{spans:#?}");
    let tool = tools[0];
    assert_eq!(tool.name, "execute_tool get_weather");
    assert_eq!(tool.trace_id, turn.trace_id);
    assert_eq!(
        tool.parent_span_id, turn.span_id,
        "a tool call is a child of the turn"
    );
    assert_eq!(
        str_attr(&tool.attributes, "gen_ai.operation.name"),
        "execute_tool"
    );
    assert_eq!(
        str_attr(&tool.attributes, "gen_ai.tool.name"),
        "get_weather"
    );
    assert_eq!(str_attr(&tool.attributes, "gen_ai.tool.call.id"), call_id);
    assert_eq!(str_attr(&tool.attributes, "bdk.tool.status"), "ok");
    assert!(attr(&tool.attributes, "error.type").is_none());
    // The tool ran between the two model steps.
    assert!(tool.start_time_unix_nano >= steps[0].end_time_unix_nano);
    assert!(tool.end_time_unix_nano <= steps[1].start_time_unix_nano);
    for s in [turn, steps[0], steps[1], tool] {
        let code = s.status.as_ref().map_or(0, |st| st.code);
        assert_ne!(code, status::StatusCode::Error as i32, "{s:?}");
    }

    // The resource names the service.
    let traces = receiver.traces.lock().unwrap().clone();
    let resource = traces[0].resource_spans[0].resource.as_ref().unwrap();
    assert_eq!(str_attr(&resource.attributes, "service.name"), "bdk");

    wait_for("the metrics", || {
        receiver.metrics().contains_key("bdk.turns")
    })
    .await;
    let metrics = receiver.metrics();
    assert_eq!(
        counter(&metrics, "bdk.turns", &[("bdk.turn.status", "completed")]),
        1
    );
    assert_eq!(
        counter(
            &metrics,
            "bdk.tool_calls",
            &[
                ("gen_ai.tool.name", "get_weather"),
                ("bdk.tool.status", "ok")
            ]
        ),
        1
    );
    assert_eq!(
        counter(&metrics, "bdk.tokens", &[("gen_ai.token.type", "input")]),
        280
    );
    assert_eq!(
        counter(&metrics, "bdk.tokens", &[("gen_ai.token.type", "output")]),
        55
    );
    assert_eq!(histogram_count(&metrics, "bdk.turn.duration", &[]), 1);
    assert_eq!(
        histogram_count(
            &metrics,
            "bdk.tool_call.duration",
            &[("gen_ai.tool.name", "get_weather")]
        ),
        1
    );
    assert_eq!(
        histogram_count(
            &metrics,
            "gen_ai.client.operation.duration",
            &[("gen_ai.operation.name", "chat")]
        ),
        2
    );
    assert_eq!(
        histogram_count(
            &metrics,
            "gen_ai.client.token.usage",
            &[("gen_ai.token.type", "output")]
        ),
        2
    );
    assert!(
        !metrics.contains_key("bdk.errors"),
        "no error was counted: {:?}",
        metrics.get("bdk.errors")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_tool_call_is_an_error_span_and_counted() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let (_tmp, dir) = weather();
    // This copy's weather station is down: the tool answers with an error.
    std::fs::write(
        dir.join("agent/tools/get_weather.py"),
        "import json, sys\njson.load(sys.stdin)\nprint(json.dumps({\"content\": \"weather station offline\", \"isError\": True}))\n",
    )
    .unwrap();
    let mut server = serve(&dir, &["--otlp-endpoint", &endpoint]);
    let (_, events) = weather_turn(&server).await;
    let result = events
        .iter()
        .find(|e| e["type"] == "action.result")
        .unwrap();
    assert_eq!(server.terminate(), 0);
    wait_for("the tool span", || {
        receiver
            .spans()
            .iter()
            .any(|s| s.name.starts_with("execute_tool"))
    })
    .await;
    let spans = receiver.spans();
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool get_weather")
        .unwrap();
    let is_error = result["data"]["isError"].as_bool().unwrap();
    assert!(is_error, "{result}");
    assert_eq!(str_attr(&tool.attributes, "bdk.tool.status"), "error");
    assert_eq!(str_attr(&tool.attributes, "error.type"), "tool_error");
    assert_eq!(
        tool.status.as_ref().map(|s| s.code),
        Some(status::StatusCode::Error as i32)
    );
    wait_for("the metrics", || {
        receiver.metrics().contains_key("bdk.errors")
    })
    .await;
    let metrics = receiver.metrics();
    assert_eq!(
        counter(
            &metrics,
            "bdk.tool_calls",
            &[
                ("gen_ai.tool.name", "get_weather"),
                ("bdk.tool.status", "error")
            ]
        ),
        1
    );
    assert_eq!(
        counter(
            &metrics,
            "bdk.errors",
            &[("bdk.error.source", "tool"), ("error.type", "tool_error")]
        ),
        1
    );
}

/// A direct tool call (no turn) is a trace of its own and is counted; a
/// request naming no real tool leaves no span and no metric behind.
#[tokio::test(flavor = "multi_thread")]
async fn direct_tool_calls_are_traced_and_counted() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let (_tmp, dir) = weather();
    let mut server = serve(&dir, &["--otlp-endpoint", &endpoint]);
    let c = client();
    let (status, body) = post(
        &c,
        &format!("{}/weather/v1/tools/get_weather", server.base),
        json!({"input": {"city": "Paris"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(
        &c,
        &format!("{}/weather/v1/tools/made_up_tool_name", server.base),
        json!({"input": {}}),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    // A real tool bound to a session that does not exist: refused, traced.
    let (status, body) = post(
        &c,
        &format!("{}/weather/v1/tools/get_weather", server.base),
        json!({"input": {"city": "Oslo"}, "sessionId": "ses_01m8q8wcmae7292qebz2c8zd5p"}),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"], "session_not_found", "{body}");
    assert_eq!(server.terminate(), 0);
    wait_for("the direct call's span", || {
        receiver
            .spans()
            .iter()
            .any(|s| s.name == "execute_tool get_weather")
    })
    .await;
    wait_for("both direct calls' spans", || {
        receiver
            .spans()
            .iter()
            .filter(|s| s.name == "execute_tool get_weather")
            .count()
            == 2
    })
    .await;
    let spans = receiver.spans();
    let (refused, done): (Vec<_>, Vec<_>) = spans
        .iter()
        .filter(|s| s.name == "execute_tool get_weather")
        .partition(|s| str_attr(&s.attributes, "bdk.tool.status") == "refused");
    assert_eq!(
        str_attr(&refused[0].attributes, "bdk.tool.refusal"),
        "session_not_found"
    );
    let tool = done[0];
    assert!(
        tool.parent_span_id.is_empty(),
        "a direct call is a root span"
    );
    assert_eq!(str_attr(&tool.attributes, "bdk.tool.status"), "ok");
    assert_eq!(
        attr(&tool.attributes, "bdk.tool.direct"),
        Some(&any_value::Value::BoolValue(true))
    );
    assert!(
        str_attr(&tool.attributes, "gen_ai.tool.call.id").starts_with("tool_get_weather_"),
        "{:?}",
        tool.attributes
    );
    assert!(!spans.iter().any(|s| s.name.contains("made_up_tool_name")));
    wait_for("the tool call metric", || {
        receiver.metrics().contains_key("bdk.tool_calls")
    })
    .await;
    let metrics = receiver.metrics();
    assert_eq!(
        counter(
            &metrics,
            "bdk.tool_calls",
            &[
                ("gen_ai.tool.name", "get_weather"),
                ("bdk.tool.status", "ok")
            ]
        ),
        1
    );
    assert_eq!(
        counter(
            &metrics,
            "bdk.tool_calls",
            &[
                ("gen_ai.tool.name", "get_weather"),
                ("bdk.tool.status", "refused")
            ]
        ),
        1
    );
    assert!(
        !metrics.contains_key("bdk.errors"),
        "a refusal is not a tool error"
    );
    assert_eq!(
        counter(
            &metrics,
            "bdk.tool_calls",
            &[("gen_ai.tool.name", "made_up_tool_name")]
        ),
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn run_exports_its_turn_too() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let (_tmp, dir) = weather();
    let out = run_bdk(dir, endpoint).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `run` flushes before it exits: everything is there already.
    let spans = receiver.spans();
    let turn = spans
        .iter()
        .find(|s| s.name == "invoke_agent weather")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool get_weather")
        .unwrap();
    assert_eq!(tool.parent_span_id, turn.span_id);
    let metrics = receiver.metrics();
    assert_eq!(counter(&metrics, "bdk.turns", &[]), 1);
}

/// Runs `bdk run` on `dir` with export to `endpoint`; returns its output.
async fn run_bdk(dir: std::path::PathBuf, endpoint: String) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        bdk()
            .arg("run")
            .arg("--dir")
            .arg(&dir)
            .args(["--message", "What's the weather in Paris?"])
            .args(["--otlp-endpoint", &endpoint])
            .env_remove("OPENAI_API_KEY")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_model_step_marks_the_step_and_the_turn_failed() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let (_tmp, dir) = weather();
    // No key for this provider: the step fails before any request is sent.
    let toml = dir.join("agent/agent.toml");
    let config = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        config.replace("model = \"scripted\"", "model = \"openai/gpt-test\""),
    )
    .unwrap();
    let out = run_bdk(dir.clone(), endpoint).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = receiver.spans();
    let turn = spans
        .iter()
        .find(|s| s.name == "invoke_agent weather")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(str_attr(&turn.attributes, "bdk.turn.status"), "failed");
    assert_eq!(str_attr(&turn.attributes, "error.type"), "failed");
    assert_eq!(str_attr(&turn.attributes, "gen_ai.provider.name"), "openai");
    assert_eq!(
        turn.status.as_ref().map(|s| s.code),
        Some(status::StatusCode::Error as i32)
    );
    let step = spans.iter().find(|s| s.name == "chat gpt-test").unwrap();
    assert_eq!(step.parent_span_id, turn.span_id);
    assert_eq!(str_attr(&step.attributes, "error.type"), "model_config");
    assert_eq!(str_attr(&step.attributes, "gen_ai.provider.name"), "openai");
    assert_eq!(
        step.status.as_ref().map(|s| s.code),
        Some(status::StatusCode::Error as i32)
    );
    let metrics = receiver.metrics();
    assert_eq!(
        counter(&metrics, "bdk.turns", &[("bdk.turn.status", "failed")]),
        1
    );
    assert_eq!(
        counter(
            &metrics,
            "bdk.errors",
            &[
                ("bdk.error.source", "model"),
                ("error.type", "model_config")
            ]
        ),
        1
    );
    assert_eq!(
        counter(
            &metrics,
            "bdk.errors",
            &[("bdk.error.source", "turn"), ("error.type", "failed")]
        ),
        1
    );
    assert_eq!(
        histogram_count(
            &metrics,
            "gen_ai.client.operation.duration",
            &[("error.type", "model_config")]
        ),
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_an_endpoint_nothing_is_exported() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let (_tmp, dir) = weather();
    let mut server = serve(&dir, &[]);
    weather_turn(&server).await;
    assert_eq!(server.terminate(), 0);
    // The exporter would have flushed before exiting; with export off the
    // receiver was never called, and `OTEL_SDK_DISABLED` wins over the flag.
    assert_eq!(receiver.requests(), 0);

    let mut cmd = bdk();
    cmd.arg("serve")
        .arg(&dir)
        .args(["--port", "0", "--otlp-endpoint", &endpoint])
        .env("OTEL_SDK_DISABLED", "true");
    let mut server = Server::spawn(cmd);
    weather_turn(&server).await;
    assert_eq!(server.terminate(), 0);
    assert_eq!(receiver.requests(), 0);
}

#[test]
fn a_malformed_endpoint_is_refused_with_exit_code_2() {
    let (_tmp, dir) = weather();
    let out = bdk()
        .arg("serve")
        .arg(&dir)
        .args(["--port", "0", "--otlp-endpoint", "localhost:4317"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not an http:// or https:// URL"),
        "{stderr}"
    );
}
