//! Pod specs wherever they appear (pods, pod templates, workloads' templates): upstream's
//! `ValidatePodSpec` rules clients meet first (containers, their names, images and ports, their
//! probes and resources ([`super::containers`]), security contexts and affinity
//! ([`super::placement`]), volumes, the restart and DNS policies), and on
//! a pod update the fields that may change
//! (ephemeral containers only added, through their subresource).

use super::errors::{duplicate, forbidden, invalid, invalid_shown, not_supported, port_number, required};
use crate::meta;
use crate::status::StatusCause;
use serde_json::Value;
use std::collections::HashSet;

const RESTART_POLICIES: [&str; 3] = ["Always", "OnFailure", "Never"];
const DNS_POLICIES: [&str; 4] = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const PULL_POLICIES: [&str; 3] = ["Always", "IfNotPresent", "Never"];

/// What upstream says when a pod update changes more than it may (without the diff of the two
/// specs it appends).
pub const POD_UPDATE_FORBIDDEN: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

fn label(field: &str, name: &str, causes: &mut Vec<StatusCause>) {
    if let Err(e) = meta::validate_dns1123_label(name) {
        causes.push(invalid_shown(field, &format!("{name:?}"), &e));
    }
}

/// The rules on one pod spec at `path` (`spec`, `spec.template.spec`, …).
pub fn validate_spec(spec: Option<&Value>, path: &str, causes: &mut Vec<StatusCause>) {
    let Some(spec) = spec.filter(|s| s.is_object()) else {
        causes.push(required(&format!("{path}.containers")));
        return;
    };
    let mut volumes = HashSet::new();
    for (i, v) in spec.get("volumes").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let at = format!("{path}.volumes[{i}].name");
        match v.get("name").and_then(Value::as_str).unwrap_or("") {
            "" => causes.push(required(&at)),
            name => {
                label(&at, name, causes);
                if !volumes.insert(name.to_owned()) {
                    causes.push(duplicate(&at, name));
                }
            }
        }
    }
    let mut names = HashSet::new();
    let containers = spec.get("containers").and_then(Value::as_array).filter(|c| !c.is_empty());
    if containers.is_none() {
        causes.push(required(&format!("{path}.containers")));
    }
    for field in ["initContainers", "containers"] {
        for (i, c) in spec.get(field).and_then(Value::as_array).into_iter().flatten().enumerate() {
            let at = format!("{path}.{field}[{i}]");
            validate_container(c, &at, &mut names, causes);
            volume_mounts(c, &at, &volumes, causes);
        }
    }
    for (field, allowed) in [("restartPolicy", &RESTART_POLICIES[..]), ("dnsPolicy", &DNS_POLICIES[..])] {
        if let Some(v) = spec.get(field).and_then(Value::as_str).filter(|v| !allowed.contains(v)) {
            causes.push(not_supported(&format!("{path}.{field}"), v, allowed));
        }
    }
    if let Some(d) = spec.get("activeDeadlineSeconds").filter(|d| d.as_i64().is_some_and(|n| n < 1)) {
        causes.push(invalid(&format!("{path}.activeDeadlineSeconds"), d, "must be between 1 and 2147483647, inclusive"));
    }
    super::placement::pod_security_context(spec, path, causes);
    super::placement::affinity(spec, path, causes);
}

/// A container's mounts: each names one of the pod's volumes and a path no other mount uses.
fn volume_mounts(c: &Value, at: &str, volumes: &HashSet<String>, causes: &mut Vec<StatusCause>) {
    let mut paths = HashSet::new();
    for (j, m) in c.get("volumeMounts").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let mat = format!("{at}.volumeMounts[{j}]");
        let name = m.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            causes.push(required(&format!("{mat}.name")));
        }
        if !volumes.contains(name) {
            causes.push(crate::status::cause("FieldValueNotFound", &format!("{mat}.name"), format!("Not found: {name:?}")));
        }
        let mount_path = m.get("mountPath").and_then(Value::as_str).unwrap_or("");
        if mount_path.is_empty() {
            causes.push(required(&format!("{mat}.mountPath")));
        }
        if !paths.insert(mount_path) {
            causes.push(invalid(&format!("{mat}.mountPath"), &Value::from(mount_path), "must be unique"));
        }
    }
}

