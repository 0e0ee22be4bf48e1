//! `bdk github replay`: one delivery, built from a pull request URL or read
//! from a saved file, signed with the webhook secret and POSTed to the
//! server; the answer decides the exit code.

use super::command::{Exit, ReplayArgs, chain, http_client, target_url};
use super::delivery::{self, EventFrom};
use super::pr;
use super::send::{self, Answer};

/// The `User-Agent` GitHub's deliveries carry is `GitHub-Hookshot/<build>`;
/// ours says where it came from.
const USER_AGENT: &str = "GitHub-Hookshot/bdk-replay";

/// What is about to be sent.
struct Outgoing {
    event: String,
    payload: String,
    hook_headers: Vec<(String, String)>,
}

/// Runs `bdk github replay`.
pub(super) async fn run(args: ReplayArgs) -> Result<(), Exit> {
    let url = target_url(&args.server)?;
    let delivery_id = match args.delivery_id.clone() {
        Some(id) if id.trim().is_empty() => return Err(Exit::unusable("--delivery-id is empty")),
        Some(id) => id,
        None => uuid::Uuid::new_v4().to_string(),
    };
    let client = http_client()?;
    let outgoing = if pr::looks_like_url(&args.source) {
        from_pull_request(&client, &args).await?
    } else {
        from_file(&args).await?
    };

    let secret = std::env::var(&args.secret_env)
        .ok()
        .filter(|s| !s.is_empty());
    let signature = secret
        .as_ref()
        .map(|s| bdk_http::channels::sign(s.as_bytes(), outgoing.payload.as_bytes()));
    if signature.is_none() {
        errln!(
            "note: {} is not set: sending the delivery unsigned, which only a `bdk serve --dev` \
             server accepts",
            args.secret_env
        );
    }
    let mut pairs: Vec<(&str, &str)> = vec![
        ("Content-Type", "application/json"),
        ("User-Agent", USER_AGENT),
        ("X-GitHub-Event", &outgoing.event),
        ("X-GitHub-Delivery", &delivery_id),
    ];
    if let Some(signature) = &signature {
        pairs.push(("X-Hub-Signature-256", signature));
    }
    pairs.extend(
        outgoing
            .hook_headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str())),
    );
    let headers = send::header_map(pairs).map_err(Exit::unusable)?;

    let answer = send::post(&client, &url, headers, outgoing.payload)
        .await
        .map_err(|e| {
            Exit::unreachable(format_args!(
                "POST {url} failed: {e} (is `bdk serve` running there?)"
            ))
        })?;
    let line = format!("{} {delivery_id} -> ", outgoing.event);
    report(&answer, &line, args.json);
    if answer.accepted() {
        return Ok(());
    }
    let hint = match (answer.status.as_u16(), signature.is_some()) {
        (401, true) => format!(" (is {} the server's webhook secret?)", args.secret_env),
        (401, false) => format!(" (set {} to the server's webhook secret)", args.secret_env),
        (404, _) => format!(" (is {} a route the server serves?)", url.path()),
        _ => String::new(),
    };
    Err(Exit::refused(format_args!(
        "{line}{}{hint}",
        answer.refusal()
    )))
}

/// Prints the answer: the raw JSON on stdout with `--json` (the summary
/// then goes to stderr), else the summary of an accepted delivery on stdout.
fn report(answer: &Answer, line: &str, json: bool) {
    if json {
        outln!("{}", answer.text.trim_end());
        if answer.accepted() {
            errln!("{line}{}", answer.summary());
        }
    } else if answer.accepted() {
        outln!("{line}{}", answer.summary());
    }
}

/// The `pull_request` event of a pull request URL, fetched from the API.
async fn from_pull_request(client: &reqwest::Client, args: &ReplayArgs) -> Result<Outgoing, Exit> {
    let pull = pr::parse_url(&args.source).map_err(Exit::unusable)?;
    if let Some(event) = args.event.as_deref().filter(|e| *e != "pull_request") {
        return Err(Exit::unusable(format_args!(
            "a pull request URL sends a pull_request event, not `{event}`; \
             for another event replay a saved payload file"
        )));
    }
    let api = args
        .api_url
        .clone()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| pr::default_api(&pull));
    match reqwest::Url::parse(&api) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        Ok(_) | Err(_) => {
            return Err(Exit::unusable(format_args!(
                "the API URL `{api}` (--api-url or GITHUB_API_URL) is not an http(s) URL"
            )));
        }
    }
    let token = ["GITHUB_TOKEN", "GH_TOKEN"]
        .into_iter()
        .find_map(|name| std::env::var(name).ok().filter(|t| !t.trim().is_empty()));
    let payload = pr::payload(client, &api, token.as_deref(), &pull, &args.action).await?;
    Ok(Outgoing {
        event: "pull_request".to_owned(),
        payload,
        hook_headers: Vec::new(),
    })
}

/// A saved delivery file.
async fn from_file(args: &ReplayArgs) -> Result<Outgoing, Exit> {
    let path = &args.source;
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| Exit::unusable(format_args!("cannot read `{path}`: {}", chain(&e))))?;
    let saved = delivery::parse(&text, args.event.as_deref())
        .map_err(|e| Exit::unusable(format_args!("`{path}`: {e}")))?;
    if saved.event_from == EventFrom::Inferred {
        errln!(
            "note: `{path}` names no event; inferred `{}` from the payload's keys (pass --event \
             to choose another)",
            saved.event
        );
    }
    Ok(Outgoing {
        event: saved.event,
        payload: saved.payload,
        hook_headers: saved.hook_headers,
    })
}
