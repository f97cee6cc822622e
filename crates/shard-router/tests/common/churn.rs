//! Writers and watchers through a router, and the checks on what they saw: the load the
//! fault-injection tests run (the coordinator under fire, etcd's failures). Writers create,
//! update and delete ConfigMaps in one namespace, each labelled with its writer; watchers
//! resume as client-go's reflector does; at the end each watcher's stream must equal etcd's
//! own history of what it watches, and every acknowledged write must be in that history.

use serde_json::Value;
use shardplane_keyspace::etcd_layout::{parse_object_key, prefix_end, resource_prefix};
use shardplane_storage::Storage;
use shardplane_testkit::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// One change as a watcher shows it: (type, name, RV).
pub type Change = (String, String, u64);

/// What one watcher asks for and what it saw.
pub struct Watched {
    pub path: String,
    /// Only objects with this `writer` label, when set.
    pub writer: Option<String>,
    /// Only this namespace's objects, when set (a path naming no namespace sees every one).
    pub namespace: Option<String>,
    pub changes: Vec<Change>,
    /// The newest RV it has seen (event or bookmark).
    pub rv: u64,
    pub resumes: usize,
    pub failures: Vec<String>,
}

impl Watched {
    /// A watcher of `path` from `rv`, shared with its task.
    pub fn new(path: String, writer: Option<String>, namespace: Option<&str>, rv: u64) -> Arc<Mutex<Self>> {
        Arc::new(Mutex::new(Self { path, writer, namespace: namespace.map(str::to_owned), changes: vec![], rv, resumes: 0, failures: vec![] }))
    }
}

/// Watches `path` from its RV as client-go's reflector does, through whichever of `routers`
/// answers (the first, then the next when one refuses or is gone): on a clean end it resumes
/// from the newest RV it saw, and a refused request is retried. A 410 (the RV it holds is one
/// the cluster still has, so the server must serve it) or an event out of order is recorded as
/// a failure (the test then fails).
pub async fn watcher(routers: Vec<String>, w: Arc<Mutex<Watched>>, stop: CancellationToken) {
    let path = w.lock().unwrap().path.clone();
    let mut at = 0;
    while !stop.is_cancelled() {
        let router = &routers[at % routers.len()];
        let rv = w.lock().unwrap().rv;
        let sep = if path.contains('?') { '&' } else { '?' };
        let resp = client().get(format!("{router}{path}{sep}watch=1&allowWatchBookmarks=true&resourceVersion={rv}")).send().await;
        let resp = match resp {
            Ok(r) if r.status() == 200 => r,
            Ok(r) if r.status() == 410 => {
                let body = r.text().await.unwrap_or_default();
                w.lock().unwrap().failures.push(format!("410 for RV {rv}: {body}"));
                return;
            }
            // A shard or a router is down, or etcd is electing: try again shortly, through the
            // next router.
            _ => {
                at += 1;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = stop.cancelled() => return,
                }
                continue;
            }
        };
        let mut reader = WatchReader::from_response(resp);
        while let Some(e) = reader.next_or_stop(&stop).await {
            let erv = event_rv(&e);
            let mut w = w.lock().unwrap();
            match e["type"].as_str().unwrap_or("") {
                "BOOKMARK" => w.rv = w.rv.max(erv),
                "ERROR" => {
                    w.failures.push(format!("ERROR event: {e}"));
                    return;
                }
                kind => {
                    if erv <= w.rv {
                        let failure = format!("{kind} at RV {erv} after RV {}", w.rv);
                        w.failures.push(failure);
                    }
                    w.rv = erv;
                    let name = e["object"]["metadata"]["name"].as_str().unwrap_or("").to_owned();
                    w.changes.push((kind.to_owned(), name, erv));
                }
            }
        }
        if stop.is_cancelled() {
            return;
        }
        w.lock().unwrap().resumes += 1;
    }
}

/// One acknowledged write.
#[derive(Clone, Debug)]
pub struct Ack {
    /// The writer that made it.
    pub writer: usize,
    pub kind: String,
    pub name: String,
    /// Its RV (0 for a delete: a delete answers with the object as it was last stored, and its
    /// own RV only the history shows).
    pub rv: u64,
    /// When the answer came.
    pub at: Instant,
}

/// What the writers had acknowledged, which writes failed and when, and how many writes they
/// attempted.
#[derive(Clone, Default)]
pub struct Writes {
    pub acked: Arc<Mutex<Vec<Ack>>>,
    /// Each failed write: when it was sent, when it failed (a conflict is not a failure) and
    /// the answer.
    pub failed: Arc<Mutex<Vec<(Instant, Instant, String)>>>,
    pub attempts: Arc<AtomicU64>,
}

