//! ServiceAccount tokens (RFC 0012, "ServiceAccount tokens"): JWTs signed with the cluster's
//! ServiceAccount key (ES256, the PKI's P-256 key), with upstream's claims (`iss`, `sub`, `aud`,
//! `exp`, `iat`, `nbf`, `jti`, and `kubernetes.io` naming the namespace, the ServiceAccount and
//! the object the token is bound to), verified by signature, issuer, audience and time.
//!
//! Verifying a token here says only that the cluster issued it and it has not expired: whether
//! its ServiceAccount and bound object still exist (with the UIDs it names) is the caller's
//! check, against the store ([`Claims::lookups`] says what to look up).

use crate::user::UserInfo;
use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// Upstream's issuer and audience when kubeadm sets none else.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The group of every ServiceAccount.
pub const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";

/// A reference to a named object with its UID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Named {
    pub name: String,
    pub uid: String,
}

/// The `kubernetes.io` claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaims {
    pub namespace: String,
    pub serviceaccount: Named,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Named>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<Named>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<Named>,
}

/// A bound token's claims.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    pub aud: Vec<String>,
    pub exp: u64,
    pub iat: u64,
    pub nbf: u64,
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaims,
}

/// What a TokenRequest binds a token to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bound {
    Pod(Named),
    Secret(Named),
    Node(Named),
}

