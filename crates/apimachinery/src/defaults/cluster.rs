//! Defaults of the kinds that are not workloads: Service, Endpoints and EndpointSlice, the
//! volume and storage kinds, nodes, limit ranges, RBAC bindings, network policies, priority
//! classes and the priority-and-fairness objects, as upstream's `SetDefaults_*` set them.

use super::{default_at, each_mut};
use serde_json::{json, Map, Value};

/// Service: type, session affinity, traffic policies by type, each port's protocol and target.
pub(super) fn service(obj: &mut Value) {
    if obj.get("spec").is_some() {
        default_at(obj, &["spec", "type"], json!("ClusterIP"));
        default_at(obj, &["spec", "sessionAffinity"], json!("None"));
        let ty = obj.pointer("/spec/type").and_then(Value::as_str).unwrap_or("").to_owned();
        if ty != "ExternalName" {
            default_at(obj, &["spec", "internalTrafficPolicy"], json!("Cluster"));
        }
        if ty == "NodePort" || ty == "LoadBalancer" {
            default_at(obj, &["spec", "externalTrafficPolicy"], json!("Cluster"));
        }
        if ty == "LoadBalancer" {
            default_at(obj, &["spec", "allocateLoadBalancerNodePorts"], json!(true));
        }
        if let Some(ports) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
            for p in ports {
                default_at(p, &["protocol"], json!("TCP"));
                if let Some(port) = p.get("port").cloned() {
                    default_at(p, &["targetPort"], port);
                }
            }
        }
    }
}

/// Endpoints: each port's protocol.
pub(super) fn endpoints(obj: &mut Value) {
    for subset in each_mut(obj, "subsets") {
        for p in each_mut(subset, "ports") {
            default_at(p, &["protocol"], json!("TCP"));
        }
    }
}

/// EndpointSlice (discovery.k8s.io/v1): each port's name (empty) and protocol.
pub(super) fn endpoint_slice(obj: &mut Value) {
    for p in each_mut(obj, "ports") {
        default_at(p, &["name"], json!(""));
        default_at(p, &["protocol"], json!("TCP"));
    }
}

/// Node: what is allocatable is, unless said, all the capacity.
pub(super) fn node(obj: &mut Value) {
    if let Some(capacity) = obj.pointer("/status/capacity").cloned() {
        default_at(obj, &["status", "allocatable"], capacity);
    }
}

/// PersistentVolume: reclaim policy, volume mode, and the Pending phase.
pub(super) fn persistent_volume(obj: &mut Value) {
    default_at(obj, &["spec", "persistentVolumeReclaimPolicy"], json!("Retain"));
    default_at(obj, &["spec", "volumeMode"], json!("Filesystem"));
    default_at(obj, &["status", "phase"], json!("Pending"));
    if let Some(h) = obj.pointer_mut("/spec/hostPath").filter(|h| h.is_object()) {
        default_at(h, &["type"], json!(""));
    }
}

/// PersistentVolumeClaim: volume mode and the Pending phase.
pub(super) fn persistent_volume_claim(obj: &mut Value) {
    default_at(obj, &["spec", "volumeMode"], json!("Filesystem"));
    default_at(obj, &["status", "phase"], json!("Pending"));
}

/// LimitRange: for a Container item, the default limit from `max`, then the default request
/// from the default limit and from `min`, resource by resource, where not given.
pub(super) fn limit_range(obj: &mut Value) {
    for item in obj.pointer_mut("/spec/limits").and_then(Value::as_array_mut).into_iter().flatten() {
        if item.get("type").and_then(Value::as_str) != Some("Container") {
            continue;
        }
        let fill = |item: &mut Value, into: &str, from: &str| {
            let Some(source) = item.get(from).and_then(Value::as_object).cloned() else { return };
            let target = item.as_object_mut().expect("object").entry(into).or_insert_with(|| Value::Object(Map::new()));
            if let Some(t) = target.as_object_mut() {
                for (k, v) in source {
                    t.entry(k).or_insert(v);
                }
            }
        };
        fill(item, "default", "max");
        fill(item, "defaultRequest", "default");
        fill(item, "defaultRequest", "min");
    }
}

