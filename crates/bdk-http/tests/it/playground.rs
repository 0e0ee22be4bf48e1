#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The playground routes over a real socket: the page and its assets with
//! their content types and security headers, conditional requests, 404 for
//! unknown and traversing names, no auth on the static files while the API
//! keeps its own, and nothing at all when the playground is off.

use crate::common;

use bdk_http::{Auth, BearerToken, Config};
use common::{agent, client, expect_error, get, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn on() -> Config {
    Config {
        playground: true,
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assets_are_served_with_their_content_types_and_headers() {
    let a = agent("solo").await;
    let base = serve(vec![a.mount(Some("solo"))], on()).await;
    let http = client();

    let page = get(&http, format!("{base}/solo/playground")).await;
    assert_eq!(page.status(), 200);
    let h = page.headers().clone();
    assert_eq!(h["content-type"], "text/html; charset=utf-8");
    let csp = h["content-security-policy"].to_str().unwrap();
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["cache-control"], "no-cache");
    let body = page.text().await.unwrap();
    // The page knows where the agent's API lives and loads only its own files.
    assert!(
        body.contains(r#"<meta name="bdk-base" content="/solo">"#),
        "{body}"
    );
    assert!(body.contains(r#"src="/solo/playground/assets/app.js""#));
    assert!(!body.contains("http://") && !body.contains("https://"));

    for (file, ty) in [
        ("app.js", "text/javascript; charset=utf-8"),
        ("chat.js", "text/javascript; charset=utf-8"),
        ("markdown.js", "text/javascript; charset=utf-8"),
        ("style.css", "text/css; charset=utf-8"),
        ("icon.svg", "image/svg+xml"),
    ] {
        let resp = get(&http, format!("{base}/solo/playground/assets/{file}")).await;
        assert_eq!(resp.status(), 200, "{file}");
        assert_eq!(resp.headers()["content-type"], ty, "{file}");
        assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
        let etag = resp.headers()["etag"].to_str().unwrap().to_owned();
        assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
        assert!(!resp.bytes().await.unwrap().is_empty(), "{file}");

        // A current copy is not sent again; a stale one is.
        let again = http
            .get(format!("{base}/solo/playground/assets/{file}"))
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{file}");
        assert_eq!(again.headers()["etag"].to_str().unwrap(), etag);
        assert!(again.bytes().await.unwrap().is_empty());
        let stale = http
            .get(format!("{base}/solo/playground/assets/{file}"))
            .header("if-none-match", "\"not-it\"")
            .send()
            .await
            .unwrap();
        assert_eq!(stale.status(), 200, "{file}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_traversing_asset_names_are_404() {
    let a = agent("solo").await;
    let base = serve(vec![a.mount(None)], on()).await;
    let http = client();
    for path in [
        "/playground/assets/nope.js",
        "/playground/assets/APP.JS",
        "/playground/assets/app.js.map",
        "/playground/assets/..%2F..%2Fsrc%2Flib.rs",
        "/playground/assets/%2e%2e%2fCargo.toml",
        "/playground/assets/..%5C..%5CCargo.toml",
        "/playground/assets/index.html",
        "/playground/assets/%00",
    ] {
        let resp = get(&http, format!("{base}{path}")).await;
        expect_error(resp, 404, "not_found").await;
    }
    // Literal dot segments, which an HTTP client would normalize away.
    let addr = base.trim_start_matches("http://");
    for target in [
        "/playground/assets/../../../../etc/passwd",
        "/playground/assets/../playground",
        "/playground/assets/./app.js/..",
    ] {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        tcp.write_all(req.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 404"), "{target}: {answer}");
        assert!(!answer.contains("root:"), "{target}");
    }
    // Other methods are refused like on any other route.
    let resp = http
        .post(format!("{base}/playground/assets/app.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_runs_no_auth_but_the_api_still_does() {
    let a = agent("solo").await;
    let config = Config {
        auth: Auth::Bearer(vec![BearerToken {
            principal: "ops".into(),
            token: "s3cret".into(),
        }]),
        ..on()
    };
    let base = serve(vec![a.mount(None)], config).await;
    let http = client();
    let page = get(&http, format!("{base}/playground")).await;
    assert_eq!(page.status(), 200);
    let asset = get(&http, format!("{base}/playground/assets/api.js")).await;
    assert_eq!(asset.status(), 200);
    let info = get(&http, format!("{base}/v1/info")).await;
    assert_eq!(info.status(), 401);
    let info = http
        .get(format!("{base}/v1/info"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(info.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_playground_nothing_is_served() {
    let a = agent("solo").await;
    let base = serve(vec![a.mount(Some("solo"))], Config::default()).await;
    let http = client();
    for path in [
        "/solo/playground",
        "/solo/playground/assets/app.js",
        "/playground",
    ] {
        let resp = get(&http, format!("{base}{path}")).await;
        expect_error(resp, 404, "not_found").await;
    }
    let index = get(&http, format!("{base}/")).await;
    assert!(!index.text().await.unwrap().contains("playground"));
    let meta: serde_json::Value = get(&http, format!("{base}/solo/v1/meta"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(meta["playground"], false);

    // With it on, the index links every agent's playground.
    let b = agent("other").await;
    let base = serve(vec![a.mount(Some("solo")), b.mount(Some("other"))], on()).await;
    let html = get(&http, format!("{base}/")).await.text().await.unwrap();
    assert!(html.contains(r#"href="/solo/playground""#), "{html}");
    assert!(html.contains(r#"href="/other/playground""#), "{html}");
}
