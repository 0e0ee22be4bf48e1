//! The GitHub pack: a PR bot is an agent folder with a GitHub channel
//! (`agent/channels/<name>.toml` with `kind = "github"`) and a token.
//!
//! - [`api`]: the REST client (a token or a GitHub App's installation
//!   tokens, a configurable base URL, bounded retries that honour GitHub's
//!   rate limits).
//! - [`ingress`]: what a delivery means: a `ping`, an event nobody asked
//!   for, one the bot caused itself, or a message for the session of the
//!   pull request or issue it is about.
//! - [`thread`]: one pull request or issue, its conversation key
//!   (`owner/repo#123`) and what the pack remembers about it.
//! - `progress`: one follower per thread session that turns the session's
//!   events into a commit status, a sticky banner comment edited in place
//!   and the final reply, recording each failure in the session
//!   (`channel.outbound`).
//! - `tools`: the built-in `github_*` tools and the `github.*` host-endpoint
//!   operations, with the channel's credentials.
//!
//! [`Github`] ties them together as a host extension
//! (`bdk_core::extension::HostExtension`): `bdk serve` adds it when the
//! project has a GitHub channel, and `bdk-http` hands it each delivery
//! after checking the signature over the raw body. Deliveries are deduped
//! durably by `X-GitHub-Delivery` (namespace [`DELIVERIES_NAMESPACE`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bdk_core::extension::{HostExtension, OperationCall, OperationError, RuntimeLink};
use bdk_core::host::HostResult;
use bdk_core::project::{GithubAppId, GithubChannel, GithubCredentials, Project};
use bdk_core::tool::Tool;
use bdk_events::SessionId;
use bdk_store::Store;
use chrono::Utc;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub mod api;
pub mod ingress;
mod progress;
pub mod thread;
mod tools;

use api::{ApiError, ClientOptions, Credentials, GithubClient};
pub use ingress::{Classified, Delivery, IngressError, Wake};
pub use progress::PROGRESS_NAMESPACE;
pub use thread::{THREADS_NAMESPACE, Thread};

/// The key-value namespace of delivery claims (`<channel>/<delivery id>`).
pub const DELIVERIES_NAMESPACE: &str = "github-deliveries";

/// A claim older than this whose delivery never reached a session (its
/// process died in between) is taken over by a redelivery.
const STALE_CLAIM: Duration = Duration::from_secs(60);

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

/// The answer to a delivery, for the HTTP layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ingress {
    /// A `ping`.
    Pong {
        /// GitHub's zen line.
        zen: Option<String>,
        /// The hook's id.
        hook_id: Option<u64>,
    },
    /// This delivery id was handled before; nothing runs again.
    Duplicate {
        /// The session the first delivery reached, when known.
        session_id: Option<String>,
    },
    /// Nothing to do, and why.
    Ignored(String),
    /// Wake the session of [`Wake::key`]; then call [`Github::woke`] (or
    /// [`Github::release`] when that failed).
    Wake(Box<Wake>),
}

