//! The router's TLS server configuration from upstream's flags (`--tls-cert-file`,
//! `--tls-private-key-file`, `--client-ca-file`, `--tls-min-version`): HTTP/2 and HTTP/1.1
//! offered by ALPN, client certificates verified against the client CA when a client sends one
//! (a client without one stays anonymous, for authentication to decide), and the serving
//! certificate read again when its files change, so a renewed certificate is served without a
//! restart (checked at most once a second, on a handshake; a pair that does not load keeps the
//! one in use, and the log says why). The client CA is read again the same way
//! ([`ReloadingClientCa`]).

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Why a TLS configuration could not be built.
#[derive(Debug)]
pub struct TlsError(pub String);

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

static TLS13_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// The lowest TLS version from upstream's `--tls-min-version` values (rustls speaks 1.2 and 1.3
/// only, so the older two are refused rather than silently raised).
pub fn protocol_versions(min_version: &str) -> Result<&'static [&'static rustls::SupportedProtocolVersion], TlsError> {
    match min_version {
        "" | "VersionTLS12" => Ok(rustls::ALL_VERSIONS),
        "VersionTLS13" => Ok(TLS13_ONLY),
        "VersionTLS10" | "VersionTLS11" => Err(TlsError(format!("--tls-min-version {min_version} is not supported: TLS 1.2 is the lowest version served"))),
        other => Err(TlsError(format!("--tls-min-version {other:?}: not one of VersionTLS12, VersionTLS13"))),
    }
}

fn load_key(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| TlsError(format!("{}: {e}", cert.display())))?;
    if certs.is_empty() {
        return Err(TlsError(format!("{}: no certificate", cert.display())));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError(format!("{}: {e}", key.display())))?;
    let signing = provider().key_provider.load_private_key(key_der).map_err(|e| TlsError(format!("{}: {e}", key.display())))?;
    let certified = CertifiedKey::new(certs, signing);
    certified.keys_match().map_err(|e| TlsError(format!("{} and {} do not match: {e}", cert.display(), key.display())))?;
    Ok(Arc::new(certified))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// A value read from files, read again when one of them changes: checked at most once a
/// [`RECHECK`], on use. A change that does not load keeps the value in use (files caught
/// half-written are tried again on a later use), and the log says why. Both the serving
/// certificate and the client CA reload through this.
struct FileBacked<T: Clone> {
    files: Vec<PathBuf>,
    /// What the value is, for the log.
    what: &'static str,
    loaded: Mutex<Loaded<T>>,
}

struct Loaded<T> {
    value: T,
    stamps: Vec<Option<SystemTime>>,
    checked: Instant,
}

const RECHECK: Duration = Duration::from_secs(1);

impl<T: Clone> FileBacked<T> {
    fn new(files: Vec<PathBuf>, what: &'static str, load: impl Fn() -> Result<T, TlsError>) -> Result<Self, TlsError> {
        let loaded = Loaded { value: load()?, stamps: files.iter().map(|f| modified(f)).collect(), checked: Instant::now() };
        Ok(Self { files, what, loaded: Mutex::new(loaded) })
    }

    fn current(&self, load: impl Fn() -> Result<T, TlsError>) -> T {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if loaded.checked.elapsed() >= RECHECK {
            loaded.checked = Instant::now();
            let stamps: Vec<_> = self.files.iter().map(|f| modified(f)).collect();
            if stamps != loaded.stamps {
                match load() {
                    Ok(v) => {
                        tracing::info!(file = %self.files[0].display(), "{} reloaded", self.what);
                        loaded.value = v;
                        loaded.stamps = stamps;
                    }
                    Err(e) => tracing::warn!(error = %e, "{} changed but does not load; keeping the one in use", self.what),
                }
            }
        }
        loaded.value.clone()
    }
}

/// The serving certificate, read again when its files change.
pub struct ReloadingCertificate {
    cert: PathBuf,
    key: PathBuf,
    loaded: FileBacked<Arc<CertifiedKey>>,
}

