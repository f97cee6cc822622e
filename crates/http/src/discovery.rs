//! Discovery: `/version`, `/api`, `/apis`, `/api/v1`, `/apis/{g}`, `/apis/{g}/{v}`, legacy and
//! aggregated (apidiscovery.k8s.io/v2, chosen by the Accept header as upstream does).

use serde_json::{json, Value};
use shardplane_apimachinery::resources::{Backing, ResourceInfo};
use std::sync::Arc;

/// Content type of aggregated discovery responses.
pub const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether the Accept header asks for aggregated discovery v2.
pub fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').next().is_some_and(|first| first.contains("g=apidiscovery.k8s.io") && first.contains("v=v2") && !first.contains("v=v2beta1") && first.contains("as=APIGroupDiscoveryList"))
}

const VERBS: [&str; 8] = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

/// `/version`.
pub fn version() -> Value {
    json!({"major": "1", "minor": "33", "emulationMajor": "1", "emulationMinor": "33", "gitVersion": concat!("v1.33.0-shardplane.", env!("CARGO_PKG_VERSION")), "gitCommit": "", "gitTreeState": "clean", "buildDate": "", "goVersion": "", "compiler": "rustc", "platform": "linux/amd64"})
}

/// Whether a resource has the scale subresource.
fn has_scale(r: &ResourceInfo) -> bool {
    r.scale().is_some()
}

/// Upstream's version order: GA before beta before alpha, higher majors first within each, then
/// higher minor levels; anything else after, by name.
fn version_order(v: &str) -> (u8, std::cmp::Reverse<u64>, std::cmp::Reverse<u64>, String) {
    let parsed = v.strip_prefix('v').and_then(|rest| {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        match &rest[digits..] {
            "" => Some((0, major, 0)),
            t if t.starts_with("beta") => Some((1, major, t[4..].parse().ok()?)),
            t if t.starts_with("alpha") => Some((2, major, t[5..].parse().ok()?)),
            _ => None,
        }
    });
    match parsed {
        Some((level, major, minor)) => (level, std::cmp::Reverse(major), std::cmp::Reverse(minor), String::new()),
        None => (3, std::cmp::Reverse(0), std::cmp::Reverse(0), v.to_owned()),
    }
}

/// The built-in groups in upstream's discovery order (kube-apiserver orders groups by a priority
/// per group; custom resources' groups come after them, by name).
const GROUP_ORDER: [&str; 20] = [
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
    "discovery.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "resource.k8s.io",
];

/// The named groups and their versions, preferred first, in discovery order.
fn groups(resources: &[Arc<ResourceInfo>]) -> Vec<(&str, Vec<&str>)> {
    let mut out: Vec<(&str, Vec<&str>)> = Vec::new();
    for r in resources.iter().filter(|r| !r.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, vs)) if !vs.contains(&r.version.as_str()) => vs.push(&r.version),
            Some(_) => {}
            None => out.push((&r.group, vec![&r.version])),
        }
    }
    for (_, vs) in &mut out {
        vs.sort_by_key(|v| version_order(v));
    }
    out.sort_by_key(|(g, _)| (GROUP_ORDER.iter().position(|o| o == g).unwrap_or(GROUP_ORDER.len()), *g));
    out
}

/// `/api` (legacy).
pub fn api_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]})
}

fn group_json(g: &str, versions: &[&str]) -> Value {
    let gv = |v: &str| json!({"groupVersion": format!("{g}/{v}"), "version": v});
    json!({"name": g, "versions": versions.iter().map(|v| gv(v)).collect::<Vec<_>>(), "preferredVersion": gv(versions[0])})
}

