//! Nodes' taints, Namespaces' finalizers and phase, Endpoints' subsets and ResourceQuotas' hard
//! limits and scopes, as upstream's core validation words them.

use super::errors::{invalid, invalid_shown, not_supported, port_number, required};
use crate::meta::{validate_dns1123_label, validate_label_value, validate_qualified_name};
use crate::quantity::Quantity;
use crate::status::{cause, StatusCause};
use serde_json::Value;

/// In the order upstream lists them.
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
/// The finalizers a name without a `/` may be (upstream's standard finalizer names).
const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];

fn items<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

pub(super) fn validate_node(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    for (i, t) in items(obj, "/spec/taints").iter().enumerate() {
        let at = format!("spec.taints[{i}]");
        if let Err(why) = validate_qualified_name(s(t, "key")) {
            causes.push(invalid(&format!("{at}.key"), &Value::from(s(t, "key")), &why));
        }
        if let Err(why) = validate_label_value(s(t, "value")) {
            causes.push(invalid(&format!("{at}.value"), &Value::from(s(t, "value")), &why));
        }
        match s(t, "effect") {
            "" => causes.push(required(&format!("{at}.effect"))),
            e if !TAINT_EFFECTS.contains(&e) => causes.push(not_supported(&format!("{at}.effect"), e, &TAINT_EFFECTS)),
            _ => {}
        }
    }
    causes
}

fn finalizers(list: &[Value], field: impl Fn(usize) -> String, causes: &mut Vec<StatusCause>) {
    for (i, f) in list.iter().enumerate() {
        let name = f.as_str().unwrap_or("");
        if !name.contains('/') && !STANDARD_FINALIZERS.contains(&name) {
            causes.push(invalid(&field(i), f, "name is neither a standard finalizer name nor is it fully qualified"));
        }
    }
}

pub(super) fn validate_namespace(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    // Upstream reports a namespace's finalizers at the list's path on create and update.
    finalizers(items(obj, "/spec/finalizers"), |_| "spec.finalizers".into(), &mut causes);
    causes
}

/// A namespace's phase follows its deletion (checked on updates: a create's status is the
/// server's).
pub(super) fn validate_namespace_update(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let deleting = obj.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null());
    match (obj.pointer("/status/phase").and_then(Value::as_str), deleting) {
        (Some(p), false) if p != "Active" => causes.push(invalid("status.Phase", &Value::from(p), "may only be 'Active' if `deletionTimestamp` is empty")),
        (Some(p), true) if p != "Terminating" => causes.push(invalid("status.Phase", &Value::from(p), "may only be 'Terminating' if `deletionTimestamp` is not empty")),
        _ => {}
    }
    causes
}

pub(super) fn validate_endpoints(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    for (i, subset) in items(obj, "/subsets").iter().enumerate() {
        let at = format!("subsets[{i}]");
        let (ready, not_ready) = (items(subset, "/addresses"), items(subset, "/notReadyAddresses"));
        if ready.is_empty() && not_ready.is_empty() {
            causes.push(cause("FieldValueRequired", &at, "Required value: must specify `addresses` or `notReadyAddresses`"));
        }
        for (list, name) in [(ready, "addresses"), (not_ready, "notReadyAddresses")] {
            for (j, a) in list.iter().enumerate() {
                let ip = s(a, "ip");
                if ip.parse::<std::net::IpAddr>().is_err() {
                    causes.push(invalid(&format!("{at}.{name}[{j}].ip"), &Value::from(ip), "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"));
                }
                if let Some(h) = a.get("hostname").and_then(Value::as_str).filter(|h| !h.is_empty()) {
                    if let Err(why) = validate_dns1123_label(h) {
                        causes.push(invalid(&format!("{at}.{name}[{j}].hostname"), &Value::from(h), &why));
                    }
                }
            }
        }
        let ports = items(subset, "/ports");
        for (j, p) in ports.iter().enumerate() {
            let pat = format!("{at}.ports[{j}]");
            match s(p, "name") {
                "" if ports.len() > 1 => causes.push(required(&format!("{pat}.name"))),
                "" => {}
                n => {
                    if let Err(why) = validate_dns1123_label(n) {
                        causes.push(invalid(&format!("{pat}.name"), &Value::from(n), &why));
                    }
                }
            }
            causes.extend(port_number(&format!("{pat}.port"), p.get("port").unwrap_or(&Value::from(0))));
            match s(p, "protocol") {
                "" => causes.push(required(&format!("{pat}.protocol"))),
                proto if !PROTOCOLS.contains(&proto) => causes.push(not_supported(&format!("{pat}.protocol"), proto, &PROTOCOLS)),
                _ => {}
            }
        }
    }
    causes
}

