//! ResourceQuota as upstream's quota admission and quota controller decide it (RFC 0014,
//! "ResourceQuota"): what an object uses ([`usage`]), which quotas it counts against
//! ([`matches`]), what a write does to a quota's `status.used` or why it is refused
//! ([`charge`]), and a quota's status recomputed from the objects that exist ([`recalculate`]).
//!
//! Pure decisions over JSON objects; reading the quotas and writing them with the object, in one
//! transaction, is the shard's.
//!
//! One departure from upstream, on purpose: a pod that is being deleted counts until it is gone
//! (upstream stops counting it once its grace period has run out, which depends on the clock).
//! A usage that depends only on the object is what lets every write charge or give back its own
//! usage in its own transaction, so `status.used` always equals what the objects use.

use crate::quantity::Quantity;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Usage by resource name.
pub type Usage = BTreeMap<String, Quantity>;

/// The resource names a pod's usage is counted under (besides extended `requests.*` names and
/// the hugepages prefixes).
const POD_RESOURCES: [&str; 11] = ["count/pods", "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory", "requests.ephemeral-storage", "limits.cpu", "limits.memory", "limits.ephemeral-storage", "pods"];

/// The names a quota on cpu or memory makes every container state (upstream's "backward
/// compatibility requirement").
const MUST_SPECIFY: [&str; 6] = ["cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"];

/// The object-count name of a resource: `count/<plural>` for the core group, else
/// `count/<plural>.<group>`.
pub fn count_name(group: &str, plural: &str) -> String {
    if group.is_empty() { format!("count/{plural}") } else { format!("count/{plural}.{group}") }
}

/// The resource (group, plural) whose objects a quota's resource name counts, if any.
pub fn counted_resource(name: &str) -> Option<(String, String)> {
    let core = |p: &str| Some((String::new(), p.to_owned()));
    if let Some(rest) = name.strip_prefix("count/") {
        return Some(match rest.split_once('.') {
            Some((plural, group)) => (group.to_owned(), plural.to_owned()),
            None => (String::new(), rest.to_owned()),
        });
    }
    match name {
        "services" | "services.nodeports" | "services.loadbalancers" => core("services"),
        "configmaps" | "secrets" | "replicationcontrollers" | "resourcequotas" => core(name),
        "persistentvolumeclaims" | "requests.storage" => core("persistentvolumeclaims"),
        n if n.contains(".storageclass.storage.k8s.io/") => core("persistentvolumeclaims"),
        n if POD_RESOURCES.contains(&n) || n.starts_with("hugepages-") || n.starts_with("requests.hugepages-") => core("pods"),
        n if n.starts_with("requests.") && n.contains('/') => core("pods"),
        _ => None,
    }
}

/// Whether a quota's resource `name` tracks objects of (group, plural).
pub fn tracks(name: &str, group: &str, plural: &str) -> bool {
    counted_resource(name).is_some_and(|(g, p)| g == group && p == plural)
}

fn one() -> Quantity {
    Quantity { nanos: 1_000_000_000, binary: false }
}

fn count(n: usize) -> Quantity {
    Quantity { nanos: n as i128 * 1_000_000_000, binary: false }
}

fn add(into: &mut Usage, name: &str, q: Quantity) {
    into.entry(name.to_owned()).and_modify(|v| *v = sum(*v, q)).or_insert(q);
}

fn sum(a: Quantity, b: Quantity) -> Quantity {
    Quantity { nanos: a.nanos.saturating_add(b.nanos), binary: a.binary || b.binary }
}

fn quantity(v: &Value) -> Option<Quantity> {
    match v {
        Value::String(s) => Quantity::parse(s),
        Value::Number(n) => Quantity::parse(&n.to_string()),
        _ => None,
    }
}

/// A resource list (`{"cpu": "500m"}`) as quantities; unreadable entries are skipped.
fn list(v: Option<&Value>) -> Usage {
    v.and_then(Value::as_object).into_iter().flatten().filter_map(|(k, q)| Some((k.clone(), quantity(q)?))).collect()
}