fn validate_container(c: &Value, at: &str, names: &mut HashSet<String>, causes: &mut Vec<StatusCause>) {
    match c.get("name").and_then(Value::as_str).unwrap_or("") {
        "" => causes.push(required(&format!("{at}.name"))),
        name => {
            label(&format!("{at}.name"), name, causes);
            if !names.insert(name.to_owned()) {
                causes.push(duplicate(&format!("{at}.name"), name));
            }
        }
    }
    if c.get("image").and_then(Value::as_str).unwrap_or("").is_empty() {
        causes.push(required(&format!("{at}.image")));
    }
    if let Some(p) = c.get("imagePullPolicy").and_then(Value::as_str).filter(|p| !PULL_POLICIES.contains(p)) {
        causes.push(not_supported(&format!("{at}.imagePullPolicy"), p, &PULL_POLICIES));
    }
    super::containers::validate(c, at, causes);
    super::placement::container_security_context(c, at, causes);
    let mut port_names = HashSet::new();
    for (j, p) in c.get("ports").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let pat = format!("{at}.ports[{j}]");
        match p.get("containerPort") {
            None | Some(Value::Null) => causes.push(required(&format!("{pat}.containerPort"))),
            Some(v) => causes.extend(port_number(&format!("{pat}.containerPort"), v)),
        }
        if let Some(hp) = p.get("hostPort").filter(|v| v.as_i64().is_some_and(|n| n != 0)) {
            causes.extend(port_number(&format!("{pat}.hostPort"), hp));
        }
        if let Some(name) = p.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            for why in super::errors::port_name_errors(name) {
                causes.push(invalid(&format!("{pat}.name"), &Value::from(name), why));
            }
            if !port_names.insert(name.to_owned()) {
                causes.push(duplicate(&format!("{pat}.name"), name));
            }
        }
        if let Some(proto) = p.get("protocol").and_then(Value::as_str).filter(|v| !PROTOCOLS.contains(v)) {
            causes.push(not_supported(&format!("{pat}.protocol"), proto, &PROTOCOLS));
        }
    }
}

/// A pod's spec as the fields that may not change see it: images, the deadline, the grace
/// period, scheduling gates and tolerations (checked apart: they may only be added) left out.
fn immutable_view(spec: &Value) -> Value {
    let mut s = spec.clone();
    if let Some(o) = s.as_object_mut() {
        for field in ["activeDeadlineSeconds", "terminationGracePeriodSeconds", "schedulingGates", "tolerations", "ephemeralContainers"] {
            o.remove(field);
        }
    }
    for field in ["containers", "initContainers"] {
        for c in s.get_mut(field).and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(c) = c.as_object_mut() {
                c.remove("image");
            }
        }
    }
    s
}

/// A pod update may change only what upstream lets it.
pub fn validate_pod_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let (o, n) = (old.get("spec").cloned().unwrap_or(Value::Null), new.get("spec").cloned().unwrap_or(Value::Null));
    let tolerations = |s: &Value| s.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    let (was, is) = (tolerations(&o), tolerations(&n));
    if immutable_view(&o) != immutable_view(&n) || !was.iter().all(|t| is.contains(t)) {
        return vec![forbidden("spec", POD_UPDATE_FORBIDDEN)];
    }
    validate_ephemeral_update(&o, &n)
}

/// Fields an ephemeral container may not have (it runs beside the pod's, for debugging).
const NOT_FOR_EPHEMERAL: [&str; 6] = ["ports", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle", "resources"];

/// Ephemeral containers may only be added, each a valid container of its own name.
fn validate_ephemeral_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let list = |s: &Value| s.get("ephemeralContainers").and_then(Value::as_array).cloned().unwrap_or_default();
    let (was, is) = (list(old), list(new));
    let path = "spec.ephemeralContainers";
    for o in &was {
        let name = o["name"].as_str().unwrap_or("");
        match is.iter().find(|n| n["name"] == o["name"]) {
            None => causes.push(forbidden(path, &format!("existing ephemeral containers {name:?} may not be removed\n"))),
            Some(n) if n != o => causes.push(forbidden(path, &format!("existing ephemeral containers {name:?} may not be changed\n"))),
            Some(_) => {}
        }
    }
    let mut names: HashSet<String> = ["containers", "initContainers"].iter().flat_map(|f| new.get(*f).and_then(Value::as_array).into_iter().flatten()).filter_map(|c| c["name"].as_str().map(str::to_owned)).collect();
    for (i, c) in is.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if was.iter().any(|o| o["name"] == c["name"]) {
            names.insert(c["name"].as_str().unwrap_or("").to_owned());
            continue;
        }
        validate_container(c, &at, &mut names, &mut causes);
        for field in NOT_FOR_EPHEMERAL {
            if c.get(field).is_some_and(|v| !v.is_null() && v != &serde_json::json!({}) && v != &serde_json::json!([])) {
                causes.push(forbidden(&format!("{at}.{field}"), "cannot be set for an Ephemeral Container"));
            }
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_name_a_volume_of_the_pod_at_unique_paths() {
        let spec = serde_json::json!({"volumes": [{"name": "data", "emptyDir": {}}], "containers": [{"name": "c", "image": "i",
            "volumeMounts": [{"name": "data", "mountPath": "/d"}, {"name": "cache", "mountPath": "/d"}, {"name": "data"}]}]});
        let mut causes = Vec::new();
        validate_spec(Some(&spec), "spec", &mut causes);
        let got: Vec<(&str, &str)> = causes.iter().map(|c| (c.field.as_str(), c.message.as_str())).collect();
        assert_eq!(got, [
            ("spec.containers[0].volumeMounts[1].name", "Not found: \"cache\""),
            ("spec.containers[0].volumeMounts[1].mountPath", "Invalid value: \"/d\": must be unique"),
            ("spec.containers[0].volumeMounts[2].mountPath", "Required value"),
        ]);
    }
}
