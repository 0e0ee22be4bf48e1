//! Pull request URLs: reading `https://<host>/OWNER/REPO/pull/N`, choosing
//! the REST API it lives behind, and building the `pull_request` payload
//! GitHub would send for it from the pull request and repository the API
//! returns.
//!
//! The pull request, repository and sender objects are embedded as the
//! API wrote them (`RawValue`), so their keys keep the API's order.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::command::{Exit, chain};
use super::delivery::compact;

/// GitHub's media type and API version, as its REST docs ask clients to send.
const ACCEPT: &str = "application/vnd.github+json";
const API_VERSION: &str = "2022-11-28";

/// A pull request named by its web URL.
#[derive(Debug, PartialEq)]
pub(super) struct PullUrl {
    /// `scheme://host[:port]` of the web URL.
    pub origin: String,
    /// The host alone.
    pub host: String,
    pub owner: String,
    pub repo: String,
    pub number: u64,
}

/// True when the argument is meant as a URL rather than a file path.
pub(super) fn looks_like_url(text: &str) -> bool {
    text.starts_with("https://") || text.starts_with("http://")
}

/// Reads a pull request's web URL; `/files`, `/commits`, a query or a
/// fragment after the number are allowed (what a browser's address bar
/// shows).
pub(super) fn parse_url(text: &str) -> Result<PullUrl, String> {
    let usage = "expected a pull request URL such as https://github.com/OWNER/REPO/pull/123";
    let url = reqwest::Url::parse(text).map_err(|e| format!("`{text}`: {e}; {usage}"))?;
    let host = url
        .host_str()
        .ok_or_else(|| format!("`{text}` has no host; {usage}"))?
        .to_owned();
    let segments: Vec<&str> = url
        .path_segments()
        .map(|s| s.filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    let [owner, repo, "pull", number, ..] = segments.as_slice() else {
        return Err(format!("`{text}` is not a pull request URL; {usage}"));
    };
    let number = number
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{text}`: `{number}` is not a pull request number; {usage}"))?;
    let origin = match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    };
    Ok(PullUrl {
        origin,
        host,
        owner: (*owner).to_owned(),
        repo: (*repo).to_owned(),
        number,
    })
}

/// The REST API of a pull request's host: `https://api.github.com` for
/// github.com, `<origin>/api/v3` for a GitHub Enterprise Server.
pub(super) fn default_api(pr: &PullUrl) -> String {
    if pr.host.eq_ignore_ascii_case("github.com") || pr.host.eq_ignore_ascii_case("www.github.com")
    {
        "https://api.github.com".to_owned()
    } else {
        format!("{}/api/v3", pr.origin)
    }
}

/// The fields of the pull request the payload needs besides the object.
#[derive(Deserialize)]
struct PullFields<'a> {
    #[serde(borrow)]
    user: &'a RawValue,
}

/// The `pull_request` event's payload, in the order GitHub writes it.
#[derive(Serialize)]
struct PullRequestEvent<'a> {
    action: &'a str,
    number: u64,
    pull_request: &'a RawValue,
    repository: &'a RawValue,
    sender: &'a RawValue,
}

/// Fetches the pull request and its repository and returns the compact
/// payload of a `pull_request` event with `action`.
pub(super) async fn payload(
    client: &reqwest::Client,
    api: &str,
    token: Option<&str>,
    pr: &PullUrl,
    action: &str,
) -> Result<String, Exit> {
    let api = api.trim_end_matches('/');
    let repo_url = format!("{api}/repos/{}/{}", pr.owner, pr.repo);
    let pull_url = format!("{repo_url}/pulls/{}", pr.number);
    let (pull_text, repo_text) =
        futures::try_join!(get(client, &pull_url, token), get(client, &repo_url, token))?;
    let not_json = |url: &str| Exit::unreachable(format_args!("GET {url}: the answer is not JSON"));
    let pull: &RawValue = serde_json::from_str(&pull_text).map_err(|_| not_json(&pull_url))?;
    let repository: &RawValue =
        serde_json::from_str(&repo_text).map_err(|_| not_json(&repo_url))?;
    let fields: PullFields<'_> = serde_json::from_str(pull.get()).map_err(|_| {
        Exit::unreachable(format_args!(
            "GET {pull_url}: the answer is not a pull request (no `user`)"
        ))
    })?;
    let event = PullRequestEvent {
        action,
        number: pr.number,
        pull_request: pull,
        repository,
        sender: fields.user,
    };
    let text = serde_json::to_string(&event)
        .map_err(|e| Exit::unusable(format_args!("failed to write the payload: {e}")))?;
    Ok(compact(&text))
}

/// `GET url` with GitHub's headers; the body of a 2xx answer, or exit 3
/// with the API's status and message.
async fn get(client: &reqwest::Client, url: &str, token: Option<&str>) -> Result<String, Exit> {
    let mut request = client
        .get(url)
        .header(reqwest::header::ACCEPT, ACCEPT)
        .header("X-GitHub-Api-Version", API_VERSION)
        .timeout(std::time::Duration::from_secs(30));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request
        .send()
        .await
        .map_err(|e| Exit::unreachable(format_args!("GET {url} failed: {}", chain(&e))))?;
    let status = response.status();
    let text = response.text().await.map_err(|e| {
        Exit::unreachable(format_args!("GET {url}: reading the answer failed: {e}"))
    })?;
    if status.is_success() {
        return Ok(text);
    }
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("message")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| text.chars().take(200).collect());
    let hint = match (status.as_u16(), token) {
        (401 | 403 | 404, None) => {
            " (a private repository needs a token: set GITHUB_TOKEN or GH_TOKEN)"
        }
        (401 | 403, Some(_)) => " (check that the token in GITHUB_TOKEN/GH_TOKEN can read it)",
        _ => "",
    };
    Err(Exit::unreachable(format_args!(
        "GET {url} answered {status}: {message}{hint}"
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn pull_request_urls_name_owner_repo_and_number() {
        for text in [
            "https://github.com/octo/hello/pull/12",
            "https://github.com/octo/hello/pull/12/files",
            "https://github.com/octo/hello/pull/12/?w=1#discussion",
        ] {
            let pr = parse_url(text).unwrap();
            assert_eq!(
                (pr.owner.as_str(), pr.repo.as_str(), pr.number),
                ("octo", "hello", 12),
                "{text}"
            );
            assert_eq!(default_api(&pr), "https://api.github.com");
        }
    }

    #[test]
    fn an_enterprise_host_has_its_api_under_api_v3() {
        let pr = parse_url("https://git.example.com/team/app/pull/3").unwrap();
        assert_eq!(default_api(&pr), "https://git.example.com/api/v3");
        let local = parse_url("http://127.0.0.1:8080/team/app/pull/3").unwrap();
        assert_eq!(default_api(&local), "http://127.0.0.1:8080/api/v3");
    }

    #[test]
    fn other_urls_are_not_pull_requests() {
        for text in [
            "https://github.com/octo/hello",
            "https://github.com/octo/hello/issues/12",
            "https://github.com/octo/hello/pull/",
            "https://github.com/octo/hello/pull/0",
            "https://github.com/octo/hello/pull/twelve",
            "https://",
        ] {
            assert!(parse_url(text).is_err(), "{text}");
        }
    }

    #[test]
    fn urls_and_paths_are_told_apart_by_scheme() {
        assert!(looks_like_url("https://github.com/o/r/pull/1"));
        assert!(looks_like_url("http://localhost/o/r/pull/1"));
        assert!(!looks_like_url("delivery.json"));
        assert!(!looks_like_url("./https/delivery.json"));
    }
}
