//! OpenTelemetry export: traces and metrics over OTLP/gRPC.
//!
//! The runtime knows nothing of OpenTelemetry. It opens plain `tracing`
//! spans under the [`TRACE_TARGET`] target (`bdk.turn`, `bdk.step`,
//! `bdk.tool_call`, with GenAI semantic-convention field names), and this
//! module, when export is configured, adds two `tracing` layers that only
//! listen to that target: `tracing-opentelemetry`, which turns the spans into
//! OTel spans for a batch exporter, and [`MetricsLayer`], which turns each
//! closed span into counter and histogram measurements. When export is off
//! neither layer exists and the spans are disabled at their call sites.
//!
//! Export is on when `--otlp-endpoint` is given or an `OTEL_EXPORTER_OTLP_*`
//! endpoint variable is set, unless `OTEL_SDK_DISABLED=true`. The exporters
//! are built inside the Tokio runtime (tonic needs one), and
//! [`Telemetry::shutdown`] flushes both providers before the process exits.

use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use bdk_core::agent::TRACE_TARGET;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The endpoint for every signal (the flag sets the same thing).
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The endpoint for traces only; wins over [`ENDPOINT`].
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// The endpoint for metrics only; wins over [`ENDPOINT`].
const METRICS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
/// `true` turns export off whatever else is set.
const SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
/// `none` turns one signal off.
const TRACES_EXPORTER: &str = "OTEL_TRACES_EXPORTER";
/// `none` turns one signal off.
const METRICS_EXPORTER: &str = "OTEL_METRICS_EXPORTER";
/// Set by the user, it names the service; otherwise we say `bdk`.
const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";

/// Duration buckets in seconds, from a fast in-process tool to a long turn.
const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0,
    320.0,
];
/// Token-count buckets, as the GenAI conventions advise.
const TOKEN_BUCKETS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
];

/// Where each signal goes; `None` leaves the signal off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// The traces endpoint.
    pub traces: Option<String>,
    /// The metrics endpoint.
    pub metrics: Option<String>,
}

impl Endpoints {
    /// Resolves the endpoints from the flag and the environment (`var`
    /// reads one variable). The flag wins over every variable; a
    /// signal-specific variable wins over the shared one.
    pub fn resolve(flag: Option<&str>, var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if get(SDK_DISABLED).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            if flag.is_some() {
                errln!("note: {SDK_DISABLED}=true; --otlp-endpoint is ignored");
            }
            return None;
        }
        let off = |name: &str| get(name).is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
        let pick = |signal: &str, exporter: &str| -> Option<String> {
            if off(exporter) {
                return None;
            }
            flag.map(str::to_owned)
                .or_else(|| get(signal))
                .or_else(|| get(ENDPOINT))
        };
        let endpoints = Endpoints {
            traces: pick(TRACES_ENDPOINT, TRACES_EXPORTER),
            metrics: pick(METRICS_ENDPOINT, METRICS_EXPORTER),
        };
        (endpoints.traces.is_some() || endpoints.metrics.is_some()).then_some(endpoints)
    }
}

/// Checks that `endpoint` is an `http://` or `https://` URL with a host.
fn check_endpoint(endpoint: &str) -> Result<()> {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') => Ok(()),
        _ => bail!(
            "OTLP endpoint `{endpoint}` is not an http:// or https:// URL (e.g. http://localhost:4317)"
        ),
    }
}

/// Running exporters; flush them with [`Telemetry::shutdown`].
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
    endpoints: Endpoints,
}

