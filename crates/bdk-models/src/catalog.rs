//! What bdk knows about models, one entry per model: its context window
//! and its list price, looked up by `provider/model` id.
//!
//! [`crate::prices`] and [`crate::context`] read their built-in figures from
//! here, so adding a model (or correcting one) is one line. Ids are looked up
//! by [`lookup_keys`]: the exact id, then the id without a snapshot date,
//! then the `provider/*` wildcard, so a wildcard entry covers every model of
//! a provider that has no entry of its own.
//!
//! Prices are US dollars per million tokens, as of [`PRICES_AS_OF`]. Sources:
//! xAI's pricing page (docs.x.ai, "Chat API"), Anthropic's pricing page
//! (platform.claude.com, 5-minute cache writes), OpenAI's pricing page (the
//! GPT-5.4/5.5 family as quoted from it in June 2026, the older GPT-5,
//! GPT-4.1 and GPT-4o rows as published in 2025). Models priced in tiers by
//! prompt length are left out rather than priced wrongly. Context windows come
//! from the same pages; Anthropic's 1M-token windows are opt-in, so the
//! standard 200k is used.

use bdk_events::Usage;
use serde::{Deserialize, Serialize};

/// When the built-in list prices were last checked against the providers'
/// published pricing pages.
pub const PRICES_AS_OF: &str = "2026-11-30";

/// US dollars per million tokens of each kind.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Price {
    /// Prompt tokens billed at the full input rate.
    pub input: f64,
    /// Completion tokens (reasoning included).
    pub output: f64,
    /// Prompt tokens served from the provider's cache.
    pub cache_read: f64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write: f64,
}

impl Price {
    /// A model that costs nothing (offline, scripted, replayed).
    pub const FREE: Price = Price::new(0.0, 0.0, 0.0, 0.0);

    /// A price from its four rates.
    pub const fn new(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Self {
        Self {
            input,
            output,
            cache_read,
            cache_write,
        }
    }

    /// The cost of `usage` at this price, in US dollars.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let per = |tokens: u64, rate: f64| tokens as f64 * rate / 1_000_000.0;
        per(usage.input_tokens, self.input)
            + per(usage.output_tokens, self.output)
            + per(usage.cache_read_tokens, self.cache_read)
            + per(usage.cache_write_tokens, self.cache_write)
    }
}

/// One known model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KnownModel {
    /// `provider/model`, or `provider/*` for a whole provider.
    pub id: &'static str,
    /// The context window in tokens, when known.
    pub context_window: Option<u64>,
    /// The list price, when known.
    pub price: Option<Price>,
}

const fn known(id: &'static str, context_window: Option<u64>, price: Option<Price>) -> KnownModel {
    KnownModel {
        id,
        context_window,
        price,
    }
}

/// Providers that bill cache writes at the plain input rate (OpenAI, xAI)
/// get `cache_write = input`; Anthropic's cache write is its 5-minute rate.
const fn same_write(input: f64, output: f64, cache_read: f64) -> Price {
    Price::new(input, output, cache_read, input)
}

