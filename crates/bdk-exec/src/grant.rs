//! What a subprocess tool is handed to reach the host endpoint: the
//! [`EndpointGrant`] for one call and the names of the variables that carry
//! it into the tool's environment.
//!
//! A leaf, so the tool context and the subprocess runner can name a grant
//! without depending on the endpoint that mints it (the endpoint serves tool
//! calls, so it depends on tools, not the other way round).

use std::any::Any;
use std::path::PathBuf;

/// The variable naming the endpoint's socket in a tool's environment.
pub const SOCKET_ENV: &str = "BDK_HOST_SOCKET";

/// The variable holding the call's token in a tool's environment.
pub const TOKEN_ENV: &str = "BDK_HOST_TOKEN";

/// A capability on the host endpoint for one running call: the socket to
/// connect to and the token to send. Dropping it revokes the token.
pub struct EndpointGrant {
    /// The socket path (`BDK_HOST_SOCKET`).
    pub socket: PathBuf,
    /// The call's token (`BDK_HOST_TOKEN`).
    pub token: String,
    /// The endpoint's revocation guard: its `Drop` removes the token.
    _revoke: Box<dyn Any + Send + Sync>,
}

impl EndpointGrant {
    /// A grant of `token` on `socket`, revoked when `revoke` is dropped.
    pub fn new(socket: PathBuf, token: String, revoke: Box<dyn Any + Send + Sync>) -> Self {
        Self {
            socket,
            token,
            _revoke: revoke,
        }
    }
}

impl std::fmt::Debug for EndpointGrant {
    // The token is a credential: keep it out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointGrant")
            .field("socket", &self.socket)
            .field("token", &"<redacted>")
            .finish()
    }
}