impl Writes {
    /// Writes attempted so far.
    pub fn attempted(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// Acknowledged writes so far.
    pub fn acked(&self) -> Vec<Ack> {
        self.acked.lock().unwrap().clone()
    }

    /// Whether a write was acknowledged after `since`.
    pub fn acked_since(&self, since: Instant) -> bool {
        self.acked.lock().unwrap().iter().any(|a| a.at > since)
    }

    /// The longest time one writer went without an acknowledged write inside `[from, to]`,
    /// counting from `from` to its first acknowledgement after it and between its
    /// acknowledgements up to `to`: a write that hangs counts as much as one that fails.
    pub fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let acked = self.acked.lock().unwrap();
        let writers: std::collections::BTreeSet<usize> = acked.iter().map(|a| a.writer).collect();
        let mut longest = Duration::ZERO;
        for writer in writers {
            let mut times: Vec<Instant> = acked.iter().filter(|a| a.writer == writer).map(|a| a.at).filter(|t| *t > from && *t <= to).collect();
            times.sort();
            let mut last = from;
            for t in times.into_iter().chain(std::iter::once(to)) {
                longest = longest.max(t - last);
                last = t;
            }
        }
        longest
    }

    /// Failed writes that were sent inside `[from, to]`, and the time they cover together
    /// (the union of each one's span from sending to failing).
    pub fn failures(&self, from: Instant, to: Instant) -> (usize, Duration) {
        let mut spans: Vec<(Instant, Instant)> = self.failed.lock().unwrap().iter().map(|(a, b, _)| (*a, *b)).filter(|(sent, _)| *sent >= from && *sent <= to).collect();
        spans.sort();
        let count = spans.len();
        let mut covered = Duration::ZERO;
        let mut open: Option<(Instant, Instant)> = None;
        for (a, b) in spans {
            open = match open {
                Some((s, e)) if a <= e => Some((s, e.max(b))),
                Some((s, e)) => {
                    covered += e - s;
                    Some((a, b))
                }
                None => Some((a, b)),
            };
        }
        if let Some((s, e)) = open {
            covered += e - s;
        }
        (count, covered)
    }
}

/// Creates, updates and deletes ConfigMaps labelled `writer=w{t}` in `namespace` at `per_second`
/// through `router` until `stop`; failed writes are not acknowledged and not retried.
pub async fn writer(router: String, namespace: String, t: usize, per_second: u64, writes: Writes, stop: CancellationToken) {
    writer_via(vec![router], namespace, t, per_second, writes, stop).await
}

/// [`writer`] through the first of `routers`, moving to the next when one cannot be reached
/// (a client of a router that died goes to another).
pub async fn writer_via(routers: Vec<String>, namespace: String, t: usize, per_second: u64, writes: Writes, stop: CancellationToken) {
    let routers: Vec<TestShard> = routers.into_iter().map(|r| TestShard::attach(r, "127.0.0.1:1".parse().unwrap())).collect();
    let mut at = 0;
    let mut live: Vec<String> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / per_second));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let labels = serde_json::json!({ "writer": format!("w{t}") });
    let collection = format!("/api/v1/namespaces/{namespace}/configmaps");
    for i in 0.. {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return,
        }
        writes.attempts.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        let r = &routers[at % routers.len()];
        let json = |v: &Value| serde_json::to_vec(v).unwrap();
        let (kind, name, answer) = match i % 10 {
            0..5 => {
                let name = format!("w{t}-{i}");
                let res = r.try_send("POST", &collection, "application/json", json(&configmap(&name, labels.clone()))).await;
                ("ADDED", name, res)
            }
            5..8 if !live.is_empty() => {
                let name = live[i % live.len()].clone();
                let mut body = configmap(&name, labels.clone());
                body["data"]["k"] = Value::String(format!("v{i}"));
                let res = r.try_send("PUT", &format!("{collection}/{name}"), "application/json", json(&body)).await;
                ("MODIFIED", name, res)
            }
            _ if !live.is_empty() => {
                let name = live.swap_remove(i % live.len());
                let res = r.try_send("DELETE", &format!("{collection}/{name}"), "application/json", Vec::new()).await;
                ("DELETED", name, res)
            }
            _ => continue,
        };
        // No answer at all (the router is gone): code 0.
        let (code, body) = answer.unwrap_or((0, Value::Null));
        if code == 200 || code == 201 {
            if kind == "ADDED" {
                live.push(name.clone());
            }
            let rv = if kind == "DELETED" { 0 } else { body["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap() };
            writes.acked.lock().unwrap().push(Ack { writer: t, kind: kind.to_owned(), name, rv, at: Instant::now() });
        } else if code != 409 {
            writes.failed.lock().unwrap().push((sent, Instant::now(), format!("{kind} {name}: {code} {body}")));
            if code == 0 {
                at += 1;
            }
        }
    }
}

