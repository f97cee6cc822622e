//! NetworkPolicies (ports, peers' IP blocks, policy types), Ingresses (rules or a default
//! backend, hosts, paths and their types, backends), ServiceCIDRs (one or two CIDRs, one per
//! family, fixed once set) and IPAddresses (the object their address belongs to, fixed once
//! set), as upstream's networking validation words them.

use super::errors::{invalid, invalid_shown, not_supported, port_number, required};
use crate::meta::{validate_dns1035_label, validate_dns1123_subdomain};
use crate::status::{cause, StatusCause};
use serde_json::Value;
use super::fields::{items, s};
use std::net::IpAddr;

const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];
const POLICY_TYPES: [&str; 2] = ["Ingress", "Egress"];
const PATH_TYPES: [&str; 3] = ["Exact", "ImplementationSpecific", "Prefix"];
const INVALID_PATH_SEQUENCES: [&str; 5] = ["//", "/./", "/../", "%2f", "%2F"];
const INVALID_PATH_SUFFIXES: [&str; 2] = ["/..", "/."];

/// A CIDR (`10.0.0.0/8`, `2001:db8::/32`): its address and prefix length.
fn cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (ip, len) = text.split_once('/')?;
    let ip: IpAddr = ip.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    (len <= if ip.is_ipv4() { 32 } else { 128 }).then_some((ip, len))
}

/// Whether `inner` lies inside `outer` (same family, its address under `outer`'s mask).
fn contains(outer: (IpAddr, u8), inner: IpAddr) -> bool {
    let bits = |ip: IpAddr| -> (u128, u32) {
        match ip {
            IpAddr::V4(v) => (u128::from(u32::from(v)), 32),
            IpAddr::V6(v) => (u128::from(v), 128),
        }
    };
    let ((o, width), (i, w2)) = (bits(outer.0), bits(inner));
    if width != w2 {
        return false;
    }
    let shift = width - u32::from(outer.1);
    shift >= width || (o >> shift) == (i >> shift)
}

fn policy_port(p: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    if let Some(proto) = p.get("protocol").and_then(Value::as_str).filter(|v| !PROTOCOLS.contains(v)) {
        causes.push(not_supported(&format!("{at}.protocol"), proto, &PROTOCOLS));
    }
    if let Some(port) = p.get("port").filter(|v| v.is_number()) {
        causes.extend(port_number(&format!("{at}.port"), port));
    }
}

fn ip_block(b: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    let text = s(b, "cidr");
    if text.is_empty() {
        causes.push(required(&format!("{at}.cidr")));
        return;
    }
    let Some(outer) = cidr(text) else {
        causes.push(invalid(&format!("{at}.cidr"), &Value::from(text), "not a valid CIDR"));
        return;
    };
    for (i, e) in items(b, "except").iter().enumerate() {
        let field = format!("{at}.except[{i}]");
        let Some(inner) = e.as_str().and_then(cidr) else {
            causes.push(invalid(&field, e, "not a valid CIDR"));
            return;
        };
        if !contains(outer, inner.0) || outer.1 >= inner.1 {
            causes.push(invalid(&field, e, "must be a strict subset of `cidr`"));
        }
    }
}

pub(super) fn validate_network_policy(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    for (rules, peers) in [("ingress", "from"), ("egress", "to")] {
        for (i, rule) in items(&spec, rules).iter().enumerate() {
            let at = format!("spec.{rules}[{i}]");
            for (j, p) in items(rule, "ports").iter().enumerate() {
                policy_port(p, &format!("{at}.ports[{j}]"), &mut causes);
            }
            for (j, peer) in items(rule, peers).iter().enumerate() {
                if let Some(b) = peer.get("ipBlock").filter(|b| b.is_object()) {
                    ip_block(b, &format!("{at}.{peers}[{j}].ipBlock"), &mut causes);
                }
            }
        }
    }
    let types = items(&spec, "policyTypes");
    if types.len() > POLICY_TYPES.len() {
        let shown: Vec<String> = types.iter().map(|t| format!("{:?}", t.as_str().unwrap_or(""))).collect();
        causes.push(invalid_shown("spec.policyTypes", &format!("&[]networking.PolicyType{{{}}}", shown.join(", ")), "may not specify more than two policyTypes"));
        return causes;
    }
    for (i, t) in types.iter().enumerate() {
        let t = t.as_str().unwrap_or("");
        if !POLICY_TYPES.contains(&t) {
            causes.push(not_supported(&format!("spec.policyTypes[{i}]"), t, &POLICY_TYPES));
        }
    }
    causes
}

