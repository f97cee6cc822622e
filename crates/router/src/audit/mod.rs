//! Audit (RFC 0012, "Audit"): with `--audit-policy-file` and `--audit-log-path`, the router
//! writes upstream's audit.k8s.io/v1 `Event`s as JSON lines, one per stage of each request the
//! policy gives a level: `RequestReceived` before it is handled, `ResponseStarted` when a watch
//! begins streaming, `ResponseComplete` when the answer (or the watch) ends; the policy's
//! omitted stages are not written. `Metadata` records who, what, when and the answer's status,
//! `Request` adds the request's body, `RequestResponse` the response's.
//!
//! The layer runs after authentication (the user is known) and before impersonation and
//! authorization, which add to the event through the request's [`Recorder`]: the impersonated
//! user, and upstream's `authorization.k8s.io/decision` and `/reason` annotations. A request
//! refused by authentication is recorded by [`Auditor::unauthenticated`].
//!
//! Bounded: events go to one writer thread through a queue of [`QUEUE`] lines; a full queue
//! makes requests wait for it (upstream's `blocking` mode), and a recorded response body is
//! kept up to [`MAX_RECORDED_BODY`] bytes (past it the event has no `responseObject`).

pub mod log;
pub mod policy;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Response};
use axum::middleware::Next;
use bytes::Bytes;
use policy::{Decided, Level, Policy, Stage};
use serde_json::{json, Value};
use shardplane_identity::rbac::Attributes;
use shardplane_identity::user::UserInfo;
use std::sync::{Arc, Mutex};

/// Events waiting for the writer; past it requests wait (upstream's blocking mode).
pub const QUEUE: usize = 10_000;
/// The most bytes of a response body recorded (`RequestResponse`).
pub const MAX_RECORDED_BODY: usize = 1024 * 1024;
/// The response header naming a request's audit ID, as upstream's.
pub const AUDIT_ID_HEADER: &str = "audit-id";

/// The policy and where events go.
pub struct Auditor {
    policy: Policy,
    lines: tokio::sync::mpsc::Sender<Vec<u8>>,
}

impl std::fmt::Debug for Auditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auditor").field("rules", &self.policy.rules.len()).finish()
    }
}

