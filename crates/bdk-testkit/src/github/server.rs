//! The HTTP side: the accept loop, reading a request in full, injected
//! failures, routing to the endpoints, pagination and the headers GitHub
//! puts on every response.

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

use super::record::{API_VERSION, DOCS, RATE_LIMIT, Recorded};
use super::state::{Principal, State, lock};
use super::text::{percent_decode, percent_encode, query_pairs};

/// What the fake answers before the standard headers are added.
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: ReplyBody,
}

pub(super) enum ReplyBody {
    Json(Value),
    Raw {
        content_type: &'static str,
        bytes: Vec<u8>,
    },
}

impl Reply {
    pub(super) fn json(status: u16, value: Value) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: ReplyBody::Json(value),
        }
    }

    pub(super) fn error(status: u16, message: &str) -> Reply {
        Reply::json(
            status,
            json!({"message": message, "documentation_url": DOCS}),
        )
    }

    pub(super) fn not_found() -> Reply {
        Reply::error(404, "Not Found")
    }

    /// 422 with GitHub's validation error shape.
    pub(super) fn invalid(resource: &str, field: &str, code: &str) -> Reply {
        Reply::json(
            422,
            json!({
                "message": "Validation Failed",
                "errors": [{"resource": resource, "field": field, "code": code}],
                "documentation_url": DOCS,
            }),
        )
    }

    /// 422 with a custom validation message, as GitHub words them.
    pub(super) fn invalid_custom(resource: &str, field: &str, message: &str) -> Reply {
        Reply::json(
            422,
            json!({
                "message": "Validation Failed",
                "errors": [{"resource": resource, "field": field, "code": "custom", "message": message}],
                "documentation_url": DOCS,
            }),
        )
    }

    pub(super) fn with_header(mut self, name: &str, value: String) -> Reply {
        self.headers.push((name.to_owned(), value));
        self
    }
}

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

pub(super) async fn handle(state: &Mutex<State>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
    let method = parts.method.as_str().to_owned();
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
    let recorded_body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
    };

    let mut state = lock(state);
    let request = Req {
        method: &method,
        path: &path,
        query: &query,
        headers: &headers,
        body: &body,
    };
    let reply = state
        .injected_failure(&request)
        .unwrap_or_else(|| state.route(&request));
    let (response, status) = state.finish(reply);
    let recorded = Recorded {
        method,
        path,
        query,
        headers,
        body: recorded_body,
        status,
    };
    if state.log {
        eprintln!("{}", recorded.summary());
    }
    state.requests.push(recorded);
    response
}

/// A request as the router sees it: read in full, headers lower-case.
pub(super) struct Req<'a> {
    pub(super) method: &'a str,
    pub(super) path: &'a str,
    pub(super) query: &'a str,
    pub(super) headers: &'a BTreeMap<String, String>,
    pub(super) body: &'a [u8],
}

impl Req<'_> {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    pub(super) fn query(&self, name: &str) -> Option<String> {
        query_pairs(self.query)
            .into_iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value)
    }

    /// The JSON body: `{}` when empty, a 400 reply when it does not parse.
    pub(super) fn json(&self) -> Result<Value, Reply> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(json!({}));
        }
        serde_json::from_slice(self.body).map_err(|_| Reply::error(400, "Problems parsing JSON"))
    }
}

impl State {
    pub(super) fn injected_failure(&mut self, req: &Req<'_>) -> Option<Reply> {
        let target = if req.query.is_empty() {
            req.path.to_owned()
        } else {
            format!("{}?{}", req.path, req.query)
        };
        let index = self.failures.iter().position(|failure| {
            failure
                .method
                .is_none_or(|method| method.eq_ignore_ascii_case(req.method))
                && target.contains(&failure.path_contains)
        })?;
        let failure = &mut self.failures[index];
        failure.times = failure.times.saturating_sub(1);
        let failure = if failure.times == 0 {
            self.failures.remove(index)
        } else {
            failure.clone()
        };
        let body = if failure.body.is_null() {
            let reason = StatusCode::from_u16(failure.status)
                .ok()
                .and_then(|status| status.canonical_reason())
                .unwrap_or("Error");
            json!({"message": reason, "documentation_url": DOCS})
        } else {
            failure.body
        };
        Some(Reply {
            status: failure.status,
            headers: failure.headers,
            body: ReplyBody::Json(body),
        })
    }

