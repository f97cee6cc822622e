//! Impersonation (RFC 0012, "Impersonation"): upstream's `Impersonate-User`,
//! `Impersonate-Group`, `Impersonate-Uid` and `Impersonate-Extra-<key>` headers read into the
//! user a request acts as, and the `impersonate` checks the requester must pass for each part
//! (upstream's attributes, so RBAC rules written for kube-apiserver grant the same).
//!
//! This module only reads headers and builds users; the router asks its authorizer about each
//! check and refuses the request at the first one denied.

use crate::rbac::Attributes;
use crate::service_accounts::SERVICE_ACCOUNTS;
use crate::user::{UserInfo, AUTHENTICATED};

/// The header naming the user to act as.
pub const USER: &str = "impersonate-user";
/// The header naming a group to act in (repeated for several).
pub const GROUP: &str = "impersonate-group";
/// The header naming the UID to act with.
pub const UID: &str = "impersonate-uid";
/// The prefix of the headers naming extra attributes; the rest of the name is the key,
/// percent-encoded.
pub const EXTRA_PREFIX: &str = "impersonate-extra-";

/// The group of unauthenticated requests, which an impersonated `system:anonymous` is in.
const UNAUTHENTICATED: &str = "system:unauthenticated";
const ANONYMOUS: &str = "system:anonymous";
const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";

/// What a request asks to impersonate: the user it would act as, and the checks to pass first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Impersonation {
    /// The user the request acts as once every check passes.
    pub user: UserInfo,
    /// One `impersonate` check per part asked for, in upstream's order (user, groups, extras,
    /// UID), without the requesting user (the caller adds it).
    pub checks: Vec<Attributes>,
}

/// Whether a header is one of impersonation's (its name lowercase, as HTTP/2 and the `http`
/// crate give it).
pub fn is_impersonation_header(name: &str) -> bool {
    name == USER || name == GROUP || name == UID || name.starts_with(EXTRA_PREFIX)
}

/// The impersonation `headers` (name lowercase, value) ask for: `None` when there is none,
/// `Err` with upstream's 400 message when a group, extra or UID is asked for without a user.
pub fn requested<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Option<Impersonation>, String> {
    let mut user_name: Option<&str> = None;
    let (mut groups, mut extras, mut uid) = (Vec::new(), Vec::<(String, &str)>::new(), None);
    for (name, value) in headers {
        match name {
            USER if user_name.is_none() => user_name = Some(value),
            GROUP => groups.push(value),
            UID if uid.is_none() => uid = Some(value),
            _ if name.starts_with(EXTRA_PREFIX) => extras.push((unescape_key(&name[EXTRA_PREFIX.len()..]), value)),
            _ => {}
        }
    }
    // An empty Impersonate-User is no user, as upstream reads it.
    let user_name = user_name.filter(|u| !u.is_empty());
    let uid = uid.filter(|u| !u.is_empty());
    let Some(user_name) = user_name else {
        if groups.is_empty() && extras.is_empty() && uid.is_none() {
            return Ok(None);
        }
        let asked: Vec<String> = groups.iter().map(|g| format!("group {g:?}")).chain(extras.iter().map(|(k, v)| format!("extra {k}={v:?}"))).chain(uid.map(|u| format!("uid {u:?}"))).collect();
        return Err(format!("requested [{}] without impersonating a user", asked.join(" ")));
    };

    let mut checks = Vec::new();
    let service_account = split_service_account(user_name);
    checks.push(match service_account {
        Some((namespace, name)) => Attributes::resource("impersonate", "", "serviceaccounts", "", namespace, name),
        None => Attributes::resource("impersonate", "", "users", "", "", user_name),
    });
    for g in &groups {
        checks.push(Attributes::resource("impersonate", "", "groups", "", "", g));
    }
    let mut extra = std::collections::BTreeMap::<String, Vec<String>>::new();
    for (key, value) in &extras {
        checks.push(Attributes::resource("impersonate", AUTHENTICATION_GROUP, "userextras", key, "", value));
        extra.entry(key.clone()).or_default().push((*value).to_owned());
    }
    if let Some(u) = uid {
        checks.push(Attributes::resource("impersonate", AUTHENTICATION_GROUP, "uids", "", "", u));
    }

    // The groups asked for are the groups, except a ServiceAccount asked for without any is in
    // its fixed groups; then upstream's implicit group is added.
    let mut groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
    if groups.is_empty() {
        if let Some((namespace, _)) = service_account {
            groups = vec![SERVICE_ACCOUNTS.to_owned(), format!("{SERVICE_ACCOUNTS}:{namespace}")];
        }
    }
    if user_name == ANONYMOUS {
        if !groups.iter().any(|g| g == UNAUTHENTICATED) {
            groups.push(UNAUTHENTICATED.to_owned());
        }
    } else if !groups.iter().any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED) {
        groups.push(AUTHENTICATED.to_owned());
    }
    let user = UserInfo { name: user_name.to_owned(), uid: uid.unwrap_or("").to_owned(), groups, extra };
    Ok(Some(Impersonation { user, checks }))
}

