//! The pod subresources kube-apiserver serves by connecting to the pod's kubelet (`log`, `exec`,
//! `attach`, `portforward`) or to the pod itself (`proxy`), answered as upstream answers them
//! when that connection cannot be made (RFC 0011): the container a request names is checked,
//! a pod with no node gets upstream's answer for it (an empty log; a 400 for the streams), and
//! otherwise the kubelet's address (from the Node object, upstream's preferred address types,
//! its kubelet port) is dialled and the dial's failure reported as upstream reports it.
//! shardplane does not relay kubelet streams: a kubelet that does answer gets a 503 saying so.

use crate::shard::Shard;
use crate::write::{current_from, Source};
use axum::body::Body;
use axum::http::{header, HeaderValue, Response};
use serde_json::Value;
use shardplane_apimachinery::request_path::Target;
use shardplane_apimachinery::status::cause;
use shardplane_apimachinery::ApiError;
use shardplane_http::query::Query;
use shardplane_http::storage_errors::status_of as storage_err;
use std::time::Duration;

/// `pods/{name}/log`.
pub const LOG: &str = "log";
/// `pods/{name}/exec`.
pub const EXEC: &str = "exec";
/// `pods/{name}/attach`.
pub const ATTACH: &str = "attach";
/// `pods/{name}/portforward`.
pub const PORTFORWARD: &str = "portforward";
/// `pods/{name}/proxy[/{path}]`.
pub const PROXY: &str = "proxy";

/// How long a dial to a kubelet or a pod may take.
const DIAL: Duration = Duration::from_secs(2);
/// The kubelet's port when its node does not say (upstream's default).
const KUBELET_PORT: u64 = 10250;
/// Upstream's `--kubelet-preferred-address-types` default.
const ADDRESS_TYPES: [&str; 5] = ["Hostname", "InternalDNS", "InternalIP", "ExternalDNS", "ExternalIP"];

/// One of the subresources above.
pub async fn serve(shard: &Shard, t: &Target, method: &str, path: &str, query: &Query) -> Result<Response<Body>, ApiError> {
    let sub = t.subresource.as_deref().unwrap_or("");
    let allowed: &[&str] = match sub {
        LOG => &["GET"],
        PROXY => &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
        _ => &["GET", "POST"],
    };
    if !allowed.contains(&method) {
        return Err(ApiError::method_not_allowed(&method.to_ascii_lowercase(), "", &format!("pods/{sub}")));
    }
    let ns = t.namespace.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    let key = shard.owned_key(&t.info, &ns, &name)?;
    // Read from the store, as upstream's GET without a resourceVersion reads: a pod bound a
    // moment ago must be seen bound (the cache may not have its binding yet).
    let (pod, _) = current_from(shard, &t.info, &key, &ns, &name, Source::Etcd).await?;
    match sub {
        LOG => {
            log_options(&name, query)?;
            let container = container(&pod, &name, query.get("container"))?;
            let Some(node) = node_of(&pod) else {
                // Not scheduled: upstream streams nothing.
                let mut r = Response::new(Body::empty());
                r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                return Ok(r);
            };
            let (host, port) = kubelet_address(shard, node).await?;
            let url = format!("https://{host}:{port}/containerLogs/{ns}/{name}/{container}");
            dial(&host, port).await.map_err(|e| ApiError::unclassified(format!("Get \"{url}\": {e}")))?;
            Err(not_relayed())
        }
        EXEC | ATTACH | PORTFORWARD => {
            if sub != PORTFORWARD {
                container(&pod, &name, query.get("container"))?;
            }
            let node = node_of(&pod).ok_or_else(|| ApiError::bad_request(format!("pod {name} does not have a host assigned")))?;
            let (host, port) = kubelet_address(shard, node).await?;
            dial(&host, port).await.map_err(|e| ApiError::unclassified(format!("error dialing backend: {e}")))?;
            Err(not_relayed())
        }
        _ => {
            let ip = pod.pointer("/status/podIP").and_then(Value::as_str).unwrap_or("");
            let addr: std::net::IpAddr = ip.parse().map_err(|_| ApiError::bad_request("address not allowed"))?;
            if !proxyable(addr) {
                return Err(ApiError::bad_request("address not allowed"));
            }
            let port = proxy_port(path).unwrap_or(80);
            dial(ip, port).await.map_err(|e| ApiError::unavailable(format!("error trying to reach service: {e}")))?;
            Err(not_relayed())
        }
    }
}

fn not_relayed() -> ApiError {
    ApiError::unavailable("the kubelet answered, but shardplane does not relay kubelet or pod connections (RFC 0011)")
}

/// Upstream's `ValidatePodLogOptions` on the query (a 422 naming PodLogOptions).
fn log_options(name: &str, query: &Query) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    for (field, min, detail) in [("tailLines", 0, "must be greater than or equal to 0"), ("limitBytes", 1, "must be greater than 0"), ("sinceSeconds", 1, "must be greater than 0")] {
        if let Some(v) = query.get(field) {
            match v.parse::<i64>() {
                Ok(n) if n < min => causes.push(cause("FieldValueInvalid", field, format!("Invalid value: {n}: {detail}"))),
                Ok(_) => {}
                Err(_) => return Err(ApiError::bad_request(format!("strconv.ParseInt: parsing {v:?}: invalid syntax"))),
            }
        }
    }
    if query.get("sinceSeconds").is_some() && query.get("sinceTime").is_some() {
        causes.push(cause("FieldValueForbidden", "", "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"));
    }
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid("", "PodLogOptions", name, causes)) }
}

