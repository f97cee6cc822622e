//! Field defaults of the served kinds, as upstream's `SetDefaults_*` functions set them when an
//! object is decoded (so on every create and update): pod specs wherever they appear
//! ([`pods`]), the workloads ([`workloads`]) and the rest ([`cluster`]), with Job's generated
//! selector.
//!
//! Not here: values upstream *allocates* rather than defaults (a Service's clusterIP and node
//! ports need cluster-wide allocators), and admission plugins ([`crate::admission`]).

mod cluster;
mod pods;
mod resource;
mod workloads;

pub use pods::default_pod_spec;

use crate::resources::ResourceInfo;
use serde_json::{json, Map, Value};

/// Sets `obj[path]` to `value` unless present (creating the objects on the way).
fn default_at(obj: &mut Value, path: &[&str], value: Value) {
    let mut cur = obj;
    for (i, key) in path.iter().enumerate() {
        if !cur.is_object() {
            return;
        }
        let map = cur.as_object_mut().expect("object");
        if i == path.len() - 1 {
            if map.get(*key).is_none_or(Value::is_null) {
                map.insert((*key).to_owned(), value);
            }
            return;
        }
        cur = map.entry((*key).to_owned()).or_insert_with(|| Value::Object(Map::new()));
    }
}

fn each_mut<'a>(obj: &'a mut Value, field: &str) -> impl Iterator<Item = &'a mut Value> {
    obj.get_mut(field).and_then(Value::as_array_mut).into_iter().flatten()
}

/// Applies the defaults of `info`'s kind to `obj`.
pub fn set_defaults(info: &ResourceInfo, obj: &mut Value) {
    match (info.group.as_str(), info.kind.as_str()) {
        (crate::crd::GROUP, "CustomResourceDefinition") => crate::crd::apply_defaults(obj),
        ("", "Pod") => {
            if let Some(spec) = obj.get_mut("spec") {
                default_pod_spec(spec);
            }
        }
        ("", "PodTemplate") => {
            if let Some(spec) = obj.pointer_mut("/template/spec") {
                default_pod_spec(spec);
            }
        }
        ("", "Service") => cluster::service(obj),
        ("", "Secret") => default_at(obj, &["type"], json!("Opaque")),
        ("", "Endpoints") => cluster::endpoints(obj),
        ("", "Node") => cluster::node(obj),
        ("", "PersistentVolume") => cluster::persistent_volume(obj),
        ("", "PersistentVolumeClaim") => cluster::persistent_volume_claim(obj),
        ("", "LimitRange") => cluster::limit_range(obj),
        ("", "ReplicationController") => workloads::replication_controller(obj),
        ("apps", "Deployment") => workloads::deployment(obj),
        ("apps", "ReplicaSet") => workloads::replica_set(obj),
        ("apps", "StatefulSet") => workloads::stateful_set(obj),
        ("apps", "DaemonSet") => workloads::daemon_set(obj),
        ("batch", "Job") => workloads::job(obj),
        ("batch", "CronJob") => workloads::cron_job(obj),
        ("autoscaling", "HorizontalPodAutoscaler") => workloads::horizontal_pod_autoscaler(obj),
        ("discovery.k8s.io", "EndpointSlice") => cluster::endpoint_slice(obj),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => cluster::role_binding(obj),
        ("networking.k8s.io", "NetworkPolicy") => cluster::network_policy(obj),
        ("scheduling.k8s.io", "PriorityClass") => cluster::priority_class(obj),
        ("storage.k8s.io", "StorageClass") => cluster::storage_class(obj),
        ("storage.k8s.io", "CSIDriver") => cluster::csi_driver(obj),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema") => cluster::flow_schema(obj),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration") => cluster::priority_level_configuration(obj),
        // On the stored (v1beta2) shape only: a v1beta1 object is converted before it is stored.
        ("resource.k8s.io", _) if info.is_storage_version() => resource::set_defaults(&info.plural, obj),
        _ => {}
    }
}

