//! Authentication as upstream orders it (RFC 0012): a verified client certificate first, then a
//! bearer token from the static token file (`--token-auth-file`); the first that names a user
//! wins, and every authenticated user is in `system:authenticated`. A request with no
//! credential is anonymous (`system:anonymous`, group `system:unauthenticated`) unless
//! anonymous requests are turned off (`--anonymous-auth=false`: upstream's 401); one whose
//! bearer token no authenticator accepts is refused (upstream's 401), never taken as anonymous.

use crate::user::{from_client_certificate, UserInfo};
use rustls::pki_types::CertificateDer;
use std::collections::HashMap;
use std::path::Path;

/// The anonymous user.
pub fn anonymous() -> UserInfo {
    UserInfo { name: "system:anonymous".into(), uid: String::new(), groups: vec!["system:unauthenticated".into()] }
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
    /// `--anonymous-auth`: whether a request without credentials is served as anonymous.
    pub anonymous: bool,
}

impl Default for Authenticator {
    /// No token file; anonymous requests allowed, upstream's default.
    fn default() -> Self {
        Self { tokens: None, anonymous: true }
    }
}

impl Authenticator {
    /// Who a request with `client_cert` (verified, the chain's leaf) and `authorization` (the
    /// header's value) comes from.
    pub fn authenticate(&self, client_cert: Option<&CertificateDer<'_>>, authorization: Option<&str>) -> Result<UserInfo, Unauthorized> {
        if let Some(user) = client_cert.and_then(from_client_certificate) {
            return Ok(user);
        }
        let no_credential = || if self.anonymous { Ok(anonymous()) } else { Err(Unauthorized) };
        let Some(header) = authorization.map(str::trim).filter(|h| !h.is_empty()) else { return no_credential() };
        // Upstream's bearer authenticator: the scheme is case-insensitive, the token not empty.
        let token = match header.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() => token.trim(),
            // Another scheme (Basic, …) is not a credential any authenticator here reads.
            _ => return no_credential(),
        };
        self.tokens.as_ref().and_then(|t| t.user(token)).cloned().ok_or(Unauthorized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::user::AUTHENTICATED;

    const FILE: &str = "secret-1,alice,uid-1,\"dev,ops\"\nsecret-2,bob,uid-2\n\n,nobody,uid-0\n";

    #[test]
    fn a_token_file_names_users_with_their_groups_as_upstreams() {
        let tokens = TokenFile::parse(FILE, "t.csv").expect("parses");
        assert_eq!(tokens.user("secret-1"), Some(&UserInfo { name: "alice".into(), uid: "uid-1".into(), groups: vec!["dev".into(), "ops".into(), AUTHENTICATED.into()] }));
        assert_eq!(tokens.user("secret-2").map(|u| u.groups.clone()), Some(vec![AUTHENTICATED.to_owned()]));
        assert_eq!(tokens.user(""), None, "an empty token names nobody");
        assert_eq!(TokenFile::parse("t,u\n", "t.csv").unwrap_err(), "token file 't.csv' must have at least 3 columns (token, user name, user uid), found 2");
    }

    #[test]
    fn a_certificate_wins_then_a_token_and_a_bad_token_is_never_anonymous() {
        let auth = Authenticator { tokens: Some(TokenFile::parse(FILE, "t.csv").unwrap()), anonymous: true };
        let ca = crate::pki::Authority::generate("ca").unwrap();
        let (cert, _) = ca.client_certificate("carol", None).unwrap();
        let der = CertificateDer::from(cert.der().to_vec());
        assert_eq!(auth.authenticate(Some(&der), Some("Bearer wrong")).unwrap().name, "carol");
        assert_eq!(auth.authenticate(None, Some("bearer secret-2")).unwrap().name, "bob");
        assert_eq!(auth.authenticate(None, Some("Bearer wrong")), Err(Unauthorized));
        assert_eq!(Authenticator::default().authenticate(None, Some("Bearer secret-2")), Err(Unauthorized), "no token file: no token is good");
        assert_eq!(auth.authenticate(None, None), Ok(anonymous()));
        assert_eq!(auth.authenticate(None, Some("Basic YTpi")), Ok(anonymous()));
        let closed = Authenticator { anonymous: false, ..auth };
        assert_eq!(closed.authenticate(None, None), Err(Unauthorized), "--anonymous-auth=false");
        assert_eq!(closed.authenticate(None, Some("Bearer secret-1")).unwrap().name, "alice");
        assert_eq!(closed.authenticate(Some(&der), None).unwrap().name, "carol");
    }
}
