//! The retry policy, as a plain function of one response: what GitHub's
//! "Rate limits for the REST API" and "Best practices" pages ask a client to
//! do with each kind of refusal. The client's loop applies the decision and
//! owns the counting (attempts, `max_wait`); keeping the decision pure makes
//! every rule testable without a server.

use std::time::Duration;

use reqwest::header::HeaderMap;

/// How long GitHub's docs ask a client to wait after a secondary rate limit
/// that names no time: "at least one minute".
pub(crate) const SECONDARY_WAIT: Duration = Duration::from_secs(60);

/// What to do with a response that was not a success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Give up: the error is the answer.
    Fail,
    /// A rate limit: wait this long, then try again (any method: GitHub
    /// refused the request, it did not process it).
    Wait(Duration),
    /// A server error: back off and try again, if the method is idempotent.
    Backoff,
    /// 401: the credential may have been revoked or expired early; an App's
    /// installation token can be minted afresh.
    Reauthenticate,
}

/// Decides what an error `status` with these `headers` and GitHub's
/// `message` calls for. `now_ms` is the wall clock in epoch milliseconds
/// (for `x-ratelimit-reset`); `secondary_seen` counts the secondary limits
/// without a stated wait already met by this request, since GitHub asks for
/// exponentially longer waits when they repeat.
pub(crate) fn decide(
    status: u16,
    headers: &HeaderMap,
    message: &str,
    now_ms: i64,
    secondary_seen: u32,
) -> Decision {
    match status {
        401 => Decision::Reauthenticate,
        403 | 429 => {
            if let Some(wait) = retry_after(headers, now_ms) {
                return Decision::Wait(wait);
            }
            if header_u64(headers, "x-ratelimit-remaining") == Some(0) {
                let wait = header_u64(headers, "x-ratelimit-reset")
                    .and_then(|reset| i64::try_from(reset).ok())
                    .map(|reset| until(reset.saturating_mul(1000), now_ms))
                    .unwrap_or(SECONDARY_WAIT);
                return Decision::Wait(wait);
            }
            if status == 429
                || message
                    .to_ascii_lowercase()
                    .contains("secondary rate limit")
            {
                let factor = 1u32.checked_shl(secondary_seen.min(16)).unwrap_or(u32::MAX);
                return Decision::Wait(SECONDARY_WAIT.saturating_mul(factor));
            }
            Decision::Fail
        }
        500..=599 => Decision::Backoff,
        _ => Decision::Fail,
    }
}

/// The `retry-after` header: delay-seconds as GitHub sends it, or an
/// HTTP-date as RFC 9110 also allows.
pub(crate) fn retry_after(headers: &HeaderMap, now_ms: i64) -> Option<Duration> {
    let value = headers.get("retry-after")?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    Some(until(date.timestamp_millis(), now_ms))
}

/// A header that should hold an unsigned integer.
pub(crate) fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// The time from `now_ms` to `then_ms`, zero when `then_ms` has passed.
fn until(then_ms: i64, now_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(then_ms.saturating_sub(now_ms)).unwrap_or(0))
}

/// The exponential backoff before retry number `retry` (1 for the first):
/// `base`, then twice that, and so on, never above `cap`.
pub(crate) fn backoff(base: Duration, retry: u32, cap: Duration) -> Duration {
    let factor = 1u32
        .checked_shl(retry.saturating_sub(1).min(16))
        .unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn retry_after_wins_on_429_and_403() {
        let h = headers(&[("retry-after", "7")]);
        assert_eq!(
            decide(429, &h, "", NOW, 0),
            Decision::Wait(Duration::from_secs(7))
        );
        assert_eq!(
            decide(403, &h, "", NOW, 0),
            Decision::Wait(Duration::from_secs(7))
        );
    }

    #[test]
    fn retry_after_may_be_an_http_date() {
        let h = headers(&[("retry-after", "Tue, 14 Nov 2023 22:13:30 GMT")]);
        // NOW is 2023-11-14T22:13:20Z.
        assert_eq!(
            decide(429, &h, "", NOW, 0),
            Decision::Wait(Duration::from_secs(10))
        );
    }

    #[test]
    fn an_exhausted_primary_limit_waits_for_the_reset() {
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000030"),
        ]);
        assert_eq!(
            decide(403, &h, "API rate limit exceeded", NOW, 0),
            Decision::Wait(Duration::from_secs(30))
        );
        let past = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1699999990"),
        ]);
        assert_eq!(
            decide(429, &past, "", NOW, 0),
            Decision::Wait(Duration::ZERO)
        );
    }

    #[test]
    fn a_secondary_limit_without_headers_waits_a_minute_then_longer() {
        let h = headers(&[("x-ratelimit-remaining", "4999")]);
        let message = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.";
        assert_eq!(
            decide(403, &h, message, NOW, 0),
            Decision::Wait(SECONDARY_WAIT)
        );
        assert_eq!(
            decide(403, &h, message, NOW, 1),
            Decision::Wait(SECONDARY_WAIT * 2)
        );
        assert_eq!(
            decide(429, &HeaderMap::new(), "", NOW, 0),
            Decision::Wait(SECONDARY_WAIT)
        );
    }

    #[test]
    fn a_plain_forbidden_is_final_and_401_reauthenticates() {
        let h = headers(&[("x-ratelimit-remaining", "4999")]);
        assert_eq!(
            decide(403, &h, "Resource not accessible by integration", NOW, 0),
            Decision::Fail
        );
        assert_eq!(decide(404, &h, "Not Found", NOW, 0), Decision::Fail);
        assert_eq!(decide(422, &h, "Validation Failed", NOW, 0), Decision::Fail);
        assert_eq!(
            decide(401, &h, "Bad credentials", NOW, 0),
            Decision::Reauthenticate
        );
        assert_eq!(decide(502, &h, "", NOW, 0), Decision::Backoff);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let base = Duration::from_secs(1);
        let cap = Duration::from_secs(5);
        assert_eq!(backoff(base, 1, cap), Duration::from_secs(1));
        assert_eq!(backoff(base, 2, cap), Duration::from_secs(2));
        assert_eq!(backoff(base, 3, cap), Duration::from_secs(4));
        assert_eq!(backoff(base, 4, cap), cap);
        assert_eq!(backoff(base, 40, cap), cap);
    }
}