fn names(pod: &Value, field: &str) -> Vec<String> {
    pod.pointer(&format!("/spec/{field}")).and_then(Value::as_array).into_iter().flatten().filter_map(|c| c["name"].as_str().map(str::to_owned)).collect()
}

/// The container a request means, as upstream picks it: the one named (it must exist), or the
/// pod's only one.
fn container(pod: &Value, name: &str, asked: Option<&str>) -> Result<String, ApiError> {
    let containers = names(pod, "containers");
    match asked.filter(|c| !c.is_empty()) {
        Some(c) => {
            let known = ["containers", "initContainers", "ephemeralContainers"].iter().any(|f| names(pod, f).iter().any(|n| n == c));
            if known { Ok(c.to_owned()) } else { Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}"))) }
        }
        None => match containers.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ApiError::bad_request(format!("a container name must be specified for pod {name}"))),
            many => {
                let mut msg = format!("a container name must be specified for pod {name}, choose one of: [{}]", many.join(" "));
                let init = names(pod, "initContainers");
                if !init.is_empty() {
                    msg.push_str(&format!(" or one of the init containers: [{}]", init.join(" ")));
                }
                Err(ApiError::bad_request(msg))
            }
        },
    }
}

fn node_of(pod: &Value) -> Option<&str> {
    pod.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty())
}

/// The kubelet's address and port, from its Node (read from the store: any shard may own it).
async fn kubelet_address(shard: &Shard, node: &str) -> Result<(String, u64), ApiError> {
    let nodes = shard.builtin("", "nodes");
    let (kv, _) = shard.store(&nodes).get(&Shard::any_key(&nodes, "", node)).await.map_err(storage_err)?;
    let n: Value = kv.and_then(|kv| serde_json::from_slice(&kv.value).ok()).ok_or_else(|| ApiError::not_found("", "nodes", node))?;
    let addresses = n.pointer("/status/addresses").and_then(Value::as_array).cloned().unwrap_or_default();
    let host = ADDRESS_TYPES
        .iter()
        .find_map(|ty| addresses.iter().find(|a| a["type"] == *ty).and_then(|a| a["address"].as_str()))
        .ok_or_else(|| {
            let known: Vec<String> = addresses.iter().map(|a| format!("{{{} {}}}", a["type"].as_str().unwrap_or(""), a["address"].as_str().unwrap_or(""))).collect();
            ApiError::unclassified(format!("no preferred addresses found; known addresses: [{}]", known.join(" ")))
        })?;
    let port = n.pointer("/status/daemonEndpoints/kubeletEndpoint/Port").and_then(Value::as_u64).filter(|p| *p != 0).unwrap_or(KUBELET_PORT);
    Ok((host.to_owned(), port))
}

/// Dials `host:port`; the error as Go's dialer words it.
async fn dial(host: &str, port: u64) -> Result<(), String> {
    let target = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    match tokio::time::timeout(DIAL, tokio::net::TcpStream::connect(&target)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Err(format!("dial tcp {target}: connect: connection refused")),
        Ok(Err(e)) => Err(format!("dial tcp {target}: {e}")),
        Err(_) => Err(format!("dial tcp {target}: i/o timeout")),
    }
}

/// Upstream's `IsProxyableIP`: not loopback, link-local or interface-local.
fn proxyable(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => !(v4.is_loopback() || v4.is_link_local() || v4.is_unspecified()),
        std::net::IpAddr::V6(v6) => !(v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xffc0) == 0xfe80 || (v6.segments()[0] & 0xff0f) == 0xff01),
    }
}

/// The port a proxy path names (`pods/web:8080/proxy`, `pods/https:web:8443/proxy`), from the
/// segment after `pods/`.
fn proxy_port(path: &str) -> Option<u64> {
    let segment = path.split('/').skip_while(|s| *s != "pods").nth(1)?;
    let parts: Vec<&str> = segment.split(':').collect();
    match parts.as_slice() {
        ["http" | "https", _, port] | [_, port] => port.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_container_is_picked_as_upstream_picks_it() {
        let one = json!({"spec": {"containers": [{"name": "c"}]}});
        assert_eq!(container(&one, "p", None).unwrap(), "c");
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}});
        assert_eq!(container(&two, "p", None).unwrap_err().message, "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]");
        assert_eq!(container(&two, "p", Some("i")).unwrap(), "i");
        assert_eq!(container(&two, "p", Some("z")).unwrap_err().message, "container z is not valid for pod p");
    }

    #[test]
    fn a_proxy_path_names_its_port() {
        assert_eq!(proxy_port("/api/v1/namespaces/d/pods/web:8080/proxy/x"), Some(8080));
        assert_eq!(proxy_port("/api/v1/namespaces/d/pods/https:web:8443/proxy"), Some(8443));
        assert_eq!(proxy_port("/api/v1/namespaces/d/pods/web/proxy"), None);
    }

    #[test]
    fn loopback_and_link_local_addresses_are_not_proxied() {
        assert!(!proxyable("127.0.0.1".parse().unwrap()));
        assert!(!proxyable("169.254.1.1".parse().unwrap()));
        assert!(!proxyable("fe80::1".parse().unwrap()));
        assert!(proxyable("10.1.2.3".parse().unwrap()));
    }
}
