//! The web playground: a static single-page app, embedded in the binary and
//! served under every agent at `/playground` (the page) and
//! `/playground/assets/<file>` (its scripts, styles and icon).
//!
//! The app is hand-written JavaScript modules and CSS under
//! `crates/bdk-http/playground/`, committed as they are served: no build
//! step, no network at build time, nothing loaded from elsewhere at run time.
//! It talks to the agent only through the public HTTP API, with the same
//! auth as any other client (the token field sends `Authorization: Bearer`).
//!
//! The page and the assets hold no agent data, so they run no auth: a
//! browser must be able to load the page before it has a token. Every
//! answer carries a strict Content-Security-Policy (scripts, styles and
//! fetches from this origin only, no inline code, no framing), `nosniff`
//! and an `ETag`; assets are revalidated (`no-cache`) so an upgraded binary
//! is picked up at once, and a matching `If-None-Match` gets `304`.
//!
//! Asset names are looked up in a fixed table: anything else, a traversal
//! attempt included, is `404 not_found`. `--no-playground` leaves these
//! routes out of the router altogether.

use std::sync::{Arc, LazyLock};

use aide::axum::ApiRouter;
use aide::axum::routing::get_with;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::api::{Describe, open};
use crate::discovery::escape;
use crate::error::{ApiError, ErrorCode};
use crate::state::Agent;

/// The policy of every playground answer. `connect-src 'self'` is what
/// keeps the app on the public API of the server that served it.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; media-src data:; connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page, with `{{BASE}}` where the agent's base path goes.
const INDEX: &str = include_str!("../playground/index.html");

/// One embedded asset.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every asset the page may load, by file name.
const ASSETS: &[Asset] = &[
    Asset {
        name: "abs.js",
        content_type: JS,
        body: include_bytes!("../playground/abs.js"),
    },
    Asset {
        name: "agent.js",
        content_type: JS,
        body: include_bytes!("../playground/agent.js"),
    },
    Asset {
        name: "api.js",
        content_type: JS,
        body: include_bytes!("../playground/api.js"),
    },
    Asset {
        name: "app.js",
        content_type: JS,
        body: include_bytes!("../playground/app.js"),
    },
    Asset {
        name: "blocks.js",
        content_type: JS,
        body: include_bytes!("../playground/blocks.js"),
    },
    Asset {
        name: "chat.js",
        content_type: JS,
        body: include_bytes!("../playground/chat.js"),
    },
    Asset {
        name: "evals.js",
        content_type: JS,
        body: include_bytes!("../playground/evals.js"),
    },
    Asset {
        name: "icon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("../playground/icon.svg"),
    },
    Asset {
        name: "logs.js",
        content_type: JS,
        body: include_bytes!("../playground/logs.js"),
    },
    Asset {
        name: "markdown.js",
        content_type: JS,
        body: include_bytes!("../playground/markdown.js"),
    },
    Asset {
        name: "runs.js",
        content_type: JS,
        body: include_bytes!("../playground/runs.js"),
    },
    Asset {
        name: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../playground/style.css"),
    },
    Asset {
        name: "ui.js",
        content_type: JS,
        body: include_bytes!("../playground/ui.js"),
    },
];

/// The strong validator of each asset, in [`ASSETS`] order.
static ETAGS: LazyLock<Vec<String>> =
    LazyLock::new(|| ASSETS.iter().map(|a| etag_of(a.body)).collect());

