//! `bdk github forward`: follow a webhook relay that speaks the smee.io
//! protocol and POST each delivery to the local server.
//!
//! The relay is a server-sent event stream. `ready` and `ping` events say
//! nothing; every other event's data is a JSON object whose `body` is the
//! webhook payload and whose other keys, except `query` and `timestamp`,
//! are the request headers GitHub sent (lower-cased by the relay). The body
//! is forwarded as the text it is in the data, so the bytes that reach the
//! server are the bytes the relay serialized and no key is reordered on
//! the way. When the stream ends or breaks the relay is followed again
//! after a pause that doubles from 1 s to 30 s, resuming after the last
//! event id it gave (`Last-Event-ID`).

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use serde_json::value::RawValue;
use sse_stream::SseStream;

use super::command::{Exit, ForwardArgs, chain, http_client, target_url};
use super::send;

/// The first pause before following the relay again.
const FIRST_PAUSE: Duration = Duration::from_secs(1);
/// The longest pause between attempts.
const LONGEST_PAUSE: Duration = Duration::from_secs(30);

/// Keys of the relay's data that are not request headers.
const NOT_HEADERS: &[&str] = &["body", "query", "timestamp"];

/// Request headers that describe the relay's connection rather than the
/// delivery: the local request gets its own (RFC 9110's hop-by-hop fields,
/// plus `host` and `content-length`, which reqwest sets for the new
/// request, and `accept-encoding`, which would invite an encoding reqwest
/// is not built to decode).
const CONNECTION_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "accept-encoding",
];

/// True for a header a proxy adds (`Forwarded`, `Via`, `X-Real-IP`, any
/// `X-Forwarded-*`; `name` lower-cased). The proxies in front of a relay
/// add them on GitHub's way to it (smee.io's send `X-Forwarded-For` and
/// `X-Forwarded-Proto`): they describe hops before the relay, not the
/// delivery, and the local server's fan-out route, local only, refuses a
/// request that carries one as relayed from elsewhere.
fn is_proxy_header(name: &str) -> bool {
    matches!(name, "forwarded" | "via" | "x-real-ip") || name.starts_with("x-forwarded-")
}

/// Runs `bdk github forward` until Ctrl-C or SIGTERM.
pub(super) async fn run(args: ForwardArgs) -> Result<(), Exit> {
    let relay = match reqwest::Url::parse(&args.relay) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => u,
        Ok(_) => {
            return Err(Exit::unusable(format_args!(
                "--relay `{}` is not an http:// or https:// URL",
                args.relay
            )));
        }
        Err(e) => {
            return Err(Exit::unusable(format_args!(
                "--relay `{}`: {e}",
                args.relay
            )));
        }
    };
    let target = target_url(&args.server)?;
    let client = http_client()?;
    tokio::select! {
        exit = follow(&client, &relay, &target) => Err(exit),
        () = crate::serve::wait_for_signal() => {
            errln!("stopped");
            Ok(())
        }
    }
}

/// Follows the relay forever; returns only when the first connection
/// fails (exit 3).
async fn follow(client: &reqwest::Client, relay: &reqwest::Url, target: &reqwest::Url) -> Exit {
    let mut last_id: Option<String> = None;
    let mut pause = Pause::default();
    let mut connected_once = false;
    loop {
        match connect(client, relay, last_id.as_deref()).await {
            Ok(response) => {
                if connected_once {
                    errln!("relay: reconnected to {relay}");
                } else {
                    errln!("forwarding deliveries from {relay} to {target}");
                    connected_once = true;
                }
                pause.reset();
                let why = forward_stream(client, response, target, &mut last_id).await;
                errln!("relay: {why}; reconnecting in {}", seconds(pause.peek()));
            }
            Err(e) if !connected_once => {
                return Exit::unreachable(format_args!(
                    "the relay {relay} could not be reached: {e}"
                ));
            }
            Err(e) => errln!("relay: {e}; retrying in {}", seconds(pause.peek())),
        }
        tokio::time::sleep(pause.next_pause()).await;
    }
}

/// Opens the relay's event stream.
async fn connect(
    client: &reqwest::Client,
    relay: &reqwest::Url,
    last_id: Option<&str>,
) -> Result<reqwest::Response, String> {
    let mut request = client
        .get(relay.clone())
        .header(reqwest::header::ACCEPT, "text/event-stream");
    if let Some(id) = last_id {
        request = request.header("Last-Event-ID", id);
    }
    let response = request.send().await.map_err(|e| chain(&e))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("GET {relay} answered {status}"));
    }
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if !content_type.starts_with("text/event-stream") {
        return Err(format!(
            "GET {relay} answered {status} with `{content_type}`, not an event stream \
             (is it a relay channel's URL?)"
        ));
    }
    Ok(response)
}

/// Forwards every delivery of one connection; returns why it ended.
async fn forward_stream(
    client: &reqwest::Client,
    response: reqwest::Response,
    target: &reqwest::Url,
    last_id: &mut Option<String>,
) -> String {
    let mut events = std::pin::pin!(SseStream::from_bytes_stream(response.bytes_stream()));
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => return format!("the stream broke: {}", chain(&e)),
        };
        if let Some(id) = event.id {
            *last_id = Some(id);
        }
        if matches!(event.event.as_deref(), Some("ready" | "ping")) {
            continue;
        }
        let Some(data) = event.data else {
            continue;
        };
        match relayed(&data) {
            Ok(delivery) => forward_one(client, target, delivery).await,
            Err(e) => errln!("relay: skipped an event that is not a delivery: {e}"),
        }
    }
    "the relay closed the stream".to_owned()
}

