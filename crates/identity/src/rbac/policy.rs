//! One snapshot of every Role, ClusterRole, RoleBinding and ClusterRoleBinding, and the RBAC
//! decision over it (upstream's `RBACAuthorizer`): the rules of every binding whose subjects
//! name the user (ClusterRoleBindings, then the RoleBindings of the request's namespace) are
//! visited, and the first that allows the request allows it. RBAC has no deny rules: a request
//! no rule allows gets no opinion, which the caller answers 403.
//!
//! Aggregated ClusterRoles (`aggregationRule`) are given the union of the rules of the
//! ClusterRoles their selectors match, here when the snapshot is built (so a decision never
//! waits for the controller that writes the union back, [`Policy::aggregation_updates`]).

use super::rules::{Attributes, PolicyRule};
use crate::user::UserInfo;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Who a binding grants its role to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// `User`, `Group` or `ServiceAccount`.
    pub kind: String,
    pub name: String,
    /// A ServiceAccount's namespace (a RoleBinding's own when empty).
    #[serde(default)]
    pub namespace: String,
}

impl Subject {
    /// Whether this subject names `user`, in a binding of `binding_namespace` ("" for a
    /// ClusterRoleBinding).
    pub fn names(&self, user: &UserInfo, binding_namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.groups.contains(&self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() { binding_namespace } else { &self.namespace };
                !ns.is_empty() && user.name.strip_prefix("system:serviceaccount:").and_then(|r| r.split_once(':')) == Some((ns, self.name.as_str()))
            }
            _ => false,
        }
    }

    fn describe(&self) -> String {
        match self.kind.as_str() {
            "ServiceAccount" => format!("ServiceAccount \"{}/{}\"", self.namespace, self.name),
            kind => format!("{kind} {:?}", self.name),
        }
    }
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RoleObject {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    rules: Option<Vec<PolicyRule>>,
    #[serde(default)]
    aggregation_rule: Option<AggregationRule>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AggregationRule {
    #[serde(default)]
    cluster_role_selectors: Vec<LabelSelector>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LabelSelector {
    #[serde(default)]
    match_labels: BTreeMap<String, String>,
    #[serde(default)]
    match_expressions: Vec<Requirement>,
}

#[derive(Deserialize)]
struct Requirement {
    key: String,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

impl LabelSelector {
    /// Upstream's label selector; an empty one matches nothing here (upstream's aggregation
    /// ignores an empty selector rather than taking every role).
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        if self.match_labels.is_empty() && self.match_expressions.is_empty() {
            return false;
        }
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => value.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BindingObject {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    subjects: Option<Vec<Subject>>,
    role_ref: RoleRef,
}

#[derive(Clone, Debug, Deserialize)]
struct RoleRef {
    kind: String,
    name: String,
}

/// A RoleBinding (with its namespace) or a ClusterRoleBinding (namespace "").
#[derive(Clone, Debug)]
struct Binding {
    name: String,
    namespace: String,
    subjects: Vec<Subject>,
    role_ref: RoleRef,
}

/// The RBAC decision for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A rule allows it; the reason names the binding.
    Allow(String),
    /// No rule allows it; the reason is empty, or names the bindings whose roles are missing.
    NoOpinion(String),
}

impl Decision {
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }

    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow(r) | Decision::NoOpinion(r) => r,
        }
    }
}

/// Every RBAC object at one moment, indexed for decisions.
#[derive(Debug, Default)]
pub struct Policy {
    /// Each ClusterRole's rules (an aggregated one's: the union).
    cluster_roles: HashMap<String, Arc<[PolicyRule]>>,
    /// Each aggregated ClusterRole's rules as stored, where they differ from the union.
    stale_aggregations: Vec<(String, Arc<[PolicyRule]>)>,
    /// Each Role's rules by (namespace, name).
    roles: HashMap<(String, String), Arc<[PolicyRule]>>,
    cluster_bindings: Vec<Binding>,
    /// RoleBindings by namespace.
    bindings: HashMap<String, Vec<Binding>>,
}

