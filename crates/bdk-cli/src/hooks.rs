//! Draining hooks before a short-lived command exits.
//!
//! Hooks deliver in background tasks; a command that returned right after
//! its last event would drop the deliveries still queued along with the
//! runtime. Every command that runs the agent in process (`run`, `call`,
//! `evals`) waits for them here, within a bound it reports when hit.

use std::time::Duration;

use bdk_core::host::Host;

/// How long a command waits for its hooks before it exits anyway. Above one
/// command or URL hook's own per-event limit (10 s), so a single slow
/// delivery still gets its full time.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(15);

/// Waits for `host`'s hooks to handle every recorded event; on timeout says
/// on stderr what is left undelivered.
pub(crate) async fn drain(host: &Host) {
    if let Err(late) = host.drain_hooks(DRAIN_TIMEOUT).await {
        eprintln!(
            "warning: hooks did not finish within {} s; exiting with {late}",
            DRAIN_TIMEOUT.as_secs()
        );
    }
}