impl Auditor {
    /// Reads the policy file and opens the log; a writer thread appends every event.
    pub fn start(policy_file: &std::path::Path, log_path: &std::path::Path, rotation: log::Rotation) -> Result<Arc<Self>, String> {
        let text = std::fs::read_to_string(policy_file).map_err(|e| format!("--audit-policy-file {}: {e}", policy_file.display()))?;
        let policy = Policy::parse(&text).map_err(|e| format!("--audit-policy-file {}: {e}", policy_file.display()))?;
        let mut sink = log::Sink::open(log_path, rotation).map_err(|e| format!("--audit-log-path {}: {e}", log_path.display()))?;
        let (lines, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(QUEUE);
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || {
                while let Some(line) = rx.blocking_recv() {
                    if let Err(e) = sink.write_line(&line) {
                        tracing::error!(error = %e, "writing the audit log failed");
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(Self { policy, lines }))
    }

    async fn emit(&self, event: &Value) {
        if self.lines.send(shardplane_apimachinery::encode::object_bytes(event).to_vec()).await.is_err() {
            tracing::error!("the audit log writer is gone; an event was not written");
        }
    }

    /// Records a request authentication refused (401), as upstream's failed-authentication
    /// audit does: the policy decides its level with no user, and one `ResponseComplete`
    /// event is written.
    pub async fn unauthenticated(&self, method: &str, uri: &axum::http::Uri, headers: &HeaderMap, peer: Option<std::net::SocketAddr>) {
        let attrs = attributes(method, uri);
        let decided = self.policy.decide(&UserInfo::default(), &attrs);
        if decided.level == Level::None || decided.omit_stages.contains(&Stage::ResponseComplete) {
            return;
        }
        let mut event = base(&decided, &attrs, uri, headers, peer, &UserInfo::default());
        event["user"] = json!({});
        event["stage"] = json!(Stage::ResponseComplete.name());
        event["responseStatus"] = json!({"metadata": {}, "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401});
        event["stageTimestamp"] = json!(now());
        self.emit(&event).await;
    }
}

/// What impersonation and authorization add to a request's event.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Added>>);

#[derive(Default)]
struct Added {
    impersonated: Option<UserInfo>,
    annotations: serde_json::Map<String, Value>,
}

impl Recorder {
    /// The user the request acts as (impersonation).
    pub fn impersonated(&self, user: &UserInfo) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).impersonated = Some(user.clone());
    }

    /// Upstream's authorization annotations: `allow` or `forbid`, and why.
    pub fn decision(&self, allowed: bool, reason: &str) {
        let mut added = self.0.lock().unwrap_or_else(|e| e.into_inner());
        added.annotations.insert("authorization.k8s.io/decision".into(), json!(if allowed { "allow" } else { "forbid" }));
        added.annotations.insert("authorization.k8s.io/reason".into(), json!(reason));
    }

    fn apply(&self, event: &mut Value) {
        let added = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(u) = &added.impersonated {
            event["impersonatedUser"] = u.to_json();
        }
        if !added.annotations.is_empty() {
            if !event["annotations"].is_object() {
                event["annotations"] = json!({});
            }
            for (k, v) in &added.annotations {
                event["annotations"][k] = v.clone();
            }
        }
    }
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn attributes(method: &str, uri: &axum::http::Uri) -> Attributes {
    let query = shardplane_http::query::Query::parse(uri.query().unwrap_or(""));
    shardplane_identity::rbac::request::attributes(method, uri.path(), query.is_watch(), query.get("fieldSelector").unwrap_or(""))
}

/// The fields every stage of a request's event shares.
fn base(decided: &Decided, attrs: &Attributes, uri: &axum::http::Uri, headers: &HeaderMap, peer: Option<std::net::SocketAddr>, user: &UserInfo) -> Value {
    let id = headers.get("audit-id").and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty() && v.len() <= 128).map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
    // Upstream's source IPs: X-Forwarded-For's, then X-Real-Ip, then the connection's.
    let mut ips: Vec<String> = headers.get_all("x-forwarded-for").iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).map(|s| s.trim().to_owned()).filter(|s| s.parse::<std::net::IpAddr>().is_ok()).collect();
    if let Some(real) = headers.get("x-real-ip").and_then(|v| v.to_str().ok()).filter(|v| v.parse::<std::net::IpAddr>().is_ok()) {
        ips.push(real.to_owned());
    }
    if let Some(p) = peer {
        let ip = p.ip().to_string();
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    let mut event = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": decided.level.name(),
        "auditID": id,
        "requestURI": uri.path_and_query().map_or("", |p| p.as_str()),
        "verb": attrs.verb,
        "user": user.to_json(),
        "sourceIPs": ips,
        "requestReceivedTimestamp": now(),
    });
    if let Some(agent) = headers.get(axum::http::header::USER_AGENT).and_then(|v| v.to_str().ok()) {
        event["userAgent"] = json!(agent);
    }
    if attrs.resource_request {
        let mut object = json!({"resource": attrs.resource});
        for (k, v) in [("namespace", &attrs.namespace), ("name", &attrs.name), ("apiGroup", &attrs.api_group), ("subresource", &attrs.subresource)] {
            if !v.is_empty() {
                object[k] = json!(v);
            }
        }
        if let Some(version) = api_version(uri.path()) {
            object["apiVersion"] = json!(version);
        }
        event["objectRef"] = object;
    }
    event
}

/// The version a resource path names (`/api/v1/…`: `v1`; `/apis/apps/v1/…`: `v1`).
fn api_version(path: &str) -> Option<&str> {
    let mut parts = path.trim_start_matches('/').split('/');
    match parts.next()? {
        "api" => parts.next(),
        "apis" => parts.nth(1),
        _ => None,
    }
}

/// A body as the event records it: the object (JSON, YAML or protobuf, as its content type
/// says; a patch as the JSON it is), without managed fields when the policy says so; `None`
/// for a body that is none of those.
fn recorded(headers: &HeaderMap, body: &[u8], omit_managed_fields: bool) -> Option<Value> {
    let mut v: Value = shardplane_http::body::decode_object(headers, body).ok().or_else(|| serde_json::from_slice(body).ok())?;
    if omit_managed_fields {
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
            for item in items {
                if let Some(m) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("managedFields");
                }
            }
        }
    }
    Some(v)
}

