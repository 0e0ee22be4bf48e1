//! From a `provider/model` string to a model: the provider presets (where
//! each listens by default and where its key lives), the `[provider]`
//! overrides, and [`Misconfigured`] for a model that cannot run as
//! configured. The providers themselves ([`crate::openai`],
//! [`crate::anthropic`]) and their shared transport ([`crate::http`]) know
//! nothing of presets.

#[cfg(feature = "runtime")]
use std::sync::Arc;

#[cfg(feature = "runtime")]
use async_trait::async_trait;
#[cfg(feature = "runtime")]
use tokio_util::sync::CancellationToken;

#[cfg(feature = "runtime")]
use crate::anthropic::{AnthropicConfig, AnthropicModel};
#[cfg(feature = "runtime")]
use crate::http::HttpOptions;
#[cfg(feature = "runtime")]
use crate::openai::{OpenAiConfig, OpenAiModel};
#[cfg(feature = "runtime")]
use crate::{Model, ModelError, ModelRequest, ModelStream, ProviderConfig, split_model};

/// The provider prefixes this build resolves, for error messages.
const KNOWN_PROVIDERS: &str =
    "xai, openai, anthropic, ollama, vllm, openai-compatible (or scripted to run offline)";

/// A remote model that cannot run as configured (a missing key, a missing
/// base URL, an unknown provider): every step fails at once with the
/// message, which names what to set. Resolution never fails outright, so a
/// misconfigured model is a clear `turn.failed`, not a refused startup.
#[cfg(feature = "runtime")]
pub struct Misconfigured {
    id: String,
    message: String,
}

#[cfg(feature = "runtime")]
impl Misconfigured {
    /// A model `id` whose every step fails with `message`.
    pub fn new(id: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            message: message.into(),
        }
    }
}

#[cfg(feature = "runtime")]
#[async_trait]
impl Model for Misconfigured {
    fn id(&self) -> &str {
        &self.id
    }

    async fn step(
        &self,
        _request: ModelRequest,
        _cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError> {
        Err(ModelError::Config(self.message.clone()))
    }
}

/// One provider preset: where it listens by default and where its key lives.
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
struct Preset {
    /// The base URL when neither `agent.toml` nor `base_env` sets one.
    base_url: Option<&'static str>,
    /// An environment variable that overrides the base URL.
    base_env: Option<&'static str>,
    /// The environment variable holding the key.
    key_env: Option<&'static str>,
    /// Whether a step may run without a key.
    key_required: bool,
    /// The API family.
    anthropic: bool,
}

fn preset(provider: &str) -> Option<Preset> {
    let p = |base_url, base_env, key_env, key_required, anthropic| Preset {
        base_url,
        base_env,
        key_env,
        key_required,
        anthropic,
    };
    Some(match provider {
        "xai" => p(
            Some("https://api.x.ai/v1"),
            None,
            Some("XAI_API_KEY"),
            true,
            false,
        ),
        "openai" => p(
            Some("https://api.openai.com/v1"),
            None,
            Some("OPENAI_API_KEY"),
            true,
            false,
        ),
        "ollama" => p(
            Some("http://127.0.0.1:11434/v1"),
            Some("OLLAMA_HOST"),
            None,
            false,
            false,
        ),
        "vllm" => p(
            Some("http://127.0.0.1:8000/v1"),
            Some("VLLM_BASE_URL"),
            Some("VLLM_API_KEY"),
            false,
            false,
        ),
        "openai-compatible" => p(
            None,
            Some("BDK_MODEL_BASE_URL"),
            Some("BDK_MODEL_API_KEY"),
            false,
            false,
        ),
        "anthropic" => p(
            Some("https://api.anthropic.com"),
            None,
            Some("ANTHROPIC_API_KEY"),
            true,
            true,
        ),
        _ => return None,
    })
}

/// Whether `provider` (the part of `provider/model` before the slash) is one
/// bdk can reach; discovery reports any other as an error.
pub fn is_known_provider(provider: &str) -> bool {
    preset(provider).is_some()
}

/// The providers [`is_known_provider`] accepts, for diagnostics.
pub fn known_providers() -> &'static str {
    KNOWN_PROVIDERS
}