/// A ServiceAccount's namespace and name from its user name
/// (`system:serviceaccount:<namespace>:<name>`, both valid names, as upstream splits it).
pub fn split_service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (namespace, name) = rest.split_once(':')?;
    if name.contains(':') {
        return None;
    }
    let valid = shardplane_apimachinery::meta::validate_dns1123_label(namespace).is_ok() && shardplane_apimachinery::meta::validate_dns1123_subdomain(name).is_ok();
    valid.then_some((namespace, name))
}

/// An extra key from its header name: lowercase, percent-decoded (kept as sent when it does not
/// decode to UTF-8, as upstream keeps it).
fn unescape_key(raw: &str) -> String {
    let lower = raw.to_ascii_lowercase();
    match percent_encoding::percent_decode_str(&lower).decode_utf8() {
        Ok(s) => s.into_owned(),
        Err(_) => lower,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(headers: &[(&str, &str)]) -> Result<Option<Impersonation>, String> {
        requested(headers.iter().copied())
    }

    #[test]
    fn no_headers_ask_for_nothing() {
        assert_eq!(ask(&[("accept", "application/json")]), Ok(None));
        assert_eq!(ask(&[(USER, "")]), Ok(None), "an empty user is no user");
    }

    #[test]
    fn a_user_alone_acts_as_that_user_in_the_authenticated_group() {
        let i = ask(&[(USER, "jane")]).unwrap().unwrap();
        assert_eq!(i.user, UserInfo { name: "jane".into(), groups: vec![AUTHENTICATED.into()], ..Default::default() });
        assert_eq!(i.checks, [Attributes::resource("impersonate", "", "users", "", "", "jane")]);
    }

    #[test]
    fn groups_extras_and_uid_are_each_checked_in_upstreams_order() {
        let i = ask(&[(USER, "jane"), (GROUP, "dev"), (GROUP, "ops"), ("impersonate-extra-Scopes%2Fa", "view"), ("impersonate-extra-scopes%2fa", "edit"), (UID, "u-1")]).unwrap().unwrap();
        assert_eq!(i.user.groups, ["dev", "ops", AUTHENTICATED]);
        assert_eq!(i.user.uid, "u-1");
        assert_eq!(i.user.extra["scopes/a"], ["view", "edit"]);
        let resources: Vec<String> = i.checks.iter().map(|c| format!("{}:{}/{}={}", c.api_group, c.resource, c.subresource, c.name)).collect();
        assert_eq!(resources, [":users/=jane", ":groups/=dev", ":groups/=ops", "authentication.k8s.io:userextras/scopes/a=view", "authentication.k8s.io:userextras/scopes/a=edit", "authentication.k8s.io:uids/=u-1"]);
    }

    #[test]
    fn a_service_account_is_checked_in_its_namespace_and_gets_its_groups_unless_some_are_asked_for() {
        let i = ask(&[(USER, "system:serviceaccount:team:builder")]).unwrap().unwrap();
        assert_eq!(i.checks, [Attributes::resource("impersonate", "", "serviceaccounts", "", "team", "builder")]);
        assert_eq!(i.user.groups, [SERVICE_ACCOUNTS, "system:serviceaccounts:team", AUTHENTICATED]);
        let with_group = ask(&[(USER, "system:serviceaccount:team:builder"), (GROUP, "x")]).unwrap().unwrap();
        assert_eq!(with_group.user.groups, ["x", AUTHENTICATED]);
        // Not a valid ServiceAccount name: an ordinary user of that name.
        let odd = ask(&[(USER, "system:serviceaccount:Team:a:b")]).unwrap().unwrap();
        assert_eq!(odd.checks[0].resource, "users");
    }

    #[test]
    fn anonymous_is_unauthenticated_and_an_explicit_unauthenticated_group_is_kept_alone() {
        assert_eq!(ask(&[(USER, ANONYMOUS)]).unwrap().unwrap().user.groups, [UNAUTHENTICATED]);
        assert_eq!(ask(&[(USER, "jane"), (GROUP, UNAUTHENTICATED)]).unwrap().unwrap().user.groups, [UNAUTHENTICATED]);
    }

    #[test]
    fn groups_extras_or_a_uid_without_a_user_are_a_bad_request() {
        for headers in [&[(GROUP, "dev")][..], &[("impersonate-extra-k", "v")], &[(UID, "u")], &[(USER, ""), (GROUP, "dev")]] {
            let err = ask(headers).unwrap_err();
            assert!(err.starts_with("requested [") && err.ends_with("] without impersonating a user"), "{err}");
        }
    }
}
