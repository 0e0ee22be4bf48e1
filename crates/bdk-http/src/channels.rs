//! Custom channels: the routes an agent declares in
//! `agent/channels/<name>.toml`, served under `/v1/channels/<name>`, and the
//! channel's events map.
//!
//! A channel route turns an HTTP request into a message for a session:
//! authenticate (the server's chain, a bearer token, or an HMAC signature of
//! the raw body), validate the JSON body and the query against the route's
//! schemas, render the message, the continuation key and the delivery id
//! from templates, then start a session or continue the one whose
//! continuation token is `<channel>:<key>`. The answer is `202` with the
//! session's identifiers; the turn runs in the background. The events map
//! delivers chosen events of the channel's sessions to a URL or a command
//! (core's durable hook kind, `bdk_core::hooks::ChannelDelivery`).
//!
//! Two requests with the same key never create two sessions, on one server
//! or on replicas sharing a store: the host finds or creates the key's
//! session behind a durable claim in the store
//! (`bdk_core::host::Host::session_for_key`), and the second request finds
//! the session the first created. A lock per continuation token in this
//! process (the `keyed` module) only spares local callers the claim's
//! polling.
//!
//! The manifest format is documented in `docs/channels.md`; discovery
//! checks it and types it (`bdk_core::project::ChannelManifest`), the
//! `config` module compiles its schemas and templates.

use std::collections::BTreeMap;
use std::sync::Arc;

use aide::axum::ApiRouter;
use aide::axum::routing::ApiMethodDocs;
use aide::openapi::{Operation, SecurityRequirement};
use aide::transform::TransformOperation;
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Query, RawPathParams, Request};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, Route, on};
use bdk_api::paths;
use bdk_core::host::{FollowUp, Host, HostError, KeySession, StartSession, Started};
use bdk_core::project::{ChannelManifest, RouteMethod};
use bdk_events::ids::new_id;
use bdk_events::{Admission, DeliveryId, SessionId, SessionMode, TurnId};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service};

use crate::api::{Describe, True, schema_of};
use crate::error::{ApiError, ErrorCode};

mod config;
mod handler;
mod keyed;
pub(crate) mod verify;

pub use bdk_core::hooks::CURSOR_NAMESPACE;
use bdk_core::hooks::{ChannelDelivery, DeliveryStart};
pub use config::ConfigError;
use config::{Auth as RouteAuth, ChannelConfig, RouteConfig};
use keyed::KeyedLocks;
pub use verify::{Secrets, env_secrets, sign};

/// The longest continuation key accepted, in bytes.
pub use bdk_core::host::MAX_KEY_BYTES;

/// The principal of requests to `auth = "default"` routes that reach the
/// channel router without an authenticated caller.
pub const ANONYMOUS: &str = "anonymous";

/// The router of every channel in `channels`: paths `/<channel><route path>`
/// (a route path of `/` is the channel itself), to be nested under the
/// agent's `/v1/channels`. Starts event delivery for the channels' sessions;
/// `shutdown` stops it.
///
/// Routes with `auth = "default"` read the caller the server's auth layer
/// recorded in the request; without one the caller is `anonymous`. To keep
/// bearer and HMAC routes reachable by their own credentials while default
/// routes go through the server's chain, build the router with
/// [`Channels::router_with_auth`] instead of wrapping this one in the auth
/// layer.
///
/// Call it inside a Tokio runtime: delivery for sessions that already exist
/// resumes in a background task.
pub fn routes(host: Host, channels: &[ChannelManifest], shutdown: CancellationToken) -> Router {
    Channels::start(host, channels, shutdown, Options::default()).router()
}

/// Settings of [`Channels::start`].
#[derive(Clone)]
#[non_exhaustive]
pub struct Options {
    /// Where `secret_env` and `token_env` values come from (default: the
    /// process environment).
    pub secrets: Secrets,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            secrets: env_secrets(),
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options").finish_non_exhaustive()
    }
}

