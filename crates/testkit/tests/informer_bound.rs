//! The admission informers' bound (RFC 0011, "Admission plugins"), against a real etcd: past
//! the bound a kind is let go and admission that needs it answers 503; once the kind shrinks back
//! under the bound, the informer lists it again and admission reads it.

use shardplane_keyspace::{etcd_layout, ObjectKey};
use shardplane_shard::informer::Informers;
use shardplane_storage::Storage;
use shardplane_testkit::*;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn key(name: &str) -> Vec<u8> {
    etcd_layout::object_key(&ObjectKey::new("", "limitranges", "default", name)).into_bytes()
}

fn limit_range(name: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": name, "namespace": "default"}, "spec": {"limits": []}})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_bound_a_kind_is_let_go_and_read_again_once_it_fits() {
    let etcd = Etcd::start().await;
    let store = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let stop = CancellationToken::new();
    let informers = Informers::start_bounded(|_, _| store.clone(), &stop, 3);
    let mut revisions = Vec::new();
    for i in 0..3 {
        revisions.push(store.create(&key(&format!("lr-{i}")), limit_range(&format!("lr-{i}"))).await.unwrap());
    }
    wait_for(Duration::from_secs(10), || async { informers.objects("", "limitranges").await.is_ok_and(|o| o.len() == 3) }).await;

    // One more than the bound: admission cannot read the kind.
    let fourth = store.create(&key("lr-3"), limit_range("lr-3")).await.unwrap();
    wait_for(Duration::from_secs(10), || async { informers.objects("", "limitranges").await.is_err() }).await;
    let err = informers.objects("", "limitranges").await.unwrap_err();
    assert_eq!((err.code, err.message.as_str()), (503, "admission: more than 3 limitranges: too many to hold"));

    // Back under the bound: listed again (after the follower's pause) and read.
    store.delete(&key("lr-3"), fourth).await.unwrap();
    store.delete(&key("lr-0"), revisions[0]).await.unwrap();
    wait_for(Duration::from_secs(30), || async { informers.objects("", "limitranges").await.is_ok_and(|o| o.len() == 2) }).await;
    // The other kinds were never affected.
    assert!(informers.objects("scheduling.k8s.io", "priorityclasses").await.is_ok());
    stop.cancel();
}

/// An informer asked for progress is current while its store confirms it, and stops being
/// current once the store no longer answers (what RBAC's staleness bound rests on, RFC 0012).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_informer_is_current_only_while_its_store_confirms_progress() {
    use shardplane_storage::informer::{InformerOptions, Informers as StoreInformers};
    // An etcd process of its own, whatever the store under test: it is stopped below.
    let etcd = Etcd::start_process(&[]).await;
    let store = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let stop = CancellationToken::new();
    let bound = Duration::from_secs(1);
    let informers = StoreInformers::start(&[("", "limitranges")], |_, _| store.clone(), &stop, InformerOptions { max: 10, progress_every: Some(Duration::from_millis(100)) });
    store.create(&key("lr-0"), limit_range("lr-0")).await.unwrap();
    wait_for(Duration::from_secs(10), || async { informers.objects("", "limitranges").await.is_ok_and(|o| o.len() == 1) }).await;
    // Current, and still current well after the last change: progress keeps confirming it.
    tokio::time::sleep(bound * 2).await;
    assert!(informers.current_within(bound), "progress reports keep an idle kind current");
    // The store stops answering (SIGSTOP): within the bound the kind is no longer current.
    let pid = etcd.pid().to_string();
    assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    wait_for(Duration::from_secs(10), || async { !informers.current_within(bound) }).await;
    assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    wait_for(Duration::from_secs(30), || async { informers.current_within(bound) }).await;
    stop.cancel();
}
