#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Holds the generated OpenAPI document (`bdk_http::openapi::document`) to
//! what the crate serves, and to the shape OpenAPI 3.1 requires.
//!
//! - The app is served on 127.0.0.1:0, in both layouts, and every
//!   documented operation is requested: none may fall through to the
//!   unknown-route 404 or the wrong-method 405, every status must be
//!   documented for its operation, and every JSON body must match the
//!   documented schema. (The other direction, every served route being
//!   documented, holds by construction: the document is generated from the
//!   routers the app mounts.)
//! - The error-code enum must be exactly the codes of `ErrorCode`, each
//!   under its status, and every code must appear on some operation.
//! - The document is checked for the structure OpenAPI 3.1 requires, with
//!   every `$ref` resolving.
//! - The whole document is a reviewed snapshot
//!   (`tests/snapshots/openapi__document.snap`): a change to any route, type
//!   or description shows up there, and the test fails until the new
//!   snapshot is accepted (`cargo insta review`, or
//!   `INSTA_UPDATE=always` and a look at the diff).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bdk_core::discover;
use bdk_core::host::Host;
use bdk_http::{Config, Mount};
use bdk_store::{FsStore, Store};
use serde_json::{Value, json};
use tempfile::TempDir;

const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

// ---------------------------------------------------------------------------
// The document as a whole
// ---------------------------------------------------------------------------

#[test]
fn the_document_is_the_reviewed_snapshot() {
    insta::assert_json_snapshot!("document", bdk_http::openapi::document());
}

// ---------------------------------------------------------------------------
// Error codes
// ---------------------------------------------------------------------------

/// Every (code, status) pair the document's error answers list.
fn documented_codes(doc: &Value) -> BTreeMap<String, BTreeSet<u16>> {
    let mut codes: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
    for item in doc["paths"].as_object().unwrap().values() {
        for (method, op) in item.as_object().unwrap() {
            if !METHODS.contains(&method.as_str()) {
                continue;
            }
            for (status, response) in op["responses"].as_object().unwrap() {
                let schema = &response["content"]["application/json"]["schema"];
                let Some(all) = schema["allOf"].as_array() else {
                    continue;
                };
                if all[0]["$ref"] != "#/components/schemas/Error" {
                    continue;
                }
                for code in all[1]["properties"]["error"]["enum"].as_array().unwrap() {
                    codes
                        .entry(code.as_str().unwrap().to_owned())
                        .or_default()
                        .insert(status.parse().unwrap());
                }
            }
        }
    }
    codes
}

#[test]
fn error_codes_match_the_error_code_table() {
    let doc = bdk_http::openapi::document();
    let table: BTreeMap<String, u16> = bdk_http::ErrorCode::ALL
        .iter()
        .map(|c| (c.as_str().to_owned(), c.status().as_u16()))
        .collect();
    assert!(table.contains_key("invalid_session_id"), "{table:?}");
    assert!(table.contains_key("session_not_found"), "{table:?}");

    let enum_codes: BTreeSet<String> = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    let table_codes: BTreeSet<String> = table.keys().cloned().collect();
    assert_eq!(
        enum_codes, table_codes,
        "the ErrorCode schema differs from the ErrorCode table"
    );

    let documented = documented_codes(&doc);
    for (code, statuses) in &documented {
        assert_eq!(
            statuses,
            &BTreeSet::from([table[code]]),
            "`{code}`: documented statuses differ from the table"
        );
    }
    // Every code appears on at least one operation.
    for code in &enum_codes {
        assert!(documented.contains_key(code), "`{code}` is on no operation");
    }
}

// ---------------------------------------------------------------------------
// Structure
// ---------------------------------------------------------------------------

