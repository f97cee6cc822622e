//! Dynamic Resource Allocation's defaults (resource.k8s.io, set on the stored v1beta2 shape, as
//! upstream sets them on its internal type): an exact request or an alternative allocates
//! `ExactCount` devices, one unless it says; a toleration's operator is `Equal`; a device
//! taint is stamped with when it was added; a slice's pool generation is zero unless given.

use super::{default_at, each_mut};
use serde_json::{json, Value};

fn request(r: &mut Value) {
    default_at(r, &["allocationMode"], json!("ExactCount"));
    if r["allocationMode"] == "ExactCount" && r["count"].as_i64().unwrap_or(0) == 0 {
        r["count"] = json!(1);
    }
    for t in each_mut(r, "tolerations") {
        default_at(t, &["operator"], json!("Equal"));
    }
}

/// The defaults of a resource.k8s.io object of `plural`, in the v1beta2 shape.
pub(crate) fn set_defaults(plural: &str, obj: &mut Value) {
    match plural {
        "resourceclaims" => obj.get_mut("spec").into_iter().for_each(claim_spec),
        "resourceclaimtemplates" => obj.pointer_mut("/spec/spec").into_iter().for_each(claim_spec),
        "resourceslices" => resource_slice(obj),
        _ => {}
    }
}

/// A claim's spec (a ResourceClaim's `spec`, a template's `spec.spec`).
fn claim_spec(spec: &mut Value) {
    let Some(devices) = spec.get_mut("devices") else { return };
    for r in each_mut(devices, "requests") {
        if let Some(exactly) = r.get_mut("exactly").filter(|e| e.is_object()) {
            request(exactly);
        }
        for sub in each_mut(r, "firstAvailable") {
            request(sub);
        }
    }
}

/// A ResourceSlice: its pool's generation is written at zero (Go writes the field, which has no
/// `omitempty`, and strict clients require it); its devices' taints get the time they were added.
fn resource_slice(obj: &mut Value) {
    let now = crate::meta::now_rfc3339();
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else { return };
    default_at(spec, &["pool", "generation"], json!(0));
    for d in each_mut(spec, "devices") {
        for t in each_mut(d, "taints") {
            default_at(t, &["timeAdded"], json!(now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_allocate_one_device_exactly_unless_they_say() {
        let mut spec = json!({"devices": {"requests": [
            {"name": "a", "exactly": {"deviceClassName": "c", "tolerations": [{"key": "k"}]}},
            {"name": "b", "exactly": {"deviceClassName": "c", "allocationMode": "All"}},
            {"name": "c", "firstAvailable": [{"name": "x", "deviceClassName": "c", "count": 3}]},
        ]}});
        claim_spec(&mut spec);
        let r = &spec["devices"]["requests"];
        assert_eq!(r[0]["exactly"], json!({"deviceClassName": "c", "allocationMode": "ExactCount", "count": 1, "tolerations": [{"key": "k", "operator": "Equal"}]}));
        assert_eq!(r[1]["exactly"], json!({"deviceClassName": "c", "allocationMode": "All"}));
        assert_eq!(r[2]["firstAvailable"][0]["count"], 3);
        assert_eq!(r[2]["firstAvailable"][0]["allocationMode"], "ExactCount");
    }
}
