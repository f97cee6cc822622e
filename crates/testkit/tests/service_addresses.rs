//! Service addresses through a router over four shards on a real etcd (RFC 0014): Services
//! created at once on every shard never share a cluster IP or a node port, even in ranges small
//! enough that random picks collide; what a Service held is given back when it changes or goes;
//! values a client asks for get upstream's 422s; and the repair loop restores a record deleted
//! by hand and reclaims one no Service holds.

use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use shardplane_apimachinery::service_network::ServiceNetwork;
use shardplane_keyspace::etcd_layout::{prefix_end, NODE_PORTS_PREFIX};
use shardplane_storage::Storage;
use shardplane_testkit::*;
use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

const NS: &str = "addr";
/// Ranges small enough that 200 Services fill most of them: 254 addresses, 300 node ports.
const CIDR: &str = "10.100.0.0/24";
const PORTS: &str = "30000-30299";
const SERVICES: usize = 200;
/// The repair loop passes every second in tests; a record is repaired within two passes.
const REPAIRED_WITHIN: Duration = Duration::from_secs(10);

async fn cluster() -> (Etcd, Vec<TestShard>, TestShard) {
    let network = ServiceNetwork::parse(CIDR, PORTS).unwrap();
    let (etcd, shards, router) = routed_cluster_with(4, |c| c.service_network = network.clone()).await;
    router.namespace(NS).await;
    (etcd, shards, router)
}

fn service(name: &str, ty: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": {"type": ty, "selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})
}

fn path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/services/{name}")
}

/// The managed IPAddress objects as the router lists them: address → (namespace, name).
async fn ip_addresses(router: &TestShard) -> Vec<(String, String, String)> {
    let (code, list) = router.get("/apis/networking.k8s.io/v1/ipaddresses").await;
    assert_eq!(code, 200, "{list}");
    list["items"].as_array().unwrap().iter().map(|o| {
        let r = &o["spec"]["parentRef"];
        (o["metadata"]["name"].as_str().unwrap().to_owned(), r["namespace"].as_str().unwrap_or("").to_owned(), r["name"].as_str().unwrap_or("").to_owned())
    }).collect()
}

/// The node ports held in etcd.
async fn node_ports(etcd: &Etcd) -> BTreeSet<u16> {
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let keys = storage.list_keys(NODE_PORTS_PREFIX.as_bytes(), &prefix_end(NODE_PORTS_PREFIX.as_bytes())).await.unwrap();
    keys.iter().map(|k| std::str::from_utf8(&k[NODE_PORTS_PREFIX.len()..]).unwrap().parse().unwrap()).collect()
}

fn node_port(svc: &Value) -> u16 {
    svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap_or_else(|| panic!("no node port: {svc}")) as u16
}

