//! The HTTP side: the accept loop, reading a call in full, the Web API's
//! order of checks (injected failure, unreadable body, unknown method,
//! token, scope), the headers Slack puts on every answer, the upload URL,
//! and the record of every call.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::args::{Args, decode};
use super::files::receive_upload;
use super::methods;
use super::record::{Failure, Recorded, UPLOAD};
use super::reply::{Reply, ReplyBody};
use super::state::{State, lock};

pub(super) async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>) {
    let mut connections = JoinSet::new();
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            // A transient accept error (too many open files) must not end
            // the fake; the next accept may succeed.
            Err(_) => continue,
        };
        // Reap finished connections so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
        let state = Arc::clone(&state);
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let state = Arc::clone(&state);
                async move { Ok::<_, Infallible>(handle(&state, req).await) }
            });
            let _closed = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The headers of a Web API answer that depend on the caller and method.
struct ScopeHeaders {
    /// The caller's scopes; `None` for the upload URL, which has none.
    granted: Option<String>,
    accepted: Option<String>,
}

async fn handle(state: &Mutex<State>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
    let http_method = parts.method.as_str().to_owned();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or("").to_owned();
    let mut headers = BTreeMap::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_owned())
            .and_modify(|existing: &mut String| {
                existing.push_str(", ");
                existing.push_str(&value);
            })
            .or_insert(value);
    }
    let content_type = headers.get("content-type").map(String::as_str);

    let mut state = lock(state);
    let (method, args, reply, scope_headers) = if let Some(name) = path.strip_prefix("/api/") {
        let decoded = decode(content_type, &query, &body);
        let args = decoded.as_ref().map_or(Value::Null, Args::to_value);
        let (reply, scope_headers) = state.api_call(name, &headers, decoded);
        (name.to_owned(), args, reply, scope_headers)
    } else if let Some(file_id) = path.strip_prefix("/upload/") {
        let args = json!({"file_id": file_id, "length": body.len()});
        let reply = match take_failure(&mut state.failures, UPLOAD) {
            Some(reply) => reply,
            None if http_method == "POST" || http_method == "PUT" => {
                receive_upload(&mut state, file_id, content_type, &body)
            }
            None => Reply::text(405, "Method Not Allowed".to_owned()),
        };
        let scope_headers = ScopeHeaders {
            granted: None,
            accepted: None,
        };
        (UPLOAD.to_owned(), args, reply, scope_headers)
    } else {
        let reply = Reply::text(404, "Not Found".to_owned());
        let scope_headers = ScopeHeaders {
            granted: None,
            accepted: None,
        };
        (path.clone(), Value::Null, reply, scope_headers)
    };
    let error = reply.error_code();
    let request_id = state.id();
    let (response, status, answered) = finish(reply, scope_headers, request_id);
    let recorded = Recorded {
        method,
        http_method,
        args,
        headers,
        status,
        error,
        response: answered,
    };
    if state.log {
        eprintln!("{}", recorded.summary());
    }
    state.requests.push(recorded);
    response
}

impl State {
    /// One Web API call, checked in Slack's order.
    fn api_call(
        &mut self,
        name: &str,
        headers: &BTreeMap<String, String>,
        decoded: Result<Args, &'static str>,
    ) -> (Reply, ScopeHeaders) {
        let token = headers
            .get("authorization")
            .and_then(|value| bearer(value))
            .or_else(|| decoded.as_ref().ok().and_then(|args| args.token.clone()));
        let scopes = token.as_ref().and_then(|token| self.tokens.get(token));
        let method = methods::find(name);
        let scope_headers = ScopeHeaders {
            granted: Some(scopes.map(|scopes| scopes.join(",")).unwrap_or_default()),
            accepted: Some(
                method
                    .map(|method| method.accepted.join(","))
                    .unwrap_or_default(),
            ),
        };
        if let Some(reply) = take_failure(&mut self.failures, name) {
            return (reply, scope_headers);
        }
        let args = match decoded {
            Ok(args) => args,
            Err(code) => return (Reply::error(code), scope_headers),
        };
        let Some(method) = method else {
            let reply = Reply {
                status: 404,
                ..Reply::error_with("unknown_method", json!({"req_method": name}))
            };
            return (reply, scope_headers);
        };
        let Some(scopes) = scopes.cloned() else {
            let code = if token.is_none() {
                "not_authed"
            } else {
                "invalid_auth"
            };
            return (Reply::error(code), scope_headers);
        };
        let mut reply = match method.needed_scope(&args) {
            Some(needed) if !scopes.iter().any(|scope| scope == needed) => Reply::error_with(
                "missing_scope",
                json!({"needed": needed, "provided": scopes.join(",")}),
            ),
            _ => method.call(self, &args),
        };
        for warning in &args.warnings {
            reply.warn(warning);
        }
        (reply, scope_headers)
    }
}

/// The token of `Authorization: Bearer <token>`.
fn bearer(value: &str) -> Option<String> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
}

/// The injected answer for a call of `method`, if one is pending.
fn take_failure(failures: &mut Vec<Failure>, method: &str) -> Option<Reply> {
    let index = failures
        .iter()
        .position(|failure| failure.method.is_empty() || failure.method == method)?;
    let failure = &mut failures[index];
    failure.times = failure.times.saturating_sub(1);
    let failure = if failure.times == 0 {
        failures.remove(index)
    } else {
        failure.clone()
    };
    let mut headers = failure.headers.clone();
    if failure.status == 429 && !headers.iter().any(|(name, _)| name == "retry-after") {
        headers.push(("retry-after".to_owned(), "1".to_owned()));
    }
    Some(Reply {
        status: failure.status,
        headers,
        body: ReplyBody::Json(failure.answer_body()),
    })
}

/// Adds the headers Slack puts on every answer and builds it; the status
/// and the JSON answered, for the record.
fn finish(
    reply: Reply,
    scope_headers: ScopeHeaders,
    request_id: u64,
) -> (Response<Full<Bytes>>, u16, Value) {
    let mut headers: Vec<(String, String)> = vec![
        (
            "x-slack-req-id".to_owned(),
            format!("{:032x}", u128::from(request_id) * 0x9e37_79b9_7f4a_7c15),
        ),
        ("access-control-allow-origin".to_owned(), "*".to_owned()),
    ];
    if let Some(granted) = scope_headers.granted {
        headers.push(("x-oauth-scopes".to_owned(), granted));
    }
    if let Some(accepted) = scope_headers.accepted {
        headers.push(("x-accepted-oauth-scopes".to_owned(), accepted));
    }
    for (name, value) in reply.headers {
        headers.retain(|(existing, _)| !existing.eq_ignore_ascii_case(&name));
        headers.push((name, value));
    }
    let (content_type, bytes, answered) = match reply.body {
        ReplyBody::Json(value) => (
            "application/json; charset=utf-8",
            value.to_string().into_bytes(),
            value,
        ),
        ReplyBody::Text(text) => ("text/plain; charset=utf-8", text.into_bytes(), Value::Null),
    };
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut builder = Response::builder()
        .status(status)
        .header("content-type", content_type);
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    let response = builder
        .body(Full::new(Bytes::from(bytes)))
        .unwrap_or_else(|_| {
            let mut fallback = Response::new(Full::new(Bytes::from_static(
                br#"{"ok":false,"error":"internal_error"}"#,
            )));
            *fallback.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            fallback
        });
    let status = response.status().as_u16();
    (response, status, answered)
}
