//! Outbound HTTP clients (a router's to its shards, a shard's probes, the test kit's): one
//! builder, so that every client in the process has the TLS crypto provider it needs. reqwest is
//! built with rustls but without a provider of its own (aws-lc-rs needs cmake to build); ring
//! is installed as the process's provider before any client is made, or building one panics.

/// A client builder that does not consult proxy variables (shardplane only talks to
/// addresses it was given) and whose process has a TLS provider.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_tls_provider();
    reqwest::Client::builder().no_proxy()
}

/// Installs ring as the process-wide rustls provider, once; a provider installed before (by
/// this function or anything else) stays.
pub fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
