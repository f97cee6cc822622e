//! Kubelet-shaped watches at scale (RFC 0015, "Indexed dispatch"), with real processes:
//! `shard-router --shards 4` on real etcd, 2,000 watchers of `spec.nodeName=<node>` (a quarter of
//! them also with a label selector) and 200 of one Node by `metadata.name` (all but one starting
//! from an RV older than their hub's ring, so they catch up on streams of their own and then
//! join it), while eight clients
//! create pods on nodes, create unscheduled pods and bind them, update them and delete them.
//! Every watcher sees exactly the events etcd's history gives for its own node and filters, and
//! the shards serve them all from K streams per distinct filter set: the number of shard streams
//! does not grow with the number of watchers.

mod common;

use common::Topology;
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use shardplane_testkit::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const NS: &str = "kubelets";
const NODES: usize = 2000;
/// Node watchers (the kubelet's watch of its own Node): one per node for the first ones.
const NODE_WATCHERS: usize = 200;
/// Watchers from this node on also select `tier=a`.
const LABELLED_FROM: usize = 1500;
const PLACED: usize = 1000;
const BOUND: usize = 500;
const CLIENTS: usize = 8;
const K: usize = 4;

fn node(i: usize) -> String {
    format!("node-{i}")
}

/// What one watcher was sent: (type, name, rv) per event, and the newest bookmark.
#[derive(Default)]
struct Seen {
    events: Vec<(String, String, u64)>,
    bookmark: u64,
}

/// Reads a watch into `seen` until it ends.
fn read(resp: reqwest::Response, seen: Arc<Mutex<Seen>>) {
    tokio::spawn(async move {
        let mut w = WatchReader::from_response(resp);
        while let Some(e) = w.next(Duration::from_secs(3600)).await {
            let mut s = seen.lock().unwrap();
            match e["type"].as_str().unwrap() {
                "BOOKMARK" => s.bookmark = event_rv(&e),
                kind => {
                    let name = e["object"]["metadata"]["name"].as_str().unwrap().to_owned();
                    s.events.push((kind.to_owned(), name, event_rv(&e)));
                }
            }
        }
    });
}