/// What a channel receives: one message for the conversation `continuation_key`
/// names (a new session per message without one).
#[derive(Clone, Debug, Default)]
pub struct Receive {
    /// The message.
    pub message: String,
    /// The conversation key; the session's token is `<channel>:<key>`.
    pub continuation_key: Option<String>,
    /// How the message joins a busy session.
    pub admission: Admission,
    /// The mode of a session this message creates.
    pub mode: SessionMode,
    /// The sender's delivery id (a `dlv_...` id is generated when absent).
    pub delivery_id: Option<String>,
    /// The caller; `None` is a caller the channel itself vouched for
    /// (a valid bearer token or signature), whose sessions have no owner.
    pub principal: Option<String>,
}

/// How a message was accepted.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    /// The session.
    pub session_id: SessionId,
    /// Its continuation token, `<channel>:<key>`; channel tokens never
    /// rotate.
    pub continuation_token: String,
    /// The message's delivery id.
    pub delivery_id: String,
    /// The turn the message started; `None` when it was queued behind a
    /// running turn (coalesce).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    /// True when this message created the session.
    pub created: bool,
}

/// Why a message was not accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// No channel of that name is served.
    #[error("no channel named `{0}`")]
    UnknownChannel(String),
    /// The continuation key is empty or too long.
    #[error("invalid continuation key: {0}")]
    InvalidKey(String),
    /// The session runtime refused the message.
    #[error(transparent)]
    Host(#[from] HostError),
}

impl From<ChannelError> for ApiError {
    fn from(e: ChannelError) -> Self {
        match e {
            ChannelError::UnknownChannel(_) => ApiError::new(ErrorCode::NotFound, e.to_string()),
            ChannelError::InvalidKey(_) => ApiError::new(ErrorCode::InvalidRequest, e.to_string()),
            ChannelError::Host(e) => e.into(),
        }
    }
}

/// The channels of one agent: their routes, their conversations and their
/// event delivery. Cheap to clone.
#[derive(Clone)]
pub struct Channels {
    inner: Arc<Inner>,
}

struct Inner {
    host: Host,
    channels: BTreeMap<String, Arc<ChannelConfig>>,
    secrets: Secrets,
    locks: KeyedLocks,
    delivery: ChannelDelivery,
    /// When this instance was made: [`Channels::resume`] covers the
    /// sessions created before.
    created_at: chrono::DateTime<chrono::Utc>,
}

