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
//! - `pack`: one GitHub channel's settings and API client (rebuilt when its
//!   credentials change), and the state the other parts share.
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

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use bdk_core::extension::{HostExtension, OperationCall, OperationError, RuntimeLink};
use bdk_core::follow::{Cursor, FollowStart, Following};
use bdk_core::host::HostResult;
use bdk_core::project::{GithubChannel, Project};
use bdk_core::tool::Tool;
use bdk_events::SessionId;
use chrono::Utc;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub mod api;
pub mod ingress;
mod pack;
mod progress;
pub mod thread;
mod tools;

pub use ingress::{Classified, Delivery, IngressError, Wake};
pub use pack::{GithubOptions, Secrets, env_secrets};
use pack::{Inner, Pack};
pub use progress::PROGRESS_NAMESPACE;
pub use thread::{THREADS_NAMESPACE, Thread};

/// The key-value namespace of delivery claims (`<channel>/<delivery id>`).
pub const DELIVERIES_NAMESPACE: &str = "github-deliveries";

/// The key-value namespaces the pack keeps its state in (delivery claims,
/// thread records, progress cursors), which the host endpoint refuses to
/// tools and handlers: a planted claim would swallow a delivery, a planted
/// thread record would hand a pull request to another session.
pub const NAMESPACES: &[&str] = &[DELIVERIES_NAMESPACE, THREADS_NAMESPACE, PROGRESS_NAMESPACE];

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
                following: Following::default(),
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
        let claimed = bdk_core::claims::claim(
            store.as_ref(),
            DELIVERIES_NAMESPACE,
            channel,
            &wake.delivery,
            Utc::now(),
        )
        .await?;
        if let bdk_core::claims::Claim::Duplicate { session } = claimed {
            return Ok(Ingress::Duplicate {
                session_id: session,
            });
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
            bdk_core::claims::done(
                store.as_ref(),
                DELIVERIES_NAMESPACE,
                channel,
                &wake.delivery,
                Some(session.as_ref()),
                Utc::now(),
            )
            .await;
        }
        let start = if created {
            FollowStart::New
        } else {
            FollowStart::Resume
        };
        self.follow(channel, session, &wake.key, start).await;
    }

    /// Gives back the claim of a delivery whose session could not be woken,
    /// so GitHub's redelivery runs it.
    pub async fn release(&self, channel: &str, delivery: &str) {
        if let Some(store) = self.inner.store() {
            bdk_core::claims::release(store.as_ref(), DELIVERIES_NAMESPACE, channel, delivery)
                .await;
        }
    }

    async fn follow(&self, channel: &str, session: &SessionId, key: &str, start: FollowStart) {
        let (Some(pack), Some(store), Some(shutdown)) = (
            self.inner.packs.get(channel),
            self.inner.store(),
            self.inner.shutdown.get(),
        ) else {
            return;
        };
        let cursor = Cursor::new(
            Arc::clone(&store),
            PROGRESS_NAMESPACE,
            "GitHub progress",
            &pack.name,
            session,
        );
        let follower = progress::Follower::new(
            Arc::clone(&self.inner),
            Arc::clone(pack),
            store,
            session.clone(),
            key.to_owned(),
        );
        self.inner
            .following
            .spawn(
                cursor,
                start,
                shutdown.clone(),
                progress::Progress::new(follower),
            )
            .await;
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
            self.follow(&record.channel, &record.id, &key, FollowStart::Resume)
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

    fn reserved_namespaces(&self) -> &'static [&'static str] {
        NAMESPACES
    }

    async fn operation(&self, call: OperationCall<'_>) -> Result<Value, OperationError> {
        tools::operation(&self.inner, call).await
    }

    async fn start(&self, runtime: RuntimeLink, shutdown: CancellationToken) -> HostResult<()> {
        let _ = self.inner.runtime.set(runtime);
        let _ = self.inner.shutdown.set(shutdown);
        let me = self.clone();
        tokio::spawn(async move { me.resume().await });
        if let Some(store) = self.inner.store()
            && let Some(shutdown) = self.inner.shutdown.get().cloned()
        {
            tokio::spawn(bdk_core::claims::keep_pruned(
                store,
                DELIVERIES_NAMESPACE,
                shutdown,
            ));
        }
        Ok(())
    }
}