fn backend(b: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    match (b.get("resource").filter(|r| !r.is_null()), b.get("service").filter(|s| !s.is_null())) {
        (Some(_), Some(_)) => causes.push(invalid(at, &Value::from(""), "cannot set both resource and service backends")),
        (Some(r), None) => {
            for f in ["kind", "name"] {
                if s(r, f).is_empty() {
                    causes.push(cause("FieldValueRequired", &format!("{at}.resource.{f}"), format!("Required value: {f} is required")));
                }
            }
        }
        (None, Some(svc)) => {
            let name = s(svc, "name");
            if name.is_empty() {
                causes.push(required(&format!("{at}.service.name")));
            } else if let Err(why) = validate_dns1035_label(name) {
                causes.push(invalid(&format!("{at}.service.name"), &Value::from(name), &why));
            }
            let port = svc.get("port").cloned().unwrap_or(Value::Null);
            let (name, number) = (s(&port, "name"), port.get("number").and_then(Value::as_i64).unwrap_or(0));
            match (name.is_empty(), number == 0) {
                (false, false) => causes.push(invalid(at, &Value::from(""), "cannot set both port name & port number")),
                (true, true) => causes.push(cause("FieldValueRequired", at, "Required value: port name or number is required")),
                (true, false) => causes.extend(port_number(&format!("{at}.service.port.number"), &Value::from(number))),
                (false, true) => {}
            }
        }
        (None, None) => causes.push(invalid(at, &Value::from(""), "resource or service backend is required")),
    }
}

fn http_path(p: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    let path = s(p, "path");
    match p.get("pathType").and_then(Value::as_str) {
        None => {
            causes.push(cause("FieldValueRequired", &format!("{at}.pathType"), "Required value: pathType must be specified"));
            return;
        }
        Some("Exact" | "Prefix") => {
            if !path.starts_with('/') {
                causes.push(invalid(&format!("{at}.path"), &Value::from(path), "must be an absolute path"));
            }
            for seq in INVALID_PATH_SEQUENCES.iter().filter(|q| path.contains(**q)) {
                causes.push(invalid(&format!("{at}.path"), &Value::from(path), &format!("must not contain '{seq}'")));
            }
            for suffix in INVALID_PATH_SUFFIXES.iter().filter(|q| path.ends_with(**q)) {
                causes.push(invalid(&format!("{at}.path"), &Value::from(path), &format!("cannot end with '{suffix}'")));
            }
        }
        Some("ImplementationSpecific") => {
            if !path.is_empty() && !path.starts_with('/') {
                causes.push(invalid(&format!("{at}.path"), &Value::from(path), "must be an absolute path"));
            }
        }
        Some(other) => causes.push(not_supported(&format!("{at}.pathType"), other, &PATH_TYPES)),
    }
    backend(p.get("backend").unwrap_or(&Value::Null), &format!("{at}.backend"), causes);
}

