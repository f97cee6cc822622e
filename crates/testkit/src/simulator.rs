//! A simulated cluster's load (RFC 0015), shared by the axis tests and `bench cluster`:
//! kubelets (each registers a Node and its Lease, renews the Lease on a period, writes its
//! NodeStatus at start and every status period, watches its own pods and its own Node), a
//! scheduler-like loop that creates pods and binds them to nodes, pod deletion after a
//! lifetime, agent-session churn (a custom resource created and deleted), and a state-heavy
//! load (many CRDs, many idle objects). Every write's latency and every kubelet's watch
//! delivery lag (from the bind's answer to the kubelet seeing its pod) are recorded.

use crate::{TestShard, WatchReader};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The namespace simulated pods and sessions live in.
pub const NAMESPACE: &str = "sim";

/// What a simulation measured, shared by its loops.
#[derive(Default)]
pub struct Stats {
    /// Seconds each acknowledged write took, by category (`lease`, `node-status`, `pod`,
    /// `binding`, `session`, `state`).
    pub writes: Mutex<HashMap<&'static str, Vec<f64>>>,
    /// Seconds from a bind's answer to its kubelet seeing the pod.
    pub watch_lag: Mutex<Vec<f64>>,
    /// Writes answered with something other than success (429, 5xx, conflicts retried).
    pub refused: AtomicU64,
    /// Kubelet watches that have been opened (each counted once, however often it reopens).
    pub watches_open: AtomicU64,
    /// Binds whose answer and kubelet event have not both arrived, by pod name.
    bound: Mutex<HashMap<String, Bound>>,
    /// While set, kubelets neither renew nor write status (their watches stay open): a
    /// benchmark measures what the rest costs without them.
    pub renewals_paused: AtomicBool,
    /// While set, the churn loops write nothing: the scheduler neither creates, binds nor
    /// deletes pods, and agent sessions are neither created nor deleted.
    pub pods_paused: AtomicBool,
}

/// The half of a bind's lag that arrived first.
enum Bound {
    /// The bind was answered then.
    Answered(Instant),
    /// The kubelet saw the pod before the bind's answer came: its lag is 0.
    Seen,
}

impl Stats {
    fn write(&self, what: &'static str, took: Duration) {
        self.writes.lock().unwrap().entry(what).or_default().push(took.as_secs_f64());
    }

    /// The bind of `pod` was answered now.
    fn bind_answered(&self, pod: &str) {
        let mut bound = self.bound.lock().unwrap();
        match bound.remove(pod) {
            Some(Bound::Seen) => self.watch_lag.lock().unwrap().push(0.0),
            _ => {
                bound.insert(pod.to_owned(), Bound::Answered(Instant::now()));
            }
        }
    }

    /// A kubelet was told of `pod`.
    fn pod_seen(&self, pod: &str) {
        let mut bound = self.bound.lock().unwrap();
        match bound.remove(pod) {
            Some(Bound::Answered(at)) => self.watch_lag.lock().unwrap().push(at.elapsed().as_secs_f64()),
            _ => {
                bound.insert(pod.to_owned(), Bound::Seen);
            }
        }
    }

    /// Every write latency, of every category.
    pub fn all_writes(&self) -> Vec<f64> {
        self.writes.lock().unwrap().values().flatten().copied().collect()
    }
}

/// A load loop's request: a failure to get any answer (a connection closed under load) is
/// status 0, which the loop counts as refused, rather than the end of the loop.
async fn call(c: &TestShard, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    call_as(c, method, path, "application/json", body.map(|b| serde_json::to_vec(b).unwrap()).unwrap_or_default()).await
}

/// [`call`] with a body of another content type (a patch).
async fn call_as(c: &TestShard, method: &str, path: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
    c.try_send(method, path, content_type, body).await.unwrap_or((0, Value::Null))
}

/// The name of node `i`.
pub fn node_name(i: usize) -> String {
    format!("sim-node-{i}")
}

