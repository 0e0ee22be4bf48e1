//! The REST client against the fake GitHub API over real sockets: the
//! headers it sends, pagination, media types, how each error status maps to
//! an `ApiError`, the retry policy (server errors, `retry-after`,
//! `x-ratelimit-reset`, waits longer than allowed), GitHub App
//! authentication end to end with real RSA keys, and the rule that the
//! token never leaves the API's origin.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bdk_github::api::{ApiError, ApiRequest, ClientOptions, Credentials, GithubClient, Method};
use bdk_testkit::github::{Failure, FakeGithub, Recorded};
use serde_json::{Value, json};

const REPO: &str = "Codertocat/Hello-World";
const PR: u64 = 2;

/// The real webhook examples GitHub documents, installed by `.ci/test-deps`.
fn webhook_examples() -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/github-fixtures/node_modules/@octokit/webhooks-examples/api.github.com/index.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "the GitHub webhook examples are missing at {} ({e}); run .ci/test-deps to install them",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap()
}

/// The `pull_request.opened` example: Codertocat/Hello-World#2.
fn pull_request_opened() -> Value {
    webhook_examples()
        .into_iter()
        .find(|group| group["name"] == "pull_request")
        .and_then(|group| {
            group["examples"]
                .as_array()?
                .iter()
                .find(|example| {
                    example["action"] == "opened"
                        && example["repository"]["full_name"] == REPO
                        && example["number"] == PR
                })
                .cloned()
        })
        .expect("the pull_request examples hold opened Codertocat/Hello-World#2")
}

const README_PATCH: &str = "@@ -1 +1,2 @@\n-# Hello-World\n+# Hello World\n+Now with more words.";

/// A fake seeded with the opened pull request and one changed file.
async fn seeded_fake() -> FakeGithub {
    let fake = FakeGithub::start().await;
    fake.add_pull_from_payload(&pull_request_opened());
    fake.set_pull_files(
        REPO,
        PR,
        vec![("README.md".into(), "modified".into(), README_PATCH.into())],
    );
    fake
}

/// Options that keep retries quick: short backoff, a few seconds of
/// patience for rate limits.
fn quick() -> ClientOptions {
    ClientOptions {
        max_attempts: 3,
        max_wait: Duration::from_secs(5),
        backoff: Duration::from_millis(10),
        timeout: Duration::from_secs(10),
        user_agent: "bdk-github-tests".into(),
    }
}

fn token_client(fake: &FakeGithub) -> GithubClient {
    GithubClient::new(
        &fake.url(),
        Credentials::Token(FakeGithub::TOKEN.into()),
        quick(),
    )
    .unwrap()
}

fn count(requests: &[Recorded], method: &str, path: &str) -> usize {
    requests
        .iter()
        .filter(|r| r.method == method && r.path == path)
        .count()
}

fn status_error(error: &ApiError) -> (u16, &str) {
    match error {
        ApiError::Status {
            status, message, ..
        } => (*status, message.as_str()),
        other => panic!("expected a status error, got {other:?}"),
    }
}

#[tokio::test]
async fn token_requests_carry_githubs_headers_and_login_is_the_tokens_user() {
    let fake = seeded_fake().await;
    let client = token_client(&fake);
    let repo = client.get(&format!("/repos/{REPO}"), None).await.unwrap();
    assert_eq!(repo["full_name"], REPO);
    assert_eq!(client.login().await.unwrap(), FakeGithub::LOGIN);
    // Learnt once.
    assert_eq!(client.login().await.unwrap(), FakeGithub::LOGIN);

    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let first = &requests[0];
    assert_eq!(first.header("authorization"), Some("Bearer ghp_faketoken"));
    assert_eq!(first.header("accept"), Some("application/vnd.github+json"));
    assert_eq!(first.header("x-github-api-version"), Some("2022-11-28"));
    assert_eq!(first.header("user-agent"), Some("bdk-github-tests"));
    assert_eq!(requests[1].path, "/user");
}