    /// Adds the headers GitHub puts on every response and builds it.
    pub(super) fn finish(&mut self, reply: Reply) -> (Response<Full<Bytes>>, u16) {
        self.rate_used += 1;
        let request_id = self.id();
        let mut headers: Vec<(String, String)> = vec![
            ("x-ratelimit-limit".into(), RATE_LIMIT.to_string()),
            (
                "x-ratelimit-remaining".into(),
                RATE_LIMIT.saturating_sub(self.rate_used).to_string(),
            ),
            ("x-ratelimit-reset".into(), self.rate_reset.to_string()),
            ("x-ratelimit-used".into(), self.rate_used.to_string()),
            ("x-ratelimit-resource".into(), "core".into()),
            (
                "x-github-request-id".into(),
                format!("FAKE:{request_id:06X}:{:07X}", request_id * 7919),
            ),
            ("x-github-api-version-selected".into(), API_VERSION.into()),
        ];
        for (name, value) in reply.headers {
            headers.retain(|(existing, _)| !existing.eq_ignore_ascii_case(&name));
            headers.push((name, value));
        }
        let (content_type, bytes) = match reply.body {
            ReplyBody::Json(value) => (
                "application/json; charset=utf-8",
                value.to_string().into_bytes(),
            ),
            ReplyBody::Raw {
                content_type,
                bytes,
            } => (content_type, bytes),
        };
        let status =
            StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
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
                    br#"{"message":"Server Error"}"#,
                )));
                *fallback.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                fallback
            });
        let status = response.status().as_u16();
        (response, status)
    }

    pub(super) fn route(&mut self, req: &Req<'_>) -> Reply {
        if req.header("user-agent").is_none_or(str::is_empty) {
            return Reply::error(
                403,
                "Request forbidden by administrative rules. Please make sure your request has a User-Agent header (https://docs.github.com/en/rest/overview/resources-in-the-rest-api#user-agent-required). Check https://developer.github.com for other possible causes.",
            );
        }
        if let Some(version) = req.header("x-github-api-version")
            && version != API_VERSION
        {
            return Reply::error(400, &format!("API version {version} is not supported."));
        }
        let segments: Vec<String> = req
            .path
            .trim_start_matches('/')
            .split('/')
            .map(percent_decode)
            .collect();
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        match (req.method, segments.as_slice()) {
            ("GET", ["app"]) => match self.authenticate_app(req) {
                Ok(app_id) => self.get_app(app_id),
                Err(reply) => reply,
            },
            ("POST", ["app", "installations", id, "access_tokens"]) => {
                match self.authenticate_app(req) {
                    Ok(app_id) => self.mint_token(app_id, id),
                    Err(reply) => reply,
                }
            }
            ("GET", ["repos", owner, name, "installation"]) => match self.authenticate_app(req) {
                Ok(app_id) => self.get_installation(app_id, &format!("{owner}/{name}")),
                Err(reply) => reply,
            },
            _ => match self.authenticate(req) {
                Ok(caller) => self.route_authenticated(req, &caller, &segments),
                Err(reply) => reply,
            },
        }
    }

    pub(super) fn route_authenticated(
        &mut self,
        req: &Req<'_>,
        caller: &Principal,
        segments: &[&str],
    ) -> Reply {
        if let ["user"] = segments {
            return match (req.method, caller) {
                ("GET", Principal::User(login)) => Reply::json(
                    200,
                    json!({"login": login, "id": 1, "node_id": "U_fake1", "type": "User", "site_admin": false, "html_url": format!("https://github.com/{login}")}),
                ),
                ("GET", Principal::Installation { .. }) => {
                    Reply::error(403, "Resource not accessible by integration")
                }
                _ => Reply::not_found(),
            };
        }
        let ["repos", owner, name, rest @ ..] = segments else {
            return Reply::not_found();
        };
        let full_name = format!("{owner}/{name}");
        if !self.repos.contains_key(&full_name) || !self.can_access(caller, &full_name) {
            return Reply::not_found();
        }
        let author = self.author(caller);
        let body = match req.method {
            "POST" | "PATCH" | "PUT" => match req.json() {
                Ok(body) => body,
                Err(reply) => return reply,
            },
            _ => Value::Null,
        };
        match (req.method, rest) {
            ("GET", []) => Reply::json(200, self.repos[&full_name].value.clone()),
            ("GET", ["pulls", number]) => self.get_pull(req, &full_name, number),
            ("GET", ["pulls", number, "files"]) => self.list_pull_files(req, &full_name, number),
            ("GET", ["pulls", number, "reviews"]) => {
                let Some(number) = self.existing_pull(&full_name, number) else {
                    return Reply::not_found();
                };
                let reviews = self.repos[&full_name]
                    .reviews
                    .get(&number)
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|mut review| {
                        if let Some(object) = review.as_object_mut() {
                            object.remove("comments");
                        }
                        review
                    })
                    .collect();
                self.page(req, reviews)
            }
            ("POST", ["pulls", number, "reviews"]) => {
                self.create_review(&full_name, number, &body, author)
            }
            ("GET", ["issues", "comments", id]) => match self.find_comment(&full_name, id) {
                Some((number, index)) => {
                    Reply::json(200, self.repos[&full_name].comments[&number][index].clone())
                }
                None => Reply::not_found(),
            },
            ("PATCH", ["issues", "comments", id]) => self.update_comment(&full_name, id, &body),
            ("GET", ["issues", number]) => self.get_issue(&full_name, number),
            ("GET", ["issues", number, "comments"]) => {
                let Some(number) = self.existing_issue(&full_name, number) else {
                    return Reply::not_found();
                };
                let comments = self.repos[&full_name]
                    .comments
                    .get(&number)
                    .cloned()
                    .unwrap_or_default();
                self.page(req, comments)
            }
            ("POST", ["issues", number, "comments"]) => {
                self.create_comment(&full_name, number, &body, author)
            }
            ("GET", ["contents", path @ ..]) => self.get_contents(req, &full_name, &path.join("/")),
            ("POST", ["statuses", sha]) => self.create_status(&full_name, sha, &body, author),
            ("GET", ["commits", git_ref, "statuses"]) => {
                let mut statuses = self.repos[&full_name]
                    .statuses
                    .get(*git_ref)
                    .cloned()
                    .unwrap_or_default();
                // GitHub lists the newest first.
                statuses.reverse();
                self.page(req, statuses)
            }
            _ => Reply::not_found(),
        }
    }
}