impl Telemetry {
    /// Starts export when it is configured. Must run inside a Tokio runtime
    /// (the gRPC channel spawns onto it). `Ok(None)` when export is off.
    pub fn start(flag: Option<&str>) -> Result<Option<Telemetry>> {
        let Some(endpoints) = Endpoints::resolve(flag, |name| std::env::var(name).ok()) else {
            return Ok(None);
        };
        bdk_models::net::install_crypto_provider();
        let mut resource = Resource::builder();
        if std::env::var_os(SERVICE_NAME).is_none()
            && !std::env::var("OTEL_RESOURCE_ATTRIBUTES")
                .unwrap_or_default()
                .contains("service.name=")
        {
            resource = resource.with_service_name("bdk");
        }
        let resource = resource
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let tracer = match &endpoints.traces {
            None => None,
            Some(endpoint) => {
                check_endpoint(endpoint)?;
                let mut builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint.clone());
                if endpoint.starts_with("https://") {
                    builder = builder.with_tls_config(tls());
                }
                let exporter = builder
                    .build()
                    .with_context(|| format!("failed to set up trace export to {endpoint}"))?;
                Some(
                    SdkTracerProvider::builder()
                        .with_batch_exporter(exporter)
                        .with_resource(resource.clone())
                        .build(),
                )
            }
        };
        let meter = match &endpoints.metrics {
            None => None,
            Some(endpoint) => {
                check_endpoint(endpoint)?;
                let mut builder = opentelemetry_otlp::MetricExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint.clone());
                if endpoint.starts_with("https://") {
                    builder = builder.with_tls_config(tls());
                }
                let exporter = builder
                    .build()
                    .with_context(|| format!("failed to set up metric export to {endpoint}"))?;
                Some(
                    SdkMeterProvider::builder()
                        .with_periodic_exporter(exporter)
                        .with_resource(resource)
                        .build(),
                )
            }
        };
        Ok(Some(Telemetry {
            tracer,
            meter,
            endpoints,
        }))
    }

    /// The `tracing` layers that feed the exporters, each listening only to
    /// the runtime's [`TRACE_TARGET`] spans.
    pub fn layers<S>(&self) -> Vec<Box<dyn Layer<S> + Send + Sync>>
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let target = || Targets::new().with_target(TRACE_TARGET, Level::INFO);
        let mut layers: Vec<Box<dyn Layer<S> + Send + Sync>> = Vec::new();
        if let Some(provider) = &self.tracer {
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("bdk"))
                .with_location(false)
                .with_threads(false)
                .with_tracked_inactivity(false)
                .with_filter(target());
            layers.push(Box::new(layer));
        }
        if let Some(provider) = &self.meter {
            layers.push(Box::new(
                MetricsLayer::new(&provider.meter("bdk")).with_filter(target()),
            ));
        }
        layers
    }

    /// Exports what is still buffered and stops the exporters. Call it
    /// outside `block_on` while the runtime is still alive: the export runs
    /// on the runtime's workers while this thread waits.
    pub fn shutdown(self) {
        let to = |endpoint: &Option<String>| endpoint.clone().unwrap_or_default();
        if let Some(provider) = self.tracer
            && let Err(e) = provider.shutdown()
        {
            errln!(
                "warning: the last traces may not have reached {} ({e}); is the collector up?",
                to(&self.endpoints.traces)
            );
        }
        if let Some(provider) = self.meter
            && let Err(e) = provider.shutdown()
        {
            errln!(
                "warning: the last metrics did not reach {} ({e}); is the collector up?",
                to(&self.endpoints.metrics)
            );
        }
    }
}

fn tls() -> opentelemetry_otlp::tonic_types::transport::ClientTlsConfig {
    opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new().with_native_roots()
}

/// The instruments fed from closed spans. Names and attributes are listed in
/// `docs/observability.md`.
struct Instruments {
    turns: Counter<u64>,
    turn_duration: Histogram<f64>,
    tool_calls: Counter<u64>,
    tool_call_duration: Histogram<f64>,
    operation_duration: Histogram<f64>,
    token_usage: Histogram<u64>,
    tokens: Counter<u64>,
    errors: Counter<u64>,
}

/// Turns each closed `bdk.turn`, `bdk.step` and `bdk.tool_call` span into
/// metric measurements: its duration and the attributes recorded on it.
pub struct MetricsLayer {
    instruments: Instruments,
}

