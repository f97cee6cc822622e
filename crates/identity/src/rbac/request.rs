//! What an HTTP request asks to do, from its method, path and query alone (upstream's
//! `RequestInfoFactory`): a path under `/api/{version}` or `/apis/{group}/{version}` names a
//! resource, any other path (discovery, health, metrics, OpenAPI) is a non-resource request.
//! The catalog is not consulted, as upstream's is not: an unserved resource is authorized like
//! a served one, so a caller cannot learn from a 403 or 404 which resources exist.

use super::rules::Attributes;

/// The subresources of a namespace path (`/api/v1/namespaces/{name}/status`); any other segment
/// after a namespace's name is a resource in that namespace.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// The attributes of a request with `method` for `path`; `watch` is the query's `watch`
/// parameter, `field_selector` its `fieldSelector`.
pub fn attributes(method: &str, path: &str, watch: bool, field_selector: &str) -> Attributes {
    let method_verb = method.to_ascii_lowercase();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest: &[&str] = match parts.as_slice() {
        ["api", _version, rest @ ..] if !rest.is_empty() => rest,
        ["apis", _group, _version, rest @ ..] if !rest.is_empty() => rest,
        _ => return Attributes::non_resource(&method_verb, path),
    };
    let api_group = if parts[0] == "apis" { parts[1] } else { "" };
    let mut verb = match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => method_verb.as_str(),
    }
    .to_owned();
    let mut rest = rest;
    // The legacy `/watch/` prefix.
    if rest.first() == Some(&"watch") {
        verb = "watch".into();
        rest = &rest[1..];
    }
    let mut namespace = "";
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        namespace = rest[1];
        // `/namespaces/{name}` and its status and finalize are the namespace itself.
        if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
            rest = &rest[2..];
        }
    }
    let resource = rest.first().copied().unwrap_or("");
    let mut name = rest.get(1).copied().unwrap_or("").to_owned();
    let subresource = rest.get(2).copied().unwrap_or("");
    if name.is_empty() && verb == "get" {
        verb = if watch { "watch" } else { "list" }.into();
        // A list or watch of one object by name is authorized for that name.
        if let Some(exact) = field_selector.split(',').find_map(|term| term.strip_prefix("metadata.name==").or_else(|| term.strip_prefix("metadata.name="))) {
            name = exact.to_owned();
        }
    }
    if name.is_empty() && verb == "delete" {
        verb = "deletecollection".into();
    }
    Attributes::resource(&verb, api_group, resource, subresource, namespace, &name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(method: &str, path: &str) -> (String, String, String, String, String, String) {
        let x = attributes(method, path, false, "");
        (x.verb, x.api_group, x.resource, x.subresource, x.namespace, x.name)
    }

    fn t(v: &str, g: &str, r: &str, s: &str, ns: &str, n: &str) -> (String, String, String, String, String, String) {
        (v.into(), g.into(), r.into(), s.into(), ns.into(), n.into())
    }

    #[test]
    fn paths_name_resources_as_upstreams_request_info() {
        assert_eq!(a("GET", "/api/v1/namespaces/ns/pods"), t("list", "", "pods", "", "ns", ""));
        assert_eq!(a("GET", "/api/v1/namespaces/ns/pods/p/log"), t("get", "", "pods", "log", "ns", "p"));
        assert_eq!(a("POST", "/apis/apps/v1/namespaces/ns/deployments"), t("create", "apps", "deployments", "", "ns", ""));
        assert_eq!(a("PUT", "/apis/apps/v1/namespaces/ns/deployments/d/scale"), t("update", "apps", "deployments", "scale", "ns", "d"));
        assert_eq!(a("DELETE", "/api/v1/namespaces/ns/configmaps"), t("deletecollection", "", "configmaps", "", "ns", ""));
        assert_eq!(a("GET", "/api/v1/namespaces/ns"), t("get", "", "namespaces", "", "ns", "ns"));
        assert_eq!(a("PUT", "/api/v1/namespaces/ns/finalize"), t("update", "", "namespaces", "finalize", "ns", "ns"));
        assert_eq!(a("GET", "/api/v1/namespaces"), t("list", "", "namespaces", "", "", ""));
        assert_eq!(a("GET", "/api/v1/nodes/n1"), t("get", "", "nodes", "", "", "n1"));
        assert_eq!(a("GET", "/api/v1/watch/namespaces/ns/pods"), t("watch", "", "pods", "", "ns", ""));
        assert_eq!(a("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"), t("create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", ""));
        let w = attributes("GET", "/api/v1/namespaces/ns/pods", true, "metadata.name=p");
        assert_eq!((w.verb.as_str(), w.name.as_str()), ("watch", "p"));
    }

    #[test]
    fn other_paths_are_non_resource_requests() {
        for path in ["/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/healthz", "/version", "/openapi/v2", "/metrics"] {
            let x = attributes("GET", path, false, "");
            assert!(!x.resource_request, "{path}");
            assert_eq!((x.verb.as_str(), x.path.as_str()), ("get", path));
        }
        assert_eq!(attributes("POST", "/healthz", false, "").verb, "post");
    }
}