impl Channels {
    /// Prepares `manifests` (a channel or route that cannot be served is
    /// logged and left out) and resumes event delivery for the channels'
    /// existing sessions in a background task when called inside a Tokio
    /// runtime: [`Channels::new`] and then [`Channels::resume`].
    pub fn start(
        host: Host,
        manifests: &[ChannelManifest],
        shutdown: CancellationToken,
        options: Options,
    ) -> Self {
        let this = Self::new(host, manifests, shutdown, options);
        if this.delivers() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let resuming = this.clone();
                    runtime.spawn(async move { resuming.resume().await });
                }
                Err(_) => tracing::warn!(
                    "channels were started outside a Tokio runtime; event delivery does not resume for existing sessions"
                ),
            }
        }
        this
    }

    /// Prepares `manifests` (a channel or route that cannot be served is
    /// logged and left out) and starts no task: event delivery covers the
    /// sessions this instance creates or continues, and the sessions that
    /// already exist once [`Channels::resume`] has run. `shutdown` stops
    /// every delivery.
    pub fn new(
        host: Host,
        manifests: &[ChannelManifest],
        shutdown: CancellationToken,
        options: Options,
    ) -> Self {
        let created_at = chrono::Utc::now();
        let mut channels = BTreeMap::new();
        for manifest in manifests {
            let (channel, skipped) = config::compile(manifest);
            for e in skipped {
                tracing::error!(error = %e, "channel route not served");
            }
            channels.insert(channel.name.clone(), Arc::new(channel));
        }
        let delivery = ChannelDelivery::new(
            Arc::clone(host.store()),
            host.containment().clone(),
            host.project().lib_dir(),
            shutdown,
        );
        Self {
            inner: Arc::new(Inner {
                host,
                channels,
                secrets: options.secrets,
                locks: KeyedLocks::default(),
                delivery,
                created_at,
            }),
        }
    }

    /// Resumes event delivery for the channels' sessions created before
    /// this instance was (later ones are followed as they are created):
    /// from each session's cursor, or from the end of its stream. Returns
    /// once every such session is followed; the deliveries run on in tasks
    /// of their own.
    pub async fn resume(&self) {
        if !self.delivers() {
            return;
        }
        let list: Vec<Arc<ChannelManifest>> = self
            .inner
            .channels
            .values()
            .map(|c| Arc::clone(&c.manifest))
            .collect();
        self.inner
            .delivery
            .resume(&list, self.inner.created_at)
            .await;
    }

    /// True when some channel has an events map.
    fn delivers(&self) -> bool {
        self.inner
            .channels
            .values()
            .any(|c| !c.manifest.events.is_empty())
    }

    /// The router (see [`routes`]): default-auth routes read the caller an
    /// outer auth layer recorded, or run as `anonymous`.
    pub fn router(&self) -> Router {
        self.router_with_auth(tower::layer::util::Identity::new())
    }

    /// The router, with `default_auth` (the server's auth middleware)
    /// applied to the `auth = "default"` routes only. Bearer and HMAC
    /// routes authenticate with their own credentials and never see it.
    pub fn router_with_auth<L>(&self, default_auth: L) -> Router
    where
        L: Layer<Route> + Clone + Send + Sync + 'static,
        L::Service:
            Service<Request, Error = std::convert::Infallible> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Response: IntoResponse + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        let mut paths: BTreeMap<String, MethodRouter> = BTreeMap::new();
        for channel in self.inner.channels.values() {
            for (index, route) in channel.routes.iter().enumerate() {
                let state = Arc::new(RouteState {
                    channels: self.clone(),
                    channel: Arc::clone(channel),
                    index,
                });
                let handler = move |req: Request| {
                    let state = Arc::clone(&state);
                    async move { handle(&state, req).await }
                };
                let mut one = on(method_filter(route.route.method), handler);
                if route.auth == RouteAuth::Default {
                    one = one.route_layer(default_auth.clone());
                }
                let full = if route.route.path == "/" {
                    format!("/{}", channel.name)
                } else {
                    format!("/{}{}", channel.name, route.route.path)
                };
                let merged = match paths.remove(&full) {
                    Some(existing) => existing.merge(one),
                    None => one,
                };
                paths.insert(full, merged);
            }
        }
        let mut router = Router::new();
        for (path, methods) in paths {
            router = router.route(&path, methods.fallback(crate::error::method_not_allowed));
        }
        router
    }

    /// Hands a message to `channel` (as a route does after its checks):
    /// continues the session of `continuation_key`, or starts one.
    pub async fn receive(&self, channel: &str, receive: Receive) -> Result<Accepted, ChannelError> {
        let channel = self
            .inner
            .channels
            .get(channel)
            .ok_or_else(|| ChannelError::UnknownChannel(channel.to_owned()))?;
        self.receive_in(channel, receive).await
    }

    async fn receive_in(
        &self,
        channel: &Arc<ChannelConfig>,
        receive: Receive,
    ) -> Result<Accepted, ChannelError> {
        let Some(key) = receive.continuation_key.clone() else {
            // Without a key every message is its own conversation; the
            // generated key is unique, so there is nothing to serialize.
            let token = format!("{}:{}", channel.name, new_id("conv"));
            return self.start_session(channel, token, receive).await;
        };
        if key.is_empty() {
            return Err(ChannelError::InvalidKey("the key is empty".into()));
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(ChannelError::InvalidKey(format!(
                "the key is longer than {MAX_KEY_BYTES} bytes"
            )));
        }
        let token = format!("{}:{key}", channel.name);
        let work = async {
            let delivery_id = receive
                .delivery_id
                .clone()
                .unwrap_or_else(|| DeliveryId::generate().to_string());
            let start = StartSession {
                message: Some(receive.message.clone()),
                mode: receive.mode,
                principal: receive.principal.clone(),
                delivery_id: Some(delivery_id.clone()),
                ..StartSession::default()
            };
            match self
                .inner
                .host
                .session_for_key(&channel.name, &key, start)
                .await?
            {
                KeySession::Found(record) => {
                    self.continue_session(channel, record.id, token.clone(), receive)
                        .await
                }
                KeySession::Started(started) => {
                    Ok(self.started(channel, started, delivery_id).await)
                }
            }
        };
        // The host's claim is what holds across replicas; this in-process
        // lock only spares callers of this process the claim's polling.
        self.inner.locks.run(&token, work).await
    }

    async fn start_session(
        &self,
        channel: &Arc<ChannelConfig>,
        token: String,
        receive: Receive,
    ) -> Result<Accepted, ChannelError> {
        let delivery_id = receive
            .delivery_id
            .unwrap_or_else(|| DeliveryId::generate().to_string());
        let started = self
            .inner
            .host
            .start_session(StartSession {
                message: Some(receive.message),
                mode: receive.mode,
                channel: channel.name.clone(),
                principal: receive.principal,
                continuation_token: Some(token),
                delivery_id: Some(delivery_id.clone()),
                ..StartSession::default()
            })
            .await?;
        Ok(self.started(channel, started, delivery_id).await)
    }

    /// Follows a session this process just created and says so.
    async fn started(
        &self,
        channel: &Arc<ChannelConfig>,
        started: Started,
        delivery_id: String,
    ) -> Accepted {
        self.inner
            .delivery
            .follow(
                &channel.manifest,
                &started.session_id,
                &started.continuation_token,
                DeliveryStart::New,
            )
            .await;
        Accepted {
            session_id: started.session_id,
            continuation_token: started.continuation_token,
            delivery_id: started.delivery_id.unwrap_or(delivery_id),
            turn_id: started.turn_id,
            created: true,
        }
    }

    async fn continue_session(
        &self,
        channel: &Arc<ChannelConfig>,
        id: SessionId,
        token: String,
        receive: Receive,
    ) -> Result<Accepted, ChannelError> {
        // A session this process does not follow yet (created before the
        // server started, or by another component) is picked up here, from
        // its cursor or from before this message.
        self.inner
            .delivery
            .follow(&channel.manifest, &id, &token, DeliveryStart::Resume)
            .await;
        let sent = self
            .inner
            .host
            .send(
                &id,
                FollowUp {
                    message: receive.message,
                    continuation_token: Some(token),
                    admission: receive.admission,
                    delivery_id: receive.delivery_id,
                    principal: receive.principal,
                    ..FollowUp::default()
                },
            )
            .await?;
        Ok(Accepted {
            session_id: sent.session_id,
            continuation_token: sent.continuation_token,
            delivery_id: sent.delivery_id,
            turn_id: sent.turn_id,
            created: false,
        })
    }
}