#[tokio::test]
async fn request_reports_the_next_page_and_the_rate_budget() {
    let fake = seeded_fake().await;
    let files: Vec<_> = (0..5)
        .map(|i| {
            (
                format!("f{i}.txt"),
                "added".to_owned(),
                "@@ -0,0 +1 @@\n+x".to_owned(),
            )
        })
        .collect();
    fake.set_pull_files(REPO, PR, files);
    let client = token_client(&fake);
    let response = client
        .request(ApiRequest::new(
            Method::Get,
            format!("/repos/{REPO}/pulls/{PR}/files?per_page=2"),
        ))
        .await
        .unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.body.as_array().unwrap().len(), 2);
    let next = response.next.expect("a first page of three links the next");
    assert!(
        next.starts_with(&fake.url()) && next.contains("page=2"),
        "{next}"
    );
    assert!(response.rate_remaining.is_some_and(|left| left < 5000));

    // The link goes back in as the path, as GitHub's docs advise.
    let second = client
        .request(ApiRequest::new(Method::Get, next))
        .await
        .unwrap();
    assert_eq!(second.body[0]["filename"], "f2.txt");
}

#[tokio::test]
async fn paginate_follows_link_next_across_pages_and_stops_at_max_items() {
    let fake = seeded_fake().await;
    let files: Vec<_> = (0..250)
        .map(|i| {
            (
                format!("src/f{i:03}.rs"),
                "modified".to_owned(),
                "@@ -1 +1 @@\n-a\n+b".to_owned(),
            )
        })
        .collect();
    fake.set_pull_files(REPO, PR, files);
    let client = token_client(&fake);
    let path = format!("/repos/{REPO}/pulls/{PR}/files");

    let all = client.paginate(&path, None, 1000).await.unwrap();
    assert_eq!(all.len(), 250);
    assert_eq!(all[0]["filename"], "src/f000.rs");
    assert_eq!(all[249]["filename"], "src/f249.rs");
    let pages: Vec<_> = fake
        .requests()
        .iter()
        .map(|r| (r.query_param("per_page"), r.query_param("page")))
        .collect();
    assert_eq!(
        pages,
        vec![
            (Some("100".into()), None),
            (Some("100".into()), Some("2".into())),
            (Some("100".into()), Some("3".into())),
        ]
    );

    let some = client.paginate(&path, None, 150).await.unwrap();
    assert_eq!(some.len(), 150);
    assert_eq!(
        fake.requests().len(),
        3 + 2,
        "the third page is not fetched"
    );
}

#[tokio::test]
async fn the_diff_comes_back_as_text() {
    let fake = seeded_fake().await;
    let client = token_client(&fake);
    let diff = client
        .text(
            &format!("/repos/{REPO}/pulls/{PR}"),
            "application/vnd.github.diff",
            None,
        )
        .await
        .unwrap();
    assert!(
        diff.starts_with("diff --git a/README.md b/README.md\n"),
        "{diff}"
    );
    assert!(
        diff.contains("--- a/README.md\n+++ b/README.md\n"),
        "{diff}"
    );
    assert!(diff.contains(README_PATCH), "{diff}");
    assert_eq!(
        fake.requests()[0].header("accept"),
        Some("application/vnd.github.diff")
    );

    // Through `request`, a non-JSON body is a string value.
    let response = client
        .request(
            ApiRequest::new(Method::Get, format!("/repos/{REPO}/pulls/{PR}"))
                .with_accept("application/vnd.github.diff"),
        )
        .await
        .unwrap();
    assert_eq!(response.body, Value::String(diff));
}

#[tokio::test]
async fn file_contents_round_trip_and_a_missing_file_is_not_found() {
    let fake = seeded_fake().await;
    let head = pull_request_opened()["pull_request"]["head"]["sha"]
        .as_str()
        .unwrap()
        .to_owned();
    let content = "fn main() {\n    println!(\"hello\");\n}\n".repeat(10);
    fake.add_file(REPO, &head, "src/main.rs", content.as_bytes());
    let client = token_client(&fake);

    let file = client
        .get(
            &format!("/repos/{REPO}/contents/src/main.rs?ref={head}"),
            Some(REPO),
        )
        .await
        .unwrap();
    assert_eq!(file["type"], "file");
    assert_eq!(file["encoding"], "base64");
    assert_eq!(file["size"], content.len());
    let encoded = file["content"].as_str().unwrap();
    assert!(
        encoded.lines().all(|line| line.len() <= 60),
        "wrapped like GitHub"
    );
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.replace('\n', ""))
        .unwrap();
    assert_eq!(decoded, content.as_bytes());

    let missing = client
        .get(&format!("/repos/{REPO}/contents/nope.rs?ref={head}"), None)
        .await
        .unwrap_err();
    assert_eq!(missing.code(), "github_not_found");
    assert_eq!(status_error(&missing), (404, "Not Found"));
}

