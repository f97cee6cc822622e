//! Authentication as upstream orders it (RFC 0012): a verified client certificate first, then a
//! bearer token from the static token file (`--token-auth-file`), then a ServiceAccount token
//! (a JWT the cluster signed, [`crate::service_accounts`]); the first that names a user wins,
//! and every authenticated user is in `system:authenticated`. A request with no
//! credential is anonymous (`system:anonymous`, group `system:unauthenticated`) unless
//! anonymous requests are turned off (`--anonymous-auth=false`: upstream's 401); one whose
//! bearer token no authenticator accepts is refused (upstream's 401), never taken as anonymous.

use crate::service_accounts::{Claims, Rejected, Tokens};
use crate::user::{from_client_certificate, UserInfo};
use std::sync::Arc;
use rustls::pki_types::CertificateDer;
use std::collections::HashMap;
use std::path::Path;

/// The anonymous user.
pub fn anonymous() -> UserInfo {
    UserInfo { name: "system:anonymous".into(), uid: String::new(), groups: vec!["system:unauthenticated".into()], ..Default::default() }
}

/// Upstream's static token file: CSV records `token,user,uid[,"group1,group2"]`.
#[derive(Debug, Default)]
pub struct TokenFile {
    users: HashMap<String, UserInfo>,
}

impl TokenFile {
    /// Reads the file at `path`, with upstream's rules: at least three columns, an empty token
    /// skipped, a repeated token replacing the earlier record (both with a warning).
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses a token file's text (`name` is what errors call it).
    pub fn parse(text: &str, name: &str) -> Result<Self, String> {
        let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).trim(csv::Trim::Fields).from_reader(text.as_bytes());
        let mut users = HashMap::new();
        for (i, record) in reader.records().enumerate() {
            let record = record.map_err(|e| format!("token file '{name}': {e}"))?;
            if record.len() < 3 {
                return Err(format!("token file '{name}' must have at least 3 columns (token, user name, user uid), found {}", record.len()));
            }
            let number = i + 1;
            if record[0].is_empty() {
                tracing::warn!(file = name, record = number, "empty token has been found in token file");
                continue;
            }
            let groups = record.get(3).map(|g| g.split(',').map(str::to_owned).collect()).unwrap_or_default();
            if users.insert(record[0].to_owned(), UserInfo::authenticated(&record[1], &record[2], groups)).is_some() {
                tracing::warn!(file = name, record = number, "duplicate token has been found in token file");
            }
        }
        Ok(Self { users })
    }

    /// The user a token names.
    pub fn user(&self, token: &str) -> Option<&UserInfo> {
        self.users.get(token)
    }
}

/// Bad credentials: upstream answers 401 Unauthorized.
#[derive(Debug, PartialEq, Eq)]
pub struct Unauthorized;

/// The authenticators a server runs, in upstream's order.
#[derive(Debug)]
pub struct Authenticator {
    /// `--token-auth-file`.
    pub tokens: Option<TokenFile>,
    /// ServiceAccount tokens (with a signing key: `--pki-dir` or
    /// `--service-account-signing-key-file`).
    pub service_accounts: Option<Arc<Tokens>>,
    /// `--anonymous-auth`: whether a request without credentials is served as anonymous.
    pub anonymous: bool,
}

impl Default for Authenticator {
    /// No token file, no ServiceAccount key; anonymous requests allowed, upstream's default.
    fn default() -> Self {
        Self { tokens: None, service_accounts: None, anonymous: true }
    }
}

/// Who a credential names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authenticated {
    /// A user, settled.
    User(UserInfo),
    /// A ServiceAccount token the cluster signed: valid once its ServiceAccount and bound object
    /// are found as it names them ([`Claims::lookups`], the caller's check against the store).
    ServiceAccount(Box<Claims>),
}

/// What a bearer token names, for `audiences` (the API's when empty): its user and the
/// audiences it is valid for, or why not (upstream's TokenReview error).
pub type TokenOutcome = Result<(Authenticated, Vec<String>), String>;

