//! The storage crate's list–watch–relist follower against a real etcd: a follower's state (a
//! model map built only from what it is told) equals etcd's range after every change, a failure
//! inside the follower makes it list again without losing anything, and stopping ends it.

use shardplane_storage::follow::{follow, FollowOptions, Followed};
use shardplane_storage::Storage;
use shardplane_testkit::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

type Model = Arc<Mutex<(BTreeMap<Vec<u8>, Vec<u8>>, u32)>>;

async fn etcd_state(storage: &Storage) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let (kvs, _) = storage.list_range(b"/f/", b"/f0", 0).await.unwrap();
    kvs.into_iter().map(|kv| (kv.key, kv.value.to_vec())).collect()
}

#[tokio::test]
async fn a_follower_sees_the_range_as_etcd_has_it_across_a_relist() {
    let etcd = Etcd::start().await;
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    storage.create(b"/f/a", b"1".to_vec()).await.unwrap();
    storage.create(b"/other", b"x".to_vec()).await.unwrap();
    let model: Model = Arc::default();
    let stop = CancellationToken::new();
    // The follower refuses the first change it is told once, as a follower that cannot take a
    // value does: the loop must list again and end up with the same state.
    let refused_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let task = {
        let (storage, model, stop, refused_once) = (storage.clone(), model.clone(), stop.clone(), refused_once.clone());
        tokio::spawn(async move {
            let options = FollowOptions::fixed("test", Duration::from_millis(50), stop);
            follow(&storage, b"/f/", b"/f0", options, |f| {
                let mut m = model.lock().unwrap();
                match f {
                    Followed::Listed { kvs, .. } => {
                        m.0 = kvs.into_iter().map(|kv| (kv.key, kv.value.to_vec())).collect();
                        m.1 += 1;
                    }
                    Followed::Changed(events) => {
                        if !refused_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                            return Err("refused once".into());
                        }
                        for e in events {
                            if e.deleted {
                                m.0.remove(&e.kv.key);
                            } else {
                                m.0.insert(e.kv.key, e.kv.value.to_vec());
                            }
                        }
                    }
                    Followed::Progress(_) => {}
                }
                Ok(())
            })
            .await
        })
    };
    let b = storage.create(b"/f/b", b"2".to_vec()).await.unwrap();
    storage.update(b"/f/a", b"3".to_vec(), storage.get(b"/f/a").await.unwrap().0.unwrap().mod_revision).await.unwrap();
    storage.delete(b"/f/b", b).await.unwrap();
    storage.create(b"/f/c", b"4".to_vec()).await.unwrap();
    let want = etcd_state(&storage).await;
    assert_eq!(want.len(), 2);
    wait_for(Duration::from_secs(10), || {
        let (model, want) = (model.clone(), want.clone());
        async move { model.lock().unwrap().0 == want }
    })
    .await;
    let lists = model.lock().unwrap().1;
    assert!(lists >= 2, "the refused change made it list again (listed {lists} times)");
    assert!(refused_once.load(std::sync::atomic::Ordering::SeqCst));
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("stopping ends the follower").unwrap();
}
