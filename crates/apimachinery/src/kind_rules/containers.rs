//! A container's probes and resources, as upstream's `validateContainers` checks them: one
//! handler per probe, its ports and scheme, no negative timings, a liveness or startup probe's
//! success threshold of 1; container resource names, no negative quantity, and no request
//! above its limit.

use super::errors::{forbidden, invalid, named_or_numbered_port, not_supported};
use crate::quantity::Quantity;
use crate::status::{cause, StatusCause};
use serde_json::Value;

/// A probe's handlers in the order upstream checks them.
const HANDLERS: [&str; 4] = ["exec", "httpGet", "tcpSocket", "grpc"];
const TIMINGS: [&str; 5] = ["initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"];
const SCHEMES: [&str; 2] = ["HTTP", "HTTPS"];

fn probe(p: &Value, at: &str, must_succeed_once: bool, causes: &mut Vec<StatusCause>) {
    let mut handlers = 0;
    for h in HANDLERS {
        let Some(handler) = p.get(h).filter(|v| !v.is_null()) else { continue };
        if handlers > 0 {
            causes.push(forbidden(&format!("{at}.{h}"), "may not specify more than 1 handler type"));
            continue;
        }
        handlers += 1;
        if matches!(h, "httpGet" | "tcpSocket") {
            let port = handler.get("port").cloned().unwrap_or(Value::from(0));
            named_or_numbered_port(&format!("{at}.{h}.port"), &port, causes);
        }
        if let Some(scheme) = handler.get("scheme").and_then(Value::as_str).filter(|s| h == "httpGet" && !SCHEMES.contains(s)) {
            causes.push(not_supported(&format!("{at}.httpGet.scheme"), scheme, &SCHEMES));
        }
    }
    if handlers == 0 {
        causes.push(cause("FieldValueRequired", at, "Required value: must specify a handler type"));
    }
    for t in TIMINGS {
        if let Some(v) = p.get(t).filter(|v| v.as_i64().is_some_and(|n| n < 0)) {
            causes.push(invalid(&format!("{at}.{t}"), v, "must be greater than or equal to 0"));
        }
    }
    // An unset threshold is defaulted to 1.
    if let Some(v) = p.get("successThreshold").filter(|v| must_succeed_once && v.as_i64().is_some_and(|n| n > 1)) {
        causes.push(invalid(&format!("{at}.successThreshold"), v, "must be 1"));
    }
}

fn quantity(v: &Value) -> Option<Quantity> {
    Quantity::parse(v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()).as_str())
}

fn resources(r: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    for section in ["limits", "requests"] {
        for (name, q) in r.get(section).and_then(Value::as_object).into_iter().flatten() {
            super::limit_ranges::resource_name(true, name, &format!("{at}.{section}[{name}]"), causes);
            if let Some(parsed) = quantity(q).filter(|p| p.nanos < 0) {
                causes.push(invalid(&format!("{at}.{section}[{name}]"), &Value::from(parsed.canonical()), "must be greater than or equal to 0"));
            }
        }
    }
    let limits = r.get("limits").and_then(Value::as_object);
    for (name, q) in r.get("requests").and_then(Value::as_object).into_iter().flatten() {
        let (Some(request), Some(limit)) = (quantity(q), limits.and_then(|l| l.get(name)).and_then(quantity)) else { continue };
        if request.nanos > limit.nanos {
            causes.push(invalid(&format!("{at}.requests[{name}]"), &Value::from(request.canonical()), &format!("must be less than or equal to {name} limit of {}", limit.canonical())));
        }
    }
}

/// The probes and resources of the container at `at`.
pub(super) fn validate(c: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    for (field, once) in [("livenessProbe", true), ("readinessProbe", false), ("startupProbe", true)] {
        if let Some(p) = c.get(field).filter(|p| p.is_object()) {
            probe(p, &format!("{at}.{field}"), once, causes);
        }
    }
    if let Some(r) = c.get("resources").filter(|r| r.is_object()) {
        resources(r, &format!("{at}.resources"), causes);
    }
}

#[cfg(test)]
mod tests {
    use super::super::errors::fields;
    use super::*;
    use serde_json::json;

    #[test]
    fn probes_have_one_handler_and_sane_timings() {
        let c = json!({"livenessProbe": {"exec": {"command": ["true"]}, "httpGet": {"port": 80}, "successThreshold": 2},
            "readinessProbe": {"periodSeconds": -1}, "startupProbe": {"httpGet": {"port": 70000, "scheme": "FTP"}}});
        let mut causes = Vec::new();
        validate(&c, "spec.containers[0]", &mut causes);
        assert_eq!(fields(&causes), [
            "spec.containers[0].livenessProbe.httpGet",
            "spec.containers[0].livenessProbe.successThreshold",
            "spec.containers[0].readinessProbe",
            "spec.containers[0].readinessProbe.periodSeconds",
            "spec.containers[0].startupProbe.httpGet.port",
            "spec.containers[0].startupProbe.httpGet.scheme",
        ]);
        assert_eq!(causes[2].message, "Required value: must specify a handler type");
    }

    #[test]
    fn requests_stay_within_limits() {
        let c = json!({"resources": {"limits": {"cpu": "1", "memory": "-1Gi"}, "requests": {"cpu": "2000m"}}});
        let mut causes = Vec::new();
        validate(&c, "spec.containers[0]", &mut causes);
        assert_eq!(fields(&causes), ["spec.containers[0].resources.limits[memory]", "spec.containers[0].resources.requests[cpu]"]);
        assert_eq!(causes[1].message, "Invalid value: \"2\": must be less than or equal to cpu limit of 1");
    }
}
