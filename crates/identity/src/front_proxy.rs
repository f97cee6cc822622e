//! The front-proxy convention (RFC 0012, "Inside the cluster"): the router names the user it
//! authenticated to a shard in upstream's request headers (`X-Remote-User`, `X-Remote-Uid`,
//! `X-Remote-Group`, `X-Remote-Extra-<key>`, the key percent-encoded), and the shard believes
//! them only from a connection whose client certificate the front proxy's CA signed for an
//! allowed name (upstream's `--requestheader-*` flags with their defaults).
//!
//! This module writes and reads the headers and names a certificate; the TLS handshake
//! verifies the certificate, and the shard refuses what does not pass.

use crate::user::UserInfo;
use rustls::pki_types::CertificateDer;

/// The user's name.
pub const USER: &str = "x-remote-user";
/// The user's UID.
pub const UID: &str = "x-remote-uid";
/// One of the user's groups (repeated).
pub const GROUP: &str = "x-remote-group";
/// The prefix of the user's extra attributes; the rest of the name is the key, percent-encoded.
pub const EXTRA_PREFIX: &str = "x-remote-extra-";

/// Whether a header is one the front proxy sets (a shard removes every one it did not get
/// from a trusted router).
pub fn is_front_proxy_header(name: &str) -> bool {
    name == USER || name == UID || name == GROUP || name.starts_with(EXTRA_PREFIX)
}

/// Characters kept as they are in an extra key in a header name (upstream escapes the rest).
const KEY_ESCAPED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~').remove(b'!').remove(b'$').remove(b'&').remove(b'\'').remove(b'*').remove(b'+').remove(b'^').remove(b'`').remove(b'|');

/// The headers naming `user` to a shard, `(name, value)`; values that cannot travel in a
/// header (not visible ASCII) are left out, as no user name of upstream's needs them.
pub fn headers(user: &UserInfo) -> Vec<(String, String)> {
    let mut out = vec![(USER.to_owned(), user.name.clone())];
    if !user.uid.is_empty() {
        out.push((UID.to_owned(), user.uid.clone()));
    }
    out.extend(user.groups.iter().map(|g| (GROUP.to_owned(), g.clone())));
    for (key, values) in &user.extra {
        let name = format!("{EXTRA_PREFIX}{}", percent_encoding::utf8_percent_encode(key, KEY_ESCAPED));
        out.extend(values.iter().map(|v| (name.clone(), v.clone())));
    }
    out.retain(|(_, v)| v.bytes().all(|b| b == b' ' || b == b'\t' || (0x21..0x7f).contains(&b)));
    out
}

/// The user `headers` (name lowercase, value) name, or `None` when no user header is there.
pub fn user<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<UserInfo> {
    let mut user = UserInfo::default();
    let mut named = false;
    for (name, value) in headers {
        match name {
            USER if !named => {
                user.name = value.to_owned();
                named = !value.is_empty();
            }
            UID => user.uid = value.to_owned(),
            GROUP => user.groups.push(value.to_owned()),
            _ if name.starts_with(EXTRA_PREFIX) => {
                let raw = &name[EXTRA_PREFIX.len()..];
                let key = percent_encoding::percent_decode_str(raw).decode_utf8().map(|k| k.into_owned()).unwrap_or_else(|_| raw.to_owned());
                user.extra.entry(key).or_default().push(value.to_owned());
            }
            _ => {}
        }
    }
    named.then_some(user)
}

/// The subject common name of a (verified) certificate, which upstream's
/// `--requestheader-allowed-names` is matched against.
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let cn = parsed.subject().iter_common_name().next()?.as_str().ok()?.to_owned();
    Some(cn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_survives_the_headers_whole() {
        let mut u = UserInfo::authenticated("system:serviceaccount:ns:sa", "u-1", vec!["system:serviceaccounts".into()]);
        u.extra.insert("authentication.kubernetes.io/pod-name".into(), vec!["p".into()]);
        u.extra.insert("scopes".into(), vec!["a".into(), "b".into()]);
        let h = headers(&u);
        assert!(h.iter().any(|(n, _)| n == "x-remote-extra-authentication.kubernetes.io%2Fpod-name"), "{h:?}");
        assert_eq!(user(h.iter().map(|(n, v)| (n.as_str(), v.as_str()))), Some(u));
    }

    #[test]
    fn no_user_header_names_nobody_and_only_the_first_user_counts() {
        assert_eq!(user([(GROUP, "g")]), None);
        assert_eq!(user([(USER, "")]), None);
        assert_eq!(user([(USER, "a"), (USER, "b")]).map(|u| u.name), Some("a".into()));
    }

    #[test]
    fn a_value_that_cannot_be_a_header_is_left_out() {
        let u = UserInfo { name: "jane".into(), groups: vec!["caf\u{e9}".into(), "ok".into()], ..Default::default() };
        assert_eq!(headers(&u), [(USER.to_owned(), "jane".to_owned()), (GROUP.to_owned(), "ok".to_owned())]);
    }

    #[test]
    fn the_front_proxy_client_is_named_by_its_common_name() {
        let ca = crate::pki::Authority::generate("front-proxy-ca").expect("ca");
        let (cert, _) = ca.client_certificate(crate::pki::FRONT_PROXY_CLIENT, None).expect("client");
        assert_eq!(common_name(&CertificateDer::from(cert.der().to_vec())).as_deref(), Some(crate::pki::FRONT_PROXY_CLIENT));
    }
}
