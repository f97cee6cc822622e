//! The catalog follower's two answers to "is this resource served?" on a real etcd:
//! `caught_up` reads the store's revision and waits for it; `current` answers from the catalog
//! as it stands while etcd confirmed it within a second, except after a CRD write this process
//! noted, which it waits for as `caught_up` does.

use serde_json::json;
use shardplane_apimachinery::crd;
use shardplane_catalog::{Follower, CATCH_UP, FRESH};
use shardplane_keyspace::etcd_layout;
use shardplane_storage::Storage;
use shardplane_testkit::*;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// An established CRD `{plural}.fresh.example.com`, stored as the shard stores one.
fn crd_bytes(plural: &str) -> (Vec<u8>, Vec<u8>) {
    let name = format!("{plural}.fresh.example.com");
    let mut c = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": name},
        "spec": {"group": "fresh.example.com", "scope": "Namespaced", "names": {"plural": plural, "kind": format!("K{plural}")},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]}
    });
    crd::apply_defaults(&mut c);
    crd::establish(&mut c, None, "2026-01-01T00:00:00Z");
    let key = format!("{}{name}", etcd_layout::resource_prefix(crd::GROUP, crd::PLURAL));
    (key.into_bytes(), serde_json::to_vec(&c).unwrap())
}

fn serves(f: &std::sync::Arc<shardplane_catalog::Catalog>, plural: &str) -> bool {
    f.find("fresh.example.com", "v1", plural).is_some()
}

#[tokio::test]
async fn current_answers_from_a_confirmed_catalog_and_waits_for_a_noted_write() {
    let etcd = Etcd::start().await;
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let stop = CancellationToken::new();
    let follower = Follower::start(storage.clone(), stop.clone());
    // Confirmed once listed: `current` answers at once from then on.
    wait_for(Duration::from_secs(10), || async { follower.now().revision > 0 }).await;
    let began = std::time::Instant::now();
    for _ in 0..100 {
        assert!(!serves(&follower.current(CATCH_UP).await, "widgets"));
    }
    eprintln!("100 answers from the confirmed catalog in {:?}", began.elapsed());
    // Let the confirmation age past FRESH with nothing happening: the next answer reads the
    // store once and asks etcd to confirm again (a progress mark on the open watch), and the
    // answers after it read nothing (etcd's own count of Range calls says so).
    tokio::time::sleep(FRESH + Duration::from_millis(200)).await;
    if !embedded_store() {
        let before = etcd_range_calls(&etcd.endpoint).await;
        let began = std::time::Instant::now();
        for _ in 0..100 {
            assert!(!serves(&follower.current(CATCH_UP).await, "widgets"));
        }
        let reads = etcd_range_calls(&etcd.endpoint).await - before;
        // At most one confirmation per FRESH window the answers span (on a loaded machine the
        // 100 answers can outlast one window, and the next confirmation is then due too).
        let windows = 1 + began.elapsed().as_millis() / FRESH.as_millis();
        assert!(reads <= 3.0 * windows as f64, "100 answers after the confirmation aged cost {reads} Range calls over {windows} freshness window(s)");
    }

    // A CRD written by this process and noted is in the very next answer.
    let (key, value) = crd_bytes("widgets");
    storage.create(&key, value).await.unwrap();
    follower.note_write();
    assert!(serves(&follower.current(CATCH_UP).await, "widgets"), "a noted CRD write is in the next answer");
    // Written elsewhere (not noted): in the catalog once its watch delivers it, within a bound.
    let (key, value) = crd_bytes("gizmos");
    storage.create(&key, value).await.unwrap();
    wait_for(FRESH * 2, || async { serves(&follower.current(CATCH_UP).await, "gizmos") }).await;
    stop.cancel();
}