#[tokio::test]
async fn services_created_at_once_on_every_shard_never_share_an_address_or_a_node_port() {
    let (etcd, _shards, router) = cluster().await;
    let made: Vec<(u16, Value)> = stream::iter(0..SERVICES).map(|i| { let r = &router; async move { r.post(&format!("/api/v1/namespaces/{NS}/services"), &service(&format!("s{i}"), "NodePort")).await } }).buffer_unordered(32).collect().await;
    let (mut ips, mut ports) = (BTreeSet::new(), BTreeSet::new());
    for (code, svc) in &made {
        assert_eq!(*code, 201, "{svc}");
        let ip: Ipv4Addr = svc["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
        // In 10.100.0.0/24, neither its network nor its broadcast address.
        assert!(ip.octets()[..3] == [10, 100, 0] && (1..=254).contains(&ip.octets()[3]), "{ip} outside {CIDR}");
        assert_eq!(svc["spec"]["clusterIPs"], json!([ip.to_string()]));
        assert_eq!((&svc["spec"]["ipFamilies"], &svc["spec"]["ipFamilyPolicy"]), (&json!(["IPv4"]), &json!("SingleStack")));
        assert!(ips.insert(ip), "{ip} given twice");
        let p = node_port(svc);
        assert!((30000..=30299).contains(&p), "{p}");
        assert!(ports.insert(p), "node port {p} given twice");
    }
    // Every address has its IPAddress naming its Service, and every node port its key; the
    // kubernetes Service holds the range's first address.
    let held = ip_addresses(&router).await;
    let expected: BTreeSet<(String, String, String)> = made.iter().map(|(_, s)| (s["spec"]["clusterIP"].as_str().unwrap().to_owned(), NS.to_owned(), s["metadata"]["name"].as_str().unwrap().to_owned())).chain([("10.100.0.1".to_owned(), "default".to_owned(), "kubernetes".to_owned())]).collect();
    assert_eq!(held.iter().cloned().collect::<BTreeSet<_>>(), expected);
    assert_eq!(held.len(), SERVICES + 1);
    assert_eq!(node_ports(&etcd).await, ports);
    // Deleting them gives everything back in the same transactions.
    let codes: Vec<u16> = stream::iter(0..SERVICES).map(|i| { let r = &router; async move { r.delete(&path(&format!("s{i}")), None).await.0 } }).buffer_unordered(32).collect().await;
    assert!(codes.iter().all(|c| *c == 200), "{codes:?}");
    assert_eq!(ip_addresses(&router).await, vec![("10.100.0.1".to_owned(), "default".to_owned(), "kubernetes".to_owned())]);
    assert_eq!(node_ports(&etcd).await, BTreeSet::new());
}

#[tokio::test]
async fn asked_for_values_are_checked_and_changes_take_and_give_back() {
    let (etcd, _shards, router) = cluster().await;
    let collection = format!("/api/v1/namespaces/{NS}/services");
    let mut fixed = service("fixed", "NodePort");
    fixed["spec"]["clusterIP"] = json!("10.100.0.10");
    fixed["spec"]["ports"][0]["nodePort"] = json!(30010);
    let (code, created) = router.post(&collection, &fixed).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!((created["spec"]["clusterIP"].as_str(), node_port(&created)), (Some("10.100.0.10"), 30010));
    // The same address, an address outside the range, the same node port, one outside the range.
    let refusals = [
        ("clusterIP", json!("10.100.0.10"), "spec.clusterIPs", "Invalid value: []string{\"10.100.0.10\"}: failed to allocate IP 10.100.0.10: provided IP is already allocated"),
        ("clusterIP", json!("10.200.0.10"), "spec.clusterIPs", "Invalid value: []string{\"10.200.0.10\"}: failed to allocate IP 10.200.0.10: provided IP 10.200.0.10 is not in the valid range"),
        ("nodePort", json!(30010), "spec.ports[0].nodePort", "Invalid value: 30010: provided port is already allocated"),
        ("nodePort", json!(31000), "spec.ports[0].nodePort", "Invalid value: 31000: provided port is not in the valid range. The range of valid ports is 30000-30299"),
    ];
    for (i, (field, value, at, message)) in refusals.into_iter().enumerate() {
        let mut s = service(&format!("refused-{i}"), "NodePort");
        if field == "clusterIP" {
            s["spec"]["clusterIP"] = value;
        } else {
            s["spec"]["ports"][0]["nodePort"] = value;
        }
        for dry in ["", "?dryRun=All"] {
            let (code, status) = router.post(&format!("{collection}{dry}"), &s).await;
            assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")), "{dry} {status}");
            assert_eq!(status["message"], format!("Service \"refused-{i}\" is invalid: {at}: {message}"), "{dry}");
            assert_eq!(status["details"]["causes"][0]["field"], at);
        }
    }
    let mut v6 = service("v6", "ClusterIP");
    v6["spec"]["ipFamilies"] = json!(["IPv6"]);
    let (code, status) = router.post(&collection, &v6).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["details"]["causes"][0]["message"], "Invalid value: \"IPv6\": not configured on this cluster");
    // A headless Service holds no address.
    let mut headless = service("headless", "ClusterIP");
    headless["spec"]["clusterIP"] = json!("None");
    assert_eq!(router.post(&collection, &headless).await.0, 201);
    assert!(!ip_addresses(&router).await.iter().any(|(_, _, n)| n == "headless"));

    // NodePort → ClusterIP gives the node port back; ClusterIP → NodePort takes one.
    let (code, svc) = router.get(&path("fixed")).await;
    assert_eq!(code, 200);
    let mut to_cluster_ip = svc.clone();
    to_cluster_ip["spec"]["type"] = json!("ClusterIP");
    let (code, updated) = router.put(&path("fixed"), &to_cluster_ip).await;
    assert_eq!(code, 200, "{updated}");
    assert!(updated["spec"]["ports"][0].get("nodePort").is_none(), "{updated}");
    assert_eq!(updated["spec"]["clusterIP"], "10.100.0.10");
    assert!(!node_ports(&etcd).await.contains(&30010));
    let mut back = updated.clone();
    back["spec"]["type"] = json!("NodePort");
    let (code, updated) = router.put(&path("fixed"), &back).await;
    assert_eq!(code, 200, "{updated}");
    let p = node_port(&updated);
    assert_eq!(node_ports(&etcd).await, BTreeSet::from([p]));
    // To ExternalName gives the address and the node port back; back to ClusterIP takes a new address.
    let mut external = updated.clone();
    external["spec"]["type"] = json!("ExternalName");
    external["spec"]["externalName"] = json!("db.example.com");
    let (code, updated) = router.put(&path("fixed"), &external).await;
    assert_eq!(code, 200, "{updated}");
    assert!(updated["spec"].get("clusterIP").is_none(), "{updated}");
    assert!(!ip_addresses(&router).await.iter().any(|(_, _, n)| n == "fixed"));
    assert_eq!(node_ports(&etcd).await, BTreeSet::new());
    let patch = json!({"spec": {"type": "ClusterIP", "externalName": null}});
    let (code, updated) = router.send("PATCH", &path("fixed"), "application/merge-patch+json", patch.to_string()).await;
    assert_eq!(code, 200, "{updated}");
    let ip = updated["spec"]["clusterIP"].as_str().unwrap().to_owned();
    assert!(ip_addresses(&router).await.contains(&(ip, NS.to_owned(), "fixed".to_owned())));
}

