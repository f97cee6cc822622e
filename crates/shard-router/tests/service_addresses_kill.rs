//! Service addresses under a shard's SIGKILL (RFC 0014), with real processes: `shard-router`
//! over four shard processes on real etcd, eight clients creating 200 NodePort Services in
//! ranges small enough that picks collide, one shard process killed with SIGKILL part-way (the
//! router starts it again). At the end no address or node port is held twice, and the IPAddress
//! objects and node-port keys are exactly those the Services hold, within two repair periods.

mod common;

use common::{send_signal, Topology};
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use shardplane_keyspace::etcd_layout::{prefix_end, NODE_PORTS_PREFIX};
use shardplane_storage::Storage;
use shardplane_testkit::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const SERVICES: usize = 200;
const CLIENTS: usize = 8;
/// The kill comes after this many creates were acknowledged.
const KILL_AFTER: usize = 60;
/// A shard started from the command line repairs every 10 s (`repair::PERIOD`): two passes.
const REPAIRED_WITHIN: Duration = Duration::from_secs(25);

/// Creates `name` until an answer says it exists: a 201, or a 409 for a create that landed
/// before a failure hid its answer. Refusals while a shard is down are retried (and counted in
/// `refused`).
async fn create(router: &TestShard, name: &str, refused: &AtomicUsize) {
    let body = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": {"type": "NodePort", "selector": {"app": name}, "ports": [{"port": 80}]}});
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, answer) = router.post("/api/v1/namespaces/default/services", &body).await;
        match code {
            201 | 409 => return,
            _ => {
                assert!(Instant::now() < deadline, "{name} not created: {code} {answer}");
                assert!(code == 0 || code >= 500 || code == 429, "{name}: {code} {answer}");
                refused.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What the Services hold and what the records say, read from etcd at one revision:
/// (addresses by Service, node ports by Service, IPAddress holders, node-port holders).
type Holdings = (BTreeMap<String, String>, BTreeMap<String, u16>, BTreeMap<String, String>, BTreeMap<u16, String>);

async fn holdings(storage: &Storage) -> Holdings {
    let list = |group: &str, resource: &str| shardplane_keyspace::etcd_layout::range_keys(group, resource, shardplane_keyspace::HashRange::FULL);
    let (start, end) = list("", "services");
    let (svcs, rev) = storage.list_range(&start, &end, 0).await.unwrap();
    let (start, end) = list("networking.k8s.io", "ipaddresses");
    let (ips, _) = storage.list_range(&start, &end, rev).await.unwrap();
    let (ports, _) = storage.list_range(NODE_PORTS_PREFIX.as_bytes(), &prefix_end(NODE_PORTS_PREFIX.as_bytes()), rev).await.unwrap();
    let decode = |v: &[u8]| serde_json::from_slice::<Value>(v).unwrap();
    let (mut svc_ips, mut svc_ports) = (BTreeMap::new(), BTreeMap::new());
    for kv in &svcs {
        let s = decode(&kv.value);
        let name = format!("{}/{}", s["metadata"]["namespace"].as_str().unwrap(), s["metadata"]["name"].as_str().unwrap());
        svc_ips.insert(name.clone(), s["spec"]["clusterIP"].as_str().unwrap().to_owned());
        if let Some(p) = s["spec"]["ports"][0]["nodePort"].as_u64() {
            svc_ports.insert(name, p as u16);
        }
    }
    let ip_holders = ips.iter().map(|kv| decode(&kv.value)).map(|o| (o["metadata"]["name"].as_str().unwrap().to_owned(), format!("{}/{}", o["spec"]["parentRef"]["namespace"].as_str().unwrap(), o["spec"]["parentRef"]["name"].as_str().unwrap()))).collect();
    let port_holders = ports.iter().map(|kv| {
        let v = decode(&kv.value);
        (std::str::from_utf8(&kv.key[NODE_PORTS_PREFIX.len()..]).unwrap().parse().unwrap(), format!("{}/{}", v["namespace"].as_str().unwrap(), v["name"].as_str().unwrap()))
    }).collect();
    (svc_ips, svc_ports, ip_holders, port_holders)
}

/// Whether the records are exactly what the Services hold (each address and port once).
fn consistent((svc_ips, svc_ports, ip_holders, port_holders): &Holdings) -> bool {
    let by_ip: BTreeMap<String, String> = svc_ips.iter().map(|(s, ip)| (ip.clone(), s.clone())).collect();
    let by_port: BTreeMap<u16, String> = svc_ports.iter().map(|(s, p)| (*p, s.clone())).collect();
    by_ip.len() == svc_ips.len() && by_port.len() == svc_ports.len() && &by_ip == ip_holders && &by_port == port_holders
}

#[tokio::test]
async fn a_shard_killed_mid_creates_leaves_no_address_shared_or_leaked() {
    let etcd = Etcd::start().await;
    let topology = Topology::start(&etcd.endpoint, 4, &["--service-cluster-ip-range", "10.100.0.0/24", "--service-node-port-range", "30000-30299"]).await;
    let (started, router) = (&topology.started, &topology.router);
    wait_for(Duration::from_secs(60), || async { router.get("/api/v1/namespaces/default/services/kubernetes").await.0 == 200 }).await;
    let victim = started.shards[1].0;
    let done = AtomicUsize::new(0);
    let killed = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    stream::iter(0..SERVICES)
        .for_each_concurrent(CLIENTS, |i| {
            let (done, killed, refused) = (&done, &killed, &refused);
            async move {
                create(router, &format!("s{i}"), refused).await;
                if done.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER && killed.fetch_add(1, Ordering::SeqCst) == 0 {
                    send_signal(victim, 9);
                }
            }
        })
        .await;
    assert_eq!(killed.load(Ordering::SeqCst), 1, "the shard was killed");
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let (read_at, end) = (Instant::now(), Instant::now() + REPAIRED_WITHIN);
    let mut last = holdings(&storage).await;
    let at_once = consistent(&last);
    while !consistent(&last) {
        assert!(Instant::now() < end, "records not repaired within {REPAIRED_WITHIN:?}: {last:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        last = holdings(&storage).await;
    }
    eprintln!("creates refused while the shard was down: {}; records consistent at the first read: {at_once}; after {:?}", refused.load(Ordering::SeqCst), read_at.elapsed());
    let (svc_ips, svc_ports, _, _) = &last;
    // The 200 Services and the kubernetes one; every NodePort Service has its port.
    assert_eq!(svc_ips.len(), SERVICES + 1);
    assert_eq!(svc_ports.len(), SERVICES);
    assert_eq!(svc_ips.values().collect::<BTreeSet<_>>().len(), SERVICES + 1, "an address given twice");
    assert_eq!(svc_ports.values().collect::<BTreeSet<_>>().len(), SERVICES, "a node port given twice");
}