impl Channels {
    /// The response for a handler's `outcome`, after delivering the
    /// message it asks for (as `principal`, the route's caller).
    async fn handled(
        &self,
        channel: &Arc<ChannelConfig>,
        route: &RouteConfig,
        outcome: handler::Outcome,
        principal: Option<String>,
    ) -> Result<Answer, ApiError> {
        let handler::Outcome {
            status,
            body,
            mut headers,
            deliver,
        } = outcome;
        let accepted = match deliver {
            None => None,
            Some(deliver) => {
                let receive = Receive {
                    message: deliver.message,
                    continuation_key: deliver.key,
                    admission: deliver.admission.unwrap_or(route.route.admission),
                    mode: deliver.mode.unwrap_or(route.route.mode),
                    delivery_id: deliver.delivery_id,
                    principal,
                };
                Some(self.receive_in(channel, receive).await?)
            }
        };
        // With a body of its own, the delivery's identifiers travel in
        // headers.
        if body.is_some()
            && let Some(accepted) = &accepted
        {
            let ids = [
                ("bdk-session-id", Some(accepted.session_id.to_string())),
                ("bdk-delivery-id", Some(accepted.delivery_id.clone())),
                (
                    "bdk-turn-id",
                    accepted.turn_id.as_ref().map(ToString::to_string),
                ),
            ];
            for (name, value) in ids {
                if let Some(value) = value.and_then(|v| HeaderValue::try_from(v).ok()) {
                    headers.insert(HeaderName::from_static(name), value);
                }
            }
        }
        let mut response = match (body, accepted) {
            (Some(body), _) => (status.unwrap_or(StatusCode::OK), Json(body)).into_response(),
            (None, Some(accepted)) => (
                status.unwrap_or(StatusCode::ACCEPTED),
                Json(Reply { ok: True, accepted }),
            )
                .into_response(),
            (None, None) => {
                (status.unwrap_or(StatusCode::OK), Json(json!({"ok": true}))).into_response()
            }
        };
        for (name, value) in &headers {
            response.headers_mut().append(name, value.clone());
        }
        Ok(Answer::Custom(response))
    }
}

