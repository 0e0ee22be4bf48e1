//! [`FakeSlack`]: an in-process fake of the Slack Web API methods a Slack
//! app calls, faithful to Slack's docs in what a client can observe:
//! methods under `/api/<method>`, arguments as JSON, form or multipart
//! bodies or a query string (JSON-valued arguments such as `blocks` as
//! JSON text inside a form), HTTP 200 with `{"ok": true, ...}` or
//! `{"ok": false, "error": ...}` (with `needed`/`provided` for
//! `missing_scope` and `response_metadata.messages` where Slack explains),
//! bearer or legacy `token` authentication, scopes checked per method and
//! reported in `x-oauth-scopes`/`x-accepted-oauth-scopes`, message `ts`
//! values, threads, cursor pagination, and the external file upload flow.
//!
//! It serves plain HTTP on `127.0.0.1` with hyper, records every call with
//! what it answered ([`FakeSlack::requests`]), keeps the conversations'
//! messages for tests to read ([`FakeSlack::messages`],
//! [`FakeSlack::thread`]) and fails on demand ([`FakeSlack::fail_next`],
//! e.g. a 429 with `Retry-After`). Tests mirror what people write with
//! [`FakeSlack::post_user_message`], and build what Slack sends the app
//! under test with the payload builders ([`event_callback`],
//! [`block_actions`], ...) signed by [`sign`].
//!
//! Dropping the fake stops its server and every connection.
//!
//! One concern a file: the workspace's fixed ids (`ids`), what it records
//! and the failures a test injects (`record`), decoding arguments (`args`),
//! the answer shape (`reply`), what it holds and the message shapes
//! (`state`), the method table and scopes (`methods`), the methods
//! themselves (`chat`, `conversations`, `files`, `identity`), the HTTP side
//! (`server`), request signing (`sign`) and the payloads Slack sends an app
//! (`payloads`).

mod args;
mod chat;
mod conversations;
mod files;
mod identity;
mod ids;
mod methods;
mod payloads;
mod record;
mod reply;
mod server;
mod sign;
mod state;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::poll::{PATIENCE, until_ok_within};
pub use payloads::{
    app_mention, block_actions, bot_message_event, event_callback, interactivity_body,
    message_event, url_verification,
};
pub use record::{Failure, Recorded, UPLOAD};
use server::accept_loop;
pub use sign::{sign, signed_headers};
use state::{State, lock, user_message};

/// The fake Slack Web API. See the module docs.
pub struct FakeSlack {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    server: JoinHandle<()>,
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        // The accept loop owns the connection tasks; aborting it drops them.
        self.server.abort();
    }
}