/// Go's `%#v` of a quota's scopes (`[]core.ResourceQuotaScope{"BestEffort"}`).
fn go_scopes(v: Option<&Value>) -> String {
    match v.and_then(Value::as_array) {
        None => "[]core.ResourceQuotaScope(nil)".into(),
        Some(a) => format!("[]core.ResourceQuotaScope{{{}}}", a.iter().map(|s| format!("{:?}", s.as_str().unwrap_or(""))).collect::<Vec<_>>().join(", ")),
    }
}

pub(super) fn validate_quota(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    for (section, ptr) in [("spec.hard", "/spec/hard"), ("status.hard", "/status/hard"), ("status.used", "/status/used")] {
        for (k, q) in obj.pointer(ptr).and_then(Value::as_object).into_iter().flatten() {
            let text = q.as_str().map(str::to_owned).unwrap_or_else(|| q.to_string());
            if Quantity::parse(&text).is_some_and(|q| q.nanos < 0) {
                causes.push(invalid(&format!("{section}[{k}]"), &Value::from(text), "must be greater than or equal to 0"));
            }
        }
    }
    causes
}

pub(super) fn validate_quota_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let set = |v: &Value| -> std::collections::BTreeSet<String> { items(v, "/spec/scopes").iter().filter_map(|s| s.as_str().map(str::to_owned)).collect() };
    if set(old) != set(new) {
        return vec![invalid_shown("spec.scopes", &go_scopes(new.pointer("/spec/scopes")), "field is immutable")];
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::super::errors::fields;
    use super::*;
    use serde_json::json;

    #[test]
    fn node_taints_need_a_key_and_a_known_effect() {
        let node = json!({"spec": {"taints": [{"key": "ok", "effect": "NoSchedule"}, {"key": "bad key", "value": "v", "effect": "Sometimes"}, {"key": "k"}]}});
        let causes = validate_node(&node);
        assert_eq!(fields(&causes), ["spec.taints[1].key", "spec.taints[1].effect", "spec.taints[2].effect"]);
        assert_eq!(causes[1].message, "Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"");
    }

    #[test]
    fn namespaces_endpoints_and_quotas() {
        assert_eq!(fields(&validate_namespace(&json!({"spec": {"finalizers": ["custom"]}}))), ["spec.finalizers"]);
        assert!(validate_namespace(&json!({"spec": {"finalizers": ["kubernetes", "example.com/x"]}})).is_empty());
        assert_eq!(fields(&validate_namespace_update(&json!({"status": {"phase": "Terminating"}}))), ["status.Phase"]);
        let ep = json!({"subsets": [{"ports": [{"port": 80, "protocol": "TCP"}]}, {"addresses": [{"ip": "nope"}], "ports": [{"port": 70000, "protocol": "TCP"}, {"port": 81}]}]});
        assert_eq!(fields(&validate_endpoints(&ep)), ["subsets[0]", "subsets[1].addresses[0].ip", "subsets[1].ports[0].name", "subsets[1].ports[0].port", "subsets[1].ports[1].name", "subsets[1].ports[1].protocol"]);
        assert_eq!(validate_quota(&json!({"spec": {"hard": {"pods": "-1"}}}))[0].message, "Invalid value: \"-1\": must be greater than or equal to 0");
        let (old, new) = (json!({"spec": {"scopes": ["BestEffort"]}}), json!({"spec": {"scopes": ["NotBestEffort"]}}));
        assert_eq!(validate_quota_update(&old, &new)[0].message, "Invalid value: []core.ResourceQuotaScope{\"NotBestEffort\"}: field is immutable");
    }
}