pub(super) fn validate_ingress(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let rules = items(&spec, "rules");
    let default = spec.get("defaultBackend").filter(|b| !b.is_null());
    if rules.is_empty() && default.is_none() {
        causes.push(invalid_shown("spec", "[]networking.IngressRule(nil)", "either `defaultBackend` or `rules` must be specified"));
    }
    if let Some(b) = default {
        backend(b, "spec.defaultBackend", &mut causes);
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        let host = s(rule, "host");
        if !host.is_empty() {
            if host.parse::<IpAddr>().is_ok() {
                causes.push(invalid(&format!("{at}.host"), &Value::from(host), "must be a DNS name, not an IP address"));
            }
            if host.contains('*') {
                if !host.strip_prefix("*.").is_some_and(|rest| !rest.contains('*') && validate_dns1123_subdomain(rest).is_ok()) {
                    causes.push(invalid(&format!("{at}.host"), &Value::from(host), WILDCARD_RULE));
                }
            } else if let Err(why) = validate_dns1123_subdomain(host) {
                causes.push(invalid(&format!("{at}.host"), &Value::from(host), &why));
            }
        }
        if let Some(http) = rule.get("http").filter(|h| !h.is_null()) {
            let paths = items(http, "paths");
            if paths.is_empty() {
                causes.push(required(&format!("{at}.http.paths")));
            }
            for (j, p) in paths.iter().enumerate() {
                http_path(p, &format!("{at}.http.paths[{j}]"), &mut causes);
            }
        }
    }
    causes
}


/// Upstream's `IsWildcardDNS1123Subdomain` message.
const WILDCARD_RULE: &str = "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

const CIDR_RULE: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

fn go_cidr_spec(spec: &Value) -> String {
    format!("networking.ServiceCIDRSpec{{CIDRs:{}}}", super::errors::go_strings(spec.get("cidrs")))
}

pub(super) fn validate_service_cidr(obj: &Value) -> Vec<StatusCause> {
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let list = items(spec, "cidrs");
    match list.len() {
        0 => return vec![cause("FieldValueRequired", "spec.cidrs", "Required value: at least one CIDR required")],
        1 | 2 => {}
        _ => return vec![invalid_shown("spec.cidrs", &go_cidr_spec(spec), "may only hold up to 2 values")],
    }
    let parsed: Vec<Option<(IpAddr, u8)>> = list.iter().map(|c| c.as_str().and_then(cidr)).collect();
    if list.len() == 2 && !matches!(parsed.as_slice(), [Some(a), Some(b)] if a.0.is_ipv4() != b.0.is_ipv4()) {
        return vec![invalid_shown("spec.cidrs", &go_cidr_spec(spec), "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64")];
    }
    list.iter().zip(&parsed).enumerate().filter(|(_, (_, p))| p.is_none()).map(|(i, (c, _))| invalid(&format!("spec.cidrs[{i}]"), c, CIDR_RULE)).collect()
}

pub(super) fn validate_service_cidr_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    super::fields::immutable("spec.cidrs", "/spec/cidrs", old, new, |v| super::errors::go_strings(Some(v)), &mut causes);
    causes
}

fn path_segment(name: &str) -> Result<(), String> {
    crate::meta::validate_name(crate::resources::NameRule::PathSegment, name)
}

pub(super) fn validate_ip_address(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let Some(parent) = obj.pointer("/spec/parentRef").filter(|p| !p.is_null()) else {
        return vec![required("spec.parentRef")];
    };
    let at = "spec.parentRef";
    if !s(parent, "group").is_empty() {
        super::fields::check(&format!("{at}.group"), s(parent, "group"), validate_dns1123_subdomain, &mut causes);
    }
    super::fields::required_name(&format!("{at}.resource"), s(parent, "resource"), path_segment, &mut causes);
    super::fields::required_name(&format!("{at}.name"), s(parent, "name"), path_segment, &mut causes);
    if !s(parent, "namespace").is_empty() {
        super::fields::check(&format!("{at}.namespace"), s(parent, "namespace"), path_segment, &mut causes);
    }
    causes
}

pub(super) fn validate_ip_address_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let shown = |p: &Value| format!("networking.ParentReference{{Group:{:?}, Resource:{:?}, Namespace:{:?}, Name:{:?}}}", s(p, "group"), s(p, "resource"), s(p, "namespace"), s(p, "name"));
    super::fields::immutable("spec.parentRef", "/spec/parentRef", old, new, shown, &mut causes);
    causes
}

#[cfg(test)]
mod tests {
    use super::super::errors::fields;
    use super::*;
    use serde_json::json;

