//! Realistic objects and a bulk loader that writes them straight to etcd in shardplane's layout
//! (as a shard would store them), so loading 500,000 objects takes seconds, not the API path.

use serde_json::{Value, json};
use shardplane_apimachinery::encode::object_bytes;
use shardplane_apimachinery::resources::{ResourceInfo, builtin_resources, find};
use shardplane_keyspace::{ObjectKey, etcd_layout};

/// The kinds the benchmarks store: the pod-heavy mix's three (`ALL`), and the small objects a
/// node-heavy cluster churns (`SMALL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Pod,
    ConfigMap,
    Lease,
    Event,
    EndpointSlice,
}

impl Kind {
    /// The realistic mix (pod-heavy): shares from `count_in`.
    pub const ALL: [Kind; 3] = [Kind::Pod, Kind::ConfigMap, Kind::Lease];
    /// The small-object mix, a third each: node and controller Leases, Events, EndpointSlices.
    pub const SMALL: [Kind; 3] = [Kind::Lease, Kind::Event, Kind::EndpointSlice];

    /// (group, version, plural).
    pub fn resource(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Kind::Pod => ("", "v1", "pods"),
            Kind::ConfigMap => ("", "v1", "configmaps"),
            Kind::Lease => ("coordination.k8s.io", "v1", "leases"),
            Kind::Event => ("", "v1", "events"),
            Kind::EndpointSlice => ("discovery.k8s.io", "v1", "endpointslices"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Pod => "Pod",
            Kind::ConfigMap => "ConfigMap",
            Kind::Lease => "Lease",
            Kind::Event => "Event",
            Kind::EndpointSlice => "EndpointSlice",
        }
    }

    /// The share of the mix: 6 pods, 3 ConfigMaps, 1 Lease in every 10 objects (a cluster's
    /// pods dominate; every node and controller holds a Lease).
    pub fn count_in(self, total: usize) -> usize {
        match self {
            Kind::Pod => total * 6 / 10,
            Kind::ConfigMap => total * 3 / 10,
            Kind::Lease => total - total * 6 / 10 - total * 3 / 10,
            Kind::Event | Kind::EndpointSlice => 0,
        }
    }

    /// The ranges of object indices for `total` objects of `mix` (`ALL` by `count_in`; any
    /// other mix in equal shares).
    pub fn counts(mix: &[Kind], total: usize) -> Vec<(Kind, std::ops::Range<usize>)> {
        if mix == Kind::ALL {
            return mix.iter().map(|&k| (k, 0..k.count_in(total))).collect();
        }
        let each = total / mix.len();
        mix.iter().enumerate().map(|(i, &k)| (k, 0..if i == 0 { total - each * (mix.len() - 1) } else { each })).collect()
    }

    pub fn info(self) -> ResourceInfo {
        let (g, v, p) = self.resource();
        find(&builtin_resources(), g, v, p).expect("served kind").clone()
    }
}

/// Namespaces objects are spread over.
pub const NAMESPACES: usize = 50;

