//! `bdk slack manifest`: the Slack app manifest of the agent's Slack
//! channel, as JSON (default) or YAML, on stdout; hints go to stderr so the
//! output can be redirected into a file as it is.

use super::command::{self, Exit, ManifestArgs, PUBLIC_URL_ENV};
use crate::support::OK;

/// Prints the manifest; exit 0, or exit 2 for a bad project or arguments.
pub(super) fn run(args: &ManifestArgs) -> Result<u8, Exit> {
    let target = &args.target;
    let project = command::load(&target.dir)?;
    let (name, settings) = command::pick(&project, target.channel.as_deref())?;
    let public = command::public_url(
        target.url.as_deref(),
        settings,
        command::env(PUBLIC_URL_ENV),
    )?
    .ok_or_else(command::no_public_url)?;
    let request_url = command::request_url(&public, name);
    let manifest = bdk_slack::manifest::app_manifest(
        settings,
        &project.name,
        project.config.description.as_deref(),
        &request_url,
    );
    let text = if args.yaml {
        yaml_serde::to_string(&manifest)
            .map_err(|e| Exit::unusable(format!("failed to write the manifest as YAML: {e}")))?
    } else {
        serde_json::to_string_pretty(&manifest)
            .map_err(|e| Exit::unusable(format!("failed to write the manifest as JSON: {e}")))?
    };
    outln!("{}", text.trim_end());
    if request_url.starts_with("http://") {
        errln!(
            "note: {request_url} is plain http; Slack sends events only to https URLs (a tunnel such as cloudflared or ngrok gives one)"
        );
    }
    errln!(
        "next: api.slack.com/apps → Create New App → From an app manifest, paste it, install the app, then export {} (OAuth & Permissions → Bot User OAuth Token) and {} (Basic Information → Signing Secret) and run `bdk slack doctor`",
        settings.token_env,
        settings.signing_secret_env
    );
    Ok(OK)
}