/// An object a token's validity rests on: (plural, namespace, name, uid).
pub type Lookup = (&'static str, String, String, String);

impl Claims {
    /// The user the token names (upstream's ServiceAccount user: its groups, and the pod, node
    /// and credential id as extra attributes).
    pub fn user(&self) -> UserInfo {
        let k = &self.kubernetes;
        let mut u = UserInfo::authenticated(
            format!("system:serviceaccount:{}:{}", k.namespace, k.serviceaccount.name),
            k.serviceaccount.uid.clone(),
            vec![SERVICE_ACCOUNTS.to_owned(), format!("{SERVICE_ACCOUNTS}:{}", k.namespace)],
        );
        let mut extra = BTreeMap::new();
        extra.insert("authentication.kubernetes.io/credential-id".to_owned(), vec![format!("JTI={}", self.jti)]);
        if let Some(p) = &k.pod {
            extra.insert("authentication.kubernetes.io/pod-name".to_owned(), vec![p.name.clone()]);
            extra.insert("authentication.kubernetes.io/pod-uid".to_owned(), vec![p.uid.clone()]);
        }
        if let Some(n) = &k.node {
            extra.insert("authentication.kubernetes.io/node-name".to_owned(), vec![n.name.clone()]);
            extra.insert("authentication.kubernetes.io/node-uid".to_owned(), vec![n.uid.clone()]);
        }
        u.extra = extra;
        u
    }

    /// The objects that must still exist, with these UIDs, for the token to be valid: its
    /// ServiceAccount and the object it is bound to (a node is not looked up: upstream checks a
    /// node binding only when the token also names a pod).
    pub fn lookups(&self) -> Vec<Lookup> {
        let k = &self.kubernetes;
        let mut out = vec![("serviceaccounts", k.namespace.clone(), k.serviceaccount.name.clone(), k.serviceaccount.uid.clone())];
        if let Some(p) = &k.pod {
            out.push(("pods", k.namespace.clone(), p.name.clone(), p.uid.clone()));
        }
        if let Some(s) = &k.secret {
            out.push(("secrets", k.namespace.clone(), s.name.clone(), s.uid.clone()));
        }
        out
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Why a token was not accepted.
#[derive(Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Not one of ours (another issuer, or not a JWT): another authenticator may know it.
    NotOurs,
    /// Ours, but invalid (signature, audience, time): upstream's reason.
    Invalid(String),
}

/// One key tokens are verified with.
struct Verifier {
    kid: String,
    decoding: DecodingKey,
    /// The public key's JWK.
    jwk: serde_json::Value,
}

/// Issues ServiceAccount tokens with one key pair, and verifies them with it and with any
/// other keys given (upstream's `--service-account-key-file`, for rotation: tokens signed by
/// the previous key keep working while it is listed).
pub struct Tokens {
    issuer: String,
    /// `--api-audiences`: what a token must be for to authenticate to this API.
    pub api_audiences: Vec<String>,
    encoding: EncodingKey,
    kid: String,
    /// The signing key's public half first, then the other verification keys.
    verifiers: Vec<Verifier>,
}

/// A P-256 public key's verifier from its SubjectPublicKeyInfo (DER): upstream's key id (the
/// SHA-256 of the DER, base64url) and its JWK.
fn verifier(spki_der: &[u8]) -> Result<Verifier, String> {
    use x509_parser::prelude::FromDer;
    let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(spki_der).map_err(|e| format!("not a public key: {e}"))?;
    let ec = spki.algorithm.algorithm.to_id_string() == "1.2.840.10045.2.1";
    let p256 = spki.algorithm.parameters.as_ref().and_then(|p| p.as_oid().ok()).is_some_and(|o| o.to_id_string() == "1.2.840.10045.3.1.7");
    if !ec || !p256 {
        return Err("ServiceAccount keys must be ECDSA P-256 keys (ES256)".into());
    }
    let point = &spki.subject_public_key.data;
    let (x, y) = point.get(1..33).zip(point.get(33..65)).filter(|_| point.len() == 65 && point[0] == 4).ok_or("the public key is not an uncompressed P-256 point")?;
    let kid = b64(ring::digest::digest(&ring::digest::SHA256, spki_der).as_ref());
    let pem = format!("-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n", base64::engine::general_purpose::STANDARD.encode(spki_der));
    let decoding = DecodingKey::from_ec_pem(pem.as_bytes()).map_err(|e| format!("the public key: {e}"))?;
    let jwk = serde_json::json!({"use": "sig", "kty": "EC", "kid": kid, "crv": "P-256", "alg": "ES256", "x": b64(x), "y": b64(y)});
    Ok(Verifier { kid, decoding, jwk })
}

/// The verifiers of a `--service-account-key-file`: each PEM public key in it, and the public
/// half of each private key (upstream reads both).
fn parse_keys(pem_text: &str) -> Result<Vec<Verifier>, String> {
    let mut out = Vec::new();
    let mut rest = pem_text;
    while let Some(begin) = rest.find("-----BEGIN ") {
        let block = &rest[begin..];
        let label_end = block[11..].find("-----").ok_or("a PEM block without its label's end")? + 11;
        let label = &block[11..label_end];
        let end_marker = format!("-----END {label}-----");
        let end = block.find(&end_marker).ok_or_else(|| format!("a PEM {label} block without its end"))? + end_marker.len();
        let pem = &block[..end];
        let spki = match label {
            "PUBLIC KEY" => {
                let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
                base64::engine::general_purpose::STANDARD.decode(body.trim()).map_err(|e| format!("a PUBLIC KEY block: {e}"))?
            }
            "PRIVATE KEY" | "EC PRIVATE KEY" => rcgen::PublicKeyData::subject_public_key_info(&rcgen::KeyPair::from_pem(pem).map_err(|e| format!("a private key: {e}"))?),
            other => return Err(format!("a PEM {other} block is not a key")),
        };
        out.push(verifier(&spki)?);
        rest = &block[end..];
    }
    if out.is_empty() {
        return Err("no PEM key in it".into());
    }
    Ok(out)
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").field("issuer", &self.issuer).field("kid", &self.kid).finish()
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Tokens {
    /// From the signing key's PEM (PKCS#8 P-256, as the PKI writes `sa.key`), the issuer and the
    /// API audiences (upstream's default: the issuer).
    pub fn new(signing_key_pem: &str, issuer: &str, api_audiences: Vec<String>) -> Result<Self, String> {
        let pair = rcgen::KeyPair::from_pem(signing_key_pem).map_err(|e| format!("the ServiceAccount signing key: {e}"))?;
        if pair.algorithm() != &rcgen::PKCS_ECDSA_P256_SHA256 {
            return Err("the ServiceAccount signing key must be an ECDSA P-256 key (ES256)".into());
        }
        let encoding = EncodingKey::from_ec_pem(signing_key_pem.as_bytes()).map_err(|e| format!("the ServiceAccount signing key: {e}"))?;
        let own = verifier(&rcgen::PublicKeyData::subject_public_key_info(&pair)).map_err(|e| format!("the ServiceAccount signing key: {e}"))?;
        let api_audiences = if api_audiences.is_empty() { vec![issuer.to_owned()] } else { api_audiences };
        Ok(Self { issuer: issuer.to_owned(), api_audiences, encoding, kid: own.kid.clone(), verifiers: vec![own] })
    }

    /// Also verifies tokens with the keys in `pem_text` (a `--service-account-key-file`); a
    /// key already held is not added twice.
    pub fn with_verification_keys(mut self, pem_text: &str) -> Result<Self, String> {
        for v in parse_keys(pem_text)? {
            if !self.verifiers.iter().any(|h| h.kid == v.kid) {
                self.verifiers.push(v);
            }
        }
        Ok(self)
    }

    /// The issuer (`--service-account-issuer`).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Signs a token for ServiceAccount `name` (UID `uid`) of `namespace`, for `audiences`
    /// (the API audiences when empty), valid `expiration_seconds` from now, bound to `bound`.
    /// Returns the token and its expiry (Unix seconds).
    pub fn issue(&self, namespace: &str, name: &str, uid: &str, audiences: &[String], expiration_seconds: u64, bound: Option<Bound>) -> Result<(String, u64), String> {
        let iat = now();
        let mut kubernetes = KubernetesClaims { namespace: namespace.to_owned(), serviceaccount: Named { name: name.to_owned(), uid: uid.to_owned() }, ..Default::default() };
        match bound {
            Some(Bound::Pod(p)) => kubernetes.pod = Some(p),
            Some(Bound::Secret(s)) => kubernetes.secret = Some(s),
            Some(Bound::Node(n)) => kubernetes.node = Some(n),
            None => {}
        }
        let claims = Claims {
            iss: self.issuer.clone(),
            sub: format!("system:serviceaccount:{namespace}:{name}"),
            aud: if audiences.is_empty() { self.api_audiences.clone() } else { audiences.to_vec() },
            exp: iat + expiration_seconds,
            iat,
            nbf: iat,
            jti: uuid::Uuid::new_v4().to_string(),
            kubernetes,
        };
        self.sign(&claims).map(|t| (t, claims.exp))
    }

    /// Signs `claims` as they are (tests make expired tokens with it).
    pub fn sign(&self, claims: &Claims) -> Result<String, String> {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).map_err(|e| e.to_string())
    }

    /// Verifies `token` for any of `audiences` (the API audiences when empty): signed by this
    /// key, issued by this issuer, not expired and not before its time. Returns its claims and
    /// the audiences it was valid for.
    pub fn verify(&self, token: &str, audiences: &[String]) -> Result<(Claims, Vec<String>), Rejected> {
        // Another issuer's token (or no JWT at all) is not ours to refuse.
        let unverified = token.split('.').nth(1).and_then(|p| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(p.trim_end_matches('=')).ok()).and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
        if unverified.as_ref().and_then(|c| c["iss"].as_str()) != Some(self.issuer.as_str()) {
            return Err(Rejected::NotOurs);
        }
        let wanted = if audiences.is_empty() { &self.api_audiences[..] } else { audiences };
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(wanted);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        // Upstream allows a minute of clock skew.
        validation.leeway = 60;
        // The key its header names, or (none named, or one not held) each key in turn.
        let kid = jsonwebtoken::decode_header(token).ok().and_then(|h| h.kid);
        let named: Vec<&Verifier> = self.verifiers.iter().filter(|v| Some(&v.kid) == kid.as_ref()).collect();
        let candidates = if named.is_empty() { self.verifiers.iter().collect() } else { named };
        let mut last = None;
        let mut data = None;
        for v in candidates {
            match jsonwebtoken::decode::<Claims>(token, &v.decoding, &validation) {
                Ok(d) => {
                    data = Some(d);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some(data) = data else { return Err(Rejected::Invalid(last.map_or_else(|| "invalid signature".into(), |e| reason(&e)))) };
        let claims = data.claims;
        let valid_for = wanted.iter().filter(|a| claims.aud.contains(a)).cloned().collect();
        Ok((claims, valid_for))
    }

    /// `/.well-known/openid-configuration`, with the JWKS at `jwks_uri`.
    pub fn openid_configuration(&self, jwks_uri: &str) -> serde_json::Value {
        serde_json::json!({"issuer": self.issuer, "jwks_uri": jwks_uri, "response_types_supported": ["id_token"], "subject_types_supported": ["public"], "id_token_signing_alg_values_supported": ["ES256"]})
    }

    /// The JWKS document (`/openid/v1/jwks`): every verification key.
    pub fn jwks(&self) -> serde_json::Value {
        serde_json::json!({"keys": self.verifiers.iter().map(|v| v.jwk.clone()).collect::<Vec<_>>()})
    }
}

/// Upstream's wording of why a token failed (what TokenReview's `status.error` says).
fn reason(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => "service account token has expired".into(),
        ErrorKind::ImmatureSignature => "service account token is not valid yet".into(),
        ErrorKind::InvalidAudience => "token audiences is invalid".into(),
        ErrorKind::InvalidSignature => "invalid signature".into(),
        _ => format!("invalid token: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        let key = rcgen::KeyPair::generate().unwrap();
        Tokens::new(&key.serialize_pem(), DEFAULT_ISSUER, vec![]).unwrap()
    }

    #[test]
    fn an_issued_token_verifies_and_names_its_service_account() {
        let t = tokens();
        let pod = Named { name: "p".into(), uid: "pod-uid".into() };
        let (token, exp) = t.issue("ns", "sa", "sa-uid", &[], 3600, Some(Bound::Pod(pod))).unwrap();
        assert!(exp >= now() + 3599);
        let (claims, valid_for) = t.verify(&token, &[]).unwrap();
        assert_eq!(valid_for, [DEFAULT_ISSUER]);
        let user = claims.user();
        assert_eq!(user.name, "system:serviceaccount:ns:sa");
        assert_eq!(user.uid, "sa-uid");
        assert_eq!(user.groups, ["system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"]);
        assert_eq!(user.extra["authentication.kubernetes.io/pod-name"], ["p"]);
        assert_eq!(claims.lookups().len(), 2);
        assert_eq!(t.jwks()["keys"][0]["kid"], t.kid.as_str());
        assert_eq!(t.jwks()["keys"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn tokens_of_a_previous_key_verify_while_it_is_listed_and_the_jwks_shows_both() {
        let old_key = rcgen::KeyPair::generate().unwrap();
        let old = Tokens::new(&old_key.serialize_pem(), DEFAULT_ISSUER, vec![]).unwrap();
        let (token, _) = old.issue("ns", "sa", "u", &[], 600, None).unwrap();
        let fresh = tokens();
        assert_eq!(fresh.verify(&token, &[]).unwrap_err(), Rejected::Invalid("invalid signature".into()), "not listed: refused");
        // Listed as its public key, or as its private key: verified, and shown in the JWKS.
        for listed in [old_key.public_key_pem(), old_key.serialize_pem()] {
            let rotated = tokens().with_verification_keys(&listed).unwrap();
            assert_eq!(rotated.verify(&token, &[]).unwrap().0.sub, "system:serviceaccount:ns:sa");
            let kids: Vec<String> = rotated.jwks()["keys"].as_array().unwrap().iter().map(|k| k["kid"].as_str().unwrap().to_owned()).collect();
            assert_eq!(kids, [rotated.kid.clone(), old.kid.clone()]);
            let (own, _) = rotated.issue("ns", "sa", "u", &[], 600, None).unwrap();
            assert!(rotated.verify(&own, &[]).is_ok(), "new tokens are signed with the new key");
            assert!(old.verify(&own, &[]).is_err());
        }
        // Twice the same key is one key; a file with no key, or an RSA key, is refused.
        let twice = format!("{}{}", old_key.public_key_pem(), old_key.public_key_pem());
        assert_eq!(tokens().with_verification_keys(&twice).unwrap().jwks()["keys"].as_array().unwrap().len(), 2);
        assert!(tokens().with_verification_keys("nothing here").is_err());
        let rsa_spki = "-----BEGIN PUBLIC KEY-----\nMFwwDQYJKoZIhvcNAQEBBQADSwAwSAJBAK4/CgLtDK7eZ1z3Ja7eA4q0kcUEkH8zSyhuM0hMl1PuQEAOCyAQIG5b7Wy+iA/wCMmFCq6ghxS8yn4AIa/uVmkCAwEAAQ==\n-----END PUBLIC KEY-----\n";
        assert!(tokens().with_verification_keys(rsa_spki).unwrap_err().contains("P-256"));
    }

    #[test]
    fn expired_foreign_and_misaddressed_tokens_are_refused() {
        let t = tokens();
        let (token, _) = t.issue("ns", "sa", "u", &["vault".into()], 3600, None).unwrap();
        assert_eq!(t.verify(&token, &[]).unwrap_err(), Rejected::Invalid("token audiences is invalid".into()), "not for the API");
        assert!(t.verify(&token, &["vault".into()]).is_ok());
        let (_, valid) = t.verify(&token, &["vault".into()]).unwrap();
        assert_eq!(valid, ["vault"]);
        let past = now() - 7200;
        let (good, _) = t.issue("ns", "sa", "u", &[], 600, None).unwrap();
        let (mut claims, _) = t.verify(&good, &[]).unwrap();
        (claims.iat, claims.nbf, claims.exp) = (past, past, past + 600);
        assert_eq!(t.verify(&t.sign(&claims).unwrap(), &[]).unwrap_err(), Rejected::Invalid("service account token has expired".into()));
        assert_eq!(tokens().verify(&good, &[]).unwrap_err(), Rejected::Invalid("invalid signature".into()), "another key of the same issuer");
        assert_eq!(t.verify("not-a-jwt", &[]).unwrap_err(), Rejected::NotOurs);
        let other = Tokens::new(&rcgen::KeyPair::generate().unwrap().serialize_pem(), "https://elsewhere", vec![]).unwrap();
        assert_eq!(t.verify(&other.issue("ns", "sa", "u", &[], 600, None).unwrap().0, &[]).unwrap_err(), Rejected::NotOurs);
    }
}
