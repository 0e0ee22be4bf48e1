//! Which model each agent of a project runs.
//!
//! The providers themselves live in `bdk-models`; this module joins them to
//! an agent folder: [`ModelResolver`] is the port the host resolves
//! `provider/model` strings through, [`BuiltinModels`] the resolver of this
//! build (scripted rules files from the project, remote providers with the
//! `[provider]` settings of the agent that names the model), and
//! [`resolve_remote`] reads those settings off a [`Project`].

use std::sync::Arc;
use std::time::Duration;

use bdk_models::http::{DEFAULT_STEP_TIMEOUT, HttpOptions, RetryPolicy};
use bdk_models::resolve::resolve_model;
use bdk_models::scripted::ScriptedModel;
use bdk_models::{DEFAULT_MODEL, Model, ModelError, ProviderConfig, split_model};

use crate::project::{AgentConfig, Project};

/// Resolves `provider/model` strings to models.
pub trait ModelResolver: Send + Sync + 'static {
    /// The model for `model` (a full `provider/model` string).
    fn resolve(&self, model: &str, project: &Project) -> Result<Arc<dyn Model>, ModelError>;
}

/// The providers this build knows: `scripted` (offline rules files) and the
/// remote ones of [`resolve_remote`] (`xai`, `openai`,
/// `ollama`, `vllm`, `openai-compatible`, `anthropic`), whose keys and base
/// URLs come from the process environment and `[provider]` in `agent.toml`.
/// A remote model that lacks its key resolves anyway and fails each step
/// with a message naming the variable to set.
#[derive(Default)]
pub struct BuiltinModels;

impl ModelResolver for BuiltinModels {
    fn resolve(&self, model: &str, project: &Project) -> Result<Arc<dyn Model>, ModelError> {
        let (provider, name) = split_model(model);
        match provider {
            "scripted" => {
                let Some(path) = project.scripted_rules.get(name) else {
                    let file = if name == "default" {
                        "agent/scripted.toml".to_owned()
                    } else {
                        format!("agent/scripted/{name}.toml")
                    };
                    return Err(ModelError::Config(format!(
                        "model `{model}` needs the rules file {file}"
                    )));
                };
                Ok(Arc::new(ScriptedModel::load(
                    path,
                    format!("scripted/{name}"),
                )?))
            }
            _ => Ok(resolve_remote(model, project, &|var| {
                std::env::var(var).ok()
            })),
        }
    }
}

/// Resolves a remote `provider/model` string for `project`, reading keys and
/// base URLs through `env` (the process environment in production; a map in
/// tests, since the environment is global to a test binary).
///
/// The `[provider]` table and `step_timeout_ms` come from the first agent of
/// the project (the root agent, then subagents in order) whose model is
/// `model`. A subagent that sets neither inherits the root agent's settings:
/// the timeout always, the `[provider]` table only when both agents use the
/// same provider prefix, because a base URL for one provider is wrong for
/// another.
pub fn resolve_remote(
    model: &str,
    project: &Project,
    env: &dyn Fn(&str) -> Option<String>,
) -> Arc<dyn Model> {
    let root = &project.config;
    let root_model = root.model.as_deref().unwrap_or(DEFAULT_MODEL);
    let inherit = |own: &AgentConfig| -> (ProviderConfig, Option<u64>) {
        let own_model = own.model.as_deref().unwrap_or(root_model);
        let provider = if own.provider != ProviderConfig::default() {
            own.provider.clone()
        } else if split_model(own_model).0 == split_model(root_model).0 {
            root.provider.clone()
        } else {
            ProviderConfig::default()
        };
        (provider, own.step_timeout_ms.or(root.step_timeout_ms))
    };
    let (provider, step_timeout_ms) = if root_model == model {
        (root.provider.clone(), root.step_timeout_ms)
    } else if let Some(sub) = project
        .subagents
        .iter()
        .find(|s| s.config.model.as_deref().unwrap_or(root_model) == model)
    {
        inherit(&sub.config)
    } else if split_model(root_model).0 == split_model(model).0 {
        (root.provider.clone(), root.step_timeout_ms)
    } else {
        (ProviderConfig::default(), root.step_timeout_ms)
    };
    let options = HttpOptions {
        step_timeout: step_timeout_ms.map_or(DEFAULT_STEP_TIMEOUT, Duration::from_millis),
        retry: RetryPolicy::default(),
    };
    resolve_model(model, &provider, options, env)
}
