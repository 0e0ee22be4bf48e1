//! `bdk slack`: set up the Slack app of an agent's Slack channel, and check
//! that it works.
//!
//! - `manifest` prints the app manifest Slack's "Create New App → From an
//!   app manifest" takes: the agent's name, the bot token scopes and bot
//!   events the channel needs, and the request URL
//!   (`<public URL>/v1/channels/<name>`) for Event Subscriptions and
//!   Interactivity. The scopes and events come from
//!   `bdk_slack::manifest`, the same functions the doctor checks against.
//! - `doctor` checks, in order, the bot token variable, the token against
//!   `auth.test`, the token's scopes, the signing secret variable, and the
//!   request URL (a signed `url_verification`, as Slack sends when the URL
//!   is saved), printing one line per check with a fix under each problem.
//!
//! Both find the project as `bdk info` does (`[DIR]`, default `.`) and pick
//! the Slack channel (`--channel` when the project has several). The public
//! URL is `--url`, else the channel's `public_url`, else `BDK_PUBLIC_URL`.
//!
//! One concern a file: the arguments, exit codes and the choices both
//! commands share (`command`, a leaf), the manifest (`manifest`), the
//! checks (`doctor`) and how their findings are printed (`report`, a leaf).

mod command;
mod doctor;
mod manifest;
mod report;

use command::{DoctorArgs, ManifestArgs};

const MANIFEST_HELP: &str = "\
Exit codes:
  0  the manifest was printed
  2  bad arguments or project: no Slack channel, several without --channel,
     no public URL (pass --url https://<your public host>), or validation errors

Example:
  bdk slack manifest . --url https://helper.example.com > slack-app.json
  # api.slack.com/apps -> Create New App -> From an app manifest -> paste it";

const DOCTOR_HELP: &str = "\
Checks, in order: token (the variable is set and holds a bot token, xoxb-),
auth (auth.test accepts it), scopes (every scope the channel needs is granted),
signing secret (the variable is set, 32 hexadecimal characters), request URL
(a signed url_verification is answered with its challenge; skipped without a
public URL).

Exit codes:
  0  no problem (checks may be skipped)
  1  at least one problem (each is printed with its fix)
  2  bad arguments or project: no Slack channel, several without --channel,
     an unusable --url, or validation errors

Example:
  export SLACK_BOT_TOKEN=xoxb-... SLACK_SIGNING_SECRET=...
  bdk slack doctor . --url https://helper.example.com";

/// Arguments of `bdk slack`.
#[derive(clap::Args, Debug)]
pub(crate) struct SlackArgs {
    #[command(subcommand)]
    command: SlackCommand,
}

#[derive(clap::Subcommand, Debug)]
enum SlackCommand {
    /// Print the Slack app manifest of the agent's Slack channel (scopes,
    /// bot events, request URL), for "Create New App → From an app
    /// manifest".
    #[command(after_help = MANIFEST_HELP)]
    Manifest(ManifestArgs),
    /// Check the Slack channel's token, scopes, signing secret and request
    /// URL, printing a fix for each problem.
    #[command(after_help = DOCTOR_HELP)]
    Doctor(DoctorArgs),
}

/// Runs `bdk slack ...` and returns its exit code.
pub(crate) async fn run(args: SlackArgs) -> u8 {
    let result = match args.command {
        SlackCommand::Manifest(args) => manifest::run(&args),
        SlackCommand::Doctor(args) => doctor::run(&args).await,
    };
    match result {
        Ok(code) => code,
        Err(exit) => {
            if !exit.message.is_empty() {
                errln!("error: {}", exit.message);
            }
            exit.code
        }
    }
}