fn method_filter(method: RouteMethod) -> MethodFilter {
    match method {
        RouteMethod::Get => MethodFilter::GET,
        RouteMethod::Post => MethodFilter::POST,
        RouteMethod::Put => MethodFilter::PUT,
        RouteMethod::Patch => MethodFilter::PATCH,
        RouteMethod::Delete => MethodFilter::DELETE,
    }
}

/// What one route handler needs.
struct RouteState {
    channels: Channels,
    channel: Arc<ChannelConfig>,
    index: usize,
}

impl RouteState {
    fn route(&self) -> Option<&RouteConfig> {
        self.channel.routes.get(self.index)
    }
}

/// The `202` body: the message was accepted.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "ChannelAccepted")]
struct Reply {
    ok: True,
    #[serde(flatten)]
    accepted: Accepted,
}

async fn handle(state: &RouteState, req: Request) -> Response {
    match accept(state, req).await {
        Ok(Answer::Accepted(accepted)) => {
            (StatusCode::ACCEPTED, Json(Reply { ok: True, accepted })).into_response()
        }
        Ok(Answer::Custom(response)) => response,
        Err(e) => e.into_response(),
    }
}

/// How a route answers a request it accepted.
enum Answer {
    /// The message was delivered: `202` with the session's identifiers.
    Accepted(Accepted),
    /// The route's handler answered this response.
    Custom(Response),
}

/// The path of a channel's own URL.
#[derive(Deserialize, JsonSchema)]
#[schemars(inline)]
#[expect(
    dead_code,
    reason = "describes the generic channel path; the router has the real ones"
)]
struct ChannelPath {
    /// The channel: the file name of `agent/channels/<channel>.toml`.
    #[schemars(regex(pattern = "^[A-Za-z0-9][A-Za-z0-9_-]*$"))]
    channel: String,
}

/// The path of a route below a channel's URL.
#[derive(Deserialize, JsonSchema)]
#[schemars(inline)]
#[expect(
    dead_code,
    reason = "describes the generic channel path; the router has the real ones"
)]
struct ChannelRoutePath {
    /// The channel: the file name of `agent/channels/<channel>.toml`.
    #[schemars(regex(pattern = "^[A-Za-z0-9][A-Za-z0-9_-]*$"))]
    channel: String,
    /// The route's `path` from the manifest, without its leading `/`. It
    /// may span several segments (`task/{id}`), despite the single-segment
    /// template.
    path: String,
}

/// The channel routes for the OpenAPI document: they depend on the agent's
/// manifests, so they are described generically, as
/// `/v1/channels/{channel}` and `/v1/channels/{channel}/{path}` with every
/// method a route may declare (`/v1/info` lists an agent's real ones).
pub(crate) fn documented<S: Clone + Send + Sync + 'static>() -> ApiRouter<S> {
    let mut router = ApiRouter::new();
    for method in RouteMethod::ALL {
        let lower = method.as_str().to_ascii_lowercase();
        let Some(name) = ["get", "post", "put", "patch", "delete"]
            .into_iter()
            .find(|m| *m == lower)
        else {
            continue;
        };
        router = router
            .api_route_docs(
                paths::CHANNEL,
                ApiMethodDocs::new(name, operation(name, false)),
            )
            .api_route_docs(
                paths::CHANNEL_PATH,
                ApiMethodDocs::new(name, operation(name, true)),
            );
    }
    router
}

