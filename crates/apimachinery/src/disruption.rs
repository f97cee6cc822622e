//! PodDisruptionBudgets as upstream's eviction subresource and disruption controller decide them
//! (RFC 0014, "Eviction and PodDisruptionBudgets"): which budgets cover a pod ([`covers`]),
//! whether an eviction may go ahead and the budget's status after it ([`check_and_decrement`]),
//! and the status the controller keeps ([`status`]: `currentHealthy`, `desiredHealthy`,
//! `expectedPods`, `disruptionsAllowed`, `disruptedPods`, the `DisruptionAllowed` condition).
//!
//! Pure decisions over JSON objects; reading the budgets and writing them with the pod, in one
//! transaction, is the shard's.

use crate::kind_rules::errors::{selector_is_empty, selector_matches};
use crate::status::StatusCause;
use crate::ApiError;
use serde_json::{json, Map, Value};

/// How long an eviction's entry in `disruptedPods` stands for a pod that has not gone
/// (upstream's `DeletionTimeout`): the controller then counts the pod again.
pub const DELETION_TIMEOUT_SECONDS: i64 = 120;

/// At most this many evictions not yet confirmed by the controller (upstream's
/// `MaxDisruptedPodSize`); past it evictions under the budget are refused.
pub const MAX_DISRUPTED_PODS: usize = 2000;

/// Whether the pod's `Ready` condition is True.
pub fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Whether an eviction of the pod may skip the budgets: it ended, has not started, or is already
/// being deleted (upstream's `canIgnorePDB`).
pub fn can_ignore_budget(pod: &Value) -> bool {
    matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed" | "Pending")) || pod.pointer("/metadata/deletionTimestamp").is_some()
}

/// Whether the budget covers the pod for an eviction: same namespace, a selector that is not
/// empty and selects the pod's labels (an empty selector covers nothing here, as upstream's
/// eviction reads it).
pub fn covers(pdb: &Value, pod: &Value) -> bool {
    let selector = pdb.pointer("/spec/selector");
    crate::meta::meta_str(pdb, "namespace") == crate::meta::meta_str(pod, "namespace")
        && selector.is_some_and(|s| !s.is_null() && !selector_is_empty(s) && selector_matches(s, pod.pointer("/metadata/labels")))
}

/// Whether the controller counts the pod for the budget: the selector selects it (an empty
/// selector every pod of the namespace, a missing one none, as upstream's controller reads it).
pub fn counts(pdb: &Value, pod: &Value) -> bool {
    match pdb.pointer("/spec/selector") {
        None | Some(Value::Null) => false,
        Some(s) => crate::meta::meta_str(pdb, "namespace") == crate::meta::meta_str(pod, "namespace") && selector_matches(s, pod.pointer("/metadata/labels")),
    }
}

fn generation(obj: &Value) -> i64 {
    obj.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0)
}

fn status_int(pdb: &Value, field: &str) -> i64 {
    pdb.pointer(&format!("/status/{field}")).and_then(Value::as_i64).unwrap_or(0)
}

/// An int-or-string value: an integer, or a percentage of `of` (rounded up, as upstream's
/// `GetScaledValueFromIntOrPercent` with round-up).
fn scaled(v: &Value, of: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((pct * of + 99) / 100)
        }
        _ => None,
    }
}

fn is_percent(v: Option<&Value>) -> bool {
    v.is_some_and(Value::is_string)
}

/// What the budget needs of its pods' controllers: whether `expectedPods` is the controllers'
/// scale (a percentage, or `maxUnavailable`) rather than the pods' count.
pub fn needs_scale(pdb: &Value) -> bool {
    let (min, max) = (pdb.pointer("/spec/minAvailable"), pdb.pointer("/spec/maxUnavailable"));
    max.is_some_and(|m| !m.is_null()) || is_percent(min)
}

/// Sets the `DisruptionAllowed` condition as upstream's helper does (its transition time moves
/// only when its status changes).
fn set_condition(status: &mut Map<String, Value>, allowed: bool, reason: &str, message: &str, generation: i64, now: &str) {
    let wanted = if allowed { "True" } else { "False" };
    let list = status.entry("conditions").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let list = list.as_array_mut().expect("array");
    let fresh = json!({"type": "DisruptionAllowed", "status": wanted, "reason": reason, "message": message, "observedGeneration": generation, "lastTransitionTime": now});
    match list.iter_mut().find(|c| c["type"] == "DisruptionAllowed") {
        Some(c) if c["status"] == wanted => {
            c["reason"] = json!(reason);
            c["message"] = json!(message);
            c["observedGeneration"] = json!(generation);
        }
        Some(c) => *c = fresh,
        None => list.push(fresh),
    }
}

