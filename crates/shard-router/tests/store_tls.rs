//! The store reached by holders of its client certificate alone (RFC 0012, "Inside the
//! cluster"): etcd serving HTTPS with `--client-cert-auth`, a router and its shards given
//! upstream's `--etcd-cafile`, `--etcd-certfile` and `--etcd-keyfile`, shardctl with the same;
//! anyone else (no certificate, another CA's, plain HTTP) refused, so no one else can read the
//! objects or write the range map. And the embedded store: a 0600 unix socket and 0600 files by
//! default.

mod common;

use common::{spawn, spawn_in};
use shardplane_identity::pki::Authority;
use shardplane_testkit::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Writes a CA's serving pair for 127.0.0.1 and a client pair, returning their paths.
fn credentials(dir: &Path, ca: &Authority, prefix: &str) -> (PathBuf, PathBuf, PathBuf, PathBuf, PathBuf) {
    let write = |name: &str, text: String| {
        let p = dir.join(format!("{prefix}-{name}"));
        std::fs::write(&p, text).unwrap();
        p
    };
    let (server, server_key) = ca.server_certificate("etcd", &["127.0.0.1"]).unwrap();
    let (client, client_key) = ca.client_certificate("shardplane", None).unwrap();
    (write("ca.crt", ca.certificate().pem()), write("server.crt", server.pem()), write("server.key", server_key.serialize_pem()), write("client.crt", client.pem()), write("client.key", client_key.serialize_pem()))
}