async fn metric_sum(client: &reqwest::Client, url: &str, name: &str, labels: &str) -> f64 {
    let text = client.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines().filter(|l| l.starts_with(name) && l.contains(labels)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// Shard streams the router holds, and pod and node watchers registered on the shards.
async fn streams(started: &common::Started) -> (f64, f64, f64) {
    let c = client();
    let router = metric_sum(&c, &started.url(), "shardplane_router_shard_watch_streams", "").await;
    let (mut pods, mut nodes) = (0.0, 0.0);
    for (_, url) in &started.shards {
        pods += metric_sum(&c, url, "apiserver_registered_watchers{", "kind=\"Pod\"").await;
        nodes += metric_sum(&c, url, "apiserver_registered_watchers{", "kind=\"Node\"").await;
    }
    (router, pods, nodes)
}

/// What a watcher of `node` (with `tier=a` when `labelled`) must see of etcd's history: the
/// field selector's transitions, as upstream's watch cache gives them.
fn expected(history: &[HistoryEvent], node: &str, labelled: bool) -> Vec<(String, String, u64)> {
    let matches = |o: &Value| o["spec"]["nodeName"] == node && (!labelled || o["metadata"]["labels"]["tier"] == "a");
    let mut before: HashMap<&str, bool> = HashMap::new();
    let mut out = Vec::new();
    for e in history {
        let now = matches(&e.object);
        let was = before.get(e.name.as_str()).copied().unwrap_or(false);
        let kind = match (e.kind, was, now) {
            ("DELETED", _, true) => Some("DELETED"),
            ("DELETED", _, false) => None,
            (_, true, true) => Some("MODIFIED"),
            (_, false, true) => Some("ADDED"),
            (_, true, false) => Some("DELETED"),
            (_, false, false) => None,
        };
        before.insert(&e.name, now && e.kind != "DELETED");
        out.extend(kind.map(|k| (k.to_owned(), e.name.clone(), e.rv)));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_kubelet_watches_each_see_exactly_their_nodes_pods_on_bounded_shard_streams() {
    let etcd = Etcd::start().await;
    let topology = Topology::start(&etcd.endpoint, K as u32, &["--bookmark-interval", "1"]).await;
    let (started, router) = (&topology.started, &topology.router);
    router.namespace(NS).await;
    let (code, list) = router.get("/api/v1/nodes?limit=1").await;
    assert_eq!(code, 200, "{list}");
    let nodes_before = rv(&list);
    for i in 0..NODE_WATCHERS {
        let n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node(i)}});
        assert_eq!(router.post("/api/v1/nodes", &n).await.0, 201);
    }
    let (code, list) = router.get("/api/v1/pods?limit=1").await;
    assert_eq!(code, 200, "{list}");
    let from = rv(&list);
    let (code, list) = router.get("/api/v1/nodes?limit=1").await;
    assert_eq!(code, 200, "{list}");
    let nodes_from = rv(&list);

    // One connection per watch, as over plain HTTP (HTTP/1.1 only, as upstream's).
    let http = client();
    let seen: Vec<Arc<Mutex<Seen>>> = (0..NODES).map(|_| Arc::default()).collect();
    let node_seen: Vec<Arc<Mutex<Seen>>> = (0..NODE_WATCHERS).map(|_| Arc::default()).collect();
    let base = started.url();
    // The Node watchers start from before their Nodes were made, except the first, which
    // starts from now and so makes their hub's ring begin after the others' RV: they are
    // served by upstreams of their own until they catch up, then join the hub.
    let node_start = |n: usize| if n == 0 { nodes_from } else { nodes_before };
    let resp = http.get(format!("{base}/api/v1/nodes?watch=1&allowWatchBookmarks=true&resourceVersion={nodes_from}&fieldSelector=metadata.name%3D{}", node(0))).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    read(resp, node_seen[0].clone());
    stream::iter((0..NODES).chain(NODES + 1..NODES + NODE_WATCHERS))
        .for_each_concurrent(64, |i| {
            let (http, seen, node_seen, base) = (&http, &seen, &node_seen, &base);
            async move {
                let url = if i < NODES {
                    let labels = if i >= LABELLED_FROM { "&labelSelector=tier%3Da" } else { "" };
                    format!("{base}/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={from}&fieldSelector=spec.nodeName%3D{}{labels}", node(i))
                } else {
                    format!("{base}/api/v1/nodes?watch=1&allowWatchBookmarks=true&resourceVersion={}&fieldSelector=metadata.name%3D{}", node_start(i - NODES), node(i - NODES))
                };
                let resp = http.get(url).send().await.unwrap();
                assert_eq!(resp.status(), 200);
                read(resp, if i < NODES { seen[i].clone() } else { node_seen[i - NODES].clone() });
            }
        })
        .await;
    // Three filter sets (pods, pods with tier=a, nodes), each K shard streams, once the Node
    // watchers that started behind have caught up.
    let bound = (3 * K) as f64;
    let opened = streams(started).await;
    assert!(opened.0 > bound, "the Node watchers that started behind have upstreams of their own: {opened:?}");
    wait_for(Duration::from_secs(60), || async { streams(started).await == (bound, (2 * K) as f64, K as f64) }).await;

    // The churn: pods placed on a node, pods created unscheduled and bound, status updates,
    // deletes; and a label change on each Node watched.
    let pod = |name: String, node: Option<String>, tier: &str| {
        let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"tier": tier}}, "spec": spec})
    };
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    stream::iter(0..PLACED + BOUND)
        .for_each_concurrent(CLIENTS, |i| {
            let (pods, pod) = (&pods, &pod);
            async move {
                let tier = if i % 2 == 0 { "a" } else { "b" };
                let (name, on) = (format!("p-{i}"), node((i * 7) % NODES));
                if i < PLACED {
                    let (code, body) = router.post(pods, &pod(name, Some(on), tier)).await;
                    assert_eq!(code, 201, "{body}");
                } else {
                    let (code, body) = router.post(pods, &pod(name.clone(), None, tier)).await;
                    assert_eq!(code, 201, "{body}");
                    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": on}});
                    let (code, body) = router.post(&format!("{pods}/{name}/binding"), &binding).await;
                    assert_eq!(code, 201, "{body}");
                }
            }
        })
        .await;
    let mid = streams(started).await;
    stream::iter(0..PLACED + BOUND)
        .for_each_concurrent(CLIENTS, |i| {
            let pods = &pods;
            async move {
                let at = format!("{pods}/p-{i}");
                match i % 4 {
                    // A status update, as a kubelet makes.
                    0 => {
                        let (code, mut p) = router.get(&at).await;
                        assert_eq!(code, 200, "{p}");
                        p["status"] = json!({"phase": "Running"});
                        let (code, body) = router.put(&format!("{at}/status"), &p).await;
                        assert_eq!(code, 200, "{body}");
                    }
                    // A relabelling: tier=a watchers see the pod join (b to a) or leave (a to b).
                    1 | 2 => {
                        let patch = json!({"metadata": {"labels": {"tier": if i % 4 == 1 { "a" } else { "b" }}}});
                        let (code, body) = router.send("PATCH", &at, "application/merge-patch+json", patch.to_string()).await;
                        assert_eq!(code, 200, "{body}");
                    }
                    _ => {
                        let (code, body) = router.delete(&at, Some(&json!({"gracePeriodSeconds": 0}))).await;
                        assert_eq!(code, 200, "{body}");
                    }
                }
            }
        })
        .await;
    for i in 0..NODE_WATCHERS {
        let patch = json!({"metadata": {"labels": {"watched": "yes"}}});
        let (code, body) = router.send("PATCH", &format!("/api/v1/nodes/{}", node(i)), "application/merge-patch+json", patch.to_string()).await;
        assert_eq!(code, 200, "{body}");
    }
    let (code, list) = router.get("/api/v1/pods?limit=1").await;
    assert_eq!(code, 200, "{list}");
    let to = rv(&list);

    // Every watcher, once bookmarked at or past the last write, has seen exactly etcd's history
    // of its own node's pods (or its Node).
    wait_for(Duration::from_secs(120), || async { seen.iter().chain(&node_seen).all(|s| s.lock().unwrap().bookmark >= to) }).await;
    let storage = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let history = etcd_history(&storage, "", "pods", from, to).await;
    // Creates, bindings, then one change to each pod.
    assert_eq!(history.len(), PLACED + 2 * BOUND + PLACED + BOUND, "etcd recorded every write");
    let mut delivered = 0;
    for (i, s) in seen.iter().enumerate() {
        let want = expected(&history, &node(i), i >= LABELLED_FROM);
        let got = &s.lock().unwrap().events;
        assert_eq!(got, &want, "the watcher of {}", node(i));
        delivered += got.len();
    }
    let node_history = etcd_history(&storage, "", "nodes", nodes_before, to).await;
    for (i, s) in node_seen.iter().enumerate() {
        let want: Vec<(String, String, u64)> = node_history.iter().filter(|e| e.name == node(i) && e.rv > node_start(i)).map(|e| (e.kind.to_owned(), e.name.clone(), e.rv)).collect();
        assert!(!want.is_empty());
        assert_eq!(&s.lock().unwrap().events, &want, "the Node watcher of {}", node(i));
    }
    let end = streams(started).await;
    eprintln!("pod events in etcd: {}; delivered to kubelet watchers: {delivered}; shard streams (router, pod, node): as the watchers opened {opened:?}, mid-run {mid:?}, at the end {end:?}", history.len());
    assert_eq!(mid, (bound, (2 * K) as f64, K as f64), "shard streams mid-run");
    assert_eq!(end, (bound, (2 * K) as f64, K as f64), "shard streams at the end");
}
