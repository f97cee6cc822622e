//! Which FlowSchema a request matches, and so its priority level and flow (RFC 0013,
//! "Classification"), by upstream's rules: the first schema in matching order with a rule
//! whose subjects name the user (a `User`, one of its `Group`s, or its `ServiceAccount`) and
//! whose resource rules (verbs, API groups, resources with their subresource, cluster scope or
//! namespaces) or non-resource rules (verbs, URLs, `/prefix/*`) cover the request. The flow is
//! the schema and its distinguisher: the user's name, the request's namespace, or nothing.

use crate::config::{Config, Distinguisher, Schema};
use serde_json::Value;
use shardplane_identity::rbac::Attributes;
use shardplane_identity::user::UserInfo;

/// What a request was classified as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classification {
    pub schema: String,
    pub schema_uid: String,
    pub level: String,
    pub level_uid: String,
    /// The flow within the level: the user's name, the namespace, or "".
    pub distinguisher: String,
    /// The flow's hash, which deals its hand of queues.
    pub flow: u64,
}

fn strings<'a>(v: &'a Value, field: &str) -> impl Iterator<Item = &'a str> {
    v[field].as_array().into_iter().flatten().filter_map(Value::as_str)
}

fn any_is(v: &Value, field: &str, want: &str) -> bool {
    strings(v, field).any(|s| s == "*" || s == want)
}

fn subject_matches(subject: &Value, user: &UserInfo) -> bool {
    match subject["kind"].as_str() {
        Some("User") => {
            let n = subject["user"]["name"].as_str().unwrap_or("");
            n == "*" || n == user.name
        }
        Some("Group") => {
            let n = subject["group"]["name"].as_str().unwrap_or("");
            n == "*" || user.groups.iter().any(|g| g == n)
        }
        Some("ServiceAccount") => {
            let (ns, name) = (subject["serviceAccount"]["namespace"].as_str().unwrap_or(""), subject["serviceAccount"]["name"].as_str().unwrap_or(""));
            match user.name.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split_once(':')) {
                Some((user_ns, user_name)) => user_ns == ns && (name == "*" || name == user_name),
                None => false,
            }
        }
        _ => false,
    }
}

fn resource_rule_matches(rule: &Value, a: &Attributes) -> bool {
    let resource = if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
    let scoped = if a.namespace.is_empty() { rule["clusterScope"].as_bool().unwrap_or(false) } else { any_is(rule, "namespaces", &a.namespace) };
    any_is(rule, "verbs", &a.verb) && any_is(rule, "apiGroups", &a.api_group) && any_is(rule, "resources", &resource) && scoped
}

fn non_resource_rule_matches(rule: &Value, a: &Attributes) -> bool {
    let path = if a.path.is_empty() { "/" } else { a.path.as_str() };
    any_is(rule, "verbs", &a.verb)
        && strings(rule, "nonResourceURLs").any(|u| {
            u == "*" || u == path || u.strip_suffix('*').is_some_and(|prefix| prefix.ends_with('/') && (path.starts_with(prefix) || path == prefix.trim_end_matches('/')))
        })
}

/// Whether `schema` covers the request.
pub fn matches(schema: &Schema, user: &UserInfo, a: &Attributes) -> bool {
    schema.rules.iter().any(|rule| {
        rule["subjects"].as_array().into_iter().flatten().any(|s| subject_matches(s, user))
            && if a.resource_request {
                rule["resourceRules"].as_array().into_iter().flatten().any(|r| resource_rule_matches(r, a))
            } else {
                rule["nonResourceRules"].as_array().into_iter().flatten().any(|r| non_resource_rule_matches(r, a))
            }
    })
}

