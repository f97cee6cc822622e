//! write: creates, updates and deletes per second through the router vs raw etcd puts and
//! deletes of the same bytes, at the same concurrency.

use crate::cluster::{http, Topology};
use crate::report::Section;
use crate::Ctx;
use futures::StreamExt;
use serde_json::{json, Value};
use shardplane_apimachinery::encode::object_bytes;
use shardplane_keyspace::{etcd_layout, ObjectKey};
use std::time::Instant;

const NS: &str = "writes";
const CONCURRENCY: usize = 32;

fn configmap(i: usize, round: u32) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("wr-{i:07}"), "namespace": NS, "labels": {"app": format!("app-{}", i % 13)}}, "data": {"config.yaml": format!("round: {round}\n{}", "key: value-0123456789abcdef\n".repeat(32))}})
}

/// Runs `op(i)` for i in 0..n with CONCURRENCY in flight; returns operations per second.
async fn rate<F, Fut>(n: usize, op: F) -> f64
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    futures::stream::iter(0..n).map(op).buffer_unordered(CONCURRENCY).collect::<Vec<()>>().await;
    n as f64 / start.elapsed().as_secs_f64()
}

pub async fn run(ctx: &Ctx) -> Section {
    let n = if ctx.smoke { 200 } else { 5_000 };
    let k = if ctx.smoke { 2 } else { 4 };
    let etcd = crate::start_etcd().await;
    let t = Topology::start(&ctx.router, &etcd.endpoint, k).await;
    let c = http();
    let ns = c.post(format!("{}/api/v1/namespaces", t.url)).json(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).send().await.expect("namespace");
    assert!(ns.status().is_success(), "namespace: {}", ns.status());
    let bar = ctx.spinner(&format!("write: {n} creates, updates, deletes through the router"));
    let base = format!("{}/api/v1/namespaces/{NS}/configmaps", t.url);
    let ok = |r: reqwest::Response, what: &str| assert!(r.status().is_success(), "{what}: {}", r.status());
    let router_create = rate(n, |i| {
        let (c, base) = (c.clone(), base.clone());
        async move { ok(c.post(&base).json(&configmap(i, 0)).send().await.expect("create"), "create") }
    })
    .await;
    let router_update = rate(n, |i| {
        let (c, base) = (c.clone(), base.clone());
        async move { ok(c.put(format!("{base}/wr-{i:07}")).json(&configmap(i, 1)).send().await.expect("update"), "update") }
    })
    .await;
    let router_delete = rate(n, |i| {
        let (c, base) = (c.clone(), base.clone());
        async move { ok(c.delete(format!("{base}/wr-{i:07}")).send().await.expect("delete"), "delete") }
    })
    .await;
    bar.finish_and_clear();
    t.stop().await;

    // The same bytes as the stored objects, straight to etcd under other names.
    let bar = ctx.spinner("write: the same through raw etcd");
    let client = etcd_client::Client::connect([etcd.endpoint.clone()], None).await.expect("etcd");
    let key = |i: usize| etcd_layout::object_key(&ObjectKey::new("", "configmaps", "raw", &format!("wr-{i:07}")));
    let bytes = |i: usize, round: u32| {
        let mut o = configmap(i, round);
        shardplane_apimachinery::meta::prepare_for_create(&crate::objects::Kind::ConfigMap.info(), &mut o);
        object_bytes(&o)
    };
    let etcd_create = rate(n, |i| {
        let mut kv = client.kv_client();
        async move {
            kv.put(key(i), bytes(i, 0), None).await.expect("put");
        }
    })
    .await;
    let etcd_update = rate(n, |i| {
        let mut kv = client.kv_client();
        async move {
            kv.put(key(i), bytes(i, 1), None).await.expect("put");
        }
    })
    .await;
    let etcd_delete = rate(n, |i| {
        let mut kv = client.kv_client();
        async move {
            kv.delete(key(i), None).await.expect("delete");
        }
    })
    .await;
    bar.finish_and_clear();

    let mut s = Section::new("write");
    s.line(format!("{n} ConfigMaps (~1 KiB) created, updated (PUT of the whole object) and deleted through the router over {k} shards, {CONCURRENCY} requests in flight; then the same bytes put and deleted straight in etcd at the same concurrency.\n"));
    let mut rows = Vec::new();
    for (op, r, e) in [("create", router_create, etcd_create), ("update", router_update, etcd_update), ("delete", router_delete, etcd_delete)] {
        rows.push(vec![op.to_owned(), format!("{r:.0}"), format!("{e:.0}"), format!("{:.0}%", 100.0 * r / e)]);
        s.target(format!("{op}s/s through the router vs raw etcd"), format!("{:.0}%", 100.0 * r / e), "≥ 80%", r >= 0.8 * e);
    }
    s.table(&["operation", "router ops/s", "raw etcd ops/s", "router / etcd"], &rows);
    s
}
