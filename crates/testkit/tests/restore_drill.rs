//! The restore drill (issue #23, RFC 0016): a three-member etcd cluster under two shards and a
//! router; a snapshot is saved (`Storage::save_snapshot`, what `shardctl store snapshot` runs);
//! more writes follow (creates, updates, a delete); the whole cluster is restored from the
//! snapshot as Kubernetes' guidance says (`etcdutl snapshot restore --bump-revision
//! --mark-compacted`). Then every client type must converge on the restored state, with no
//! object newer than the snapshot and no error that does not end:
//!
//! - kube-rs's `watcher` with a reflector store (it relists on 410 Gone);
//! - client-go's shared informer (a Go program built against Debian's client-go);
//! - the PyPI `kubernetes` client's list-then-watch loop (tests/python/list_watch_store.py: it
//!   lists again on 410, as the client's watch documentation asks);
//! - `kubectl get -w`, whose watch ends (it does not relist) and whose next `get` shows the
//!   restored state;
//! - a watch resumed from a resourceVersion handed out before the restore gets 410 at once,
//!   not events and not a wait for a revision that will come with other changes;
//! - a write after the restore gets a resourceVersion above every one handed out before.

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use serde_json::json;
use shardplane_keyspace::etcd_layout::{parse_object_key, prefix_end, resource_prefix};
use shardplane_keyspace::RangeSet;
use shardplane_storage::Storage;
use shardplane_testkit::*;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const NS: &str = "drill";
/// What Kubernetes' restore guidance suggests: far more revisions than a cluster makes between
/// a snapshot and its restore.
const BUMP: u64 = 1_000_000_000;

/// The ConfigMaps of the namespace as etcd holds them: name → resourceVersion.
async fn stored(storage: &Storage) -> BTreeMap<String, String> {
    let prefix = resource_prefix("", "configmaps");
    let (kvs, _) = storage.list_range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0).await.unwrap();
    kvs.iter().filter_map(|kv| parse_object_key("", "configmaps", &kv.key).filter(|(_, ns, _)| *ns == NS).map(|(_, _, name)| (name.to_owned(), kv.mod_revision.to_string()))).collect()
}

/// The same through the router (LIST).
async fn listed(router: &TestShard) -> (BTreeMap<String, String>, u64) {
    let (code, list) = router.get(&format!("/api/v1/namespaces/{NS}/configmaps")).await;
    if code != 200 {
        return (BTreeMap::new(), 0);
    }
    let items = list["items"].as_array().unwrap().iter().map(|i| (i["metadata"]["name"].as_str().unwrap().to_owned(), i["metadata"]["resourceVersion"].as_str().unwrap().to_owned())).collect();
    (items, list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap())
}

/// A client run as a process that prints its store as JSON lines (`{"synced", "objects"}`):
/// client-go's informer or the Python client's list-then-watch; its latest printed store.
struct StoreProcess {
    child: std::process::Child,
    latest: Arc<Mutex<Option<(bool, BTreeMap<String, String>)>>>,
}

impl StoreProcess {
    fn informer(router: &str) -> Self {
        let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clientgo_informer/main.go");
        let bin = build_go_program(&source, &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("clientgo_informer"));
        Self::start(std::process::Command::new(bin).args([router, NS]))
    }

    fn python(router: &str) -> Self {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/list_watch_store.py");
        Self::start(std::process::Command::new("python3").arg(script).args([router, NS]).env("NO_PROXY", "127.0.0.1"))
    }

    fn start(command: &mut std::process::Command) -> Self {
        let mut child = command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().unwrap();
        let latest = Arc::new(Mutex::new(None));
        let out = child.stdout.take().unwrap();
        let into = latest.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                let objects = v["objects"].as_object().unwrap().iter().map(|(k, rv)| (k.clone(), rv.as_str().unwrap().to_owned())).collect();
                *into.lock().unwrap() = Some((v["synced"].as_bool().unwrap(), objects));
            }
        });
        Self { child, latest }
    }

    fn store(&self) -> Option<BTreeMap<String, String>> {
        self.latest.lock().unwrap().clone().filter(|(synced, _)| *synced).map(|(_, o)| o)
    }
}

