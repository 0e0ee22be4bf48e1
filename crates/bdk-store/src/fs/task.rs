//! Blocking file work, run off the async runtime. A leaf of the file store:
//! the store and its event log both use it.

use std::io;

use crate::{Result, StoreError};

/// Runs blocking file work off the async runtime.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) => Err(StoreError::Io(io::Error::other(format!(
            "storage task failed: {e}"
        )))),
    }
}
