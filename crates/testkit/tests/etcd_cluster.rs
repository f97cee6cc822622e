//! The harness's etcd cluster is a real one: its members replicate every write, any member
//! answers with the quorum's state, and it keeps serving when one member is killed.

use shardplane_storage::Storage;
use shardplane_testkit::EtcdCluster;

#[tokio::test]
async fn three_members_replicate_and_survive_one_loss() {
    let mut cluster = EtcdCluster::start(3, &std::env::temp_dir(), &[]).await;
    assert_eq!(cluster.endpoints.len(), 3);
    let mut raw = etcd_client::Client::connect(&cluster.endpoints[..1], None).await.unwrap();
    let members = raw.member_list().await.unwrap();
    assert_eq!(members.members().len(), 3, "the cluster has three members: {:?}", members.members());
    let first = Storage::connect(&cluster.endpoints[..1]).await.unwrap();
    let rev = first.put(b"/registry/harness/a", b"one".to_vec()).await.unwrap();
    // A read through another member (linearizable, as etcd's default) sees the write.
    let third = Storage::connect(&cluster.endpoints[2..]).await.unwrap();
    let (kv, at) = third.get(b"/registry/harness/a").await.unwrap();
    assert_eq!(kv.map(|kv| kv.value.to_vec()), Some(b"one".to_vec()));
    assert!(at >= rev);
    // Two of three keep a quorum: a write through a survivor succeeds once a leader is there.
    cluster.kill(0);
    let survivor = Storage::connect(&cluster.endpoints[1..2]).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let rev2 = loop {
        match survivor.put(b"/registry/harness/b", b"two".to_vec()).await {
            Ok(rev) => break rev,
            Err(e) => assert!(std::time::Instant::now() < deadline, "no write within 30 s of losing a member: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(rev2 > rev);
    let (kv, _) = third.get(b"/registry/harness/b").await.unwrap();
    assert_eq!(kv.map(|kv| kv.value.to_vec()), Some(b"two".to_vec()));
}