/// Resolves `model` with explicit settings: the `[provider]` override, the
/// transport options, and an environment lookup. Never fails: a model that
/// cannot run is a [`Misconfigured`] one whose steps say what to set.
#[cfg(feature = "runtime")]
pub fn resolve_model(
    model: &str,
    provider: &ProviderConfig,
    options: HttpOptions,
    env: &dyn Fn(&str) -> Option<String>,
) -> Arc<dyn Model> {
    let (prefix, name) = split_model(model);
    let Some(preset) = preset(prefix) else {
        return Arc::new(Misconfigured::new(
            model,
            format!("unknown model provider `{prefix}` in `{model}`; use one of {KNOWN_PROVIDERS}"),
        ));
    };
    if name.is_empty() {
        return Arc::new(Misconfigured::new(
            model,
            format!("model `{model}` names no model; write it as `{prefix}/<model>`"),
        ));
    }
    // Blank variables count as unset: `export XAI_API_KEY=` is a common way
    // to "unset" a key in a shell profile.
    let lookup = |var: &str| env(var).filter(|v| !v.trim().is_empty());

    let base_url = if let Some(url) = &provider.base_url {
        url.clone()
    } else if let Some(url) = preset.base_env.and_then(lookup) {
        if prefix == "ollama" {
            ollama_base(&url)
        } else {
            url
        }
    } else if let Some(url) = preset.base_url {
        url.to_owned()
    } else {
        let var = preset.base_env.unwrap_or("BDK_MODEL_BASE_URL");
        return Arc::new(Misconfigured::new(
            model,
            format!(
                "model `{model}` needs a base URL: set {var} (for example http://127.0.0.1:8080/v1) or `base_url` under [provider] in agent/agent.toml"
            ),
        ));
    };

    // An `api_key_env` in agent.toml names the variable explicitly, which
    // says the endpoint wants a key: its absence is an error even for
    // providers whose preset key is optional.
    let (key_env, key_required) = match &provider.api_key_env {
        Some(var) => (Some(var.clone()), true),
        None => (preset.key_env.map(str::to_owned), preset.key_required),
    };
    let api_key = key_env.as_deref().and_then(lookup);
    if api_key.is_none()
        && key_required
        && let Some(var) = &key_env
    {
        return Arc::new(Misconfigured::new(
            model,
            format!(
                "{var} is not set: export it with your API key, or pick another model in agent/agent.toml (model = \"scripted\" runs offline)"
            ),
        ));
    }

    if preset.anthropic {
        let Some(api_key) = api_key else {
            return Arc::new(Misconfigured::new(
                model,
                "anthropic models need an API key: set ANTHROPIC_API_KEY",
            ));
        };
        Arc::new(AnthropicModel::new(AnthropicConfig {
            id: model.to_owned(),
            base_url,
            api_key,
            key_env,
            max_tokens: crate::anthropic::DEFAULT_MAX_TOKENS,
            http: options,
        }))
    } else {
        Arc::new(OpenAiModel::new(OpenAiConfig {
            id: model.to_owned(),
            base_url,
            api_key,
            key_env,
            http: options,
        }))
    }
}

/// Turns an `OLLAMA_HOST` value (`0.0.0.0`, `localhost:11434`,
/// `http://gpu-box:11434`) into the base URL of Ollama's OpenAI-compatible
/// API. The variable is shared with the Ollama server, where it names the
/// bind address, so it often lacks a scheme, a port, or the `/v1` suffix.
#[cfg(feature = "runtime")]
fn ollama_base(host: &str) -> String {
    let host = host.trim().trim_end_matches('/');
    let (scheme, rest) = match host.split_once("://") {
        Some((scheme, rest)) => (scheme, rest),
        None => ("http", host),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((authority, path)) => (authority, format!("/{path}")),
        None => (rest, String::new()),
    };
    // A bracketed IPv6 literal has colons of its own; only a colon after the
    // closing bracket is a port.
    let has_port = match authority.rfind(']') {
        Some(end) => authority[end..].contains(':'),
        None => authority.contains(':'),
    };
    let port = if has_port { "" } else { ":11434" };
    let path = if path.ends_with("/v1") {
        path
    } else {
        format!("{path}/v1")
    };
    format!("{scheme}://{authority}{port}{path}")
}

#[cfg(test)]
#[cfg(feature = "runtime")]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn ollama_host_values_become_base_urls() {
        assert_eq!(ollama_base("0.0.0.0"), "http://0.0.0.0:11434/v1");
        assert_eq!(ollama_base("localhost:9999"), "http://localhost:9999/v1");
        assert_eq!(
            ollama_base("https://gpu-box:11434/"),
            "https://gpu-box:11434/v1"
        );
        assert_eq!(ollama_base("http://h:1/v1"), "http://h:1/v1");
        assert_eq!(ollama_base("[::1]"), "http://[::1]:11434/v1");
        assert_eq!(ollama_base("[::1]:8080"), "http://[::1]:8080/v1");
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    async fn config_error(model: &Arc<dyn Model>) -> String {
        let req = ModelRequest {
            model: String::new(),
            system: String::new(),
            messages: Vec::new(),
            tools: Default::default(),
            effort: None,
            tool_choice: None,
            max_tokens: None,
        };
        match model.step(req, CancellationToken::new()).await {
            Err(ModelError::Config(m)) => m,
            Err(other) => panic!("expected a config error, got {other}"),
            Ok(_) => panic!("expected a config error, got a stream"),
        }
    }

    #[tokio::test]
    async fn misconfigured_models_fail_their_steps_with_the_fix() {
        let none = ProviderConfig::default();
        let opts = HttpOptions::default;
        let m = resolve_model(
            "xai/grok-4.5",
            &none,
            opts(),
            &env_of(&[("XAI_API_KEY", " ")]),
        );
        assert_eq!(m.id(), "xai/grok-4.5");
        let msg = config_error(&m).await;
        assert!(msg.starts_with("XAI_API_KEY is not set"), "{msg}");
        let m = resolve_model("anthropic/claude-x", &none, opts(), &env_of(&[]));
        assert!(
            config_error(&m)
                .await
                .starts_with("ANTHROPIC_API_KEY is not set")
        );
        let m = resolve_model("openai-compatible/x", &none, opts(), &env_of(&[]));
        assert!(config_error(&m).await.contains("BDK_MODEL_BASE_URL"));
        let m = resolve_model("nope/x", &none, opts(), &env_of(&[]));
        assert!(
            config_error(&m)
                .await
                .contains("unknown model provider `nope`")
        );
        let named = ProviderConfig {
            base_url: None,
            api_key_env: Some("MY_GATEWAY_KEY".to_owned()),
        };
        let m = resolve_model("ollama/llama3", &named, opts(), &env_of(&[]));
        assert!(
            config_error(&m)
                .await
                .starts_with("MY_GATEWAY_KEY is not set")
        );
    }
}
