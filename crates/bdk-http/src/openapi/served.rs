//! The OpenAPI document as served: `GET /v1/openapi.json` under each agent
//! (with the agent's base path as its server) and at the root of a
//! multi-agent server (with a `{slug}` variable). The generic document
//! comes from the app's shared state or from the caller, so the route
//! table (`routes.rs`) registers this handler without importing the
//! builder that reads the route table.

use std::sync::Arc;

use aide::axum::ApiRouter;
use aide::axum::routing::get_with;
use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use bdk_api::paths;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use crate::api::{Describe, open};
use crate::described;
use crate::state::Agent;

/// The `x-bdk-mount` of paths served at the root of a multi-agent server.
pub(crate) const HOST: &str = "host";

/// An OpenAPI document, as served.
#[derive(Serialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub(crate) struct Document(#[schemars(with = "described::OpenApiDocument")] Value);

/// `GET /v1/openapi.json` under an agent's base path: the document, with
/// the agent's base path as its server.
pub(crate) async fn agent_document(State(agent): State<Arc<Agent>>) -> Json<Document> {
    let url = if agent.prefix.is_empty() {
        "/".to_owned()
    } else {
        agent.prefix.clone()
    };
    let mut server = json!({ "url": url });
    if let Some(slug) = &agent.slug {
        server["description"] = json!(format!("the agent `{slug}`"));
    }
    let mut doc = with_servers((agent.shared.openapi)(), json!([server]));
    if agent.slug.is_none() {
        // Single mode serves no host routes (the agent sits at the root):
        // describe exactly the routes this layout answers.
        if let Some(paths) = doc["paths"].as_object_mut() {
            paths.retain(|_, item| item["x-bdk-mount"] != json!([HOST]));
        }
    }
    Json(Document(doc))
}

/// The root copy of a multi-agent server, whose server names the agent
/// with a `{slug}` variable.
async fn host_document(State(doc): State<Arc<Value>>) -> Json<Document> {
    Json(Document(Value::clone(&doc)))
}

/// The host route of a multi-agent app, described.
pub(super) fn host_api() -> ApiRouter<Arc<Value>> {
    open(ApiRouter::new().api_route(paths::OPENAPI, get_with(host_document, openapi_doc)))
}

/// The host route of a multi-agent app serving `slugs`:
/// `GET /v1/openapi.json` at the root, serving `doc` (the generic document).
pub(super) fn host_routes(doc: Value, slugs: Vec<String>) -> axum::Router {
    let servers = match slugs.first() {
        Some(first) => json!([{
            "url": "/{slug}",
            "description": "one of the agents this server hosts",
            "variables": {"slug": {"default": first, "enum": slugs}},
        }]),
        None => json!([{ "url": "/" }]),
    };
    axum::Router::from(host_api()).with_state(Arc::new(with_servers(doc, servers)))
}

/// `doc` with the top-level `servers` entry `servers`.
fn with_servers(mut doc: Value, servers: Value) -> Value {
    doc["servers"] = servers;
    doc
}

/// `GET /v1/openapi.json`, under each agent and at the host root.
pub(crate) fn openapi_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.doc(
        "getOpenApi",
        "discovery",
        "This document",
        "The OpenAPI description of the HTTP surface. Under an agent its `servers` entry is the agent's base path; at the root of a multi-agent server it is `/{slug}` with the agents as the variable's values.",
    )
}