impl Drop for StoreProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three etcd members on tmpfs, two shards on halves and a router over them, with the
/// namespace made.
async fn drill_cluster() -> (EtcdCluster, Storage, Vec<TestShard>, TestShard) {
    let cluster = EtcdCluster::start(3, Path::new("/dev/shm"), &[]).await;
    let storage = Storage::connect(&cluster.endpoints).await.unwrap();
    let mut shards = Vec::new();
    for r in shardplane_keyspace::HashRange::split_even(2) {
        shards.push(TestShard::start_shard(test_config_on(&cluster.endpoints, RangeSet::from_disjoint(vec![r]).unwrap())).await);
    }
    let router = TestShard::start_router(&cluster.endpoints, shards.iter().map(|s| s.url.clone()).collect(), Duration::from_millis(500)).await;
    wait_for(Duration::from_secs(30), || async { router.get("/api/v1/namespaces/default").await.0 == 200 }).await;
    router.namespace(NS).await;
    (cluster, storage, shards, router)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_converges_on_the_state_a_snapshot_restores() {
    let (mut cluster, storage, _shards, router) = drill_cluster().await;
    for i in 0..10 {
        let (code, body) = router.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &configmap(&format!("kept-{i}"), json!({}))).await;
        assert_eq!(code, 201, "{body}");
    }

    // The clients, each following the namespace's ConfigMaps.
    let kube_client = kube::Client::try_from(kube::Config::new(router.url.parse().unwrap())).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(kube_client, NS);
    let (reader, writer) = reflector::store();
    let kube_errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let errors = kube_errors.clone();
    let kube_task = tokio::spawn(async move {
        let stream = reflector::reflector(writer, watcher::watcher(api, watcher::Config::default())).applied_objects();
        tokio::pin!(stream);
        loop {
            match stream.try_next().await {
                Ok(Some(_)) => {}
                Ok(None) => return,
                // The watcher recovers by itself (it relists); record what it went through.
                Err(e) => errors.lock().unwrap().push(e.to_string()),
            }
        }
    });
    let kube_store = || reader.state().iter().map(|cm| (cm.metadata.name.clone().unwrap(), cm.metadata.resource_version.clone().unwrap())).collect::<BTreeMap<_, _>>();
    let informer = StoreProcess::informer(&router.url);
    let python = StoreProcess::python(&router.url);
    let kubectl = Kubectl { bin: kubectl_path("1.33"), server: router.url.clone(), home: Default::default() };
    let mut kubectl_watch = kubectl.command(&["get", "configmaps", "-n", NS, "-w", "-o", "name"]).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();

    let before = stored(&storage).await;
    assert_eq!(before.len(), 10);
    wait_for(Duration::from_secs(60), || async { kube_store() == before && informer.store().as_ref() == Some(&before) && python.store().as_ref() == Some(&before) }).await;

    // The snapshot, then changes it will not have.
    let dir = PathBuf::from("/dev/shm").join(format!("shardplane-drill-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let snapshot = dir.join("snapshot.db");
    let (bytes, snapshot_rev) = storage.save_snapshot(&snapshot).await.unwrap();
    assert!(bytes > 0 && snapshot_rev > 0);
    for i in 0..5 {
        assert_eq!(router.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &configmap(&format!("lost-{i}"), json!({}))).await.0, 201);
    }
    for i in 0..3 {
        let mut cm = configmap(&format!("kept-{i}"), json!({}));
        cm["data"]["k"] = json!("after the snapshot");
        assert_eq!(router.put(&format!("/api/v1/namespaces/{NS}/configmaps/kept-{i}"), &cm).await.0, 200);
    }
    assert_eq!(router.delete(&format!("/api/v1/namespaces/{NS}/configmaps/kept-9"), None).await.0, 200);
    let newest = stored(&storage).await;
    wait_for(Duration::from_secs(60), || async { kube_store() == newest && informer.store().as_ref() == Some(&newest) && python.store().as_ref() == Some(&newest) && listed(&router).await.0 == newest }).await;
    let handed_out = listed(&router).await.1;

    // The restore.
    cluster.restore(&snapshot, BUMP).await;
    let restored = stored(&storage).await;
    assert_eq!(restored, before, "etcd holds the snapshot's state");
    eprintln!("restore drill: snapshot at {snapshot_rev}, {handed_out} handed out before, restored store at {}", storage.current_revision().await.unwrap());

    // The router serves the restored state, at a revision above every one handed out before.
    wait_for(Duration::from_secs(60), || async { listed(&router).await.0 == restored }).await;
    let (_, after_rv) = listed(&router).await;
    assert!(after_rv > handed_out, "a LIST after the restore is at {after_rv}, not above {handed_out}");
    // A watch from before the restore is told to relist at once.
    let resp = client().get(format!("{}/api/v1/namespaces/{NS}/configmaps?watch=1&resourceVersion={handed_out}", router.url)).send().await.unwrap();
    let gone = if resp.status() == 410 {
        true
    } else {
        let mut reader = WatchReader::from_response(resp);
        // Nothing within 10 s (a wait for a revision to come) counts as not told.
        let first = reader.next(Duration::from_secs(10)).await;
        first.is_some_and(|e| e["type"] == "ERROR" && e["object"]["code"] == 410)
    };
    assert!(gone, "a watch from RV {handed_out} (before the restore) was not answered 410");

    // Every client converges on it.
    wait_for(Duration::from_secs(90), || async { kube_store() == restored && informer.store().as_ref() == Some(&restored) && python.store().as_ref() == Some(&restored) }).await;
    eprintln!("restore drill: kube-rs watcher went through {:?}", kube_errors.lock().unwrap());
    // kubectl get -w ends (it does not relist); a new get shows the restored state.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = kubectl_watch.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "kubectl get -w did not end after the restore");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut kubectl_watch.stderr.take().unwrap(), &mut err).unwrap();
    eprintln!("restore drill: kubectl get -w ended ({status}): {}", err.trim());
    let names: Vec<String> = kubectl.ok(&["get", "configmaps", "-n", NS, "-o", "name"], None).lines().map(|l| l.trim_start_matches("configmap/").to_owned()).collect();
    assert_eq!(names, restored.keys().cloned().collect::<Vec<_>>());

    // A write after the restore is above every RV handed out before it.
    let (code, created) = router.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &configmap("after-restore", json!({}))).await;
    assert_eq!(code, 201, "{created}");
    let rv: u64 = created["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert!(rv > handed_out, "the first write after the restore got RV {rv}, not above {handed_out}");
    let mut with_it = restored.clone();
    with_it.insert("after-restore".into(), rv.to_string());
    wait_for(Duration::from_secs(30), || async { kube_store() == with_it && informer.store().as_ref() == Some(&with_it) && python.store().as_ref() == Some(&with_it) }).await;
    kube_task.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A restore without `--bump-revision` (against the guidance) takes the store's revision
/// below what the caches had followed; etcd would let their watches wait for those revisions
/// and the caches would keep serving objects the store no longer has. The followers see the
/// revision went back and list again (RFC 0016): the router serves the restored state, and
/// writes after it are served. (ResourceVersions handed out before are then given again to
/// other changes, which is why the guidance bumps the revision: RFC 0016.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_without_a_revision_bump_never_serves_what_the_store_lost() {
    let (mut cluster, storage, _shards, router) = drill_cluster().await;
    for i in 0..5 {
        assert_eq!(router.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &configmap(&format!("kept-{i}"), json!({}))).await.0, 201);
    }
    let dir = PathBuf::from("/dev/shm").join(format!("shardplane-drill-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let snapshot = dir.join("snapshot.db");
    storage.save_snapshot(&snapshot).await.unwrap();
    let before = stored(&storage).await;
    for i in 0..20 {
        assert_eq!(router.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &configmap(&format!("lost-{i}"), json!({}))).await.0, 201);
    }
    wait_for(Duration::from_secs(30), || async { listed(&router).await.0.len() == 25 }).await;

    cluster.restore(&snapshot, 0).await;
    assert_eq!(stored(&storage).await, before);
    wait_for(Duration::from_secs(60), || async { listed(&router).await.0 == before }).await;
    // Writes go on, and are served.
    let (code, created) = router.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &configmap("after-restore", json!({}))).await;
    assert_eq!(code, 201, "{created}");
    wait_for(Duration::from_secs(30), || async { listed(&router).await.0.contains_key("after-restore") }).await;
    assert_eq!(listed(&router).await.0, stored(&storage).await);
    let _ = std::fs::remove_dir_all(&dir);
}