/// The status upstream's disruption controller writes for `pdb` over `pods` (the namespace's
/// pods the budget counts), at `now` (RFC 3339). `expected_scale` is the summed scale of the
/// pods' controllers where the budget needs it (`None`: a pod has no controller with a scale,
/// and the budget allows nothing, as upstream's fail-safe).
pub fn status(pdb: &Value, pods: &[&Value], expected_scale: Option<i64>, now: &str) -> Value {
    let now_at: Option<jiff::Timestamp> = now.parse().ok();
    let observed = generation(pdb);
    // Evictions not yet seen through: a pod still there, not being deleted, evicted recently.
    let mut disrupted = Map::new();
    if let Some(m) = pdb.pointer("/status/disruptedPods").and_then(Value::as_object) {
        for (name, at) in m {
            let Some(pod) = pods.iter().find(|p| crate::meta::meta_str(p, "name") == name) else { continue };
            if pod.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            let evicted: Option<jiff::Timestamp> = at.as_str().and_then(|s| s.parse().ok());
            let expired = match (evicted, now_at) {
                (Some(e), Some(n)) => n.as_second() - e.as_second() > DELETION_TIMEOUT_SECONDS,
                _ => true,
            };
            if !expired {
                disrupted.insert(name.clone(), at.clone());
            }
        }
    }
    let healthy = pods.iter().filter(|p| pod_ready(p) && p.pointer("/metadata/deletionTimestamp").is_none() && !disrupted.contains_key(crate::meta::meta_str(p, "name"))).count() as i64;
    let (min, max) = (pdb.pointer("/spec/minAvailable").filter(|v| !v.is_null()), pdb.pointer("/spec/maxUnavailable").filter(|v| !v.is_null()));
    let scale = if needs_scale(pdb) { expected_scale } else { Some(pods.len() as i64) };
    let mut out = Map::new();
    let (expected, desired, failed) = match (scale, min, max) {
        (None, _, _) => (0, 0, true),
        (Some(n), Some(m), None) => (n, scaled(m, n).unwrap_or(0), false),
        (Some(n), None, Some(m)) => (n, (n - scaled(m, n).unwrap_or(0)).max(0), false),
        (Some(n), _, _) => (n, 0, false),
    };
    let allowed = if failed { 0 } else { (healthy - desired).max(0) };
    out.insert("disruptionsAllowed".into(), json!(allowed));
    out.insert("currentHealthy".into(), json!(healthy));
    out.insert("desiredHealthy".into(), json!(desired));
    out.insert("expectedPods".into(), json!(expected));
    out.insert("observedGeneration".into(), json!(observed));
    if !disrupted.is_empty() {
        out.insert("disruptedPods".into(), Value::Object(disrupted));
    }
    if let Some(c) = pdb.pointer("/status/conditions").cloned() {
        out.insert("conditions".into(), c);
    }
    let (reason, message) = match (failed, allowed > 0) {
        (true, _) => ("SyncFailed", "found no controllers for a pod the budget selects"),
        (false, true) => ("SufficientPods", ""),
        (false, false) => ("InsufficientPods", ""),
    };
    set_condition(&mut out, allowed > 0, reason, message, observed, now);
    Value::Object(out)
}

/// Whether the stored status is what [`status`] would write, ignoring condition times.
pub fn same_status(a: Option<&Value>, b: &Value) -> bool {
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        for c in v.get_mut("conditions").and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(c) = c.as_object_mut() {
                c.remove("lastTransitionTime");
            }
        }
        v
    };
    a.is_some_and(|a| strip(a) == strip(b))
}

/// upstream's 429 for an eviction the budget does not allow now.
fn too_many(message: &str, retry_after: u64, cause_message: String) -> ApiError {
    ApiError::too_many_requests_with(message, retry_after, vec![StatusCause { reason: "DisruptionBudget".into(), message: cause_message, field: String::new() }])
}

/// The 429 for a budget whose status the controller has not yet written for its spec.
pub fn still_processing(pdb_name: &str) -> ApiError {
    too_many("Cannot evict pod as it would violate the pod's disruption budget.", 10, format!("The disruption budget {pdb_name} is still being processed by the server."))
}

/// Checks that the budget allows one more disruption and returns it with the eviction of
/// `pod_name` at `now` counted (`disruptionsAllowed` one less, the pod in `disruptedPods` unless
/// `dry`), or upstream's refusal.
pub fn check_and_decrement(pdb: &Value, pod_name: &str, now: &str, dry: bool) -> Result<Value, ApiError> {
    let name = crate::meta::meta_str(pdb, "name");
    if status_int(pdb, "observedGeneration") < generation(pdb) {
        return Err(still_processing(name));
    }
    let allowed = status_int(pdb, "disruptionsAllowed");
    if allowed < 0 {
        return Err(ApiError::forbidden("policy", "poddisruptionbudget", name, "pdb disruptions allowed is negative"));
    }
    if pdb.pointer("/status/disruptedPods").and_then(Value::as_object).is_some_and(|m| m.len() > MAX_DISRUPTED_PODS) {
        return Err(ApiError::forbidden("policy", "poddisruptionbudget", name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller"));
    }
    if allowed == 0 {
        return Err(too_many("Cannot evict pod as it would violate the pod's disruption budget.", 0,
            format!("The disruption budget {name} needs {} healthy pods and has {} currently", status_int(pdb, "desiredHealthy"), status_int(pdb, "currentHealthy"))));
    }
    let mut next = pdb.clone();
    next["status"]["disruptionsAllowed"] = json!(allowed - 1);
    if allowed - 1 == 0
        && let Some(status) = next.get_mut("status").and_then(Value::as_object_mut)
    {
        set_condition(status, false, "InsufficientPods", "", generation(pdb), now);
    }
    if !dry {
        let map = next["status"].as_object_mut().expect("status is an object").entry("disruptedPods").or_insert_with(|| json!({}));
        if !map.is_object() {
            *map = json!({});
        }
        map[pod_name] = json!(now);
    }
    Ok(next)
}

#[cfg(test)]
mod tests;
