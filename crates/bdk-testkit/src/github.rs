//! [`FakeGithub`]: an in-process fake of the GitHub REST endpoints the
//! GitHub pack calls, faithful to GitHub's REST docs in what a client can
//! observe: paths, status codes, error bodies (`{"message",
//! "documentation_url"}`, plus `errors` on a 422), pagination (`per_page`,
//! `page`, `Link` with `rel="next"`/`"last"`), rate-limit headers, token and
//! GitHub App (RS256 JWT) authentication, and who a comment is attributed
//! to (a token's user, or an App's `<slug>[bot]`).
//!
//! It serves plain HTTP on `127.0.0.1` with hyper, records every request
//! with what it answered ([`FakeGithub::requests`]), keeps what clients
//! create (comments, statuses, reviews) for tests to read, and fails on
//! demand ([`FakeGithub::fail_next`]) for the error and rate-limit paths.
//! Repositories and pull requests are seeded from real webhook payloads
//! ([`FakeGithub::add_pull_from_payload`]), so the fake and the deliveries a
//! test sends agree on ids, shas and names.
//!
//! Dropping the fake stops its server and every connection.
//!
//! One concern a file: what it holds (`state`), what it records and the
//! failures a test injects (`record`), the HTTP side and pagination
//! (`server`), tokens and App JWTs (`auth`), the
//! repository endpoints (`endpoints`), and the text formats it produces
//! (`text`: diffs, wrapped base64, blob ids).

mod auth;
mod endpoints;
mod record;
mod server;
mod state;
mod text;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::TimeDelta;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::poll::{PATIENCE, until_ok_within};
pub use record::{Failure, Recorded};
use server::accept_loop;
use state::{FakeApp, Principal, Pull, PullFile, State, lock, synthetic_pull};

/// The fake GitHub API. See the module docs.
pub struct FakeGithub {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    server: JoinHandle<()>,
}

impl Drop for FakeGithub {
    fn drop(&mut self) {
        // The accept loop owns the connection tasks; aborting it drops them.
        self.server.abort();
    }
}

impl FakeGithub {
    /// The token the fake accepts from the start, acting as user `octocat`.
    pub const TOKEN: &'static str = "ghp_faketoken";
    /// The login [`FakeGithub::TOKEN`] acts as.
    pub const LOGIN: &'static str = "octocat";

    /// Starts a fake on `127.0.0.1` on a free port.
    pub async fn start() -> FakeGithub {
        FakeGithub::start_on(0).await
    }

