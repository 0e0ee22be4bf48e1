//! Identifiers: prefixed, URL-safe, sortable by creation time.
//!
//! Every generated id is `<prefix>_<26 chars>`: the prefix tells a reader what
//! the id names, the body is a UUID v7 rendered in Crockford base32, so ids
//! sort by creation time and never need escaping in a path or a URL.

use std::fmt;

use serde::{Deserialize, Serialize};

const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

fn random_body() -> String {
    let value = uuid::Uuid::now_v7().as_u128();
    let mut out = String::with_capacity(26);
    // 128 bits in 26 base32 digits: the first digit carries the top 3 bits.
    for i in (0..26).rev() {
        let digit = ((value >> (i * 5)) & 0x1f) as usize;
        out.push(CROCKFORD[digit] as char);
    }
    out
}

/// A new id with the given prefix, for example `new_id("tool")`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_body())
}

/// True when `s` is safe to use as one path segment: non-empty, at most 128
/// bytes, ASCII letters, digits, `_`, `-` and `.` only, and not `.` or `..`.
pub fn is_safe_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The prefix every generated id of this kind starts with.
            pub const PREFIX: &'static str = $prefix;

            /// A fresh id.
            pub fn generate() -> Self {
                Self(new_id($prefix))
            }

            /// Wraps an existing id string without checking its shape.
            pub fn from_string(s: impl Into<String>) -> Self {
                Self(s.into())
            }

            /// Parses an id received from outside: it must carry this kind's
            /// prefix and be a safe path segment.
            pub fn parse(s: &str) -> Option<Self> {
                let ok = s.len() > $prefix.len() + 1
                    && s.starts_with($prefix)
                    && s.as_bytes().get($prefix.len()) == Some(&b'_')
                    && is_safe_segment(s);
                ok.then(|| Self(s.to_owned()))
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

prefixed_id!(
    /// A session id, `ses_...`: names a stored session for inspection.
    SessionId,
    "ses"
);
prefixed_id!(
    /// A turn id, `turn_...`: groups the events of one turn.
    TurnId,
    "turn"
);
prefixed_id!(
    /// A delivery id, `dlv_...`: names one send so a caller can see where it
    /// landed. Callers may also supply their own (any string).
    DeliveryId,
    "dlv"
);

/// A call id for a tool call requested by a model: `call_...`.
pub fn new_call_id() -> String {
    new_id("call")
}

/// A call id for a direct (model-less) tool call: `tool_<name>_...`.
pub fn new_direct_call_id(tool: &str) -> String {
    new_id(&format!("tool_{tool}"))
}

/// A new HTTP continuation token for session `id`: `http:<id>.` followed by
/// 32 random hex digits. Callers treat it as opaque; a store may read the
/// session back out of it ([`http_token_session`]) instead of keeping an
/// index entry for it. The id is no secret (it is in every URL of the
/// session); the random part is what a caller must hold.
pub fn new_http_token(id: &SessionId) -> String {
    format!("http:{id}.{}", uuid::Uuid::new_v4().simple())
}

/// The session an HTTP token made by [`new_http_token`] names, if `token` has
/// that shape. Only a hint of where to look: the token is good only while that
/// session's record holds it, and a caller may have pinned any token of this
/// shape on any session.
pub fn http_token_session(token: &str) -> Option<SessionId> {
    let (id, random) = token.strip_prefix("http:")?.rsplit_once('.')?;
    let random_ok = random.len() == 32
        && random
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    random_ok.then(|| SessionId::parse(id)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_prefix_and_sort_by_time() {
        let a = SessionId::generate();
        let b = SessionId::generate();
        assert!(a.as_str().starts_with("ses_"));
        assert_eq!(a.as_str().len(), 4 + 26);
        assert!(a < b, "{a} should sort before {b}");
        assert!(TurnId::generate().as_str().starts_with("turn_"));
        assert!(DeliveryId::generate().as_str().starts_with("dlv_"));
        assert!(new_call_id().starts_with("call_"));
        assert!(new_direct_call_id("get_weather").starts_with("tool_get_weather_"));
    }

    #[test]
    fn an_http_token_names_its_session_and_nothing_else_parses_as_one() {
        let id = SessionId::generate();
        let token = new_http_token(&id);
        assert!(token.starts_with(&format!("http:{id}.")), "{token}");
        assert_eq!(http_token_session(&token), Some(id.clone()));
        assert_ne!(token, new_http_token(&id), "tokens are random");
        let hex = "0123456789abcdef0123456789abcdef";
        for other in [
            format!("http:{hex}"),
            format!("slack:{id}.{hex}"),
            format!("http:{id}.{}", &hex[1..]),
            format!("http:{id}.{}", hex.to_uppercase()),
            format!("http:{id}.{hex}0"),
            format!("http:ses_../../etc.{hex}"),
            format!("http:ses_a/b.{hex}"),
            format!("http:turn_abc.{hex}"),
            format!("http:.{hex}"),
            String::new(),
        ] {
            assert_eq!(http_token_session(&other), None, "{other:?}");
        }
        // An id may itself hold dots: the random part is what follows the last.
        let dotted = SessionId::from_string("ses_a.b");
        assert_eq!(http_token_session(&new_http_token(&dotted)), Some(dotted));
    }

    #[test]
    fn parse_rejects_foreign_and_hostile_ids() {
        let id = SessionId::generate();
        assert_eq!(SessionId::parse(id.as_str()), Some(id));
        for bad in [
            "",
            "ses_",
            "turn_abc",
            "ses_../../etc",
            "ses_a/b",
            "sesx_abc",
            "ses_a b",
        ] {
            assert_eq!(SessionId::parse(bad), None, "{bad:?} must be rejected");
        }
    }

    #[test]
    fn safe_segment() {
        assert!(is_safe_segment("abc-1.txt"));
        for bad in ["", ".", "..", "a/b", "a\\b", "a\0", "é"] {
            assert!(!is_safe_segment(bad), "{bad:?}");
        }
    }
}
