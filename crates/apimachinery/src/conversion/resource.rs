//! resource.k8s.io/v1beta1 ↔ v1beta2 (Dynamic Resource Allocation), as upstream converts
//! through its internal type, which has v1beta2's shape. The versions differ in two places:
//! a v1beta1 `Device` keeps everything but its name under `basic`, which v1beta2 flattens;
//! a v1beta1 `DeviceRequest` holds the fields of one exact request inline, which v1beta2 puts
//! under `exactly`. Everything else is the same field for field.

use serde_json::{Map, Value};

/// The fields of a v1beta1 request that v1beta2 keeps under `exactly`.
const EXACT_FIELDS: [&str; 6] = ["deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations"];

/// Where a kind keeps its device requests, and its devices.
fn requests_at(kind: &str) -> Option<&'static str> {
    match kind {
        "ResourceClaim" => Some("/spec/devices/requests"),
        "ResourceClaimTemplate" => Some("/spec/spec/devices/requests"),
        _ => None,
    }
}

fn devices_at(kind: &str) -> Option<&'static str> {
    (kind == "ResourceSlice").then_some("/spec/devices")
}

fn each_at(obj: &mut Value, ptr: Option<&str>, f: impl Fn(&mut Map<String, Value>)) {
    if let Some(items) = ptr.and_then(|p| obj.pointer_mut(p)).and_then(Value::as_array_mut) {
        items.iter_mut().filter_map(Value::as_object_mut).for_each(f);
    }
}

/// A v1beta1 object in v1beta2's shape.
pub(super) fn v1beta1_to_v1beta2(mut obj: Value) -> Value {
    let kind = obj["kind"].as_str().unwrap_or_default().to_owned();
    each_at(&mut obj, requests_at(&kind), |r| {
        // Upstream makes an exact request when any of its fields is set (zero values are not
        // set), and leaves what is wrong with it to validation.
        let set = |k: &str| r.get(k).is_some_and(|v| !(v.is_null() || *v == Value::from("") || *v == Value::from(0)));
        if !EXACT_FIELDS.iter().any(|k| set(k)) {
            EXACT_FIELDS.iter().for_each(|k| drop(r.remove(*k)));
            return;
        }
        let exactly: Map<String, Value> = EXACT_FIELDS.iter().filter_map(|k| r.remove(*k).map(|v| ((*k).to_owned(), v))).collect();
        r.insert("exactly".into(), Value::Object(exactly));
    });
    each_at(&mut obj, devices_at(&kind), |d| {
        if let Some(Value::Object(basic)) = d.remove("basic") {
            d.extend(basic);
        }
    });
    obj["apiVersion"] = "resource.k8s.io/v1beta2".into();
    obj
}

