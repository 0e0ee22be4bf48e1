//! `fake-github`: serves the test kit's fake GitHub REST API on
//! `127.0.0.1`, for running a GitHub agent offline (the example PR reviewer
//! points its API URL here).
//!
//! ```text
//! fake-github [--port N] [--seed payload.json ...] [--token TOKEN[=LOGIN] ...]
//! ```
//!
//! Each `--seed` file is a webhook payload (or a JSON array of them) as
//! GitHub delivers it; its repository and pull request or issue are served.
//! The fake accepts the token `ghp_faketoken` (as `octocat`) and any added
//! with `--token`. Every request is logged as one line on stderr. Ctrl-C
//! stops it. Exit codes: 0 after Ctrl-C, 2 for bad arguments or seeds.

use std::process::ExitCode;

use bdk_testkit::github::FakeGithub;

const USAGE: &str =
    "usage: fake-github [--port N] [--seed payload.json ...] [--token TOKEN[=LOGIN] ...]";

#[derive(Debug)]
struct Args {
    port: u16,
    seeds: Vec<String>,
    tokens: Vec<(String, String)>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        port: 0,
        seeds: Vec::new(),
        tokens: Vec::new(),
    };
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--port" => {
                let text = value()?;
                parsed.port = text
                    .parse()
                    .map_err(|_| format!("--port {text:?} is not a port number"))?;
            }
            "--seed" => parsed.seeds.push(value()?),
            "--token" => {
                let text = value()?;
                let (token, login) = text.split_once('=').unwrap_or((&text, "octocat"));
                parsed.tokens.push((token.to_owned(), login.to_owned()));
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(parsed)
}

/// The payloads in a seed file: one payload object, or an array of them.
fn read_seed(path: &str) -> Result<Vec<serde_json::Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{path} is not JSON: {e}"))?;
    let payloads = match value {
        serde_json::Value::Array(items) => items,
        single => vec![single],
    };
    for payload in &payloads {
        if !payload["repository"]["full_name"].is_string() {
            return Err(format!(
                "{path}: a webhook payload with a repository.full_name was expected"
            ));
        }
    }
    Ok(payloads)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("fake-github: {message}");
            }
            eprintln!("{USAGE}");
            return if message.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    let mut payloads = Vec::new();
    for seed in &args.seeds {
        match read_seed(seed) {
            Ok(mut read) => payloads.append(&mut read),
            Err(message) => {
                eprintln!("fake-github: {message}");
                return ExitCode::from(2);
            }
        }
    }

    let fake = FakeGithub::start_on(args.port).await;
    for (token, login) in &args.tokens {
        fake.add_token(token, login);
    }
    for payload in &payloads {
        fake.add_pull_from_payload(payload);
    }
    fake.log_requests();
    println!(
        "fake GitHub API at {} (token {})",
        fake.url(),
        FakeGithub::TOKEN
    );
    match tokio::signal::ctrl_c().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-github: cannot wait for Ctrl-C: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, String> {
        parse_args(list.iter().map(|arg| (*arg).to_owned()))
    }

    #[test]
    fn arguments_parse() {
        let parsed = args(&[
            "--port",
            "8080",
            "--seed",
            "a.json",
            "--seed=b.json",
            "--token",
            "t=bot",
        ])
        .unwrap();
        assert_eq!(parsed.port, 8080);
        assert_eq!(parsed.seeds, ["a.json", "b.json"]);
        assert_eq!(parsed.tokens, [("t".to_owned(), "bot".to_owned())]);
        assert!(args(&["--port", "x"]).unwrap_err().contains("not a port"));
        assert!(args(&["--seed"]).unwrap_err().contains("needs a value"));
        assert!(args(&["--bogus"]).unwrap_err().contains("unknown"));
    }
}
