//! Field defaults of the served kinds, as upstream's `SetDefaults_*` functions set them when an
//! object is decoded (so on every create and update): Pod specs (also inside every template),
//! Services, Secrets, ReplicationControllers, Deployments, ReplicaSets, StatefulSets, DaemonSets
//! and Jobs, with Job's generated selector.
//!
//! Not here: values upstream *allocates* rather than defaults (a Service's clusterIP and node
//! ports need cluster-wide allocators), and admission plugins ([`crate::admission`]).

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

/// Upstream's pull policy default: Always for `:latest` or no tag, else IfNotPresent.
fn pull_policy(image: &str) -> &'static str {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    if image.contains('@') {
        return "IfNotPresent";
    }
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn default_probe(p: &mut Value) {
    if p.is_object() {
        default_at(p, &["timeoutSeconds"], json!(1));
        default_at(p, &["periodSeconds"], json!(10));
        default_at(p, &["successThreshold"], json!(1));
        default_at(p, &["failureThreshold"], json!(3));
        if p.get("httpGet").is_some() {
            default_at(p, &["httpGet", "scheme"], json!("HTTP"));
        }
    }
}

fn default_container(c: &mut Value) {
    if !c.is_object() {
        return;
    }
    let image = c.get("image").and_then(Value::as_str).unwrap_or("").to_owned();
    default_at(c, &["terminationMessagePath"], json!("/dev/termination-log"));
    default_at(c, &["terminationMessagePolicy"], json!("File"));
    default_at(c, &["imagePullPolicy"], json!(pull_policy(&image)));
    default_at(c, &["resources"], json!({}));
    for p in each_mut(c, "ports") {
        default_at(p, &["protocol"], json!("TCP"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe) {
            default_probe(p);
        }
    }
    for e in each_mut(c, "env") {
        if let Some(f) = e.pointer_mut("/valueFrom/fieldRef") {
            default_at(f, &["apiVersion"], json!("v1"));
        }
    }
}

/// Defaults of a PodSpec (a Pod's, or a template's).
pub fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default_at(spec, &["dnsPolicy"], json!("ClusterFirst"));
    default_at(spec, &["restartPolicy"], json!("Always"));
    default_at(spec, &["terminationGracePeriodSeconds"], json!(30));
    default_at(spec, &["securityContext"], json!({}));
    default_at(spec, &["schedulerName"], json!("default-scheduler"));
    default_at(spec, &["enableServiceLinks"], json!(true));
    for field in ["containers", "initContainers"] {
        for c in each_mut(spec, field) {
            default_container(c);
        }
    }
    for v in each_mut(spec, "volumes") {
        for source in ["configMap", "secret", "downwardAPI", "projected"] {
            if let Some(s) = v.get_mut(source).filter(|s| s.is_object()) {
                default_at(s, &["defaultMode"], json!(420));
            }
        }
    }
}

