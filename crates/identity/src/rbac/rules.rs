//! What a request asks to do ([`Attributes`], upstream's `authorizer.Attributes`) and whether one
//! RBAC rule allows it ([`PolicyRule::allows`], upstream's `RuleAllows`): a verb, and either a
//! resource (API group, resource, subresource, object name) or a non-resource path.

use serde::{Deserialize, Serialize};

/// Matches anything in a rule's list.
pub const ALL: &str = "*";

/// What a request asks to do, as the authorizer sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`, or a
    /// special verb (`impersonate`, `bind`, `escalate`, `approve`, `use`); for a non-resource
    /// path, the HTTP method in lower case.
    pub verb: String,
    /// Whether a resource is named (otherwise [`Attributes::path`] is).
    pub resource_request: bool,
    /// The namespace ("" for a cluster-scoped resource or all namespaces).
    pub namespace: String,
    /// The API group ("" for the core group).
    pub api_group: String,
    /// The resource's plural name.
    pub resource: String,
    /// The subresource ("" for none).
    pub subresource: String,
    /// The object's name ("" for a collection).
    pub name: String,
    /// The request's path (non-resource requests).
    pub path: String,
}

impl Attributes {
    /// A request for a resource.
    pub fn resource(verb: &str, api_group: &str, resource: &str, subresource: &str, namespace: &str, name: &str) -> Self {
        Self { verb: verb.into(), resource_request: true, namespace: namespace.into(), api_group: api_group.into(), resource: resource.into(), subresource: subresource.into(), name: name.into(), path: String::new() }
    }

    /// A request for a path that names no resource.
    pub fn non_resource(verb: &str, path: &str) -> Self {
        Self { verb: verb.into(), path: path.into(), ..Self::default() }
    }

    /// `resource/subresource`, or the resource alone.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() { self.resource.clone() } else { format!("{}/{}", self.resource, self.subresource) }
    }
}

/// One rule of a Role or ClusterRole (rbac.authorization.k8s.io/v1 `PolicyRule`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    #[serde(default, rename = "nonResourceURLs", skip_serializing_if = "Vec::is_empty")]
    pub non_resource_urls: Vec<String>,
}

fn has(list: &[String], wanted: &str) -> bool {
    list.iter().any(|v| v == ALL || v == wanted)
}

impl PolicyRule {
    /// Whether this rule allows `a` (upstream's `RuleAllows`). A rule names resources or paths;
    /// a resource rule never allows a path, nor a path rule a resource.
    pub fn allows(&self, a: &Attributes) -> bool {
        if !has(&self.verbs, &a.verb) {
            return false;
        }
        if !a.resource_request {
            return self.non_resource_urls.iter().any(|u| u == ALL || *u == a.path || u.strip_suffix('*').is_some_and(|prefix| a.path.starts_with(prefix)));
        }
        has(&self.api_groups, &a.api_group) && self.resource_matches(a) && (self.resource_names.is_empty() || self.resource_names.contains(&a.name))
    }

    /// `*` matches every resource and subresource; `pods/log` only that subresource; `*/scale`
    /// that subresource of any resource.
    fn resource_matches(&self, a: &Attributes) -> bool {
        let combined = a.combined_resource();
        self.resources.iter().any(|r| r == ALL || *r == combined || (!a.subresource.is_empty() && r.strip_prefix("*/") == Some(a.subresource.as_str())))
    }

    /// Every (verb, group, resource, name) or (verb, path) this rule names, one rule each
    /// (upstream's `BreakdownRule`, what the escalation check compares).
    pub fn breakdown(&self) -> Vec<PolicyRule> {
        let mut out = Vec::new();
        let one = |v: &String| vec![v.clone()];
        for verb in &self.verbs {
            for group in &self.api_groups {
                for resource in &self.resources {
                    if self.resource_names.is_empty() {
                        out.push(PolicyRule { verbs: one(verb), api_groups: one(group), resources: one(resource), ..Default::default() });
                    }
                    for name in &self.resource_names {
                        out.push(PolicyRule { verbs: one(verb), api_groups: one(group), resources: one(resource), resource_names: one(name), ..Default::default() });
                    }
                }
            }
            for url in &self.non_resource_urls {
                out.push(PolicyRule { verbs: one(verb), non_resource_urls: one(url), ..Default::default() });
            }
        }
        out
    }