#[tokio::test]
async fn error_statuses_map_to_codes_with_githubs_message() {
    let fake = seeded_fake().await;
    let client = token_client(&fake);

    let bad_token =
        GithubClient::new(&fake.url(), Credentials::Token("ghp_wrong".into()), quick()).unwrap();
    let error = bad_token
        .get(&format!("/repos/{REPO}"), None)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "github_unauthorized");
    assert_eq!(status_error(&error), (401, "Bad credentials"));

    fake.fail_next(
        Failure::new(403, "/pulls/2").message("Resource not accessible by personal access token"),
    );
    let error = client
        .get(&format!("/repos/{REPO}/pulls/{PR}"), None)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "github_forbidden");
    assert_eq!(
        status_error(&error),
        (403, "Resource not accessible by personal access token")
    );

    let error = client.get("/repos/octo/unknown", None).await.unwrap_err();
    assert_eq!(error.code(), "github_not_found");
    assert_eq!(error.status(), Some(404));

    let sha = "6dcb09b5b57875f334f61aebed695e2e4193db5e";
    let error = client
        .send(
            Method::Post,
            &format!("/repos/{REPO}/statuses/{sha}"),
            json!({"state": "done", "context": "bdk"}),
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), "github_invalid");
    let ApiError::Status {
        message,
        errors,
        documentation_url,
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(message, "Validation Failed");
    assert_eq!(errors[0]["field"], "state");
    assert!(documentation_url.is_some());

    fake.fail_next(Failure::new(409, "/pulls/2").message("Conflict"));
    let error = client
        .get(&format!("/repos/{REPO}/pulls/{PR}"), None)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "github_status");

    // None of these is retried: one request each.
    assert_eq!(fake.requests().len(), 5);
}

#[tokio::test]
async fn server_errors_are_retried_for_get_but_not_for_post() {
    let fake = seeded_fake().await;
    let client = token_client(&fake);
    let pull = format!("/repos/{REPO}/pulls/{PR}");

    fake.fail_next(Failure::new(502, "/pulls/2").on("GET").times(2));
    let body = client.get(&pull, None).await.unwrap();
    assert_eq!(body["number"], PR);
    assert_eq!(count(&fake.requests(), "GET", &pull), 3);

    fake.fail_next(Failure::new(503, "/pulls/2").on("GET").times(10));
    let error = client.get(&pull, None).await.unwrap_err();
    assert_eq!(error.code(), "github_unavailable");
    assert_eq!(error.status(), Some(503));
    assert_eq!(
        count(&fake.requests(), "GET", &pull),
        3 + 3,
        "max_attempts in all"
    );

    let comments = format!("/repos/{REPO}/issues/{PR}/comments");
    fake.fail_next(Failure::new(500, "/comments").on("POST"));
    let error = client
        .send(Method::Post, &comments, json!({"body": "hi"}), None)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "github_unavailable");
    assert_eq!(
        count(&fake.requests(), "POST", &comments),
        1,
        "a POST may have been processed"
    );
    assert!(fake.comments(REPO, PR).is_empty());
}

#[tokio::test]
async fn transport_failures_are_retried_then_reported() {
    // A port nobody listens on: bind one, then free it.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let client = GithubClient::new(
        &format!("http://127.0.0.1:{port}"),
        Credentials::Token("t".into()),
        quick(),
    )
    .unwrap();
    let error = client.get("/user", None).await.unwrap_err();
    assert!(matches!(error, ApiError::Transport(_)), "{error:?}");
    assert_eq!(error.code(), "github_unavailable");
}

#[tokio::test]
async fn retry_after_is_honoured_once_then_the_request_succeeds() {
    let fake = seeded_fake().await;
    let client = token_client(&fake);
    fake.fail_next(
        Failure::new(429, &format!("/repos/{REPO}"))
            .header("retry-after", "1")
            .message("You have exceeded a secondary rate limit."),
    );
    let started = Instant::now();
    let repo = client.get(&format!("/repos/{REPO}"), None).await.unwrap();
    assert_eq!(repo["full_name"], REPO);
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "waited {:?}",
        started.elapsed()
    );
    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [429, 200]);

    // A refused POST was not processed, so it goes again (once).
    let comments = format!("/repos/{REPO}/issues/{PR}/comments");
    fake.fail_next(
        Failure::new(403, "/comments")
            .on("POST")
            .header("retry-after", "0"),
    );
    client
        .send(Method::Post, &comments, json!({"body": "hi"}), None)
        .await
        .unwrap();
    assert_eq!(count(&fake.requests(), "POST", &comments), 2);
    assert_eq!(fake.comments(REPO, PR).len(), 1);
}