#[tokio::test]
async fn the_repair_loop_restores_and_reclaims_records() {
    let (etcd, _shards, router) = cluster().await;
    // What the cluster starts with: the default ServiceCIDR, Ready, and the kubernetes
    // Service's address.
    let (code, cidr) = router.get("/apis/networking.k8s.io/v1/servicecidrs/kubernetes").await;
    assert_eq!(code, 200, "{cidr}");
    assert_eq!(cidr["spec"]["cidrs"], json!([CIDR]));
    assert_eq!(cidr["status"]["conditions"][0]["type"], "Ready");
    let (_, kubernetes) = router.get("/api/v1/namespaces/default/services/kubernetes").await;
    assert_eq!(kubernetes["spec"]["clusterIP"], "10.100.0.1");

    let (code, svc) = router.post(&format!("/api/v1/namespaces/{NS}/services"), &service("web", "NodePort")).await;
    assert_eq!(code, 201, "{svc}");
    let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_owned();
    // A record deleted by hand comes back.
    let (code, gone) = router.delete(&format!("/apis/networking.k8s.io/v1/ipaddresses/{ip}"), None).await;
    assert_eq!(code, 200, "{gone}");
    wait_for(REPAIRED_WITHIN, || async { ip_addresses(&router).await.contains(&(ip.clone(), NS.to_owned(), "web".to_owned())) }).await;
    // A record naming no Service, and a node port held by none, are reclaimed (an address the
    // Service was not given at random).
    let stray_ip = if ip == "10.100.0.77" { "10.100.0.78" } else { "10.100.0.77" };
    let stray_port = if node_port(&svc) == 30222 { 30223 } else { 30222 };
    let stray = json!({"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress", "metadata": {"name": stray_ip, "labels": {"ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"}},
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": NS, "name": "never-was"}}});
    let (code, created) = router.post("/apis/networking.k8s.io/v1/ipaddresses", &stray).await;
    assert_eq!(code, 201, "{created}");
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    storage.create(format!("{NODE_PORTS_PREFIX}{stray_port}").as_bytes(), serde_json::to_vec(&json!({"namespace": NS, "name": "never-was"})).unwrap()).await.unwrap();
    wait_for(REPAIRED_WITHIN, || async { !ip_addresses(&router).await.iter().any(|(a, _, _)| a == stray_ip) && !node_ports(&etcd).await.contains(&stray_port) }).await;
    // The Service's own records are untouched.
    assert!(ip_addresses(&router).await.contains(&(ip, NS.to_owned(), "web".to_owned())));
    assert_eq!(node_ports(&etcd).await, BTreeSet::from([node_port(&svc)]));
}