impl State {
    /// One page of `items` per `per_page` (default 30, at most 100) and
    /// `page` (from 1), with GitHub's `Link` header.
    pub(super) fn page(&self, req: &Req<'_>, items: Vec<Value>) -> Reply {
        let per_page = req
            .query("per_page")
            .and_then(|value| value.parse::<usize>().ok())
            .unwrap_or(30)
            .clamp(1, 100);
        let page = req
            .query("page")
            .and_then(|value| value.parse::<usize>().ok())
            .unwrap_or(1)
            .max(1);
        let last = items.len().div_ceil(per_page).max(1);
        let slice: Vec<Value> = items
            .into_iter()
            .skip((page - 1).saturating_mul(per_page))
            .take(per_page)
            .collect();
        let kept: Vec<(String, String)> = query_pairs(req.query)
            .into_iter()
            .filter(|(key, _)| key != "page" && key != "per_page")
            .collect();
        let link_to = |target: usize| {
            let mut query: Vec<String> = kept
                .iter()
                .map(|(key, value)| format!("{key}={}", percent_encode(value)))
                .collect();
            query.push(format!("per_page={per_page}"));
            query.push(format!("page={target}"));
            format!("<{}{}?{}>", self.base, req.path, query.join("&"))
        };
        let mut links = Vec::new();
        if page > 1 {
            links.push(format!("{}; rel=\"prev\"", link_to(page - 1)));
        }
        if page < last {
            links.push(format!("{}; rel=\"next\"", link_to(page + 1)));
            links.push(format!("{}; rel=\"last\"", link_to(last)));
        }
        if page > 1 {
            links.push(format!("{}; rel=\"first\"", link_to(1)));
        }
        let reply = Reply::json(200, Value::Array(slice));
        if links.is_empty() {
            reply
        } else {
            reply.with_header("link", links.join(", "))
        }
    }
}