#[tokio::test]
async fn an_exhausted_primary_limit_waits_for_its_reset() {
    let fake = seeded_fake().await;
    let client = token_client(&fake);
    let path = format!("/repos/{REPO}");
    let now = chrono::Utc::now().timestamp();

    // A reset already past: retry at once.
    fake.fail_next(
        Failure::new(403, &path)
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", &(now - 10).to_string())
            .message("API rate limit exceeded for user ID 1."),
    );
    let started = Instant::now();
    client.get(&path, None).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));

    // A reset a second away: wait for it.
    fake.fail_next(
        Failure::new(429, &path)
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", &(now + 1).to_string()),
    );
    client.get(&path, None).await.unwrap();
    assert!(
        chrono::Utc::now().timestamp() > now,
        "the retry went out before the reset"
    );
    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [403, 200, 429, 200]);
}

#[tokio::test]
async fn a_wait_longer_than_max_wait_fails_at_once() {
    let fake = seeded_fake().await;
    let client = token_client(&fake);
    let path = format!("/repos/{REPO}");
    let reset = chrono::Utc::now().timestamp() + 3600;

    fake.fail_next(
        Failure::new(403, &path)
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", &reset.to_string())
            .message("API rate limit exceeded for user ID 1."),
    );
    let started = Instant::now();
    let error = client.get(&path, None).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2), "it waited");
    assert_eq!(error.code(), "github_rate_limited");
    let ApiError::RateLimited {
        message,
        retry_after,
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(message, "API rate limit exceeded for user ID 1.");
    assert!(retry_after.unwrap() > Duration::from_secs(3500));

    // A secondary limit naming no time asks for a minute: more than allowed.
    fake.fail_next(Failure::new(403, &path).message(
        "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
    ));
    let error = client.get(&path, None).await.unwrap_err();
    assert!(
        matches!(error, ApiError::RateLimited { retry_after: Some(wait), .. } if wait == Duration::from_secs(60)),
        "{error:?}"
    );

    // Out of attempts on short waits is rate limited too.
    fake.fail_next(
        Failure::new(429, &path)
            .header("retry-after", "0")
            .times(10),
    );
    let error = client.get(&path, None).await.unwrap_err();
    assert_eq!(error.code(), "github_rate_limited");
    assert_eq!(count(&fake.requests(), "GET", &path), 1 + 1 + 3);
}

#[tokio::test]
async fn a_link_to_another_origin_is_refused() {
    let fake = seeded_fake().await;
    let elsewhere = FakeGithub::start().await;
    let client = token_client(&fake);
    let path = format!("/repos/{REPO}/issues/{PR}/comments");
    fake.fail_next(
        Failure::new(200, "/comments")
            .header(
                "link",
                &format!("<{}{path}?page=2>; rel=\"next\"", elsewhere.url()),
            )
            .body(json!([{"id": 1}])),
    );
    let error = client.paginate(&path, None, 100).await.unwrap_err();
    assert_eq!(error.code(), "github_request", "{error:?}");
    assert!(
        elsewhere.requests().is_empty(),
        "the token went to another origin"
    );

    // Nor may a caller send one there directly.
    let error = client
        .get(&format!("{}/user", elsewhere.url()), None)
        .await
        .unwrap_err();
    assert!(matches!(error, ApiError::Request(_)), "{error:?}");
    assert!(elsewhere.requests().is_empty());
}

/// An RSA key pair made by openssl, in both PEM forms GitHub Apps meet, with
/// the public key as the fake wants it.
struct Keys {
    pkcs1: String,
    pkcs8: String,
    public_der: Vec<u8>,
}

