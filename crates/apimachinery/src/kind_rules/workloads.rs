//! Workloads (deployments, replica sets, stateful sets, daemon sets, replication controllers,
//! jobs, cron jobs) and controller revisions: their selectors, templates and counts, and the fields an update may not
//! change, as upstream's `apps`, `batch` and core validation words them.

use super::errors::{forbidden, go_label_selector, go_string_map, invalid_shown, not_supported, required, selector_is_empty, selector_matches};
use super::fields::{self, immutable};
use super::pods;
use crate::status::{cause, StatusCause};
use serde_json::Value;

/// What upstream says of a stateful set update that changes other fields.
pub const STATEFULSET_UPDATE_FORBIDDEN: &str = "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

fn non_negative(spec: &Value, field: &str, path: &str, causes: &mut Vec<StatusCause>) {
    fields::non_negative(&format!("{path}.{field}"), spec.get(field), causes);
}

/// A workload with a label selector and a pod template (apps/v1 kinds, jobs).
fn selector_and_template(spec: &Value, path: &str, restart: Option<&[&str]>, causes: &mut Vec<StatusCause>) {
    let template_labels = spec.pointer("/template/metadata/labels");
    match spec.get("selector").filter(|s| s.is_object()) {
        None => causes.push(required(&format!("{path}.selector"))),
        Some(sel) if selector_is_empty(sel) => causes.push(invalid_shown(&format!("{path}.selector"), &go_label_selector(sel), "empty selector is invalid for deployment")),
        Some(sel) if !selector_matches(sel, template_labels) => {
            causes.push(invalid_shown(&format!("{path}.template.metadata.labels"), &go_string_map(template_labels), "`selector` does not match template `labels`"));
        }
        Some(_) => {}
    }
    template(spec, path, restart, causes);
}

fn template(spec: &Value, path: &str, restart: Option<&[&str]>, causes: &mut Vec<StatusCause>) {
    let Some(t) = spec.get("template").filter(|t| t.is_object()) else {
        causes.push(required(&format!("{path}.template")));
        return;
    };
    let tpath = format!("{path}.template.spec");
    pods::validate_spec(t.get("spec"), &tpath, causes);
    if let (Some(allowed), Some(policy)) = (restart, t.pointer("/spec/restartPolicy").and_then(Value::as_str))
        && !allowed.contains(&policy)
    {
        causes.push(not_supported(&format!("{tpath}.restartPolicy"), policy, allowed));
    }
}

/// The rules on one workload object of `plural` in `group`.
pub(super) fn validate(group: &str, plural: &str, obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    const ALWAYS: &[&str] = &["Always"];
    match (group, plural) {
        ("apps", "deployments") => {
            non_negative(&spec, "replicas", "spec", &mut causes);
            selector_and_template(&spec, "spec", Some(ALWAYS), &mut causes);
            if let Some(t) = spec.pointer("/strategy/type").and_then(Value::as_str).filter(|t| !["Recreate", "RollingUpdate"].contains(t)) {
                causes.push(not_supported("spec.strategy.type", t, &["Recreate", "RollingUpdate"]));
            }
        }
        ("apps", "replicasets" | "statefulsets") => {
            non_negative(&spec, "replicas", "spec", &mut causes);
            selector_and_template(&spec, "spec", Some(ALWAYS), &mut causes);
        }
        ("apps", "daemonsets") => selector_and_template(&spec, "spec", Some(ALWAYS), &mut causes),
        ("", "replicationcontrollers") => {
            non_negative(&spec, "replicas", "spec", &mut causes);
            // A controller's selector is a plain label map, defaulted from its template's labels.
            let selector = spec.get("selector").and_then(Value::as_object);
            let labels = spec.pointer("/template/metadata/labels");
            if selector.is_some_and(|s| s.iter().any(|(k, v)| labels.and_then(|l| l.get(k)) != Some(v))) {
                causes.push(invalid_shown("spec.template.metadata.labels", &go_string_map(labels), "`selector` does not match template `labels`"));
            }
            template(&spec, "spec", Some(ALWAYS), &mut causes);
        }
        ("batch", "jobs") => job_spec(&spec, "spec", &mut causes),
        ("apps", "controllerrevisions") => {
            if obj.get("data").is_none_or(Value::is_null) {
                causes.push(cause("FieldValueRequired", "data", "Required value: data is mandatory"));
            }
            fields::non_negative("revision", obj.get("revision"), &mut causes);
        }
        ("batch", "cronjobs") => {
            if spec.get("schedule").and_then(Value::as_str).unwrap_or("").is_empty() {
                causes.push(required("spec.schedule"));
            }
            if let Some(p) = spec.get("concurrencyPolicy").and_then(Value::as_str).filter(|p| !["Allow", "Forbid", "Replace"].contains(p)) {
                causes.push(not_supported("spec.concurrencyPolicy", p, &["Allow", "Forbid", "Replace"]));
            }
            job_spec(&spec.pointer("/jobTemplate/spec").cloned().unwrap_or(Value::Null), "spec.jobTemplate.spec", &mut causes);
        }
        _ => {}
    }
    causes
}

fn job_spec(spec: &Value, path: &str, causes: &mut Vec<StatusCause>) {
    for field in ["parallelism", "completions", "backoffLimit"] {
        non_negative(spec, field, path, causes);
    }
    template(spec, path, Some(&["OnFailure", "Never"]), causes);
    if spec.pointer("/template/spec/restartPolicy").is_none() && spec.get("template").is_some_and(Value::is_object) {
        // The pod default (Always) is not one a job may use.
        causes.push(not_supported(&format!("{path}.template.spec.restartPolicy"), "Always", &["OnFailure", "Never"]));
    }
}

/// The fields an update of a workload may not change.
pub(super) fn validate_update(group: &str, plural: &str, old: &Value, new: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let (o, n) = (old.get("spec").cloned().unwrap_or(Value::Null), new.get("spec").cloned().unwrap_or(Value::Null));
    match (group, plural) {
        ("apps", "deployments" | "replicasets" | "daemonsets") => immutable("spec.selector", "/spec/selector", old, new, go_label_selector, &mut causes),
        ("apps", "statefulsets") => {
            let rest = |s: &Value| {
                let mut s = s.clone();
                if let Some(m) = s.as_object_mut() {
                    for f in ["replicas", "ordinals", "template", "updateStrategy", "revisionHistoryLimit", "persistentVolumeClaimRetentionPolicy", "minReadySeconds"] {
                        m.remove(f);
                    }
                }
                s
            };
            if rest(&o) != rest(&n) {
                causes.push(forbidden("spec", STATEFULSET_UPDATE_FORBIDDEN));
            }
        }
        ("batch", "jobs") => {
            immutable("spec.selector", "/spec/selector", old, new, go_label_selector, &mut causes);
            // Upstream quotes the whole template (Go's %#v of core.PodTemplateSpec); a
            // shortened form is given here (RFC 0011).
            immutable("spec.template", "/spec/template", old, new, |_| "core.PodTemplateSpec{...}".to_owned(), &mut causes);
            immutable("spec.completions", "/spec/completions", old, new, super::errors::scalar, &mut causes);
        }
        // Upstream quotes the stored object (a `runtime.Unknown`); a shortened form is given.
        ("apps", "controllerrevisions") => immutable("data", "/data", old, new, |_| "runtime.Unknown{...}".to_owned(), &mut causes),
        _ => {}
    }
    causes
}