    /// Starts a fake on `127.0.0.1:port` (0 for a free one).
    pub async fn start_on(port: u16) -> FakeGithub {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("fake GitHub cannot listen on port {port}: {e}"));
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::new(format!("http://{addr}"))));
        state.lock().unwrap().tokens.insert(
            FakeGithub::TOKEN.to_owned(),
            Principal::User(FakeGithub::LOGIN.to_owned()),
        );
        let server = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        FakeGithub {
            addr,
            state,
            server,
        }
    }

    /// The API base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Accepts `token` as user `login` (a personal access token).
    pub fn add_token(&self, token: &str, login: &str) {
        self.state()
            .tokens
            .insert(token.to_owned(), Principal::User(login.to_owned()));
    }

    /// Registers a GitHub App: its id, slug, RSA public key (the DER that
    /// `ring`'s `RsaKeyPair::public().as_ref()` gives, PKCS#1
    /// `RSAPublicKey`) to verify its JWTs with, and its installations with
    /// the repository each covers (an installation may be listed once per
    /// repository).
    pub fn add_app(
        &self,
        app_id: u64,
        slug: &str,
        public_key_der: Vec<u8>,
        installations: &[(u64, &str)],
    ) {
        let mut state = self.state();
        for (_, repo) in installations {
            state.ensure_repo(repo);
        }
        state.apps.insert(
            app_id,
            FakeApp {
                slug: slug.to_owned(),
                public_key_der,
                installations: installations
                    .iter()
                    .map(|(id, repo)| (*id, (*repo).to_owned()))
                    .collect(),
            },
        );
    }

    /// How long installation tokens minted from now on live (GitHub: one
    /// hour). A lifetime under five minutes makes a client refresh its
    /// token on every request.
    pub fn set_token_lifetime(&self, lifetime: Duration) {
        self.state().token_lifetime = TimeDelta::from_std(lifetime).unwrap_or(TimeDelta::hours(1));
    }

    /// Revokes every installation token minted so far: the next request
    /// with one gets 401 "Bad credentials".
    pub fn revoke_installation_tokens(&self) {
        self.state()
            .tokens
            .retain(|_, principal| matches!(principal, Principal::User(_)));
    }

    /// Adds the repository `owner/name` (no-op when it exists).
    pub fn add_repo(&self, full_name: &str) {
        self.state().ensure_repo(full_name);
    }

    /// Seeds from a real webhook payload: its `repository`, and its
    /// `pull_request` (as `GET .../pulls/{n}` and, as every pull request is
    /// also an issue, `GET .../issues/{n}`) or `issue`. A later payload for
    /// the same pull request (a `synchronize`) updates it and keeps its
    /// files, comments and reviews.
    pub fn add_pull_from_payload(&self, payload: &Value) {
        let mut state = self.state();
        let Some(full_name) = payload["repository"]["full_name"].as_str() else {
            panic!("the payload has no repository.full_name");
        };
        let repo = state.ensure_repo(full_name);
        repo.value = payload["repository"].clone();
        if let Some(number) = payload["pull_request"]["number"].as_u64() {
            let pull = repo.pulls.entry(number).or_insert_with(|| Pull {
                value: Value::Null,
                files: Vec::new(),
            });
            pull.value = payload["pull_request"].clone();
        }
        if let Some(number) = payload["issue"]["number"].as_u64() {
            repo.issues.insert(number, payload["issue"].clone());
        }
    }

    /// The files of pull request `number`: `(path, status, patch)` with
    /// status `added`, `modified`, `removed` or `renamed` and the patch as
    /// GitHub gives it (hunks starting at `@@`). They make its `/files`
    /// list, its diff, and the paths and lines review comments may use.
    pub fn set_pull_files(&self, repo: &str, number: u64, files: Vec<(String, String, String)>) {
        let mut state = self.state();
        let repo_name = repo.to_owned();
        let repo = state.ensure_repo(repo);
        let pull = repo.pulls.entry(number).or_insert_with(|| Pull {
            value: synthetic_pull(&repo_name, number),
            files: Vec::new(),
        });
        pull.files = files
            .into_iter()
            .map(|(path, status, patch)| PullFile {
                path,
                status,
                patch,
            })
            .collect();
    }

    /// A file at `git_ref` (a branch, tag or sha, matched exactly; without
    /// `?ref=` the repository's default branch is read).
    pub fn add_file(&self, repo: &str, git_ref: &str, path: &str, content: &[u8]) {
        self.state().ensure_repo(repo).files.insert(
            (git_ref.to_owned(), path.trim_matches('/').to_owned()),
            content.to_vec(),
        );
    }

    /// Answers the next matching requests with `failure` instead.
    pub fn fail_next(&self, failure: Failure) {
        self.state().failures.push(failure);
    }

    /// Logs each request as one line on stderr (the fake-github binary).
    pub fn log_requests(&self) {
        self.state().log = true;
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state().requests.clone()
    }

    /// The comments on issue or pull request `number`, as GitHub lists them.
    pub fn comments(&self, repo: &str, number: u64) -> Vec<Value> {
        self.state()
            .repos
            .get(repo)
            .and_then(|repo| repo.comments.get(&number))
            .cloned()
            .unwrap_or_default()
    }

    /// The commit statuses set on `sha`, oldest first.
    pub fn statuses(&self, repo: &str, sha: &str) -> Vec<Value> {
        self.state()
            .repos
            .get(repo)
            .and_then(|repo| repo.statuses.get(sha))
            .cloned()
            .unwrap_or_default()
    }

    /// The reviews submitted on pull request `number`, each as GitHub
    /// answered it plus the inline `comments` the request carried.
    pub fn reviews(&self, repo: &str, number: u64) -> Vec<Value> {
        self.state()
            .repos
            .get(repo)
            .and_then(|repo| repo.reviews.get(&number))
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until `pred` holds over the requests received, and returns
    /// them; panics after the testkit's patience naming `what` and the
    /// requests seen.
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

#[cfg(test)]
mod tests {
    use super::record::DOCS;
    use super::*;
    use serde_json::json;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Sends `head` (request line and headers, without the blank line) and
    /// `body` over a fresh connection; the status, lower-cased head and body.
    async fn raw(fake: &FakeGithub, head: &str, body: &str) -> (u16, String, Value) {
        let mut stream = tokio::net::TcpStream::connect(fake.addr).await.unwrap();
        let request = format!(
            "{head}\r\nhost: {}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            fake.addr,
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        let response = String::from_utf8(response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let status = head[9..12].parse().unwrap();
        (
            status,
            head.to_ascii_lowercase(),
            serde_json::from_str(body).unwrap(),
        )
    }

    const AUTH: &str = "authorization: Bearer ghp_faketoken\r\nuser-agent: test";

    #[tokio::test]
    async fn refusals_come_with_githubs_status_and_message() {
        let fake = FakeGithub::start().await;
        fake.add_pull_from_payload(&json!({
            "repository": {"full_name": "o/r", "default_branch": "main"},
            "pull_request": {"number": 1, "head": {"sha": "abc"}},
        }));

        let (status, _, body) = raw(
            &fake,
            "GET /user HTTP/1.1\r\nauthorization: Bearer ghp_faketoken",
            "",
        )
        .await;
        assert_eq!(status, 403);
        assert!(body["message"].as_str().unwrap().contains("User-Agent"));

        let (status, _, body) = raw(&fake, "GET /user HTTP/1.1\r\nuser-agent: test", "").await;
        assert_eq!(
            (status, body["message"].as_str()),
            (401, Some("Requires authentication"))
        );

        let (status, _, body) = raw(
            &fake,
            "GET /user HTTP/1.1\r\nuser-agent: test\r\nauthorization: token nope",
            "",
        )
        .await;
        assert_eq!(
            (status, body["message"].as_str()),
            (401, Some("Bad credentials"))
        );
        assert_eq!(body["documentation_url"], DOCS);

        let (status, _, body) = raw(
            &fake,
            &format!("POST /repos/o/r/issues/1/comments HTTP/1.1\r\n{AUTH}"),
            "{not json",
        )
        .await;
        assert_eq!(
            (status, body["message"].as_str()),
            (400, Some("Problems parsing JSON"))
        );

        let (status, _, body) = raw(
            &fake,
            &format!("GET /user HTTP/1.1\r\n{AUTH}\r\nx-github-api-version: 1999-01-01"),
            "",
        )
        .await;
        assert_eq!(status, 400, "{body}");

        let (status, _, body) = raw(
            &fake,
            &format!("POST /repos/o/r/issues/7/comments HTTP/1.1\r\n{AUTH}"),
            r#"{"body":"x"}"#,
        )
        .await;
        assert_eq!((status, body["message"].as_str()), (404, Some("Not Found")));

        let (status, _, body) = raw(
            &fake,
            &format!("POST /repos/o/r/issues/1/comments HTTP/1.1\r\n{AUTH}"),
            "{}",
        )
        .await;
        assert_eq!(
            (status, body["errors"][0]["code"].as_str()),
            (422, Some("missing_field"))
        );

        let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
        assert_eq!(statuses, [403, 401, 401, 400, 400, 404, 422]);
    }

    #[tokio::test]
    async fn every_response_carries_rate_limit_and_request_id_headers() {
        let fake = FakeGithub::start().await;
        let (status, head, body) = raw(&fake, &format!("GET /user HTTP/1.1\r\n{AUTH}"), "").await;
        assert_eq!(
            (status, body["login"].as_str()),
            (200, Some(FakeGithub::LOGIN))
        );
        for header in [
            "x-ratelimit-limit: 5000",
            "x-ratelimit-remaining: 4999",
            "x-ratelimit-used: 1",
            "x-ratelimit-resource: core",
            "x-ratelimit-reset: ",
            "x-github-request-id: ",
            "content-type: application/json; charset=utf-8",
        ] {
            assert!(head.contains(header), "{header:?} missing from {head}");
        }
        let (_, head, _) = raw(&fake, "GET /nowhere HTTP/1.1\r\nuser-agent: test", "").await;
        assert!(head.contains("x-ratelimit-remaining: 4998"), "{head}");
    }
}
