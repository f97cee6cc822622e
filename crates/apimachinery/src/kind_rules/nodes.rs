//! Nodes' taints, Namespaces' finalizers and phase, Endpoints' subsets, EndpointSlices'
//! endpoints and ports, and ResourceQuotas' hard limits and scopes, as upstream's core validation words them.

use super::errors::{invalid, invalid_shown, not_supported, port_number, required};
use crate::meta::{validate_dns1123_label, validate_label_value, validate_qualified_name};
use crate::quantity::Quantity;
use crate::status::{cause, StatusCause};
use serde_json::Value;
use super::fields::{items_at as items, s};

/// In the order upstream lists them.
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
/// The finalizers a name without a `/` may be (upstream's standard finalizer names).
const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];

pub(super) fn validate_node(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
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
        if !seen.insert((s(t, "key"), s(t, "effect"))) {
            let added = t.get("timeAdded").and_then(Value::as_str).map_or_else(|| "(*v1.Time)(nil)".to_owned(), |_| "(*v1.Time)(...)".to_owned());
            let shown = format!("core.Taint{{Key:{:?}, Value:{:?}, Effect:{:?}, TimeAdded:{added}}}", s(t, "key"), s(t, "value"), s(t, "effect"));
            causes.push(cause("FieldValueDuplicate", &at, format!("Duplicate value: {shown}: taints must be unique by key and effect pair")));
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
                    causes.push(invalid(&format!("{at}.{name}[{j}].ip"), &Value::from(ip), crate::meta::IP_ADDRESS_RULE));
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

const ADDRESS_TYPES: [&str; 3] = ["FQDN", "IPv4", "IPv6"];
const MAX_SLICE_ENDPOINTS: usize = 1000;
const MAX_SLICE_ADDRESSES: usize = 100;
const MAX_SLICE_PORTS: usize = 20000;

/// EndpointSlices (discovery.k8s.io): the address type, each endpoint's addresses of that type,
/// hostname and node, and the ports' names and protocols.
pub(super) fn validate_endpoint_slice(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let ty = s(obj, "addressType");
    match ty {
        "" => causes.push(required("addressType")),
        t if !ADDRESS_TYPES.contains(&t) => causes.push(not_supported("addressType", t, &ADDRESS_TYPES)),
        _ => {}
    }
    let endpoints = items(obj, "/endpoints");
    if endpoints.len() > MAX_SLICE_ENDPOINTS {
        causes.push(super::fields::too_many("endpoints", endpoints.len(), MAX_SLICE_ENDPOINTS));
    }
    for (i, e) in endpoints.iter().enumerate() {
        let at = format!("endpoints[{i}]");
        let addresses = items(e, "/addresses");
        if addresses.is_empty() {
            causes.push(cause("FieldValueRequired", &format!("{at}.addresses"), "Required value: must contain at least 1 address"));
        } else if addresses.len() > MAX_SLICE_ADDRESSES {
            causes.push(super::fields::too_many(&format!("{at}.addresses"), addresses.len(), MAX_SLICE_ADDRESSES));
        }
        for (j, a) in addresses.iter().enumerate() {
            let (field, text) = (format!("{at}.addresses[{j}]"), a.as_str().unwrap_or(""));
            let ip = text.parse::<std::net::IpAddr>().ok();
            match ty {
                "IPv4" if !ip.is_some_and(|ip| ip.is_ipv4()) => causes.push(invalid(&field, &Value::from(text), "must be a valid IPv4 address")),
                "IPv6" if !ip.is_some_and(|ip| ip.is_ipv6()) => causes.push(invalid(&field, &Value::from(text), "must be a valid IPv6 address")),
                "FQDN" => super::fields::check(&field, text, crate::meta::validate_dns1123_subdomain, &mut causes),
                _ => {}
            }
        }
        if let Some(h) = e.get("hostname").and_then(Value::as_str) {
            super::fields::check(&format!("{at}.hostname"), h, validate_dns1123_label, &mut causes);
        }
        if let Some(n) = e.get("nodeName").and_then(Value::as_str) {
            super::fields::check(&format!("{at}.nodeName"), n, crate::meta::validate_dns1123_subdomain, &mut causes);
        }
    }
    let ports = items(obj, "/ports");
    if ports.len() > MAX_SLICE_PORTS {
        causes.push(super::fields::too_many("ports", ports.len(), MAX_SLICE_PORTS));
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        let at = format!("ports[{i}]");
        let name = s(p, "name");
        if !name.is_empty() {
            super::fields::check(&format!("{at}.name"), name, validate_dns1123_label, &mut causes);
        }
        if !names.insert(name) {
            causes.push(super::errors::duplicate(&format!("{at}.name"), name));
        }
        match s(p, "protocol") {
            "" => causes.push(required(&format!("{at}.protocol"))),
            proto if !PROTOCOLS.contains(&proto) => causes.push(not_supported(&format!("{at}.protocol"), proto, &PROTOCOLS)),
            _ => {}
        }
        if let Some(ap) = p.get("appProtocol").and_then(Value::as_str) {
            super::fields::check(&format!("{at}.appProtocol"), ap, validate_qualified_name, &mut causes);
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

/// The resource names a quota may limit without a domain (upstream's standard quota resources).
const QUOTA_RESOURCES: [&str; 20] = [
    "pods", "services", "replicationcontrollers", "resourcequotas", "secrets", "configmaps", "persistentvolumeclaims", "services.nodeports",
    "services.loadbalancers", "requests.cpu", "requests.memory", "requests.storage", "requests.ephemeral-storage", "limits.cpu", "limits.memory",
    "limits.ephemeral-storage", "cpu", "memory", "ephemeral-storage", "storage",
];
const QUOTA_SCOPES: [&str; 7] = ["Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass", "CrossNamespacePodAffinity", "VolumeAttributesClass"];

pub(super) fn validate_quota(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    for name in obj.pointer("/spec/hard").and_then(Value::as_object).into_iter().flatten().map(|(k, _)| k) {
        let field = format!("spec.hard[{name}]");
        super::fields::check(&field, name, validate_qualified_name, &mut causes);
        let standard = QUOTA_RESOURCES.contains(&name.as_str()) || name.starts_with("requests.hugepages-") || name.starts_with("hugepages-");
        if !name.contains('/') && !standard {
            causes.push(invalid(&field, &Value::from(name.as_str()), "must be a standard resource for quota"));
        }
    }
    let scopes = items(obj, "/spec/scopes");
    if scopes.iter().any(|s| !QUOTA_SCOPES.contains(&s.as_str().unwrap_or(""))) {
        causes.push(invalid_shown("spec.scopes", &go_scopes(obj.pointer("/spec/scopes")), "unsupported scope"));
    }
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

    #[test]
    fn endpoint_slices_hold_addresses_of_their_type_and_named_ports() {
        let slice = json!({"addressType": "IPv4", "endpoints": [{"addresses": []}, {"addresses": ["fd00::1"], "hostname": "Bad_Host"}],
            "ports": [{"name": "http", "protocol": "TCP"}, {"name": "http", "protocol": "HTTP"}]});
        let causes = validate_endpoint_slice(&slice);
        assert_eq!(fields(&causes), ["endpoints[0].addresses", "endpoints[1].addresses[0]", "endpoints[1].hostname", "ports[1].name", "ports[1].protocol"]);
        assert_eq!(causes[1].message, "Invalid value: \"fd00::1\": must be a valid IPv4 address");
        assert_eq!(validate_endpoint_slice(&json!({"addressType": "IPX"}))[0].message, "Unsupported value: \"IPX\": supported values: \"FQDN\", \"IPv4\", \"IPv6\"");
    }

    #[test]
    fn a_taint_is_unique_by_key_and_effect() {
        let node = json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "value": "b", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}]}});
        let causes = validate_node(&node);
        assert_eq!(fields(&causes), ["spec.taints[1]"]);
        assert_eq!(causes[0].message, "Duplicate value: core.Taint{Key:\"a\", Value:\"b\", Effect:\"NoSchedule\", TimeAdded:(*v1.Time)(nil)}: taints must be unique by key and effect pair");
    }

    #[test]
    fn a_quota_limits_standard_or_qualified_resources_in_known_scopes() {
        let q = json!({"spec": {"hard": {"pods": "1", "gpus": "2", "count/widgets.example.com": "3", "requests.nvidia.com/gpu": "1"}, "scopes": ["BestEffort", "Sometimes"]}});
        let causes = validate_quota(&q);
        assert_eq!(fields(&causes), ["spec.hard[gpus]", "spec.scopes"]);
        assert_eq!(causes[1].message, "Invalid value: []core.ResourceQuotaScope{\"BestEffort\", \"Sometimes\"}: unsupported scope");
    }
}
