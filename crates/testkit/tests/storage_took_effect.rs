//! How a write whose fate a failover left unknown is settled (RFC 0016): `Storage::took_effect`
//! reads the key's own history after the state the write was conditioned on, and says the write
//! took effect exactly when the key's first change after it is that write's change. Against a
//! real etcd (and the embedded store, in the suite's second pass).

use shardplane_storage::{Primary, Storage};
use shardplane_testkit::*;

#[tokio::test]
async fn a_write_took_effect_exactly_when_the_keys_next_change_is_that_write() {
    let etcd = Etcd::start().await;
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let key = b"/registry/configmaps/settle/a".to_vec();
    let create = |value: &[u8]| Primary::Create { key: key.clone(), value: value.to_vec() };

    // A create: the key's creation, with these bytes.
    let created = storage.commit(&create(b"v1"), &[]).await.unwrap();
    let now = storage.get(&key).await.unwrap().0;
    assert_eq!(storage.took_effect(&create(b"v1"), now.as_ref()).await, Some(created));
    assert_eq!(storage.took_effect(&create(b"another writer's"), now.as_ref()).await, None);
    // No key now: nothing to tell a create by.
    assert_eq!(storage.took_effect(&create(b"v1"), None).await, None);

    // An update: the first change after the revision it was conditioned on, even with later
    // changes since.
    let update = |value: &[u8], expected: u64| Primary::Update { key: key.clone(), value: value.to_vec(), expected };
    let updated = storage.commit(&update(b"v2", created), &[]).await.unwrap();
    let later = storage.commit(&update(b"v3", updated), &[]).await.unwrap();
    assert_eq!(storage.took_effect(&update(b"v2", created), None).await, Some(updated));
    assert_eq!(storage.took_effect(&update(b"v3", updated), None).await, Some(later));
    assert_eq!(storage.took_effect(&update(b"v3", created), None).await, None, "v2 came first after the condition");
    // Nothing changed after the condition: it did not take effect.
    assert_eq!(storage.took_effect(&update(b"v4", later), None).await, None);

    // A delete: the first change after its condition is a delete.
    let deleted = storage.commit(&Primary::Delete { key: key.clone(), expected: later }, &[]).await.unwrap();
    assert_eq!(storage.took_effect(&Primary::Delete { key: key.clone(), expected: later }, None).await, Some(deleted));
    assert_eq!(storage.took_effect(&Primary::Delete { key: key.clone(), expected: created }, None).await, None, "an update came first");
}