/// One delivery as the relay carried it.
#[derive(Debug, PartialEq)]
struct Relayed {
    /// The request headers to send again.
    headers: Vec<(String, String)>,
    /// The payload's JSON text, as it is in the relay's data.
    body: String,
}

impl Relayed {
    fn header(&self, name: &str) -> Option<&str> {
        super::delivery::header(&self.headers, name)
    }
}

/// Reads one relay event's data.
fn relayed(data: &str) -> Result<Relayed, String> {
    let fields: HashMap<String, &RawValue> =
        serde_json::from_str(data).map_err(|e| format!("its data is not a JSON object: {e}"))?;
    let body = fields.get("body").ok_or("its data has no `body`")?;
    let body = if body.get().starts_with('"') {
        // A relay that kept the raw body as a string.
        serde_json::from_str::<String>(body.get()).map_err(|e| format!("its `body`: {e}"))?
    } else {
        body.get().to_owned()
    };
    let mut headers: Vec<(String, String)> = fields
        .iter()
        .filter(|(name, _)| {
            let name = name.to_ascii_lowercase();
            !NOT_HEADERS.contains(&name.as_str())
                && !CONNECTION_HEADERS.contains(&name.as_str())
                && !is_proxy_header(&name)
        })
        .filter_map(|(name, value)| {
            let text = value.get();
            let value = if text.starts_with('"') {
                serde_json::from_str::<String>(text).ok()?
            } else if text.starts_with(['{', '[']) || text == "null" {
                return None;
            } else {
                text.to_owned()
            };
            Some((name.clone(), value))
        })
        .collect();
    headers.sort();
    Ok(Relayed { headers, body })
}

/// POSTs one delivery and prints one line about it.
async fn forward_one(client: &reqwest::Client, target: &reqwest::Url, delivery: Relayed) {
    let event = delivery
        .header("x-github-event")
        .unwrap_or("(no event)")
        .to_owned();
    let id = delivery
        .header("x-github-delivery")
        .unwrap_or("(no delivery id)")
        .to_owned();
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in &delivery.headers {
        match send::header_map([(name.as_str(), value.as_str())]) {
            Ok(one) => headers.extend(one),
            Err(e) => errln!("relay: {event} {id}: dropped a header: {e}"),
        }
    }
    match send::post(client, target, headers, delivery.body).await {
        Ok(answer) if answer.accepted() => outln!("{event} {id} -> {}", answer.summary()),
        Ok(answer) => outln!("{event} {id} -> refused: {}", answer.refusal()),
        Err(e) => outln!("{event} {id} -> not delivered: POST {target} failed: {e}"),
    }
}

/// The pause before the next attempt: 1 s, doubling to at most 30 s, back
/// to 1 s once a connection is made.
struct Pause {
    next: Duration,
}

impl Default for Pause {
    fn default() -> Pause {
        Pause { next: FIRST_PAUSE }
    }
}

impl Pause {
    /// The pause `next_pause` will return.
    fn peek(&self) -> Duration {
        self.next
    }

    /// This pause; the following one is twice as long, up to the cap.
    fn next_pause(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(LONGEST_PAUSE);
        now
    }

    fn reset(&mut self) {
        self.next = FIRST_PAUSE;
    }
}

fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_relay_event_gives_the_headers_and_the_body_text_as_written() {
        // The relay's own hops (smee.io's front end adds the proxy headers)
        // are dropped with its connection headers: issue 43 made the local
        // fan-out route refuse proxied requests.
        let data = r#"{"host":"smee.io","content-length":"31","x-github-event":"issues","x-github-delivery":"d-1","x-hub-signature-256":"sha256=ab","content-type":"application/json","connection":"close","x-forwarded-for":"140.82.115.251:19749","X-Forwarded-Proto":"https","via":"1.1 vegur","forwarded":"for=140.82.115.251","x-real-ip":"140.82.115.251","body":{"zeta":1,"action":"opened"},"query":{},"timestamp":1700000000000}"#;
        let delivery = relayed(data).unwrap();
        assert_eq!(delivery.body, r#"{"zeta":1,"action":"opened"}"#);
        assert_eq!(
            delivery.headers,
            vec![
                ("content-type".to_owned(), "application/json".to_owned()),
                ("x-github-delivery".to_owned(), "d-1".to_owned()),
                ("x-github-event".to_owned(), "issues".to_owned()),
                ("x-hub-signature-256".to_owned(), "sha256=ab".to_owned()),
            ]
        );
        assert_eq!(delivery.header("X-GitHub-Event"), Some("issues"));
    }

    #[test]
    fn a_body_kept_as_a_string_is_sent_as_its_text() {
        let delivery = relayed(r#"{"body":"{\"a\": 1}","x-github-event":"ping"}"#).unwrap();
        assert_eq!(delivery.body, r#"{"a": 1}"#);
    }

    #[test]
    fn data_without_a_body_is_not_a_delivery() {
        assert!(relayed("{}").unwrap_err().contains("no `body`"));
        assert!(
            relayed("not json")
                .unwrap_err()
                .contains("not a JSON object")
        );
        assert!(relayed("[1]").unwrap_err().contains("not a JSON object"));
    }

    #[test]
    fn pauses_double_to_thirty_seconds_and_reset() {
        let mut pause = Pause::default();
        let seen: Vec<u64> = (0..8).map(|_| pause.next_pause().as_secs()).collect();
        assert_eq!(seen, [1, 2, 4, 8, 16, 30, 30, 30]);
        pause.reset();
        assert_eq!(pause.next_pause(), FIRST_PAUSE);
    }
}