/// RoleBinding and ClusterRoleBinding: the role reference's group, and each subject's group by
/// its kind (the RBAC group for users and groups, none for service accounts).
pub(super) fn role_binding(obj: &mut Value) {
    if obj.get("roleRef").is_some_and(Value::is_object) {
        default_at(obj, &["roleRef", "apiGroup"], json!("rbac.authorization.k8s.io"));
    }
    for s in each_mut(obj, "subjects") {
        let group = match s.get("kind").and_then(Value::as_str) {
            Some("ServiceAccount") => "",
            Some("User" | "Group") => "rbac.authorization.k8s.io",
            _ => continue,
        };
        default_at(s, &["apiGroup"], json!(group));
    }
}

/// NetworkPolicy: each port's protocol; the policy types from the rules given.
pub(super) fn network_policy(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else { return };
    for direction in ["ingress", "egress"] {
        for rule in each_mut(spec, direction) {
            for p in each_mut(rule, "ports") {
                default_at(p, &["protocol"], json!("TCP"));
            }
        }
    }
    if spec.get("policyTypes").and_then(Value::as_array).is_none_or(|t| t.is_empty()) {
        let egress = spec.get("egress").and_then(Value::as_array).is_some_and(|e| !e.is_empty());
        spec["policyTypes"] = if egress { json!(["Ingress", "Egress"]) } else { json!(["Ingress"]) };
    }
}

/// PriorityClass: preempts lower priorities unless it says otherwise.
pub(super) fn priority_class(obj: &mut Value) {
    default_at(obj, &["preemptionPolicy"], json!("PreemptLowerPriority"));
}

/// StorageClass: reclaim policy and binding mode.
pub(super) fn storage_class(obj: &mut Value) {
    default_at(obj, &["reclaimPolicy"], json!("Delete"));
    default_at(obj, &["volumeBindingMode"], json!("Immediate"));
}

/// CSIDriver: upstream's defaults for every spec field a driver may leave out (a driver with
/// no spec at all gets them too: upstream's spec is a struct, never absent).
pub(super) fn csi_driver(obj: &mut Value) {
    if let Some(o) = obj.as_object_mut() && o.get("spec").is_none_or(Value::is_null) {
        o.insert("spec".into(), json!({}));
    }
    if !obj.get("spec").is_some_and(Value::is_object) {
        return;
    }
    for (field, value) in [
        ("attachRequired", json!(true)),
        ("podInfoOnMount", json!(false)),
        ("storageCapacity", json!(false)),
        ("fsGroupPolicy", json!("ReadWriteOnceWithFSType")),
        ("volumeLifecycleModes", json!(["Persistent"])),
        ("requiresRepublish", json!(false)),
        ("seLinuxMount", json!(false)),
    ] {
        default_at(obj, &["spec", field], value);
    }
}

/// FlowSchema: the matching precedence.
pub(super) fn flow_schema(obj: &mut Value) {
    if obj.get("spec").is_some_and(Value::is_object) {
        default_at(obj, &["spec", "matchingPrecedence"], json!(1000));
    }
}

/// PriorityLevelConfiguration: a limited level's shares, lending and queues; an exempt level's
/// shares and lending.
pub(super) fn priority_level_configuration(obj: &mut Value) {
    if let Some(limited) = obj.pointer_mut("/spec/limited").filter(|l| l.is_object()) {
        default_at(limited, &["nominalConcurrencyShares"], json!(30));
        default_at(limited, &["lendablePercent"], json!(0));
        if let Some(q) = limited.pointer_mut("/limitResponse/queuing").filter(|q| q.is_object()) {
            for (field, value) in [("queues", 64), ("handSize", 8), ("queueLengthLimit", 50)] {
                // Zero means unset here (the fields are not pointers upstream).
                if q.get(field).is_none_or(|v| v.is_null() || v == &json!(0)) {
                    q[field] = json!(value);
                }
            }
        }
    }
    if let Some(exempt) = obj.pointer_mut("/spec/exempt").filter(|e| e.is_object()) {
        default_at(exempt, &["nominalConcurrencyShares"], json!(0));
        default_at(exempt, &["lendablePercent"], json!(0));
    }
}