impl std::fmt::Debug for ReloadingCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCertificate").field("cert", &self.cert).field("key", &self.key).finish()
    }
}

impl ReloadingCertificate {
    /// The pair in `cert` and `key`, loaded now (an error if it does not load).
    pub fn new(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let loaded = FileBacked::new(vec![cert.to_owned(), key.to_owned()], "serving certificate", || load_key(cert, key))?;
        Ok(Self { cert: cert.to_owned(), key: key.to_owned(), loaded })
    }

    /// The pair to serve: the one loaded, or the files' new one if they changed since.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.loaded.current(|| load_key(&self.cert, &self.key))
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The client CA (`--client-ca-file`), read again when its file changes (checked at most once
/// a second, on a handshake), so a CA added or replaced there verifies clients from the next
/// handshake; a file that does not load keeps the CA in use, and the log says why. No CA names
/// are sent as hints (they would have to outlive a reload); clients send their certificate
/// regardless, as kubectl, client-go, OpenSSL and rustls clients do.
pub struct ReloadingClientCa {
    file: PathBuf,
    required: bool,
    loaded: FileBacked<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
}

impl std::fmt::Debug for ReloadingClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingClientCa").field("file", &self.file).field("required", &self.required).finish()
    }
}

impl ReloadingClientCa {
    /// The CA in `file`, loaded now (an error if it does not load); `required`: a client
    /// without a certificate it signed fails the handshake.
    pub fn new(file: &Path, required: bool) -> Result<Self, TlsError> {
        let loaded = FileBacked::new(vec![file.to_owned()], "client CA", || Self::build(file, required))?;
        Ok(Self { file: file.to_owned(), required, loaded })
    }

    fn build(file: &Path, required: bool) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(file)?), provider());
        let verifier = if required { verifier } else { verifier.allow_unauthenticated() };
        verifier.build().map_err(|e| TlsError(format!("{}: {e}", file.display())))
    }

    /// The verifier to use: the one loaded, or the file's new CA if it changed since.
    fn current(&self) -> Arc<dyn rustls::server::danger::ClientCertVerifier> {
        self.loaded.current(|| Self::build(&self.file, self.required))
    }
}

impl rustls::server::danger::ClientCertVerifier for ReloadingClientCa {
    fn client_auth_mandatory(&self) -> bool {
        self.required
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(&self, end_entity: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>], now: rustls::pki_types::UnixTime) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        self.current().verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &rustls::DigitallySignedStruct) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &rustls::DigitallySignedStruct) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.current().supported_verify_schemes()
    }
}

/// What the TLS server is built from (upstream's flags).
#[derive(Clone, Debug, Default)]
pub struct TlsFlags {
    /// `--tls-cert-file`.
    pub cert_file: PathBuf,
    /// `--tls-private-key-file`.
    pub key_file: PathBuf,
    /// `--client-ca-file`: client certificates signed by it are verified; none is required
    /// unless [`TlsFlags::require_client_certificate`].
    pub client_ca_file: Option<PathBuf>,
    /// Refuse, in the handshake, a client without a certificate the client CA signed (a shard
    /// behind a router: only the router may connect).
    pub require_client_certificate: bool,
    /// `--tls-min-version`.
    pub min_version: String,
}

/// The server configuration for `flags`.
pub fn server_config(flags: &TlsFlags) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(protocol_versions(&flags.min_version)?)
        .map_err(|e| TlsError(e.to_string()))?;
    let builder = match &flags.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca) => builder.with_client_cert_verifier(Arc::new(ReloadingClientCa::new(ca, flags.require_client_certificate)?)),
    };
    let mut config = builder.with_cert_resolver(Arc::new(ReloadingCertificate::new(&flags.cert_file, &flags.key_file)?));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The certificates in a PEM file, as a root store.
fn roots(ca: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| TlsError(format!("{}: {e}", ca.display())))? {
        roots.add(cert.map_err(|e| TlsError(format!("{}: {e}", ca.display())))?).map_err(|e| TlsError(format!("{}: {e}", ca.display())))?;
    }
    Ok(roots)
}

