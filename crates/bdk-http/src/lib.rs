//! The HTTP surface of `bdk serve`: an axum router over the core host.
//!
//! [`App::new`] builds the whole application from one [`Mount`] per agent
//! and a [`Config`]: a router (routes only; building it starts no task) and
//! the app's [`Background`] work, which the server's owner starts beside
//! the router and stops at shutdown (the schedule cadence, and event
//! delivery for channel sessions that existed before the server started).
//! [`app`] is the router alone. The router serves per agent the session
//! API (start, follow-up, NDJSON stream, events, stop, list, cost,
//! approvals), direct tool calls, discovery
//! (`/v1/info`, `/v1/tools`, `/v1/meta`, `/v1/health`, `/v1/logs`), the
//! A/B report (`/v1/abs`),
//! artifacts, the agent's custom channel routes ([`channels`]) and the
//! OpenAPI document ([`openapi`]) and the web playground (`/playground`,
//! unless turned off); at the host root the agent index, health, the
//! OpenAPI document and `/docs`.
//!
//! Features, all on by default: `mcp` (the MCP endpoints, over `bdk-mcp`),
//! `evals` (the eval routes, over `bdk-evals`), `scheduler` (schedules
//! firing on their cadence and the dev schedule and reminder routes, over
//! `bdk-scheduler`) and `playground` (the embedded web UI). A server without them answers 404 on their routes and
//! leaves them out of the OpenAPI document.
//!
//! Layout: when every mount has a slug, each agent lives under
//! `/<slug>/v1/*` and the host routes sit at the root; one mount without a
//! slug is served at `/v1/*` (`--mode single`).
//!
//! Every error is `{"ok": false, "error": "<code>", "message": "..."}`; the
//! mapping from core error kinds to status codes lives in one place (the
//! `error` module). Handlers are thin: extract, make one call into
//! [`bdk_core::host::Host`], answer.
//!
//! This is the only crate that knows axum. It knows nothing of the CLI: the
//! binary builds the hosts, the listener and the log pipeline, and runs the
//! app with [`serve_with`] (and starts its [`Background`]), which hands
//! peer addresses to the default auth policy, bounds what each connection may hold (the connection limit, the
//! header, body and idle timeouts of [`Connections`]) and stops within a
//! grace period of the shutdown signal, whatever clients do.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::{Extension, Router};
use tokio_util::sync::CancellationToken;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use crate::state::{Agent, Shared};

mod abs;
mod api;
mod artifacts;
mod auth;
mod background;
pub mod channels;
mod cost;
mod described;
#[cfg(feature = "scheduler")]
mod dev;
#[cfg(feature = "scheduler")]
mod dev_reminders;
mod discovery;
mod docs;
mod error;
#[cfg(feature = "evals")]
mod evals;
mod extract;
mod github;
mod logs;
#[cfg(feature = "mcp")]
mod mcp;
pub mod openapi;
#[cfg(feature = "playground")]
mod playground;
mod routes;
mod server;
mod sessions;
mod slack;
mod state;
mod stream;
mod tools;

pub use auth::policy::{Auth, BearerToken};
pub use background::{Background, Schedules, Workers};
pub use error::ErrorCode;
pub use extract::DEFAULT_MAX_BODY_BYTES;
pub use logs::{LogBuffer, LogLine};
pub use server::{
    Connections, DEFAULT_BODY_READ_TIMEOUT, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_SHUTDOWN_GRACE, MAX_DEFAULT_CONNECTIONS, default_max_connections, serve, serve_with,
};
pub use state::{Mount, Reload, ReloadStatus};
pub use stream::open_streams;

/// Settings of the whole app.
#[derive(Clone, Debug)]
pub struct Config {
    /// The auth policy of every agent route (health, meta, the index and docs run none).
    pub auth: Auth,
    /// `--dev`: loopback callers see every session, not only their own.
    pub dev: bool,
    /// The playground is mounted (adds `playgroundUrl` to responses); a
    /// build without the `playground` feature mounts none.
    pub playground: bool,
    /// Serve `/docs`.
    pub docs: bool,
    /// Largest accepted request body; beyond it a request gets 413.
    pub max_body_bytes: usize,
    /// NDJSON stream keep-alive: a bare `"\n"` line after this long without
    /// an event. `Duration::ZERO` turns heartbeats off.
    pub heartbeat: Duration,
    /// The ring buffer served at `/v1/logs`.
    pub logs: LogBuffer,
    /// Cancelled on shutdown: open streams end cleanly, and so does the
    /// event delivery of channel sessions.
    pub shutdown: CancellationToken,
    /// Connection limits and timeouts. [`app`] applies the request body
    /// deadline; hand the same value to [`serve_with`] for the rest.
    pub connections: Connections,
}

