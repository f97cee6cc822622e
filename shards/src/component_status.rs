//! core/v1 `componentstatuses` (`kubectl get cs`): computed when read, as upstream computes
//! them, by probing the control plane's components (RFC 0011). Nothing is stored; every shard
//! answers the same, so a router asks one.
//!
//! The components are upstream's: `controller-manager` and `scheduler`, probed over HTTPS on
//! their default secure ports without verifying their certificates (as upstream does), and one
//! `etcd-N` per distinct store, probed with a read. Each answer is one `Healthy` condition: a
//! probe that answers 2xx is `True` with its body as the message; a refused connection or an
//! error status is `False` with upstream's message for it; a redirect is `Unknown`.

use crate::shard::Shard;
use axum::body::Body;
use axum::http::{Response, StatusCode};
use serde_json::{json, Value};
use shardplane_apimachinery::list_options::ListOptions;
use shardplane_apimachinery::request_path::Target;
use shardplane_apimachinery::selectors::field_value;
use shardplane_apimachinery::ApiError;
use shardplane_http::negotiation::{Representation, View};
use std::sync::LazyLock;
use std::time::Duration;

/// How long one probe may take (upstream's `probeTimeOut`).
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);
/// How much of a probe's answer becomes its message (upstream's prober reads at most 10 KiB).
const MAX_BODY: usize = 10 * 1024;
/// The components probed over HTTP: upstream's names and default secure ports.
const HTTP_COMPONENTS: [(&str, &str); 2] = [("controller-manager", "https://127.0.0.1:10257/healthz"), ("scheduler", "https://127.0.0.1:10259/healthz")];

/// One probe's outcome.
#[derive(Debug, PartialEq)]
struct Probed {
    /// `True`, `False` or `Unknown`.
    status: &'static str,
    message: String,
    error: String,
}