fn walk_refs(value: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "$ref" {
                    out.push((at.to_owned(), v.as_str().unwrap().to_owned()));
                } else {
                    walk_refs(v, &format!("{at}/{k}"), out);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                walk_refs(v, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn template_params(path: &str) -> BTreeSet<String> {
    path.split('{')
        .skip(1)
        .map(|rest| rest.split('}').next().unwrap().to_owned())
        .collect()
}

#[test]
fn the_document_is_structurally_openapi_3_1() {
    let doc = bdk_http::openapi::document();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."));
    assert!(doc["info"]["title"].is_string());
    assert!(doc["info"]["version"].is_string());
    assert!(
        doc.get("servers").is_none(),
        "the generic document names no server"
    );
    let components = doc["components"].as_object().expect("components");
    let schemes = components["securitySchemes"].as_object().unwrap();
    let tags: BTreeSet<&str> = doc["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();

    // Every $ref resolves inside the document.
    let mut refs = Vec::new();
    walk_refs(&doc, "", &mut refs);
    assert!(refs.len() > 50, "suspiciously few $refs: {}", refs.len());
    for (at, target) in &refs {
        let pointer = target
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{at}: external $ref {target}"));
        assert!(
            doc.pointer(pointer).is_some(),
            "{at}: $ref {target} does not resolve"
        );
    }

    let check_security = |at: &str, security: &Value| {
        for requirement in security.as_array().unwrap() {
            for name in requirement.as_object().unwrap().keys() {
                assert!(
                    schemes.contains_key(name),
                    "{at}: unknown security scheme {name}"
                );
            }
        }
    };
    check_security("(root)", &doc["security"]);

    let mut operation_ids = BTreeSet::new();
    let paths = doc["paths"].as_object().expect("paths");
    assert!(!paths.is_empty());
    for (path, item) in paths {
        assert!(path.starts_with('/'), "{path}");
        let item = item.as_object().unwrap();
        for mount in item["x-bdk-mount"].as_array().unwrap() {
            assert!(
                ["agent", "host", "server"].contains(&mount.as_str().unwrap()),
                "{path}: mount {mount}"
            );
        }
        let mut operations = 0;
        for (key, op) in item {
            if !METHODS.contains(&key.as_str()) {
                assert!(
                    ["summary", "description", "servers", "parameters"].contains(&key.as_str())
                        || key.starts_with("x-"),
                    "{path}: unexpected key {key}"
                );
                continue;
            }
            operations += 1;
            let at = format!("{key} {path}");
            let id = op["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{at}: operationId"));
            assert!(
                operation_ids.insert(id.to_owned()),
                "{at}: duplicate operationId {id}"
            );
            for tag in op["tags"].as_array().unwrap() {
                assert!(
                    tags.contains(tag.as_str().unwrap()),
                    "{at}: undeclared tag {tag}"
                );
            }
            if let Some(security) = op.get("security") {
                check_security(&at, security);
            }
            // Path parameters: exactly the template's, each required.
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            let declared: BTreeSet<String> = params
                .iter()
                .filter(|p| p["in"] == "path")
                .map(|p| {
                    assert_eq!(p["required"], true, "{at}: optional path parameter");
                    p["name"].as_str().unwrap().to_owned()
                })
                .collect();
            assert_eq!(declared, template_params(path), "{at}: path parameters");
            for p in &params {
                assert!(
                    ["path", "query", "header", "cookie"].contains(&p["in"].as_str().unwrap()),
                    "{at}: parameter location"
                );
                assert!(p.get("schema").is_some(), "{at}: parameter without schema");
            }
            if let Some(body) = op.get("requestBody") {
                assert!(
                    body["content"].as_object().is_some_and(|c| !c.is_empty()),
                    "{at}"
                );
            }
            let responses = op["responses"].as_object().unwrap();
            assert!(!responses.is_empty(), "{at}: no responses");
            for (status, response) in responses {
                assert!(
                    status == "default"
                        || (status.len() == 3
                            && status.parse::<u16>().is_ok_and(|s| (100..600).contains(&s))),
                    "{at}: status {status}"
                );
                assert!(
                    response["description"].is_string(),
                    "{at} {status}: description"
                );
            }
        }
        assert!(operations > 0, "{path}: no operations");
    }

    // Every component schema compiles as JSON Schema 2020-12.
    for name in components["schemas"].as_object().unwrap().keys() {
        validator(
            &doc,
            &json!({"$ref": format!("#/components/schemas/{name}")}),
        );
    }
    // The stream's media type is NDJSON.
    let stream = &doc["paths"]["/v1/session/{sessionId}/stream"]["get"]["responses"]["200"];
    assert!(stream["content"]["application/x-ndjson"].is_object());
    // The event vocabulary is the one of bdk-events.
    assert_eq!(
        doc["components"]["schemas"]["EventType"]["enum"],
        json!(bdk_events::EVENT_TYPES)
    );
}

// ---------------------------------------------------------------------------
// Serving
// ---------------------------------------------------------------------------

/// A validator for `schema`, whose `$ref`s point into the document.
fn validator(doc: &Value, schema: &Value) -> jsonschema::Validator {
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"],
        "allOf": [schema],
    });
    jsonschema::validator_for(&root)
        .unwrap_or_else(|e| panic!("schema {schema} does not compile: {e}"))
}

fn assert_valid(doc: &Value, schema: &Value, instance: &Value, at: &str) {
    let v = validator(doc, schema);
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| format!("{}: {e}", e.instance_path().as_str()))
        .collect();
    assert!(
        errors.is_empty(),
        "{at}: body does not match {schema}: {errors:#?}\n{instance}"
    );
}