/// What `obj` of (group, plural) uses: its object count, and for pods, Services and claims what
/// upstream's evaluators count.
pub fn usage(group: &str, plural: &str, obj: &Value) -> Usage {
    let mut u = Usage::new();
    u.insert(count_name(group, plural), one());
    if !group.is_empty() {
        return u;
    }
    match plural {
        "pods" => pod_usage(obj, &mut u),
        "services" => {
            u.insert("services".into(), one());
            let ports = obj.pointer("/spec/ports").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            let ty = obj.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP");
            let (node_ports, balancers) = match ty {
                "NodePort" => (ports.len(), 0),
                "LoadBalancer" if obj.pointer("/spec/allocateLoadBalancerNodePorts") == Some(&Value::Bool(false)) => (ports.iter().filter(|p| p.get("nodePort").and_then(Value::as_u64).is_some_and(|n| n > 0)).count(), 1),
                "LoadBalancer" => (ports.len(), 1),
                _ => (0, 0),
            };
            u.insert("services.nodeports".into(), count(node_ports));
            u.insert("services.loadbalancers".into(), count(balancers));
        }
        "persistentvolumeclaims" => {
            u.insert("persistentvolumeclaims".into(), one());
            let class = obj.pointer("/spec/storageClassName").and_then(Value::as_str).unwrap_or("");
            if !class.is_empty() {
                u.insert(format!("{class}.storageclass.storage.k8s.io/persistentvolumeclaims"), one());
            }
            if let Some(storage) = obj.pointer("/spec/resources/requests/storage").and_then(quantity) {
                u.insert("requests.storage".into(), storage);
                if !class.is_empty() {
                    u.insert(format!("{class}.storageclass.storage.k8s.io/requests.storage"), storage);
                }
            }
        }
        "configmaps" | "secrets" | "replicationcontrollers" | "resourcequotas" => {
            u.insert(plural.to_owned(), one());
        }
        _ => {}
    }
    u
}

fn containers<'a>(pod: &'a Value, field: &str) -> &'a [Value] {
    pod.pointer(&format!("/spec/{field}")).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// The pod's effective requests or limits (`which`): its containers and sidecars summed, or an
/// init container's with the sidecars started before it where that is more, plus the overhead
/// (upstream's PodRequests / PodLimits).
fn pod_resources(pod: &Value, which: &str) -> Usage {
    let of = |c: &Value| list(c.pointer(&format!("/resources/{which}")));
    let mut total = Usage::new();
    for c in containers(pod, "containers") {
        for (k, q) in of(c) {
            add(&mut total, &k, q);
        }
    }
    let mut sidecars = Usage::new();
    let mut init_peak = Usage::new();
    for c in containers(pod, "initContainers") {
        let own = of(c);
        if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
            for (k, q) in own {
                add(&mut sidecars, &k, q);
                add(&mut total, &k, q);
            }
            continue;
        }
        for (k, q) in own {
            let with_sidecars = sum(q, sidecars.get(&k).copied().unwrap_or(Quantity { nanos: 0, binary: q.binary }));
            init_peak.entry(k).and_modify(|v| if with_sidecars.nanos > v.nanos { *v = with_sidecars }).or_insert(with_sidecars);
        }
    }
    for (k, q) in init_peak {
        total.entry(k).and_modify(|v| if q.nanos > v.nanos { *v = q }).or_insert(q);
    }
    for (k, q) in list(pod.pointer("/spec/overhead")) {
        if total.contains_key(&k) || which == "requests" {
            add(&mut total, &k, q);
        }
    }
    total
}

/// Whether a pod has reached its end (a terminal phase): it then uses only its object count.
fn pod_finished(pod: &Value) -> bool {
    matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"))
}