/// The catalog. Offline providers (`scripted`, `replay`) cost nothing.
pub const MODELS: &[KnownModel] = &[
    known("scripted/*", None, Some(Price::FREE)),
    known("replay/*", None, Some(Price::FREE)),
    known(
        "xai/grok-4.3",
        Some(1_000_000),
        Some(same_write(1.25, 2.50, 0.20)),
    ),
    known(
        "xai/grok-4.20-0309-reasoning",
        Some(2_000_000),
        Some(same_write(1.25, 2.50, 0.20)),
    ),
    known(
        "xai/grok-4.20-0309-non-reasoning",
        Some(2_000_000),
        Some(same_write(1.25, 2.50, 0.20)),
    ),
    known(
        "xai/grok-4.20-multi-agent-0309",
        Some(2_000_000),
        Some(same_write(1.25, 2.50, 0.20)),
    ),
    known(
        "xai/grok-4-1-fast-reasoning",
        Some(2_000_000),
        Some(same_write(0.20, 0.50, 0.05)),
    ),
    known(
        "xai/grok-4-1-fast-non-reasoning",
        Some(2_000_000),
        Some(same_write(0.20, 0.50, 0.05)),
    ),
    known(
        "openai/gpt-5.5",
        Some(1_000_000),
        Some(same_write(5.00, 30.00, 0.50)),
    ),
    known(
        "openai/gpt-5.5-pro",
        Some(1_000_000),
        Some(same_write(30.00, 180.00, 30.00)),
    ),
    known(
        "openai/gpt-5.4",
        Some(1_000_000),
        Some(same_write(2.50, 15.00, 0.25)),
    ),
    known(
        "openai/gpt-5.4-mini",
        Some(1_000_000),
        Some(same_write(0.75, 4.50, 0.075)),
    ),
    known(
        "openai/gpt-5.4-nano",
        Some(1_000_000),
        Some(same_write(0.20, 1.25, 0.02)),
    ),
    known(
        "openai/gpt-5.4-pro",
        Some(1_000_000),
        Some(same_write(30.00, 180.00, 30.00)),
    ),
    known(
        "openai/gpt-5",
        Some(400_000),
        Some(same_write(1.25, 10.00, 0.125)),
    ),
    known(
        "openai/gpt-5-mini",
        Some(400_000),
        Some(same_write(0.25, 2.00, 0.025)),
    ),
    known(
        "openai/gpt-5-nano",
        Some(400_000),
        Some(same_write(0.05, 0.40, 0.005)),
    ),
    known(
        "openai/gpt-4.1",
        Some(1_047_576),
        Some(same_write(2.00, 8.00, 0.50)),
    ),
    known(
        "openai/gpt-4.1-mini",
        Some(1_047_576),
        Some(same_write(0.40, 1.60, 0.10)),
    ),
    known(
        "openai/gpt-4.1-nano",
        Some(1_047_576),
        Some(same_write(0.10, 0.40, 0.025)),
    ),
    known(
        "openai/gpt-4o",
        Some(128_000),
        Some(same_write(2.50, 10.00, 1.25)),
    ),
    known(
        "openai/gpt-4o-mini",
        Some(128_000),
        Some(same_write(0.15, 0.60, 0.075)),
    ),
    known(
        "anthropic/claude-fable-5-1",
        None,
        Some(Price::new(10.00, 50.00, 0.25, 12.50)),
    ),
    known(
        "anthropic/claude-fable-5",
        None,
        Some(Price::new(10.00, 50.00, 1.00, 12.50)),
    ),
    known(
        "anthropic/claude-opus-5",
        None,
        Some(Price::new(5.00, 25.00, 0.50, 6.25)),
    ),
    known(
        "anthropic/claude-opus-4-8",
        None,
        Some(Price::new(5.00, 25.00, 0.50, 6.25)),
    ),
    known(
        "anthropic/claude-opus-4-7",
        None,
        Some(Price::new(5.00, 25.00, 0.50, 6.25)),
    ),
    known(
        "anthropic/claude-opus-4-6",
        None,
        Some(Price::new(5.00, 25.00, 0.50, 6.25)),
    ),
    known(
        "anthropic/claude-opus-4-5",
        None,
        Some(Price::new(5.00, 25.00, 0.50, 6.25)),
    ),
    known(
        "anthropic/claude-opus-4-1",
        None,
        Some(Price::new(15.00, 75.00, 1.50, 18.75)),
    ),
    known(
        "anthropic/claude-opus-4",
        None,
        Some(Price::new(15.00, 75.00, 1.50, 18.75)),
    ),
    known(
        "anthropic/claude-opus-4-0",
        None,
        Some(Price::new(15.00, 75.00, 1.50, 18.75)),
    ),
    known(
        "anthropic/claude-sonnet-5-5",
        None,
        Some(Price::new(2.00, 10.00, 0.10, 2.50)),
    ),
    known(
        "anthropic/claude-sonnet-5",
        None,
        Some(Price::new(2.00, 10.00, 0.20, 2.50)),
    ),
    known(
        "anthropic/claude-sonnet-4-6",
        None,
        Some(Price::new(3.00, 15.00, 0.30, 3.75)),
    ),
    known(
        "anthropic/claude-sonnet-4-5",
        None,
        Some(Price::new(3.00, 15.00, 0.30, 3.75)),
    ),
    known(
        "anthropic/claude-sonnet-4",
        None,
        Some(Price::new(3.00, 15.00, 0.30, 3.75)),
    ),
    known(
        "anthropic/claude-sonnet-4-0",
        None,
        Some(Price::new(3.00, 15.00, 0.30, 3.75)),
    ),
    known(
        "anthropic/claude-haiku-4-5",
        None,
        Some(Price::new(1.00, 5.00, 0.10, 1.25)),
    ),
    known("anthropic/*", Some(200_000), None),
];

