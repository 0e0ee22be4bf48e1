//! The resources the agent folder declares in `resources.toml`
//! (`bdk_core::project::AgentResources`): fixed resources served from a
//! file of the agent folder, and templates whose reads call a server tool.
//!
//! They belong to the agent, not to a session: every caller of the
//! endpoint may list and read them, and a template's tool runs as a direct
//! call owned by the caller (`Host::call_tool`, as on `/v1/mcp/tools`), so
//! it meets the same schema validation and exposure rules. The file of a
//! fixed resource is read on each request under the same confinement as a
//! workspace file (opened beneath the agent folder's handle), so a file
//! swapped for a symlink after `bdk validate` is still refused.

use bdk_core::host::{CallOrigin, DirectCall, Host, HostError};
use bdk_core::project::{AgentResource, AgentResourceTemplate, AgentResources};
use rmcp::ErrorData;
use rmcp::model::{CompletionInfo, Resource, ResourceContents, ResourceTemplate};
use serde_json::{Map, Value};

use super::completion;
use super::content::{self, AGENT_FOLDER, MAX_READ_BYTES, internal, not_found, too_large};
use super::principal::Principal;

/// How much of a tool's error a refusal repeats.
const ECHO_CHARS: usize = 300;

/// The declared resources, for the first page of `resources/list`.
pub(crate) fn list(declared: &AgentResources) -> Vec<Resource> {
    declared.resources.iter().map(resource).collect()
}

fn resource(r: &AgentResource) -> Resource {
    let mut out = Resource::new(r.uri.clone(), r.name.clone());
    if let Some(title) = &r.title {
        out = out.with_title(title.clone());
    }
    if let Some(description) = &r.description {
        out = out.with_description(description.clone());
    }
    if let Some(mime) = &r.mime_type {
        out = out.with_mime_type(mime.clone());
    }
    out
}

/// The declared templates, for `resources/templates/list`.
pub(crate) fn templates(declared: &AgentResources) -> Vec<ResourceTemplate> {
    declared.templates.iter().map(template).collect()
}

fn template(t: &AgentResourceTemplate) -> ResourceTemplate {
    let mut out = ResourceTemplate::new(t.uri_template.as_str(), t.name.clone());
    if let Some(title) = &t.title {
        out = out.with_title(title.clone());
    }
    if let Some(description) = &t.description {
        out = out.with_description(description.clone());
    }
    if let Some(mime) = &t.mime_type {
        out = out.with_mime_type(mime.clone());
    }
    out
}

/// `resources/read` of a declared URI: a fixed resource whose URI is `raw`
/// exactly, else the first template that matches it. `Ok(None)` when the
/// agent declares nothing under `raw`.
pub(crate) async fn read(
    host: &Host,
    principal: &Principal,
    raw: &str,
) -> Result<Option<ResourceContents>, ErrorData> {
    let project = host.project();
    let declared = &project.resources;
    if let Some(r) = declared.resources.iter().find(|r| r.uri == raw) {
        let folder = host.trees().root(&project.agent_dir);
        let (bytes, guessed) = content::read_confined(&folder, &r.file, &AGENT_FOLDER)
            .await
            .map_err(|refusal| refusal.into_error(raw))?;
        let mime = r.mime_type.clone().unwrap_or(guessed);
        return Ok(Some(content::contents(raw, &mime, bytes)));
    }
    for t in &declared.templates {
        if let Some(vars) = t.uri_template.matches(raw) {
            return call(host, principal, t, vars, raw).await.map(Some);
        }
    }
    Ok(None)
}

/// Reads a templated resource: the template's tool called with its
/// variables as the input, the result served as text.
async fn call(
    host: &Host,
    principal: &Principal,
    t: &AgentResourceTemplate,
    vars: Vec<(String, String)>,
    raw: &str,
) -> Result<ResourceContents, ErrorData> {
    let mut input = Map::new();
    for (name, value) in vars {
        if let Some(why) = hostile(&value) {
            return Err(not_found(raw, &format!("`{name}` {why}")));
        }
        input.insert(name, Value::String(value));
    }
    let outcome = host
        .call_tool(DirectCall {
            name: t.tool.clone(),
            input: Value::Object(input),
            principal: Some(principal.name.clone()),
            origin: CallOrigin::Mcp,
            ..DirectCall::default()
        })
        .await
        .map_err(|e| match e {
            // The variables did not fit the tool's schema: the URI names
            // nothing this template serves.
            HostError::InvalidToolInput { errors, .. } => not_found(
                raw,
                &format!(
                    "the template's tool refused the input: {}",
                    echo(&errors.join("; "))
                ),
            ),
            other => internal(raw, &other),
        })?;
    let text = match outcome.result {
        Value::String(s) => s,
        other => other.to_string(),
    };
    if outcome.is_error {
        return Err(not_found(
            raw,
            &format!(
                "the template's tool answered with an error: {}",
                echo(&text)
            ),
        ));
    }
    if text.len() as u64 > MAX_READ_BYTES {
        return Err(too_large(raw, "the template's tool answered with more"));
    }
    let mime = t.mime_type.as_deref().unwrap_or("text/plain");
    Ok(ResourceContents::TextResourceContents {
        uri: raw.to_owned(),
        mime_type: Some(mime.to_owned()),
        text,
        meta: None,
    })
}

/// Why a variable's decoded value is not passed to a tool: one that holds a
/// path separator, names `.` or `..`, or carries control characters would
/// let a URI steer a tool that builds paths or commands from it, and simple
/// expansion never produces a value a caller could not send otherwise.
fn hostile(value: &str) -> Option<&'static str> {
    if value.contains(['/', '\\']) {
        return Some("may not hold `/` or `\\`");
    }
    if value == "." || value == ".." {
        return Some("may not be `.` or `..`");
    }
    if value.chars().any(char::is_control) {
        return Some("may not hold control characters");
    }
    None
}

/// A message from a tool, shortened for an error.
fn echo(raw: &str) -> String {
    let mut out: String = raw.chars().take(ECHO_CHARS).collect();
    if out.len() < raw.len() {
        out.push('…');
    }
    out
}

/// `completion/complete` for a variable of a declared template: nothing to
/// suggest (the values are the tool's to know). `None` when `template` is
/// not a declared one.
pub(crate) fn complete(
    declared: &AgentResources,
    template: &str,
    argument: &str,
) -> Option<Result<CompletionInfo, ErrorData>> {
    let t = declared
        .templates
        .iter()
        .find(|t| t.uri_template.as_str() == template)?;
    if t.uri_template.variables().any(|v| v == argument) {
        return Some(Ok(completion::info([])));
    }
    let names: Vec<&str> = t.uri_template.variables().collect();
    Some(Err(ErrorData::invalid_params(
        format!(
            "the template {template} has no argument `{}` (it takes {})",
            argument.chars().take(80).collect::<String>(),
            names.join(", ")
        ),
        None,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_values_are_refused() {
        for ok in ["123", "a b", "é", "%2e", "a.b", "..."] {
            assert_eq!(hostile(ok), None, "{ok}");
        }
        for bad in ["a/b", "a\\b", ".", "..", "a\nb", "a\0b"] {
            assert!(hostile(bad).is_some(), "{bad:?}");
        }
    }
}