fn default_template(obj: &mut Value) {
    if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
        default_pod_spec(spec);
    }
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
        ("", "Service") => {
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
        ("", "Secret") => default_at(obj, &["type"], json!("Opaque")),
        ("", "Endpoints") => {
            for subset in each_mut(obj, "subsets") {
                for p in each_mut(subset, "ports") {
                    default_at(p, &["protocol"], json!("TCP"));
                }
            }
        }
        ("", "ReplicationController") => {
            let labels = obj.pointer("/spec/template/metadata/labels").cloned();
            if let Some(l) = labels.filter(|l| l.as_object().is_some_and(|m| !m.is_empty())) {
                default_at(obj, &["spec", "selector"], l.clone());
                if obj.pointer("/metadata/labels").and_then(Value::as_object).is_none_or(|m| m.is_empty()) {
                    obj["metadata"]["labels"] = l;
                }
            }
            default_at(obj, &["spec", "replicas"], json!(1));
            default_template(obj);
        }
        ("apps", "Deployment") => {
            default_at(obj, &["spec", "replicas"], json!(1));
            default_at(obj, &["spec", "strategy", "type"], json!("RollingUpdate"));
            if obj.pointer("/spec/strategy/type") == Some(&json!("RollingUpdate")) {
                default_at(obj, &["spec", "strategy", "rollingUpdate", "maxUnavailable"], json!("25%"));
                default_at(obj, &["spec", "strategy", "rollingUpdate", "maxSurge"], json!("25%"));
            }
            default_at(obj, &["spec", "revisionHistoryLimit"], json!(10));
            default_at(obj, &["spec", "progressDeadlineSeconds"], json!(600));
            default_template(obj);
        }
        ("apps", "ReplicaSet") => {
            default_at(obj, &["spec", "replicas"], json!(1));
            default_template(obj);
        }
        ("apps", "StatefulSet") => {
            default_at(obj, &["spec", "replicas"], json!(1));
            default_at(obj, &["spec", "podManagementPolicy"], json!("OrderedReady"));
            default_at(obj, &["spec", "updateStrategy", "type"], json!("RollingUpdate"));
            if obj.pointer("/spec/updateStrategy/type") == Some(&json!("RollingUpdate")) {
                default_at(obj, &["spec", "updateStrategy", "rollingUpdate", "partition"], json!(0));
            }
            default_at(obj, &["spec", "revisionHistoryLimit"], json!(10));
            default_at(obj, &["spec", "persistentVolumeClaimRetentionPolicy", "whenDeleted"], json!("Retain"));
            default_at(obj, &["spec", "persistentVolumeClaimRetentionPolicy", "whenScaled"], json!("Retain"));
            default_template(obj);
        }
        ("apps", "DaemonSet") => {
            default_at(obj, &["spec", "updateStrategy", "type"], json!("RollingUpdate"));
            if obj.pointer("/spec/updateStrategy/type") == Some(&json!("RollingUpdate")) {
                default_at(obj, &["spec", "updateStrategy", "rollingUpdate", "maxUnavailable"], json!(1));
                default_at(obj, &["spec", "updateStrategy", "rollingUpdate", "maxSurge"], json!(0));
            }
            default_at(obj, &["spec", "revisionHistoryLimit"], json!(10));
            default_template(obj);
        }
        ("batch", "Job") => {
            if obj.get("spec").is_some() {
                let has = |o: &Value, p: &str| o.pointer(p).is_some_and(|v| !v.is_null());
                if !has(obj, "/spec/completions") && !has(obj, "/spec/parallelism") {
                    default_at(obj, &["spec", "completions"], json!(1));
                }
                default_at(obj, &["spec", "parallelism"], json!(1));
                let backoff = if has(obj, "/spec/backoffLimitPerIndex") { json!(i32::MAX) } else { json!(6) };
                default_at(obj, &["spec", "backoffLimit"], backoff);
                default_at(obj, &["spec", "completionMode"], json!("NonIndexed"));
                default_at(obj, &["spec", "suspend"], json!(false));
                let policy = if has(obj, "/spec/podFailurePolicy") { "Failed" } else { "TerminatingOrFailed" };
                default_at(obj, &["spec", "podReplacementPolicy"], json!(policy));
            }
            default_template(obj);
        }
        _ => {}
    }
}

/// The status fields upstream's Go types serialize even at zero (no `omitempty`), by kind.
fn zero_status_fields(info: &ResourceInfo) -> &'static [&'static str] {
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "replicationcontrollers") | ("apps", "replicasets") => &["replicas"],
        ("apps", "statefulsets") => &["replicas", "availableReplicas"],
        ("apps", "daemonsets") => &["currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady"],
        _ => &[],
    }
}

/// Gives the object the status fields upstream always serializes (zero scalars, a Service's
/// `loadBalancer: {}`) where unset, as a Go round trip of the stored object would: strict
/// clients (the Python client's models) require them.
pub fn zero_status(info: &ResourceInfo, obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    if (info.group.as_str(), info.plural.as_str()) == ("", "services") {
        // LoadBalancerStatus is a struct, which Go's encoder never omits.
        let status = o.entry("status").or_insert_with(|| json!({}));
        if let Some(s) = status.as_object_mut() {
            s.entry("loadBalancer").or_insert_with(|| json!({}));
        }
        return;
    }
    let fields = zero_status_fields(info);
    if fields.is_empty() {
        return;
    }
    let status = o.entry("status").or_insert_with(|| json!({}));
    if let Some(s) = status.as_object_mut() {
        for f in fields {
            s.entry(*f).or_insert_with(|| json!(0));
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
}
