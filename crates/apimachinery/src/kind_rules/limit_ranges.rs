//! LimitRanges as upstream's core validation words them: each limit's type (standard or fully
//! qualified, once per range), its resource names, what a Pod limit may not carry, a claim
//! limit's storage bound, and the order of min, default request, default and max, with the
//! max limit/request ratio. Quantities in messages are upstream's canonical form; where
//! upstream quotes a quantity as a Go struct, the canonical form is given instead (RFC 0011).

use super::errors::{duplicate, forbidden, invalid, invalid_shown};
use super::fields::{check, items, s};
use crate::meta::validate_qualified_name;
use crate::quantity::Quantity;
use crate::status::{cause, StatusCause};
use serde_json::Value;
use std::collections::BTreeMap;

const LIMIT_TYPES: [&str; 3] = ["Pod", "Container", "PersistentVolumeClaim"];
/// The resource names upstream's `IsStandardResourceName` accepts (besides huge pages).
const STANDARD_RESOURCES: [&str; 20] = [
    "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory", "requests.ephemeral-storage", "limits.cpu", "limits.memory",
    "limits.ephemeral-storage", "pods", "services", "replicationcontrollers", "resourcequotas", "secrets", "configmaps", "persistentvolumeclaims",
    "storage", "requests.storage", "services.nodeports", "services.loadbalancers",
];

fn hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

fn standard_resource(name: &str) -> bool {
    STANDARD_RESOURCES.contains(&name) || hugepages(name) || name.starts_with("requests.hugepages-")
}

/// Upstream's `IsNativeResource`: no domain, or a `kubernetes.io` one.
fn native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Upstream's `validateResourceName`, and for Pod and Container limits its container rule.
pub(super) fn resource_name(for_containers: bool, name: &str, field: &str, causes: &mut Vec<StatusCause>) {
    check(field, name, validate_qualified_name, causes);
    let plain = !name.contains('/');
    if plain && !standard_resource(name) {
        causes.push(invalid(field, &Value::from(name), "must be a standard resource type or fully qualified"));
    }
    if !for_containers {
        return;
    }
    if plain {
        if !["cpu", "memory", "ephemeral-storage"].contains(&name) && !hugepages(name) {
            causes.push(invalid(field, &Value::from(name), "must be a standard resource for containers"));
        }
    } else if !native(name) && (name.starts_with("requests.") || validate_qualified_name(&format!("requests.{name}")).is_err()) {
        causes.push(invalid(field, &Value::from(name), "doesn't follow extended resource name standard"));
    }
}

fn quantities(limit: &Value, key: &str) -> BTreeMap<String, (Quantity, String)> {
    let mut out = BTreeMap::new();
    for (k, v) in limit.get(key).and_then(Value::as_object).into_iter().flatten() {
        let text = v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
        if let Some(q) = Quantity::parse(&text) {
            let shown = q.canonical();
            out.insert(k.clone(), (q, shown));
        }
    }
    out
}

fn limit_type(ty: &str, field: &str, causes: &mut Vec<StatusCause>) {
    if let Err(why) = validate_qualified_name(ty) {
        causes.push(invalid(field, &Value::from(ty), &why));
    } else if !ty.contains('/') && !LIMIT_TYPES.contains(&ty) {
        causes.push(invalid(field, &Value::from(ty), "must be a standard limit type or fully qualified"));
    }
}

pub(super) fn validate(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let mut types = std::collections::BTreeSet::new();
    for (i, limit) in items(obj.get("spec").unwrap_or(&Value::Null), "limits").iter().enumerate() {
        let at = format!("spec.limits[{i}]");
        let ty = s(limit, "type");
        limit_type(ty, &format!("{at}.type"), &mut causes);
        if !types.insert(ty) {
            causes.push(duplicate(&format!("{at}.type"), ty));
        }
        let for_containers = ty == "Pod" || ty == "Container";
        let mut sections = vec!["max", "min"];
        if ty == "Pod" {
            for key in ["default", "defaultRequest"] {
                if limit.get(key).and_then(Value::as_object).is_some_and(|m| !m.is_empty()) {
                    causes.push(forbidden(&format!("{at}.{key}"), "may not be specified when `type` is 'Pod'"));
                }
            }
        } else {
            sections.extend(["default", "defaultRequest"]);
        }
        if ty == "PersistentVolumeClaim" && ["min", "max"].iter().all(|k| limit.pointer(&format!("/{k}/storage")).is_none()) {
            // Upstream names the limit's own path `limits` here.
            causes.push(cause("FieldValueRequired", &format!("{at}.limits"), "Required value: either minimum or maximum storage value is required, but neither was provided"));
        }
        sections.push("maxLimitRequestRatio");
        for key in &sections {
            for name in limit.get(*key).and_then(Value::as_object).into_iter().flatten().map(|(k, _)| k) {
                resource_name(for_containers, name, &format!("{at}.{key}[{name}]"), &mut causes);
            }
        }
        order(limit, &at, ty == "Pod", &mut causes);
    }
    causes
}