impl FakeSlack {
    /// The bot token the fake accepts from the start, with the scopes
    /// `app_mentions:read, channels:history, channels:read, chat:write,
    /// files:write, groups:history, im:history, users:read`.
    pub const BOT_TOKEN: &'static str = ids::BOT_TOKEN;
    /// The scopes of [`FakeSlack::BOT_TOKEN`].
    pub const BOT_SCOPES: &'static [&'static str] = ids::BOT_SCOPES;
    /// The bot's user id: the author of what the bot posts, and the user
    /// an `app_mention` mentions (`<@U0BOT>`).
    pub const BOT_USER: &'static str = ids::BOT_USER;
    /// The bot id on every message the bot posts.
    pub const BOT_ID: &'static str = ids::BOT_ID;
    /// The workspace (team) id.
    pub const TEAM: &'static str = ids::TEAM;
    /// The app id payloads carry as `api_app_id`.
    pub const APP_ID: &'static str = ids::APP_ID;
    /// The legacy verification token payloads carry as `token`.
    pub const VERIFICATION_TOKEN: &'static str = ids::VERIFICATION_TOKEN;

    /// Starts a fake on `127.0.0.1` on a free port.
    pub async fn start() -> FakeSlack {
        FakeSlack::start_on(0).await
    }

    /// Starts a fake on `127.0.0.1:port` (0 for a free one), with the
    /// channels `C0GENERAL` (general), `C0ALERTS` (alerts), the DM `D0DM`
    /// (with `U0ALICE`), and the users `U0ALICE` (alice), `U0BOB` (bob) and
    /// the bot.
    pub async fn start_on(port: u16) -> FakeSlack {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("fake Slack cannot listen on port {port}: {e}"));
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::new(format!("http://{addr}"))));
        let server = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        FakeSlack {
            addr,
            state,
            server,
        }
    }

    /// The Web API base URL a client is configured with,
    /// `http://127.0.0.1:PORT/api`: it calls `<url>/chat.postMessage`.
    pub fn url(&self) -> String {
        format!("http://{}/api", self.addr)
    }

    /// Accepts `token` with exactly these `scopes` (a token missing one
    /// gets `missing_scope` from the methods that need it). It acts as the
    /// bot.
    pub fn add_token(&self, token: &str, scopes: &[&str]) {
        self.state().tokens.insert(
            token.to_owned(),
            scopes.iter().map(|scope| (*scope).to_owned()).collect(),
        );
    }

    /// Adds (or renames) the conversation `id`: its first letter says the
    /// kind, as in Slack (`C` public channel, `G` private, `D` DM).
    pub fn add_channel(&self, id: &str, name: &str) {
        self.state().add_channel(id, name);
    }

    /// Adds (or renames) the human user `id`.
    pub fn add_user(&self, id: &str, name: &str) {
        self.state().add_user(id, name, false);
    }

    /// Puts a message from a person into `channel`'s history, in the
    /// thread `thread_ts` if any, and returns its `ts`: what a test sends
    /// the app as an event should be here too, so the app's thread reads
    /// see it.
    pub fn post_user_message(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        thread_ts: Option<&str>,
    ) -> String {
        let mut state = self.state();
        let Some(channel) = state.channel_id(channel) else {
            panic!("the fake Slack has no channel {channel:?}; add it with add_channel");
        };
        let thread_ts = thread_ts.map(|thread_ts| state.thread_root(&channel, thread_ts));
        let ts = state.next_ts();
        state.add_message(
            &channel,
            user_message(user, text, &ts, thread_ts.as_deref()),
        );
        ts
    }

    /// Every message in `channel` (top-level and replies), in the order
    /// they were posted, as `conversations.replies` shows them.
    pub fn messages(&self, channel: &str) -> Vec<Value> {
        self.state()
            .messages
            .get(channel)
            .cloned()
            .unwrap_or_default()
    }

    /// The thread `thread_ts` in `channel`: its parent, then its replies
    /// in order (empty when there is no such message).
    pub fn thread(&self, channel: &str, thread_ts: &str) -> Vec<Value> {
        self.state().thread(channel, thread_ts).unwrap_or_default()
    }

    /// Every `chat.postEphemeral` message, in order: `{channel, user, text,
    /// thread_ts, ts}`.
    pub fn ephemerals(&self) -> Vec<Value> {
        lock(&self.state).ephemerals.clone()
    }

    /// Every file `files.getUploadURLExternal` was asked for, in order:
    /// the file object, plus `length` (announced), `bytes` (received at
    /// the upload URL, `null` until they matched), and `shares` (where
    /// `files.completeUploadExternal` shared it: `{channel, thread_ts,
    /// ts}`).
    pub fn files(&self) -> Vec<Value> {
        self.state()
            .files
            .values()
            .map(|file| {
                let mut value = file.to_value();
                value["length"] = json!(file.length);
                value["bytes"] = json!(file.uploaded);
                value["shares"] = Value::Array(file.shares.clone());
                value
            })
            .collect()
    }

    /// Answers the next matching calls with `failure` instead.
    pub fn fail_next(&self, failure: Failure) {
        self.state().failures.push(failure);
    }

    /// Logs each call as one line on stderr (the fake-slack binary).
    pub fn log_requests(&self) {
        self.state().log = true;
    }

    /// Every call so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state().requests.clone()
    }

    /// Waits until `pred` holds over the calls received, and returns them;
    /// panics after the testkit's patience naming `what` and the calls
    /// seen.
    pub async fn wait_for(&self, what: &str, pred: impl Fn(&[Recorded]) -> bool) -> Vec<Recorded> {
        until_ok_within(what, PATIENCE, || {
            let requests = self.requests();
            let result = if pred(&requests) {
                Ok(requests)
            } else {
                Err(requests
                    .iter()
                    .map(Recorded::summary)
                    .collect::<Vec<_>>()
                    .join("; "))
            };
            async move { result }
        })
        .await
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}
