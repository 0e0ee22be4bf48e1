//! What the pack is set up with and shares: the options beyond the
//! manifest, one [`Pack`] per Slack channel (its settings, its Web API
//! client and the bot's identity), and the [`Inner`] state its HTTP side,
//! progress followers and host operations use.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use bdk_core::extension::RuntimeLink;
use bdk_core::project::SlackChannel;
use bdk_store::Store;
use tokio_util::sync::CancellationToken;

use crate::api::{ApiError, ClientOptions, Identity, SlackClient};
use crate::ingress::Bot;

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
pub struct SlackOptions {
    /// Where the token and the signing secret come from.
    pub secrets: Secrets,
    /// The Web API client's retry and timeout settings.
    pub client: ClientOptions,
}

impl Default for SlackOptions {
    fn default() -> Self {
        Self {
            secrets: env_secrets(),
            client: ClientOptions::default(),
        }
    }
}

impl SlackOptions {
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

impl std::fmt::Debug for SlackOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackOptions").finish_non_exhaustive()
    }
}

/// One Slack channel: its settings, client and bot identity.
pub(crate) struct Pack {
    pub(crate) name: String,
    pub(crate) settings: SlackChannel,
    secrets: Secrets,
    client_options: ClientOptions,
    /// The client for the token last read, rebuilt when it changes (a
    /// rotated token needs no restart).
    client: Mutex<Option<(String, SlackClient)>>,
    /// Who the token is, once `auth.test` said.
    identity: Mutex<Option<(String, Identity)>>,
}

impl Pack {
    pub(crate) fn new(name: String, settings: SlackChannel, options: &SlackOptions) -> Self {
        Self {
            name,
            settings,
            secrets: Arc::clone(&options.secrets),
            client_options: options.client.clone(),
            client: Mutex::new(None),
            identity: Mutex::new(None),
        }
    }

    /// The Web API base: the manifest's, else `SLACK_API_URL`, else
    /// Slack's.
    pub(crate) fn api_url(&self) -> String {
        self.settings
            .api_url
            .clone()
            .or_else(|| (self.secrets)(bdk_core::project::slack::SLACK_API_URL_ENV))
            .unwrap_or_else(|| bdk_core::project::slack::SLACK_API_URL.to_owned())
            .trim_end_matches('/')
            .to_owned()
    }

    /// The signing secret, when its variable is set.
    pub(crate) fn signing_secret(&self) -> Option<String> {
        (self.secrets)(&self.settings.signing_secret_env)
    }

    fn token(&self) -> Result<String, ApiError> {
        (self.secrets)(&self.settings.token_env).ok_or_else(|| {
            ApiError::Config(format!(
                "the token variable `{}` is not set; set it to the app's bot token (xoxb-…)",
                self.settings.token_env
            ))
        })
    }

    /// The client for the current token.
    pub(crate) fn client(&self) -> Result<SlackClient, ApiError> {
        let token = self.token()?;
        let url = self.api_url();
        let fingerprint = fingerprint(&url, &token);
        let mut slot = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen, client)) = slot.as_ref()
            && *seen == fingerprint
        {
            return Ok(client.clone());
        }
        let client = SlackClient::new(&url, &token, self.client_options.clone())?;
        *slot = Some((fingerprint, client.clone()));
        Ok(client)
    }

    /// Who the bot is (`auth.test`, asked once per token).
    pub(crate) async fn bot(&self) -> Result<Bot, ApiError> {
        let fingerprint = fingerprint(&self.api_url(), &self.token()?);
        if let Some((seen, id)) = self
            .identity
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            && *seen == fingerprint
        {
            return Ok(Bot {
                user_id: id.user_id.clone(),
                bot_id: id.bot_id.clone(),
            });
        }
        let id = self.client()?.auth_test().await?;
        let bot = Bot {
            user_id: id.user_id.clone(),
            bot_id: id.bot_id.clone(),
        };
        *self.identity.lock().unwrap_or_else(PoisonError::into_inner) = Some((fingerprint, id));
        Ok(bot)
    }
}

/// A digest of what the client is built from, so a changed token is
/// noticed without keeping a second copy of it in the clear.
fn fingerprint(url: &str, token: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(url.as_bytes());
    h.update(b"\0");
    h.update(token.as_bytes());
    hex::encode(h.finalize())
}

/// What the pack shares between its HTTP side, its progress followers and
/// its host operations.
pub(crate) struct Inner {
    pub(crate) packs: BTreeMap<String, Arc<Pack>>,
    pub(crate) runtime: OnceLock<RuntimeLink>,
    pub(crate) shutdown: OnceLock<CancellationToken>,
    /// Sessions with a progress follower in this process.
    pub(crate) following: bdk_core::follow::Following,
}

impl Inner {
    pub(crate) fn store(&self) -> Option<Arc<dyn Store>> {
        self.runtime.get()?.get().map(|r| r.store())
    }

    /// The Slack channel an operation of a session on `channel` uses: that
    /// channel when it is a Slack one, else the first by name.
    pub(crate) fn pack_for(&self, channel: &str) -> Option<&Arc<Pack>> {
        self.packs
            .get(channel)
            .or_else(|| self.packs.values().next())
    }
}