/// The default stream heartbeat: 15 seconds.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(15);
/// The default capacity of the log ring buffer.
pub const DEFAULT_LOG_LINES: usize = 2000;

impl Default for Config {
    fn default() -> Self {
        Self {
            auth: Auth::LocalDevStrict,
            dev: false,
            playground: false,
            docs: true,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            heartbeat: DEFAULT_HEARTBEAT,
            logs: LogBuffer::new(DEFAULT_LOG_LINES),
            shutdown: CancellationToken::new(),
            connections: Connections::default(),
        }
    }
}

/// Path segments an agent slug may not take, because host routes use them.
pub const RESERVED_SLUGS: &[&str] = &["v1", "playground", "docs"];

/// Checks an agent slug: `[A-Za-z0-9][A-Za-z0-9_-]*`, at most 64 bytes, and
/// not one of [`RESERVED_SLUGS`]. Returns why it is refused.
pub fn check_slug(slug: &str) -> Result<(), String> {
    let mut bytes = slug.bytes();
    let shape = match bytes.next() {
        Some(first) => {
            first.is_ascii_alphanumeric()
                && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        }
        None => false,
    };
    if !shape || slug.len() > 64 {
        return Err(format!(
            "slug `{slug}` must match [A-Za-z0-9][A-Za-z0-9_-]* and be at most 64 characters"
        ));
    }
    if RESERVED_SLUGS.contains(&slug) {
        return Err(format!(
            "slug `{slug}` is reserved for host routes; pick another name"
        ));
    }
    Ok(())
}

/// The router of the whole app, without its [`Background`] work: what
/// [`App::new`] builds, for callers that start no background work.
pub fn app(mounts: Vec<Mount>, config: Config) -> Router {
    App::new(mounts, config).router
}

/// The whole app: its routes and the background work they go with.
pub struct App {
    /// Every route. Run it with [`serve_with`] (or [`serve`]), which add
    /// the connection limits, or with
    /// `axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())`:
    /// without the peer address the default auth policy admits no one.
    pub router: Router,
    /// The work the app does on its own, not yet started: start it with
    /// [`Background::start`] beside the router and stop it at shutdown.
    pub background: Background,
}

impl App {
    /// Builds the router and prepares the background work; starts no task.
    ///
    /// Mounts that cannot be served are skipped with an error in the log
    /// (the CLI validates slugs before it gets here): in a multi-agent app
    /// a mount without a slug, a slug that fails [`check_slug`], or a
    /// repeated slug.
    pub fn new(mounts: Vec<Mount>, config: Config) -> Self {
        build(mounts, config)
    }
}

fn build(mounts: Vec<Mount>, config: Config) -> App {
    // A build without the playground mounts none and advertises none.
    #[cfg(not(feature = "playground"))]
    if config.playground {
        tracing::warn!(
            "this build of bdk-http has no playground (its `playground` feature is off); none is served"
        );
    }
    let shared = Arc::new(Shared {
        auth: auth::policy::Policy::new(&config.auth),
        dev: config.dev,
        playground: config.playground && cfg!(feature = "playground"),
        docs: config.docs,
        heartbeat: (!config.heartbeat.is_zero()).then_some(config.heartbeat),
        logs: config.logs.clone(),
        shutdown: config.shutdown.clone(),
        openapi: openapi::document,
    });
    let mut background = Background::new(config.dev, config.shutdown.clone());

    let single = mounts.len() == 1 && mounts.iter().all(|m| m.slug.is_none());
    let mut router = Router::new();
    let mut github = Vec::new();
    if single {
        for mount in mounts {
            router = router.merge(agent_router(mount, &shared, &mut background, &mut github));
        }
    } else {
        let mut index = Vec::new();
        let mut slugs = Vec::new();
        let mut seen = HashSet::new();
        for mount in mounts {
            let Some(slug) = mount.slug.clone() else {
                tracing::error!(
                    agent = %mount.host.project().name,
                    "an agent without a slug cannot share the app with other agents; it is not served"
                );
                continue;
            };
            if let Err(reason) = check_slug(&slug) {
                tracing::error!(agent = %mount.host.project().name, %reason, "agent not served");
                continue;
            }
            if !seen.insert(slug.clone()) {
                tracing::error!(%slug, "two agents share this slug; only the first is served");
                continue;
            }
            index.push(discovery::IndexEntry::new(&mount, &slug));
            slugs.push(slug.clone());
            let nested = agent_router(mount, &shared, &mut background, &mut github);
            router = router.nest(&format!("/{slug}"), nested);
        }
        router = router.merge(discovery::host_routes(index, Arc::clone(&shared)));
        router = router.merge(openapi::host_routes(slugs));
    }
    // GitHub deliveries from local tooling, handed to every GitHub channel.
    router = router.merge(github::host_route(github));
    if config.docs {
        router = router.merge(docs::routes());
    }

    let body_timeout = config.connections.body_read_timeout;
    let router = router
        .fallback(error::not_found)
        // Installed last so that it reaches every route registered above,
        // nested ones included.
        .method_not_allowed_fallback(error::method_not_allowed)
        // Every request body must arrive in full within the body timeout
        // of its headers, however it is read (a slow body is `408`).
        .layer(tower::util::MapRequestLayer::new(
            move |req: axum::extract::Request| server::with_body_deadline(req, body_timeout),
        ))
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(Extension(extract::BodyLimit(config.max_body_bytes)))
        .layer(TraceLayer::new_for_http())
        // A last resort: no input is meant to reach it (the tests check
        // that every hostile request gets its documented code), but a bug
        // must still answer with the JSON error shape, not a dropped
        // connection.
        .layer(CatchPanicLayer::custom(error::panicked));
    App { router, background }
}