/// Channel routes of every method, at the channel's root and below it.
const INBOX: &str = r#"
description = "Every method, at / and /hook."
auth = "default"

[[routes]]
method = "GET"
path = "/"
message = "{{ method }} {{ path }}"

[[routes]]
method = "POST"
path = "/"
message = "{{ method }} {{ path }}"

[[routes]]
method = "PUT"
path = "/"
message = "{{ method }} {{ path }}"

[[routes]]
method = "PATCH"
path = "/"
message = "{{ method }} {{ path }}"

[[routes]]
method = "DELETE"
path = "/"
message = "{{ method }} {{ path }}"

[[routes]]
method = "GET"
path = "/hook"
message = "{{ method }} {{ path }}"

[[routes]]
method = "POST"
path = "/hook"
message = "{{ method }} {{ path }}"

[[routes]]
method = "PUT"
path = "/hook"
message = "{{ method }} {{ path }}"

[[routes]]
method = "PATCH"
path = "/hook"
message = "{{ method }} {{ path }}"

[[routes]]
method = "DELETE"
path = "/hook"
message = "{{ method }} {{ path }}"
"#;

/// A scripted test project with native tools and the `inbox` channel.
async fn agent() -> (TempDir, Host, Vec<bdk_core::Diagnostic>) {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (
            "agent/agent.toml",
            "name = \"solo\"\ndescription = \"The OpenAPI test agent.\"\nmodel = \"scripted\"\n",
        ),
        ("agent/instructions.md", "You are a test agent.\n"),
        ("agent/scripted.toml", common::RULES),
        ("agent/channels/inbox.toml", INBOX),
    ];
    bdk_testkit::write_files(dir.path(), &files);
    let d = discover(dir.path());
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let mut builder = Host::builder(d.project.unwrap(), store);
    for t in common::tools() {
        builder = builder.tool(t);
    }
    (dir, builder.build().await.unwrap(), d.diagnostics)
}