fn shardctl(endpoint: &str, tls: &[&str], args: &[&str]) -> std::process::Output {
    Command::new(workspace_binary("shardctl")).args(["--etcd-endpoints", endpoint]).args(tls).args(args).output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_over_tls_serves_the_holders_of_its_client_certificate_alone() {
    let dir = tempdir::Dir::new();
    let ca = Authority::generate("etcd-ca").unwrap();
    let (ca_file, server, server_key, client, client_key) = credentials(&dir.0, &ca, "etcd");
    shardplane_storage::StoreTls { ca: std::fs::read(&ca_file).unwrap(), cert: std::fs::read(&client).unwrap(), key: std::fs::read(&client_key).unwrap() }.install().unwrap();
    let etcd = Etcd::start_tls(&server, &server_key, &ca_file).await;
    assert!(etcd.endpoint.starts_with("https://127.0.0.1:"));
    let tls_flags = ["--etcd-cafile", ca_file.to_str().unwrap(), "--etcd-certfile", client.to_str().unwrap(), "--etcd-keyfile", client_key.to_str().unwrap()];

    let (pki, kubeconfig, home) = (dir.0.join("pki"), dir.0.join("kubeconfig"), dir.0.join("home"));
    let mut args = vec!["--etcd-endpoints", &etcd.endpoint, "--shards", "2", "--listen", "127.0.0.1:0", "--kubeconfig", kubeconfig.to_str().unwrap(), "--pki-dir", pki.to_str().unwrap()];
    args.extend(tls_flags);
    let _router = spawn(&args);
    let kubectl = |args: &[&str]| Command::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33").env("HOME", &home).arg(format!("--kubeconfig={}", kubeconfig.display())).args(args).output().unwrap();
    wait_for(Duration::from_secs(60), || async { kubectl(&["get", "--raw", "/readyz"]).status.success() }).await;
    let out = kubectl(&["create", "configmap", "over-tls", "--from-literal=k=v"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = kubectl(&["get", "configmap", "over-tls", "-o", "jsonpath={.data.k}"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "v");

    // shardctl with the store's certificate sees the cluster.
    let out = shardctl(&etcd.endpoint, &tls_flags, &["status", "-o", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["shards"].as_array().map(Vec::len), Some(2), "{status}");

    // Without it: no certificate, another CA's certificate, or plain HTTP to the TLS port; none
    // reads the store, so none writes the range map either (a move is refused the same way).
    let out = shardctl(&etcd.endpoint, &[], &["status"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--etcd-cafile"), "{}", String::from_utf8_lossy(&out.stderr));
    let other = Authority::generate("other-ca").unwrap();
    let (_, _, _, other_client, other_key) = credentials(&dir.0, &other, "other");
    let foreign = ["--etcd-cafile", ca_file.to_str().unwrap(), "--etcd-certfile", other_client.to_str().unwrap(), "--etcd-keyfile", other_key.to_str().unwrap()];
    for args in [&["status"][..], &["move", "0x0000000000000000-0x1000000000000000", "--to", "shard-1"]] {
        let out = shardctl(&etcd.endpoint, &foreign, args);
        assert!(!out.status.success(), "{args:?} with another CA's certificate: {}", String::from_utf8_lossy(&out.stdout));
    }
    let plain = etcd.endpoint.replacen("https://", "http://", 1);
    let out = shardctl(&plain, &[], &["status"]);
    assert!(!out.status.success(), "plain HTTP to the TLS store: {}", String::from_utf8_lossy(&out.stdout));
    // The map is as the router published it: epoch 1, the two shards' ranges.
    let out = shardctl(&etcd.endpoint, &tls_flags, &["status", "-o", "json"]);
    let after: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(after["epoch"], status["epoch"]);
}

#[tokio::test]
async fn the_embedded_store_is_private_to_its_user_by_default() {
    let dir = tempdir::Dir::new();
    let started = spawn_in(&dir.0, &["--shards", "1", "--listen", "127.0.0.1:0", "--insecure-plain-http"]);
    let r = TestShard::attach(started.url(), "127.0.0.1:1".parse().unwrap());
    wait_for(Duration::from_secs(30), || async { r.get("/api/v1/namespaces/default").await.0 == 200 }).await;
    let store = dir.0.join(".shardplane/store");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&store), 0o700);
    assert_eq!(mode(&store.join("store.redb")), 0o600);
    assert_eq!(mode(&store.join("etcd.sock")), 0o600, "the shards reach the store over a socket only this user opens");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(store.join("etcd.sock")).unwrap().file_type().is_socket());
}

/// With `shardctl store-roles` (etcd's access control over the certificates' names), the shards
/// write objects and their membership but not the range map: only a router (its coordinator)
/// or a coordinator does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_store_roles_a_shard_cannot_write_the_range_map() {
    let dir = tempdir::Dir::new();
    let ca = Authority::generate("etcd-ca").unwrap();
    let (ca_file, server, server_key, _, _) = credentials(&dir.0, &ca, "etcd");
    let client_pair = |cn: &str| {
        let (c, k) = ca.client_certificate(cn, None).unwrap();
        let (cert, key) = (dir.0.join(format!("{cn}.crt")), dir.0.join(format!("{cn}.key")));
        std::fs::write(&cert, c.pem()).unwrap();
        std::fs::write(&key, k.serialize_pem()).unwrap();
        (cert, key)
    };
    let (root, root_key) = client_pair("root");
    let (router, router_key) = client_pair(shardplane_storage::roles::ROUTER_USER);
    let (shard, shard_key) = client_pair(shardplane_storage::roles::SHARD_USER);
    shardplane_storage::StoreTls { ca: std::fs::read(&ca_file).unwrap(), cert: std::fs::read(&root).unwrap(), key: std::fs::read(&root_key).unwrap() }.install().unwrap();
    let etcd = Etcd::start_tls(&server, &server_key, &ca_file).await;
    let flags = |cert: &Path, key: &Path| vec!["--etcd-cafile".to_owned(), ca_file.display().to_string(), "--etcd-certfile".to_owned(), cert.display().to_string(), "--etcd-keyfile".to_owned(), key.display().to_string()];
    let as_user = |cert: &Path, key: &Path, args: &[&str]| {
        let f = flags(cert, key);
        shardctl(&etcd.endpoint, &f.iter().map(String::as_str).collect::<Vec<_>>(), args)
    };
    for run in 0..2 {
        let out = as_user(&root, &root_key, &["store-roles"]);
        assert!(out.status.success(), "store-roles run {run}: {}", String::from_utf8_lossy(&out.stderr));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("role shardplane-shard: readwrite /registry/*") && said.contains("authentication enabled"), "{said}");
        assert_eq!(run == 1, said.contains("(already there)"), "{said}");
    }

    let (pki, kubeconfig, home) = (dir.0.join("pki"), dir.0.join("kubeconfig"), dir.0.join("home"));
    let mut args: Vec<String> = ["--etcd-endpoints", &etcd.endpoint, "--shards", "2", "--listen", "127.0.0.1:0", "--kubeconfig", kubeconfig.to_str().unwrap(), "--pki-dir", pki.to_str().unwrap()].iter().map(|s| s.to_string()).collect();
    args.extend(flags(&router, &router_key));
    args.extend(["--shard-etcd-certfile".to_owned(), shard.display().to_string(), "--shard-etcd-keyfile".to_owned(), shard_key.display().to_string()]);
    // The shards compact every second: their compaction marker is theirs to write.
    args.extend(["--compaction-interval".to_owned(), "1".to_owned()]);
    let _router = spawn(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let kubectl = |args: &[&str]| Command::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33").env("HOME", &home).arg(format!("--kubeconfig={}", kubeconfig.display())).args(args).output().unwrap();
    wait_for(Duration::from_secs(60), || async { kubectl(&["get", "--raw", "/readyz"]).status.success() }).await;
    let out = kubectl(&["create", "configmap", "under-roles", "--from-literal=k=v"]);
    assert!(out.status.success(), "the shards write objects: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&kubectl(&["get", "configmap", "under-roles", "-o", "jsonpath={.data.k}"]).stdout), "v");

    // The shard's certificate reads the map but cannot change it, through shardctl or directly.
    let status = as_user(&shard, &shard_key, &["status", "-o", "json"]);
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let moved = as_user(&shard, &shard_key, &["split", "0x0000000000000000-0x8000000000000000", "--at", "0x2000000000000000"]);
    assert!(!moved.status.success() && String::from_utf8_lossy(&moved.stderr).contains("permission denied"), "{}", String::from_utf8_lossy(&moved.stderr));
    let tls = etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(std::fs::read(&ca_file).unwrap())).identity(etcd_client::Identity::from_pem(std::fs::read(&shard).unwrap(), std::fs::read(&shard_key).unwrap()));
    let mut direct = etcd_client::Client::connect([etcd.endpoint.clone()], Some(etcd_client::ConnectOptions::new().with_tls(tls))).await.unwrap();
    let err = direct.put(shardplane_storage::range_map::RANGE_MAP_KEY, "{}", None).await.unwrap_err();
    assert!(err.to_string().contains("permission denied"), "{err}");
    // What the shards did write under their role: their membership, and a compaction.
    let members = direct.get(shardplane_storage::members::SHARDS_PREFIX, Some(etcd_client::GetOptions::new().with_prefix())).await.unwrap();
    assert_eq!(members.kvs().len(), 2, "both shards registered");
    wait_for(Duration::from_secs(20), || {
        let mut c = direct.clone();
        async move { c.get("/shardplane/compact_rev_key", None).await.is_ok_and(|r| !r.kvs().is_empty()) }
    })
    .await;
    // The router's certificate may (its coordinator writes the map): a split is accepted.
    let split = as_user(&router, &router_key, &["split", "0x0000000000000000-0x8000000000000000", "--at", "0x2000000000000000"]);
    assert!(split.status.success(), "{}", String::from_utf8_lossy(&split.stderr));
    let after = as_user(&router, &router_key, &["status", "-o", "json"]);
    let after: serde_json::Value = serde_json::from_slice(&after.stdout).unwrap();
    assert_ne!(after["shards"], status["shards"], "the split changed the map");
}