fn openssl(args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl runs (it makes the test's RSA keys)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn make_keys() -> Keys {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    openssl(&["genrsa", "-traditional", "-out", &path("pkcs1.pem"), "2048"]);
    openssl(&[
        "pkcs8",
        "-topk8",
        "-nocrypt",
        "-in",
        &path("pkcs1.pem"),
        "-out",
        &path("pkcs8.pem"),
    ]);
    openssl(&[
        "rsa",
        "-in",
        &path("pkcs1.pem"),
        "-RSAPublicKey_out",
        "-outform",
        "DER",
        "-out",
        &path("public.der"),
    ]);
    let keys = Keys {
        pkcs1: std::fs::read_to_string(path("pkcs1.pem")).unwrap(),
        pkcs8: std::fs::read_to_string(path("pkcs8.pem")).unwrap(),
        public_der: std::fs::read(path("public.der")).unwrap(),
    };
    assert!(keys.pkcs1.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    assert!(keys.pkcs8.starts_with("-----BEGIN PRIVATE KEY-----"));
    keys
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(make_keys)
}

fn other_keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(make_keys)
}

const APP_ID: u64 = 4242;
const INSTALLATION: u64 = 77;

async fn app_fake() -> FakeGithub {
    let fake = seeded_fake().await;
    fake.add_app(
        APP_ID,
        "pr-helper",
        keys().public_der.clone(),
        &[(INSTALLATION, REPO)],
    );
    fake.add_repo("someone/else");
    fake
}

fn app_client(fake: &FakeGithub, pem: &str, installation_id: Option<u64>) -> GithubClient {
    GithubClient::new(
        &fake.url(),
        Credentials::App {
            app_id: APP_ID.to_string(),
            private_key_pem: pem.to_owned(),
            installation_id,
        },
        quick(),
    )
    .unwrap()
}

fn bearer(request: &Recorded) -> &str {
    request
        .header("authorization")
        .and_then(|value| value.strip_prefix("Bearer "))
        .expect("a bearer token")
}

/// The JWT's header and claims, decoded (the fake checked the signature).
fn jwt_parts(jwt: &str) -> (Value, Value) {
    let decode = |part: &str| -> Value {
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(part)
                .unwrap(),
        )
        .unwrap()
    };
    let parts: Vec<&str> = jwt.split('.').collect();
    assert_eq!(parts.len(), 3, "{jwt}");
    (decode(parts[0]), decode(parts[1]))
}

async fn app_auth_end_to_end(pem: &str) {
    let fake = app_fake().await;
    let client = app_client(&fake, pem, None);

    let pull = client
        .get(&format!("/repos/{REPO}/pulls/{PR}"), Some(REPO))
        .await
        .unwrap();
    assert_eq!(pull["number"], PR);
    let comment = client
        .send(
            Method::Post,
            &format!("/repos/{REPO}/issues/{PR}/comments"),
            json!({"body": "Looking at it."}),
            Some(REPO),
        )
        .await
        .unwrap();
    assert_eq!(comment["user"]["login"], "pr-helper[bot]");
    assert_eq!(client.login().await.unwrap(), "pr-helper[bot]");

    let requests = fake.requests();
    let route: Vec<(String, String, u16)> = requests
        .iter()
        .map(|r| (r.method.clone(), r.path.clone(), r.status))
        .collect();
    assert_eq!(
        route,
        vec![
            ("GET".into(), format!("/repos/{REPO}/installation"), 200),
            (
                "POST".into(),
                format!("/app/installations/{INSTALLATION}/access_tokens"),
                201
            ),
            ("GET".into(), format!("/repos/{REPO}/pulls/{PR}"), 200),
            (
                "POST".into(),
                format!("/repos/{REPO}/issues/{PR}/comments"),
                201
            ),
            ("GET".into(), "/app".into(), 200),
        ],
        "the installation is looked up once and its token cached"
    );
    let (header, claims) = jwt_parts(bearer(&requests[0]));
    assert_eq!(header, json!({"alg": "RS256", "typ": "JWT"}));
    assert_eq!(claims["iss"], APP_ID);
    let (iat, exp) = (
        claims["iat"].as_i64().unwrap(),
        claims["exp"].as_i64().unwrap(),
    );
    let now = chrono::Utc::now().timestamp();
    assert!(
        iat <= now - 50 && iat >= now - 120,
        "iat is backdated a minute: {iat} vs {now}"
    );
    assert_eq!(exp - iat, 600);
    let token = bearer(&requests[2]);
    assert!(token.starts_with("ghs_"), "{token}");
    assert_eq!(bearer(&requests[3]), token);
    assert!(
        bearer(&requests[4]).contains('.'),
        "GET /app goes with the JWT"
    );

    // A repository the App is not installed on.
    let error = client
        .get("/repos/someone/else", Some("someone/else"))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "github_auth", "{error:?}");
}

