//! The GitHub pack: a PR bot is an agent folder with a GitHub channel
//! (`agent/channels/<name>.toml` with `kind = "github"`) and a token.
//!
//! - [`api`]: the REST client (a token or a GitHub App's installation
//!   tokens, a configurable base URL, bounded retries that honour GitHub's
//!   rate limits).
pub mod api;
