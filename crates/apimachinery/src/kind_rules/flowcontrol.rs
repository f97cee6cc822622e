//! API Priority and Fairness' objects (flowcontrol.apiserver.k8s.io/v1): the mandatory and
//! suggested PriorityLevelConfigurations and FlowSchemas kube-apiserver 1.33 creates at start
//! (its `bootstrap` package), each marked for automatic update as upstream marks them, and
//! upstream's validation of both kinds (precedences, subjects, rules, levels' shares and
//! queues). Stored and served here; `shardplane-flowcontrol` enforces them (RFC 0013), and the
//! shards keep the mandatory and managed objects' specs at these values as upstream's
//! config-producer does (`shards/src/flow_control.rs`).

use super::errors::{forbidden, go_strings, invalid, invalid_shown, not_supported, required};
use super::fields::{check, items, s, strings};
use crate::meta::{validate_dns1123_label, validate_dns1123_subdomain};
use crate::status::{cause, StatusCause};
use serde_json::{json, Value};

const API_VERSION: &str = "flowcontrol.apiserver.k8s.io/v1";
/// The annotation that hands an object's spec to the server, which keeps it at upstream's.
pub const AUTOUPDATE: &str = "apf.kubernetes.io/autoupdate-spec";

fn meta(name: &str) -> Value {
    json!({"name": name, "annotations": {AUTOUPDATE: "true"}})
}

/// A Limited priority level that queues: (name, nominal shares, lendable %, queues, hand size).
fn queuing(name: &str, shares: u32, lendable: u32, queues: u32, hand: u32) -> Value {
    json!({"apiVersion": API_VERSION, "kind": "PriorityLevelConfiguration", "metadata": meta(name), "spec": {"type": "Limited", "limited": {
        "nominalConcurrencyShares": shares, "lendablePercent": lendable,
        "limitResponse": {"type": "Queue", "queuing": {"queues": queues, "handSize": hand, "queueLengthLimit": 50}}}}})
}

