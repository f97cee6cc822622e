//! Priority and fairness at a shard (RFC 0013, "Where fairness is enforced"): the same gate as
//! the router's, over the same FlowSchemas and priority levels followed from the store, so that
//! a flood aimed at this shard's ranges waits in its own flow here and requests for other
//! ranges, on other shards, never meet it. The user is the one the router named in its
//! front-proxy headers; the router's own requests name none and are exempt, as upstream's
//! loopback client is. A list's width is counted from this shard's watch cache.
//!
//! The shard also keeps, for the objects in its ranges, what upstream's configuration
//! controller and config-producer keep for all of them: the `Dangling` condition of each
//! FlowSchema, and the objects it manages (`apf.kubernetes.io/autoupdate-spec: "true"`, and the
//! mandatory `exempt` and `catch-all` always): a missing mandatory object is created again, a
//! managed spec that differs from upstream's is put back (the exempt level's
//! `nominalConcurrencyShares` and `lendablePercent` excepted, which operators may tune), and a
//! managed object that is not one of upstream's is deleted. Every write is a compare-and-swap; a
//! lost race is retried at the next change, which the winning write is.

use crate::shard::Shard;
use crate::write::stored_bytes;
use serde_json::Value;
use shardplane_apimachinery::kind_rules::flowcontrol::{self as bootstrap, AUTOUPDATE};
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_flowcontrol::follow::{self, GROUP, KINDS};
use shardplane_flowcontrol::{status, Gate, StoredCount, Unnamed};
use shardplane_storage::informer::{Held, Informers};
use std::sync::Arc;

/// The shard's gate over `seats` seats, configured from the store from now on.
pub fn start(shard: &Arc<Shard>, seats: u32) -> Arc<Gate> {
    let weak = Arc::downgrade(shard);
    let stored: StoredCount = Arc::new(move |group, plural| weak.upgrade()?.stored_objects(group, plural));
    let gate = Gate::new(seats, Unnamed::Exempt, stored, shard.metrics.registry());
    let store_of = |g: &str, p: &str| shard.store(&shard.builtin(g, p)).clone();
    let informers = follow::follow(gate.clone(), store_of, &shard.shutdown);
    tokio::spawn(keep_configuration(shard.clone(), informers));
    gate
}

/// Keeps the managed objects and sets the Dangling condition of every FlowSchema this shard
/// owns, at every change of either kind, until the shard shuts down.
async fn keep_configuration(shard: Arc<Shard>, informers: Arc<Informers>) {
    let info = shard.builtin(GROUP, "flowschemas");
    let mut kinds: Vec<_> = KINDS.iter().map(|(g, p)| informers.subscribe(g, p).expect("followed")).collect();
    loop {
        let held: Vec<Arc<Held>> = kinds.iter_mut().map(|k| k.borrow_and_update().clone()).collect();
        if let Some(objects) = follow::objects(&held) {
            let levels: Vec<&str> = objects[0].iter().filter_map(|l| l["metadata"]["name"].as_str()).collect();
            maintain(&shard, &objects).await;
            let now = shardplane_apimachinery::meta::now_rfc3339();
            for schema in &objects[1] {
                let name = schema["metadata"]["name"].as_str().unwrap_or("");
                let Ok(key) = shard.owned_key(&info, "", name) else { continue };
                if status::with_dangling(schema, &levels, &now).is_none() {
                    continue;
                }
                if let Err(e) = write_dangling(&shard, &info, &key, &levels, &now).await {
                    tracing::warn!(flowschema = %name, error = %e, "Dangling condition not written; retried at the next change");
                }
            }
        }
        let changed = futures::future::select_all(kinds.iter_mut().map(|k| Box::pin(k.changed())));
        tokio::select! {
            (result, _, _) = changed => if result.is_err() { return },
            _ = shard.shutdown.cancelled() => return,
        }
    }
}

/// Sets the condition on the FlowSchema stored at `key` (absent, or already right: nothing).
async fn write_dangling(shard: &Shard, info: &ResourceInfo, key: &[u8], levels: &[&str], now: &str) -> Result<(), String> {
    let store = shard.store(info);
    let (Some(kv), _) = store.get(key).await.map_err(|e| e.to_string())? else { return Ok(()) };
    let schema: Value = serde_json::from_slice(&kv.value).map_err(|e| e.to_string())?;
    let Some(next) = status::with_dangling(&schema, levels, now) else { return Ok(()) };
    store.update(key, stored_bytes(info, &next), kv.mod_revision).await.map(drop).map_err(|e| e.to_string())
}