/// One generic channel operation.
fn operation(method: &str, below: bool) -> Operation {
    let upper = method.to_ascii_uppercase();
    let suffix = if below { "Route" } else { "Root" };
    let mut op = Operation::default();
    let t = TransformOperation::new(&mut op).doc(
        &format!("{method}Channel{suffix}"),
        "channels",
        &format!("A channel route declared with `method = \"{upper}\"`"),
        "Turns the request into a message for a session: authenticate (the server's policy, the route's own bearer token, or an HMAC signature of the raw body), validate the body and query against the route's schemas, render the message, continuation key and delivery id from the route's templates, then continue the session whose token is `<channel>:<key>` or start one. The turn runs in the background. A route with a `handler` program answers what the program answers instead (any status from 200 to 499 and any JSON body), after delivering the message it asks for; a handler without a usable answer is `424 handler_failed`. Only the methods and paths the agent's channel manifests declare exist; the others answer `404 not_found` or `405 method_not_allowed`. A channel with `kind = \"github\"` or `kind = \"slack\"` is served by its pack at `POST /v1/channels/{channel}` instead: it checks the platform's signature, and a Slack channel that cannot learn its bot's identity from Slack answers `503 upstream_unavailable` so that Slack retries.",
    );
    let t = if below {
        t.input::<crate::extract::PathParams<ChannelRoutePath>>()
    } else {
        t.input::<crate::extract::PathParams<ChannelPath>>()
    };
    let accepted = schema_of::<Reply>();
    let mut errors = vec![
        ErrorCode::InvalidJson,
        ErrorCode::InvalidBody,
        ErrorCode::InvalidQuery,
        ErrorCode::InvalidRequest,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::SessionNotFound,
        ErrorCode::SessionCorrupt,
        ErrorCode::MethodNotAllowed,
        ErrorCode::TaskSession,
        ErrorCode::RequestTimeout,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::HandlerFailed,
    ];
    if method == "post" && !below {
        // A Slack channel that cannot learn its bot's identity.
        errors.push(ErrorCode::UpstreamUnavailable);
    }
    let _ = t
        .raw_response(
            202,
            json!({
                "description": "The message was accepted.",
                "content": {"application/json": {"schema": accepted}},
            }),
        )
        .errors(&errors);
    if method != "get" && method != "delete" {
        op.request_body = serde_json::from_value(json!({
            "required": false,
            "description": "Any JSON value, checked against the route's `body_schema` when it has one. An empty body reads as `null`.",
            "content": {"application/json": {"schema": {}}},
        }))
        .ok();
    }
    op.security = ["bearerAuth", "channelBearer", "channelSignature"]
        .into_iter()
        .map(|scheme| SecurityRequirement::from_iter([(scheme.to_owned(), Vec::new())]))
        .chain([SecurityRequirement::new()])
        .collect();
    op
}

