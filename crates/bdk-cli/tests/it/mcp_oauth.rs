#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! An HTTP MCP connection behind OAuth: the real `bdk` against an MCP
//! server and its authorization server run by the test, written to the MCP
//! authorization spec (a 401 naming the protected-resource metadata, RFC
//! 9728 and 8414 metadata, dynamic registration, the code flow with PKCE
//! S256, `resource` on every request, refresh). `bdk mcp login` signs in
//! through a loopback redirect, the token lands under the state root, and
//! the connection uses it, refreshing it when it has expired.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use assert_cmd::cargo::CommandCargoExt;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

#[derive(Default)]
struct Fake {
    base: String,
    /// Leave S256 out of the metadata (a server bdk must refuse).
    no_s256: bool,
    /// client id -> registered redirect URIs.
    clients: HashMap<String, Vec<String>>,
    /// code -> (client id, redirect URI, challenge, resource).
    codes: HashMap<String, (String, String, String, String)>,
    /// Access tokens that are valid now.
    valid: Vec<String>,
    refresh_tokens: Vec<String>,
    issued: usize,
    /// What happened, in order.
    log: Vec<String>,
}

type Shared = Arc<Mutex<Fake>>;

fn oauth_error(code: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({"error": code}))).into_response()
}

async fn start() -> Shared {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let shared: Shared = Arc::new(Mutex::new(Fake {
        base: base.clone(),
        ..Fake::default()
    }));
    let app = Router::new()
        .route(
            "/mcp",
            axum::routing::post(mcp).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            axum::routing::get(|State(s): State<Shared>| async move {
                let base = s.lock().unwrap().base.clone();
                Json(json!({
                    "resource": format!("{base}/mcp"),
                    "authorization_servers": [format!("{base}/auth")],
                    "scopes_supported": ["tools"],
                    "bearer_methods_supported": ["header"],
                }))
            }),
        )
        .route(
            "/.well-known/oauth-authorization-server/auth",
            axum::routing::get(|State(s): State<Shared>| async move {
                let f = s.lock().unwrap();
                let base = &f.base;
                let methods = if f.no_s256 {
                    json!(["plain"])
                } else {
                    json!(["S256"])
                };
                Json(json!({
                    "issuer": format!("{base}/auth"),
                    "authorization_endpoint": format!("{base}/auth/authorize"),
                    "token_endpoint": format!("{base}/auth/token"),
                    "registration_endpoint": format!("{base}/auth/register"),
                    "response_types_supported": ["code"],
                    "grant_types_supported": ["authorization_code", "refresh_token"],
                    "code_challenge_methods_supported": methods,
                    "token_endpoint_auth_methods_supported": ["none"],
                }))
            }),
        )
        .route("/auth/register", axum::routing::post(register))
        .route("/auth/authorize", axum::routing::get(authorize))
        .route("/auth/token", axum::routing::post(token))
        .with_state(Arc::clone(&shared));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    shared
}