/// The routes of one agent, relative to its prefix; its background work
/// joins `background`.
fn agent_router(
    mount: Mount,
    shared: &Arc<Shared>,
    background: &mut Background,
    github: &mut Vec<Arc<github::GithubMount>>,
) -> Router {
    let prefix = mount
        .slug
        .as_ref()
        .map_or_else(String::new, |s| format!("/{s}"));
    // The channels are built first: the schedule dispatcher hands TOML
    // schedules to this same instance, so they share its per-key locks, and
    // the background work resumes delivery through it, so a session is
    // followed once.
    let host = mount.host;
    let channels = (!host.project().channels.is_empty()).then(|| {
        channels::Channels::new(
            host.clone(),
            &host.project().channels,
            shared.shutdown.clone(),
            channels::Options::default(),
        )
    });
    let github_mount = match (&channels, host.extension::<bdk_github::Github>()) {
        (Some(channels), Some(pack)) => Some(Arc::new(github::GithubMount {
            agent: mount
                .slug
                .clone()
                .unwrap_or_else(|| host.project().name.clone()),
            channels: channels.clone(),
            github: (*pack).clone(),
            dev: shared.dev,
        })),
        _ => None,
    };
    let slack_mount = match (&channels, host.extension::<bdk_slack::Slack>()) {
        (Some(channels), Some(pack)) => Some(Arc::new(slack::SlackMount {
            channels: channels.clone(),
            host: host.clone(),
            slack: (*pack).clone(),
            dev: shared.dev,
        })),
        _ => None,
    };
    #[cfg(feature = "scheduler")]
    let schedules = dev::dispatcher(&host, channels.as_ref());
    background.add(
        host.clone(),
        #[cfg(feature = "scheduler")]
        schedules.clone(),
        channels.clone(),
    );
    let agent = Arc::new(Agent {
        #[cfg(feature = "scheduler")]
        schedules,
        #[cfg(feature = "evals")]
        evals: evals::state::Evals::new(host.clone(), shared.shutdown.clone()),
        host,
        slug: mount.slug,
        prefix,
        diagnostics: mount.diagnostics,
        reload: mount.reload,
        shared: Arc::clone(shared),
    });

    // The route table (`routes`) is also what the OpenAPI document is
    // generated from.
    let protected = routes::protected_routes().route_layer(axum::middleware::from_fn_with_state(
        Arc::clone(shared),
        auth::authenticate,
    ));
    let open = routes::open_routes();
    // The web playground (`--no-playground` leaves it out).
    #[cfg(feature = "playground")]
    let open = if shared.playground {
        open.merge(playground::routes())
    } else {
        open
    };

    let mut router = Router::from(protected.merge(open)).with_state(Arc::clone(&agent));

    // Custom channel routes, under `/v1/channels/<id>`. Routes declared with
    // `auth = "default"` run this app's auth chain; bearer and HMAC routes
    // check their own credentials, so the chain is applied per route by the
    // channels module rather than around the whole nest.
    if let Some(channels) = channels {
        let auth = axum::middleware::from_fn_with_state(Arc::clone(shared), auth::authenticate);
        let mut nested = channels.router_with_auth(auth);
        // GitHub channels: the signature is their credential, as for HMAC
        // routes.
        if let Some(m) = github_mount {
            nested = nested.merge(github::channel_routes(&m));
            github.push(m);
        }
        // Slack channels: the request signature is their credential.
        if let Some(m) = slack_mount {
            nested = nested.merge(slack::channel_routes(&m));
        }
        router = router.nest(bdk_api::paths::CHANNELS, nested);
    }
    router
}
