//! Services: their type, ports (numbers, names, protocols) and what each type requires, as
//! upstream's `ValidateService` words it.

use super::errors::{duplicate, not_supported, port_number, required};
use crate::status::StatusCause;
use serde_json::Value;
use std::collections::HashSet;

const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const AFFINITIES: [&str; 2] = ["ClientIP", "None"];

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
        if let Some(t) = p.get("targetPort").filter(|t| t.is_number()) {
            causes.extend(port_number(&format!("{at}.targetPort"), t));
        }
        if let Some(proto) = p.get("protocol").and_then(Value::as_str).filter(|v| !PROTOCOLS.contains(v)) {
            causes.push(not_supported(&format!("{at}.protocol"), proto, &PROTOCOLS));
        }
    }
    causes
}