/// `/apis` (legacy).
pub fn api_group_list(resources: &[Arc<ResourceInfo>]) -> Value {
    let gs: Vec<Value> = groups(resources).into_iter().map(|(g, vs)| group_json(g, &vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

/// `/apis/{g}`.
pub fn api_group(resources: &[Arc<ResourceInfo>], group: &str) -> Option<Value> {
    let (g, vs) = groups(resources).into_iter().find(|(g, _)| *g == group)?;
    let mut doc = group_json(g, &vs);
    doc["kind"] = "APIGroup".into();
    doc["apiVersion"] = "v1".into();
    Some(doc)
}

/// One subresource as discovery lists it.
struct Subresource {
    name: &'static str,
    /// The kind it answers with: (group, version, kind).
    kind: (String, String, String),
    verbs: &'static [&'static str],
}

/// The subresources of `r`: `status`, `scale`, a pod's `binding`, a namespace's `finalize`, a
/// ServiceAccount's `token`, ….
fn subresources(r: &ResourceInfo) -> Vec<Subresource> {
    let own = || (r.group.clone(), r.version.clone(), r.kind.clone());
    let mut out = Vec::new();
    let core = |kind: &str| (String::new(), "v1".to_owned(), kind.to_owned());
    if r.group == "certificates.k8s.io" && r.plural == "certificatesigningrequests" {
        out.push(Subresource { name: "approval", kind: own(), verbs: &["get", "patch", "update"] });
    }
    if r.group.is_empty() && r.plural == "pods" {
        // As upstream lists them (alphabetically), the kubelet's with the verbs their
        // connections use.
        out.push(Subresource { name: "attach", kind: core("PodAttachOptions"), verbs: &["create", "get"] });
        out.push(Subresource { name: "binding", kind: core("Binding"), verbs: &["create"] });
        out.push(Subresource { name: "ephemeralcontainers", kind: own(), verbs: &["get", "patch", "update"] });
        out.push(Subresource { name: "eviction", kind: ("policy".into(), "v1".into(), "Eviction".into()), verbs: &["create"] });
        out.push(Subresource { name: "exec", kind: core("PodExecOptions"), verbs: &["create", "get"] });
        out.push(Subresource { name: "log", kind: own(), verbs: &["get"] });
        out.push(Subresource { name: "portforward", kind: core("PodPortForwardOptions"), verbs: &["create", "get"] });
        out.push(Subresource { name: "proxy", kind: core("PodProxyOptions"), verbs: &["create", "delete", "get", "patch", "update"] });
    }
    if r.group.is_empty() && r.plural == "namespaces" {
        out.push(Subresource { name: "finalize", kind: own(), verbs: &["update"] });
    }
    if r.group.is_empty() && r.plural == "serviceaccounts" {
        // TokenRequest, answered by the router that holds the signing key (RFC 0012).
        out.push(Subresource { name: "token", kind: ("authentication.k8s.io".into(), "v1".into(), "TokenRequest".into()), verbs: &["create"] });
    }
    if has_scale(r) {
        out.push(Subresource { name: "scale", kind: ("autoscaling".into(), "v1".into(), "Scale".into()), verbs: &["get", "patch", "update"] });
    }
    if r.has_status {
        out.push(Subresource { name: "status", kind: own(), verbs: &["get", "patch", "update"] });
    }
    out
}

/// The verbs of a resource itself.
fn verbs(r: &ResourceInfo) -> &'static [&'static str] {
    match r.backing {
        Backing::Stored => &VERBS,
        Backing::CreateOnly | Backing::Review => &["create"],
        Backing::Probed => &["get", "list"],
    }
}

/// `/api/v1` or `/apis/{g}/{v}`.
pub fn resource_list(resources: &[Arc<ResourceInfo>], group: &str, version: &str) -> Option<Value> {
    let rs: Vec<&Arc<ResourceInfo>> = resources.iter().filter(|r| r.group == group && r.version == version).collect();
    if rs.is_empty() {
        return None;
    }
    let mut items = Vec::new();
    for r in rs {
        let mut e = json!({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind, "verbs": verbs(r)});
        if !r.short_names.is_empty() {
            e["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            e["categories"] = json!(r.categories);
        }
        items.push(e);
        for sub in subresources(r) {
            let (g, v, kind) = &sub.kind;
            let mut e = json!({"name": format!("{}/{}", r.plural, sub.name), "singularName": "", "namespaced": r.namespaced, "kind": kind, "verbs": sub.verbs});
            if (g, v) != (&r.group, &r.version) {
                e["group"] = json!(g);
                e["version"] = json!(v);
            }
            items.push(e);
        }
    }
    let gv = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": items}))
}

/// One group-version's resources in aggregated discovery.
fn aggregated_resources(resources: &[Arc<ResourceInfo>], g: &str, v: &str) -> Vec<Value> {
    resources
        .iter()
        .filter(|r| r.group == g && r.version == v)
        .map(|r| {
            let kind = json!({"group": r.group, "version": r.version, "kind": r.kind});
            let mut e = json!({
                "resource": r.plural,
                "responseKind": kind,
                "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                "singularResource": r.singular,
                "verbs": verbs(r),
            });
            if !r.short_names.is_empty() {
                e["shortNames"] = json!(r.short_names);
            }
            if !r.categories.is_empty() {
                e["categories"] = json!(r.categories);
            }
            let subresources: Vec<Value> = subresources(r)
                .into_iter()
                .map(|sub| json!({"subresource": sub.name, "responseKind": {"group": sub.kind.0, "version": sub.kind.1, "kind": sub.kind.2}, "verbs": sub.verbs}))
                .collect();
            if !subresources.is_empty() {
                e["subresources"] = Value::Array(subresources);
            }
            e
        })
        .collect()
}

/// Aggregated discovery for `/api` (`core = true`) or `/apis`.
pub fn aggregated(resources: &[Arc<ResourceInfo>], core: bool) -> Value {
    let gvs: Vec<(&str, Vec<&str>)> = if core { vec![("", vec!["v1"])] } else { groups(resources) };
    let items: Vec<Value> = gvs
        .into_iter()
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs.iter().map(|v| json!({"version": v, "resources": aggregated_resources(resources, g, v), "freshness": "Current"})).collect();
            json!({"metadata": {"name": g}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_ordered_as_upstream_prefers_them() {
        let mut vs = vec!["v1beta1", "v1alpha1", "v2", "v1", "v2beta2", "v2beta1", "zz", "v10"];
        vs.sort_by_key(|v| version_order(v));
        assert_eq!(vs, ["v10", "v2", "v1", "v2beta2", "v2beta1", "v1beta1", "v1alpha1", "zz"]);
    }
}
