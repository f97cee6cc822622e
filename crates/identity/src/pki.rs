//! The cluster's PKI, as the first start creates it (RFC 0012): a CA, a serving certificate for
//! the router's addresses (the shards it starts serve with it too), the admin's client
//! certificate (group `system:masters`), the key ServiceAccount tokens are signed with, and a
//! second CA, the front proxy's, whose one client certificate is how a router proves itself to
//! its shards (kubeadm's `front-proxy-ca` and `front-proxy-client`); each a PEM file of mode 0600
//! in a 0700 directory.
//!
//! A directory that already holds every file is used as it is, so a restart keeps the
//! credentials clients were given; one that holds only some is filled again from a new CA
//! (every earlier credential stops working, which the log says). Certificates are ECDSA P-256,
//! the CA valid ten years and the others one year, as kubeadm's.

use rcgen::{BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const CA_DAYS: u64 = 3650;
const LEAF_DAYS: u64 = 365;
/// The admin's user name, as kubeadm names it.
pub const ADMIN_USER: &str = "kubernetes-admin";
/// The common name of the router's client certificate to its shards, as kubeadm names the
/// front proxy's.
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";
/// The common name of the cluster CA.
pub const CLUSTER_CA: &str = "shardplane-ca";
/// The common name of the front proxy's CA.
pub const FRONT_PROXY_CA: &str = "front-proxy-ca";

/// Why the PKI could not be made or read.
#[derive(Debug)]
pub enum PkiError {
    /// A file could not be read or written.
    Io(PathBuf, std::io::Error),
    /// A key or certificate could not be generated.
    Generate(rcgen::Error),
}

impl std::fmt::Display for PkiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(path, e) => write!(f, "{}: {e}", path.display()),
            Self::Generate(e) => write!(f, "generating a certificate: {e}"),
        }
    }
}

impl std::error::Error for PkiError {}

impl From<rcgen::Error> for PkiError {
    fn from(e: rcgen::Error) -> Self {
        Self::Generate(e)
    }
}

/// A certificate authority that can sign serving and client certificates.
pub struct Authority {
    cert: Certificate,
    issuer: Issuer<'static, KeyPair>,
}

fn validity(params: &mut CertificateParams, days: u64) {
    let now = SystemTime::now();
    // An hour back, so a client whose clock is a little behind accepts it at once.
    params.not_before = (now - Duration::from_secs(3600)).into();
    params.not_after = (now + Duration::from_secs(days * 86_400)).into();
}

fn subject(common_name: &str, organizations: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for o in organizations {
        dn.push(DnType::OrganizationName, *o);
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

impl Authority {
    /// A new self-signed CA named `common_name`.
    pub fn generate(common_name: &str) -> Result<Self, PkiError> {
        Self::with_key(common_name, KeyPair::generate()?)
    }

    fn with_key(common_name: &str, key: KeyPair) -> Result<Self, PkiError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = subject(common_name, &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        validity(&mut params, CA_DAYS);
        let cert = params.self_signed(&key)?;
        Ok(Self { cert, issuer: Issuer::new(params, key) })
    }

    /// The CA `generate` made as `common_name`, from its key (PEM): what it signs chains to
    /// the certificate made then (its subject and key are the same).
    pub fn from_key(common_name: &str, key_pem: &str) -> Result<Self, PkiError> {
        Self::with_key(common_name, KeyPair::from_pem(key_pem)?)
    }

    /// The CA's certificate.
    pub fn certificate(&self) -> &Certificate {
        &self.cert
    }

    /// The CA's private key.
    pub fn key(&self) -> &KeyPair {
        self.issuer.key()
    }

    /// A serving certificate for `hosts` (IP addresses and DNS names).
    pub fn server_certificate(&self, common_name: &str, hosts: &[&str]) -> Result<(Certificate, KeyPair), PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = subject(common_name, &[]);
        params.subject_alt_names = hosts
            .iter()
            .map(|h| match h.parse::<std::net::IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => Ok(SanType::DnsName((*h).try_into()?)),
            })
            .collect::<Result<_, rcgen::Error>>()?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        validity(&mut params, LEAF_DAYS);
        Ok((params.signed_by(&key, &self.issuer)?, key))
    }

    /// A client certificate for `user` in `group` (the subject's CN and O, as upstream's x509
    /// authenticator reads them). One group at most: the generator keeps one value per
    /// attribute type; certificates with several Os come from signed requests (RFC 0012).
    pub fn client_certificate(&self, user: &str, group: Option<&str>) -> Result<(Certificate, KeyPair), PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = subject(user, group.as_slice());
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        validity(&mut params, LEAF_DAYS);
        Ok((params.signed_by(&key, &self.issuer)?, key))
    }
}

/// Where the PKI's files are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pki {
    /// The directory holding them.
    pub dir: PathBuf,
}

/// The files, in the order they are written (the CA last, so a directory with a CA is whole).
const FILES: [&str; 12] = [
    "apiserver.crt",
    "apiserver.key",
    "admin.crt",
    "admin.key",
    "sa.key",
    "sa.pub",
    "front-proxy-client.crt",
    "front-proxy-client.key",
    "front-proxy-ca.key",
    "front-proxy-ca.crt",
    "ca.key",
    "ca.crt",
];

