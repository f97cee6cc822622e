//! Services: their type, ports (numbers, names, protocols, node ports) and what each type
//! requires, IP families and traffic policies, and on
//! an update their cluster IPs, as upstream's `ValidateService` and `ValidateServiceUpdate` word
//! them.

use super::errors::{duplicate, go_strings, invalid_shown, not_supported, port_number, required};
use crate::status::StatusCause;
use serde_json::Value;
use std::collections::HashSet;

const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const AFFINITIES: [&str; 2] = ["ClientIP", "None"];
const IP_FAMILIES: [&str; 2] = ["IPv4", "IPv6"];
const IP_FAMILY_POLICIES: [&str; 3] = ["PreferDualStack", "RequireDualStack", "SingleStack"];
const TRAFFIC_POLICIES: [&str; 2] = ["Cluster", "Local"];

/// IP families (known, each once, at most two), their policy and the traffic policies (the
/// external one only on externally reachable types).
fn families_and_policies(spec: &Value, ty: &str, causes: &mut Vec<StatusCause>) {
    let families = spec.get("ipFamilies").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut seen = HashSet::new();
    for (i, f) in families.iter().enumerate() {
        let f = f.as_str().unwrap_or("");
        if !IP_FAMILIES.contains(&f) {
            causes.push(not_supported(&format!("spec.ipFamilies[{i}]"), f, &IP_FAMILIES));
        } else if !seen.insert(f) {
            causes.push(duplicate(&format!("spec.ipFamilies[{i}]"), f));
        }
    }
    if families.len() > 2 {
        causes.push(crate::status::cause("FieldValueInvalid", "spec.ipFamilies", format!("Invalid value: {}: may not have more than 2 ipFamilies", go_families(&families))));
    }
    if let Some(p) = spec.get("ipFamilyPolicy").and_then(Value::as_str).filter(|p| !IP_FAMILY_POLICIES.contains(p)) {
        causes.push(not_supported("spec.ipFamilyPolicy", p, &IP_FAMILY_POLICIES));
    }
    if let Some(p) = spec.get("externalTrafficPolicy").and_then(Value::as_str).filter(|p| !p.is_empty()) {
        if ty != "NodePort" && ty != "LoadBalancer" {
            causes.push(super::errors::invalid("spec.externalTrafficPolicy", &Value::from(p), "may only be set for externally-accessible services"));
        } else if !TRAFFIC_POLICIES.contains(&p) {
            causes.push(not_supported("spec.externalTrafficPolicy", p, &TRAFFIC_POLICIES));
        }
    }
    if let Some(p) = spec.get("internalTrafficPolicy").and_then(Value::as_str).filter(|p| !TRAFFIC_POLICIES.contains(p)) {
        causes.push(not_supported("spec.internalTrafficPolicy", p, &TRAFFIC_POLICIES));
    }
}

fn go_families(families: &[Value]) -> String {
    go_strings(Some(&Value::Array(families.to_vec()))).replacen("[]string", "[]core.IPFamily", 1)
}

pub(super) fn validate(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let ty = spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP");
    if !TYPES.contains(&ty) {
        causes.push(not_supported("spec.type", ty, &TYPES));
    }
    if let Some(a) = spec.get("sessionAffinity").and_then(Value::as_str).filter(|a| !AFFINITIES.contains(a)) {
        causes.push(not_supported("spec.sessionAffinity", a, &AFFINITIES));
    }
    let ports = spec.get("ports").and_then(Value::as_array).cloned().unwrap_or_default();
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    if ty == "ExternalName" {
        if spec.get("externalName").and_then(Value::as_str).unwrap_or("").is_empty() {
            causes.push(required("spec.externalName"));
        }
    } else if ports.is_empty() && !headless {
        causes.push(required("spec.ports"));
    }
    let mut names = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if ports.len() > 1 && name.is_empty() {
            causes.push(required(&format!("{at}.name")));
        }
        if !name.is_empty() && !names.insert(name.to_owned()) {
            causes.push(duplicate(&format!("{at}.name"), name));
        }
        match p.get("port") {
            None | Some(Value::Null) => causes.push(required(&format!("{at}.port"))),
            Some(v) => causes.extend(port_number(&format!("{at}.port"), v)),
        }
        // Upstream quotes the whole IntOrString here (a probe's port errors quote its value).
        if let Some(t) = p.get("targetPort").filter(|t| !t.is_null()) {
            let whys: Vec<&str> = match t.as_str() {
                Some(name) => super::errors::port_name_errors(name),
                None => port_number("", t).map(|_| "must be between 1 and 65535, inclusive").into_iter().collect(),
            };
            for why in whys {
                causes.push(invalid_shown(&format!("{at}.targetPort"), &super::errors::go_int_or_string(t), why));
            }
        }
        if !name.is_empty() && let Err(why) = crate::meta::validate_dns1123_label(name) {
            causes.push(super::errors::invalid(&format!("{at}.name"), &Value::from(name), &why));
        }
        if let Some(proto) = p.get("protocol").and_then(Value::as_str).filter(|v| !PROTOCOLS.contains(v)) {
            causes.push(not_supported(&format!("{at}.protocol"), proto, &PROTOCOLS));
        }
        if let Some(n) = p.get("nodePort").filter(|n| n.as_i64().is_some_and(|n| n != 0)) {
            if ty == "ClusterIP" {
                causes.push(super::errors::forbidden(&format!("{at}.nodePort"), "may not be used when `type` is 'ClusterIP'"));
            } else {
                causes.extend(port_number(&format!("{at}.nodePort"), n));
            }
        }
    }
    families_and_policies(&spec, ty, &mut causes);
    causes
}

