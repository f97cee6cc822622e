//! The user a request is made as (upstream's `user.Info`): a name, a UID, groups and extra
//! attributes, and how a verified x509 client certificate names one (its subject's common name
//! is the user, each organization a group).

use rustls::pki_types::CertificateDer;

/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group the cluster's administrators are in (never subject to RBAC upstream).
pub const MASTERS: &str = "system:masters";

/// Who a request comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct UserInfo {
    /// The user's name (`system:serviceaccount:ns:name` for a ServiceAccount).
    pub name: String,
    /// The user's UID, if the credential names one.
    pub uid: String,
    /// The user's groups, `system:authenticated` last as upstream adds it.
    pub groups: Vec<String>,
    /// Extra attributes (a ServiceAccount token's pod and credential id: upstream's
    /// `authentication.kubernetes.io/…` keys).
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// An authenticated user: `groups` with `system:authenticated` added unless present.
    pub fn authenticated(name: impl Into<String>, uid: impl Into<String>, mut groups: Vec<String>) -> Self {
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_owned());
        }
        Self { name: name.into(), uid: uid.into(), groups, extra: Default::default() }
    }
}

impl UserInfo {
    /// The user as upstream's `UserInfo` JSON writes it (`username`, `uid`, `groups`, `extra`;
    /// `uid` and `extra` left out when empty), as reviews and audit events carry it.
    pub fn to_json(&self) -> serde_json::Value {
        let mut info = serde_json::json!({"username": self.name, "groups": self.groups});
        if !self.uid.is_empty() {
            info["uid"] = serde_json::json!(self.uid);
        }
        if !self.extra.is_empty() {
            info["extra"] = serde_json::json!(self.extra);
        }
        info
    }
}

/// The user a client certificate names (upstream's x509 authenticator: the subject's CN is the
/// user, each O a group), or `None` when the certificate cannot be read or names nobody. The
/// certificate must already be verified against the client CA (the TLS handshake does that).
pub fn from_client_certificate(cert: &CertificateDer<'_>) -> Option<UserInfo> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
    if name.is_empty() {
        return None;
    }
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_owned).collect();
    Some(UserInfo::authenticated(name, "", groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_certificate_names_its_common_name_and_organization() {
        let ca = crate::pki::Authority::generate("test-ca").expect("ca");
        let user = |group| {
            let (cert, _key) = ca.client_certificate("jane", group).expect("client");
            from_client_certificate(&rustls::pki_types::CertificateDer::from(cert.der().to_vec())).expect("a user")
        };
        assert_eq!(user(Some("dev")), UserInfo { name: "jane".into(), uid: String::new(), groups: vec!["dev".into(), AUTHENTICATED.into()], ..Default::default() });
        assert_eq!(user(None).groups, [AUTHENTICATED]);
        let (server, _) = ca.server_certificate("", &["127.0.0.1"]).expect("no CN");
        assert_eq!(from_client_certificate(&rustls::pki_types::CertificateDer::from(server.der().to_vec())), None, "a certificate without a CN names nobody");
    }

    #[test]
    fn authenticated_users_are_in_the_authenticated_group_once() {
        let u = UserInfo::authenticated("a", "", vec![AUTHENTICATED.into(), "x".into()]);
        assert_eq!(u.groups, [AUTHENTICATED, "x"]);
    }
}