/// The middleware: records the request's stages as the policy says.
pub async fn audit(State(auditor): State<Option<Arc<Auditor>>>, mut req: Request, next: Next) -> Response<Body> {
    let Some(auditor) = auditor else { return next.run(req).await };
    let user = req.extensions().get::<UserInfo>().cloned().unwrap_or_else(shardplane_identity::authn::anonymous);
    let attrs = attributes(req.method().as_str(), req.uri());
    let decided = auditor.policy.decide(&user, &attrs);
    if decided.level == Level::None {
        return next.run(req).await;
    }
    let peer = req.extensions().get::<shardplane_http::serve::PeerAddr>().map(|p| p.0);
    let mut event = base(&decided, &attrs, req.uri(), req.headers(), peer, &user);
    let (body, watch) = shardplane_http::request::read_by_prologue(req.extensions()).map_or((Bytes::new(), false), |(b, w)| (b.clone(), w));
    if !body.is_empty() {
        if let Some(object) = recorded(req.headers(), &body, decided.omit_managed_fields) {
            // The reference is completed from the object sent, as upstream's (a create names
            // its object in the body).
            if event["objectRef"].is_object() {
                for key in ["namespace", "name", "uid", "resourceVersion"] {
                    if let Some(v) = object["metadata"][key].as_str().filter(|v| !v.is_empty()) {
                        if event["objectRef"].get(key).is_none() {
                            event["objectRef"][key] = json!(v);
                        }
                    }
                }
            }
            if decided.level >= Level::Request {
                event["requestObject"] = object;
            }
        }
    }
    let recorder = Recorder::default();
    req.extensions_mut().insert(recorder.clone());
    let stage = |event: &Value, stage: Stage| {
        let mut e = event.clone();
        e["stage"] = json!(stage.name());
        e["stageTimestamp"] = json!(now());
        recorder.apply(&mut e);
        e
    };
    if !decided.omit_stages.contains(&Stage::RequestReceived) {
        auditor.emit(&stage(&event, Stage::RequestReceived)).await;
    }
    let mut resp = next.run(req).await;
    let id = event["auditID"].as_str().unwrap_or("").to_owned();
    if let Ok(v) = HeaderValue::try_from(id) {
        resp.headers_mut().insert(AUDIT_ID_HEADER, v);
    }
    let code = resp.status().as_u16();
    if watch && code < 300 {
        // Long-running: the response starts now, and completes when its stream ends (or the
        // client goes): the body carries a guard that writes that stage when dropped.
        event["responseStatus"] = json!({"metadata": {}, "code": code});
        if !decided.omit_stages.contains(&Stage::ResponseStarted) {
            auditor.emit(&stage(&event, Stage::ResponseStarted)).await;
        }
        if decided.omit_stages.contains(&Stage::ResponseComplete) {
            return resp;
        }
        let complete = stage(&event, Stage::ResponseComplete);
        let guard = CompleteOnDrop { auditor: auditor.clone(), event: Some(complete) };
        let (parts, body) = resp.into_parts();
        let stream = futures::StreamExt::map(body.into_data_stream(), move |chunk| {
            let _held = &guard;
            chunk
        });
        return Response::from_parts(parts, Body::from_stream(stream));
    }
    if decided.omit_stages.contains(&Stage::ResponseComplete) {
        return resp;
    }
    // The body is read when it is recorded or an error's Status is (errors are small).
    let wanted = decided.level == Level::RequestResponse || code >= 400;
    let resp = if wanted {
        let (parts, body) = resp.into_parts();
        let (whole, body) = read_up_to(body, MAX_RECORDED_BODY).await;
        let object = whole.as_deref().and_then(|b| recorded(&parts.headers, b, decided.omit_managed_fields));
        event["responseStatus"] = match object.as_ref().filter(|o| o["kind"] == "Status") {
            Some(status) => {
                let mut s = status.clone();
                if let Some(m) = s.as_object_mut() {
                    m.remove("kind");
                    m.remove("apiVersion");
                }
                s
            }
            None => json!({"metadata": {}, "code": code}),
        };
        if decided.level == Level::RequestResponse {
            match object {
                Some(o) => event["responseObject"] = o,
                None if whole.is_none() => event["annotations"] = json!({"audit.shardplane.io/response-object": format!("larger than {MAX_RECORDED_BODY} bytes: not recorded")}),
                None => {}
            }
        }
        Response::from_parts(parts, body)
    } else {
        event["responseStatus"] = json!({"metadata": {}, "code": code});
        resp
    };
    auditor.emit(&stage(&event, Stage::ResponseComplete)).await;
    resp
}

