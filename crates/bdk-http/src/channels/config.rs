//! What the router runs for a channel: the typed manifest discovery built
//! (`bdk_core::project::ChannelManifest`) with its schemas and templates
//! compiled and its signature header in axum's type.
//!
//! Discovery has checked the manifest and settled its defaults, so nothing
//! is parsed or checked again here. Compiling can still fail for what only
//! this layer uses (a signature header that is not an HTTP header name, a
//! schema the validator refuses): that route is left out and the reason
//! logged, never a panic at startup.

use axum::http::HeaderName;
use bdk_core::project::{ChannelManifest, ChannelRoute, RouteAuth};
use bdk_core::tool::schema::InputValidator;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};

/// Why a route cannot be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// One route is unusable.
    #[error("channel `{channel}` route {index} is invalid: {message}")]
    Route {
        /// The channel.
        channel: String,
        /// The route's position in `[[routes]]`.
        index: usize,
        /// What is wrong.
        message: String,
    },
}

/// How a route authenticates its caller, with the signature header parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Auth {
    /// The server's auth chain.
    Default,
    /// `Authorization: Bearer <token>`, the token read from `token_env`.
    Bearer { token_env: String },
    /// HMAC-SHA256 of the raw body, `sha256=<hex>` in `signature_header`.
    Hmac {
        secret_env: String,
        signature_header: HeaderName,
    },
}

/// One declared route, ready to serve.
#[derive(Debug)]
pub(crate) struct RouteConfig {
    /// The route as discovery typed it.
    pub(crate) route: ChannelRoute,
    pub(crate) auth: Auth,
    pub(crate) body_schema: Option<InputValidator>,
    pub(crate) query_schema: Option<InputValidator>,
    /// Template names in the channel's environment.
    pub(crate) message: Option<String>,
    pub(crate) continuation_key: Option<String>,
    pub(crate) delivery_id: Option<String>,
}

/// A channel ready to serve.
pub(crate) struct ChannelConfig {
    pub(crate) name: String,
    /// The manifest, as discovery typed it (its events map is delivered
    /// by core's `ChannelEvents`).
    pub(crate) manifest: std::sync::Arc<ChannelManifest>,
    pub(crate) routes: Vec<RouteConfig>,
    /// The channel's compiled templates, named `routes[<i>].<key>`.
    pub(crate) templates: Environment<'static>,
}

impl std::fmt::Debug for ChannelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelConfig")
            .field("name", &self.name)
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

/// The template environment every channel uses. Printing an undefined value
/// is an error (a key rendered from a missing field would silently merge
/// unrelated conversations), while `is defined` tests and the `default`
/// filter still work on missing fields. Output is plain text, never HTML.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::SemiStrict);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env
}

/// Compiles one manifest. Returns the channel and the problems of the
/// routes that were left out (logged by the caller).
pub(crate) fn compile(manifest: &ChannelManifest) -> (ChannelConfig, Vec<ConfigError>) {
    let mut templates = environment();
    let mut routes = Vec::new();
    let mut skipped = Vec::new();
    for (index, route) in manifest.routes.iter().enumerate() {
        match compile_route(index, route, &mut templates) {
            Ok(route) => routes.push(route),
            Err(message) => skipped.push(ConfigError::Route {
                channel: manifest.name.clone(),
                index,
                message,
            }),
        }
    }
    (
        ChannelConfig {
            name: manifest.name.clone(),
            manifest: std::sync::Arc::new(manifest.clone()),
            routes,
            templates,
        },
        skipped,
    )
}

fn compile_route(
    index: usize,
    route: &ChannelRoute,
    templates: &mut Environment<'static>,
) -> Result<RouteConfig, String> {
    let auth = match &route.auth {
        RouteAuth::Default => Auth::Default,
        RouteAuth::Bearer { token_env } => Auth::Bearer {
            token_env: token_env.clone(),
        },
        RouteAuth::Hmac {
            secret_env,
            signature_header,
        } => Auth::Hmac {
            secret_env: secret_env.clone(),
            signature_header: HeaderName::try_from(signature_header.to_ascii_lowercase()).map_err(
                |_| format!("`signature_header` `{signature_header}` is not a header name"),
            )?,
        },
    };
    let schema = |key: &str, value: &Option<serde_json::Value>| {
        value
            .as_ref()
            .map(|s| InputValidator::new(s).map_err(|e| format!("`{key}`: {e}")))
            .transpose()
    };
    let body_schema = schema("body_schema", &route.body_schema)?;
    let query_schema = schema("query_schema", &route.query_schema)?;
    let mut template = |key: &str, source: &Option<String>| -> Result<Option<String>, String> {
        let Some(source) = source else {
            return Ok(None);
        };
        let name = format!("routes[{index}].{key}");
        templates
            .add_template_owned(name.clone(), source.clone())
            .map_err(|e| format!("`{key}` is not a valid template: {e}"))?;
        Ok(Some(name))
    };
    let message = template("message", &route.message)?;
    let continuation_key = template("continuation_key", &route.continuation_key)?;
    let delivery_id = template("delivery_id", &route.delivery_id)?;
    Ok(RouteConfig {
        route: route.clone(),
        auth,
        body_schema,
        query_schema,
        message,
        continuation_key,
        delivery_id,
    })
}