fn client() -> reqwest::Client {
    bdk_models::net::install_crypto_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

async fn get_json(http: &reqwest::Client, url: &str) -> (u16, Value) {
    let resp = http.get(url).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

/// The bodies of the router's own fallbacks, found by asking for what
/// cannot exist.
struct Fallbacks {
    not_found: Value,
    method_not_allowed: Value,
}

impl Fallbacks {
    async fn probe(http: &reqwest::Client, agent_base: &str) -> Fallbacks {
        let (status, not_found) = get_json(http, &format!("{agent_base}/v1/no-such-route")).await;
        assert_eq!(status, 404);
        let resp = http
            .delete(format!("{agent_base}/v1/sessions"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 405);
        let method_not_allowed: Value = resp.json().await.unwrap();
        Fallbacks {
            not_found,
            method_not_allowed,
        }
    }

    fn is_fallback(&self, status: u16, body: Option<&Value>) -> bool {
        match (status, body) {
            (404, Some(b)) => *b == self.not_found,
            (405, Some(b)) => *b == self.method_not_allowed,
            _ => false,
        }
    }
}

/// The value a test request puts in a path parameter.
fn param_value(name: &str, path: &str, session: &str) -> String {
    match name {
        "sessionId" => session.to_owned(),
        "callId" => "call_not_parked".to_owned(),
        "name" => "lookup".to_owned(),
        "id" => "art_missing".to_owned(),
        "channel" => "inbox".to_owned(),
        "path" if path.starts_with("/docs/") => "http-api".to_owned(),
        "path" => "hook".to_owned(),
        "file" => "app.js".to_owned(),
        other => panic!("{path}: no test value for the path parameter {other}"),
    }
}

/// A value of a path parameter that names nothing, for the parameters
/// whose operations document that answer.
fn bad_value(name: &str) -> Option<&'static str> {
    match name {
        "sessionId" => Some("not-a-session-id"),
        "name" => Some("no_such_tool"),
        _ => None,
    }
}

/// The body a test request sends, chosen to reach the handler's success path
/// where one exists.
fn request_body(op_id: &str, op: &Value, session: &str) -> Option<Value> {
    let body = op.get("requestBody")?;
    Some(match op_id {
        "sendMessage" => json!({"message": "hello again"}),
        "callTool" => json!({"input": {"city": "Paris"}, "sessionId": session}),
        _ => {
            let example = &body["content"]["application/json"]["example"];
            if example.is_null() {
                json!({"text": "hi"})
            } else {
                example.clone()
            }
        }
    })
}

/// Requests every documented operation under `bases` (mount -> base URL;
/// a mount missing from it is not served in this layout) and checks the
/// answers against the document. Returns how many requests were made.
async fn exercise(
    doc: &Value,
    http: &reqwest::Client,
    bases: &BTreeMap<&str, String>,
    fallbacks: &Fallbacks,
    session: &str,
) -> usize {
    let mut requests = 0;
    let mut seen_urls = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for mount in item["x-bdk-mount"].as_array().unwrap() {
            let Some(base) = bases.get(mount.as_str().unwrap()) else {
                continue;
            };
            for (method, op) in item.as_object().unwrap() {
                if !METHODS.contains(&method.as_str()) {
                    continue;
                }
                let op_id = op["operationId"].as_str().unwrap();
                // Deleting the shared session would leave every later
                // operation with nothing to act on: it gets one of its own.
                let own;
                let session = if op_id == "deleteSession" {
                    own = common::start(http, base, json!({})).await["sessionId"]
                        .as_str()
                        .unwrap()
                        .to_owned();
                    own.as_str()
                } else {
                    session
                };
                let params = template_params(path);
                // Good values, plus one variant per parameter that has a
                // documented "no such thing" answer, so error codes are
                // checked against the operation's list too.
                let mut variants = vec![None];
                variants.extend(
                    params
                        .iter()
                        .filter_map(|p| bad_value(p).map(|v| Some((p.clone(), v)))),
                );
                let url_paths: Vec<String> = variants
                    .iter()
                    .map(|bad| {
                        let mut url_path = path.clone();
                        for name in &params {
                            let value = match bad {
                                Some((n, v)) if n == name => (*v).to_owned(),
                                _ => param_value(name, path, session),
                            };
                            url_path = url_path.replace(&format!("{{{name}}}"), &value);
                        }
                        url_path
                    })
                    .collect();
                // One request as is, plus one per value of each enum query
                // parameter, so every documented representation is seen.
                let mut queries = vec![String::new()];
                for p in op["parameters"].as_array().cloned().unwrap_or_default() {
                    if p["in"] == "query"
                        && let Some(values) = p["schema"]["enum"].as_array()
                    {
                        for v in values {
                            queries.push(format!(
                                "?{}={}",
                                p["name"].as_str().unwrap(),
                                v.as_str().unwrap()
                            ));
                        }
                    }
                }
                let targets = url_paths
                    .iter()
                    .flat_map(|p| queries.iter().map(move |q| format!("{p}{q}")));
                for target in targets {
                    let url = format!("{base}{target}");
                    if !seen_urls.insert((method.clone(), url.clone())) {
                        continue;
                    }
                    let at = format!("{} {url} ({op_id})", method.to_uppercase());
                    let mut req = http.request(method.to_uppercase().parse().unwrap(), &url);
                    if let Some(body) = request_body(op_id, op, session) {
                        req = req.json(&body);
                    }
                    let resp = tokio::time::timeout(common::DEADLINE, req.send())
                        .await
                        .unwrap_or_else(|_| panic!("{at}: no answer"))
                        .unwrap();
                    requests += 1;
                    check_response(doc, op, op_id, &at, resp, fallbacks).await;
                }
            }
        }
    }
    requests
}

async fn check_response(
    doc: &Value,
    op: &Value,
    op_id: &str,
    at: &str,
    resp: reqwest::Response,
    fallbacks: &Fallbacks,
) {
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    let essence = content_type
        .as_deref()
        .map(|c| c.split(';').next().unwrap().trim().to_ascii_lowercase());

    let documented = op["responses"]
        .get(status.to_string())
        .or_else(|| op["responses"].get("default"));

    if op_id == "streamEvents" && status == 200 {
        // The stream never ends by itself: check the head and hang up.
        assert_eq!(essence.as_deref(), Some("application/x-ndjson"), "{at}");
        assert!(documented.is_some());
        return;
    }
    let text = resp.text().await.unwrap();
    let json_body: Option<Value> = if essence.as_deref() == Some("application/json") {
        Some(
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{at}: invalid JSON ({e}): {text}")),
        )
    } else {
        None
    };
    assert!(
        !fallbacks.is_fallback(status, json_body.as_ref()),
        "{at}: the documented operation fell through to the router's {status} fallback"
    );
    let documented = documented
        .unwrap_or_else(|| panic!("{at}: status {status} is not documented; body: {text}"));

    let Some(content) = documented.get("content").and_then(Value::as_object) else {
        assert!(
            text.is_empty(),
            "{at}: {status} documents no body, got {text}"
        );
        return;
    };
    let essence = essence.unwrap_or_else(|| panic!("{at}: no content type"));
    let media = content
        .get(&essence)
        .or_else(|| content.get("*/*"))
        .unwrap_or_else(|| panic!("{at}: content type {essence} is not documented for {status}"));
    match essence.as_str() {
        "application/json" => {
            assert_valid(doc, &media["schema"], json_body.as_ref().unwrap(), at);
        }
        "application/x-ndjson" => {
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            assert!(!lines.is_empty(), "{at}: no events");
            for line in lines {
                let event: Value = serde_json::from_str(line).unwrap();
                assert_valid(doc, &media["schema"], &event, at);
            }
        }
        _ => {}
    }
}

/// Starts a session and waits for its first turn to end.
async fn session(http: &reqwest::Client, agent_base: &str) -> String {
    let started = common::start(
        http,
        agent_base,
        json!({"message": "What is the weather in Paris?"}),
    )
    .await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let events = common::settle(http, agent_base, &id, 1).await;
    let done = events
        .iter()
        .find(|e| e["type"] == "turn.completed")
        .unwrap();
    assert!(done["data"]["reply"].as_str().unwrap().contains("Paris"));
    id
}

/// How many operations the document lists on paths whose mounts pass `filter`.
fn operations(doc: &Value, filter: impl Fn(&Value) -> bool) -> usize {
    doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .filter(|item| filter(&item["x-bdk-mount"]))
        .map(|item| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|k| METHODS.contains(&k.as_str()))
                .count()
        })
        .sum()
}