/// The status fields upstream's Go types serialize even at zero (no `omitempty`), by kind, with
/// their zero value.
fn zero_status_fields(info: &ResourceInfo) -> &'static [(&'static str, Zero)] {
    use Zero::{False, Int};
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "replicationcontrollers") | ("apps", "replicasets") => &[("replicas", Int)],
        ("apps", "statefulsets") => &[("replicas", Int), ("availableReplicas", Int)],
        ("apps", "daemonsets") => &[("currentNumberScheduled", Int), ("numberMisscheduled", Int), ("desiredNumberScheduled", Int), ("numberReady", Int)],
        ("autoscaling", "horizontalpodautoscalers") => &[("desiredReplicas", Int)],
        ("policy", "poddisruptionbudgets") => &[("disruptionsAllowed", Int), ("currentHealthy", Int), ("desiredHealthy", Int), ("expectedPods", Int)],
        ("storage.k8s.io", "volumeattachments") => &[("attached", False)],
        _ => &[],
    }
}

/// NodeSystemInfo's fields, all written by Go even when empty.
const NODE_INFO_FIELDS: [&str; 10] = ["machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion", "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture"];

/// A Go zero value.
#[derive(Clone, Copy)]
enum Zero {
    Int,
    False,
}

impl Zero {
    fn value(self) -> Value {
        match self {
            Zero::Int => json!(0),
            Zero::False => json!(false),
        }
    }
}

/// The top-level fields of a kind that are Go value structs (`Spec NodeSpec`, not a pointer):
/// Go's encoder writes them even when empty (`omitempty` does not omit a struct), so upstream's
/// answers always carry them, and clients read them unguarded.
fn value_struct_fields(info: &ResourceInfo) -> &'static [&'static str] {
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods" | "services" | "nodes" | "persistentvolumes" | "persistentvolumeclaims" | "namespaces" | "replicationcontrollers" | "resourcequotas")
        | ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs" | "cronjobs")
        | ("autoscaling", "horizontalpodautoscalers")
        | ("policy", "poddisruptionbudgets")
        | ("networking.k8s.io", "ingresses" | "servicecidrs")
        | ("storage.k8s.io", "volumeattachments")
        | ("certificates.k8s.io", "certificatesigningrequests")
        | ("flowcontrol.apiserver.k8s.io", "flowschemas" | "prioritylevelconfigurations")
        | ("resource.k8s.io", "resourceclaims")
        | ("apiextensions.k8s.io", "customresourcedefinitions") => &["spec", "status"],
        ("", "limitranges") | ("coordination.k8s.io", "leases") | ("networking.k8s.io", "ingressclasses" | "networkpolicies" | "ipaddresses") | ("storage.k8s.io", "csidrivers" | "csinodes") | ("resource.k8s.io", "deviceclasses" | "resourceclaimtemplates" | "resourceslices") => &["spec"],
        ("", "podtemplates") => &["template"],
        _ => &[],
    }
}

/// Gives the object the fields upstream always serializes where unset, as a Go round trip of
/// the stored object would: empty value structs (`spec: {}`, `status: {}`), zero status scalars,
/// a Service's `loadBalancer: {}`. Strict clients (the Python client's models, kr8s) require
/// them.
pub fn zero_status(info: &ResourceInfo, obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    for field in value_struct_fields(info) {
        if o.get(*field).is_none_or(Value::is_null) {
            o.insert((*field).to_owned(), json!({}));
        }
    }
    if (info.group.as_str(), info.plural.as_str()) == ("", "services") {
        // LoadBalancerStatus is a struct, which Go's encoder never omits.
        let status = o.entry("status").or_insert_with(|| json!({}));
        if let Some(s) = status.as_object_mut() {
            s.entry("loadBalancer").or_insert_with(|| json!({}));
        }
        return;
    }
    if (info.group.as_str(), info.plural.as_str()) == ("", "nodes") {
        // NodeStatus's value structs: the kubelet endpoint and the system info, every field of
        // which Go writes (strings without omitempty).
        let status = o.entry("status").or_insert_with(|| json!({}));
        if let Some(s) = status.as_object_mut() {
            let endpoint = s.entry("daemonEndpoints").or_insert_with(|| json!({})).as_object_mut().map(|d| d.entry("kubeletEndpoint").or_insert_with(|| json!({})));
            if let Some(e) = endpoint.and_then(Value::as_object_mut) {
                e.entry("Port").or_insert(json!(0));
            }
            if let Some(n) = s.entry("nodeInfo").or_insert_with(|| json!({})).as_object_mut() {
                for f in NODE_INFO_FIELDS {
                    n.entry(f).or_insert(json!(""));
                }
            }
        }
        return;
    }
    let fields = zero_status_fields(info);
    if fields.is_empty() {
        return;
    }
    let status = o.entry("status").or_insert_with(|| json!({}));
    if let Some(s) = status.as_object_mut() {
        for (f, zero) in fields {
            s.entry(*f).or_insert_with(|| zero.value());
        }
    }
}