/// The priority levels: mandatory (`exempt`, `catch-all`) first, then the suggested ones.
pub fn priority_levels() -> Vec<Value> {
    vec![
        json!({"apiVersion": API_VERSION, "kind": "PriorityLevelConfiguration", "metadata": meta("exempt"), "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}}),
        json!({"apiVersion": API_VERSION, "kind": "PriorityLevelConfiguration", "metadata": meta("catch-all"), "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 5, "lendablePercent": 0, "limitResponse": {"type": "Reject"}}}}),
        queuing("node-high", 40, 25, 64, 6),
        queuing("system", 30, 33, 64, 6),
        queuing("leader-election", 10, 0, 16, 4),
        queuing("workload-high", 40, 50, 128, 6),
        queuing("workload-low", 100, 90, 128, 6),
        queuing("global-default", 20, 50, 128, 6),
    ]
}

fn group(name: &str) -> Value {
    json!({"kind": "Group", "group": {"name": name}})
}

fn user(name: &str) -> Value {
    json!({"kind": "User", "user": {"name": name}})
}

fn kube_system_sa(name: &str) -> Value {
    json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": name}})
}

/// Every resource and non-resource request.
fn everything(subjects: Vec<Value>) -> Value {
    json!({"subjects": subjects,
        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]})
}

/// Leases (get, create, update) in any namespace.
fn leases(subjects: Vec<Value>) -> Value {
    json!({"subjects": subjects, "resourceRules": [{"verbs": ["get", "create", "update"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]}]})
}

fn flow_schema(name: &str, level: &str, precedence: u32, distinguisher: Option<&str>, rules: Value) -> Value {
    let mut spec = json!({"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": precedence, "rules": [rules]});
    if let Some(d) = distinguisher {
        spec["distinguisherMethod"] = json!({"type": d});
    }
    json!({"apiVersion": API_VERSION, "kind": "FlowSchema", "metadata": meta(name), "spec": spec})
}

/// The flow schemas: mandatory (`exempt`, `catch-all`) first, then the suggested ones.
pub fn flow_schemas() -> Vec<Value> {
    let everyone = || vec![group("system:unauthenticated"), group("system:authenticated")];
    let controllers = || vec![user("system:kube-controller-manager"), user("system:kube-scheduler"), kube_system_sa("*")];
    vec![
        flow_schema("exempt", "exempt", 1, None, everything(vec![group("system:masters")])),
        flow_schema("catch-all", "catch-all", 10000, Some("ByUser"), everything(everyone())),
        flow_schema("probes", "exempt", 2, None, json!({"subjects": everyone(), "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}]})),
        flow_schema("system-leader-election", "leader-election", 100, Some("ByUser"), leases(controllers())),
        flow_schema("endpoint-controller", "workload-high", 150, Some("ByUser"), json!({
            "subjects": [user("system:kube-controller-manager"), kube_system_sa("endpoint-controller")],
            "resourceRules": [{"verbs": ["get", "create", "update"], "apiGroups": [""], "resources": ["endpoints"], "namespaces": ["*"]}]})),
        flow_schema("workload-leader-election", "leader-election", 200, Some("ByUser"), leases(vec![kube_system_sa("*")])),
        flow_schema("system-node-high", "node-high", 400, Some("ByUser"), json!({"subjects": [group("system:nodes")], "resourceRules": [
            {"verbs": ["*"], "apiGroups": [""], "resources": ["nodes", "nodes/status"], "clusterScope": true, "namespaces": ["*"]},
            {"verbs": ["*"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]}]})),
        flow_schema("system-nodes", "system", 500, Some("ByUser"), everything(vec![group("system:nodes")])),
        flow_schema("kube-controller-manager", "workload-high", 800, Some("ByNamespace"), everything(vec![user("system:kube-controller-manager")])),
        flow_schema("kube-scheduler", "workload-high", 800, Some("ByNamespace"), everything(vec![user("system:kube-scheduler")])),
        flow_schema("kube-system-service-accounts", "workload-high", 900, Some("ByNamespace"), everything(vec![kube_system_sa("*")])),
        flow_schema("service-accounts", "workload-low", 9000, Some("ByUser"), everything(vec![group("system:serviceaccounts")])),
        flow_schema("global-default", "global-default", 9900, Some("ByUser"), everything(everyone())),
    ]
}

const MAX_MATCHING_PRECEDENCE: i64 = 10000;
const DISTINGUISHERS: [&str; 2] = ["ByNamespace", "ByUser"];
const SUBJECT_KINDS: [&str; 3] = ["Group", "ServiceAccount", "User"];
/// Sorted, as upstream's set lists them.
const VERBS: [&str; 9] = ["create", "delete", "deletecollection", "get", "list", "patch", "proxy", "update", "watch"];
const MAX_QUEUES: i64 = 10_000_000;
/// Upstream's shuffle-sharding hash width.
const MAX_HASH_BITS: i64 = 60;
const NAMESPACE_INTRO: &str = "each member of this list must be '*' or a DNS-1123 label; ";

fn required_because(field: &str, why: &str) -> StatusCause {
    cause("FieldValueRequired", field, format!("Required value: {why}"))
}

/// A list that may hold `*` only on its own (`what` names its members in the message).
fn wildcard_alone(list: &[&str], field: &str, what: &str, causes: &mut Vec<StatusCause>) -> bool {
    let wild = list.contains(&"*");
    if wild && list.len() > 1 {
        causes.push(invalid_shown(field, &go_strings_of(list), &format!("if '*' is present, must not specify other {what}")));
    }
    wild
}

fn go_strings_of(list: &[&str]) -> String {
    go_strings(Some(&json!(list)))
}

fn verbs(rule: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    let list = strings(rule, "verbs");
    let field = format!("{at}.verbs");
    if list.is_empty() {
        causes.push(required_because(&field, "verbs must contain at least one value"));
    } else if !wildcard_alone(&list, &field, "verbs", causes) && list.iter().any(|v| !VERBS.contains(v)) {
        let supported: Vec<String> = VERBS.iter().map(|v| format!("{v:?}")).collect();
        causes.push(cause("FieldValueNotSupported", &field, format!("Unsupported value: {}: supported values: {}", go_strings_of(&list), supported.join(", "))));
    }
}

/// Upstream's `ValidateNonResourceURLPath`.
fn non_resource_url(path: &str) -> Option<&'static str> {
    let stars = path.matches('*').count();
    match path {
        "" => Some("must not be empty"),
        "/" => None,
        p if !p.starts_with('/') => Some("must start with slash"),
        p if p.contains(' ') => Some("must not contain white-space"),
        p if p.contains("//") => Some("must not contain double slash"),
        p if stars > 1 || (stars == 1 && !p.ends_with("/*")) => Some("wildcard can only do suffix matching"),
        _ => None,
    }
}

fn subject(sub: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    let present = |k: &str| sub.get(k).is_some_and(|v| !v.is_null());
    let forbid = |k: &str, kind: &str, causes: &mut Vec<StatusCause>| {
        if present(k) {
            causes.push(forbidden(&format!("{at}.{k}"), &format!("{k} is forbidden when subject kind is not '{kind}'")));
        }
    };
    let kind = s(sub, "kind");
    match kind {
        "ServiceAccount" => {
            match sub.get("serviceAccount").filter(|v| !v.is_null()) {
                None => causes.push(required_because(&format!("{at}.serviceAccount"), "serviceAccount is required when subject kind is 'ServiceAccount'")),
                Some(sa) => {
                    match s(sa, "name") {
                        "" => causes.push(required(&format!("{at}.serviceAccount.name"))),
                        "*" => {}
                        name => check(&format!("{at}.serviceAccount.name"), name, validate_dns1123_subdomain, causes),
                    }
                    match s(sa, "namespace") {
                        "" => causes.push(required_because(&format!("{at}.serviceAccount.namespace"), "must specify namespace for service account")),
                        ns => check(&format!("{at}.serviceAccount.namespace"), ns, validate_dns1123_label, causes),
                    }
                }
            }
            forbid("user", "User", causes);
            forbid("group", "Group", causes);
        }
        "User" | "Group" => {
            let key = if kind == "User" { "user" } else { "group" };
            match sub.get(key).filter(|v| !v.is_null()) {
                None => causes.push(required_because(&format!("{at}.{key}"), &format!("{key} is required when subject kind is '{kind}'"))),
                Some(v) if s(v, "name").is_empty() => causes.push(required(&format!("{at}.{key}.name"))),
                Some(_) => {}
            }
            forbid("serviceAccount", "ServiceAccount", causes);
            forbid(if kind == "User" { "group" } else { "user" }, if kind == "User" { "Group" } else { "User" }, causes);
        }
        other => causes.push(not_supported(&format!("{at}.kind"), other, &SUBJECT_KINDS)),
    }
}

fn resource_rule(rule: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    verbs(rule, at, causes);
    for (key, what) in [("apiGroups", "api groups"), ("resources", "resources")] {
        let list = strings(rule, key);
        if list.is_empty() {
            let noun = if key == "apiGroups" { "api group" } else { "resource" };
            causes.push(required_because(&format!("{at}.{key}"), &format!("resource rules must supply at least one {noun}")));
        } else {
            wildcard_alone(&list, &format!("{at}.{key}"), what, causes);
        }
    }
    let namespaces = strings(rule, "namespaces");
    let field = format!("{at}.namespaces");
    if namespaces.is_empty() && rule.get("clusterScope") != Some(&Value::Bool(true)) {
        causes.push(required_because(&field, "resource rules that are not cluster scoped must supply at least one namespace"));
    } else if !wildcard_alone(&namespaces, &field, "namespaces", causes) {
        for (i, ns) in namespaces.iter().enumerate() {
            if let Err(why) = validate_dns1123_label(ns) {
                causes.push(invalid(&format!("{field}[{i}]"), &Value::from(*ns), &format!("{NAMESPACE_INTRO}{why}")));
            }
        }
    }
}

fn non_resource_rule(rule: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    verbs(rule, at, causes);
    let urls = strings(rule, "nonResourceURLs");
    let field = format!("{at}.nonResourceURLs");
    if urls.is_empty() {
        causes.push(required_because(&field, "nonResourceURLs must contain at least one value"));
    } else if !wildcard_alone(&urls, &field, "non-resource URLs", causes) {
        for (i, url) in urls.iter().enumerate() {
            if let Some(why) = non_resource_url(url) {
                causes.push(invalid(&format!("{field}[{i}]"), &Value::from(*url), why));
            }
        }
    }
}

/// A FlowSchema: its precedence, distinguisher, priority level and rules.
pub(super) fn validate_flow_schema(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    if let Some(p) = spec.get("matchingPrecedence").filter(|p| p.is_number()) {
        let n = p.as_i64().unwrap_or(0);
        if n <= 0 {
            causes.push(invalid("spec.matchingPrecedence", p, "must be a positive value"));
        }
        if n > MAX_MATCHING_PRECEDENCE {
            causes.push(invalid("spec.matchingPrecedence", p, &format!("must not be greater than {MAX_MATCHING_PRECEDENCE}")));
        }
        if n == 1 && crate::meta::meta_str(obj, "name") != "exempt" {
            causes.push(invalid("spec.matchingPrecedence", p, "only the schema named 'exempt' may have matchingPrecedence 1"));
        }
    }
    if let Some(d) = spec.get("distinguisherMethod").filter(|d| !d.is_null()) && !DISTINGUISHERS.contains(&s(d, "type")) {
        let shown = format!("flowcontrol.FlowDistinguisherMethod{{Type:{:?}}}", s(d, "type"));
        causes.push(cause("FieldValueNotSupported", "spec.distinguisherMethod.type", format!("Unsupported value: {shown}: supported values: \"ByNamespace\", \"ByUser\"")));
    }
    match spec.pointer("/priorityLevelConfiguration/name").and_then(Value::as_str).unwrap_or("") {
        "" => causes.push(required_because("spec.priorityLevelConfiguration.name", "must reference a priority level")),
        name => check("spec.priorityLevelConfiguration.name", name, validate_dns1123_subdomain, &mut causes),
    }
    for (i, rule) in items(spec, "rules").iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        let subjects = items(rule, "subjects");
        if subjects.is_empty() {
            causes.push(required_because(&format!("{at}.subjects"), "subjects must contain at least one value"));
        }
        for (j, sub) in subjects.iter().enumerate() {
            subject(sub, &format!("{at}.subjects[{j}]"), &mut causes);
        }
        let (resources, others) = (items(rule, "resourceRules"), items(rule, "nonResourceRules"));
        if resources.is_empty() && others.is_empty() {
            causes.push(required_because(&at, "at least one of resourceRules and nonResourceRules has to be non-empty"));
        }
        for (j, r) in resources.iter().enumerate() {
            resource_rule(r, &format!("{at}.resourceRules[{j}]"), &mut causes);
        }
        for (j, r) in others.iter().enumerate() {
            non_resource_rule(r, &format!("{at}.nonResourceRules[{j}]"), &mut causes);
        }
    }
    causes
}

fn int_at<'a>(v: &'a Value, key: &str) -> Option<(i64, &'a Value)> {
    let raw = v.get(key)?;
    raw.as_i64().map(|n| (n, raw))
}

/// Shares that may not be negative and a lendable percentage in 0..=100.
fn shares_and_lending(v: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    if let Some((n, raw)) = int_at(v, "nominalConcurrencyShares") && n < 0 {
        causes.push(invalid(&format!("{at}.nominalConcurrencyShares"), raw, "must be a non-negative integer"));
    }
    if let Some((n, raw)) = int_at(v, "lendablePercent") && !(0..=100).contains(&n) {
        causes.push(invalid(&format!("{at}.lendablePercent"), raw, "must be between 0 and 100, inclusive"));
    }
}

fn validate_queuing(q: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    let get = |k: &str| int_at(q, k).map_or(0, |(n, _)| n);
    let limit = get("queueLengthLimit");
    if limit <= 0 {
        causes.push(invalid(&format!("{at}.queueLengthLimit"), &Value::from(limit), "must be positive"));
    }
    let queues = get("queues");
    if queues <= 0 {
        causes.push(invalid(&format!("{at}.queues"), &Value::from(queues), "must be positive"));
    } else if queues > MAX_QUEUES {
        causes.push(invalid(&format!("{at}.queues"), &Value::from(queues), &format!("must not be greater than {MAX_QUEUES}")));
    }
    let hand = get("handSize");
    let field = format!("{at}.handSize");
    if hand <= 0 {
        causes.push(invalid(&field, &Value::from(hand), "must be positive"));
    } else if hand > queues {
        causes.push(invalid(&field, &Value::from(hand), &format!("should not be greater than queues ({queues})")));
    } else if ((queues as f64).log2() * hand as f64).ceil() as i64 > MAX_HASH_BITS {
        causes.push(invalid(&field, &Value::from(hand), &format!("required entropy bits of deckSize {queues} and handSize {hand} should not be greater than {MAX_HASH_BITS}")));
    }
}

/// A PriorityLevelConfiguration: its type against its name, and a level's shares, lending,
/// borrowing and how it answers when full.
pub(super) fn validate_priority_level(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let ty = s(spec, "type");
    if (crate::meta::meta_str(obj, "name") == "exempt") != (ty == "Exempt") {
        causes.push(invalid("spec.type", &Value::from(ty), "type must be 'Exempt' if and only if name is 'exempt'"));
    }
    let present = |k: &str| spec.get(k).filter(|v| !v.is_null());
    match ty {
        "Exempt" => {
            if present("limited").is_some() {
                causes.push(forbidden("spec.limited", "must be nil if the type is not Limited"));
            }
            if let Some(e) = present("exempt") {
                shares_and_lending(e, "spec.exempt", &mut causes);
            }
        }
        "Limited" => {
            if present("exempt").is_some() {
                causes.push(forbidden("spec.exempt", "must be nil if the type is Limited"));
            }
            let Some(l) = present("limited") else {
                causes.push(required_because("spec.limited", "must not be empty when type is Limited"));
                return causes;
            };
            shares_and_lending(l, "spec.limited", &mut causes);
            let lr = l.get("limitResponse").unwrap_or(&Value::Null);
            let q = lr.get("queuing").filter(|v| !v.is_null());
            match (s(lr, "type"), q) {
                ("Reject", Some(_)) => causes.push(forbidden("spec.limited.limitResponse.queuing", "must be nil if limited.limitResponse.type is not Limited")),
                ("Queue", None) => causes.push(required_because("spec.limited.limitResponse.queuing", "must not be empty if limited.limitResponse.type is Limited")),
                ("Queue", Some(q)) => validate_queuing(q, "spec.limited.limitResponse.queuing", &mut causes),
                ("Reject", None) => {}
                (other, _) => causes.push(not_supported("spec.limited.limitResponse.type", other, &["Queue", "Reject"])),
            }
            if let Some((n, raw)) = int_at(l, "borrowingLimitPercent") && n < 0 {
                causes.push(invalid("spec.limited.borrowingLimitPercent", raw, "if specified, must be a non-negative integer"));
            }
        }
        other => causes.push(not_supported("spec.type", other, &["Exempt", "Limited"])),
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::super::errors::fields;
    use super::*;

    #[test]
    fn every_flow_schema_names_a_bootstrap_priority_level_and_precedences_are_upstreams() {
        let levels: Vec<String> = priority_levels().iter().map(|l| l["metadata"]["name"].as_str().unwrap().to_owned()).collect();
        let schemas = flow_schemas();
        for fs in &schemas {
            assert!(levels.iter().any(|l| fs["spec"]["priorityLevelConfiguration"]["name"] == l.as_str()), "{fs}");
        }
        let mut order: Vec<(u64, &str)> = schemas.iter().map(|f| (f["spec"]["matchingPrecedence"].as_u64().unwrap(), f["metadata"]["name"].as_str().unwrap())).collect();
        order.sort();
        assert_eq!(order.first(), Some(&(1, "exempt")));
        assert_eq!(order.last(), Some(&(10000, "catch-all")));
        assert_eq!(schemas.len(), 13);
        assert_eq!(levels.len(), 8);
    }

    fn defaulted(kind: &str, mut obj: Value) -> Value {
        let info = crate::resources::builtin_resources().into_iter().find(|r| r.kind == kind && r.group == "flowcontrol.apiserver.k8s.io").expect("served");
        crate::defaults::set_defaults(&info, &mut obj);
        obj
    }

    #[test]
    fn the_bootstrap_configuration_passes_upstreams_rules() {
        for pl in priority_levels() {
            assert_eq!(validate_priority_level(&defaulted("PriorityLevelConfiguration", pl.clone())), vec![], "{pl}");
        }
        for fs in flow_schemas() {
            assert_eq!(validate_flow_schema(&defaulted("FlowSchema", fs.clone())), vec![], "{fs}");
        }
    }

    #[test]
    fn flow_schemas_need_subjects_rules_and_known_verbs() {
        let fs = json!({"metadata": {"name": "x"}, "spec": {"matchingPrecedence": 1, "priorityLevelConfiguration": {"name": ""},
            "distinguisherMethod": {"type": "ByNothing"},
            "rules": [{"subjects": [{"kind": "User"}], "resourceRules": [{"verbs": ["get", "fly"], "apiGroups": ["*", "apps"], "resources": ["pods"], "namespaces": ["Bad"]}]},
                      {"subjects": [], "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["healthz"]}]}]}});
        let causes = validate_flow_schema(&fs);
        assert_eq!(fields(&causes), [
            "spec.matchingPrecedence", "spec.distinguisherMethod.type", "spec.priorityLevelConfiguration.name",
            "spec.rules[0].subjects[0].user", "spec.rules[0].resourceRules[0].verbs", "spec.rules[0].resourceRules[0].apiGroups",
            "spec.rules[0].resourceRules[0].namespaces[0]", "spec.rules[1].subjects", "spec.rules[1].nonResourceRules[0].nonResourceURLs[0]"]);
        assert_eq!(causes[4].message, "Unsupported value: []string{\"get\", \"fly\"}: supported values: \"create\", \"delete\", \"deletecollection\", \"get\", \"list\", \"patch\", \"proxy\", \"update\", \"watch\"");
        assert_eq!(causes[5].message, "Invalid value: []string{\"*\", \"apps\"}: if '*' is present, must not specify other api groups");
    }

    #[test]
    fn priority_levels_match_their_type_and_bound_their_queues() {
        let pl = defaulted("PriorityLevelConfiguration", json!({"metadata": {"name": "p"}, "spec": {"type": "Limited", "limited": {
            "lendablePercent": 101, "borrowingLimitPercent": -1,
            "limitResponse": {"type": "Queue", "queuing": {"queues": 4, "handSize": 5}}}}}));
        let causes = validate_priority_level(&pl);
        assert_eq!(fields(&causes), ["spec.limited.lendablePercent", "spec.limited.limitResponse.queuing.handSize", "spec.limited.borrowingLimitPercent"]);
        assert_eq!(causes[1].message, "Invalid value: 5: should not be greater than queues (4)");
        let wide = defaulted("PriorityLevelConfiguration", json!({"metadata": {"name": "p"}, "spec": {"type": "Limited", "limited": {
            "limitResponse": {"type": "Queue", "queuing": {"queues": 1000000, "handSize": 4}}}}}));
        assert_eq!(validate_priority_level(&wide)[0].message, "Invalid value: 4: required entropy bits of deckSize 1000000 and handSize 4 should not be greater than 60");
        let exempt = json!({"metadata": {"name": "not-exempt"}, "spec": {"type": "Exempt"}});
        assert_eq!(validate_priority_level(&exempt)[0].message, "Invalid value: \"Exempt\": type must be 'Exempt' if and only if name is 'exempt'");
    }
}