/// The request pipeline: auth, body, schemas, then the templates and the
/// session, or the route's handler.
async fn accept(state: &RouteState, req: Request) -> Result<Answer, ApiError> {
    let Some(route) = state.route() else {
        return Err(ApiError::new(ErrorCode::NotFound, "no route for this path"));
    };
    let channel = &state.channel;
    let secrets = &state.channels.inner.secrets;
    let (mut parts, body) = req.into_parts();

    let principal = match &route.auth {
        RouteAuth::Default => Some(
            parts
                .extensions
                .get::<crate::auth::Caller>()
                .map_or_else(|| ANONYMOUS.to_owned(), |c| c.principal.clone()),
        ),
        RouteAuth::Bearer { token_env } => {
            verify::bearer(&parts.headers, secrets, token_env)
                .map_err(|e| refused(&channel.name, &e))?;
            None
        }
        RouteAuth::Hmac { .. } => None,
    };
    let params = if route.route.path.contains('{') {
        RawPathParams::from_request_parts(&mut parts, &())
            .await
            .map_err(|e| ApiError::new(ErrorCode::NotFound, format!("no such resource: {e}")))?
            .iter()
            .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
            .collect::<Map<String, Value>>()
    } else {
        Map::new()
    };
    let headers = parts.headers.clone();
    let method = parts.method.clone();
    let uri = parts.uri.clone();
    let raw = read_body(Request::from_parts(parts, body)).await?;
    if let RouteAuth::Hmac {
        secret_env,
        signature_header,
    } = &route.auth
    {
        verify::hmac(&headers, &raw, secrets, secret_env, signature_header)
            .map_err(|e| refused(&channel.name, &e))?;
    }

    let body = parse_body(&headers, &raw)?;
    if let Some(schema) = &route.body_schema {
        schema.validate(&body).map_err(|errors| {
            ApiError::new(
                ErrorCode::InvalidBody,
                "the body does not match the route's schema",
            )
            .with_errors(errors)
        })?;
    }
    let query = parse_query(&uri)?;
    if let Some(schema) = &route.query_schema {
        schema.validate(&query).map_err(|errors| {
            ApiError::new(
                ErrorCode::InvalidQuery,
                "the query parameters do not match the route's schema",
            )
            .with_errors(errors)
        })?;
    }

    if let Some(handler) = &route.route.handler {
        let request = handler::Request {
            method: method.as_str(),
            path: uri.path(),
            params,
            query,
            headers: &headers,
            body,
            principal: principal.clone(),
        };
        let host = &state.channels.inner.host;
        let outcome = handler::run(host, &channel.name, route, handler, request).await?;
        return state
            .channels
            .handled(channel, route, outcome, principal)
            .await;
    }
    let context = json!({
        "body": body,
        "query": query,
        "headers": header_map(&headers),
        "params": params,
        "channel": channel.name,
        "method": method.as_str(),
        "path": uri.path(),
    });
    let message = match &route.message {
        Some(name) => render(channel, name, "message", &context)?,
        None => default_message(&body, &query)?,
    };
    let continuation_key = route
        .continuation_key
        .as_ref()
        .map(|name| render(channel, name, "continuation_key", &context))
        .transpose()?
        .map(|k| k.trim().to_owned());
    if continuation_key.as_deref() == Some("") {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "`continuation_key` rendered empty for this request",
        ));
    }
    let delivery_id = route
        .delivery_id
        .as_ref()
        .map(|name| render(channel, name, "delivery_id", &context))
        .transpose()?
        .map(|d| d.trim().to_owned())
        .filter(|d| !d.is_empty());

    let receive = Receive {
        message,
        continuation_key,
        admission: route.route.admission,
        mode: route.route.mode,
        delivery_id,
        principal,
    };
    Ok(Answer::Accepted(
        state.channels.receive_in(channel, receive).await?,
    ))
}

/// The whole body of `req`, within the server's limit: `413
/// payload_too_large` over it, the usual answer for a body that cannot be
/// read (cut short, too slow).
pub(crate) async fn read_body(req: Request) -> Result<Bytes, ApiError> {
    let limit = req
        .extensions()
        .get::<crate::extract::BodyLimit>()
        .map_or(crate::extract::DEFAULT_MAX_BODY_BYTES, |l| l.0);
    crate::extract::read_limited(req.into_body(), limit).await
}

/// A refused credential: 401 for the client, the reason in the log.
fn refused(channel: &str, reason: &verify::Refused) -> ApiError {
    match reason {
        verify::Refused::NoSecret(variable) => tracing::error!(
            channel,
            variable = %variable,
            "a channel route refuses every request because its secret is not set; set the variable"
        ),
        other => tracing::debug!(channel, reason = %other, "channel request refused"),
    }
    ApiError::new(
        ErrorCode::Unauthorized,
        "missing or invalid credentials for this channel route",
    )
}