fn etag_of(body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// The path of an asset.
#[derive(Deserialize, JsonSchema)]
#[schemars(inline)]
struct AssetPath {
    /// The file name, for example `app.js`.
    file: String,
}

/// The headers of every playground answer worth documenting.
fn headers_doc() -> Value {
    json!({
        "ETag": {"schema": {"type": "string"}, "description": "A strong validator; send it back in `If-None-Match` to get `304`."},
        "Content-Security-Policy": {"schema": {"type": "string"}, "description": "Scripts, styles and fetches from this origin only."},
    })
}

/// The playground routes of one agent, relative to its base path. None runs
/// auth.
pub(crate) fn routes() -> ApiRouter<Arc<Agent>> {
    let not_modified = json!({"description": "The copy named by `If-None-Match` is current."});
    let routes = ApiRouter::new()
        .api_route(
            "/playground",
            get_with(page, |op| {
                op.doc(
                    "getPlayground",
                    "playground",
                    "The web playground",
                    "The playground's page for this agent. It holds no agent data, so it runs no auth; the app calls the routes of this API with the token typed into its navbar. A `sessionId` query opens that session. Absent with `--no-playground`.",
                )
                .raw_response(
                    200,
                    json!({
                        "description": "The page.",
                        "headers": headers_doc(),
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    }),
                )
                .raw_response(304, not_modified.clone())
            }),
        )
        .api_route(
            "/playground/assets/{file}",
            get_with(asset, |op| {
                op.doc(
                    "getPlaygroundAsset",
                    "playground",
                    "One file of the web playground",
                    "A script, style sheet or icon of the playground, embedded in the binary. Any other name is `404 not_found`. Absent with `--no-playground`.",
                )
                .raw_response(
                    200,
                    json!({
                        "description": "The file, as `text/javascript`, `text/css` or `image/svg+xml`.",
                        "headers": headers_doc(),
                        "content": {"*/*": {"schema": {"type": "string"}}},
                    }),
                )
                .raw_response(304, not_modified)
                .errors(&[ErrorCode::NotFound])
            }),
        );
    open(routes)
}

/// `GET /playground`: the page, told where the agent's API lives.
async fn page(State(agent): State<Arc<Agent>>, headers: HeaderMap) -> Response {
    let body = INDEX.replace("{{BASE}}", &escape(&agent.prefix));
    let etag = etag_of(body.as_bytes());
    respond(
        &headers,
        "text/html; charset=utf-8",
        &etag,
        body.into_bytes(),
    )
}

/// `GET /playground/assets/{file}`: one embedded file, or 404.
async fn asset(
    file: Result<Path<AssetPath>, axum::extract::rejection::PathRejection>,
    headers: HeaderMap,
) -> Response {
    let found = file.ok().and_then(|Path(AssetPath { file: name })| {
        ASSETS
            .iter()
            .position(|a| a.name == name)
            .map(|i| (&ASSETS[i], &ETAGS[i]))
    });
    match found {
        Some((asset, etag)) => respond(&headers, asset.content_type, etag, asset.body.to_vec()),
        None => {
            ApiError::new(ErrorCode::NotFound, "no playground asset by this name").into_response()
        }
    }
}

/// A `200` with the security and caching headers, or `304` when the
/// client's copy is current.
fn respond(headers: &HeaderMap, content_type: &'static str, etag: &str, body: Vec<u8>) -> Response {
    let current = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response = if current {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
            body,
        )
            .into_response()
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_the_page_names_is_embedded() {
        for (i, _) in INDEX.match_indices("/playground/assets/") {
            let rest = &INDEX[i + "/playground/assets/".len()..];
            let name: String = rest.chars().take_while(|c| *c != '"').collect();
            assert!(
                ASSETS.iter().any(|a| a.name == name),
                "index.html loads {name}, which is not embedded"
            );
        }
    }

    #[test]
    fn module_imports_resolve_to_embedded_assets() {
        for a in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            let text = std::str::from_utf8(a.body).unwrap_or_default();
            for (i, _) in text.match_indices("from \"./") {
                let rest = &text[i + "from \"./".len()..];
                let name: String = rest.chars().take_while(|c| *c != '"').collect();
                assert!(
                    ASSETS.iter().any(|b| b.name == name),
                    "{} imports {name}, which is not embedded",
                    a.name
                );
            }
        }
    }

    #[test]
    fn every_file_of_the_app_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("playground");
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                name == "index.html" || ASSETS.iter().any(|a| a.name == name),
                "playground/{name} is not in ASSETS"
            );
        }
    }

    #[test]
    fn etags_are_quoted_and_differ_by_content() {
        assert!(etag_of(b"a").starts_with('"') && etag_of(b"a").ends_with('"'));
        assert_ne!(etag_of(b"a"), etag_of(b"b"));
    }
}