    #[test]
    fn network_policies_check_ports_blocks_and_types() {
        let np = json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress", "Sideways"], "ingress": [{"ports": [{"protocol": "ICMP", "port": 70000}], "from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16"]}}]}],
            "egress": [{"to": [{"ipBlock": {"cidr": "nope"}}]}]}});
        let causes = validate_network_policy(&np);
        assert_eq!(fields(&causes), ["spec.ingress[0].ports[0].protocol", "spec.ingress[0].ports[0].port", "spec.ingress[0].from[0].ipBlock.except[0]", "spec.egress[0].to[0].ipBlock.cidr", "spec.policyTypes[1]"]);
        assert_eq!(causes[2].message, "Invalid value: \"11.0.0.0/16\": must be a strict subset of `cidr`");
        assert!(validate_network_policy(&json!({"spec": {"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]}]}})).is_empty());
    }

    #[test]
    fn ingresses_need_rules_or_a_backend_and_typed_absolute_paths() {
        assert_eq!(validate_ingress(&json!({"spec": {}}))[0].message, "Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified");
        let ing = json!({"spec": {"rules": [{"host": "10.0.0.1", "http": {"paths": [{"path": "a", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}, {"path": "/", "backend": {}}]}}]}});
        let causes = validate_ingress(&ing);
        assert_eq!(fields(&causes), ["spec.rules[0].host", "spec.rules[0].http.paths[0].path", "spec.rules[0].http.paths[1].pathType"]);
        let wild = json!({"spec": {"rules": [{"host": "foo.*.example.com"}, {"host": "*.Example.com"}]}});
        assert_eq!(fields(&validate_ingress(&wild)), ["spec.rules[0].host", "spec.rules[1].host"]);
        let ok = json!({"spec": {"rules": [{"host": "*.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"name": "http"}}}}]}}]}});
        assert!(validate_ingress(&ok).is_empty());
    }

    #[test]
    fn a_service_cidr_holds_one_or_two_cidrs_of_different_families() {
        assert_eq!(validate_service_cidr(&json!({"spec": {}}))[0].message, "Required value: at least one CIDR required");
        assert!(validate_service_cidr(&json!({"spec": {"cidrs": ["10.96.0.0/12", "fd00::/108"]}})).is_empty());
        let same = validate_service_cidr(&json!({"spec": {"cidrs": ["10.96.0.0/12", "10.100.0.0/16"]}}));
        assert_eq!(same[0].message, "Invalid value: networking.ServiceCIDRSpec{CIDRs:[]string{\"10.96.0.0/12\", \"10.100.0.0/16\"}}: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64");
        assert_eq!(fields(&validate_service_cidr(&json!({"spec": {"cidrs": ["nope"]}}))), ["spec.cidrs[0]"]);
        let old = json!({"spec": {"cidrs": ["10.96.0.0/12"]}});
        assert_eq!(validate_service_cidr_update(&old, &json!({"spec": {"cidrs": ["10.0.0.0/16"]}}))[0].message, "Invalid value: []string{\"10.0.0.0/16\"}: field is immutable");
    }

    #[test]
    fn an_ip_address_names_its_parent_which_is_fixed() {
        assert_eq!(fields(&validate_ip_address(&json!({"spec": {}}))), ["spec.parentRef"]);
        let bad = json!({"spec": {"parentRef": {"group": "Bad_Group", "resource": "", "name": "a/b"}}});
        assert_eq!(fields(&validate_ip_address(&bad)), ["spec.parentRef.group", "spec.parentRef.resource", "spec.parentRef.name"]);
        let old = json!({"spec": {"parentRef": {"resource": "services", "namespace": "default", "name": "a"}}});
        let new = json!({"spec": {"parentRef": {"resource": "services", "namespace": "default", "name": "b"}}});
        assert_eq!(validate_ip_address_update(&old, &new)[0].message, "Invalid value: networking.ParentReference{Group:\"\", Resource:\"services\", Namespace:\"default\", Name:\"b\"}: field is immutable");
    }
}
