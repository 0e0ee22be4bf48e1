//! The process-wide outbound HTTP client.
//!
//! Every outbound request the runtime makes (model providers, `url` tools,
//! `url` hooks) goes through one [`reqwest::Client`], so connections are
//! pooled across callers and TLS is configured in one place. TLS uses rustls
//! with the ring provider; reqwest is built without a provider of its own, so
//! [`install_crypto_provider`] must run before any client is built, including
//! clients other crates build (rmcp's). [`http_client`] does it for you.

use std::sync::OnceLock;
use std::time::Duration;

/// How long establishing a connection (TCP and TLS) may take. Whole-request
/// deadlines are per call: a model stream and a tool call need very different
/// ones, so they are set on each request, not here.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Failure to build the shared client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// reqwest refused the configuration (in practice: TLS setup failed).
    #[error("failed to build the http client")]
    Build(#[source] reqwest::Error),
}

static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
static PROVIDER: OnceLock<()> = OnceLock::new();

/// Installs rustls' ring crypto provider as the process default, once.
///
/// Call it before building any reqwest-based client outside [`http_client`];
/// without it reqwest panics on first use. Another caller may have installed a
/// provider already; that one is kept, which is what we want.
pub fn install_crypto_provider() {
    PROVIDER.get_or_init(|| {
        // `Err` means a default provider is already installed (by us on
        // another thread or by an embedding application); either is fine.
        let _already_installed = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The shared HTTP client, built on first use.
///
/// Clones are cheap handles onto the same connection pool.
pub fn http_client() -> Result<reqwest::Client, NetError> {
    if let Some(client) = CLIENT.get() {
        return Ok(client.clone());
    }
    install_crypto_provider();
    let built = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(concat!("bdk/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(NetError::Build)?;
    // Two threads may race to build; the first one stored wins and the other
    // client is dropped before anyone used it.
    Ok(CLIENT.get_or_init(|| built).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_builds_with_the_ring_provider() {
        // Without a crypto provider installed first, reqwest panics here.
        let _client = http_client().unwrap();
        assert!(CLIENT.get().is_some());
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }

    #[test]
    fn provider_install_is_idempotent() {
        install_crypto_provider();
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