fn strip_servers(mut doc: Value) -> (Value, Value) {
    let servers = doc
        .as_object_mut()
        .unwrap()
        .remove("servers")
        .expect("servers");
    (doc, servers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_agent_layout_serves_every_documented_operation() {
    let (_dir, host, diagnostics) = agent().await;
    let mount = Mount {
        slug: Some("solo".to_owned()),
        host,
        diagnostics,
        reload: None,
    };
    let config = Config {
        playground: true,
        ..Config::default()
    };
    let base = common::serve(vec![mount], config).await;
    let http = client();
    let doc = bdk_http::openapi::document();

    // The agent's copy: the document, with the agent's base path as server.
    let (status, served) = get_json(&http, &format!("{base}/solo/v1/openapi.json")).await;
    assert_eq!(status, 200);
    let (served, servers) = strip_servers(served);
    assert_eq!(served, doc);
    assert_eq!(servers[0]["url"], "/solo");

    // The root copy: a `{slug}` variable over the agents.
    let (status, served) = get_json(&http, &format!("{base}/v1/openapi.json")).await;
    assert_eq!(status, 200);
    let (served, servers) = strip_servers(served);
    assert_eq!(served, doc);
    assert_eq!(servers[0]["url"], "/{slug}");
    assert_eq!(servers[0]["variables"]["slug"]["enum"], json!(["solo"]));
    assert_eq!(servers[0]["variables"]["slug"]["default"], "solo");

    let agent_base = format!("{base}/solo");
    let fallbacks = Fallbacks::probe(&http, &agent_base).await;
    let id = session(&http, &agent_base).await;
    let bases = BTreeMap::from([
        ("agent", agent_base.clone()),
        ("host", base.clone()),
        ("server", base.clone()),
    ]);
    let requests = exercise(&doc, &http, &bases, &fallbacks, &id).await;
    assert!(
        requests >= operations(&doc, |_| true),
        "only {requests} requests"
    );

    // The check above can fail: a path the document does not have falls
    // through, under the agent and at the root.
    let (status, body) = get_json(&http, &format!("{agent_base}/v1/agents")).await;
    assert!(
        fallbacks.is_fallback(status, Some(&body)),
        "{status} {body}"
    );
    let (status, body) = get_json(&http, &format!("{base}/v1/sessions")).await;
    assert!(
        fallbacks.is_fallback(status, Some(&body)),
        "{status} {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_layout_serves_every_documented_operation() {
    let (_dir, host, diagnostics) = agent().await;
    let mount = Mount {
        slug: None,
        host,
        diagnostics,
        reload: None,
    };
    let config = Config {
        playground: true,
        ..Config::default()
    };
    let base = common::serve(vec![mount], config).await;
    let http = client();
    let doc = bdk_http::openapi::document();

    let (status, served) = get_json(&http, &format!("{base}/v1/openapi.json")).await;
    assert_eq!(status, 200);
    let (served, servers) = strip_servers(served);
    assert_eq!(servers, json!([{"url": "/"}]));
    // The served copy is the document minus the host-only paths, which this
    // layout does not answer (schemathesis would call them and get 404).
    let mut expected = doc.clone();
    expected["paths"]
        .as_object_mut()
        .unwrap()
        .retain(|_, item| item["x-bdk-mount"] != json!(["host"]));
    assert!(expected["paths"].as_object().unwrap().len() < doc["paths"].as_object().unwrap().len());
    assert_eq!(served, expected);
    for path in ["/", "/v1/agents"] {
        assert!(served["paths"].get(path).is_none(), "{path} is listed");
    }

    let fallbacks = Fallbacks::probe(&http, &base).await;
    let id = session(&http, &base).await;
    let bases = BTreeMap::from([("agent", base.clone()), ("server", base.clone())]);
    let requests = exercise(&doc, &http, &bases, &fallbacks, &id).await;
    let served = operations(&doc, |mounts| mounts != &json!(["host"]));
    assert!(requests >= served, "only {requests} requests");

    // Host-only paths are documented as absent in this layout, and are.
    for (path, item) in doc["paths"].as_object().unwrap() {
        if item["x-bdk-mount"] == json!(["host"]) {
            let resp = http.get(format!("{base}{path}")).send().await.unwrap();
            let status = resp.status().as_u16();
            let body: Value = resp.json().await.unwrap();
            assert!(
                fallbacks.is_fallback(status, Some(&body)),
                "{path}: {status} {body}"
            );
        }
    }
}
