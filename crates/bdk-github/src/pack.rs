//! What the pack is set up with and shares: the options beyond the
//! manifest, one [`Pack`] per GitHub channel (its settings and API client),
//! and the [`Inner`] state its HTTP side, progress followers and tools use.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use bdk_core::extension::RuntimeLink;
use bdk_core::project::{GithubAppId, GithubChannel, GithubCredentials};
use bdk_store::Store;
use tokio_util::sync::CancellationToken;

use crate::api::{ApiError, ClientOptions, Credentials, GithubClient};

/// Looks up a secret or setting by variable name (the process environment
/// unless an embedder supplies another source).
pub type Secrets = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The process environment as [`Secrets`].
pub fn env_secrets() -> Secrets {
    Arc::new(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
}

/// How the pack is set up beyond the manifest.
#[derive(Clone)]
#[non_exhaustive]
pub struct GithubOptions {
    /// Where tokens, keys and the secret come from.
    pub secrets: Secrets,
    /// The agent's base path on the server (`""`, or `/<slug>` in a
    /// multi-agent server), for links to traces.
    pub base_path: String,
    /// The REST client's retry and timeout settings.
    pub client: ClientOptions,
}

impl Default for GithubOptions {
    fn default() -> Self {
        Self {
            secrets: env_secrets(),
            base_path: String::new(),
            client: ClientOptions::default(),
        }
    }
}

impl GithubOptions {
    /// These options with `base_path`.
    pub fn with_base_path(mut self, base_path: impl Into<String>) -> Self {
        self.base_path = base_path.into();
        self
    }

    /// These options with `secrets`.
    pub fn with_secrets(mut self, secrets: Secrets) -> Self {
        self.secrets = secrets;
        self
    }

    /// These options with `client`.
    pub fn with_client(mut self, client: ClientOptions) -> Self {
        self.client = client;
        self
    }
}

impl std::fmt::Debug for GithubOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubOptions")
            .field("base_path", &self.base_path)
            .finish_non_exhaustive()
    }
}

/// One GitHub channel: its settings and its API client.
pub(crate) struct Pack {
    pub(crate) name: String,
    pub(crate) settings: GithubChannel,
    secrets: Secrets,
    client_options: ClientOptions,
    /// The client for the credentials last read, rebuilt when they change
    /// (a rotated token needs no restart); App tokens are cached inside.
    client: Mutex<Option<(String, GithubClient)>>,
    /// The bot's login once known.
    login: Mutex<Option<String>>,
}

impl Pack {
    pub(crate) fn new(name: String, settings: GithubChannel, options: &GithubOptions) -> Self {
        Self {
            name,
            settings,
            secrets: Arc::clone(&options.secrets),
            client_options: options.client.clone(),
            client: Mutex::new(None),
            login: Mutex::new(None),
        }
    }

    /// The API base URL: the manifest's, else `GITHUB_API_URL`, else
    /// github.com's.
    pub(crate) fn api_url(&self) -> String {
        self.settings
            .api_url
            .clone()
            .or_else(|| (self.secrets)(bdk_core::project::github::GITHUB_API_URL_ENV))
            .unwrap_or_else(|| bdk_core::project::github::GITHUB_API_URL.to_owned())
            .trim_end_matches('/')
            .to_owned()
    }

    /// The client for the current credentials.
    pub(crate) fn client(&self) -> Result<GithubClient, ApiError> {
        let url = self.api_url();
        let credentials = match &self.settings.credentials {
            GithubCredentials::Token { token_env } => {
                let token = (self.secrets)(token_env).ok_or_else(|| {
                    ApiError::Auth(format!(
                        "the token variable `{token_env}` is not set; set it to a token with access to the repository"
                    ))
                })?;
                Credentials::Token(token)
            }
            GithubCredentials::App {
                app_id,
                private_key_env,
                installation_id,
            } => {
                let app_id = match app_id {
                    GithubAppId::Literal(id) => id.to_string(),
                    GithubAppId::Env(var) => (self.secrets)(var).ok_or_else(|| {
                        ApiError::Auth(format!("the App id variable `{var}` is not set"))
                    })?,
                };
                let key = (self.secrets)(private_key_env).ok_or_else(|| {
                    ApiError::Auth(format!(
                        "the private key variable `{private_key_env}` is not set"
                    ))
                })?;
                // The variable holds the PEM itself or the path of a file
                // holding it.
                let pem = if key.contains("-----BEGIN") {
                    key
                } else {
                    std::fs::read_to_string(&key).map_err(|e| {
                        ApiError::Auth(format!(
                            "`{private_key_env}` is neither a PEM key nor a readable file: {e}"
                        ))
                    })?
                };
                Credentials::App {
                    app_id,
                    private_key_pem: pem,
                    installation_id: *installation_id,
                }
            }
        };
        let fingerprint = fingerprint(&url, &credentials);
        let mut slot = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen, client)) = slot.as_ref()
            && *seen == fingerprint
        {
            return Ok(client.clone());
        }
        let client = GithubClient::new(&url, credentials, self.client_options.clone())?;
        *slot = Some((fingerprint, client.clone()));
        Ok(client)
    }

    /// The bot's login: the manifest's `bot`, else asked from the API once.
    /// `None` while the API cannot say.
    pub(crate) async fn login(&self) -> Option<String> {
        if let Some(bot) = &self.settings.bot {
            return Some(bot.clone());
        }
        if let Some(known) = self
            .login
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            return Some(known);
        }
        let asked = match self.client() {
            Ok(client) => client.login().await,
            Err(e) => Err(e),
        };
        match asked {
            Ok(login) => {
                *self.login.lock().unwrap_or_else(PoisonError::into_inner) = Some(login.clone());
                Some(login)
            }
            Err(e) => {
                tracing::warn!(channel = %self.name, error = %e, "cannot learn the bot's login from the GitHub API; set `github.bot` in the channel");
                None
            }
        }
    }
}

/// A digest of what the client is built from, so a changed credential is
/// noticed without keeping a second copy of it in the clear.
fn fingerprint(url: &str, credentials: &Credentials) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(url.as_bytes());
    match credentials {
        Credentials::Token(t) => {
            h.update(b"\0token\0");
            h.update(t.as_bytes());
        }
        Credentials::App {
            app_id,
            private_key_pem,
            installation_id,
        } => {
            h.update(b"\0app\0");
            h.update(app_id.as_bytes());
            h.update(private_key_pem.as_bytes());
            h.update(installation_id.unwrap_or(0).to_le_bytes());
        }
    }
    hex::encode(h.finalize())
}

/// What the pack shares between its HTTP side, its progress followers and
/// its tools.
pub(crate) struct Inner {
    pub(crate) packs: BTreeMap<String, Arc<Pack>>,
    pub(crate) base_path: String,
    pub(crate) secrets: Secrets,
    pub(crate) runtime: OnceLock<RuntimeLink>,
    pub(crate) shutdown: OnceLock<CancellationToken>,
    /// Sessions with a progress follower in this process.
    pub(crate) following: bdk_core::follow::Following,
    /// Serializes read-modify-write of thread records in this process.
    pub(crate) threads: tokio::sync::Mutex<()>,
}

impl Inner {
    pub(crate) fn store(&self) -> Option<Arc<dyn Store>> {
        self.runtime.get()?.get().map(|r| r.store())
    }

    /// The GitHub channel a tool call of a session on `channel` uses: that
    /// channel when it is a GitHub one, else the first by name.
    pub(crate) fn pack_for(&self, channel: &str) -> Option<&Arc<Pack>> {
        self.packs
            .get(channel)
            .or_else(|| self.packs.values().next())
    }
}
