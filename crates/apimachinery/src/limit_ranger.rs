//! Upstream's LimitRanger admission plugin (on by default), as a decision over the namespace's
//! LimitRanges: a new pod's containers get the ranges' default limits and requests (noted in the
//! `kubernetes.io/limit-ranger` annotation), then every container, the pod as a whole and a
//! claim's storage request are checked against the ranges' min, max and max limit/request
//! ratio. Messages are upstream's; quantities are printed in upstream's canonical form.

use crate::quantity::Quantity;
use serde_json::{json, Map, Value};

/// The annotation that says what the plugin set.
pub const ANNOTATION: &str = "kubernetes.io/limit-ranger";

fn items<'a>(ranges: &'a [&'a Value], ty: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    ranges.iter().flat_map(|r| r.pointer("/spec/limits").and_then(Value::as_array).into_iter().flatten()).filter(move |i| i["type"] == ty)
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => Quantity::parse(s).map_or_else(|| s.clone(), |q| q.canonical()),
        other => other.to_string(),
    }
}

fn nanos(v: Option<&Value>) -> Option<i128> {
    match v? {
        Value::String(s) => Quantity::parse(s).map(|q| q.nanos),
        Value::Number(n) => n.as_f64().map(|f| (f * 1e9) as i128),
        _ => None,
    }
}

/// The defaults of the namespace's Container ranges applied to each container that lacks them.
pub fn apply_defaults(pod: &mut Value, ranges: &[&Value]) {
    let mut limits = Map::new();
    let mut requests = Map::new();
    for item in items(ranges, "Container") {
        for (into, from) in [(&mut limits, "default"), (&mut requests, "defaultRequest")] {
            if let Some(m) = item.get(from).and_then(Value::as_object) {
                into.extend(m.clone());
            }
        }
    }
    if limits.is_empty() && requests.is_empty() {
        return;
    }
    let mut notes: Vec<String> = Vec::new();
    for (field, what) in [("containers", "container"), ("initContainers", "init container")] {
        for c in pod.pointer_mut(&format!("/spec/{field}")).and_then(Value::as_array_mut).into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or("").to_owned();
            let Some(c) = c.as_object_mut() else { continue };
            let resources = c.entry("resources").or_insert_with(|| json!({}));
            let mut set = |key: &str, defaults: &Map<String, Value>| -> Vec<String> {
                let mut added = Vec::new();
                if defaults.is_empty() {
                    return added;
                }
                let Some(list) = resources.as_object_mut().map(|r| r.entry(key).or_insert_with(|| json!({}))).and_then(Value::as_object_mut) else { return added };
                for (k, v) in defaults {
                    if !list.contains_key(k) {
                        list.insert(k.clone(), v.clone());
                        added.push(k.clone());
                    }
                }
                added.sort();
                added
            };
            let set_limits = set("limits", &limits);
            let set_requests = set("requests", &requests);
            if !set_requests.is_empty() {
                notes.push(format!("{} request for {what} {name}", set_requests.join(", ")));
            }
            if !set_limits.is_empty() {
                notes.push(format!("{} limit for {what} {name}", set_limits.join(", ")));
            }
        }
    }
    if !notes.is_empty() {
        let meta = crate::meta::metadata_mut(pod);
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(ANNOTATION.into(), Value::String(format!("LimitRanger plugin set: {}", notes.join("; "))));
        }
    }
}

/// One resource's request and limit as a container (or a pod, summed) has them.
struct Usage<'a> {
    requests: &'a Map<String, Value>,
    limits: &'a Map<String, Value>,
}

fn min_constraint(kind: &str, resource: &str, enforced: &Value, u: &Usage) -> Option<String> {
    let want = nanos(Some(enforced))?;
    let Some(req) = u.requests.get(resource) else { return Some(format!("minimum {resource} usage per {kind} is {}.  No request is specified", text(enforced))) };
    if nanos(Some(req)).is_some_and(|r| r < want) {
        return Some(format!("minimum {resource} usage per {kind} is {}, but request is {}", text(enforced), text(req)));
    }
    let lim = u.limits.get(resource)?;
    nanos(Some(lim)).is_some_and(|l| l < want).then(|| format!("minimum {resource} usage per {kind} is {}, but limit is {}", text(enforced), text(lim)))
}