impl Authenticator {
    /// Who a request with `client_cert` (verified, the chain's leaf) and `authorization` (the
    /// header's value) comes from.
    pub fn authenticate(&self, client_cert: Option<&CertificateDer<'_>>, authorization: Option<&str>) -> Result<Authenticated, Unauthorized> {
        if let Some(user) = client_cert.and_then(from_client_certificate) {
            return Ok(Authenticated::User(user));
        }
        let no_credential = || if self.anonymous { Ok(Authenticated::User(anonymous())) } else { Err(Unauthorized) };
        let Some(header) = authorization.map(str::trim).filter(|h| !h.is_empty()) else { return no_credential() };
        // Upstream's bearer authenticator: the scheme is case-insensitive, the token not empty.
        let token = match header.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() => token.trim(),
            // Another scheme (Basic, …) is not a credential any authenticator here reads.
            _ => return no_credential(),
        };
        self.token(token, &[]).map(|(who, _)| who).map_err(|_| Unauthorized)
    }

    /// What a bearer token names (the token authenticators in upstream's order: the token file,
    /// then ServiceAccount tokens), for `audiences`.
    pub fn token(&self, token: &str, audiences: &[String]) -> TokenOutcome {
        if let Some(user) = self.tokens.as_ref().and_then(|t| t.user(token)) {
            // The token file's tokens are for this API, whatever audience is asked of them.
            let valid_for = match (audiences.is_empty(), &self.service_accounts) {
                (false, _) => audiences.to_vec(),
                (true, Some(sa)) => sa.api_audiences.clone(),
                (true, None) => Vec::new(),
            };
            return Ok((Authenticated::User(user.clone()), valid_for));
        }
        match self.service_accounts.as_ref().map(|sa| sa.verify(token, audiences)) {
            Some(Ok((claims, valid_for))) => Ok((Authenticated::ServiceAccount(Box::new(claims)), valid_for)),
            Some(Err(Rejected::Invalid(why))) => Err(why),
            Some(Err(Rejected::NotOurs)) | None => Err("token lookup failed".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::user::AUTHENTICATED;

    fn name(a: Authenticated) -> String {
        match a {
            Authenticated::User(u) => u.name,
            Authenticated::ServiceAccount(c) => c.user().name,
        }
    }

    const FILE: &str = "secret-1,alice,uid-1,\"dev,ops\"\nsecret-2,bob,uid-2\n\n,nobody,uid-0\n";

    #[test]
    fn a_token_file_names_users_with_their_groups_as_upstreams() {
        let tokens = TokenFile::parse(FILE, "t.csv").expect("parses");
        assert_eq!(tokens.user("secret-1"), Some(&UserInfo { name: "alice".into(), uid: "uid-1".into(), groups: vec!["dev".into(), "ops".into(), AUTHENTICATED.into()], ..Default::default() }));
        assert_eq!(tokens.user("secret-2").map(|u| u.groups.clone()), Some(vec![AUTHENTICATED.to_owned()]));
        assert_eq!(tokens.user(""), None, "an empty token names nobody");
        assert_eq!(TokenFile::parse("t,u\n", "t.csv").unwrap_err(), "token file 't.csv' must have at least 3 columns (token, user name, user uid), found 2");
    }

    #[test]
    fn a_certificate_wins_then_a_token_and_a_bad_token_is_never_anonymous() {
        let auth = Authenticator { tokens: Some(TokenFile::parse(FILE, "t.csv").unwrap()), service_accounts: None, anonymous: true };
        let ca = crate::pki::Authority::generate("ca").unwrap();
        let (cert, _) = ca.client_certificate("carol", None).unwrap();
        let der = CertificateDer::from(cert.der().to_vec());
        assert_eq!(auth.authenticate(Some(&der), Some("Bearer wrong")).map(name).unwrap(), "carol");
        assert_eq!(auth.authenticate(None, Some("bearer secret-2")).map(name).unwrap(), "bob");
        assert_eq!(auth.authenticate(None, Some("Bearer wrong")), Err(Unauthorized));
        assert_eq!(Authenticator::default().authenticate(None, Some("Bearer secret-2")), Err(Unauthorized), "no token file: no token is good");
        assert_eq!(auth.authenticate(None, None), Ok(Authenticated::User(anonymous())));
        assert_eq!(auth.authenticate(None, Some("Basic YTpi")), Ok(Authenticated::User(anonymous())));
        let closed = Authenticator { anonymous: false, ..auth };
        assert_eq!(closed.authenticate(None, None), Err(Unauthorized), "--anonymous-auth=false");
        assert_eq!(closed.authenticate(None, Some("Bearer secret-1")).map(name).unwrap(), "alice");
        assert_eq!(closed.authenticate(Some(&der), None).map(name).unwrap(), "carol");
    }

    #[test]
    fn service_account_tokens_come_after_the_token_file_and_a_bad_one_is_refused() {
        let key = rcgen::KeyPair::generate().unwrap();
        let sa = Arc::new(Tokens::new(&key.serialize_pem(), crate::service_accounts::DEFAULT_ISSUER, vec![]).unwrap());
        let auth = Authenticator { tokens: Some(TokenFile::parse(FILE, "t.csv").unwrap()), service_accounts: Some(sa.clone()), anonymous: false };
        let (token, _) = sa.issue("ns", "bot", "uid-b", &[], 600, None).unwrap();
        let who = auth.authenticate(None, Some(&format!("Bearer {token}"))).unwrap();
        assert!(matches!(&who, Authenticated::ServiceAccount(c) if c.user().name == "system:serviceaccount:ns:bot"), "{who:?}");
        assert_eq!(auth.authenticate(None, Some("Bearer secret-1")).map(name).unwrap(), "alice");
        let (other, _) = sa.issue("ns", "bot", "uid-b", &["vault".into()], 600, None).unwrap();
        assert_eq!(auth.authenticate(None, Some(&format!("Bearer {other}"))), Err(Unauthorized), "a token for another audience");
        assert_eq!(auth.token(&other, &[]).unwrap_err(), "token audiences is invalid");
        assert_eq!(auth.token(&other, &["vault".into()]).unwrap().1, ["vault"]);
        assert_eq!(auth.token("secret-1", &["x".into()]).unwrap().1, ["x"], "a token file's token is valid for what is asked");
    }
}