fn pod_usage(pod: &Value, u: &mut Usage) {
    if pod_finished(pod) {
        return;
    }
    u.insert("pods".into(), one());
    let requests = pod_resources(pod, "requests");
    let limits = pod_resources(pod, "limits");
    for (k, q) in &requests {
        match k.as_str() {
            "cpu" | "memory" | "ephemeral-storage" => {
                u.insert(k.clone(), *q);
                u.insert(format!("requests.{k}"), *q);
            }
            n if n.starts_with("hugepages-") => {
                u.insert(k.clone(), *q);
                u.insert(format!("requests.{k}"), *q);
            }
            // An extended resource (a domain-qualified name outside kubernetes.io).
            n if n.contains('/') && !n.starts_with("kubernetes.io/") && !n.starts_with("requests.") => {
                u.insert(format!("requests.{k}"), *q);
            }
            _ => {}
        }
    }
    for (k, q) in &limits {
        if matches!(k.as_str(), "cpu" | "memory" | "ephemeral-storage") {
            u.insert(format!("limits.{k}"), *q);
        }
    }
}

/// A pod is best effort when no container (init containers included) requests or limits cpu or
/// memory.
fn best_effort(pod: &Value) -> bool {
    ["containers", "initContainers"].iter().flat_map(|f| containers(pod, f)).all(|c| {
        ["requests", "limits"].iter().all(|w| c.pointer(&format!("/resources/{w}")).and_then(Value::as_object).is_none_or(|m| !m.contains_key("cpu") && !m.contains_key("memory")))
    })
}

fn cross_namespace_affinity(pod: &Value) -> bool {
    let terms = |ptr: &str, weighted: bool| -> bool {
        pod.pointer(ptr).and_then(Value::as_array).into_iter().flatten().any(|t| {
            let t = if weighted { &t["podAffinityTerm"] } else { t };
            t.get("namespaces").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) || t.get("namespaceSelector").is_some_and(|s| !s.is_null())
        })
    };
    ["podAffinity", "podAntiAffinity"].iter().any(|kind| {
        terms(&format!("/spec/affinity/{kind}/requiredDuringSchedulingIgnoredDuringExecution"), false) || terms(&format!("/spec/affinity/{kind}/preferredDuringSchedulingIgnoredDuringExecution"), true)
    })
}

/// One scope requirement: `spec.scopes` entries are `Exists` requirements, then
/// `spec.scopeSelector.matchExpressions`.
fn scope_requirements(quota: &Value) -> Vec<(String, String, Vec<String>)> {
    let strings = |v: Option<&Value>| -> Vec<String> { v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect() };
    let mut out: Vec<(String, String, Vec<String>)> = strings(quota.pointer("/spec/scopes")).into_iter().map(|s| (s, "Exists".to_owned(), vec![])).collect();
    for e in quota.pointer("/spec/scopeSelector/matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        out.push((e["scopeName"].as_str().unwrap_or("").to_owned(), e["operator"].as_str().unwrap_or("").to_owned(), strings(e.get("values"))));
    }
    out
}

/// Whether a pod meets one scope requirement.
fn pod_in_scope(pod: &Value, scope: &str, operator: &str, values: &[String]) -> bool {
    match scope {
        "Terminating" => pod.pointer("/spec/activeDeadlineSeconds").and_then(Value::as_i64).is_some_and(|s| s >= 0),
        "NotTerminating" => !pod.pointer("/spec/activeDeadlineSeconds").and_then(Value::as_i64).is_some_and(|s| s >= 0),
        "BestEffort" => best_effort(pod),
        "NotBestEffort" => !best_effort(pod),
        "CrossNamespacePodAffinity" => cross_namespace_affinity(pod),
        "PriorityClass" => {
            let class = pod.pointer("/spec/priorityClassName").and_then(Value::as_str).unwrap_or("");
            match operator {
                "Exists" => !class.is_empty(),
                "DoesNotExist" => class.is_empty(),
                "In" => !class.is_empty() && values.iter().any(|v| v == class),
                "NotIn" => class.is_empty() || !values.iter().any(|v| v == class),
                _ => false,
            }
        }
        _ => false,
    }
}

/// The quota's limits: `status.hard` as admission enforces them (the controller copies
/// `spec.hard` there), or `spec.hard` for the controller.
fn hard(quota: &Value, ptr: &str) -> Usage {
    list(quota.pointer(ptr))
}

