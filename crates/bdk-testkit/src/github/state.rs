//! What the fake holds: credentials, Apps, repositories with their pull
//! requests, issues, files, comments, statuses and reviews, the failures
//! to inject and the requests seen.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

use super::record::{Failure, Recorded};
use super::text::sha1_hex;

/// The state, usable after a panic elsewhere: a panicking test thread must
/// not hide the requests from the next one.
pub(super) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Who a credential acts as.
#[derive(Debug, Clone)]
pub(super) enum Principal {
    User(String),
    Installation {
        app_id: u64,
        installation_id: u64,
        expires_at: DateTime<Utc>,
    },
}

pub(super) struct FakeApp {
    pub(super) slug: String,
    pub(super) public_key_der: Vec<u8>,
    pub(super) installations: Vec<(u64, String)>,
}

pub(super) struct Repo {
    pub(super) value: Value,
    pub(super) pulls: BTreeMap<u64, Pull>,
    pub(super) issues: BTreeMap<u64, Value>,
    /// `(ref, path)` -> content.
    pub(super) files: BTreeMap<(String, String), Vec<u8>>,
    pub(super) comments: BTreeMap<u64, Vec<Value>>,
    pub(super) statuses: BTreeMap<String, Vec<Value>>,
    pub(super) reviews: BTreeMap<u64, Vec<Value>>,
}

pub(super) struct Pull {
    pub(super) value: Value,
    pub(super) files: Vec<PullFile>,
}

pub(super) struct PullFile {
    pub(super) path: String,
    pub(super) status: String,
    pub(super) patch: String,
}

pub(super) struct State {
    pub(super) base: String,
    pub(super) tokens: HashMap<String, Principal>,
    pub(super) apps: BTreeMap<u64, FakeApp>,
    pub(super) repos: BTreeMap<String, Repo>,
    pub(super) token_lifetime: TimeDelta,
    pub(super) failures: Vec<Failure>,
    pub(super) requests: Vec<Recorded>,
    pub(super) next_id: u64,
    pub(super) rate_used: u64,
    pub(super) rate_reset: i64,
    pub(super) log: bool,
}

impl State {
    pub(super) fn new(base: String) -> State {
        State {
            base,
            tokens: HashMap::new(),
            apps: BTreeMap::new(),
            repos: BTreeMap::new(),
            token_lifetime: TimeDelta::hours(1),
            failures: Vec::new(),
            requests: Vec::new(),
            next_id: 1000,
            rate_used: 0,
            rate_reset: (Utc::now() + TimeDelta::hours(1)).timestamp(),
            log: false,
        }
    }

    pub(super) fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(super) fn ensure_repo(&mut self, full_name: &str) -> &mut Repo {
        if !self.repos.contains_key(full_name) {
            let id = self.id();
            let value = synthetic_repo(&self.base, full_name, id);
            self.repos.insert(
                full_name.to_owned(),
                Repo {
                    value,
                    pulls: BTreeMap::new(),
                    issues: BTreeMap::new(),
                    files: BTreeMap::new(),
                    comments: BTreeMap::new(),
                    statuses: BTreeMap::new(),
                    reviews: BTreeMap::new(),
                },
            );
        }
        self.repos
            .get_mut(full_name)
            .expect("the repository was just inserted")
    }
}

pub(super) fn synthetic_repo(base: &str, full_name: &str, id: u64) -> Value {
    let (owner, name) = full_name.split_once('/').unwrap_or((full_name, full_name));
    json!({
        "id": id,
        "node_id": format!("R_fake{id}"),
        "name": name,
        "full_name": full_name,
        "private": false,
        "owner": {"login": owner, "id": id + 1, "type": "User"},
        "html_url": format!("https://github.com/{full_name}"),
        "description": null,
        "fork": false,
        "url": format!("{base}/repos/{full_name}"),
        "default_branch": "main",
        "visibility": "public",
    })
}

pub(super) fn synthetic_pull(full_name: &str, number: u64) -> Value {
    json!({
        "number": number,
        "state": "open",
        "title": format!("Pull request {number}"),
        "body": null,
        "user": {"login": "octocat", "type": "User"},
        "html_url": format!("https://github.com/{full_name}/pull/{number}"),
        "head": {"ref": "feature", "sha": sha1_hex(format!("{full_name}#{number}").as_bytes())},
        "base": {"ref": "main", "sha": sha1_hex(b"main")},
        "draft": false,
    })
}

/// The unified diff GitHub serves for `application/vnd.github.diff`.
pub(super) fn unified_diff(files: &[PullFile]) -> String {
    let mut diff = String::new();
    for file in files {
        let path = &file.path;
        let before = &sha1_hex(format!("before {path}").as_bytes())[..7];
        let after = &sha1_hex(format!("after {path}:{}", file.patch).as_bytes())[..7];
        diff.push_str(&format!("diff --git a/{path} b/{path}\n"));
        match file.status.as_str() {
            "added" => diff.push_str(&format!(
                "new file mode 100644\nindex 0000000..{after}\n--- /dev/null\n+++ b/{path}\n"
            )),
            "removed" => diff.push_str(&format!(
                "deleted file mode 100644\nindex {before}..0000000\n--- a/{path}\n+++ /dev/null\n"
            )),
            _ => diff.push_str(&format!(
                "index {before}..{after} 100644\n--- a/{path}\n+++ b/{path}\n"
            )),
        }
        diff.push_str(&file.patch);
        if !file.patch.ends_with('\n') {
            diff.push('\n');
        }
    }
    diff
}