async fn register(State(s): State<Shared>, Json(body): Json<Value>) -> Response {
    let mut f = s.lock().unwrap();
    let uris: Vec<String> = body["redirect_uris"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|u| u.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if uris.is_empty() || body["token_endpoint_auth_method"] != "none" {
        return oauth_error("invalid_client_metadata");
    }
    let id = format!("client-{}", f.clients.len() + 1);
    f.clients.insert(id.clone(), uris.clone());
    f.log.push("register".into());
    (
        StatusCode::CREATED,
        Json(json!({"client_id": id, "redirect_uris": uris, "token_endpoint_auth_method": "none"})),
    )
        .into_response()
}

async fn authorize(State(s): State<Shared>, Query(q): Query<HashMap<String, String>>) -> Response {
    let mut f = s.lock().unwrap();
    let get = |k: &str| q.get(k).cloned().unwrap_or_default();
    let client = get("client_id");
    let redirect = get("redirect_uri");
    let registered = f
        .clients
        .get(&client)
        .is_some_and(|u| u.contains(&redirect));
    if get("response_type") != "code"
        || !registered
        || get("code_challenge_method") != "S256"
        || get("code_challenge").len() != 43
        || get("resource") != format!("{}/mcp", f.base)
        || get("scope") != "tools"
    {
        return (
            StatusCode::BAD_REQUEST,
            format!("bad authorization request: {q:?}"),
        )
            .into_response();
    }
    let code = format!("code-{}", f.codes.len() + 1);
    f.codes.insert(
        code.clone(),
        (
            client,
            redirect.clone(),
            get("code_challenge"),
            get("resource"),
        ),
    );
    f.log.push("authorize".into());
    let location = format!("{redirect}?code={code}&state={}", get("state"));
    (StatusCode::FOUND, [("location", location)]).into_response()
}

async fn token(State(s): State<Shared>, Form(form): Form<HashMap<String, String>>) -> Response {
    let mut f = s.lock().unwrap();
    let get = |k: &str| form.get(k).cloned().unwrap_or_default();
    let resource = format!("{}/mcp", f.base);
    if get("resource") != resource {
        return oauth_error("invalid_target");
    }
    let first = match get("grant_type").as_str() {
        "authorization_code" => {
            let Some((client, redirect, challenge, _)) = f.codes.remove(&get("code")) else {
                return oauth_error("invalid_grant");
            };
            let computed = URL_SAFE_NO_PAD.encode(Sha256::digest(get("code_verifier").as_bytes()));
            if client != get("client_id")
                || redirect != get("redirect_uri")
                || computed != challenge
            {
                return oauth_error("invalid_grant");
            }
            true
        }
        "refresh_token" => {
            if !f.refresh_tokens.contains(&get("refresh_token")) {
                return oauth_error("invalid_grant");
            }
            false
        }
        _ => return oauth_error("unsupported_grant_type"),
    };
    f.issued += 1;
    let access = format!("at-{}", f.issued);
    f.log.push(format!("token:{}", get("grant_type")));
    let mut answer = json!({"access_token": access, "token_type": "Bearer", "scope": "tools"});
    if first {
        // Already expired: the connection must refresh it before use.
        answer["expires_in"] = json!(0);
        answer["refresh_token"] = json!("rt-1");
        f.refresh_tokens.push("rt-1".into());
    } else {
        answer["expires_in"] = json!(3600);
        f.valid.push(access);
    }
    Json(answer).into_response()
}

async fn mcp(State(s): State<Shared>, headers: HeaderMap, Json(message): Json<Value>) -> Response {
    let mut f = s.lock().unwrap();
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_owned();
    if !f.valid.contains(&bearer) {
        let challenge = format!(
            "Bearer error=\"invalid_token\", resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
            f.base
        );
        return (StatusCode::UNAUTHORIZED, [("www-authenticate", challenge)]).into_response();
    }
    let method = message["method"].as_str().unwrap_or_default().to_owned();
    f.log.push(format!("mcp:{method}:{bearer}"));
    let Some(id) = message.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match method.as_str() {
        "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                               "serverInfo": {"name": "guarded", "version": "0"}}),
        "tools/list" => json!({"tools": [{"name": "shout", "description": "upper-cases",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            "annotations": {"readOnlyHint": true}}]}),
        "tools/call" => {
            let text = message["params"]["arguments"]["text"]
                .as_str()
                .unwrap_or_default();
            json!({"content": [{"type": "text", "text": text.to_uppercase()}]})
        }
        _ => {
            return Json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no such method"}}))
                .into_response();
        }
    };
    Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

fn project(base: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("agent/agent.toml", "model = \"scripted\"\n".to_owned()),
        ("agent/instructions.md", "You shout.\n".to_owned()),
        (
            "agent/scripted.toml",
            "[[rules]]\nreply = \"ok\"\n".to_owned(),
        ),
        (
            "agent/mcp-connections/remote.toml",
            format!(
                "url = \"{base}/mcp\"\nadvertise_tools = true\ntimeout_ms = 10000\n\n[oauth]\n"
            ),
        ),
    ];
    bdk_testkit::write_files(dir.path(), &files);
    dir
}

fn bdk(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::cargo_bin("bdk").unwrap();
    cmd.env_remove("BDK_STATE_ROOT")
        .args(args)
        .arg("--dir")
        .arg(dir);
    cmd
}

/// A running `bdk mcp login remote`, with the URL it printed first.
struct Login {
    child: std::process::Child,
    url: String,
    lines: std::sync::mpsc::Receiver<String>,
}

fn login(dir: &Path) -> Login {
    let mut child = bdk(dir, &["mcp", "login", "remote", "--no-browser"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let url = loop {
        let line = lines
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("login printed no URL");
        if line.starts_with("http") {
            break line;
        }
    };
    Login { child, url, lines }
}

/// Waits for the login to end: its exit code, the rest of its stdout, its
/// stderr.
fn finished(login: Login) -> (i32, String, String) {
    let out = login.child.wait_with_output().unwrap();
    let stdout: Vec<String> = login.lines.iter().collect();
    (
        out.status.code().unwrap_or(-1),
        stdout.join("\n"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn no_redirects() -> reqwest::Client {
    bdk_models::net::install_crypto_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn login_stores_a_token_that_the_connection_uses_and_refreshes() {
    let fake = start().await;
    let base = fake.lock().unwrap().base.clone();
    let dir = project(&base);

    // Before signing in, the connection says how to.
    let out = bdk(dir.path(), &["info", "--json"]).output().unwrap();
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    let message = info["connectionErrors"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("bdk mcp login remote"), "{info}");

    // Sign in: the browser's part is the test following the redirect.
    let child = login(dir.path());
    let url = child.url.clone();
    assert!(url.starts_with(&format!("{base}/auth/authorize?")), "{url}");
    let http = no_redirects();
    let resp = http.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 302, "{}", resp.text().await.unwrap());
    let callback = resp.headers()["location"].to_str().unwrap().to_owned();
    assert!(callback.starts_with("http://127.0.0.1:"), "{callback}");
    let page = http.get(&callback).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("Signed in"));
    let (code, stdout, stderr) = finished(child);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("Signed in to `remote`"), "{stdout}");
    let stored = dir.path().join(".bdk/mcp-auth/remote.json");
    let tokens: Value = serde_json::from_slice(&std::fs::read(&stored).unwrap()).unwrap();
    assert_eq!(tokens["access_token"], "at-1");
    assert_eq!(tokens["resource"], format!("{base}/mcp"));
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&stored).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // The first token came back already expired: the connection refreshes
    // it, stores the new one, and calls the tool with it.
    let out = bdk(
        dir.path(),
        &["call", "shout", "--input", r#"{"text":"hi"}"#, "--json"],
    )
    .output()
    .unwrap();
    let called: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(called["result"], "HI", "{called}");
    let tokens: Value = serde_json::from_slice(&std::fs::read(&stored).unwrap()).unwrap();
    assert_eq!(tokens["access_token"], "at-2");
    assert_eq!(
        tokens["refresh_token"], "rt-1",
        "a refresh keeps the refresh token"
    );
    let log = fake.lock().unwrap().log.clone();
    let at = |e: &str| {
        log.iter()
            .position(|l| l == e)
            .unwrap_or_else(|| panic!("no {e}: {log:?}"))
    };
    assert!(at("register") < at("authorize"));
    assert!(at("authorize") < at("token:authorization_code"));
    assert!(at("token:authorization_code") < at("token:refresh_token"));
    assert!(log.contains(&"mcp:tools/call:at-2".to_owned()), "{log:?}");
    assert!(
        !log.iter().any(|l| l.ends_with(":at-1")),
        "the expired token was never sent: {log:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn login_refuses_a_forged_redirect_and_a_server_without_pkce() {
    let fake = start().await;
    let base = fake.lock().unwrap().base.clone();
    let dir = project(&base);

    // A redirect that does not carry this sign-in's state stores nothing.
    let child = login(dir.path());
    let url = child.url.clone();
    let redirect_uri = reqwest::Url::parse(&url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "redirect_uri")
        .map(|(_, v)| v.into_owned())
        .unwrap();
    let page = no_redirects()
        .get(format!("{redirect_uri}?code=code-1&state=forged"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let (code, stdout, stderr) = finished(child);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("does not match"), "{stderr}");
    assert!(!dir.path().join(".bdk/mcp-auth/remote.json").exists());

    // An authorization server without S256 is refused before any redirect.
    fake.lock().unwrap().no_s256 = true;
    let out = bdk(dir.path(), &["mcp", "login", "remote", "--no-browser"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("PKCE"), "{stderr}");

    // A stored token that expired, with a refresh token the server no
    // longer honours: the connection says to sign in again. The tokens live
    // under the state root given to the command.
    let state = dir.path().join("elsewhere");
    std::fs::create_dir_all(state.join("mcp-auth")).unwrap();
    std::fs::write(
        state.join("mcp-auth/remote.json"),
        json!({
            "access_token": "at-old",
            "refresh_token": "rt-revoked",
            "expires_at": "2020-01-01T00:00:00Z",
            "token_endpoint": format!("{base}/auth/token"),
            "client_id": "client-1",
            "resource": format!("{base}/mcp"),
        })
        .to_string(),
    )
    .unwrap();
    let out = bdk(dir.path(), &["info", "--json"])
        .env("BDK_STATE_ROOT", &state)
        .output()
        .unwrap();
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    let message = info["connectionErrors"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("invalid_grant"), "{info}");
    assert!(message.contains("bdk mcp login remote"), "{info}");
    assert!(
        fake.lock()
            .unwrap()
            .log
            .iter()
            .all(|l| !l.ends_with(":at-old")),
        "the expired token was never sent"
    );

    // A connection that does not use OAuth, or does not exist, is a usage error.
    let out = bdk(dir.path(), &["mcp", "login", "nope", "--no-browser"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no MCP connection `nope`"));
}
