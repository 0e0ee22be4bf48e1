#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The scripted model: rule selection, templating, streaming shape, usage,
//! load-time errors, cancellation, and the weather example's rules file.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bdk_events::Usage;
use bdk_models::scripted::{RulesFile, ScriptedError, ScriptedModel};
use bdk_models::{Message, Model, ModelError, ModelEvent, ModelRequest, StopReason, ToolCall};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const ORIGIN: &str = "agent/scripted.toml";

fn model(text: &str) -> ScriptedModel {
    let rules = RulesFile::parse(text, Path::new(ORIGIN))
        .unwrap_or_else(|e| panic!("rules should parse: {e}"));
    ScriptedModel::from_rules(rules, "scripted/default")
}

fn parse_err(text: &str) -> ScriptedError {
    match RulesFile::parse(text, Path::new(ORIGIN)) {
        Ok(rules) => panic!("expected a parse error, got {rules:?}"),
        Err(e) => e,
    }
}

fn user(text: &str) -> Message {
    Message::User {
        text: text.to_owned(),
    }
}

fn assistant_calling(name: &str, input: Value) -> Message {
    Message::Assistant {
        text: String::new(),
        tool_calls: vec![ToolCall {
            id: "call_1".to_owned(),
            name: name.to_owned(),
            input,
        }],
    }
}

fn tool_result(name: &str, content: &str) -> Message {
    Message::Tool {
        call_id: "call_1".to_owned(),
        name: name.to_owned(),
        content: content.to_owned(),
        is_error: false,
        images: Vec::new(),
    }
}

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        model: "default".to_owned(),
        system: String::new(),
        messages,
        tools: Default::default(),
        effort: None,
        tool_choice: None,
        max_tokens: None,
    }
}

async fn run(model: &ScriptedModel, req: ModelRequest) -> Vec<ModelEvent> {
    let stream = model
        .step(req, CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("step failed: {e}"));
    let results: Vec<Result<ModelEvent, ModelError>> =
        tokio::time::timeout(Duration::from_secs(10), stream.collect())
            .await
            .expect("the stream did not end within 10 s");
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("stream error: {e}")))
        .collect()
}

async fn step_error(model: &ScriptedModel, req: ModelRequest) -> ModelError {
    match model.step(req, CancellationToken::new()).await {
        Ok(_) => panic!("expected the step to fail"),
        Err(e) => e,
    }
}