/// One change in etcd's history of the ConfigMaps: (type, namespace, name, RV, writer label).
pub type Stored = (String, String, String, u64, String);

/// etcd's own history of the ConfigMaps after `after` up to `to`.
pub async fn configmap_history(storage: &Storage, after: u64, to: u64) -> Vec<Stored> {
    let writer_of = |o: &Value| o["metadata"]["labels"]["writer"].as_str().unwrap_or_default().to_owned();
    etcd_history(storage, "", "configmaps", after, to).await.into_iter().map(|e| (e.kind.to_owned(), e.namespace, e.name, e.rv, writer_of(&e.object))).collect()
}

/// Asserts that each watcher's stream equals `history` filtered as it watches, that none
/// recorded a failure, and that every acknowledged write is in the history; `what` names the
/// test in what it prints.
pub fn assert_streams_and_acks(what: &str, watched: &[Arc<Mutex<Watched>>], history: &[Stored], acked: &[Ack], namespace: &str) {
    for w in watched {
        let w = w.lock().unwrap();
        assert!(w.failures.is_empty(), "{}: {:?}", w.path, w.failures);
        let want: Vec<Change> = history
            .iter()
            .filter(|(_, ns, _, _, writer)| w.namespace.as_ref().is_none_or(|n| n == ns) && w.writer.as_ref().is_none_or(|x| x == writer))
            .map(|(kind, _, name, rv, _)| (kind.clone(), name.clone(), *rv))
            .collect();
        assert!(!want.is_empty());
        if w.changes != want {
            let first = w.changes.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(w.changes.len().min(want.len()));
            panic!("{}: the stream differs from etcd's history at change {first} of {} (saw {}): saw {:?}, etcd has {:?}", w.path, want.len(), w.changes.len(), w.changes.get(first), want.get(first));
        }
        eprintln!("{what}: {} saw all {} changes, resumed {} times", w.path, want.len(), w.resumes);
    }
    for a in acked {
        assert!(
            history.iter().any(|(k, ns, n, r, _)| *k == a.kind && ns == namespace && *n == a.name && (a.rv == 0 || *r == a.rv)),
            "acknowledged {} of {} at {} is not in etcd's history",
            a.kind,
            a.name,
            a.rv
        );
    }
}

/// The ConfigMaps of `namespace` as a LIST through `router` shows them and as etcd holds them
/// now: (name, RV), sorted.
pub async fn listed_and_stored(router: &TestShard, storage: &Storage, namespace: &str) -> (Vec<(String, String)>, Vec<(String, String)>) {
    let (_, list) = router.get(&format!("/api/v1/namespaces/{namespace}/configmaps")).await;
    let mut listed: Vec<(String, String)> = list["items"].as_array().unwrap().iter().map(|i| (i["metadata"]["name"].as_str().unwrap().to_owned(), i["metadata"]["resourceVersion"].as_str().unwrap().to_owned())).collect();
    listed.sort();
    let prefix = resource_prefix("", "configmaps");
    let (kvs, _) = storage.list_range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0).await.unwrap();
    let mut stored: Vec<(String, String)> = kvs.iter().filter_map(|kv| parse_object_key("", "configmaps", &kv.key).filter(|(_, ns, _)| *ns == namespace).map(|(_, _, name)| (name.to_owned(), kv.mod_revision.to_string()))).collect();
    stored.sort();
    (listed, stored)
}

/// The end of a run, once the writers have stopped: every watcher catches up with etcd's
/// revision (within `within`) and is stopped; each stream must equal etcd's history of what it
/// watches since `start`, every acknowledged write must be in it, and a LIST of `namespace`
/// through `router` must equal etcd.
#[allow(clippy::too_many_arguments)]
pub async fn check_against_etcd(what: &str, storage: &Storage, router: &TestShard, namespace: &str, start: u64, watched: &[Arc<Mutex<Watched>>], tasks: Vec<tokio::task::JoinHandle<()>>, stop: CancellationToken, acked: &[Ack], within: Duration) {
    let end = storage.current_revision().await.unwrap();
    wait_for(within, || async { watched.iter().all(|w| w.lock().unwrap().rv >= end || !w.lock().unwrap().failures.is_empty()) }).await;
    stop.cancel();
    for t in tasks {
        t.await.unwrap();
    }
    let history = configmap_history(storage, start, end).await;
    assert_streams_and_acks(what, watched, &history, acked, namespace);
    let (listed, stored) = listed_and_stored(router, storage, namespace).await;
    assert_eq!(listed, stored);
}