/// Now to the second (a condition's heartbeat time).
fn seconds_time() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Now as a MicroTime (a Lease's `renewTime`).
fn micro_time() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}, "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": seconds_time()}]}})
}

fn lease(name: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micro_time()}})
}

/// Registers nodes `nodes` (a Node and its Lease each), `parallel` at a time.
pub async fn register_nodes(c: &TestShard, nodes: std::ops::Range<usize>, parallel: usize) {
    use futures::StreamExt;
    futures::stream::iter(nodes)
        .for_each_concurrent(parallel, |i| async move {
            let name = node_name(i);
            let (code, body) = c.post("/api/v1/nodes", &node(&name)).await;
            assert!(code == 201 || code == 409, "node {name}: {code} {body}");
            let (code, body) = c.post("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", &lease(&name)).await;
            assert!(code == 201 || code == 409, "lease {name}: {code} {body}");
        })
        .await;
}

/// One kubelet until `stop`: renews its Lease every `renew_every` (starting at a random point
/// of the period), writes its NodeStatus every `status_every`, and watches its pods and its
/// Node, recording the lag of each pod it is bound.
pub async fn kubelet(c: Arc<TestShard>, i: usize, renew_every: Duration, status_every: Duration, stats: Arc<Stats>, stop: Arc<AtomicBool>) {
    let name = node_name(i);
    let watches = [format!("/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3D{name}&allowWatchBookmarks=true"), format!("/api/v1/nodes?watch=1&fieldSelector=metadata.name%3D{name}&allowWatchBookmarks=true")];
    // Aborted with this task, however it ends.
    let mut readers = AbortOnDrop(Vec::new());
    for w in watches {
        let (c, stats, stop) = (c.clone(), stats.clone(), stop.clone());
        readers.0.push(tokio::spawn(async move { follow(&c, &w, &stats, &stop).await }));
    }
    let lease_at = format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}");
    let mut current = call(&c, "GET", &lease_at, None).await.1;
    let offset = renew_every.mul_f64((i as f64 * 0.618_033_988_75).fract());
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + offset, renew_every);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut status = tokio::time::interval_at(tokio::time::Instant::now() + offset + status_every, status_every);
    while !stop.load(Ordering::SeqCst) {
        tokio::select! {
            _ = renew.tick(), if !stats.renewals_paused.load(Ordering::Relaxed) => {
                let mut next = lease(&name);
                next["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
                let t = Instant::now();
                let (code, body) = call(&c, "PUT", &lease_at, Some(&next)).await;
                if code == 200 {
                    stats.write("lease", t.elapsed());
                    current = body;
                } else {
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                    current = call(&c, "GET", &lease_at, None).await.1;
                }
            }
            _ = status.tick(), if !stats.renewals_paused.load(Ordering::Relaxed) => {
                let t = Instant::now();
                let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": seconds_time()}]}});
                let (code, _) = call_as(&c, "PATCH", &format!("/api/v1/nodes/{name}/status"), "application/strategic-merge-patch+json", patch.to_string().into_bytes()).await;
                if code == 200 { stats.write("node-status", t.elapsed()) } else { stats.refused.fetch_add(1, Ordering::Relaxed); }
            }
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
    drop(readers);
}

/// Tasks aborted when this is dropped.
pub struct AbortOnDrop(pub Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Follows a watch (from now; again from its last RV when it ends) until `stop`, recording the
/// lag of every pod it is told of that the scheduler bound.
async fn follow(c: &TestShard, path: &str, stats: &Stats, stop: &AtomicBool) {
    let mut rv = rv_now(c, path.split('?').next().unwrap_or(path)).await;
    let mut opened = false;
    while !stop.load(Ordering::SeqCst) {
        let resp = c.http().get(format!("{}{path}&resourceVersion={rv}", c.url)).send().await;
        let Ok(resp) = resp else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if resp.status() != 200 {
            // Refused (a 429 while thousands of watches open at once): again after the server's
            // Retry-After, as a reflector backs off.
            let after = crate::retry_after_seconds(resp.headers());
            tokio::time::sleep(Duration::from_secs(after.clamp(1, 10))).await;
            continue;
        }
        if !opened {
            opened = true;
            stats.watches_open.fetch_add(1, Ordering::SeqCst);
        }
        let mut w = WatchReader::from_response(resp);
        while let Some(e) = w.next(Duration::from_secs(3600)).await {
            match e["type"].as_str().unwrap_or("") {
                "ERROR" => {
                    rv = rv_now(c, path.split('?').next().unwrap_or(path)).await;
                    break;
                }
                kind => {
                    rv = crate::event_rv(&e);
                    if kind == "ADDED" && e["object"]["kind"] == "Pod" && let Some(name) = e["object"]["metadata"]["name"].as_str() {
                        stats.pod_seen(name);
                    }
                }
            }
        }
    }
}

async fn rv_now(c: &TestShard, collection: &str) -> u64 {
    loop {
        let (code, list) = call(c, "GET", &format!("{collection}?limit=1"), None).await;
        if code == 200 {
            return crate::rv(&list);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Pod churn until `stop`: `rate` pods a second created unscheduled and bound to a node of
/// `nodes` (as a scheduler binds them), each deleted `lifetime` after its creation.
pub async fn pod_churn(c: Arc<TestShard>, rate: f64, nodes: usize, lifetime: Duration, stats: Arc<Stats>, stop: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.001)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let live: Arc<Mutex<std::collections::VecDeque<(String, Instant)>>> = Arc::default();
    let mut n = 0usize;
    let pods = format!("/api/v1/namespaces/{NAMESPACE}/pods");
    // Writes under way end with this loop (when its task is aborted too).
    let mut inflight = AbortOnDrop(Vec::new());
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        if stats.pods_paused.load(Ordering::Relaxed) {
            continue;
        }
        n += 1;
        inflight.0.retain(|t| !t.is_finished());
        let (c2, stats2, live2, pods2) = (c.clone(), stats.clone(), live.clone(), pods.clone());
        let node = node_name(n.wrapping_mul(2_654_435_761) % nodes.max(1));
        inflight.0.push(tokio::spawn(async move {
            let (c, stats, live, pods) = (c2, stats2, live2, pods2);
            let name = format!("pod-{n}-{}", uuid::Uuid::new_v4().simple());
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "sim"}}, "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}]}});
            let t = Instant::now();
            if call(&c, "POST", &pods, Some(&pod)).await.0 != 201 {
                stats.refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
            stats.write("pod", t.elapsed());
            if nodes > 0 {
                let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": node}});
                let t = Instant::now();
                if call(&c, "POST", &format!("{pods}/{name}/binding"), Some(&binding)).await.0 == 201 {
                    stats.write("binding", t.elapsed());
                    // The lag counts from the answer.
                    stats.bind_answered(&name);
                } else {
                    stats.bound.lock().unwrap().remove(&name);
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                }
            }
            live.lock().unwrap().push_back((name, Instant::now()));
        }));
        // Deletes of pods past their lifetime.
        let due: Vec<String> = {
            let mut l = live.lock().unwrap();
            let mut due = Vec::new();
            while l.front().is_some_and(|(_, at)| at.elapsed() >= lifetime) {
                due.push(l.pop_front().unwrap().0);
            }
            due
        };
        for name in due {
            let (c2, stats2, pods2) = (c.clone(), stats.clone(), pods.clone());
            inflight.0.push(tokio::spawn(async move {
                let (c, stats, pods) = (c2, stats2, pods2);
                let t = Instant::now();
                if call(&c, "DELETE", &format!("{pods}/{name}"), Some(&json!({"gracePeriodSeconds": 0}))).await.0 == 200 {
                    stats.write("pod", t.elapsed());
                } else {
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
}

/// The AgentSession CRD (deploy/examples/agent-sessions), without its printer columns.
pub fn agent_session_crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "agentsessions.agents.shardplane.dev"},
        "spec": {"group": "agents.shardplane.dev", "scope": "Namespaced", "names": {"plural": "agentsessions", "singular": "agentsession", "kind": "AgentSession"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})
}

/// A CRD `plural.example.com` (kind `Widget<plural>`) whose objects hold an opaque spec.
pub fn widget_crd(plural: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": format!("{plural}.example.com")},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": plural, "singular": plural, "kind": format!("Widget{plural}")},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})
}

/// Creates `crd` and waits until its resource is served at `collection`.
pub async fn establish(c: &TestShard, crd: &Value, collection: &str) {
    let (code, body) = c.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd).await;
    assert!(code == 201 || code == 409, "{body}");
    crate::wait_for(Duration::from_secs(60), || async { c.get(collection).await.0 == 200 }).await;
}

/// Agent-session churn until `stop`: `rate` sessions a second created in [`NAMESPACE`], each
/// deleted `lifetime` later. The CRD must be established ([`agent_session_crd`]).
pub async fn session_churn(c: Arc<TestShard>, rate: f64, lifetime: Duration, stats: Arc<Stats>, stop: Arc<AtomicBool>) {
    let sessions = format!("/apis/agents.shardplane.dev/v1/namespaces/{NAMESPACE}/agentsessions");
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.001)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut live: std::collections::VecDeque<(String, Instant)> = Default::default();
    let mut n = 0usize;
    let mut inflight = AbortOnDrop(Vec::new());
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        if stats.pods_paused.load(Ordering::Relaxed) {
            continue;
        }
        n += 1;
        inflight.0.retain(|t| !t.is_finished());
        let name = format!("session-{n}");
        let body = json!({"apiVersion": "agents.shardplane.dev/v1", "kind": "AgentSession", "metadata": {"name": name}, "spec": {"agent": "sim", "model": "m", "phase": "Running"}});
        let (c2, stats2, sessions2) = (c.clone(), stats.clone(), sessions.clone());
        inflight.0.push(tokio::spawn(async move {
            let t = Instant::now();
            if call(&c2, "POST", &sessions2, Some(&body)).await.0 == 201 { stats2.write("session", t.elapsed()) } else { stats2.refused.fetch_add(1, Ordering::Relaxed); }
        }));
        live.push_back((name, Instant::now()));
        while live.front().is_some_and(|(_, at)| at.elapsed() >= lifetime) {
            let (name, _) = live.pop_front().unwrap();
            let (c2, stats2, at) = (c.clone(), stats.clone(), format!("{sessions}/{name}"));
            inflight.0.push(tokio::spawn(async move {
                let t = Instant::now();
                if call(&c2, "DELETE", &at, None).await.0 == 200 { stats2.write("session", t.elapsed()) } else { stats2.refused.fetch_add(1, Ordering::Relaxed); }
            }));
        }
    }
}

/// The state-heavy load: `kinds` CRDs (`widgets0` …) with `objects` idle objects each of
/// about `bytes` bytes, `parallel` writes at a time.
pub async fn state(c: &TestShard, kinds: usize, objects: usize, bytes: usize, parallel: usize, stats: &Stats) {
    use futures::StreamExt;
    let filler = "x".repeat(bytes);
    for k in 0..kinds {
        let plural = format!("widgets{k}");
        let collection = format!("/apis/example.com/v1/namespaces/{NAMESPACE}/{plural}");
        establish(c, &widget_crd(&plural), &collection).await;
        futures::stream::iter(0..objects)
            .for_each_concurrent(parallel, |i| {
                let (collection, filler, plural) = (&collection, &filler, &plural);
                async move {
                    let body = json!({"apiVersion": "example.com/v1", "kind": format!("Widget{plural}"), "metadata": {"name": format!("w-{i}")}, "spec": {"data": filler}});
                    let t = Instant::now();
                    let (code, answer) = c.post(collection, &body).await;
                    assert!(code == 201 || code == 409, "{answer}");
                    stats.write("state", t.elapsed());
                }
            })
            .await;
    }
}