fn max_constraint(kind: &str, resource: &str, enforced: &Value, u: &Usage) -> Option<String> {
    let want = nanos(Some(enforced))?;
    let Some(lim) = u.limits.get(resource) else { return Some(format!("maximum {resource} usage per {kind} is {}.  No limit is specified", text(enforced))) };
    if nanos(Some(lim)).is_some_and(|l| l > want) {
        return Some(format!("maximum {resource} usage per {kind} is {}, but limit is {}", text(enforced), text(lim)));
    }
    let req = u.requests.get(resource)?;
    nanos(Some(req)).is_some_and(|r| r > want).then(|| format!("maximum {resource} usage per {kind} is {}, but request is {}", text(enforced), text(req)))
}

fn ratio_constraint(kind: &str, resource: &str, enforced: &Value, u: &Usage) -> Option<String> {
    let want = nanos(Some(enforced))?;
    let req = nanos(u.requests.get(resource)).filter(|r| *r != 0);
    let lim = nanos(u.limits.get(resource)).filter(|l| *l != 0);
    let Some(req) = req else { return Some(format!("{resource} max limit to request ratio per {kind} is {}, but no request is specified or request is 0", text(enforced))) };
    let Some(lim) = lim else { return Some(format!("{resource} max limit to request ratio per {kind} is {}, but no limit is specified or limit is 0", text(enforced))) };
    let observed = lim as f64 / req as f64;
    (observed * 1e9 > want as f64).then(|| format!("{resource} max limit to request ratio per {kind} is {}, but provided ratio is {observed:.6}", text(enforced)))
}

fn check(kind: &str, item: &Value, u: &Usage, errors: &mut Vec<String>) {
    for (field, rule) in [("min", min_constraint as fn(&str, &str, &Value, &Usage) -> Option<String>), ("max", max_constraint), ("maxLimitRequestRatio", ratio_constraint)] {
        for (resource, enforced) in item.get(field).and_then(Value::as_object).into_iter().flatten() {
            errors.extend(rule(kind, resource, enforced, u));
        }
    }
}

fn resources<'a>(c: &'a Value, key: &str) -> &'a Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    c.pointer(&format!("/resources/{key}")).and_then(Value::as_object).unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

/// The pod's total of each resource: the containers' sum, or an init container's own figure
/// when larger (init containers run one at a time), plus the pod overhead.
fn pod_total(pod: &Value, key: &str) -> Map<String, Value> {
    let mut total: std::collections::BTreeMap<String, i128> = Default::default();
    for c in pod.pointer("/spec/containers").and_then(Value::as_array).into_iter().flatten() {
        for (k, v) in resources(c, key) {
            *total.entry(k.clone()).or_default() += nanos(Some(v)).unwrap_or(0);
        }
    }
    for c in pod.pointer("/spec/initContainers").and_then(Value::as_array).into_iter().flatten() {
        for (k, v) in resources(c, key) {
            let n = nanos(Some(v)).unwrap_or(0);
            let e = total.entry(k.clone()).or_default();
            *e = (*e).max(n);
        }
    }
    for (k, v) in pod.pointer("/spec/overhead").and_then(Value::as_object).into_iter().flatten() {
        *total.entry(k.clone()).or_default() += nanos(Some(v)).unwrap_or(0);
    }
    total
        .into_iter()
        .map(|(k, n)| {
            let binary = k == "memory" || k.contains("storage");
            (k, Value::String(Quantity { nanos: n, binary }.canonical()))
        })
        .collect()
}

/// The reason a pod breaks a range of its namespace, upstream's aggregate of every broken rule.
pub fn validate_pod(pod: &Value, ranges: &[&Value]) -> Result<(), String> {
    let mut errors = Vec::new();
    let (requests, limits) = (pod_total(pod, "requests"), pod_total(pod, "limits"));
    // In the ranges' order, item by item, as upstream checks them.
    for item in ranges.iter().flat_map(|r| r.pointer("/spec/limits").and_then(Value::as_array).into_iter().flatten()) {
        match item["type"].as_str() {
            Some("Container") => {
                for field in ["containers", "initContainers"] {
                    for c in pod.pointer(&format!("/spec/{field}")).and_then(Value::as_array).into_iter().flatten() {
                        check("Container", item, &Usage { requests: resources(c, "requests"), limits: resources(c, "limits") }, &mut errors);
                    }
                }
            }
            Some("Pod") => check("Pod", item, &Usage { requests: &requests, limits: &limits }, &mut errors),
            _ => {}
        }
    }
    aggregate(errors)
}