/// The four kinds' objects, as stored.
#[derive(Default)]
pub struct Objects<'a> {
    pub cluster_roles: Vec<&'a Value>,
    pub roles: Vec<&'a Value>,
    pub cluster_role_bindings: Vec<&'a Value>,
    pub role_bindings: Vec<&'a Value>,
}

fn parse<T: for<'de> Deserialize<'de>>(v: &Value) -> Option<T> {
    match T::deserialize(v) {
        Ok(t) => Some(t),
        Err(e) => {
            // Stored objects were validated on write; one that does not read grants nothing.
            tracing::warn!(object = %v["metadata"]["name"], error = %e, "an RBAC object that does not parse is ignored");
            None
        }
    }
}

fn binding(b: BindingObject) -> Binding {
    Binding { name: b.metadata.name, namespace: b.metadata.namespace, subjects: b.subjects.unwrap_or_default(), role_ref: b.role_ref }
}

impl Policy {
    /// Indexes `objects`, aggregating ClusterRoles.
    pub fn new(objects: &Objects<'_>) -> Self {
        let cluster: Vec<RoleObject> = objects.cluster_roles.iter().filter_map(|v| parse(v)).collect();
        let stored: HashMap<String, Arc<[PolicyRule]>> = cluster.iter().map(|r| (r.metadata.name.clone(), r.rules.clone().unwrap_or_default().into())).collect();
        let cluster_roles = aggregate(&cluster, &stored);
        let mut stale_aggregations: Vec<_> = cluster
            .iter()
            .filter(|r| r.aggregation_rule.is_some() && cluster_roles[&r.metadata.name] != stored[&r.metadata.name])
            .map(|r| (r.metadata.name.clone(), cluster_roles[&r.metadata.name].clone()))
            .collect();
        stale_aggregations.sort_by(|a, b| a.0.cmp(&b.0));
        let roles = objects.roles.iter().filter_map(|v| parse::<RoleObject>(v)).map(|r| ((r.metadata.namespace, r.metadata.name), r.rules.unwrap_or_default().into())).collect();
        let cluster_bindings = objects.cluster_role_bindings.iter().filter_map(|v| parse(v)).map(binding).collect();
        let mut bindings: HashMap<String, Vec<Binding>> = HashMap::new();
        for b in objects.role_bindings.iter().filter_map(|v| parse(v)).map(binding) {
            bindings.entry(b.namespace.clone()).or_default().push(b);
        }
        Self { cluster_roles, stale_aggregations, roles, cluster_bindings, bindings }
    }

    /// The aggregated ClusterRoles whose stored rules are not the union of what their
    /// selectors match, with the union: what the aggregation controller writes.
    pub fn aggregation_updates(&self) -> &[(String, Arc<[PolicyRule]>)] {
        &self.stale_aggregations
    }

    /// Whether a ClusterRoleBinding of this name exists.
    pub fn has_cluster_role_binding(&self, name: &str) -> bool {
        self.cluster_bindings.iter().any(|b| b.name == name)
    }

    /// A ClusterRole's rules (the union, for an aggregated one).
    pub fn cluster_role(&self, name: &str) -> Option<&Arc<[PolicyRule]>> {
        self.cluster_roles.get(name)
    }

    /// The rules a binding in `namespace` ("" for a ClusterRoleBinding) referring to
    /// `kind`/`name` grants, or the error upstream reports for a missing role.
    pub fn referenced_rules(&self, namespace: &str, kind: &str, name: &str) -> Result<&Arc<[PolicyRule]>, String> {
        match kind {
            "ClusterRole" => self.cluster_roles.get(name).ok_or_else(|| format!("clusterrole.rbac.authorization.k8s.io {name:?} not found")),
            "Role" if !namespace.is_empty() => self.roles.get(&(namespace.to_owned(), name.to_owned())).ok_or_else(|| format!("role.rbac.authorization.k8s.io {name:?} not found")),
            _ => Err(format!("unsupported role reference kind: {kind:?}")),
        }
    }