#[tokio::test]
async fn app_auth_end_to_end_with_a_pkcs1_key() {
    app_auth_end_to_end(&keys().pkcs1).await;
}

#[tokio::test]
async fn app_auth_end_to_end_with_a_pkcs8_key() {
    app_auth_end_to_end(&keys().pkcs8).await;
}

#[tokio::test]
async fn a_configured_installation_needs_no_lookup_and_no_repo() {
    let fake = app_fake().await;
    let client = app_client(&fake, &keys().pkcs1, Some(INSTALLATION));
    client.get(&format!("/repos/{REPO}"), None).await.unwrap();
    let paths: Vec<String> = fake.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        paths,
        [
            format!("/app/installations/{INSTALLATION}/access_tokens"),
            format!("/repos/{REPO}")
        ]
    );

    // Without one, a request must say which repository it is for.
    let client = app_client(&fake, &keys().pkcs1, None);
    let error = client
        .get(&format!("/repos/{REPO}"), None)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "github_auth");
}

#[tokio::test]
async fn an_installation_token_is_refreshed_when_it_is_about_to_expire() {
    let fake = app_fake().await;
    let client = app_client(&fake, &keys().pkcs1, Some(INSTALLATION));
    let mint = format!("/app/installations/{INSTALLATION}/access_tokens");

    // Tokens that live four minutes are inside the five-minute margin:
    // each request needs a fresh one.
    fake.set_token_lifetime(Duration::from_secs(240));
    client.get(&format!("/repos/{REPO}"), None).await.unwrap();
    client.get(&format!("/repos/{REPO}"), None).await.unwrap();
    assert_eq!(count(&fake.requests(), "POST", &mint), 2);

    // An hour-long token is kept.
    fake.set_token_lifetime(Duration::from_secs(3600));
    client.get(&format!("/repos/{REPO}"), None).await.unwrap();
    client.get(&format!("/repos/{REPO}"), None).await.unwrap();
    client.get(&format!("/repos/{REPO}"), None).await.unwrap();
    assert_eq!(count(&fake.requests(), "POST", &mint), 3);
}

#[tokio::test]
async fn a_revoked_installation_token_is_reminted_after_the_401() {
    let fake = app_fake().await;
    let client = app_client(&fake, &keys().pkcs8, None);
    let path = format!("/repos/{REPO}");
    client.get(&path, Some(REPO)).await.unwrap();
    fake.revoke_installation_tokens();
    client.get(&path, Some(REPO)).await.unwrap();

    let route: Vec<(String, u16)> = fake
        .requests()
        .iter()
        .map(|r| (format!("{} {}", r.method, r.path), r.status))
        .collect();
    let mint = format!("POST /app/installations/{INSTALLATION}/access_tokens");
    assert_eq!(
        route,
        vec![
            (format!("GET {path}/installation"), 200),
            (mint.clone(), 201),
            (format!("GET {path}"), 200),
            (format!("GET {path}"), 401),
            (mint, 201),
            (format!("GET {path}"), 200),
        ]
    );
}

#[tokio::test]
async fn concurrent_callers_share_one_token_mint() {
    let fake = app_fake().await;
    let client = app_client(&fake, &keys().pkcs1, Some(INSTALLATION));
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.get(&format!("/repos/{REPO}"), None).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    let mint = format!("/app/installations/{INSTALLATION}/access_tokens");
    assert_eq!(count(&fake.requests(), "POST", &mint), 1);
}

#[tokio::test]
async fn a_jwt_signed_with_another_key_is_refused_and_a_bad_key_fails_up_front() {
    let fake = app_fake().await;
    let client = app_client(&fake, &other_keys().pkcs1, Some(INSTALLATION));
    let error = client
        .get(&format!("/repos/{REPO}"), None)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "github_auth", "{error:?}");
    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [401],
        "the fake checks the signature, the client does not retry"
    );

    let bad = GithubClient::new(
        &fake.url(),
        Credentials::App {
            app_id: APP_ID.to_string(),
            private_key_pem:
                "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n".into(),
            installation_id: None,
        },
        quick(),
    )
    .unwrap_err();
    assert_eq!(bad.code(), "github_auth");
}