/// Object `i` of `kind` as its `round`-th change writes it (round 0: as created), as stored:
/// server fields set, ~3.5 KiB for pods, ~1 KiB for ConfigMaps and EndpointSlices, ~0.4 KiB for
/// Leases, ~0.7 KiB for Events, labels varied by `i` (`app`, on every kind, is what watch
/// filters select on). Labels never change, so a filtered watch sees every change of an object
/// it matches as MODIFIED.
pub fn object_at(kind: Kind, i: usize, round: u32) -> (String, Vec<u8>) {
    let ns = format!("ns-{:02}", i % NAMESPACES);
    let app = format!("app-{}", i % 97);
    let mut obj = match kind {
        Kind::Pod => pod(&ns, i, &app),
        Kind::ConfigMap => json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i:07}"), "namespace": ns, "labels": {"app": app, "tier": TIERS[i % 3]}},
            "data": {"config.yaml": format!("# settings {i}\n{}", "key: value-0123456789abcdef\n".repeat(30))},
        }),
        Kind::Lease => json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": format!("lease-{i:07}"), "namespace": ns, "labels": {"app": app}},
            "spec": {"holderIdentity": format!("controller-{}-{:08x}", i % 13, i), "leaseDurationSeconds": 15, "acquireTime": "2026-11-30T00:00:00.000000Z", "renewTime": "2026-11-30T00:00:10.000000Z", "leaseTransitions": i % 5},
        }),
        Kind::Event => json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("pod-{i:07}.{:016x}", i * 2654435761), "namespace": ns, "labels": {"app": app}},
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": format!("pod-{i:07}"), "uid": format!("6f1c2d3e-0000-4000-8000-{i:012x}"), "apiVersion": "v1", "resourceVersion": format!("{}", 1000 + i), "fieldPath": "spec.containers{main}"},
            "reason": "Pulled", "message": format!("Container image \"registry.example.com/{app}:1.{}.{}\" already present on machine", i % 10, i % 7),
            "source": {"component": "kubelet", "host": format!("node-{:04}", i % 500)},
            "firstTimestamp": "2026-11-29T10:00:02Z", "lastTimestamp": "2026-11-29T10:00:02Z", "count": 1, "type": "Normal",
            "eventTime": null, "reportingComponent": "kubelet", "reportingInstance": format!("node-{:04}", i % 500),
        }),
        Kind::EndpointSlice => {
            let endpoints: Vec<Value> = (0..3).map(|e| json!({
                "addresses": [format!("10.244.{}.{}", (i + e) / 250 % 250, (i + e) % 250)],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "targetRef": {"kind": "Pod", "namespace": ns, "name": format!("{app}-{:010x}-{e}", i / 3), "uid": format!("6f1c2d3e-0000-4000-8000-{:012x}", i * 3 + e)},
                "nodeName": format!("node-{:04}", (i + e) % 500),
            })).collect();
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": format!("svc-{i:07}-{:05x}", i % 0xfffff), "namespace": ns, "labels": {"app": app, "kubernetes.io/service-name": format!("{app}-{:04}", i % OWNERS), "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": format!("{app}-{:04}", i % OWNERS), "uid": owner_uid(Owner::Service, i % OWNERS), "controller": true, "blockOwnerDeletion": true}]},
                "addressType": "IPv4", "endpoints": endpoints,
                "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
            })
        }
    };
    if round > 0 {
        obj["metadata"]["annotations"]["bench.shardplane.io/round"] = json!(round.to_string());
    }
    shardplane_apimachinery::strategy::prepare_for_create(&kind.info(), &mut obj);
    let name = obj["metadata"]["name"].as_str().expect("name").to_owned();
    let (group, _, plural) = kind.resource();
    let key = etcd_layout::object_key(&ObjectKey::new(group, plural, &ns, &name));
    (key, object_bytes(&obj))
}

const TIERS: [&str; 3] = ["web", "db", "cache"];
const TEAMS: [&str; 4] = ["payments", "search", "infra", "ml"];
const CONDITIONS: [&str; 5] = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"];

fn pod(ns: &str, i: usize, app: &str) -> Value {
    let conditions: Vec<Value> = CONDITIONS.iter().map(|t| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-29T10:00:05Z"})).collect();
    let owner = i % OWNERS;
    let rs = format!("{app}-{owner:010x}");
    let env: Vec<Value> = (0..6).map(|e| json!({"name": format!("SETTING_{e}"), "value": format!("value-{i}-{e}")})).collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{rs}-{:05x}", i % 0xfffff), "namespace": ns,
            "labels": {"app": app, "pod-template-hash": format!("{owner:010x}"), "version": format!("v{}", i % 4), "team": TEAMS[i % 4]},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-29T10:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": owner_uid(Owner::ReplicaSet, owner), "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "containers": [{
                "name": "main", "image": format!("registry.example.com/{app}:1.{}.{}", i % 10, i % 7),
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "env": env,
                "resources": {"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}, {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "initialDelaySeconds": 5, "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 5, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
            }],
            "volumes": [
                {"name": "config", "configMap": {"name": format!("cm-{:07}", i % 1000), "defaultMode": 420}},
                {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}, {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}},
            ],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "nodeName": format!("node-{:04}", i % 500),
            "securityContext": {}, "schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
        "status": {
            "phase": "Running", "hostIP": format!("10.0.{}.{}", (i / 250) % 250, i % 250), "podIP": format!("10.244.{}.{}", (i / 250) % 250, i % 250),
            "podIPs": [{"ip": format!("10.244.{}.{}", (i / 250) % 250, i % 250)}], "startTime": "2026-11-29T10:00:00Z", "qosClass": "Burstable",
            "conditions": conditions,
            "containerStatuses": [{"name": "main", "ready": true, "restartCount": i % 3, "started": true, "image": format!("registry.example.com/{app}:1.{}.{}", i % 10, i % 7),
                "imageID": format!("registry.example.com/{app}@sha256:{:064x}", i), "containerID": format!("containerd://{:064x}", i * 7919),
                "state": {"running": {"startedAt": "2026-11-29T10:00:03Z"}}, "lastState": {}}],
        },
    })
}

