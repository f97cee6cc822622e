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
    assert_eq!((err.code, err.message.as_str()), (503, "more than 3 limitranges: too many for admission to hold"));

    // Back under the bound: listed again (after the follower's pause) and read.
    store.delete(&key("lr-3"), fourth).await.unwrap();
    store.delete(&key("lr-0"), revisions[0]).await.unwrap();
    wait_for(Duration::from_secs(30), || async { informers.objects("", "limitranges").await.is_ok_and(|o| o.len() == 2) }).await;
    // The other kinds were never affected.
    assert!(informers.objects("scheduling.k8s.io", "priorityclasses").await.is_ok());
    stop.cancel();
}
