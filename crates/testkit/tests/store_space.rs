//! The NOSPACE drill on a real etcd with a small `--quota-backend-bytes`: fill it through a
//! shard, see the alarm where an operator looks (`/readyz`, `shardctl status`), while reads keep
//! working and writes get upstream's error; recover with the documented command
//! (`shardctl recover-space`); then every object acknowledged before the alarm is there, writes
//! resume, and a watch held open across it all shows every acknowledged write in order.

use serde_json::{json, Value};
use shardplane_keyspace::RangeSet;
use shardplane_testkit::*;
use std::time::Duration;

const QUOTA: &str = "8388608"; // 8 MiB
const CM: &str = "/api/v1/namespaces/space/configmaps";

#[tokio::test]
async fn a_full_store_raises_the_alarm_where_operators_look_and_recovers_with_nothing_lost() {
    // The same drill on etcd and on the embedded store (which keeps etcd's quota and alarm).
    let etcd = if embedded_store() { Etcd::start_embedded_with_quota(QUOTA.parse().unwrap()).await } else { Etcd::start_process(&["--quota-backend-bytes", QUOTA]).await };
    let s = TestShard::start(test_config(&etcd, RangeSet::full())).await;
    s.namespace("space").await;
    // A small object, and a large one rewritten until the store is full: its old revisions are
    // what compaction frees.
    let (code, small) = s.post(CM, &configmap("small", json!({}))).await;
    assert_eq!(code, 201, "{small}");
    let mut w = s.watch(&format!("{CM}?watch=1&resourceVersion={}", rv(&small))).await;
    let Filled { mut big, mut acknowledged } = fill_until_refused(&s, CM).await;
    // Where the operator looks.
    let (code, text) = readyz(&s.url).await;
    assert_eq!(code, 500, "{text}");
    assert!(text.contains("[-]etcd-space failed: NOSPACE alarm raised"), "{text}");
    let status = shardctl(&etcd.endpoint, &["status"]).await;
    assert!(status.contains("ALARM NOSPACE"), "{status}");
    // Reads keep working.
    let (code, got) = s.get(&format!("{CM}/small")).await;
    assert_eq!((code, rv(&got)), (200, rv(&small)));

    // The documented way out.
    let out = shardctl(&etcd.endpoint, &["recover-space"]).await;
    assert!(out.contains("disarmed 1 alarm(s)"), "{out}");
    wait_for(Duration::from_secs(30), || {
        let url = s.url.clone();
        async move { readyz(&url).await.0 == 200 }
    })
    .await;
    assert!(!shardctl(&etcd.endpoint, &["status"]).await.contains("ALARM"));
    // Writes resume; nothing acknowledged is lost.
    big["data"]["n"] = json!("after");
    let (code, after) = s.put(&format!("{CM}/big"), &big).await;
    assert_eq!(code, 200, "{after}");
    acknowledged.push(rv(&after));
    let (code, got) = s.get(&format!("{CM}/small")).await;
    assert_eq!((code, rv(&got)), (200, rv(&small)));
    // The watch held open across it all shows every acknowledged write of `big`, in order.
    let mut seen = Vec::new();
    while seen.len() < acknowledged.len() {
        let e: Value = w.next_change(Duration::from_secs(30)).await.unwrap_or_else(|| panic!("the watch ended after {} of {} writes", seen.len(), acknowledged.len()));
        assert_eq!(e["object"]["metadata"]["name"], "big", "{e}");
        seen.push(event_rv(&e));
    }
    assert_eq!(seen, acknowledged);
}