/// Distinct owners of the pods (ReplicaSets) and of the EndpointSlices (Services): object `i`
/// belongs to owner `i % OWNERS`, which is in its namespace and of its app (`i % 50` and
/// `i % 97` both follow from `i % 4850`), so every owner a loaded object names exists — as in a
/// live cluster, where the garbage collector (RFC 0014) would otherwise delete the object.
pub const OWNERS: usize = NAMESPACES * 97;

/// The kinds of owner the loaded objects name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    ReplicaSet,
    Service,
}

fn owner_uid(kind: Owner, j: usize) -> String {
    match kind {
        Owner::ReplicaSet => format!("6f1c2d3e-0000-4000-8000-{j:012x}"),
        Owner::Service => format!("7a2b3c4d-0000-4000-8000-{j:012x}"),
    }
}

/// Owner `j` of `kind`, as stored: (etcd key, bytes).
pub fn owner_at(kind: Owner, j: usize) -> (String, Vec<u8>) {
    let ns = format!("ns-{:02}", j % NAMESPACES);
    let app = format!("app-{}", j % 97);
    let (group, plural, mut obj) = match kind {
        Owner::ReplicaSet => ("apps", "replicasets", json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": format!("{app}-{j:010x}"), "namespace": ns, "uid": owner_uid(kind, j), "labels": {"app": app, "pod-template-hash": format!("{j:010x}")}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app, "pod-template-hash": format!("{j:010x}")}},
                "template": {"metadata": {"labels": {"app": app, "pod-template-hash": format!("{j:010x}")}}, "spec": {"containers": [{"name": "main", "image": format!("registry.example.com/{app}:1.0.0")}]}}},
        })),
        Owner::Service => ("", "services", json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("{app}-{j:04}"), "namespace": ns, "uid": owner_uid(kind, j), "labels": {"app": app}},
            "spec": {"selector": {"app": app}, "ports": [{"name": "http", "protocol": "TCP", "port": 8080, "targetPort": 8080}], "clusterIP": format!("10.96.{}.{}", j / 250, j % 250), "type": "ClusterIP"},
        })),
    };
    let info = find(&builtin_resources(), group, "v1", plural).expect("served kind").clone();
    let uid = obj["metadata"]["uid"].clone();
    shardplane_apimachinery::strategy::prepare_for_create(&info, &mut obj);
    // The uid the dependents name, not a fresh one.
    obj["metadata"]["uid"] = uid;
    let name = obj["metadata"]["name"].as_str().expect("name").to_owned();
    (etcd_layout::object_key(&ObjectKey::new(group, plural, &ns, &name)), object_bytes(&obj))
}

/// The owners the objects `kinds` name (ReplicaSets for Pods, Services for EndpointSlices),
/// each once: at most [`OWNERS`] of each.
fn owners_of(kinds: &[(Kind, std::ops::Range<usize>)]) -> Vec<(Owner, usize)> {
    let mut out = Vec::new();
    for (owner, of) in [(Owner::ReplicaSet, Kind::Pod), (Owner::Service, Kind::EndpointSlice)] {
        let most = kinds.iter().filter(|(k, _)| *k == of).map(|(_, r)| r.end).max().unwrap_or(0);
        out.extend((0..most.min(OWNERS)).map(|j| (owner, j)));
    }
    out
}

/// Writes every object of `kinds` (the first `count(kind)` of each) to etcd in batched
/// transactions, after the owners they name (at most [`OWNERS`] of each owner kind, not counted
/// in the result), `progress` called with the number of objects each batch wrote. Returns
/// (objects, total JSON bytes) per kind.
pub async fn load(endpoint: &str, kinds: &[(Kind, std::ops::Range<usize>)], progress: impl Fn(u64) + Send + Sync + 'static) -> std::collections::BTreeMap<Kind, (usize, u64)> {
    // Their owners first, so that no object is ever seen without its owner.
    let owners = owners_of(kinds);
    let mut client = etcd_client::Client::connect([endpoint], None).await.expect("etcd");
    for chunk in owners.chunks(64) {
        let ops: Vec<etcd_client::TxnOp> = chunk.iter().map(|&(kind, j)| {
            let (key, value) = owner_at(kind, j);
            etcd_client::TxnOp::put(key, value, None)
        }).collect();
        client.txn(etcd_client::Txn::new().and_then(ops)).await.expect("etcd txn");
    }
    put_round(endpoint, kinds, 0, progress).await
}