/// Reads `body` until its end or past `cap` bytes: the whole body when it fits, and a body
/// that gives the client every byte either way (what was read, then the rest as it comes).
async fn read_up_to(body: Body, cap: usize) -> (Option<Bytes>, Body) {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut read: Vec<Bytes> = Vec::new();
    let mut size = 0;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => {
                size += c.len();
                read.push(c);
                if size > cap {
                    let head = futures::stream::iter(read.into_iter().map(Ok::<_, axum::Error>));
                    return (None, Body::from_stream(head.chain(stream)));
                }
            }
            Err(e) => {
                // A body that broke off is passed on broken, not recorded.
                let head = futures::stream::iter(read.into_iter().map(Ok::<_, axum::Error>));
                return (None, Body::from_stream(head.chain(futures::stream::once(async move { Err(e) }))));
            }
        }
    }
    let whole = if read.len() == 1 { read.pop().unwrap_or_default() } else { Bytes::from(read.concat()) };
    (Some(whole.clone()), Body::from(whole))
}

/// Writes a watch's `ResponseComplete` event when its response body is dropped (the stream
/// ended, or the client went away).
struct CompleteOnDrop {
    auditor: Arc<Auditor>,
    event: Option<Value>,
}

impl Drop for CompleteOnDrop {
    fn drop(&mut self) {
        let Some(mut event) = self.event.take() else { return };
        event["stageTimestamp"] = json!(now());
        let line = shardplane_apimachinery::encode::object_bytes(&event).to_vec();
        // Dropped outside the runtime's reach (no waiting here): a full queue loses this one
        // event, which the log says.
        if self.auditor.lines.try_send(line).is_err() {
            tracing::error!("the audit queue is full; a watch's ResponseComplete event was not written");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorder_adds_to_the_annotations_already_there() {
        let r = Recorder::default();
        r.decision(true, "RBAC: allowed");
        r.impersonated(&UserInfo { name: "vera".into(), ..Default::default() });
        let mut e = json!({"annotations": {"a": "b"}});
        r.apply(&mut e);
        assert_eq!(e["annotations"], json!({"a": "b", "authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": "RBAC: allowed"}));
        assert_eq!(e["impersonatedUser"], json!({"username": "vera", "groups": []}));
    }

    #[test]
    fn the_version_is_read_from_the_path() {
        assert_eq!(api_version("/api/v1/namespaces/a/pods"), Some("v1"));
        assert_eq!(api_version("/apis/apps/v1/deployments"), Some("v1"));
        assert_eq!(api_version("/healthz"), None);
    }

    #[test]
    fn managed_fields_are_left_out_when_the_policy_says_so() {
        let body = br#"{"metadata": {"name": "a", "managedFields": [{}]}, "items": [{"metadata": {"managedFields": []}}]}"#;
        let json_headers = HeaderMap::new();
        assert_eq!(recorded(&json_headers, body, true), Some(json!({"metadata": {"name": "a"}, "items": [{"metadata": {}}]})));
        assert_eq!(recorded(&json_headers, body, false).unwrap()["metadata"]["managedFields"], json!([{}]));
        assert_eq!(recorded(&json_headers, b"not an object", true), None);
        let mut patch = HeaderMap::new();
        patch.insert(axum::http::header::CONTENT_TYPE, HeaderValue::from_static("application/json-patch+json"));
        assert_eq!(recorded(&patch, br#"[{"op": "remove", "path": "/data/a"}]"#, true), Some(json!([{"op": "remove", "path": "/data/a"}])), "a patch is recorded as sent");
    }
}