/// The body as JSON: `null` when empty. A declared content type must be
/// JSON; without one the body is read as JSON anyway, since webhook senders
/// are not always careful with headers.
pub(crate) fn parse_body(headers: &HeaderMap, raw: &[u8]) -> Result<Value, ApiError> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let essence = ct
            .to_str()
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let json = essence == "application/json"
            || (essence.starts_with("application/") && essence.ends_with("+json"));
        if !json {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "send the body as application/json",
            ));
        }
    }
    serde_json::from_slice(raw).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body is not valid JSON: {e}"),
        )
    })
}

/// The query string as an object of strings (a repeated name keeps its
/// last value).
fn parse_query(uri: &axum::http::Uri) -> Result<Value, ApiError> {
    let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(uri).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("invalid query string: {e}"),
        )
    })?;
    Ok(Value::Object(
        pairs
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    ))
}

/// Headers by lower-case name; repeated headers joined with `, `, values
/// that are not text left out.
fn header_map(headers: &HeaderMap) -> Map<String, Value> {
    let mut out: Map<String, Value> = Map::new();
    for (name, value) in headers {
        let Ok(value) = value.to_str() else { continue };
        match out.get_mut(name.as_str()) {
            Some(Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(value);
            }
            _ => {
                out.insert(name.as_str().to_owned(), Value::String(value.to_owned()));
            }
        }
    }
    out
}

fn render(
    channel: &ChannelConfig,
    name: &str,
    key: &str,
    context: &Value,
) -> Result<String, ApiError> {
    let rendered = channel
        .templates
        .get_template(name)
        .and_then(|t| t.render(minijinja::Value::from(minijinja::value::Serde(context))));
    rendered.map_err(|e| {
        let detail = e
            .detail()
            .map_or_else(|| e.kind().to_string(), str::to_owned);
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("cannot render `{key}` for this request: {detail}"),
        )
    })
}

/// The message of a route without a `message` template: a string body as
/// it is, any other body as JSON text, else the query as JSON text.
fn default_message(body: &Value, query: &Value) -> Result<String, ApiError> {
    match body {
        Value::String(s) => Ok(s.clone()),
        Value::Null => match query.as_object() {
            Some(q) if !q.is_empty() => Ok(query.to_string()),
            _ => Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "the request carries no message: send a body, or give the route a `message` template",
            )),
        },
        other => Ok(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_messages() {
        assert_eq!(default_message(&json!("hi"), &json!({})).unwrap(), "hi");
        assert_eq!(
            default_message(&json!({"a": 1}), &json!({})).unwrap(),
            r#"{"a":1}"#
        );
        assert_eq!(
            default_message(&Value::Null, &json!({"q": "x"})).unwrap(),
            r#"{"q":"x"}"#
        );
        assert_eq!(
            default_message(&Value::Null, &json!({})).unwrap_err().code,
            ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn bodies_and_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(parse_body(&h, b"  ").unwrap(), Value::Null);
        assert_eq!(parse_body(&h, br#"{"a":1}"#).unwrap(), json!({"a": 1}));
        assert_eq!(
            parse_body(&h, b"{").unwrap_err().code,
            ErrorCode::InvalidJson
        );
        h.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert_eq!(
            parse_body(&h, b"{}").unwrap_err().code,
            ErrorCode::UnsupportedMediaType
        );
        h.insert(
            header::CONTENT_TYPE,
            "application/vnd.github+json; charset=utf-8"
                .parse()
                .unwrap(),
        );
        assert_eq!(parse_body(&h, b"[1]").unwrap(), json!([1]));
        h.append("x-multi", "a".parse().unwrap());
        h.append("x-multi", "b".parse().unwrap());
        assert_eq!(header_map(&h)["x-multi"], "a, b");
    }

    #[test]
    fn queries() {
        let uri: axum::http::Uri = "/x?a=1&b=two%20words&a=3".parse().unwrap();
        assert_eq!(
            parse_query(&uri).unwrap(),
            json!({"a": "3", "b": "two words"})
        );
        let none: axum::http::Uri = "/x".parse().unwrap();
        assert_eq!(parse_query(&none).unwrap(), json!({}));
    }
}