#[tokio::test]
async fn an_installation_token_reaches_only_its_installations_repositories() {
    let fake = app_fake().await;
    let client = app_client(&fake, &keys().pkcs1, Some(INSTALLATION));
    let error = client.get("/repos/someone/else", None).await.unwrap_err();
    assert_eq!(error.code(), "github_not_found");
    let error = client.get("/user", None).await.unwrap_err();
    assert_eq!(
        status_error(&error),
        (403, "Resource not accessible by integration")
    );
}

#[tokio::test]
async fn comments_reviews_and_statuses_behave_like_github() {
    let fake = seeded_fake().await;
    let client = token_client(&fake);
    let issue = client
        .get(&format!("/repos/{REPO}/issues/{PR}"), None)
        .await
        .unwrap();
    assert!(
        issue["pull_request"]["url"].is_string(),
        "a pull request is an issue too"
    );

    // A banner: created once, then edited in place.
    let background = client.clone();
    let posted = tokio::spawn(async move {
        background
            .send(
                Method::Post,
                &format!("/repos/{REPO}/issues/{PR}/comments"),
                json!({"body": "Working on it"}),
                None,
            )
            .await
    });
    fake.wait_for("the banner comment", |requests| {
        requests
            .iter()
            .any(|r| r.method == "POST" && r.status == 201)
    })
    .await;
    let banner = posted.await.unwrap().unwrap();
    let id = banner["id"].as_u64().unwrap();
    assert_eq!(banner["user"]["login"], FakeGithub::LOGIN);
    let edited = client
        .send(
            Method::Patch,
            &format!("/repos/{REPO}/issues/comments/{id}"),
            json!({"body": "Done"}),
            None,
        )
        .await
        .unwrap();
    assert_eq!(edited["body"], "Done");
    let listed = client
        .paginate(&format!("/repos/{REPO}/issues/{PR}/comments"), None, 10)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["body"], "Done");
    assert_eq!(fake.comments(REPO, PR), listed);
    let missing = client
        .send(
            Method::Patch,
            &format!("/repos/{REPO}/issues/comments/999999"),
            json!({"body": "x"}),
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(missing.code(), "github_not_found");

    // A review with an inline comment on a line the diff shows.
    let reviews = format!("/repos/{REPO}/pulls/{PR}/reviews");
    let comment =
        |path: &str, line: u64| json!({"path": path, "line": line, "side": "RIGHT", "body": "nit"});
    let review = client
        .send(
            Method::Post,
            &reviews,
            json!({"body": "Looks fine", "event": "COMMENT", "comments": [comment("README.md", 2)]}),
            None,
        )
        .await
        .unwrap();
    assert_eq!(review["state"], "COMMENTED");
    assert_eq!(
        review["commit_id"],
        pull_request_opened()["pull_request"]["head"]["sha"]
    );
    for (bad, field) in [
        (comment("src/nope.rs", 1), "path"),
        (comment("README.md", 40), "line"),
    ] {
        let error = client
            .send(
                Method::Post,
                &reviews,
                json!({"body": "x", "event": "COMMENT", "comments": [bad]}),
                None,
            )
            .await
            .unwrap_err();
        let ApiError::Status { status, errors, .. } = &error else {
            panic!("{error:?}")
        };
        assert_eq!((*status, errors[0]["field"].as_str()), (422, Some(field)));
    }
    let stored = fake.reviews(REPO, PR);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["comments"][0]["path"], "README.md");

    // Commit statuses, pending then success.
    let sha = review["commit_id"].as_str().unwrap();
    for state in ["pending", "success"] {
        let status = client
            .send(
                Method::Post,
                &format!("/repos/{REPO}/statuses/{sha}"),
                json!({"state": state, "context": "bdk", "target_url": "http://127.0.0.1/trace", "description": "review"}),
                None,
            )
            .await
            .unwrap();
        assert_eq!(status["state"], state);
    }
    let states: Vec<Value> = fake
        .statuses(REPO, sha)
        .iter()
        .map(|status| status["state"].clone())
        .collect();
    assert_eq!(states, [json!("pending"), json!("success")]);
}