/// Job's generated selector (upstream's `generateSelector`, on create unless `manualSelector`):
/// the template carries the controller-uid and job-name labels, the selector matches the uid.
pub fn generate_job_selector(obj: &mut Value) {
    if obj.pointer("/spec/manualSelector") == Some(&Value::Bool(true)) {
        return;
    }
    let uid = obj.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("").to_owned();
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_owned();
    for (k, v) in [("batch.kubernetes.io/controller-uid", &uid), ("batch.kubernetes.io/job-name", &name), ("controller-uid", &uid), ("job-name", &name)] {
        default_at(obj, &["spec", "template", "metadata", "labels", k], json!(v));
    }
    if obj.pointer("/spec/selector").is_none_or(Value::is_null) {
        default_at(obj, &["spec", "selector", "matchLabels", "batch.kubernetes.io/controller-uid"], json!(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{builtin_resources, find};

    #[test]
    fn deployment_and_pod_template_defaults() {
        let all = builtin_resources();
        let mut d = json!({"spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}, {"name": "d", "image": "reg:5000/app:1.2"}]}}}});
        set_defaults(find(&all, "apps", "v1", "deployments").unwrap(), &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["strategy"], json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}));
        let c = &d["spec"]["template"]["spec"]["containers"];
        assert_eq!((&c[0]["imagePullPolicy"], &c[1]["imagePullPolicy"]), (&json!("Always"), &json!("IfNotPresent")));
        assert_eq!(c[0]["ports"][0]["protocol"], "TCP");
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
        // Explicit values are kept.
        let mut r = json!({"spec": {"replicas": 0, "strategy": {"type": "Recreate"}}});
        set_defaults(find(&all, "apps", "v1", "deployments").unwrap(), &mut r);
        assert_eq!((&r["spec"]["replicas"], &r["spec"]["strategy"]), (&json!(0), &json!({"type": "Recreate"})));
    }

    #[test]
    fn service_and_job_defaults() {
        let all = builtin_resources();
        let mut s = json!({"spec": {"ports": [{"port": 80}]}});
        set_defaults(find(&all, "", "v1", "services").unwrap(), &mut s);
        assert_eq!(s["spec"]["ports"][0], json!({"port": 80, "protocol": "TCP", "targetPort": 80}));
        assert_eq!((&s["spec"]["type"], &s["spec"]["sessionAffinity"]), (&json!("ClusterIP"), &json!("None")));
        let mut j = json!({"metadata": {"name": "j", "uid": "u1"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": []}}}});
        set_defaults(find(&all, "batch", "v1", "jobs").unwrap(), &mut j);
        generate_job_selector(&mut j);
        assert_eq!((&j["spec"]["completions"], &j["spec"]["parallelism"], &j["spec"]["backoffLimit"]), (&json!(1), &json!(1), &json!(6)));
        assert_eq!(j["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"], "u1");
        assert_eq!(j["spec"]["template"]["metadata"]["labels"]["job-name"], "j");
        assert_eq!(j["spec"]["template"]["spec"]["restartPolicy"], "Never");
    }

    #[test]
    fn defaults_of_the_cluster_kinds_as_upstream_sets_them() {
        let all = builtin_resources();
        let apply = |group: &str, version: &str, plural: &str, mut obj: Value| {
            set_defaults(find(&all, group, version, plural).unwrap(), &mut obj);
            obj
        };
        let hpa = apply("autoscaling", "v2", "horizontalpodautoscalers", json!({"spec": {"maxReplicas": 3, "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}}));
        assert_eq!(hpa["spec"]["minReplicas"], 1);
        assert_eq!(hpa["spec"]["metrics"][0]["resource"]["target"], json!({"type": "Utilization", "averageUtilization": 80}));
        assert_eq!(hpa["spec"]["behavior"]["scaleUp"]["policies"].as_array().unwrap().len(), 2);
        assert_eq!(hpa["spec"]["behavior"]["scaleDown"], json!({"stabilizationWindowSeconds": 60, "selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}));
        // Without behavior, none is made up.
        assert!(apply("autoscaling", "v2", "horizontalpodautoscalers", json!({"spec": {"maxReplicas": 3}}))["spec"].get("behavior").is_none());
        let np = apply("networking.k8s.io", "v1", "networkpolicies", json!({"spec": {"podSelector": {}, "egress": [{"ports": [{"port": 53}]}]}}));
        assert_eq!((&np["spec"]["policyTypes"], &np["spec"]["egress"][0]["ports"][0]["protocol"]), (&json!(["Ingress", "Egress"]), &json!("TCP")));
        let lr = apply("", "v1", "limitranges", json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "1Mi"}}, {"type": "Pod", "max": {"cpu": "4"}}]}}));
        assert_eq!(lr["spec"]["limits"][0]["default"], json!({"cpu": "2"}));
        assert_eq!(lr["spec"]["limits"][0]["defaultRequest"], json!({"cpu": "2", "memory": "1Mi"}));
        assert!(lr["spec"]["limits"][1].get("default").is_none(), "only Container items");
        let rb = apply("rbac.authorization.k8s.io", "v1", "rolebindings", json!({"roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "s", "namespace": "n"}]}));
        assert_eq!((&rb["roleRef"]["apiGroup"], &rb["subjects"][0]["apiGroup"], &rb["subjects"][1]["apiGroup"]), (&json!("rbac.authorization.k8s.io"), &json!("rbac.authorization.k8s.io"), &json!("")));
        let plc = apply("flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations", json!({"spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue", "queuing": {"queues": 0}}}}}));
        assert_eq!(plc["spec"]["limited"], json!({"nominalConcurrencyShares": 30, "lendablePercent": 0, "limitResponse": {"type": "Queue", "queuing": {"queues": 64, "handSize": 8, "queueLengthLimit": 50}}}));
        let csi = apply("storage.k8s.io", "v1", "csidrivers", json!({"spec": {"attachRequired": false}}));
        assert_eq!((&csi["spec"]["attachRequired"], &csi["spec"]["volumeLifecycleModes"]), (&json!(false), &json!(["Persistent"])));
        let pv = apply("", "v1", "persistentvolumes", json!({"spec": {"capacity": {"storage": "1Gi"}, "hostPath": {"path": "/x"}}}));
        assert_eq!((&pv["spec"]["persistentVolumeReclaimPolicy"], &pv["status"]["phase"], &pv["spec"]["hostPath"]["type"]), (&json!("Retain"), &json!("Pending"), &json!("")));
        let node = apply("", "v1", "nodes", json!({"status": {"capacity": {"cpu": "4"}}}));
        assert_eq!(node["status"]["allocatable"], json!({"cpu": "4"}));
        let cj = apply("batch", "v1", "cronjobs", json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}}}));
        assert_eq!((&cj["spec"]["concurrencyPolicy"], &cj["spec"]["successfulJobsHistoryLimit"]), (&json!("Allow"), &json!(3)));
        assert_eq!(cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"], "Always");
        assert!(cj["spec"]["jobTemplate"]["spec"].get("backoffLimit").is_none());
    }
}