    /// Calls `visit` with each binding that names `user` (ClusterRoleBindings first, then the
    /// RoleBindings of `namespace`), its subject, and its role's rules or why they are missing;
    /// stops when `visit` returns true.
    fn visit(&self, user: &UserInfo, namespace: &str, mut visit: impl FnMut(&Binding, &Subject, Result<&Arc<[PolicyRule]>, String>) -> bool) {
        let namespaced = if namespace.is_empty() { None } else { self.bindings.get(namespace) };
        for b in self.cluster_bindings.iter().chain(namespaced.into_iter().flatten()) {
            let Some(subject) = b.subjects.iter().find(|s| s.names(user, &b.namespace)) else { continue };
            if visit(b, subject, self.referenced_rules(&b.namespace, &b.role_ref.kind, &b.role_ref.name)) {
                return;
            }
        }
    }

    /// Whether `user` may do what `attrs` asks.
    pub fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Decision {
        let mut errors = Vec::new();
        let mut allowed = None;
        self.visit(user, &attrs.namespace, |b, subject, rules| match rules {
            Ok(rules) if rules.iter().any(|r| r.allows(attrs)) => {
                let binding = if b.namespace.is_empty() { format!("ClusterRoleBinding {:?}", b.name) } else { format!("RoleBinding \"{}/{}\"", b.name, b.namespace) };
                allowed = Some(format!("RBAC: allowed by {binding} of {} {:?} to {}", b.role_ref.kind, b.role_ref.name, subject.describe()));
                true
            }
            Ok(_) => false,
            Err(e) => {
                errors.push(e);
                false
            }
        });
        match allowed {
            Some(reason) => Decision::Allow(reason),
            None if errors.is_empty() => Decision::NoOpinion(String::new()),
            // Upstream's aggregate error: one message alone, several in brackets.
            None if errors.len() == 1 => Decision::NoOpinion(format!("RBAC: {}", errors[0])),
            None => Decision::NoOpinion(format!("RBAC: [{}]", errors.join(", "))),
        }
    }

    /// Every rule granted to `user` in `namespace` (ClusterRoleBindings' too), and the errors of
    /// bindings whose roles are missing: what SelfSubjectRulesReview answers and what the
    /// escalation check compares with.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
        let (mut rules, mut errors) = (Vec::new(), Vec::new());
        self.visit(user, namespace, |_, _, granted| {
            match granted {
                Ok(r) => rules.extend(r.iter().cloned()),
                Err(e) => errors.push(e),
            }
            false
        });
        (rules, errors)
    }
}

/// Each ClusterRole's effective rules: its own, or for an aggregated one the union (by role name,
/// without repeats) of what its selectors match, repeated until nothing changes so that an
/// aggregated role matching another aggregated role sees that one's union.
fn aggregate(cluster: &[RoleObject], stored: &HashMap<String, Arc<[PolicyRule]>>) -> HashMap<String, Arc<[PolicyRule]>> {
    let mut effective = stored.clone();
    let mut by_name: Vec<&RoleObject> = cluster.iter().collect();
    by_name.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let aggregated: Vec<&RoleObject> = by_name.iter().copied().filter(|r| r.aggregation_rule.is_some()).collect();
    // Each pass settles at least one more level of nesting; there are at most as many levels
    // as aggregated roles.
    for _ in 0..=aggregated.len() {
        let mut changed = false;
        for role in &aggregated {
            let selectors = &role.aggregation_rule.as_ref().expect("filtered").cluster_role_selectors;
            let mut union: Vec<PolicyRule> = Vec::new();
            for other in by_name.iter().filter(|o| o.metadata.name != role.metadata.name && selectors.iter().any(|s| s.matches(&o.metadata.labels))) {
                for rule in effective[&other.metadata.name].iter() {
                    if !union.contains(rule) {
                        union.push(rule.clone());
                    }
                }
            }
            if *effective[&role.metadata.name] != union[..] {
                effective.insert(role.metadata.name.clone(), union.into());
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    effective
}