/// A client configuration that trusts the servers `ca` signed and presents the certificate in
/// `cert` and `key` (the router to its shards), speaking HTTP/1.1.
pub fn client_config(ca: &Path, cert: &Path, key: &Path) -> Result<rustls::ClientConfig, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert).and_then(|it| it.collect::<Result<_, _>>()).map_err(|e| TlsError(format!("{}: {e}", cert.display())))?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError(format!("{}: {e}", key.display())))?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?
        .with_root_certificates(roots(ca)?)
        .with_client_auth_cert(certs, key_der)
        .map_err(|e| TlsError(format!("{}: {e}", cert.display())))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{write_private, Authority};

    #[test]
    fn a_changed_certificate_is_served_after_the_recheck_and_a_broken_one_is_not() {
        let dir = tempfile::tempdir().expect("tmp");
        let (cert, key) = (dir.path().join("c.crt"), dir.path().join("c.key"));
        let ca = Authority::generate("ca").expect("ca");
        let write = |name: &str| {
            let (c, k) = ca.server_certificate(name, &["127.0.0.1"]).expect("leaf");
            write_private(&cert, c.pem().as_bytes()).expect("w");
            write_private(&key, k.serialize_pem().as_bytes()).expect("w");
            c.der().to_vec()
        };
        let first = write("first");
        let resolver = ReloadingCertificate::new(&cert, &key).expect("loads");
        assert_eq!(resolver.current().cert[0].as_ref(), first.as_slice());
        // File times can be coarse: make the change visible however fine they are.
        std::thread::sleep(Duration::from_millis(20));
        let second = write("second");
        resolver.loaded.loaded.lock().unwrap().checked -= RECHECK;
        assert_eq!(resolver.current().cert[0].as_ref(), second.as_slice());
        std::thread::sleep(Duration::from_millis(20));
        write_private(&key, b"not a key").expect("w");
        resolver.loaded.loaded.lock().unwrap().checked -= RECHECK;
        assert_eq!(resolver.current().cert[0].as_ref(), second.as_slice(), "a pair that does not load is not served");
    }

    #[test]
    fn a_changed_client_ca_verifies_from_the_recheck_on() {
        use rustls::server::danger::ClientCertVerifier;
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("client-ca.crt");
        let (first, second) = (Authority::generate("first").expect("ca"), Authority::generate("second").expect("ca"));
        let leaf = |ca: &Authority| CertificateDer::from(ca.client_certificate("jane", None).expect("client").0.der().to_vec());
        write_private(&file, first.certificate().pem().as_bytes()).expect("w");
        let ca = ReloadingClientCa::new(&file, false).expect("loads");
        let now = rustls::pki_types::UnixTime::now();
        assert!(ca.verify_client_cert(&leaf(&first), &[], now).is_ok());
        assert!(ca.verify_client_cert(&leaf(&second), &[], now).is_err(), "another CA's client");
        std::thread::sleep(Duration::from_millis(20));
        write_private(&file, second.certificate().pem().as_bytes()).expect("w");
        ca.loaded.loaded.lock().unwrap().checked -= RECHECK;
        assert!(ca.verify_client_cert(&leaf(&second), &[], now).is_ok(), "the new CA verifies");
        assert!(ca.verify_client_cert(&leaf(&first), &[], now).is_err(), "the old one no longer does");
        std::thread::sleep(Duration::from_millis(20));
        write_private(&file, b"not a certificate").expect("w");
        ca.loaded.loaded.lock().unwrap().checked -= RECHECK;
        assert!(ca.verify_client_cert(&leaf(&second), &[], now).is_ok(), "a file that does not load keeps the CA in use");
        assert!(!ca.client_auth_mandatory() && ReloadingClientCa::new(&dir.path().join("missing"), true).is_err());
    }

    #[test]
    fn old_tls_versions_are_refused_by_name() {
        assert!(protocol_versions("VersionTLS13").is_ok());
        assert!(protocol_versions("VersionTLS10").unwrap_err().0.contains("not supported"));
        assert!(protocol_versions("TLS1.2").is_err());
    }
}
