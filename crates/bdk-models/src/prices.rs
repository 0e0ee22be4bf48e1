//! Model prices and session cost estimates.
//!
//! A [`PriceTable`] maps `provider/model` ids to a [`Price`] in US dollars
//! per million tokens of each kind the `Usage` record counts (input, output,
//! cache read, cache write). The built-in entries are the list prices of
//! [`crate::catalog`], as of [`PRICES_AS_OF`]; `agent.toml` extends or overrides them with
//! `[prices."provider/model"]` tables. Estimates are only estimates: they
//! ignore batch discounts, long-prompt surcharges and negotiated rates.
//!
//! [`session_cost`] folds a session's events into one priced row per ended
//! turn, the shape both the HTTP cost route and `bdk cost` report.

use std::collections::{BTreeMap, HashMap};

use bdk_events::{Envelope, Event, TurnId, Usage};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::catalog::MODELS;
pub use crate::catalog::{PRICES_AS_OF, Price, lookup_keys};

/// Prices by model id: the built-in list plus `agent.toml` overrides.
#[derive(Clone, Debug, PartialEq)]
pub struct PriceTable {
    entries: HashMap<String, Price>,
}

impl Default for PriceTable {
    fn default() -> Self {
        Self::builtin()
    }
}

impl PriceTable {
    /// The built-in list prices.
    pub fn builtin() -> Self {
        Self {
            entries: MODELS
                .iter()
                .filter_map(|m| Some((m.id.to_owned(), m.price?)))
                .collect(),
        }
    }

    /// A table with no entries (every model unknown).
    pub fn empty() -> Self {
        Self {
            entries: HashMap::new(),
        }
    }

    /// The built-in list with `overrides` (from `agent.toml` `[prices]`)
    /// added or replacing entries of the same key.
    pub fn with_overrides(overrides: &BTreeMap<String, Price>) -> Self {
        let mut table = Self::builtin();
        for (k, p) in overrides {
            table.insert(k, *p);
        }
        table
    }

    /// Adds or replaces one entry. `model` is `provider/model` or `provider/*`.
    pub fn insert(&mut self, model: &str, price: Price) {
        self.entries
            .insert(model.trim().to_ascii_lowercase(), price);
    }

    /// The price of a model, following [`lookup_keys`].
    pub fn get(&self, model: &str) -> Option<Price> {
        lookup_keys(model)
            .iter()
            .find_map(|k| self.entries.get(k).copied())
    }

    /// The estimated cost of `usage` on `model` in US dollars; `None` when
    /// the model has no known price.
    pub fn estimate(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.get(model).map(|p| p.cost(usage))
    }

    /// Every entry, sorted by key.
    pub fn entries(&self) -> BTreeMap<String, Price> {
        self.entries.iter().map(|(k, p)| (k.clone(), *p)).collect()
    }
}

/// The estimated cost of `usage` on `model` at built-in list prices; `None`
/// when the model has no known price.
pub fn estimate(model: &str, usage: &Usage) -> Option<f64> {
    PriceTable::builtin().estimate(model, usage)
}

/// One ended turn, priced.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnCost {
    /// The turn.
    pub turn_id: Option<TurnId>,
    /// `completed`, `failed`, `cancelled` or `interrupted`.
    pub status: &'static str,
    /// The model that ran it (`turn.completed.data.model`, or the model
    /// `turn.started` named for a failed turn).
    pub model: Option<String>,
    /// Tokens used; `None` when the provider did not report them.
    pub usage: Option<Usage>,
    /// How long it took (measured from `turn.started` for failed turns).
    pub duration_ms: Option<u64>,
    /// The estimate; `None` when the model's price or the usage is unknown.
    pub estimated_cost_usd: Option<f64>,
}

/// Sums over a session's (or several sessions') turns.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CostTotals {
    /// Turns counted.
    pub turns: usize,
    /// Tokens used, summed; `None` when any turn's usage is unknown.
    pub usage: Option<Usage>,
    /// Turn durations, summed.
    pub duration_ms: u64,
    /// The summed estimate; `None` when any turn's price is unknown.
    pub estimated_cost_usd: Option<f64>,
}