/// The catalog entry a model id resolves to (see [`lookup_keys`]) that
/// knows the fact `has` asks for.
pub fn find(model: &str, has: impl Fn(&KnownModel) -> bool) -> Option<&'static KnownModel> {
    lookup_keys(model)
        .iter()
        .find_map(|k| MODELS.iter().find(|m| m.id == k && has(m)))
}

/// The keys a model id is looked up under, most specific first: the id
/// itself (lower-cased), the id without a trailing snapshot date or
/// `-latest` (`claude-sonnet-4-5-20250929` is priced as
/// `claude-sonnet-4-5`), then the provider wildcard `provider/*`.
///
/// Prefix matching is deliberately not used: `gpt-5` must not price
/// `gpt-5-pro`.
pub fn lookup_keys(model: &str) -> Vec<String> {
    let model = model.trim().to_ascii_lowercase();
    let mut keys = vec![model.clone()];
    if let Some(base) = strip_snapshot(&model)
        && !keys.contains(&base)
    {
        keys.push(base);
    }
    let provider = model.split_once('/').map_or(model.as_str(), |(p, _)| p);
    keys.push(format!("{provider}/*"));
    keys
}

/// `name-20250929`, `name-2025-08-07` and `name-latest` -> `name`.
fn strip_snapshot(model: &str) -> Option<String> {
    if let Some(base) = model.strip_suffix("-latest") {
        return Some(base.to_owned());
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    // `-YYYYMMDD`
    if let Some((base, tail)) = model.rsplit_once('-')
        && tail.len() == 8
        && digits(tail)
        && tail.starts_with("20")
    {
        return Some(base.to_owned());
    }
    // `-YYYY-MM-DD`
    let parts: Vec<&str> = model.rsplitn(4, '-').collect();
    if let [day, month, year, base] = parts.as_slice()
        && year.len() == 4
        && month.len() == 2
        && day.len() == 2
        && digits(year)
        && digits(month)
        && digits(day)
        && year.starts_with("20")
    {
        return Some((*base).to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_entry_is_unique_lower_case_and_knows_something() {
        let mut ids = HashSet::new();
        for m in MODELS {
            assert!(ids.insert(m.id), "{} is listed twice", m.id);
            assert_eq!(m.id, m.id.to_ascii_lowercase(), "lookups lower-case ids");
            assert!(
                m.context_window.is_some() || m.price.is_some(),
                "{} knows nothing",
                m.id
            );
            let (provider, name) = crate::split_model(m.id);
            assert!(!name.is_empty(), "{}", m.id);
            assert!(
                crate::resolve::is_known_provider(provider)
                    || provider == "scripted"
                    || provider == "replay",
                "{} names a provider bdk cannot reach",
                m.id
            );
        }
    }

    #[test]
    fn lookups_fall_back_per_fact() {
        // A model with a price of its own takes its window from the
        // provider's wildcard.
        let sonnet = find("anthropic/claude-sonnet-4-5-20250929", |m| {
            m.price.is_some()
        });
        assert_eq!(sonnet.map(|m| m.id), Some("anthropic/claude-sonnet-4-5"));
        let window = find("anthropic/claude-sonnet-4-5", |m| {
            m.context_window.is_some()
        });
        assert_eq!(window.and_then(|m| m.context_window), Some(200_000));
        assert!(find("xai/unknown-model", |m| m.price.is_some()).is_none());
    }
}