/// min ≤ default request ≤ default ≤ max, a ratio of at least 1 and at most max/min, and equal
/// defaults for resources that may not be overcommitted.
fn order(limit: &Value, at: &str, pod: bool, causes: &mut Vec<StatusCause>) {
    let (min, max, ratio) = (quantities(limit, "min"), quantities(limit, "max"), quantities(limit, "maxLimitRequestRatio"));
    let (default, request) = if pod { Default::default() } else { (quantities(limit, "default"), quantities(limit, "defaultRequest")) };
    let names: std::collections::BTreeSet<&String> = [&min, &max, &ratio, &default, &request].iter().flat_map(|m| m.keys()).collect();
    for k in names {
        let field = |section: &str| format!("{at}.{section}[{k}]");
        let bad = |section: &str, (_, shown): &(Quantity, String), detail: String| invalid_shown(&field(section), &format!("{shown:?}"), &detail);
        let (lo, hi, d, r, x) = (min.get(k), max.get(k), default.get(k), request.get(k), ratio.get(k));
        if let (Some(lo), Some(hi)) = (lo, hi) && lo.0.nanos > hi.0.nanos {
            causes.push(bad("min", lo, format!("min value {} is greater than max value {}", lo.1, hi.1)));
        }
        if let (Some(r), Some(lo)) = (r, lo) && lo.0.nanos > r.0.nanos {
            causes.push(bad("defaultRequest", r, format!("min value {} is greater than default request value {}", lo.1, r.1)));
        }
        if let (Some(r), Some(hi)) = (r, hi) && r.0.nanos > hi.0.nanos {
            causes.push(bad("defaultRequest", r, format!("default request value {} is greater than max value {}", r.1, hi.1)));
        }
        if let (Some(r), Some(d)) = (r, d) && r.0.nanos > d.0.nanos {
            causes.push(bad("defaultRequest", r, format!("default request value {} is greater than default limit value {}", r.1, d.1)));
        }
        if let (Some(d), Some(lo)) = (d, lo) && lo.0.nanos > d.0.nanos {
            causes.push(bad("default", lo, format!("min value {} is greater than default value {}", lo.1, d.1)));
        }
        if let (Some(d), Some(hi)) = (d, hi) && d.0.nanos > hi.0.nanos {
            causes.push(bad("default", hi, format!("default value {} is greater than max value {}", d.1, hi.1)));
        }
        if let Some(x) = x {
            if x.0.nanos < 1_000_000_000 {
                causes.push(bad("maxLimitRequestRatio", x, format!("ratio {} is less than 1", x.1)));
            }
            if let (Some(lo), Some(hi)) = (lo, hi) && lo.0.nanos > 0 {
                let allowed = hi.0.nanos as f64 / lo.0.nanos as f64;
                if x.0.nanos as f64 / 1e9 > allowed {
                    causes.push(bad("maxLimitRequestRatio", x, format!("ratio {} is greater than max/min = {allowed:.6}", x.1)));
                }
            }
        }
        let overcommit = native(k) && !hugepages(k);
        if let (false, Some(d), Some(r)) = (overcommit, d, r) && d.0.nanos != r.0.nanos {
            causes.push(bad("defaultRequest", r, format!("default value {} must equal to defaultRequest value {} in {k}", d.1, r.1)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::errors::fields;
    use super::*;
    use serde_json::json;

    #[test]
    fn limit_types_are_known_and_once_each_and_pods_take_no_defaults() {
        let lr = json!({"spec": {"limits": [
            {"type": "Node", "max": {"cpu": "1"}},
            {"type": "Pod", "default": {"cpu": "1"}},
            {"type": "Pod"},
            {"type": "PersistentVolumeClaim"}]}});
        let causes = validate(&lr);
        assert_eq!(fields(&causes), ["spec.limits[0].type", "spec.limits[1].default", "spec.limits[2].type", "spec.limits[3].limits"]);
        assert_eq!(causes[0].message, "Invalid value: \"Node\": must be a standard limit type or fully qualified");
        assert_eq!(causes[2].message, "Duplicate value: \"Pod\"");
    }

    #[test]
    fn bounds_are_ordered_and_ratios_at_least_one() {
        let lr = json!({"spec": {"limits": [{"type": "Container",
            "min": {"cpu": "2", "memory": "1Gi"}, "max": {"cpu": "1", "memory": "2Gi"},
            "default": {"memory": "512Mi"}, "maxLimitRequestRatio": {"memory": "500m"},
            "defaultRequest": {"gpu": "1"}}]}});
        let causes = validate(&lr);
        assert_eq!(fields(&causes), ["spec.limits[0].defaultRequest[gpu]", "spec.limits[0].defaultRequest[gpu]", "spec.limits[0].min[cpu]", "spec.limits[0].default[memory]", "spec.limits[0].maxLimitRequestRatio[memory]"]);
        assert_eq!(causes[2].message, "Invalid value: \"2\": min value 2 is greater than max value 1");
        assert_eq!(causes[3].message, "Invalid value: \"1Gi\": min value 1Gi is greater than default value 512Mi");
        assert_eq!(causes[4].message, "Invalid value: \"500m\": ratio 500m is less than 1");
        assert!(validate(&json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"cpu": "100m"}, "default": {"cpu": "1"}, "defaultRequest": {"cpu": "500m"}, "maxLimitRequestRatio": {"cpu": "4"}}]}})).is_empty());
    }
}