/// A Service's cluster IPs: `clusterIPs`, or the one `clusterIP` where that list is absent.
fn cluster_ips(obj: &Value) -> Vec<Value> {
    match obj.pointer("/spec/clusterIPs").and_then(Value::as_array) {
        Some(ips) => ips.clone(),
        None => obj.pointer("/spec/clusterIP").filter(|ip| ip.as_str().is_some_and(|s| !s.is_empty())).cloned().into_iter().collect(),
    }
}

/// An update may add a secondary cluster IP or release one, never change the primary (unless
/// the Service is or becomes an ExternalName one, or stays headless).
pub(super) fn validate_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let ty = crate::service_network::service_type;
    let headless = |v: &Value| v.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None");
    if ty(old) == "ExternalName" || ty(new) == "ExternalName" || (headless(old) && headless(new)) {
        return Vec::new();
    }
    let (was, is) = (cluster_ips(old), cluster_ips(new));
    let shown = go_strings(Some(&Value::Array(is.clone())));
    let changed = |i: usize| invalid_shown(&format!("spec.clusterIPs[{i}]"), &shown, "may not change once set");
    let mut causes = Vec::new();
    match was.len().cmp(&is.len()) {
        std::cmp::Ordering::Equal => causes.extend((0..was.len()).filter(|&i| was[i] != is[i]).map(changed)),
        std::cmp::Ordering::Greater if is.is_empty() => causes.push(invalid_shown("spec.clusterIPs[0]", &shown, "primary clusterIP can not be unset")),
        _ if !was.is_empty() && !is.is_empty() && was[0] != is[0] => causes.push(changed(0)),
        _ => {}
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::super::errors::fields;
    use super::*;
    use serde_json::json;

    #[test]
    fn a_primary_cluster_ip_may_not_change() {
        let svc = |ips: Value| json!({"spec": {"type": "ClusterIP", "clusterIPs": ips}});
        let causes = validate_update(&svc(json!(["10.0.0.1"])), &svc(json!(["10.0.0.2"])));
        assert_eq!(causes[0].message, "Invalid value: []string{\"10.0.0.2\"}: may not change once set");
        assert!(validate_update(&svc(json!(["10.0.0.1"])), &svc(json!(["10.0.0.1", "fd00::1"]))).is_empty(), "a secondary may be added");
        assert_eq!(fields(&validate_update(&svc(json!(["10.0.0.1"])), &svc(json!([])))), ["spec.clusterIPs[0]"]);
        let external = json!({"spec": {"type": "ExternalName", "externalName": "example.com"}});
        assert!(validate_update(&svc(json!(["10.0.0.1"])), &external).is_empty());
    }

    #[test]
    fn families_policies_and_node_ports_are_checked_by_type() {
        let svc = json!({"spec": {"type": "ClusterIP", "ipFamilies": ["IPv4", "IPv4", "IPv5"], "ipFamilyPolicy": "Sometimes", "externalTrafficPolicy": "Local",
            "ports": [{"port": 80, "nodePort": 30080}]}});
        let causes = validate(&svc);
        assert_eq!(fields(&causes), ["spec.ports[0].nodePort", "spec.ipFamilies[1]", "spec.ipFamilies[2]", "spec.ipFamilies", "spec.ipFamilyPolicy", "spec.externalTrafficPolicy"]);
        assert_eq!(causes[5].message, "Invalid value: \"Local\": may only be set for externally-accessible services");
        let node_port = json!({"spec": {"type": "NodePort", "externalTrafficPolicy": "Everywhere", "ports": [{"port": 80, "nodePort": 70000}]}});
        assert_eq!(fields(&validate(&node_port)), ["spec.ports[0].nodePort", "spec.externalTrafficPolicy"]);
    }
}
