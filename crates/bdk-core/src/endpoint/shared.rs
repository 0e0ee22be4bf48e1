//! What the accept loop, the connections and the operations share: the
//! token table and what each token may do.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use bdk_store::Store;

use crate::extension::HostExtension;
use crate::tool::{ToolContext, ToolServices};

/// The largest report (`report.progress` message, `report.log` message and
/// data, as JSON) a tool may send: reports wait in memory for a slow caller,
/// so each is kept small.
pub const MAX_REPORT_BYTES: usize = 16 * 1024;

/// What a token may do: the context of the call it was minted for, and the
/// services that record artifacts for it.
pub(super) struct Binding {
    pub(super) ctx: ToolContext,
    pub(super) services: Arc<dyn ToolServices>,
}

/// State the accept loop and the connections share with the endpoint.
pub(super) struct Shared {
    pub(super) store: Arc<dyn Store>,
    /// The host's extensions, which answer the operations they declare.
    pub(super) extensions: Vec<Arc<dyn HostExtension>>,
    /// The key-value namespaces the server keeps its own state in, which
    /// the `kv.*` operations refuse.
    pub(super) reserved: BTreeSet<String>,
    pub(super) tokens: Mutex<HashMap<String, Arc<Binding>>>,
}

impl Shared {
    pub(super) fn tokens(&self) -> MutexGuard<'_, HashMap<String, Arc<Binding>>> {
        // The table is plain data that no panic can leave half-updated.
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }
}
