//! Discovery: `/version`, `/api`, `/apis`, `/api/v1`, `/apis/{g}`, `/apis/{g}/{v}`, legacy and
//! aggregated (apidiscovery.k8s.io/v2, chosen by the Accept header as upstream does).

use serde_json::{json, Value};
use shardplane_apimachinery::resources::ResourceInfo;
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

fn groups(resources: &[Arc<ResourceInfo>]) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in resources.iter().filter(|r| !r.group.is_empty()) {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

/// `/api` (legacy).
pub fn api_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]})
}

fn group_json(g: &str, v: &str) -> Value {
    let gv = format!("{g}/{v}");
    json!({"name": g, "versions": [{"groupVersion": gv, "version": v}], "preferredVersion": {"groupVersion": gv, "version": v}})
}

/// `/apis` (legacy).
pub fn api_group_list(resources: &[Arc<ResourceInfo>]) -> Value {
    let gs: Vec<Value> = groups(resources).into_iter().map(|(g, v)| group_json(g, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

/// `/apis/{g}`.
pub fn api_group(resources: &[Arc<ResourceInfo>], group: &str) -> Option<Value> {
    let (g, v) = groups(resources).into_iter().find(|(g, _)| *g == group)?;
    let mut doc = group_json(g, v);
    doc["kind"] = "APIGroup".into();
    doc["apiVersion"] = "v1".into();
    Some(doc)
}

/// `/api/v1` or `/apis/{g}/{v}`.
pub fn resource_list(resources: &[Arc<ResourceInfo>], group: &str, version: &str) -> Option<Value> {
    let rs: Vec<&Arc<ResourceInfo>> = resources.iter().filter(|r| r.group == group && r.version == version).collect();
    if rs.is_empty() {
        return None;
    }
    let mut items = Vec::new();
    for r in rs {
        let mut e = json!({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind, "verbs": VERBS});
        if !r.short_names.is_empty() {
            e["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            e["categories"] = json!(r.categories);
        }
        items.push(e);
        if r.has_status {
            items.push(json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}));
        }
        if r.plural == "namespaces" && r.group.is_empty() {
            items.push(json!({"name": "namespaces/finalize", "singularName": "", "namespaced": false, "kind": "Namespace", "verbs": ["update"]}));
        }
    }
    let gv = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": items}))
}

/// Aggregated discovery for `/api` (`core = true`) or `/apis`.
pub fn aggregated(resources: &[Arc<ResourceInfo>], core: bool) -> Value {
    let gvs: Vec<(&str, &str)> = if core { vec![("", "v1")] } else { groups(resources) };
    let items: Vec<Value> = gvs
        .into_iter()
        .map(|(g, v)| {
            let rs: Vec<Value> = resources
                .iter()
                .filter(|r| r.group == g && r.version == v)
                .map(|r| {
                    let kind = json!({"group": r.group, "version": r.version, "kind": r.kind});
                    let mut e = json!({
                        "resource": r.plural,
                        "responseKind": kind,
                        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": r.singular,
                        "verbs": VERBS,
                    });
                    if !r.short_names.is_empty() {
                        e["shortNames"] = json!(r.short_names);
                    }
                    if !r.categories.is_empty() {
                        e["categories"] = json!(r.categories);
                    }
                    if r.has_status {
                        e["subresources"] = json!([{"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]}]);
                    }
                    e
                })
                .collect();
            json!({"metadata": {"name": g}, "versions": [{"version": v, "resources": rs, "freshness": "Current"}]})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}
