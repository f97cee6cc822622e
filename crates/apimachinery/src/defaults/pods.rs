//! Defaults of a PodSpec wherever one appears (a Pod's, a template's), and of the kinds that
//! are mostly one: Pod, PodTemplate.

use super::{default_at, each_mut};
use serde_json::{json, Value};

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

pub(super) fn default_template(obj: &mut Value) {
    if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
        default_pod_spec(spec);
    }
}