/// Upstream's maintenance of the configuration objects this shard owns (see the module doc);
/// `objects` are the stored levels and schemas.
async fn maintain(shard: &Shard, objects: &[Vec<Value>]) {
    for (i, (plural, defaults)) in [("prioritylevelconfigurations", bootstrap::priority_levels()), ("flowschemas", bootstrap::flow_schemas())].into_iter().enumerate() {
        let info = shard.builtin(GROUP, plural);
        let name = |o: &Value| o["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let upstream: Vec<(String, Value)> = defaults
            .into_iter()
            .map(|mut o| {
                shardplane_apimachinery::defaults::set_defaults(&info, &mut o);
                (name(&o), o)
            })
            .collect();
        // The first two of upstream's are the mandatory ones.
        for (mandatory, want) in upstream.iter().take(2) {
            if objects[i].iter().all(|o| name(o) != *mandatory) {
                if let Err(e) = create_again(shard, &info, want).await {
                    tracing::warn!(%plural, name = %mandatory, error = %e, "a mandatory flowcontrol object not created again; retried at the next change");
                }
            }
        }
        for stored in &objects[i] {
            let n = name(stored);
            let mandatory = upstream.iter().take(2).any(|(m, _)| *m == n);
            if !mandatory && stored["metadata"]["annotations"][AUTOUPDATE] != "true" {
                continue;
            }
            let want = upstream.iter().find(|(m, _)| *m == n).map(|(_, w)| w);
            // Judged on the followed copy first: the store is read only for a write to make.
            if want.is_some_and(|w| is_kept(stored, w)) {
                continue;
            }
            let Ok(key) = shard.owned_key(&info, "", &n) else { continue };
            let written = match want {
                Some(want) => put_back_spec(shard, &info, &key, want).await,
                None => delete_managed(shard, &info, &key).await,
            };
            if let Err(e) = written {
                tracing::warn!(%plural, name = %n, error = %e, "a managed flowcontrol object not maintained; retried at the next change");
            }
        }
    }
}

/// The spec `want` should have as stored over `stored`: upstream's, with the exempt level's
/// tunable fields kept.
fn managed_spec(stored: &Value, want: &Value) -> Value {
    let mut spec = want["spec"].clone();
    if want["spec"]["type"] == "Exempt" {
        for field in ["nominalConcurrencyShares", "lendablePercent"] {
            if let Some(v) = stored.pointer(&format!("/spec/exempt/{field}")) {
                spec["exempt"][field] = v.clone();
            }
        }
    }
    spec
}

/// Whether `stored` has the spec and the annotation upstream's `want` gives it.
fn is_kept(stored: &Value, want: &Value) -> bool {
    stored["spec"] == managed_spec(stored, want) && stored["metadata"]["annotations"][AUTOUPDATE] == "true"
}

/// Creates a mandatory object where this shard owns it and it is absent.
async fn create_again(shard: &Shard, info: &ResourceInfo, want: &Value) -> Result<(), String> {
    let Ok(key) = shard.owned_key(info, "", want["metadata"]["name"].as_str().unwrap_or("")) else { return Ok(()) };
    let mut obj = want.clone();
    shardplane_apimachinery::strategy::prepare_for_create(info, &mut obj);
    match shard.store(info).create(&key, stored_bytes(info, &obj)).await {
        Ok(_) | Err(shardplane_storage::StorageError::AlreadyExists) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Puts upstream's spec (and the annotation) back on the object at `key` when they differ.
async fn put_back_spec(shard: &Shard, info: &ResourceInfo, key: &[u8], want: &Value) -> Result<(), String> {
    let store = shard.store(info);
    let (Some(kv), _) = store.get(key).await.map_err(|e| e.to_string())? else { return Ok(()) };
    let mut obj: Value = serde_json::from_slice(&kv.value).map_err(|e| e.to_string())?;
    if is_kept(&obj, want) {
        return Ok(());
    }
    let spec = managed_spec(&obj, want);
    if obj["spec"] != spec {
        obj["spec"] = spec;
        let generation = obj["metadata"]["generation"].as_i64().unwrap_or(1);
        obj["metadata"]["generation"] = Value::from(generation + 1);
    }
    obj["metadata"]["annotations"][AUTOUPDATE] = Value::from("true");
    store.update(key, stored_bytes(info, &obj), kv.mod_revision).await.map(drop).map_err(|e| e.to_string())
}

/// Deletes the managed object at `key` that is not one of upstream's.
async fn delete_managed(shard: &Shard, info: &ResourceInfo, key: &[u8]) -> Result<(), String> {
    let store = shard.store(info);
    let (Some(kv), _) = store.get(key).await.map_err(|e| e.to_string())? else { return Ok(()) };
    store.delete(key, kv.mod_revision).await.map(drop).map_err(|e| e.to_string())
}
