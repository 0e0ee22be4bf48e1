//! `fake-slack`: serves the test kit's fake Slack Web API on `127.0.0.1`,
//! for running a Slack agent offline (point its Web API base URL at the
//! printed URL).
//!
//! ```text
//! fake-slack [--port N] [--token TOKEN[=SCOPE,SCOPE...] ...]
//!            [--channel ID=NAME ...] [--user ID=NAME ...]
//! ```
//!
//! The fake accepts the bot token `xoxb-fake-bot-token` and any added with
//! `--token` (with the default token's scopes unless listed). It has the
//! channels `C0GENERAL`, `C0ALERTS` and the DM `D0DM`, the users `U0ALICE`
//! and `U0BOB`, and any added. Every call is logged as one line on stderr.
//! Ctrl-C stops it. Exit codes: 0 after Ctrl-C, 2 for bad arguments.

use std::process::ExitCode;

use bdk_testkit::slack::FakeSlack;

const USAGE: &str = "usage: fake-slack [--port N] [--token TOKEN[=SCOPE,SCOPE...] ...] [--channel ID=NAME ...] [--user ID=NAME ...]";

#[derive(Debug)]
struct Args {
    port: u16,
    tokens: Vec<(String, Vec<String>)>,
    channels: Vec<(String, String)>,
    users: Vec<(String, String)>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        port: 0,
        tokens: Vec::new(),
        channels: Vec::new(),
        users: Vec::new(),
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
        let pair = |text: String, what: &str| -> Result<(String, String), String> {
            match text.split_once('=') {
                Some((id, name)) if !id.is_empty() && !name.is_empty() => {
                    Ok((id.to_owned(), name.to_owned()))
                }
                _ => Err(format!("{what} {text:?} is not ID=NAME")),
            }
        };
        match flag.as_str() {
            "--port" => {
                let text = value()?;
                parsed.port = text
                    .parse()
                    .map_err(|_| format!("--port {text:?} is not a port number"))?;
            }
            "--token" => {
                let text = value()?;
                let (token, scopes) = match text.split_once('=') {
                    Some((token, scopes)) => (
                        token.to_owned(),
                        scopes
                            .split(',')
                            .map(str::trim)
                            .filter(|scope| !scope.is_empty())
                            .map(str::to_owned)
                            .collect(),
                    ),
                    None => (
                        text.clone(),
                        FakeSlack::BOT_SCOPES
                            .iter()
                            .map(|s| (*s).to_owned())
                            .collect(),
                    ),
                };
                parsed.tokens.push((token, scopes));
            }
            "--channel" => parsed.channels.push(pair(value()?, "--channel")?),
            "--user" => parsed.users.push(pair(value()?, "--user")?),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("fake-slack: {message}");
            }
            eprintln!("{USAGE}");
            return if message.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };

    let fake = FakeSlack::start_on(args.port).await;
    for (token, scopes) in &args.tokens {
        let scopes: Vec<&str> = scopes.iter().map(String::as_str).collect();
        fake.add_token(token, &scopes);
    }
    for (id, name) in &args.channels {
        fake.add_channel(id, name);
    }
    for (id, name) in &args.users {
        fake.add_user(id, name);
    }
    fake.log_requests();
    println!(
        "fake Slack Web API at {} (bot token {}, bot user {})",
        fake.url(),
        FakeSlack::BOT_TOKEN,
        FakeSlack::BOT_USER,
    );
    match tokio::signal::ctrl_c().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-slack: cannot wait for Ctrl-C: {e}");
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
            "--token",
            "xoxb-a=chat:write, users:read",
            "--token=xoxb-b",
            "--channel",
            "C1=random",
            "--user=U1=carol",
        ])
        .unwrap();
        assert_eq!(parsed.port, 8080);
        assert_eq!(parsed.tokens[0].0, "xoxb-a");
        assert_eq!(parsed.tokens[0].1, ["chat:write", "users:read"]);
        assert_eq!(parsed.tokens[1].1.len(), FakeSlack::BOT_SCOPES.len());
        assert_eq!(parsed.channels, [("C1".to_owned(), "random".to_owned())]);
        assert_eq!(parsed.users, [("U1".to_owned(), "carol".to_owned())]);
        assert!(args(&["--port", "x"]).unwrap_err().contains("not a port"));
        assert!(args(&["--channel", "C1"]).unwrap_err().contains("ID=NAME"));
        assert!(args(&["--token"]).unwrap_err().contains("needs a value"));
        assert!(args(&["--bogus"]).unwrap_err().contains("unknown"));
    }
}
