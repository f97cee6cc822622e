//! Request paths to resources: `/api/v1/...` and `/apis/{group}/{version}/...`, read the same
//! way by shards and routers.

use crate::resources::ResourceInfo;
use std::sync::Arc;

/// What a resource path names.
#[derive(Clone, Debug)]
pub struct Target {
    pub info: Arc<ResourceInfo>,
    /// Namespace from the path (namespaced resources; None = all namespaces).
    pub namespace: Option<String>,
    /// Object name (None = the collection).
    pub name: Option<String>,
    /// Subresource (`status`, `finalize`).
    pub subresource: Option<String>,
}

/// The pod's name in a proxy path's `[scheme:]name[:port]`.
pub fn proxied_name(segment: &str) -> &str {
    let parts: Vec<&str> = segment.split(':').collect();
    match parts.as_slice() {
        [name] => name,
        ["http" | "https", name, ..] => name,
        [name, ..] => name,
        [] => segment,
    }
}

/// Parses a resource path; `None` if it names no served resource.
pub fn parse(path: &str, resources: &[Arc<ResourceInfo>]) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", v, rest),
        ["apis", g, v, rest @ ..] => (g, v, rest),
        _ => return None,
    };
    let find = |plural: &str| resources.iter().find(|r| r.group == group && r.version == version && r.plural == plural).cloned();
    let owned = |s: &str| Some(s.to_owned());
    match rest {
        // /namespaces/{ns}/{plural}[/{name}[/{sub}]] for namespaced resources.
        ["namespaces", ns, plural, tail @ ..] if !matches!(*plural, "status" | "finalize") || !tail.is_empty() => {
            let info = find(plural).filter(|i| i.namespaced)?;
            match tail {
                [] => Some(Target { info, namespace: owned(ns), name: None, subresource: None }),
                [name] => Some(Target { info, namespace: owned(ns), name: owned(name), subresource: None }),
                [name, sub] => Some(Target { info, namespace: owned(ns), name: owned(name), subresource: owned(sub) }),
                // A pod's proxy takes a path of its own (`pods/{name}/proxy/{path}`), and its
                // name may carry a scheme and a port (`https:web:8443`).
                [name, "proxy", ..] if info.group.is_empty() && info.plural == "pods" => Some(Target { info, namespace: owned(ns), name: Some(proxied_name(name).to_owned()), subresource: owned("proxy") }),
                _ => None,
            }
        }
        [plural] => Some(Target { info: find(plural)?, namespace: None, name: None, subresource: None }),
        [plural, name] => {
            let info = find(plural).filter(|i| !i.namespaced)?;
            Some(Target { info, namespace: None, name: owned(name), subresource: None })
        }
        [plural, name, sub] => {
            let info = find(plural).filter(|i| !i.namespaced)?;
            Some(Target { info, namespace: None, name: owned(name), subresource: owned(sub) })
        }
        _ => None,
    }
    .filter(|t| !t.name.as_deref().is_some_and(str::is_empty))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;

    #[test]
    fn paths() {
        let all: Vec<_> = builtin_resources().into_iter().map(Arc::new).collect();
        let t = parse("/api/v1/namespaces/default/configmaps/x", &all).unwrap();
        assert_eq!((t.info.plural.as_str(), t.namespace.as_deref(), t.name.as_deref()), ("configmaps", Some("default"), Some("x")));
        let t = parse("/api/v1/namespaces/default", &all).unwrap();
        assert_eq!((t.info.plural.as_str(), t.name.as_deref()), ("namespaces", Some("default")));
        let t = parse("/api/v1/namespaces/default/status", &all).unwrap();
        assert_eq!((t.info.plural.as_str(), t.name.as_deref(), t.subresource.as_deref()), ("namespaces", Some("default"), Some("status")));
        let t = parse("/apis/apps/v1/deployments", &all).unwrap();
        assert_eq!((t.info.plural.as_str(), t.namespace), ("deployments", None::<String>));
        assert!(parse("/apis/apps/v1/namespaces/x/pods", &all).is_none());
        assert!(parse("/api/v1/configmaps/x", &all).is_none());
        assert!(parse("/api/v2/pods", &all).is_none());
    }
}