/// Whether `obj` of (group, plural) counts against `quota` whose limits are `hard`: some limit
/// names a resource the kind uses, and every scope of the quota admits the object (only pods
/// meet scopes, as upstream: a scoped quota counts nothing else).
fn matches_hard(quota: &Value, hard: &Usage, group: &str, plural: &str, obj: &Value) -> bool {
    if !hard.keys().any(|k| tracks(k, group, plural)) {
        return false;
    }
    let is_pod = group.is_empty() && plural == "pods";
    scope_requirements(quota).iter().all(|(scope, op, values)| is_pod && pod_in_scope(obj, scope, op, values))
}

/// Whether `obj` of (group, plural) counts against `quota` as admission sees it (its
/// `status.hard`).
pub fn matches(quota: &Value, group: &str, plural: &str, obj: &Value) -> bool {
    matches_hard(quota, &hard(quota, "/status/hard"), group, plural, obj)
}

/// What a write does to one quota.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Nothing of what the quota limits changes.
    Unchanged,
    /// The write is allowed; the quota's `status.used` becomes this.
    Charge(Map<String, Value>),
    /// The write is refused (403) for this reason.
    Refuse(String),
}

fn pretty(u: &Usage) -> String {
    u.iter().map(|(k, q)| format!("{k}={}", q.canonical())).collect::<Vec<_>>().join(",")
}

/// What a write of (group, plural) from `old` to `new` (None: created, or removed) does to
/// `quota`, as upstream's quota admission decides it, except that usage going down is given
/// back at once instead of by the controller later. Only a write that uses more of a limited
/// resource can be refused; `creating` also checks that containers state what a cpu or memory
/// quota needs.
pub fn charge(quota: &Value, group: &str, plural: &str, old: Option<&Value>, new: Option<&Value>) -> Decision {
    let limits = hard(quota, "/status/hard");
    let name = crate::meta::meta_str(quota, "name");
    let side = |o: Option<&Value>| o.filter(|o| matches_hard(quota, &limits, group, plural, o)).map(|o| usage(group, plural, o)).unwrap_or_default();
    let (before, after) = (side(old), side(new));
    if before.is_empty() && after.is_empty() {
        return Decision::Unchanged;
    }
    let used = list(quota.pointer("/status/used"));
    let limited: Vec<&String> = limits.keys().filter(|k| tracks(k, group, plural)).collect();
    let mut delta = Usage::new();
    for k in &limited {
        let zero = Quantity { nanos: 0, binary: false };
        let (b, a) = (before.get(*k).copied().unwrap_or(zero), after.get(*k).copied().unwrap_or(zero));
        if a.nanos != b.nanos {
            delta.insert((*k).clone(), Quantity { nanos: a.nanos - b.nanos, binary: a.binary || b.binary });
        }
    }
    let grows = delta.values().any(|q| q.nanos > 0);
    if grows {
        if old.is_none() && group.is_empty() && plural == "pods" && !after.is_empty() {
            let required: BTreeSet<&str> = limited.iter().map(|k| k.as_str()).filter(|k| MUST_SPECIFY.contains(k)).collect();
            if let Some(missing) = new.and_then(|pod| unspecified(pod, &required)) {
                return Decision::Refuse(format!("failed quota: {name}: must specify {missing}"));
            }
        }
        let unknown: Vec<&str> = limited.iter().filter(|k| !used.contains_key(**k)).map(|k| k.as_str()).collect();
        if !unknown.is_empty() {
            return Decision::Refuse(format!("status unknown for quota: {name}, resources: {}", unknown.join(",")));
        }
    }
    if delta.is_empty() {
        return Decision::Unchanged;
    }
    let mut exceeded = BTreeSet::new();
    let mut next = used.clone();
    for (k, d) in &delta {
        let now = used.get(k).copied().unwrap_or(Quantity { nanos: 0, binary: d.binary });
        let total = Quantity { nanos: (now.nanos + d.nanos).max(0), binary: now.binary || d.binary };
        if d.nanos > 0 && limits.get(k).is_some_and(|h| total.nanos > h.nanos) {
            exceeded.insert(k.clone());
        }
        next.insert(k.clone(), total);
    }
    if !exceeded.is_empty() {
        let mask = |u: &Usage| -> Usage { u.iter().filter(|(k, _)| exceeded.contains(*k)).map(|(k, q)| (k.clone(), *q)).collect() };
        return Decision::Refuse(format!("exceeded quota: {name}, requested: {}, used: {}, limited: {}", pretty(&mask(&delta)), pretty(&mask(&used)), pretty(&mask(&limits))));
    }
    Decision::Charge(to_list(&next))
}