    /// Whether this rule allows everything `other` does (upstream's rule coverage, used on a
    /// broken-down `other`): every verb, group, resource, name and path of `other` is matched.
    pub fn covers(&self, other: &PolicyRule) -> bool {
        let all = |mine: &[String], theirs: &[String]| theirs.iter().all(|t| mine.iter().any(|m| m == ALL || m == t));
        let resources = other.resources.iter().all(|t| {
            self.resources.iter().any(|m| m == ALL || m == t || (m.strip_prefix("*/").is_some_and(|sub| t.split_once('/').is_some_and(|(_, s)| s == sub))))
        });
        let names = self.resource_names.is_empty() || (!other.resource_names.is_empty() && all(&self.resource_names, &other.resource_names));
        let paths = other.non_resource_urls.iter().all(|t| self.non_resource_urls.iter().any(|m| m == ALL || m == t || m.strip_suffix('*').is_some_and(|p| t.starts_with(p))));
        all(&self.verbs, &other.verbs) && all(&self.api_groups, &other.api_groups) && resources && names && paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        PolicyRule { verbs: v(verbs), api_groups: v(groups), resources: v(resources), resource_names: v(names), non_resource_urls: vec![] }
    }

    #[test]
    fn a_rule_allows_what_it_names_and_nothing_else() {
        let pods = rule(&["get", "list"], &[""], &["pods"], &[]);
        assert!(pods.allows(&Attributes::resource("get", "", "pods", "", "ns", "p")));
        assert!(!pods.allows(&Attributes::resource("get", "", "pods", "log", "ns", "p")), "a subresource is named on its own");
        assert!(!pods.allows(&Attributes::resource("delete", "", "pods", "", "ns", "p")));
        assert!(!pods.allows(&Attributes::resource("get", "apps", "pods", "", "ns", "p")));
        assert!(!pods.allows(&Attributes::non_resource("get", "/api")), "a resource rule allows no path");
        let star = rule(&["*"], &["*"], &["*"], &[]);
        assert!(star.allows(&Attributes::resource("escalate", "rbac.authorization.k8s.io", "roles", "", "", "r")));
        assert!(star.allows(&Attributes::resource("get", "", "pods", "log", "ns", "p")));
        let scale = rule(&["update"], &["apps"], &["*/scale"], &[]);
        assert!(scale.allows(&Attributes::resource("update", "apps", "deployments", "scale", "ns", "d")));
        assert!(!scale.allows(&Attributes::resource("update", "apps", "deployments", "", "ns", "d")));
        let named = rule(&["get"], &[""], &["configmaps"], &["one"]);
        assert!(named.allows(&Attributes::resource("get", "", "configmaps", "", "ns", "one")));
        assert!(!named.allows(&Attributes::resource("list", "", "configmaps", "", "ns", "")));
        assert!(!named.allows(&Attributes::resource("get", "", "configmaps", "", "ns", "two")));
    }

    #[test]
    fn a_path_rule_matches_exact_paths_and_star_suffixes() {
        let r = PolicyRule { verbs: vec!["get".into()], non_resource_urls: vec!["/healthz".into(), "/apis/*".into()], ..Default::default() };
        assert!(r.allows(&Attributes::non_resource("get", "/healthz")));
        assert!(!r.allows(&Attributes::non_resource("get", "/healthz/etcd")));
        assert!(r.allows(&Attributes::non_resource("get", "/apis/apps/v1")));
        assert!(!r.allows(&Attributes::non_resource("get", "/apis")));
        assert!(!r.allows(&Attributes::non_resource("post", "/healthz")));
        assert!(!r.allows(&Attributes::resource("get", "", "healthz", "", "", "")));
    }

    #[test]
    fn coverage_compares_broken_down_rules() {
        let owner = rule(&["get", "list"], &["", "apps"], &["pods", "*/scale"], &[]);
        let wanted = rule(&["get"], &["apps"], &["deployments/scale", "pods"], &["x"]);
        assert!(wanted.breakdown().iter().all(|r| owner.covers(r)));
        let more = rule(&["delete"], &[""], &["pods"], &[]);
        assert!(!more.breakdown().iter().all(|r| owner.covers(r)));
        let named_owner = rule(&["get"], &[""], &["pods"], &["x"]);
        assert!(!named_owner.covers(&rule(&["get"], &[""], &["pods"], &[])), "a named rule does not cover every name");
        assert_eq!(rule(&["get", "list"], &[""], &["pods"], &["a", "b"]).breakdown().len(), 4);
    }
}
