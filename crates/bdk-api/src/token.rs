//! Continuation tokens: the credential a caller holds to send the next
//! message of a session.
//!
//! Two shapes reach the API. A session started over HTTP gets an opaque
//! token from the server (`http:<sessionId>.<32 hex digits>`, rotated on
//! every accepted follow-up: keep the last one). A channel conversation is
//! named by `<channelId>:<key>` (a Slack thread, a GitHub pull request), and
//! a direct tool call may bind to that conversation's session with it.

/// A channel conversation's token, `<channelId>:<key>`, both parts
/// non-empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelToken<'a> {
    /// The channel (`slack`, `github`, a custom channel's id).
    pub channel: &'a str,
    /// The conversation within it.
    pub key: &'a str,
}

impl<'a> ChannelToken<'a> {
    /// Reads `token`; `None` when it lacks the `:` or either part is empty.
    ///
    /// ```
    /// use bdk_api::token::ChannelToken;
    ///
    /// let t = ChannelToken::parse("slack:C1/1700000000.000100").unwrap();
    /// assert_eq!((t.channel, t.key), ("slack", "C1/1700000000.000100"));
    /// assert!(ChannelToken::parse(":x").is_none());
    /// ```
    pub fn parse(token: &'a str) -> Option<Self> {
        match token.split_once(':') {
            Some((channel, key)) if !channel.is_empty() && !key.is_empty() => {
                Some(ChannelToken { channel, key })
            }
            _ => None,
        }
    }
}

/// Whether `token` has the shape of a token the server made for a session
/// started over HTTP. Only a shape: the server alone knows whether it is
/// still the current one.
pub fn is_http_token(token: &str) -> bool {
    bdk_events::ids::http_token_session(token).is_some()
}
