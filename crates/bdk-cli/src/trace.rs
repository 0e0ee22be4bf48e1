//! Trace files: a session's events written as NDJSON under a traces
//! folder, the file `bdk run` names in its summary and `bdk chat` names on
//! `/trace`. A leaf: it names no command.

use std::path::{Path, PathBuf};

use anyhow::Result;
use bdk_events::{Envelope, SessionId};
use bdk_store::Store;

/// Writes `events` to the store's traces folder as `<id>.ndjson`.
pub(crate) async fn write_trace(
    store: &dyn Store,
    id: &SessionId,
    events: &[Envelope],
) -> Result<PathBuf> {
    write_trace_to(&store.traces_dir(), id.as_str(), events).await
}

/// Writes `events` to `dir/<id>.ndjson`, replacing an older trace whole.
pub(crate) async fn write_trace_to(dir: &Path, id: &str, events: &[Envelope]) -> Result<PathBuf> {
    let dir = dir.to_path_buf();
    tokio::fs::create_dir_all(&dir).await?;
    let path = dir.join(format!("{id}.ndjson"));
    let mut buf = Vec::new();
    for e in events {
        bdk_events::ndjson::encode_into(e, &mut buf)?;
    }
    // Write then rename, so a reader never sees half a trace.
    let tmp = dir.join(format!(".{id}.ndjson.tmp"));
    tokio::fs::write(&tmp, &buf).await?;
    tokio::fs::rename(&tmp, &path).await?;
    Ok(path)
}