impl CostTotals {
    /// Adds one turn.
    pub fn add_turn(&mut self, turn: &TurnCost) {
        self.add(&CostTotals {
            turns: 1,
            usage: turn.usage,
            duration_ms: turn.duration_ms.unwrap_or(0),
            estimated_cost_usd: turn.estimated_cost_usd,
        });
    }

    /// Adds other totals.
    pub fn add(&mut self, other: &CostTotals) {
        let empty = self.turns == 0;
        self.turns += other.turns;
        self.usage = if empty {
            other.usage
        } else {
            Usage::sum_known(self.usage, other.usage)
        };
        self.duration_ms = self.duration_ms.saturating_add(other.duration_ms);
        self.estimated_cost_usd = match (empty, self.estimated_cost_usd, other.estimated_cost_usd) {
            (true, _, b) => b,
            (false, Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
}

/// A session's turns, priced, with totals.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionCost {
    /// One row per ended turn, in stream order.
    pub turns: Vec<TurnCost>,
    /// Sums over the rows.
    pub totals: CostTotals,
}

/// Folds a session's events into one priced row per ended turn.
pub fn session_cost(events: &[Envelope], prices: &PriceTable) -> SessionCost {
    let mut started: HashMap<Option<TurnId>, (Option<String>, DateTime<Utc>)> = HashMap::new();
    let mut turns = Vec::new();
    for env in events {
        match &env.event {
            Event::TurnStarted(s) => {
                started.insert(env.turn_id.clone(), (s.model.clone(), env.at));
            }
            Event::TurnCompleted(c) => turns.push(TurnCost {
                turn_id: env.turn_id.clone(),
                status: "completed",
                model: Some(c.model.clone()),
                usage: c.usage,
                duration_ms: Some(c.duration_ms),
                estimated_cost_usd: cost_of(prices, Some(&c.model), c.usage.as_ref()),
            }),
            Event::TurnFailed(f) => {
                let start = started.get(&env.turn_id);
                // A failed turn records no duration of its own: measure it
                // from its `turn.started`, when it got that far.
                let duration_ms = start.map(|(_, at)| {
                    u64::try_from((env.at - *at).num_milliseconds().max(0)).unwrap_or(0)
                });
                let model = start.and_then(|(m, _)| m.clone());
                let usage = f.usage;
                turns.push(TurnCost {
                    turn_id: env.turn_id.clone(),
                    status: f.status.as_str(),
                    estimated_cost_usd: cost_of(prices, model.as_deref(), usage.as_ref()),
                    model,
                    usage,
                    duration_ms,
                });
            }
            _ => {}
        }
    }
    let mut totals = CostTotals {
        usage: Some(Usage::default()),
        estimated_cost_usd: Some(0.0),
        ..CostTotals::default()
    };
    for t in &turns {
        totals.add_turn(t);
    }
    SessionCost { turns, totals }
}

fn cost_of(prices: &PriceTable, model: Option<&str>, usage: Option<&Usage>) -> Option<f64> {
    // Unknown usage has an unknown cost, even on a free model's price: "we
    // do not know" must never read as "nothing".
    let usage = usage?;
    // No tokens cost nothing whatever the price (a turn that failed before
    // its model answered, or never reached one).
    if *usage == Usage::default() {
        return Some(0.0);
    }
    model.and_then(|m| prices.estimate(m, usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, read: u64, write: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: read,
            cache_write_tokens: write,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn cost_is_linear_in_each_token_kind() {
        let p = Price::new(3.0, 15.0, 0.3, 3.75);
        let c = p.cost(&usage(1_000_000, 100_000, 1_000_000, 200_000));
        assert!(close(c, 3.0 + 1.5 + 0.3 + 0.75), "{c}");
        assert!(close(p.cost(&Usage::default()), 0.0));
        assert!(close(p.cost(&usage(1, 0, 0, 0)), 3.0e-6));
    }

    #[test]
    fn builtin_prices_known_models_and_leaves_the_rest_unknown() {
        let u = usage(2_000_000, 1_000_000, 0, 0);
        let sonnet = estimate("anthropic/claude-sonnet-4-5", &u).unwrap();
        assert!(close(sonnet, 6.0 + 15.0), "{sonnet}");
        let grok = estimate("xai/grok-4-1-fast-reasoning", &u).unwrap();
        assert!(close(grok, 0.4 + 0.5), "{grok}");
        assert_eq!(estimate("scripted/default", &u), Some(0.0));
        assert_eq!(estimate("scripted", &u), Some(0.0));
        assert_eq!(estimate("replay/recording.jsonl", &u), Some(0.0));
        assert_eq!(estimate("ollama/llama3.2", &u), None);
        assert_eq!(estimate("openai/gpt-5-pro", &u), None, "no prefix matching");
        assert_eq!(estimate("nonsense", &u), None);
    }

    #[test]
    fn snapshot_dates_and_latest_resolve_to_the_base_model() {
        let t = PriceTable::builtin();
        let base = t.get("anthropic/claude-sonnet-4-5").unwrap();
        assert_eq!(t.get("anthropic/claude-sonnet-4-5-20250929"), Some(base));
        assert_eq!(t.get("Anthropic/Claude-Sonnet-4-5"), Some(base));
        assert_eq!(
            t.get("openai/gpt-5-2025-08-07"),
            t.get("openai/gpt-5"),
            "dashed dates"
        );
        assert_eq!(t.get("openai/gpt-5-latest"), t.get("openai/gpt-5"));
        // Something that merely ends in digits is not a snapshot.
        assert_eq!(t.get("openai/gpt-4o-1234"), None);
        assert_eq!(
            lookup_keys("xai/grok-4.3"),
            vec!["xai/grok-4.3".to_owned(), "xai/*".to_owned()]
        );
    }

    #[test]
    fn overrides_add_replace_and_use_wildcards() {
        let mut o = BTreeMap::new();
        o.insert("xai/grok-4.3".to_owned(), Price::new(10.0, 20.0, 1.0, 10.0));
        o.insert("ollama/*".to_owned(), Price::FREE);
        o.insert("acme/big".to_owned(), Price::new(1.0, 2.0, 0.5, 1.0));
        let t = PriceTable::with_overrides(&o);
        let u = usage(1_000_000, 1_000_000, 0, 0);
        assert_eq!(t.estimate("xai/grok-4.3", &u), Some(30.0), "replaced");
        assert_eq!(t.estimate("ollama/llama3.2", &u), Some(0.0), "wildcard");
        assert_eq!(t.estimate("acme/big", &u), Some(3.0), "added");
        assert_eq!(
            t.get("anthropic/claude-haiku-4-5"),
            PriceTable::builtin().get("anthropic/claude-haiku-4-5"),
            "untouched entries stay"
        );
        // An exact entry beats the wildcard.
        let mut o = BTreeMap::new();
        o.insert("acme/*".to_owned(), Price::FREE);
        o.insert("acme/big".to_owned(), Price::new(1.0, 0.0, 0.0, 0.0));
        let t = PriceTable::with_overrides(&o);
        assert_eq!(t.estimate("acme/big", &u), Some(1.0));
        assert_eq!(t.estimate("acme/small", &u), Some(0.0));
    }

    #[test]
    fn totals_are_unknown_once_any_turn_is_unknown() {
        let row = |cost: Option<f64>| TurnCost {
            turn_id: None,
            status: "completed",
            model: None,
            usage: Some(usage(10, 5, 0, 0)),
            duration_ms: Some(7),
            estimated_cost_usd: cost,
        };
        let mut t = CostTotals::default();
        t.add_turn(&row(Some(1.0)));
        t.add_turn(&row(Some(0.5)));
        assert_eq!(t.estimated_cost_usd, Some(1.5));
        assert_eq!(t.turns, 2);
        assert_eq!(t.usage.map(|u| u.input_tokens), Some(20));
        assert_eq!(t.duration_ms, 14);
        t.add_turn(&row(None));
        assert_eq!(t.estimated_cost_usd, None);
        t.add_turn(&row(Some(2.0)));
        assert_eq!(t.estimated_cost_usd, None, "stays unknown");
        assert!(t.usage.is_some(), "every row's usage was known");
        t.add_turn(&TurnCost {
            usage: None,
            ..row(Some(1.0))
        });
        assert_eq!(t.usage, None, "unknown usage makes the sum unknown");
    }
}