/// `load` of the objects as their `round`-th change writes them (`object_at`).
pub async fn put_round(endpoint: &str, kinds: &[(Kind, std::ops::Range<usize>)], round: u32, progress: impl Fn(u64) + Send + Sync + 'static) -> std::collections::BTreeMap<Kind, (usize, u64)> {
    use etcd_client::{Client, Txn, TxnOp};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    const BATCH: usize = 64;
    const WORKERS: usize = 8;
    let progress = Arc::new(progress);
    let mut sizes = std::collections::BTreeMap::new();
    for (kind, range) in kinds {
        let items: Arc<Vec<usize>> = Arc::new(range.clone().collect());
        let bytes = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for w in 0..WORKERS {
            let (items, bytes, progress, endpoint, kind) = (items.clone(), bytes.clone(), progress.clone(), endpoint.to_owned(), *kind);
            tasks.push(tokio::spawn(async move {
                let mut client = Client::connect([endpoint], None).await.expect("etcd");
                for chunk in items.chunks(BATCH).skip(w).step_by(WORKERS) {
                    let ops: Vec<TxnOp> = chunk
                        .iter()
                        .map(|&i| {
                            let (key, value) = object_at(kind, i, round);
                            bytes.fetch_add(value.len() as u64, Ordering::Relaxed);
                            TxnOp::put(key, value, None)
                        })
                        .collect();
                    client.txn(Txn::new().and_then(ops)).await.expect("etcd txn");
                    progress(chunk.len() as u64);
                }
            }));
        }
        for t in tasks {
            t.await.expect("loader");
        }
        let e = sizes.entry(*kind).or_insert((0, 0));
        e.0 += range.len();
        e.1 += bytes.load(Ordering::Relaxed);
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_as_documented() {
        let len = |k, i| object_at(k, i, 0).1.len();
        assert!((3000..4200).contains(&len(Kind::Pod, 12345)), "{}", len(Kind::Pod, 12345));
        assert!((900..1300).contains(&len(Kind::ConfigMap, 12345)), "{}", len(Kind::ConfigMap, 12345));
        assert!((300..600).contains(&len(Kind::Lease, 12345)), "{}", len(Kind::Lease, 12345));
        assert!((500..900).contains(&len(Kind::Event, 12345)), "{}", len(Kind::Event, 12345));
        assert!((900..1400).contains(&len(Kind::EndpointSlice, 12345)), "{}", len(Kind::EndpointSlice, 12345));
        assert_eq!(Kind::ALL.iter().map(|k| k.count_in(1001)).sum::<usize>(), 1001);
        for mix in [&Kind::ALL[..], &Kind::SMALL[..]] {
            assert_eq!(Kind::counts(mix, 1001).iter().map(|(_, r)| r.len()).sum::<usize>(), 1001);
        }
        // A change keeps the labels (filters select on them) and changes the bytes.
        let (a, b) = (object_at(Kind::Event, 7, 0).1, object_at(Kind::Event, 7, 3).1);
        assert_ne!(a, b);
        let labels = |v: &[u8]| serde_json::from_slice::<Value>(v).unwrap()["metadata"]["labels"].clone();
        assert_eq!(labels(&a), labels(&b));
    }

    #[test]
    fn every_owner_an_object_names_is_loaded_with_it() {
        let meta = |v: &[u8]| serde_json::from_slice::<Value>(v).unwrap()["metadata"].clone();
        for (kind, owner) in [(Kind::Pod, Owner::ReplicaSet), (Kind::EndpointSlice, Owner::Service)] {
            let loaded = owners_of(&[(kind, 0..20_000)]);
            assert_eq!(loaded.iter().filter(|(o, _)| *o == owner).count(), OWNERS);
            for i in [0, 1, 4849, 4850, 12_345, 19_999] {
                let m = meta(&object_at(kind, i, 0).1);
                let r = &m["ownerReferences"][0];
                let o = meta(&owner_at(owner, i % OWNERS).1);
                assert_eq!((&r["name"], &r["uid"], &m["namespace"]), (&o["name"], &o["uid"], &o["namespace"]), "{kind:?} {i}");
            }
        }
        // Fewer objects than owners: only the owners they name.
        assert_eq!(owners_of(&[(Kind::Pod, 0..10), (Kind::Lease, 0..10)]).len(), 10);
    }
}