impl Pki {
    /// The CA certificate (upstream's `--client-ca-file`, and the kubeconfig's authority).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    /// The CA key.
    pub fn ca_key(&self) -> PathBuf {
        self.dir.join("ca.key")
    }
    /// The serving certificate (`--tls-cert-file`).
    pub fn serving_cert(&self) -> PathBuf {
        self.dir.join("apiserver.crt")
    }
    /// The serving key (`--tls-private-key-file`).
    pub fn serving_key(&self) -> PathBuf {
        self.dir.join("apiserver.key")
    }
    /// The admin's client certificate.
    pub fn admin_cert(&self) -> PathBuf {
        self.dir.join("admin.crt")
    }
    /// The admin's client key.
    pub fn admin_key(&self) -> PathBuf {
        self.dir.join("admin.key")
    }
    /// The ServiceAccount token signing key (`--service-account-signing-key-file`).
    pub fn service_account_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }
    /// Its public half (`--service-account-key-file`).
    pub fn service_account_public_key(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }
    /// The front proxy's CA: a shard trusts the router whose client certificate it signed
    /// (upstream's `--requestheader-client-ca-file`).
    pub fn front_proxy_ca_cert(&self) -> PathBuf {
        self.dir.join("front-proxy-ca.crt")
    }
    /// The router's client certificate to its shards (upstream's `--proxy-client-cert-file`).
    pub fn front_proxy_client_cert(&self) -> PathBuf {
        self.dir.join("front-proxy-client.crt")
    }
    /// Its key (`--proxy-client-key-file`).
    pub fn front_proxy_client_key(&self) -> PathBuf {
        self.dir.join("front-proxy-client.key")
    }

    /// The PKI in `dir`, made there first if any file is missing; `hosts` are the addresses the
    /// serving certificate is for.
    pub fn ensure(dir: &Path, hosts: &[&str]) -> Result<Self, PkiError> {
        let pki = Self { dir: dir.to_owned() };
        if FILES.iter().all(|f| dir.join(f).is_file()) {
            return Ok(pki);
        }
        if dir.join("ca.crt").exists() {
            tracing::warn!(dir = %dir.display(), "the PKI is incomplete: making a new CA, so every credential it issued stops working");
        }
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| PkiError::Io(dir.to_owned(), e))?;
        let ca = Authority::generate(CLUSTER_CA)?;
        let (serving, serving_key) = ca.server_certificate("shardplane-apiserver", hosts)?;
        let (admin, admin_key) = ca.client_certificate(ADMIN_USER, Some(crate::user::MASTERS))?;
        let sa = KeyPair::generate()?;
        let front_proxy = Authority::generate(FRONT_PROXY_CA)?;
        let (proxy_client, proxy_client_key) = front_proxy.client_certificate(FRONT_PROXY_CLIENT, None)?;
        for (path, text) in [
            (pki.serving_cert(), serving.pem()),
            (pki.serving_key(), serving_key.serialize_pem()),
            (pki.admin_cert(), admin.pem()),
            (pki.admin_key(), admin_key.serialize_pem()),
            (pki.service_account_key(), sa.serialize_pem()),
            (pki.service_account_public_key(), sa.public_key_pem()),
            (pki.front_proxy_client_cert(), proxy_client.pem()),
            (pki.front_proxy_client_key(), proxy_client_key.serialize_pem()),
            (pki.dir.join("front-proxy-ca.key"), front_proxy.key().serialize_pem()),
            (pki.front_proxy_ca_cert(), front_proxy.certificate().pem()),
            (pki.ca_key(), ca.key().serialize_pem()),
            (pki.ca_cert(), ca.certificate().pem()),
        ] {
            write_private(&path, text.as_bytes())?;
        }
        Ok(pki)
    }
}

/// Writes `bytes` to `path` (replacing it) readable by its owner only.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), PkiError> {
    let err = |e| PkiError::Io(path.to_owned(), e);
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp).map_err(err)?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_new_pki_is_private_whole_and_kept_across_restarts() {
        let dir = tempfile::tempdir().expect("tmp");
        let at = dir.path().join("pki");
        let pki = Pki::ensure(&at, &["127.0.0.1", "localhost"]).expect("made");
        assert_eq!(std::fs::metadata(&at).expect("dir").permissions().mode() & 0o777, 0o700);
        for f in FILES {
            let mode = std::fs::metadata(at.join(f)).expect(f).permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{f}");
        }
        let ca = std::fs::read(pki.ca_cert()).expect("ca");
        Pki::ensure(&at, &["127.0.0.1"]).expect("kept");
        assert_eq!(std::fs::read(pki.ca_cert()).expect("ca"), ca, "a whole PKI is reused");
        std::fs::remove_file(pki.admin_key()).expect("rm");
        Pki::ensure(&at, &["127.0.0.1"]).expect("remade");
        assert_ne!(std::fs::read(pki.ca_cert()).expect("ca"), ca, "an incomplete one is made again");
    }
}
