//! `bdk cost`: token usage and estimated cost per stored session, with
//! totals across sessions.
//!
//! It reads the state root without taking its lock (like `bdk sessions`),
//! so it works next to a running `bdk serve`. Prices are the core's table:
//! built-in list prices plus the project's `[prices]` overrides when the
//! directory holds a project. A turn on a model without a known price has a
//! null cost, and so has every total it is part of.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Result;
use bdk_core::discover;
use bdk_events::Usage;
use bdk_models::prices::{CostTotals, PRICES_AS_OF, PriceTable, SessionCost, session_cost};
use bdk_store::{FsStore, SessionRecord, Store};
use serde_json::{Value, json};

use crate::support::{FAILED, OK, parse_session_id, print_json};

/// Runs `bdk cost`.
pub async fn run(dir: &Path, state_root: &Path, session: Option<&str>, json: bool) -> Result<u8> {
    let session = match session.map(parse_session_id).transpose() {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let prices = match discover(dir).project {
        Some(project) => PriceTable::with_overrides(&project.config.prices),
        None => {
            errln!(
                "warning: no agent project in {}; using the built-in prices only",
                dir.display()
            );
            PriceTable::builtin()
        }
    };
    let mut reports: Vec<(SessionRecord, SessionCost)> = Vec::new();
    if state_root.exists() {
        let store = FsStore::open(state_root)?;
        let records = match &session {
            Some(id) => match store.get_session(id).await? {
                Some(r) => vec![r],
                None => {
                    print_json(&json!({
                        "ok": false,
                        "error": "session_not_found",
                        "message": format!("session {id} not found under {}", state_root.display()),
                    }))?;
                    return Ok(FAILED);
                }
            },
            None => store.list_sessions().await?,
        };
        for r in records {
            let events = store.read(&r.id, 0).await?;
            let report = session_cost(&events, &prices);
            reports.push((r, report));
        }
    } else if let Some(id) = &session {
        print_json(&json!({
            "ok": false,
            "error": "session_not_found",
            "message": format!("session {id} not found: {} does not exist", state_root.display()),
        }))?;
        return Ok(FAILED);
    }

    let mut totals = CostTotals {
        usage: Some(Usage::default()),
        estimated_cost_usd: Some(0.0),
        ..CostTotals::default()
    };
    let mut unpriced: BTreeSet<String> = BTreeSet::new();
    for (_, report) in &reports {
        totals.add(&report.totals);
        for t in &report.turns {
            if t.estimated_cost_usd.is_none() {
                unpriced.insert(t.model.clone().unwrap_or_else(|| "(unknown model)".into()));
            }
        }
    }

    if json {
        let sessions: Vec<Value> = reports
            .iter()
            .map(|(r, c)| {
                json!({
                    "sessionId": r.id,
                    "title": r.title,
                    "channel": r.channel,
                    "createdAt": r.created_at,
                    "turns": c.turns,
                    "totals": c.totals,
                })
            })
            .collect();
        print_json(&json!({
            "ok": true,
            "sessions": sessions,
            "totals": {
                "sessions": reports.len(),
                "turns": totals.turns,
                "usage": totals.usage,
                "durationMs": totals.duration_ms,
                "estimatedCostUsd": totals.estimated_cost_usd,
            },
            "unpricedModels": unpriced,
            "pricesAsOf": PRICES_AS_OF,
        }))?;
        return Ok(OK);
    }

    if reports.is_empty() {
        outln!("no sessions under {}", state_root.display());
        return Ok(OK);
    }
    for (r, c) in &reports {
        outln!("{} ({} turn(s))", r.id, c.turns.len());
        for t in &c.turns {
            let turn = t
                .turn_id
                .as_ref()
                .map_or_else(|| "-".to_owned(), ToString::to_string);
            outln!(
                "  {turn}  {:<11} {:<28} {}  {}",
                t.status,
                t.model.as_deref().unwrap_or("-"),
                usage_text(t.usage.as_ref()),
                cost_text(t.estimated_cost_usd)
            );
        }
        outln!(
            "  session total  {}  {}",
            usage_text(c.totals.usage.as_ref()),
            cost_text(c.totals.estimated_cost_usd)
        );
    }
    outln!(
        "total: {} session(s), {} turn(s), {}, {}",
        reports.len(),
        totals.turns,
        usage_text(totals.usage.as_ref()),
        cost_text(totals.estimated_cost_usd)
    );
    if !unpriced.is_empty() {
        let list: Vec<&str> = unpriced.iter().map(String::as_str).collect();
        outln!(
            "no price for: {}; add `[prices.\"provider/model\"]` with `input` and `output` (USD per million tokens) to agent.toml",
            list.join(", ")
        );
    }
    outln!("built-in list prices as of {PRICES_AS_OF}; verify them before relying on the estimate");
    Ok(OK)
}

/// A usage record for a person; unknown usage (a server that reports
/// none) says so rather than print zeros, which would read as free.
fn usage_text(u: Option<&Usage>) -> String {
    let Some(u) = u else {
        return "usage unknown (the server reported none)".to_owned();
    };
    format!(
        "in {} out {} cache read {} write {}",
        u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens
    )
}

fn cost_text(cost: Option<f64>) -> String {
    match cost {
        Some(c) => format!("${c:.6}"),
        None => "cost unknown".to_owned(),
    }
}