/// The client the HTTPS probes use: certificates not verified (upstream's `InsecureSkipVerify`;
/// the components serve self-signed ones by default), no redirect followed.
static PROBE_CLIENT: LazyLock<Option<reqwest::Client>> = LazyLock::new(|| {
    shardplane_http::outbound::client_builder()
        .danger_accept_invalid_certs(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(PROBE_TIMEOUT)
        .build()
        .inspect_err(|e| tracing::warn!(error = %e, "no HTTPS client for component probes"))
        .ok()
});

/// Upstream's deprecation warning for the resource, sent with every answer.
const DEPRECATED: &str = "299 - \"v1 ComponentStatus is deprecated in v1.19+\"";

/// GET of the list or of one component status, with upstream's deprecation warning.
pub async fn serve(shard: &Shard, t: &Target, method: &str, query: &str, view: View) -> Result<Response<Body>, ApiError> {
    let mut answer = answer(shard, t, method, query, view).await?;
    answer.headers_mut().insert(axum::http::header::WARNING, axum::http::HeaderValue::from_static(DEPRECATED));
    Ok(answer)
}

async fn answer(shard: &Shard, t: &Target, method: &str, query: &str, view: View) -> Result<Response<Body>, ApiError> {
    let verb = match (method, t.name.as_deref()) {
        ("GET", Some(_)) => "get",
        ("GET", None) => "list",
        (m, _) => return Err(ApiError::method_not_allowed(&m.to_ascii_lowercase(), &t.info.group, &t.info.plural)),
    };
    let o = ListOptions::parse(query, &t.info)?;
    if verb == "list" && o.watch {
        return Err(ApiError::method_not_allowed("watch", &t.info.group, &t.info.plural));
    }
    let mut names: Vec<String> = HTTP_COMPONENTS.iter().map(|(n, _)| (*n).to_owned()).collect();
    names.extend((0..shard.stores.all().len()).map(|i| format!("etcd-{i}")));
    names.sort();
    if let Some(name) = t.name.as_deref() {
        // Upstream answers an unknown name with a 500 ("Component not found"); a missing
        // object is a 404 everywhere else, and a client error is never a 500 here.
        if !names.iter().any(|n| n == name) {
            return Err(ApiError::not_found(&t.info.group, &t.info.plural, name));
        }
        names.retain(|n| n == name);
    }
    let single = t.name.is_some();
    let probes = names.iter().map(|n| probe(shard, n));
    let objects: Vec<Value> = futures::future::join_all(probes)
        .await
        .into_iter()
        .zip(&names)
        .map(|(p, name)| object(name, p))
        // A list is filtered as upstream filters it (no component has labels); a GET is not.
        .filter(|obj| single || (o.label_selector.matches_json(obj.pointer("/metadata/labels")) && o.field_selector.matches(|f| field_value(obj, f))))
        .collect();
    let bytes: Vec<Vec<u8>> = objects.iter().map(shardplane_apimachinery::encode::object_bytes).collect();
    match view.repr {
        Representation::Json if single => Ok(shardplane_http::body::json(StatusCode::OK, bytes::Bytes::from(bytes.into_iter().next().unwrap_or_default()))),
        Representation::Json => {
            let list = json!({"kind": t.info.list_kind, "apiVersion": t.info.api_version(), "metadata": {}, "items": objects});
            Ok(shardplane_http::body::json(StatusCode::OK, bytes::Bytes::from(shardplane_apimachinery::encode::object_bytes(&list))))
        }
        _ => {
            let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
            view.transformed(&t.info, StatusCode::OK, &refs, json!({}), single)
        }
    }
}

/// A ComponentStatus as upstream serializes one (its zero creation time included).
fn object(name: &str, p: Probed) -> Value {
    let mut condition = json!({"type": "Healthy", "status": p.status});
    if !p.message.is_empty() {
        condition["message"] = json!(p.message);
    }
    if !p.error.is_empty() {
        condition["error"] = json!(p.error);
    }
    json!({"kind": "ComponentStatus", "apiVersion": "v1", "metadata": {"name": name, "creationTimestamp": null}, "conditions": [condition]})
}

async fn probe(shard: &Shard, name: &str) -> Probed {
    if let Some(i) = name.strip_prefix("etcd-").and_then(|i| i.parse::<usize>().ok()) {
        let Some(store) = shard.stores.all().get(i) else { return unknown("no such store".into()) };
        return match tokio::time::timeout(PROBE_TIMEOUT, store.current_revision()).await {
            Ok(Ok(_)) => Probed { status: "True", message: "ok".into(), error: String::new() },
            Ok(Err(e)) => Probed { status: "False", message: String::new(), error: e.to_string() },
            Err(_) => Probed { status: "False", message: String::new(), error: "context deadline exceeded".into() },
        };
    }
    let Some((_, url)) = HTTP_COMPONENTS.iter().find(|(n, _)| *n == name) else { return unknown("no such component".into()) };
    let Some(client) = PROBE_CLIENT.as_ref() else { return unknown("no HTTPS client".into()) };
    match client.get(*url).send().await {
        Err(e) => Probed { status: "False", message: request_error(url, &e), error: String::new() },
        Ok(mut answer) => {
            let code = answer.status();
            // Read no more than the message keeps.
            let mut body = Vec::new();
            while body.len() < MAX_BODY {
                match answer.chunk().await {
                    Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                    _ => break,
                }
            }
            body.truncate(MAX_BODY);
            http_outcome(code.as_u16(), &String::from_utf8_lossy(&body))
        }
    }
}

fn unknown(error: String) -> Probed {
    Probed { status: "Unknown", message: String::new(), error }
}

/// Upstream's HTTP probe result for an answer: 2xx healthy with the body as the message, 3xx
/// a warning (Unknown), anything else a failure naming the status code.
fn http_outcome(code: u16, body: &str) -> Probed {
    match code {
        200..=299 => Probed { status: "True", message: body.to_owned(), error: String::new() },
        300..=399 => Probed { status: "Unknown", message: format!("Probe terminated redirects, Response body: {body}"), error: String::new() },
        _ => Probed { status: "False", message: format!("HTTP probe failed with statuscode: {code}"), error: String::new() },
    }
}

/// A failed request as Go's HTTP client words it (`Get "url": dial tcp host:port: connect:
/// connection refused`), which upstream puts in the message.
fn request_error(url: &str, e: &reqwest::Error) -> String {
    let host = url.split("://").nth(1).and_then(|r| r.split('/').next()).unwrap_or("");
    let refused = std::iter::successors(Some(e as &dyn std::error::Error), |e| e.source())
        .any(|s| s.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused));
    let why = if refused {
        format!("dial tcp {host}: connect: connection refused")
    } else if e.is_timeout() {
        "context deadline exceeded (Client.Timeout exceeded while awaiting headers)".to_owned()
    } else {
        std::iter::successors(Some(e as &dyn std::error::Error), |e| e.source()).last().map(|s| s.to_string()).unwrap_or_default()
    };
    format!("Get \"{url}\": {why}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_answers_map_to_upstream_conditions() {
        assert_eq!(http_outcome(200, "ok"), Probed { status: "True", message: "ok".into(), error: String::new() });
        assert_eq!(http_outcome(302, "").status, "Unknown");
        assert_eq!(http_outcome(500, "boom").message, "HTTP probe failed with statuscode: 500");
    }

    #[test]
    fn an_object_omits_empty_message_and_error() {
        let o = object("scheduler", Probed { status: "False", message: "m".into(), error: String::new() });
        assert_eq!(o["conditions"][0], json!({"type": "Healthy", "status": "False", "message": "m"}));
        assert_eq!(o["metadata"], json!({"name": "scheduler", "creationTimestamp": null}));
    }

    #[tokio::test]
    async fn a_refused_connection_is_worded_as_go_words_it() {
        // A port nothing listens on: bind one, learn it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("https://127.0.0.1:{port}/healthz");
        let e = PROBE_CLIENT.as_ref().unwrap().get(&url).send().await.unwrap_err();
        assert_eq!(request_error(&url, &e), format!("Get \"{url}\": dial tcp 127.0.0.1:{port}: connect: connection refused"));
    }
}
