//! A store that stops answering (its process frozen, as a black-holed host looks): `/readyz`
//! turns unready within a stated bound, a read that must be current is refused with a 5xx
//! Status rather than answered from the cache, and when the store answers again everything
//! recovers and a watch opened before the outage shows every change, with no gap.

use serde_json::{json, Value};
use shardplane_keyspace::RangeSet;
use shardplane_testkit::*;
use std::time::{Duration, Instant};

/// How soon `/readyz` must say the store is gone: the readiness read's own bound (2 s), with
/// room for a busy machine.
const UNREADY_WITHIN: Duration = Duration::from_secs(10);

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill {sig} {pid}");
}

async fn readyz(url: &str) -> u16 {
    match client().get(format!("{url}/readyz")).timeout(Duration::from_secs(8)).send().await {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

#[tokio::test]
async fn a_frozen_store_makes_the_server_unready_and_refuse_current_reads_then_it_recovers_without_a_gap() {
    if embedded_store() {
        // The embedded store runs inside this test process, which cannot freeze itself; the
        // etcd run of the suite covers the behaviour.
        return;
    }
    let etcd = Etcd::start().await;
    let s = TestShard::start(test_config(&etcd, RangeSet::full())).await;
    s.namespace("outage").await;
    const CM: &str = "/api/v1/namespaces/outage/configmaps";
    let (code, before) = s.post(CM, &configmap("before", json!({}))).await;
    assert_eq!(code, 201, "{before}");
    let mut w = s.watch(&format!("{CM}?watch=1&resourceVersion={}", rv(&before))).await;
    assert_eq!(readyz(&s.url).await, 200);

    signal(etcd.pid(), "-STOP");
    let frozen = Instant::now();
    wait_for(UNREADY_WITHIN, || {
        let url = s.url.clone();
        async move { readyz(&url).await == 500 }
    })
    .await;
    let unready_after = frozen.elapsed();
    // A GET without a resourceVersion must be current: with the store silent it is a 5xx
    // Status, never the cached object presented as current.
    let r = client().get(format!("{}{CM}/before", s.url)).timeout(Duration::from_secs(70)).send().await.unwrap();
    let code = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    assert!(matches!(code, 503 | 504), "a current read with the store frozen answered {code}: {body}");
    assert_eq!((body["kind"].as_str(), body["code"].as_u64()), (Some("Status"), Some(u64::from(code))), "{body}");

    signal(etcd.pid(), "-CONT");
    wait_for(Duration::from_secs(60), || {
        let url = s.url.clone();
        async move { readyz(&url).await == 200 }
    })
    .await;
    let (code, after) = s.post(CM, &configmap("after", json!({}))).await;
    assert_eq!(code, 201, "{after}");
    // The watch opened before the outage shows the write made after it, at its resourceVersion
    // (nothing between them happened in this namespace). If the server ended it meanwhile, a
    // client resumes from the last resourceVersion it saw, as an informer does, and must get
    // the change then, not a 410.
    let e = match w.next_change(Duration::from_secs(30)).await {
        Some(e) => e,
        None => {
            let mut again = s.watch(&format!("{CM}?watch=1&resourceVersion={}", rv(&before))).await;
            again.next_change(Duration::from_secs(30)).await.expect("a watch resumed after the outage shows the change")
        }
    };
    assert_eq!((e["type"].as_str(), e["object"]["metadata"]["name"].as_str(), event_rv(&e)), (Some("ADDED"), Some("after"), rv(&after)), "{e}");
    eprintln!("unready {unready_after:?} after the store froze");
}