impl MetricsLayer {
    /// Creates the instruments on `meter`.
    pub fn new(meter: &Meter) -> Self {
        let seconds = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build()
        };
        let instruments = Instruments {
            turns: meter
                .u64_counter("bdk.turns")
                .with_unit("{turn}")
                .with_description("Turns that ended, by status")
                .build(),
            turn_duration: seconds("bdk.turn.duration", "Turn duration, from start to end"),
            tool_calls: meter
                .u64_counter("bdk.tool_calls")
                .with_unit("{call}")
                .with_description("Tool calls made by turns, by tool and status")
                .build(),
            tool_call_duration: seconds("bdk.tool_call.duration", "Tool call duration"),
            operation_duration: seconds(
                "gen_ai.client.operation.duration",
                "Model step duration (one streamed model call)",
            ),
            token_usage: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Tokens used per model step, by token type")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            tokens: meter
                .u64_counter("bdk.tokens")
                .with_unit("{token}")
                .with_description("Tokens used by model steps, by token type")
                .build(),
            errors: meter
                .u64_counter("bdk.errors")
                .with_unit("{error}")
                .with_description("Failed turns, model steps and tool calls")
                .build(),
        };
        MetricsLayer { instruments }
    }

    fn close(&self, name: &str, span: SpanFacts) {
        let seconds = span.started.elapsed().as_secs_f64();
        let f = span.fields;
        let i = &self.instruments;
        let error = |source: &'static str, error_type: &str| {
            i.errors.add(
                1,
                &[
                    KeyValue::new("bdk.error.source", source),
                    KeyValue::new("error.type", error_type.to_owned()),
                ],
            );
        };
        match name {
            "bdk.turn" => {
                let status = f.turn_status.unwrap_or_else(|| "failed".to_owned());
                let mut attrs = vec![KeyValue::new("bdk.turn.status", status)];
                if let Some(agent) = f.agent {
                    attrs.push(KeyValue::new("gen_ai.agent.name", agent));
                }
                i.turns.add(1, &attrs);
                i.turn_duration.record(seconds, &attrs);
                if let Some(e) = &f.error_type {
                    error("turn", e);
                }
            }
            "bdk.step" => {
                let mut attrs = vec![KeyValue::new("gen_ai.operation.name", "chat")];
                if let Some(p) = f.provider {
                    attrs.push(KeyValue::new("gen_ai.provider.name", p));
                }
                if let Some(m) = f.request_model {
                    attrs.push(KeyValue::new("gen_ai.request.model", m));
                }
                let mut timed = attrs.clone();
                if let Some(e) = &f.error_type {
                    timed.push(KeyValue::new("error.type", e.clone()));
                    error("model", e);
                }
                i.operation_duration.record(seconds, &timed);
                for (kind, count) in [("input", f.input_tokens), ("output", f.output_tokens)] {
                    let Some(count) = count else { continue };
                    let mut attrs = attrs.clone();
                    attrs.push(KeyValue::new("gen_ai.token.type", kind));
                    i.token_usage.record(count, &attrs);
                    i.tokens.add(count, &attrs);
                }
            }
            "bdk.tool_call" => {
                let status = f.tool_status.unwrap_or_else(|| "error".to_owned());
                let mut attrs = vec![KeyValue::new("bdk.tool.status", status)];
                if let Some(tool) = f.tool {
                    attrs.push(KeyValue::new("gen_ai.tool.name", tool));
                }
                i.tool_calls.add(1, &attrs);
                i.tool_call_duration.record(seconds, &attrs);
                if let Some(e) = &f.error_type {
                    error("tool", e);
                }
            }
            _ => {}
        }
    }
}

/// What the metrics layer keeps about an open span.
struct SpanFacts {
    started: Instant,
    fields: Fields,
}

