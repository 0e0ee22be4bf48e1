//! The rows of the event table as the engine reads them back, and the
//! conversions every part of the engine shares: database errors, indices as
//! `bigint`, and an event row to an [`Envelope`]. A leaf: the store and its
//! followers (`follow.rs`) both use it.

use bdk_events::{Envelope, Event, SessionId, TurnId};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::{Result, StoreError};

/// Wraps a database error.
pub(crate) fn db(e: sqlx::Error) -> StoreError {
    StoreError::Database(Box::new(e))
}

/// A stored value that cannot be read back.
pub(super) fn corrupt(what: impl std::fmt::Display, e: impl ToString) -> StoreError {
    StoreError::Corrupt {
        path: what.to_string(),
        message: e.to_string(),
    }
}

/// Indices and limits travel as `bigint`; anything past `i64::MAX` is
/// treated as `i64::MAX`, which no stored row reaches.
pub(super) fn to_db_index(i: u64) -> i64 {
    i64::try_from(i).unwrap_or(i64::MAX)
}

/// A stored index back to `u64`; a negative one is corrupt.
pub(super) fn from_db_index(i: i64) -> Result<u64> {
    u64::try_from(i).map_err(|_| corrupt("bdk_events", format!("negative index {i}")))
}

/// One row of `bdk_events` as read back.
pub(super) type EventRow = (i64, Option<String>, DateTime<Utc>, String, String);

/// An event row as the envelope it stores.
pub(super) fn envelope(id: &SessionId, row: EventRow) -> Result<Envelope> {
    let (idx, turn_id, at, kind, data) = row;
    let index = from_db_index(idx)?;
    let data: Value = serde_json::from_str(&data)
        .map_err(|e| corrupt(format_args!("bdk_events {id}#{index}"), e))?;
    let event = Event::from_parts(&kind, data)
        .map_err(|e| corrupt(format_args!("bdk_events {id}#{index}"), e))?;
    Ok(Envelope {
        index,
        session_id: id.clone(),
        turn_id: turn_id.map(TurnId::from_string),
        at,
        event,
    })
}
