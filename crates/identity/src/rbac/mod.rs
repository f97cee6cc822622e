//! RBAC as upstream evaluates it (RFC 0012, "Authorization"): what a request asks ([`request`],
//! [`rules`]),
//! the decision over one snapshot of every RBAC object ([`policy`]), the bootstrap policy
//! ([`bootstrap`]), the escalation check on Role and binding writes ([`missing_rules`],
//! [`escalation_message`]), and upstream's 403 wording ([`forbidden_message`]).
//!
//! Nothing here reads the store or serves a request: the router follows the objects and asks.

pub mod bootstrap;
pub mod policy;
pub mod request;
pub mod rules;

pub use policy::{Decision, Objects, Policy, Subject};
pub use rules::{Attributes, PolicyRule};

use crate::user::UserInfo;

/// The `resource`, or `resource.group`, as upstream names a group's resource in messages.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() { resource.to_owned() } else { format!("{resource}.{group}") }
}

/// Upstream's 403 message for a request the authorizer did not allow (`reason` appended after a
/// colon when not empty): `pods "p" is forbidden: User "u" cannot get resource "pods" in API
/// group "" in the namespace "ns"`, `… at the cluster scope`, or `forbidden: User "u" cannot get
/// path "/metrics"`.
pub fn forbidden_message(user: &UserInfo, a: &Attributes, reason: &str) -> String {
    let why = if !a.resource_request {
        format!("User {:?} cannot {} path {:?}", user.name, a.verb, a.path)
    } else if a.namespace.is_empty() {
        format!("User {:?} cannot {} resource {:?} in API group {:?} at the cluster scope", user.name, a.verb, a.combined_resource(), a.api_group)
    } else {
        format!("User {:?} cannot {} resource {:?} in API group {:?} in the namespace {:?}", user.name, a.verb, a.combined_resource(), a.api_group, a.namespace)
    };
    let why = if reason.is_empty() { why } else { format!("{why}: {reason}") };
    let subject = if !a.resource_request {
        "forbidden".to_owned()
    } else if a.name.is_empty() {
        format!("{} is forbidden", qualified(&a.api_group, &a.resource))
    } else {
        format!("{} {:?} is forbidden", qualified(&a.api_group, &a.resource), a.name)
    };
    format!("{subject}: {why}")
}

/// The rules of `wanted` that `owned` does not cover (upstream's `ConfirmNoEscalation`): each
/// broken down to one verb and one resource or path, then compacted again (the verbs of one
/// group and resource together) and sorted as upstream prints them.
pub fn missing_rules(owned: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut missing: Vec<PolicyRule> = Vec::new();
    for piece in wanted.iter().flat_map(PolicyRule::breakdown) {
        if owned.iter().any(|o| o.covers(&piece)) {
            continue;
        }
        let same = missing.iter_mut().find(|m| m.api_groups == piece.api_groups && m.resources == piece.resources && m.resource_names == piece.resource_names && m.non_resource_urls == piece.non_resource_urls);
        match same {
            Some(m) if !m.verbs.contains(&piece.verbs[0]) => m.verbs.push(piece.verbs[0].clone()),
            Some(_) => {}
            None => missing.push(piece),
        }
    }
    missing.sort_by_key(compact);
    missing
}

/// A rule as upstream's `CompactString` prints it: `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}`.
pub fn compact(rule: &PolicyRule) -> String {
    let list = |l: &[String]| format!("[{}]", l.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" "));
    let mut parts = Vec::new();
    for (name, values) in [("APIGroups", &rule.api_groups), ("Resources", &rule.resources), ("ResourceNames", &rule.resource_names), ("NonResourceURLs", &rule.non_resource_urls), ("Verbs", &rule.verbs)] {
        if !values.is_empty() {
            parts.push(format!("{name}:{}", list(values)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

/// Upstream's reason when a Role or binding write would grant what its writer does not hold.
pub fn escalation_message(user: &UserInfo, missing: &[PolicyRule], resolution_errors: &[String]) -> String {
    let groups = format!("[{}]", user.groups.iter().map(|g| format!("{g:?}")).collect::<Vec<_>>().join(" "));
    let rules: Vec<String> = missing.iter().map(compact).collect();
    let mut msg = format!("user {:?} (groups={groups}) is attempting to grant RBAC permissions not currently held:\n{}", user.name, rules.join("\n"));
    if !resolution_errors.is_empty() {
        msg.push_str(&format!("; resolution errors: [{}]", resolution_errors.join(", ")));
    }
    msg
}

#[cfg(test)]
mod tests;