/// The resources in `required` a container of `pod` does not state, as upstream words it
/// (`limits.cpu for: a,b; requests.memory for: a`), or None.
fn unspecified(pod: &Value, required: &BTreeSet<&str>) -> Option<String> {
    let mut missing: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for c in ["containers", "initContainers"].iter().flat_map(|f| containers(pod, f)) {
        let requests = list(c.pointer("/resources/requests"));
        let limits = list(c.pointer("/resources/limits"));
        let mut has: BTreeSet<String> = BTreeSet::new();
        for r in ["cpu", "memory"] {
            if requests.contains_key(r) {
                has.insert(r.to_owned());
                has.insert(format!("requests.{r}"));
            }
            if limits.contains_key(r) {
                has.insert(format!("limits.{r}"));
            }
        }
        for r in required.iter().filter(|r| !has.contains(**r)) {
            missing.entry((*r).to_owned()).or_default().insert(c["name"].as_str().unwrap_or("").to_owned());
        }
    }
    (!missing.is_empty()).then(|| missing.iter().map(|(r, names)| format!("{r} for: {}", names.iter().cloned().collect::<Vec<_>>().join(","))).collect::<Vec<_>>().join("; "))
}

fn to_list(u: &Usage) -> Map<String, Value> {
    u.iter().map(|(k, q)| (k.clone(), Value::String(q.canonical()))).collect()
}

/// The resources (group, plural) whose objects the quota's `spec.hard` counts.
pub fn counted_resources(quota: &Value) -> BTreeSet<(String, String)> {
    hard(quota, "/spec/hard").keys().filter_map(|k| counted_resource(k)).collect()
}

/// The status the quota controller writes: `hard` from `spec.hard`, and `used` for each limited
/// resource summed over `objects` ((group, plural, object) of the quota's namespace) that match.
pub fn recalculate<'a>(quota: &Value, objects: impl IntoIterator<Item = (&'a str, &'a str, &'a Value)>) -> Value {
    let limits = hard(quota, "/spec/hard");
    let mut used: Usage = limits.keys().map(|k| (k.clone(), Quantity { nanos: 0, binary: false })).collect();
    for (group, plural, obj) in objects {
        if !matches_hard(quota, &limits, group, plural, obj) {
            continue;
        }
        for (k, q) in usage(group, plural, obj) {
            if let Some(total) = used.get_mut(&k) {
                *total = sum(*total, q);
            }
        }
    }
    json!({"hard": quota.pointer("/spec/hard").cloned().unwrap_or_else(|| json!({})), "used": Value::Object(to_list(&used))})
}

/// Whether the quota's status is what the controller has not yet written for its spec: its
/// `status.hard` differs from `spec.hard`, or a limit has no `used`.
pub fn status_stale(quota: &Value) -> bool {
    let (spec, status) = (hard(quota, "/spec/hard"), hard(quota, "/status/hard"));
    let used = list(quota.pointer("/status/used"));
    spec.len() != status.len() || spec.iter().any(|(k, q)| status.get(k).is_none_or(|s| s.nanos != q.nanos) || !used.contains_key(k))
}

/// Whether two `status.used` lists hold the same quantities.
pub fn same_usage(a: Option<&Value>, b: Option<&Value>) -> bool {
    let (a, b) = (list(a), list(b));
    a.len() == b.len() && a.iter().all(|(k, q)| b.get(k).is_some_and(|o| o.nanos == q.nanos))
}

#[cfg(test)]
mod tests;