/// The reason a claim's storage request breaks a PersistentVolumeClaim range, if it does.
pub fn validate_claim(claim: &Value, ranges: &[&Value]) -> Result<(), String> {
    let mut errors = Vec::new();
    let empty = Map::new();
    let requests = claim.pointer("/spec/resources/requests").and_then(Value::as_object).unwrap_or(&empty);
    for item in items(ranges, "PersistentVolumeClaim") {
        for (resource, enforced) in item.get("min").and_then(Value::as_object).into_iter().flatten() {
            errors.extend(min_constraint("PersistentVolumeClaim", resource, enforced, &Usage { requests, limits: &empty }));
        }
        for (resource, enforced) in item.get("max").and_then(Value::as_object).into_iter().flatten() {
            let Some(want) = nanos(Some(enforced)) else { continue };
            match requests.get(resource) {
                None => errors.push(format!("maximum {resource} usage per PersistentVolumeClaim is {}.  No request is specified", text(enforced))),
                Some(req) if nanos(Some(req)).is_some_and(|r| r > want) => errors.push(format!("maximum {resource} usage per PersistentVolumeClaim is {}, but request is {}", text(enforced), text(req))),
                Some(_) => {}
            }
        }
    }
    aggregate(errors)
}

/// Upstream's `utilerrors.NewAggregate` text: one error as itself, several in brackets.
fn aggregate(errors: Vec<String>) -> Result<(), String> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.into_iter().next().expect("one")),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range() -> Value {
        json!({"metadata": {"name": "lr", "namespace": "d"}, "spec": {"limits": [
            {"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"}, "defaultRequest": {"cpu": "100m"}, "max": {"cpu": "1"}, "min": {"cpu": "50m"}},
            {"type": "Pod", "max": {"memory": "1Gi"}},
        ]}})
    }

    #[test]
    fn defaults_fill_what_a_container_leaves_out_and_say_so() {
        let r = range();
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, {"name": "b", "resources": {"limits": {"cpu": "800m"}}}]}});
        apply_defaults(&mut pod, &[&r]);
        assert_eq!(pod["spec"]["containers"][0]["resources"], json!({"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m"}}));
        assert_eq!(pod["spec"]["containers"][1]["resources"]["limits"], json!({"cpu": "800m", "memory": "256Mi"}));
        assert_eq!(pod["metadata"]["annotations"][ANNOTATION], "LimitRanger plugin set: cpu request for container a; cpu, memory limit for container a; cpu request for container b; memory limit for container b");
        assert_eq!(validate_pod(&pod, &[&r]), Ok(()));
    }

    #[test]
    fn limits_are_enforced_with_upstreams_messages() {
        let r = range();
        let big = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "2", "memory": "2Gi"}, "requests": {"cpu": "100m"}}}]}});
        assert_eq!(validate_pod(&big, &[&r]).unwrap_err(), "[maximum cpu usage per Container is 1, but limit is 2, maximum memory usage per Pod is 1Gi, but limit is 2Gi]");
        let small = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "500m", "memory": "1Mi"}, "requests": {"cpu": "10m"}}}]}});
        assert_eq!(validate_pod(&small, &[&r]).unwrap_err(), "minimum cpu usage per Container is 50m, but request is 10m");
        let ratio = json!({"spec": {"limits": [{"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}]}});
        let p = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "250m"}}}]}});
        assert_eq!(validate_pod(&p, &[&ratio]).unwrap_err(), "cpu max limit to request ratio per Container is 2, but provided ratio is 4.000000");
        let pvc_range = json!({"spec": {"limits": [{"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}}]}});
        let claim = json!({"spec": {"resources": {"requests": {"storage": "500Mi"}}}});
        assert_eq!(validate_claim(&claim, &[&pvc_range]).unwrap_err(), "minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi");
    }
}
