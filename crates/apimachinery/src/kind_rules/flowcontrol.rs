//! API Priority and Fairness' bootstrap configuration (flowcontrol.apiserver.k8s.io/v1): the
//! mandatory and suggested PriorityLevelConfigurations and FlowSchemas kube-apiserver 1.33
//! creates at start (its `bootstrap` package), each marked for automatic update as upstream
//! marks them. Stored and served here; issue #20 enforces them.

use serde_json::{json, Value};

const API_VERSION: &str = "flowcontrol.apiserver.k8s.io/v1";
const AUTOUPDATE: &str = "apf.kubernetes.io/autoupdate-spec";

fn meta(name: &str) -> Value {
    json!({"name": name, "annotations": {AUTOUPDATE: "true"}})
}

/// A Limited priority level that queues: (name, nominal shares, lendable %, queues, hand size).
fn queuing(name: &str, shares: u32, lendable: u32, queues: u32, hand: u32) -> Value {
    json!({"apiVersion": API_VERSION, "kind": "PriorityLevelConfiguration", "metadata": meta(name), "spec": {"type": "Limited", "limited": {
        "nominalConcurrencyShares": shares, "lendablePercent": lendable,
        "limitResponse": {"type": "Queue", "queuing": {"queues": queues, "handSize": hand, "queueLengthLimit": 50}}}}})
}

/// The priority levels: mandatory (`exempt`, `catch-all`) first, then the suggested ones.
pub fn priority_levels() -> Vec<Value> {
    vec![
        json!({"apiVersion": API_VERSION, "kind": "PriorityLevelConfiguration", "metadata": meta("exempt"), "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}}),
        json!({"apiVersion": API_VERSION, "kind": "PriorityLevelConfiguration", "metadata": meta("catch-all"), "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 5, "lendablePercent": 0, "limitResponse": {"type": "Reject"}}}}),
        queuing("node-high", 40, 25, 64, 6),
        queuing("system", 30, 33, 64, 6),
        queuing("leader-election", 10, 0, 16, 4),
        queuing("workload-high", 40, 50, 128, 6),
        queuing("workload-low", 100, 90, 128, 6),
        queuing("global-default", 20, 50, 128, 6),
    ]
}

fn group(name: &str) -> Value {
    json!({"kind": "Group", "group": {"name": name}})
}

fn user(name: &str) -> Value {
    json!({"kind": "User", "user": {"name": name}})
}

fn kube_system_sa(name: &str) -> Value {
    json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": name}})
}

/// Every resource and non-resource request.
fn everything(subjects: Vec<Value>) -> Value {
    json!({"subjects": subjects,
        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]})
}

/// Leases (get, create, update) in any namespace.
fn leases(subjects: Vec<Value>) -> Value {
    json!({"subjects": subjects, "resourceRules": [{"verbs": ["get", "create", "update"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]}]})
}

fn flow_schema(name: &str, level: &str, precedence: u32, distinguisher: Option<&str>, rules: Value) -> Value {
    let mut spec = json!({"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": precedence, "rules": [rules]});
    if let Some(d) = distinguisher {
        spec["distinguisherMethod"] = json!({"type": d});
    }
    json!({"apiVersion": API_VERSION, "kind": "FlowSchema", "metadata": meta(name), "spec": spec})
}

/// The flow schemas: mandatory (`exempt`, `catch-all`) first, then the suggested ones.
pub fn flow_schemas() -> Vec<Value> {
    let everyone = || vec![group("system:unauthenticated"), group("system:authenticated")];
    let controllers = || vec![user("system:kube-controller-manager"), user("system:kube-scheduler"), kube_system_sa("*")];
    vec![
        flow_schema("exempt", "exempt", 1, None, everything(vec![group("system:masters")])),
        flow_schema("catch-all", "catch-all", 10000, Some("ByUser"), everything(everyone())),
        flow_schema("probes", "exempt", 2, None, json!({"subjects": everyone(), "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}]})),
        flow_schema("system-leader-election", "leader-election", 100, Some("ByUser"), leases(controllers())),
        flow_schema("endpoint-controller", "workload-high", 150, Some("ByUser"), json!({
            "subjects": [user("system:kube-controller-manager"), kube_system_sa("endpoint-controller")],
            "resourceRules": [{"verbs": ["get", "create", "update"], "apiGroups": [""], "resources": ["endpoints"], "namespaces": ["*"]}]})),
        flow_schema("workload-leader-election", "leader-election", 200, Some("ByUser"), leases(vec![kube_system_sa("*")])),
        flow_schema("system-node-high", "node-high", 400, Some("ByUser"), json!({"subjects": [group("system:nodes")], "resourceRules": [
            {"verbs": ["*"], "apiGroups": [""], "resources": ["nodes", "nodes/status"], "clusterScope": true, "namespaces": ["*"]},
            {"verbs": ["*"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]}]})),
        flow_schema("system-nodes", "system", 500, Some("ByUser"), everything(vec![group("system:nodes")])),
        flow_schema("kube-controller-manager", "workload-high", 800, Some("ByNamespace"), everything(vec![user("system:kube-controller-manager")])),
        flow_schema("kube-scheduler", "workload-high", 800, Some("ByNamespace"), everything(vec![user("system:kube-scheduler")])),
        flow_schema("kube-system-service-accounts", "workload-high", 900, Some("ByNamespace"), everything(vec![kube_system_sa("*")])),
        flow_schema("service-accounts", "workload-low", 9000, Some("ByUser"), everything(vec![group("system:serviceaccounts")])),
        flow_schema("global-default", "global-default", 9900, Some("ByUser"), everything(everyone())),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flow_schema_names_a_bootstrap_priority_level_and_precedences_are_upstreams() {
        let levels: Vec<String> = priority_levels().iter().map(|l| l["metadata"]["name"].as_str().unwrap().to_owned()).collect();
        let schemas = flow_schemas();
        for fs in &schemas {
            assert!(levels.iter().any(|l| fs["spec"]["priorityLevelConfiguration"]["name"] == l.as_str()), "{fs}");
        }
        let mut order: Vec<(u64, &str)> = schemas.iter().map(|f| (f["spec"]["matchingPrecedence"].as_u64().unwrap(), f["metadata"]["name"].as_str().unwrap())).collect();
        order.sort();
        assert_eq!(order.first(), Some(&(1, "exempt")));
        assert_eq!(order.last(), Some(&(10000, "catch-all")));
        assert_eq!(schemas.len(), 13);
        assert_eq!(levels.len(), 8);
    }
}