/// Why a delivery was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// No GitHub channel has this name.
    #[error("no GitHub channel `{0}`")]
    UnknownChannel(String),
    /// The payload cannot be acted on.
    #[error(transparent)]
    Ingress(#[from] IngressError),
    /// The store failed.
    #[error("the store failed: {0}")]
    Store(#[from] bdk_store::StoreError),
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
    fn new(name: String, settings: GithubChannel, options: &GithubOptions) -> Self {
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
    runtime: OnceLock<RuntimeLink>,
    shutdown: OnceLock<CancellationToken>,
    /// Sessions with a progress follower in this process.
    following: Mutex<HashSet<SessionId>>,
    /// Serializes read-modify-write of thread records in this process.
    threads: tokio::sync::Mutex<()>,
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

/// The GitHub pack of one agent: a host extension. Cheap to clone.
#[derive(Clone)]
pub struct Github {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Github {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Github")
            .field("channels", &self.channels())
            .finish_non_exhaustive()
    }
}

impl Github {
    /// The pack for `project`'s GitHub channels; `None` when it has none.
    pub fn from_project(project: &Project, options: GithubOptions) -> Option<Self> {
        let packs: BTreeMap<String, Arc<Pack>> = project
            .channels
            .iter()
            .filter_map(|c| {
                let settings = c.github.clone()?;
                Some((
                    c.name.clone(),
                    Arc::new(Pack::new(c.name.clone(), settings, &options)),
                ))
            })
            .collect();
        if packs.is_empty() {
            return None;
        }
        Some(Self {
            inner: Arc::new(Inner {
                packs,
                base_path: options.base_path.trim_end_matches('/').to_owned(),
                secrets: options.secrets,
                runtime: OnceLock::new(),
                shutdown: OnceLock::new(),
                following: Mutex::default(),
                threads: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// The names of the GitHub channels.
    pub fn channels(&self) -> Vec<String> {
        self.inner.packs.keys().cloned().collect()
    }

    /// The settings of GitHub channel `channel`.
    pub fn settings(&self, channel: &str) -> Option<&GithubChannel> {
        self.inner.packs.get(channel).map(|p| &p.settings)
    }

    /// The webhook secret of `channel`, when its variable is set.
    pub fn secret(&self, channel: &str) -> Option<String> {
        let pack = self.inner.packs.get(channel)?;
        (self.inner.secrets)(&pack.settings.secret_env)
    }

    /// Decides what a (signature-checked) delivery to `channel` means, and
    /// for a delivery that wakes a session, claims its id durably: the same
    /// id again is [`Ingress::Duplicate`]. A [`Ingress::Wake`] must be
    /// followed by [`Github::woke`] or [`Github::release`].
    pub async fn accept(
        &self,
        channel: &str,
        delivery: &Delivery<'_>,
    ) -> Result<Ingress, AcceptError> {
        let pack = self
            .inner
            .packs
            .get(channel)
            .ok_or_else(|| AcceptError::UnknownChannel(channel.to_owned()))?;
        let login = if delivery.event == "ping" {
            None
        } else {
            pack.login().await
        };
        let wake = match ingress::classify(&pack.settings, login.as_deref(), delivery)? {
            Classified::Pong { zen, hook_id } => return Ok(Ingress::Pong { zen, hook_id }),
            Classified::Ignored(reason) => return Ok(Ingress::Ignored(reason)),
            Classified::Wake(wake) => wake,
        };
        let Some(store) = self.inner.store() else {
            return Err(AcceptError::Store(bdk_store::StoreError::Io(
                std::io::Error::other("the host is shutting down"),
            )));
        };
        let key = format!("{channel}/{}", wake.delivery);
        let claim = json!({"state": "claimed", "at": Utc::now().to_rfc3339()});
        if !store
            .kv_put_if_absent(DELIVERIES_NAMESPACE, &key, claim.clone())
            .await?
        {
            let seen = store.kv_get(DELIVERIES_NAMESPACE, &key).await?;
            let stale = seen.as_ref().is_some_and(|v| {
                v["state"] == "claimed"
                    && v["at"]
                        .as_str()
                        .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
                        .is_some_and(|at| {
                            Utc::now()
                                .signed_duration_since(at)
                                .to_std()
                                .unwrap_or_default()
                                > STALE_CLAIM
                        })
            });
            if !stale {
                return Ok(Ingress::Duplicate {
                    session_id: seen
                        .as_ref()
                        .and_then(|v| v["sessionId"].as_str())
                        .map(str::to_owned),
                });
            }
            tracing::warn!(channel, delivery = %wake.delivery, "taking over a delivery whose claim was never completed");
            store.kv_put(DELIVERIES_NAMESPACE, &key, claim).await?;
        }
        {
            let _one = self.inner.threads.lock().await;
            let stored = thread::load(store.as_ref(), channel, &wake.key).await?;
            let merged = thread::merge(stored, wake.thread.clone());
            thread::save(store.as_ref(), channel, &merged).await?;
        }
        Ok(Ingress::Wake(wake))
    }

    /// Records that `wake` reached `session` and follows the session's
    /// progress (from its first event when `created`).
    pub async fn woke(&self, channel: &str, wake: &Wake, session: &SessionId, created: bool) {
        if let Some(store) = self.inner.store() {
            let key = format!("{channel}/{}", wake.delivery);
            let done =
                json!({"state": "done", "sessionId": session, "at": Utc::now().to_rfc3339()});
            if let Err(e) = store.kv_put(DELIVERIES_NAMESPACE, &key, done).await {
                tracing::warn!(channel, delivery = %wake.delivery, error = %e, "cannot record a delivery as done");
            }
        }
        let start = if created {
            progress::Start::New
        } else {
            progress::Start::Resume
        };
        self.follow(channel, session, &wake.key, start).await;
    }

    /// Gives back the claim of a delivery whose session could not be woken,
    /// so GitHub's redelivery runs it.
    pub async fn release(&self, channel: &str, delivery: &str) {
        if let Some(store) = self.inner.store()
            && let Err(e) = store
                .kv_delete(DELIVERIES_NAMESPACE, &format!("{channel}/{delivery}"))
                .await
        {
            tracing::warn!(channel, delivery, error = %e, "cannot release a delivery claim");
        }
    }

    async fn follow(&self, channel: &str, session: &SessionId, key: &str, start: progress::Start) {
        let (Some(pack), Some(store), Some(shutdown)) = (
            self.inner.packs.get(channel),
            self.inner.store(),
            self.inner.shutdown.get(),
        ) else {
            return;
        };
        let fresh = self
            .inner
            .following
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session.clone());
        if !fresh {
            return;
        }
        let follower = progress::Follower::new(
            Arc::clone(&self.inner),
            Arc::clone(pack),
            store,
            session.clone(),
            key.to_owned(),
            shutdown.clone(),
        );
        let inner = Arc::clone(&self.inner);
        let id = session.clone();
        if let Some(from) = follower.start_index(start).await {
            tokio::spawn(async move {
                follower.run(from).await;
                inner
                    .following
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&id);
            });
        } else {
            self.inner
                .following
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(session);
        }
    }

    /// Follows the existing sessions of the GitHub channels (after a
    /// restart), from where each follower stopped.
    async fn resume(&self) {
        let Some(store) = self.inner.store() else {
            return;
        };
        let sessions = match store.list_sessions().await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot list sessions; GitHub progress does not resume for existing sessions");
                return;
            }
        };
        for record in sessions {
            if !self.inner.packs.contains_key(&record.channel) {
                continue;
            }
            let Some(key) = record
                .continuation_token
                .strip_prefix(&format!("{}:", record.channel))
            else {
                continue;
            };
            let key = key.to_owned();
            self.follow(&record.channel, &record.id, &key, progress::Start::Resume)
                .await;
        }
    }
}

#[async_trait]
impl HostExtension for Github {
    fn name(&self) -> &'static str {
        "github"
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }

    fn tools(&self, _project: &Project) -> Vec<Arc<dyn Tool>> {
        tools::tools(&self.inner)
    }

    fn operations(&self) -> &'static [&'static str] {
        tools::OPERATIONS
    }

    async fn operation(&self, call: OperationCall<'_>) -> Result<Value, OperationError> {
        tools::operation(&self.inner, call).await
    }

    async fn start(&self, runtime: RuntimeLink, shutdown: CancellationToken) -> HostResult<()> {
        let _ = self.inner.runtime.set(runtime);
        let _ = self.inner.shutdown.set(shutdown);
        let me = self.clone();
        tokio::spawn(async move { me.resume().await });
        Ok(())
    }
}