/// The hash of a flow: its schema and distinguisher.
pub fn flow_hash(schema: &str, distinguisher: &str) -> u64 {
    let mut bytes = Vec::with_capacity(schema.len() + distinguisher.len() + 1);
    bytes.extend_from_slice(schema.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(distinguisher.as_bytes());
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// The request's classification under `config` (`catch-all` always matches whoever is
/// authenticated or not, so there is always one).
pub fn classify(config: &Config, user: &UserInfo, a: &Attributes) -> Option<Classification> {
    let schema = config.schemas.iter().find(|s| matches(s, user, a))?;
    let level = config.level(&schema.level)?;
    let distinguisher = match schema.distinguisher {
        Distinguisher::ByUser => user.name.clone(),
        Distinguisher::ByNamespace => a.namespace.clone(),
        Distinguisher::None => String::new(),
    };
    Some(Classification { flow: flow_hash(&schema.name, &distinguisher), schema: schema.name.clone(), schema_uid: schema.uid.clone(), level: level.name.clone(), level_uid: level.uid.clone(), distinguisher })
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardplane_apimachinery::kind_rules::flowcontrol as bootstrap;
    use shardplane_identity::rbac::request::attributes;

    fn defaults() -> Config {
        Config::build(&bootstrap::priority_levels(), &bootstrap::flow_schemas(), 600)
    }

    fn level_of(user: &UserInfo, method: &str, path: &str) -> (String, String) {
        let c = classify(&defaults(), user, &attributes(method, path, false, "")).expect("catch-all matches everyone");
        (c.schema, c.level)
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo::authenticated(name, "", groups.iter().map(|g| g.to_string()).collect())
    }

    #[test]
    fn upstreams_defaults_classify_as_upstream() {
        let admin = user("kubernetes-admin", &["system:masters"]);
        assert_eq!(level_of(&admin, "DELETE", "/apis/apps/v1/namespaces/default/deployments/x"), ("exempt".into(), "exempt".into()));
        let alice = user("alice", &[]);
        assert_eq!(level_of(&alice, "GET", "/api/v1/pods"), ("global-default".into(), "global-default".into()));
        assert_eq!(level_of(&alice, "GET", "/readyz"), ("probes".into(), "exempt".into()));
        let anonymous = shardplane_identity::authn::anonymous();
        assert_eq!(level_of(&anonymous, "GET", "/livez"), ("probes".into(), "exempt".into()));
        let node = user("system:node:n1", &["system:nodes"]);
        assert_eq!(level_of(&node, "PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"), ("system-node-high".into(), "node-high".into()));
        assert_eq!(level_of(&node, "GET", "/api/v1/nodes/n1/status"), ("system-node-high".into(), "node-high".into()));
        assert_eq!(level_of(&node, "GET", "/api/v1/pods"), ("system-nodes".into(), "system".into()));
        let sa = user("system:serviceaccount:team:op", &["system:serviceaccounts", "system:serviceaccounts:team"]);
        assert_eq!(level_of(&sa, "GET", "/api/v1/namespaces/team/configmaps"), ("service-accounts".into(), "workload-low".into()));
        let kube_system = user("system:serviceaccount:kube-system:endpoint-controller", &["system:serviceaccounts"]);
        assert_eq!(level_of(&kube_system, "PUT", "/api/v1/namespaces/a/endpoints/e"), ("endpoint-controller".into(), "workload-high".into()));
        assert_eq!(level_of(&kube_system, "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l"), ("system-leader-election".into(), "leader-election".into()));
        let scheduler = user("system:kube-scheduler", &[]);
        assert_eq!(level_of(&scheduler, "GET", "/api/v1/pods"), ("kube-scheduler".into(), "workload-high".into()));
    }

    #[test]
    fn distinguishers_split_flows_by_user_or_namespace() {
        let c = defaults();
        let a = attributes("GET", "/api/v1/namespaces/one/pods", false, "");
        let (x, y) = (classify(&c, &user("x", &[]), &a).unwrap(), classify(&c, &user("y", &[]), &a).unwrap());
        assert_eq!((x.distinguisher.as_str(), y.distinguisher.as_str()), ("x", "y"));
        assert_ne!(x.flow, y.flow);
        let sched = user("system:kube-scheduler", &[]);
        let (one, two) = (classify(&c, &sched, &a).unwrap(), classify(&c, &sched, &attributes("GET", "/api/v1/namespaces/two/pods", false, "")).unwrap());
        assert_eq!((one.distinguisher.as_str(), two.distinguisher.as_str()), ("one", "two"));
    }

    #[test]
    fn rules_match_as_upstream_says() {
        let rule = serde_json::json!({"verbs": ["get"], "nonResourceURLs": ["/metrics", "/debug/*"]});
        let a = |path: &str| attributes("GET", path, false, "");
        assert!(non_resource_rule_matches(&rule, &a("/metrics")));
        assert!(non_resource_rule_matches(&rule, &a("/debug/pprof/heap")));
        assert!(non_resource_rule_matches(&rule, &a("/debug")));
        assert!(!non_resource_rule_matches(&rule, &a("/debugger")));
        assert!(!non_resource_rule_matches(&rule, &attributes("POST", "/metrics", false, "")));
        let cluster_only = serde_json::json!({"verbs": ["*"], "apiGroups": [""], "resources": ["nodes", "pods/status"], "clusterScope": true});
        assert!(resource_rule_matches(&cluster_only, &a("/api/v1/nodes")));
        // Namespaced requests need the namespace listed.
        assert!(!resource_rule_matches(&cluster_only, &a("/api/v1/namespaces/x/pods/p/status")));
        let namespaced = serde_json::json!({"verbs": ["*"], "apiGroups": [""], "resources": ["pods/status"], "namespaces": ["x"]});
        assert!(resource_rule_matches(&namespaced, &a("/api/v1/namespaces/x/pods/p/status")));
        assert!(!resource_rule_matches(&namespaced, &a("/api/v1/namespaces/x/pods/p")));
    }
}
