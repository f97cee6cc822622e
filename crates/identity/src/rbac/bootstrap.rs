//! Upstream's RBAC bootstrap policy (the ClusterRoles and ClusterRoleBindings kube-apiserver
//! creates at start, labelled `kubernetes.io/bootstrapping: rbac-defaults` and annotated for
//! auto-update): the user-facing roles (cluster-admin, and admin, edit and view aggregated from
//! the `system:aggregate-to-*` roles), discovery, basic-user and public-info-viewer (what an
//! anonymous caller may read), the review delegator, monitoring, issuer discovery, and the roles
//! of the scheduler, the controller manager and kube-proxy. RFC 0012 lists what is left out.

use serde_json::{json, Value};

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const ALL_VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
const CREATE: &[&str] = &["create"];
const EVENTS_WRITE: &[&str] = &["create", "patch", "update"];

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn named_rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "resourceNames": names, "verbs": verbs})
}

fn paths(verbs: &[&str], urls: &[&str]) -> Value {
    json!({"nonResourceURLs": urls, "verbs": verbs})
}

fn metadata(name: &str, extra_labels: &[(&str, &str)]) -> Value {
    let mut labels = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
    for (k, v) in extra_labels {
        labels[*k] = json!(v);
    }
    json!({"name": name, "labels": labels, "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}})
}

fn role(name: &str, labels: &[(&str, &str)], rules: Vec<Value>) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": metadata(name, labels), "rules": rules})
}

fn aggregated(name: &str, labels: &[(&str, &str)], selector_label: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": metadata(name, labels), "rules": [],
           "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {selector_label: "true"}}]}})
}

const TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
const TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
const TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

/// The bootstrap ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    vec![
        role("cluster-admin", &[], vec![rule(&["*"], &["*"], &["*"]), paths(&["*"], &["*"])]),
        aggregated("admin", &[], TO_ADMIN),
        aggregated("edit", &[(TO_ADMIN, "true")], TO_EDIT),
        aggregated("view", &[(TO_EDIT, "true")], TO_VIEW),
        role("system:aggregate-to-admin", &[(TO_ADMIN, "true")], vec![rule(CREATE, &["authorization.k8s.io"], &["localsubjectaccessreviews"]), rule(ALL_VERBS, &["rbac.authorization.k8s.io"], &["rolebindings", "roles"])]),
        role("system:aggregate-to-edit", &[(TO_EDIT, "true")], vec![
            rule(READ, &[""], &["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"]),
            rule(&["impersonate"], &[""], &["serviceaccounts"]),
            rule(WRITE, &[""], &["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]),
            rule(CREATE, &[""], &["pods/eviction"]),
            rule(WRITE, &[""], &["configmaps", "events", "persistentvolumeclaims", "replicationcontrollers", "replicationcontrollers/scale", "secrets", "serviceaccounts", "services", "services/proxy"]),
            rule(CREATE, &[""], &["serviceaccounts/token"]),
            rule(WRITE, &["apps"], &["daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"]),
            rule(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
            rule(WRITE, &["batch"], &["cronjobs", "jobs"]),
            rule(WRITE, &["extensions"], &["daemonsets", "deployments", "deployments/rollback", "deployments/scale", "ingresses", "networkpolicies", "replicasets", "replicasets/scale", "replicationcontrollers/scale"]),
            rule(WRITE, &["policy"], &["poddisruptionbudgets"]),
            rule(WRITE, &["networking.k8s.io"], &["ingresses", "networkpolicies"]),
            rule(ALL_VERBS, &["coordination.k8s.io"], &["leases"]),
        ]),
        role("system:aggregate-to-view", &[(TO_VIEW, "true")], vec![
            rule(READ, &[""], &["configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services", "services/status"]),
            rule(READ, &[""], &["bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status", "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"]),
            rule(READ, &[""], &["namespaces"]),
            rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
            rule(READ, &["apps"], &["controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets", "statefulsets/scale", "statefulsets/status"]),
            rule(READ, &["autoscaling"], &["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
            rule(READ, &["batch"], &["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
            rule(READ, &["extensions"], &["daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status", "ingresses", "ingresses/status", "networkpolicies", "replicasets", "replicasets/scale", "replicasets/status", "replicationcontrollers/scale"]),
            rule(READ, &["policy"], &["poddisruptionbudgets", "poddisruptionbudgets/status"]),
            rule(READ, &["networking.k8s.io"], &["ingresses", "ingresses/status", "networkpolicies"]),
        ]),
        role("system:auth-delegator", &[], vec![rule(CREATE, &["authentication.k8s.io"], &["tokenreviews"]), rule(CREATE, &["authorization.k8s.io"], &["subjectaccessreviews"])]),
        role("system:basic-user", &[], vec![rule(CREATE, &["authorization.k8s.io"], &["selfsubjectaccessreviews", "selfsubjectrulesreviews"]), rule(CREATE, &["authentication.k8s.io"], &["selfsubjectreviews"])]),
        role("system:discovery", &[], vec![paths(&["get"], &["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"])]),
        role("system:public-info-viewer", &[], vec![paths(&["get"], &["/healthz", "/livez", "/readyz", "/version", "/version/"])]),
        role("system:monitoring", &[], vec![paths(&["get"], &["/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis", "/readyz", "/readyz/*"])]),
        role("system:service-account-issuer-discovery", &[], vec![paths(&["get"], &["/.well-known/openid-configuration", "/openid/v1/jwks"])]),
        role("system:kube-scheduler", &[], vec![
            rule(EVENTS_WRITE, &["", "events.k8s.io"], &["events"]),
            rule(CREATE, &["coordination.k8s.io"], &["leases"]),
            named_rule(&["get", "update"], &["coordination.k8s.io"], &["leases"], &["kube-scheduler"]),
            rule(READ, &[""], &["nodes"]),
            rule(&["delete", "get", "list", "watch"], &[""], &["pods"]),
            rule(CREATE, &[""], &["bindings", "pods/binding"]),
            rule(&["patch", "update"], &[""], &["pods/status"]),
            rule(READ, &[""], &["replicationcontrollers", "services"]),
            rule(READ, &["apps", "extensions"], &["replicasets"]),
            rule(READ, &["apps"], &["statefulsets"]),
            rule(READ, &["policy"], &["poddisruptionbudgets"]),
            rule(READ, &[""], &["persistentvolumeclaims", "persistentvolumes"]),
            rule(CREATE, &["authentication.k8s.io"], &["tokenreviews"]),
            rule(CREATE, &["authorization.k8s.io"], &["subjectaccessreviews"]),
            rule(READ, &["storage.k8s.io"], &["csinodes"]),
            rule(READ, &[""], &["namespaces"]),
            rule(READ, &["storage.k8s.io"], &["csidrivers"]),
            rule(READ, &["storage.k8s.io"], &["csistoragecapacities"]),
        ]),
        role("system:volume-scheduler", &[], vec![
            rule(&["get", "list", "patch", "update", "watch"], &[""], &["persistentvolumes"]),
            rule(READ, &["storage.k8s.io"], &["storageclasses"]),
            rule(&["get", "list", "patch", "update", "watch"], &[""], &["persistentvolumeclaims"]),
        ]),
        role("system:kube-controller-manager", &[], vec![
            rule(EVENTS_WRITE, &["", "events.k8s.io"], &["events"]),
            rule(CREATE, &["coordination.k8s.io"], &["leases"]),
            named_rule(&["get", "update"], &["coordination.k8s.io"], &["leases"], &["kube-controller-manager"]),
            rule(CREATE, &[""], &["secrets", "serviceaccounts"]),
            rule(&["delete"], &[""], &["secrets"]),
            rule(&["get"], &[""], &["configmaps", "namespaces", "secrets", "serviceaccounts"]),
            rule(&["update"], &[""], &["secrets", "serviceaccounts"]),
            rule(CREATE, &["authentication.k8s.io"], &["tokenreviews"]),
            rule(CREATE, &["authorization.k8s.io"], &["subjectaccessreviews"]),
            rule(&["list", "watch"], &["*"], &["*"]),
            rule(CREATE, &[""], &["serviceaccounts/token"]),
        ]),
        role("system:node-proxier", &[], vec![
            rule(&["list", "watch"], &[""], &["endpoints", "services"]),
            rule(READ, &[""], &["nodes"]),
            rule(EVENTS_WRITE, &["", "events.k8s.io"], &["events"]),
            rule(&["list", "watch"], &["discovery.k8s.io"], &["endpointslices"]),
        ]),
    ]
}

fn binding(role: &str, subjects: &[(&str, &str)]) -> Value {
    let subjects: Vec<Value> = subjects.iter().map(|(kind, name)| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name})).collect();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": metadata(role, &[]),
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}, "subjects": subjects})
}

/// The bootstrap ClusterRoleBindings (each named as its role).
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding("cluster-admin", &[("Group", "system:masters")]),
        binding("system:basic-user", &[("Group", "system:authenticated")]),
        binding("system:discovery", &[("Group", "system:authenticated")]),
        binding("system:public-info-viewer", &[("Group", "system:authenticated"), ("Group", "system:unauthenticated")]),
        binding("system:monitoring", &[("Group", "system:monitoring")]),
        binding("system:service-account-issuer-discovery", &[("Group", "system:serviceaccounts")]),
        binding("system:kube-scheduler", &[("User", "system:kube-scheduler")]),
        binding("system:volume-scheduler", &[("User", "system:kube-scheduler")]),
        binding("system:kube-controller-manager", &[("User", "system:kube-controller-manager")]),
        binding("system:node-proxier", &[("User", "system:kube-proxy")]),
    ]
}
