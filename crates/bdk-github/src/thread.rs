//! A thread of work: one pull request or issue, the conversation key of its
//! session (`owner/repo#123`), and what the pack remembers about it between
//! deliveries (the head commit its statuses go to, the banner comment it
//! edits in place, the installation that reaches it).
//!
//! Records live in the store's key-value area, namespace
//! [`THREADS_NAMESPACE`], key `<channel>/<owner/repo#number>`, so they hold
//! across restarts and replicas.

use bdk_store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The key-value namespace of thread records.
pub const THREADS_NAMESPACE: &str = "github-threads";

/// What the pack knows about a pull request or issue.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Thread {
    /// `owner/name`.
    pub repo: String,
    /// The pull request or issue number.
    pub number: u64,
    /// True for a pull request.
    pub pull: bool,
    /// The head commit of a pull request, as the last delivery named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_sha: Option<String>,
    /// The title.
    #[serde(default)]
    pub title: String,
    /// Its page on GitHub.
    #[serde(default)]
    pub html_url: String,
    /// The App installation that delivered it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installation: Option<u64>,
    /// The banner comment, once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub banner_id: Option<u64>,
    /// Where the server is reached from outside (for links to traces),
    /// as the last delivery's request showed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

impl Thread {
    /// The conversation key: `owner/repo#123`.
    pub fn key(&self) -> String {
        thread_key(&self.repo, self.number)
    }
}

/// The conversation key of `repo`'s pull request or issue `number`.
pub fn thread_key(repo: &str, number: u64) -> String {
    format!("{repo}#{number}")
}

/// The repository and number a conversation key names.
pub fn parse_key(key: &str) -> Option<(String, u64)> {
    let (repo, number) = key.rsplit_once('#')?;
    let (owner, name) = repo.split_once('/')?;
    if owner.is_empty() || name.is_empty() || name.contains('/') {
        return None;
    }
    Some((repo.to_owned(), number.parse().ok()?))
}

fn record_key(channel: &str, key: &str) -> String {
    format!("{channel}/{key}")
}

/// The stored record of `channel`'s thread `key`.
pub async fn load(
    store: &dyn Store,
    channel: &str,
    key: &str,
) -> Result<Option<Thread>, StoreError> {
    let value = store
        .kv_get(THREADS_NAMESPACE, &record_key(channel, key))
        .await?;
    Ok(value.and_then(|v| serde_json::from_value(v).ok()))
}

/// Stores `thread` under `channel`.
pub async fn save(store: &dyn Store, channel: &str, thread: &Thread) -> Result<(), StoreError> {
    let value = serde_json::to_value(thread).unwrap_or(Value::Null);
    store
        .kv_put(
            THREADS_NAMESPACE,
            &record_key(channel, &thread.key()),
            value,
        )
        .await
}

/// Merges what a new delivery says about a thread into what was stored:
/// the delivery's facts win, the banner stays, and a head commit the
/// delivery does not name (a comment event) is kept.
pub fn merge(stored: Option<Thread>, fresh: Thread) -> Thread {
    let Some(old) = stored else {
        return fresh;
    };
    Thread {
        head_sha: fresh.head_sha.or(old.head_sha),
        title: if fresh.title.is_empty() {
            old.title
        } else {
            fresh.title
        },
        html_url: if fresh.html_url.is_empty() {
            old.html_url
        } else {
            fresh.html_url
        },
        installation: fresh.installation.or(old.installation),
        banner_id: old.banner_id,
        origin: fresh.origin.or(old.origin),
        pull: fresh.pull || old.pull,
        ..fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        assert_eq!(thread_key("octo/hello", 12), "octo/hello#12");
        assert_eq!(parse_key("octo/hello#12"), Some(("octo/hello".into(), 12)));
        for bad in [
            "octo#1",
            "octo/hello",
            "octo/hello#x",
            "/hello#1",
            "a/b/c#1",
        ] {
            assert_eq!(parse_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn merging_keeps_the_banner_and_a_known_head() {
        let old = Thread {
            repo: "o/r".into(),
            number: 1,
            pull: true,
            head_sha: Some("aaa".into()),
            banner_id: Some(7),
            title: "t".into(),
            ..Thread::default()
        };
        let comment = Thread {
            repo: "o/r".into(),
            number: 1,
            ..Thread::default()
        };
        let merged = merge(Some(old.clone()), comment);
        assert_eq!(merged.head_sha.as_deref(), Some("aaa"));
        assert_eq!(merged.banner_id, Some(7));
        assert!(merged.pull);
        assert_eq!(merged.title, "t");
        let push = Thread {
            head_sha: Some("bbb".into()),
            ..old.clone()
        };
        assert_eq!(merge(Some(old), push).head_sha.as_deref(), Some("bbb"));
    }
}