/// The span fields the metrics are cut by.
#[derive(Default)]
struct Fields {
    agent: Option<String>,
    provider: Option<String>,
    request_model: Option<String>,
    tool: Option<String>,
    turn_status: Option<String>,
    tool_status: Option<String>,
    error_type: Option<String>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

impl Fields {
    fn slot(&mut self, field: &Field) -> Option<&mut Option<String>> {
        Some(match field.name() {
            "gen_ai.agent.name" => &mut self.agent,
            "gen_ai.provider.name" => &mut self.provider,
            "gen_ai.request.model" => &mut self.request_model,
            "gen_ai.tool.name" => &mut self.tool,
            "bdk.turn.status" => &mut self.turn_status,
            "bdk.tool.status" => &mut self.tool_status,
            "error.type" => &mut self.error_type,
            _ => return None,
        })
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if let Some(slot) = self.slot(field) {
            *slot = Some(value.to_owned());
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "gen_ai.usage.input_tokens" => self.input_tokens = Some(value),
            "gen_ai.usage.output_tokens" => self.output_tokens = Some(value),
            _ => {}
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if let Ok(v) = u64::try_from(value) {
            self.record_u64(field, v);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // `%value` fields arrive here, formatted through Display.
        if let Some(slot) = self.slot(field) {
            *slot = Some(format!("{value:?}"));
        }
    }
}

impl<S> Layer<S> for MetricsLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        span.extensions_mut().insert(SpanFacts {
            started: Instant::now(),
            fields,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(facts) = span.extensions_mut().get_mut::<SpanFacts>() {
            values.record(&mut facts.fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let facts = span.extensions_mut().remove::<SpanFacts>();
        if let Some(facts) = facts {
            self.close(span.name(), facts);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn export_is_off_unless_configured() {
        assert_eq!(Endpoints::resolve(None, env(&[])), None);
        assert_eq!(Endpoints::resolve(None, env(&[(ENDPOINT, " ")])), None);
    }

    #[test]
    fn the_flag_wins_over_every_variable() {
        let e = Endpoints::resolve(
            Some("http://flag:4317"),
            env(&[
                (ENDPOINT, "http://env:4317"),
                (TRACES_ENDPOINT, "http://t:4317"),
            ]),
        )
        .unwrap();
        assert_eq!(e.traces.as_deref(), Some("http://flag:4317"));
        assert_eq!(e.metrics.as_deref(), Some("http://flag:4317"));
    }

    #[test]
    fn signal_variables_win_over_the_shared_one() {
        let e = Endpoints::resolve(
            None,
            env(&[
                (ENDPOINT, "http://env:4317"),
                (METRICS_ENDPOINT, "http://m:4317"),
            ]),
        )
        .unwrap();
        assert_eq!(e.traces.as_deref(), Some("http://env:4317"));
        assert_eq!(e.metrics.as_deref(), Some("http://m:4317"));
        // Only one signal configured: only that one is exported.
        let e = Endpoints::resolve(None, env(&[(TRACES_ENDPOINT, "http://t:4317")])).unwrap();
        assert_eq!(e.traces.as_deref(), Some("http://t:4317"));
        assert_eq!(e.metrics, None);
    }

    #[test]
    fn sdk_disabled_and_none_exporters_turn_export_off() {
        assert_eq!(
            Endpoints::resolve(Some("http://flag:4317"), env(&[(SDK_DISABLED, "TRUE")])),
            None
        );
        let e = Endpoints::resolve(
            Some("http://flag:4317"),
            env(&[(SDK_DISABLED, "false"), (METRICS_EXPORTER, "none")]),
        )
        .unwrap();
        assert_eq!(e.metrics, None);
        assert!(e.traces.is_some());
        assert_eq!(
            Endpoints::resolve(
                Some("http://flag:4317"),
                env(&[(METRICS_EXPORTER, "none"), (TRACES_EXPORTER, "none")])
            ),
            None
        );
    }

    #[test]
    fn endpoints_must_be_http_urls() {
        check_endpoint("http://127.0.0.1:4317").unwrap();
        check_endpoint("https://otel.example.com").unwrap();
        for bad in [
            "",
            "localhost:4317",
            "grpc://x:1",
            "http://",
            "http:///x",
            "ftp://x",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
    }
}