fn text_of(events: &[ModelEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn calls_of(events: &[ModelEvent]) -> Vec<ToolCall> {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCall(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

fn usage_of(events: &[ModelEvent]) -> Usage {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            ModelEvent::Usage(u) => Some(*u),
            _ => None,
        })
        .expect("a usage event")
}

const PRECEDENCE: &str = r#"
[[rules]]
reply = "fallback one"

[[rules]]
tool_result = "get_weather"
reply = "weather result"

[[rules]]
user_contains = "WEATHER"
reply = "weather question"

[[rules]]
user_regex = "(?i)weather|forecast"
reply = "second user rule"

[[rules]]
reply = "fallback two"
"#;

#[tokio::test]
async fn user_rules_match_in_file_order() {
    let m = model(PRECEDENCE);
    let events = run(&m, request(vec![user("What's the weather like?")])).await;
    assert_eq!(
        text_of(&events),
        "weather question",
        "user_contains is case-insensitive and comes first"
    );
    let events = run(&m, request(vec![user("forecast please")])).await;
    assert_eq!(text_of(&events), "second user rule");
}

#[tokio::test]
async fn tool_result_rules_win_over_user_rules() {
    let m = model(PRECEDENCE);
    let req = request(vec![
        user("What's the weather like?"),
        assistant_calling("get_weather", json!({})),
        tool_result("get_weather", "{}"),
    ]);
    assert_eq!(text_of(&run(&m, req).await), "weather result");
}

#[tokio::test]
async fn fallback_answers_what_nothing_else_matches() {
    let m = model(PRECEDENCE);
    assert_eq!(
        text_of(&run(&m, request(vec![user("hello")])).await),
        "fallback one"
    );
    let req = request(vec![
        user("What's the weather like?"),
        assistant_calling("lookup", json!({})),
        tool_result("lookup", "{}"),
    ]);
    assert_eq!(
        text_of(&run(&m, req).await),
        "fallback one",
        "a result of a tool without a tool_result rule goes to the fallback, not to user rules"
    );
}

#[tokio::test]
async fn no_match_fails_the_step_with_the_fix() {
    let m = model(
        r#"
[[rules]]
user_contains = "weather"
tool_calls = [{ name = "get_weather" }]
"#,
    );
    let long = format!("tell me a joke {}", "x".repeat(500));
    let err = step_error(&m, request(vec![user(&long)])).await;
    let ModelError::Provider(message) = err else {
        panic!("expected a provider error, got {err:?}");
    };
    assert!(message.contains("no scripted rule matched"), "{message}");
    assert!(message.contains("tell me a joke"), "{message}");
    assert!(
        !message.contains(&"x".repeat(200)),
        "the quote is truncated: {message}"
    );
    assert!(message.contains(ORIGIN), "{message}");
    assert!(message.contains("fallback"), "{message}");

    let req = request(vec![
        user("weather?"),
        assistant_calling("get_weather", json!({})),
        tool_result("get_weather", "sunny"),
    ]);
    let ModelError::Provider(message) = step_error(&m, req).await else {
        panic!("expected a provider error");
    };
    assert!(
        message.contains("tool_result = \"get_weather\""),
        "{message}"
    );
    assert!(
        message.contains("sunny") && message.contains(ORIGIN),
        "{message}"
    );
}

#[tokio::test]
async fn regex_captures_fill_tool_inputs() {
    let m = model(
        r#"
[[rules]]
user_regex = "(?i)weather in (?P<city>[A-Za-z .'-]+?)[?.!]*$"
reasoning = "The user wants the weather in {{ captures.city }}."
tool_calls = [
  { name = "get_weather", input = { city = "{{ captures.city }}", days = 2, detail = { units = "metric", tags = ["{{ captures.city | lower }}", true] } } },
  { name = "log", input = { note = "step {{ step }}" } },
]
"#,
    );
    let events = run(&m, request(vec![user("What's the weather in New York?")])).await;
    let calls = calls_of(&events);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(
        calls[0].input,
        json!({"city": "New York", "days": 2, "detail": {"units": "metric", "tags": ["new york", true]}})
    );
    assert_eq!(calls[1].input, json!({"note": "step 1"}));
    assert!(
        calls[0].id.starts_with("call_") && calls[1].id.starts_with("call_"),
        "{calls:?}"
    );
    assert_ne!(calls[0].id, calls[1].id);
    assert_eq!(
        events.last(),
        Some(&ModelEvent::Stop(StopReason::ToolCalls))
    );
    assert_eq!(
        events.first(),
        Some(&ModelEvent::ReasoningDelta(
            "The user wants the weather in New York.".to_owned()
        ))
    );
}

#[tokio::test]
async fn replies_template_from_a_json_tool_result() {
    let m = model(
        r#"
[[rules]]
tool_result = "get_weather"
reply = "{{ result.city }}: {{ result.temp_c }}°C, {{ result.conditions[0] }} (from {{ tool }}, step {{ step }}, asked: {{ user }}){{ result.missing.deeper }}"
"#,
    );
    let req = request(vec![
        user("weather in Oslo"),
        assistant_calling("get_weather", json!({"city": "Oslo"})),
        tool_result(
            "get_weather",
            r#"{"city":"Oslo","temp_c":-3,"conditions":["snow","wind"]}"#,
        ),
    ]);
    let events = run(&m, req).await;
    assert_eq!(
        text_of(&events),
        "Oslo: -3°C, snow (from get_weather, step 2, asked: weather in Oslo)"
    );
    assert_eq!(events.last(), Some(&ModelEvent::Stop(StopReason::Stop)));
    assert!(calls_of(&events).is_empty());
}

#[tokio::test]
async fn replies_template_from_a_plain_string_result() {
    let m = model(
        r#"
[[rules]]
tool_result = "lookup"
reply = "[{{ result }}] [{{ result_text }}] [{{ result.field }}]"
"#,
    );
    let req = request(vec![
        user("look it up"),
        assistant_calling("lookup", json!({})),
        tool_result("lookup", "not json: sunny"),
    ]);
    assert_eq!(
        text_of(&run(&m, req).await),
        "[not json: sunny] [not json: sunny] []"
    );
}

#[tokio::test]
async fn step_counts_assistant_messages_since_the_last_user_message() {
    let m = model(
        r#"
[[rules]]
reply = "step {{ step }}"
"#,
    );
    let req = request(vec![
        user("first"),
        assistant_calling("a", json!({})),
        tool_result("a", "1"),
        Message::Assistant {
            text: "done".to_owned(),
            tool_calls: vec![],
        },
        user("second"),
        assistant_calling("a", json!({})),
        tool_result("a", "1"),
        assistant_calling("a", json!({})),
        tool_result("a", "1"),
    ]);
    assert_eq!(text_of(&run(&m, req).await), "step 3");
}

#[tokio::test]
async fn text_and_reasoning_are_chunked_in_order() {
    let m = model(
        r#"
[[rules]]
user_contains = "go"
reasoning = "thinking"
reply = "abcdefghij"
chunk_chars = 4
tool_calls = [{ name = "t" }]
"#,
    );
    let events = run(&m, request(vec![user("go")])).await;
    let kinds: Vec<String> = events
        .iter()
        .map(|e| match e {
            ModelEvent::ReasoningDelta(t) => format!("reasoning:{t}"),
            ModelEvent::TextDelta(t) => format!("text:{t}"),
            ModelEvent::ToolCall(c) => format!("call:{}:{}", c.name, c.input),
            ModelEvent::Usage(_) => "usage".to_owned(),
            ModelEvent::Stop(s) => format!("stop:{}", s.as_str()),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "reasoning:thin",
            "reasoning:king",
            "text:abcd",
            "text:efgh",
            "text:ij",
            "call:t:{}",
            "usage",
            "stop:tool_calls"
        ]
    );
}

#[tokio::test]
async fn unchunked_text_is_one_delta() {
    let m = model("[[rules]]\nreply = \"\"\"line one\nline two\n\"\"\"\n");
    let events = run(&m, request(vec![user("hi")])).await;
    assert_eq!(
        events[0],
        ModelEvent::TextDelta("line one\nline two\n".to_owned())
    );
    assert_eq!(events.len(), 3, "{events:?}");
}

#[tokio::test]
async fn usage_is_estimated_when_not_declared() {
    let m = model(
        r#"
[[rules]]
reply = "hey"
tool_calls = [{ name = "t", input = { a = "b" } }]
"#,
    );
    let mut req = request(vec![user("hello")]);
    req.system = "abcdefgh".to_owned();
    let usage = usage_of(&run(&m, req).await);
    // Input: 8 system + 5 user chars = 13 -> 4 tokens. Output: 3 reply chars
    // + 9 for `{"a":"b"}` = 12 -> 3 tokens.
    assert_eq!(
        usage,
        Usage {
            input_tokens: 4,
            output_tokens: 3,
            cache_read_tokens: 0,
            cache_write_tokens: 0
        }
    );
}

#[tokio::test]
async fn declared_usage_is_reported_and_missing_fields_estimated() {
    let m = model(
        r#"
[[rules]]
user_contains = "full"
reply = "ok"
usage = { input_tokens = 120, output_tokens = 30, cache_read_tokens = 7, cache_write_tokens = 2 }

[[rules]]
user_contains = "part"
reply = "ok"
usage = { output_tokens = 30 }
"#,
    );
    let usage = usage_of(&run(&m, request(vec![user("full")])).await);
    assert_eq!(
        usage,
        Usage {
            input_tokens: 120,
            output_tokens: 30,
            cache_read_tokens: 7,
            cache_write_tokens: 2
        }
    );
    let usage = usage_of(&run(&m, request(vec![user("partial")])).await);
    assert_eq!(
        usage,
        Usage {
            input_tokens: 2,
            output_tokens: 30,
            cache_read_tokens: 0,
            cache_write_tokens: 0
        }
    );
}

#[tokio::test]
async fn model_id_is_the_given_one() {
    let m = model("[[rules]]\nreply = \"x\"\n");
    assert_eq!(m.id(), "scripted/default");
}

#[tokio::test]
async fn cancellation_during_a_long_delay_ends_promptly() {
    let m = model("[[rules]]\nreply = \"late\"\ndelay_ms = 600000\n");
    let cancel = CancellationToken::new();
    let mut stream = m
        .step(request(vec![user("hi")]), cancel.clone())
        .await
        .unwrap();
    let started = Instant::now();
    let consumer = tokio::spawn(async move {
        let first = stream.next().await;
        let after = stream.next().await;
        (first, after)
    });
    // Let the consumer reach the delay (current-thread runtime: it runs until
    // it parks on the timer), then cancel.
    tokio::task::yield_now().await;
    cancel.cancel();
    let (first, after) = tokio::time::timeout(Duration::from_secs(10), consumer)
        .await
        .expect("the stream did not end promptly after cancel")
        .unwrap();
    assert!(
        matches!(first, Some(Err(ModelError::Cancelled))),
        "{first:?}"
    );
    assert!(
        after.is_none(),
        "the stream ends after the cancellation error"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn cancellation_is_checked_between_chunks() {
    let m = model("[[rules]]\nreply = \"abcdef\"\nchunk_chars = 2\n");
    let cancel = CancellationToken::new();
    let mut stream = m
        .step(request(vec![user("hi")]), cancel.clone())
        .await
        .unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        ModelEvent::TextDelta("ab".to_owned())
    );
    cancel.cancel();
    assert!(matches!(
        stream.next().await,
        Some(Err(ModelError::Cancelled))
    ));
    assert!(stream.next().await.is_none());
}

#[tokio::test]
async fn a_short_delay_is_waited_out() {
    let m = model("[[rules]]\nreply = \"later\"\ndelay_ms = 30\n");
    let started = Instant::now();
    let events = run(&m, request(vec![user("hi")])).await;
    assert!(started.elapsed() >= Duration::from_millis(30));
    assert_eq!(text_of(&events), "later");
}

#[test]
fn bad_toml_reports_the_position() {
    let err = parse_err("[[rules]]\nreply = \"ok\"\nuser_contains = \n");
    let ScriptedError::Toml { line, origin, .. } = &err else {
        panic!("expected a TOML error, got {err:?}");
    };
    assert_eq!(*line, 3, "{err}");
    assert_eq!(origin, &PathBuf::from(ORIGIN));
    assert!(
        err.to_string()
            .starts_with(&format!("{ORIGIN}: invalid TOML at line 3")),
        "{err}"
    );
}

#[test]
fn unknown_top_level_keys_are_rejected() {
    let err = parse_err("[[rule]]\nreply = \"ok\"\n");
    assert!(
        matches!(err, ScriptedError::Toml { line: 1, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("rule"), "{err}");
}

#[test]
fn unknown_rule_keys_name_the_rule() {
    let err = parse_err(
        "[[rules]]\nreply = \"ok\"\n\n[[rules]]\nuser_contains = \"x\"\nrepyl = \"typo\"\n",
    );
    let ScriptedError::InvalidRule {
        rule,
        line,
        message,
        ..
    } = &err
    else {
        panic!("expected an invalid rule error, got {err:?}");
    };
    assert_eq!((*rule, *line), (2, 4), "{err}");
    assert!(message.contains("repyl"), "{err}");
    assert!(err.to_string().contains("rule 2 (line 4)"), "{err}");
}

#[test]
fn unknown_keys_in_tool_calls_and_usage_are_rejected() {
    let err = parse_err("[[rules]]\ntool_calls = [{ name = \"t\", args = {} }]\n");
    assert!(
        matches!(&err, ScriptedError::InvalidRule { rule: 1, message, .. } if message.contains("args")),
        "{err:?}"
    );
    let err = parse_err("[[rules]]\nreply = \"x\"\nusage = { input = 3 }\n");
    assert!(
        matches!(&err, ScriptedError::InvalidRule { rule: 1, message, .. } if message.contains("input")),
        "{err:?}"
    );
}

#[test]
fn wrong_value_types_name_the_rule() {
    let err = parse_err("[[rules]]\nreply = 5\n");
    assert!(
        matches!(
            err,
            ScriptedError::InvalidRule {
                rule: 1,
                line: 1,
                ..
            }
        ),
        "{err:?}"
    );
    let err = parse_err("[[rules]]\nreply = \"x\"\nchunk_chars = 0\n");
    assert!(
        matches!(&err, ScriptedError::InvalidRule { message, .. } if message.contains("chunk_chars")),
        "{err:?}"
    );
    let err = parse_err("[[rules]]\ntool_calls = [{ name = \"t\", input = \"city\" }]\n");
    assert!(
        matches!(&err, ScriptedError::InvalidRule { message, .. } if message.contains("tool_calls[0].input")),
        "{err:?}"
    );
    let err = parse_err("[[rules]]\nuser_contains = \"\"\nreply = \"x\"\n");
    assert!(
        matches!(&err, ScriptedError::InvalidRule { message, .. } if message.contains("fallback")),
        "{err:?}"
    );
}

#[test]
fn more_than_one_matcher_is_rejected() {
    let err = parse_err(
        "[[rules]]\nreply = \"a\"\n\n[[rules]]\nuser_contains = \"x\"\ntool_result = \"t\"\nreply = \"b\"\n",
    );
    let ScriptedError::MultipleMatchers { rule, matchers, .. } = &err else {
        panic!("expected a multiple matchers error, got {err:?}");
    };
    assert_eq!(*rule, 2);
    assert_eq!(
        matchers,
        &vec!["user_contains".to_owned(), "tool_result".to_owned()]
    );
    assert!(err.to_string().contains("rule 2"), "{err}");
}

#[test]
fn bad_regexes_are_rejected() {
    let err = parse_err("[[rules]]\nuser_regex = \"(unclosed\"\nreply = \"x\"\n");
    let ScriptedError::Regex { rule, message, .. } = &err else {
        panic!("expected a regex error, got {err:?}");
    };
    assert_eq!(*rule, 1);
    assert!(!message.contains('\n'), "{message}");
    assert!(err.to_string().contains("invalid user_regex"), "{err}");
}

#[test]
fn template_syntax_errors_name_the_field() {
    let err = parse_err("[[rules]]\nreply = \"{{ user \"\n");
    assert!(
        matches!(&err, ScriptedError::Template { rule: 1, field, .. } if field == "reply"),
        "{err:?}"
    );
    let err = parse_err("[[rules]]\nreasoning = \"{% if %}\"\nreply = \"x\"\n");
    assert!(
        matches!(&err, ScriptedError::Template { field, .. } if field == "reasoning"),
        "{err:?}"
    );
    let err = parse_err(
        "[[rules]]\nreply = \"ok\"\n[[rules]]\nuser_contains = \"w\"\ntool_calls = [{ name = \"t\", input = { a = { b = [\"ok\", \"{{ x\"] } } }]\n",
    );
    let ScriptedError::Template { rule, field, .. } = &err else {
        panic!("expected a template error, got {err:?}");
    };
    assert_eq!(*rule, 2);
    assert_eq!(field, "tool_calls[0].input.a.b[1]");
    assert!(
        err.to_string()
            .contains("template syntax error in tool_calls[0].input.a.b[1]"),
        "{err}"
    );
}

#[test]
fn rules_without_an_answer_are_rejected() {
    let err = parse_err(
        "[[rules]]\nreply = \"a\"\n\n[[rules]]\nuser_contains = \"x\"\nreasoning = \"only thinking\"\n",
    );
    assert!(
        matches!(
            err,
            ScriptedError::NoAnswer {
                rule: 2,
                line: 4,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("neither reply nor tool_calls"),
        "{err}"
    );
}

#[test]
fn a_file_without_rules_is_rejected() {
    assert!(matches!(parse_err(""), ScriptedError::NoRules { .. }));
    assert!(matches!(
        parse_err("rules = []\n"),
        ScriptedError::NoRules { .. }
    ));
}

#[tokio::test]
async fn load_reads_the_file_and_names_it_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scripted.toml");
    let err = ScriptedModel::load(&path, "scripted/default").unwrap_err();
    assert!(
        matches!(&err, ModelError::Config(m) if m.contains("scripted.toml")),
        "{err:?}"
    );

    tokio::fs::write(&path, "[[rules]]\nreply = \"{{ \"\n")
        .await
        .unwrap();
    let err = ScriptedModel::load(&path, "scripted/default").unwrap_err();
    let ModelError::Config(message) = &err else {
        panic!("expected a config error, got {err:?}");
    };
    assert!(
        message.contains(&path.display().to_string()) && message.contains("template syntax error"),
        "{message}"
    );

    tokio::fs::write(&path, "[[rules]]\nreply = \"hello {{ user }}\"\n")
        .await
        .unwrap();
    let m = ScriptedModel::load(&path, "scripted/other").unwrap();
    assert_eq!(m.id(), "scripted/other");
    assert_eq!(m.rules().origin(), path.as_path());
    assert_eq!(
        text_of(&run(&m, request(vec![user("you")])).await),
        "hello you"
    );
}

#[tokio::test]
async fn the_weather_example_rules_parse() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/weather/agent/scripted.toml");
    let text = tokio::fs::read_to_string(&path)
        .await
        .unwrap_or_else(|e| panic!("{} should exist: {e}", path.display()));
    let rules = RulesFile::parse(&text, &path).unwrap_or_else(|e| panic!("{e}"));
    assert!(!rules.is_empty());
    // The README's first exchange: a weather question becomes a get_weather call.
    let m = ScriptedModel::from_rules(rules, "scripted/default");
    let calls = calls_of(&run(&m, request(vec![user("What's the weather in Paris?")])).await);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(calls[0].input, json!({"city": "Paris"}));
}