/// A v1beta2 object in v1beta1's shape.
pub(super) fn v1beta2_to_v1beta1(mut obj: Value) -> Value {
    let kind = obj["kind"].as_str().unwrap_or_default().to_owned();
    each_at(&mut obj, requests_at(&kind), |r| {
        if let Some(Value::Object(exactly)) = r.remove("exactly") {
            r.extend(exactly);
        }
    });
    each_at(&mut obj, devices_at(&kind), |d| {
        // Upstream's conversion always gives a device its `basic`, empty or not.
        let basic: Map<String, Value> = d.keys().filter(|k| *k != "name").cloned().collect::<Vec<_>>().into_iter().filter_map(|k| d.remove(&k).map(|v| (k, v))).collect();
        d.insert("basic".into(), Value::Object(basic));
    });
    obj["apiVersion"] = "resource.k8s.io/v1beta1".into();
    obj
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn exact_fields() -> impl Strategy<Value = Map<String, Value>> {
        (
            "[a-z]{1,8}",
            proptest::option::of(prop_oneof![Just("ExactCount"), Just("All")]),
            proptest::option::of(1i64..8),
            proptest::option::of(any::<bool>()),
            proptest::option::of("[a-z]{1,6}".prop_map(|k| json!([{"key": k, "operator": "Exists", "effect": "NoSchedule"}]))),
            proptest::option::of("[a-z]{1,6}".prop_map(|a| json!([{"cel": {"expression": format!("device.driver == '{a}'")}}]))),
        )
            .prop_map(|(class, mode, count, admin, tolerations, selectors)| {
                let mut m = Map::new();
                m.insert("deviceClassName".into(), json!(class));
                for (k, v) in [("allocationMode", mode.map(Value::from)), ("count", count.map(Value::from)), ("adminAccess", admin.map(Value::from)), ("tolerations", tolerations), ("selectors", selectors)] {
                    if let Some(v) = v {
                        m.insert(k.into(), v);
                    }
                }
                m
            })
    }

    /// A v1beta2 request: exact, or a list of alternatives (which have no `exactly`).
    fn request() -> impl Strategy<Value = Value> {
        prop_oneof![
            ("[a-z]{1,8}", exact_fields()).prop_map(|(name, exactly)| json!({"name": name, "exactly": exactly})),
            ("[a-z]{1,8}", proptest::collection::vec(("[a-z]{1,8}", exact_fields()), 1..3)).prop_map(|(name, subs)| {
                let subs: Vec<Value> = subs
                    .into_iter()
                    .map(|(n, mut f)| {
                        f.remove("adminAccess");
                        f.insert("name".into(), json!(n));
                        Value::Object(f)
                    })
                    .collect();
                json!({"name": name, "firstAvailable": subs})
            }),
        ]
    }

    fn device() -> impl Strategy<Value = Value> {
        ("[a-z]{1,8}", proptest::option::of(1u32..64), proptest::option::of("[a-z]{1,8}"), proptest::option::of(any::<bool>())).prop_map(|(name, mem, node, all)| {
            let mut d = json!({"name": name});
            if let Some(m) = mem {
                d["capacity"] = json!({"memory": {"value": format!("{m}Gi")}});
                d["attributes"] = json!({"model": {"string": "x"}});
            }
            if let Some(n) = node {
                d["nodeName"] = json!(n);
            }
            if let Some(a) = all {
                d["allNodes"] = json!(a);
            }
            d
        })
    }

    proptest! {
        /// Every v1beta2 claim, template and slice survives v1beta1 and back, and every v1beta1
        /// one survives v1beta2 and back (each upstream's conversion is lossless).
        #[test]
        fn conversions_round_trip(requests in proptest::collection::vec(request(), 0..4), devices in proptest::collection::vec(device(), 0..4)) {
            let claim = json!({"apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceClaim", "metadata": {"name": "c"}, "spec": {"devices": {"requests": requests}}});
            let template = json!({"apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceClaimTemplate", "metadata": {"name": "t"}, "spec": {"spec": {"devices": {"requests": requests}}}});
            let slice = json!({"apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": {"driver": "d.example.com", "devices": devices}});
            for obj in [claim, template, slice] {
                let old = v1beta2_to_v1beta1(obj.clone());
                prop_assert_eq!(&v1beta1_to_v1beta2(old.clone()), &obj);
                prop_assert_eq!(v1beta2_to_v1beta1(v1beta1_to_v1beta2(old.clone())), old);
            }
        }
    }

    #[test]
    fn the_shapes_are_upstreams() {
        let old = json!({"kind": "ResourceClaim", "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.example.com", "count": 2}]}}});
        let new = v1beta1_to_v1beta2(old);
        assert_eq!(new["spec"]["devices"]["requests"][0], json!({"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}}));
        assert_eq!(new["apiVersion"], "resource.k8s.io/v1beta2");
        let slice = json!({"kind": "ResourceSlice", "spec": {"devices": [{"name": "d0"}, {"name": "d1", "attributes": {"a": {"int": 1}}}]}});
        let old = v1beta2_to_v1beta1(slice);
        assert_eq!(old["spec"]["devices"], json!([{"name": "d0", "basic": {}}, {"name": "d1", "basic": {"attributes": {"a": {"int": 1}}}}]));
    }
}
