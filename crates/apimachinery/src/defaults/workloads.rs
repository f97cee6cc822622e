//! Defaults of the workload kinds and their pod templates: ReplicationController, Deployment,
//! ReplicaSet, StatefulSet, DaemonSet, Job, CronJob, HorizontalPodAutoscaler.

use super::{default_at, pods::default_template};
use serde_json::{json, Value};

/// ReplicationController: its selector and labels from the template's labels, one replica.
pub(super) fn replication_controller(obj: &mut Value) {
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

/// Deployment (apps/v1).
pub(super) fn deployment(obj: &mut Value) {
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

/// ReplicaSet (apps/v1).
pub(super) fn replica_set(obj: &mut Value) {
    default_at(obj, &["spec", "replicas"], json!(1));
    default_template(obj);
}

/// StatefulSet (apps/v1).
pub(super) fn stateful_set(obj: &mut Value) {
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

/// DaemonSet (apps/v1).
pub(super) fn daemon_set(obj: &mut Value) {
    default_at(obj, &["spec", "updateStrategy", "type"], json!("RollingUpdate"));
    if obj.pointer("/spec/updateStrategy/type") == Some(&json!("RollingUpdate")) {
        default_at(obj, &["spec", "updateStrategy", "rollingUpdate", "maxUnavailable"], json!(1));
        default_at(obj, &["spec", "updateStrategy", "rollingUpdate", "maxSurge"], json!(0));
    }
    default_at(obj, &["spec", "revisionHistoryLimit"], json!(10));
    default_template(obj);
}

/// Job (batch/v1).
pub(super) fn job(obj: &mut Value) {
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

/// CronJob (batch/v1): the policy and history limits; the job template's pod spec as every
/// template's (the template's JobSpec itself is not defaulted, as upstream's defaulters do not
/// reach it).
pub(super) fn cron_job(obj: &mut Value) {
    if obj.get("spec").is_some() {
        default_at(obj, &["spec", "concurrencyPolicy"], json!("Allow"));
        default_at(obj, &["spec", "suspend"], json!(false));
        default_at(obj, &["spec", "successfulJobsHistoryLimit"], json!(3));
        default_at(obj, &["spec", "failedJobsHistoryLimit"], json!(1));
    }
    if let Some(spec) = obj.pointer_mut("/spec/jobTemplate/spec/template/spec") {
        super::pods::default_pod_spec(spec);
    }
}

/// HorizontalPodAutoscaler (autoscaling/v2): one replica at least, 80% CPU when no metric is
/// named, and, when `behavior` is given, upstream's scale-up and scale-down rules for what it
/// leaves out.
pub(super) fn horizontal_pod_autoscaler(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else { return };
    default_at(spec, &["minReplicas"], json!(1));
    if spec.get("metrics").and_then(Value::as_array).is_none_or(|m| m.is_empty()) {
        spec["metrics"] = json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]);
    }
    if let Some(behavior) = spec.get_mut("behavior").filter(|b| b.is_object()) {
        let up = json!([{"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]);
        let down = json!([{"type": "Percent", "value": 100, "periodSeconds": 15}]);
        for (direction, window, policies) in [("scaleUp", Some(0), up), ("scaleDown", None, down)] {
            default_at(behavior, &[direction, "selectPolicy"], json!("Max"));
            default_at(behavior, &[direction, "policies"], policies);
            if let Some(w) = window {
                default_at(behavior, &[direction, "stabilizationWindowSeconds"], json!(w));
            }
        }
    }
}
