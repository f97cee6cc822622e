//! No way into a shard but through a router (RFC 0012, "Inside the cluster"): the shards a
//! TLS router starts serve HTTPS to the holder of the front proxy's client certificate alone,
//! and a standalone shard-server names its own clients.

mod common;

use common::spawn;
use shardplane_identity::pki::{Authority, FRONT_PROXY_CA, FRONT_PROXY_CLIENT};
use shardplane_testkit::*;
use std::path::Path;
use std::time::Duration;

/// A client trusting the cluster CA in `pki` and presenting `cert` and `key`.
fn client_with(pki: &Path, cert: &Path, key: &Path) -> reqwest::Client {
    let tls = shardplane_identity::tls::client_config(&pki.join("ca.crt"), cert, key).unwrap();
    shardplane_http::outbound::client_builder().tls_backend_preconfigured(tls).build().unwrap()
}

/// A client trusting the cluster CA, with no certificate of its own.
fn anonymous(pki: &Path) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap();
    shardplane_http::outbound::client_builder().add_root_certificate(ca).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_behind_a_tls_router_serves_the_router_alone() {
    let etcd = Etcd::start().await;
    let dir = tempdir::Dir::new();
    let pki = dir.0.join("pki");
    let kubeconfig = dir.0.join("kubeconfig");
    let started = spawn(&["--etcd-endpoints", &etcd.endpoint, "--shards", "2", "--listen", "127.0.0.1:0", "--kubeconfig", kubeconfig.to_str().unwrap(), "--pki-dir", pki.to_str().unwrap()]);
    assert_eq!(started.shards.len(), 2);
    let admin = client_with(&pki, &pki.join("admin.crt"), &pki.join("admin.key"));
    let router = format!("https://{}", started.addr);
    wait_for(Duration::from_secs(30), || async { admin.get(format!("{router}/readyz")).send().await.is_ok_and(|r| r.status().is_success()) }).await;
    // Through the router, as the admin: served by the shards.
    let r = admin.get(format!("{router}/api/v1/namespaces/default")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);

    let router_itself = client_with(&pki, &pki.join("front-proxy-client.crt"), &pki.join("front-proxy-client.key"));
    for (_, url) in &started.shards {
        assert!(url.starts_with("https://127.0.0.1:"), "{url}");
        let plain = url.replacen("https://", "http://", 1);
        // Plain HTTP to a shard gets no answer.
        let r = shardplane_http::outbound::client_builder().timeout(Duration::from_secs(5)).build().unwrap().get(format!("{plain}/api/v1/secrets")).send().await;
        assert!(r.is_err() || !r.unwrap().status().is_success(), "a shard answered plain HTTP");
        // HTTPS without a certificate, or with the admin's (the cluster CA's, not the front
        // proxy's): refused in the handshake, so nothing is read, not even health.
        for (who, client) in [("no certificate", anonymous(&pki)), ("the admin's certificate", admin.clone())] {
            for path in ["/api/v1/secrets", "/healthz"] {
                let r = client.get(format!("{url}{path}")).send().await;
                assert!(r.is_err(), "{who}: {path} was answered: {:?}", r.map(|r| r.status()));
            }
        }
        // The router's own certificate: served (what a router asks a shard first).
        let r = router_itself.get(format!("{url}/shardplane/v1/shard")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{url}");
    }

    // A certificate the front proxy's CA signed for a name that is not allowed: 401, as
    // upstream's request-header authenticator answers it.
    let front_proxy = Authority::from_key(FRONT_PROXY_CA, &std::fs::read_to_string(pki.join("front-proxy-ca.key")).unwrap()).unwrap();
    let (cert, key) = front_proxy.client_certificate("not-the-router", None).unwrap();
    let (cert_file, key_file) = (dir.0.join("other.crt"), dir.0.join("other.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let other = client_with(&pki, &cert_file, &key_file);
    let r = other.get(format!("{}/api/v1/secrets", started.shards[0].1)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let status: serde_json::Value = r.json().await.unwrap();
    assert_eq!((status["reason"].as_str(), status["message"].as_str()), (Some("Unauthorized"), Some("Unauthorized")));
    // The same CA's certificate for the allowed name is the router.
    let (cert, key) = front_proxy.client_certificate(FRONT_PROXY_CLIENT, None).unwrap();
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    assert_eq!(client_with(&pki, &cert_file, &key_file).get(format!("{}/shardplane/v1/shard", started.shards[0].1)).send().await.unwrap().status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_shard_server_names_its_own_clients() {
    let etcd = Etcd::start().await;
    let dir = tempdir::Dir::new();
    let pki = shardplane_identity::pki::Pki::ensure(&dir.0.join("pki"), &["127.0.0.1"]).unwrap();
    let tokens = dir.0.join("tokens.csv");
    std::fs::write(&tokens, "t0ken,alice,u-1\n").unwrap();
    let path = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
    let args = ["--tls-cert-file", &path(pki.serving_cert()), "--tls-private-key-file", &path(pki.serving_key()), "--client-ca-file", &path(pki.ca_cert()), "--token-auth-file", tokens.to_str().unwrap()];
    let mut command = vec!["shard", "--standalone", "--etcd-endpoints", &etcd.endpoint, "--listen", "127.0.0.1:0"];
    command.extend(args);
    let started = spawn(&command);
    let url = format!("https://{}", started.addr);
    let nobody = anonymous(&pki.dir);
    wait_for(Duration::from_secs(30), || async { nobody.get(format!("{url}/readyz")).send().await.is_ok_and(|r| r.status().is_success()) }).await;

    // Anyone reads health and version; nothing else without a credential.
    for p in ["/healthz", "/livez", "/version"] {
        assert_eq!(nobody.get(format!("{url}{p}")).send().await.unwrap().status().as_u16(), 200, "{p}");
    }
    let r = nobody.get(format!("{url}/api/v1/namespaces/default/secrets")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let status: serde_json::Value = r.json().await.unwrap();
    assert_eq!(status["message"], "secrets is forbidden: User \"system:anonymous\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\"");
    // A token from the file, and a client certificate the client CA signed: served.
    assert_eq!(nobody.get(format!("{url}/api/v1/namespaces/default/secrets")).bearer_auth("t0ken").send().await.unwrap().status().as_u16(), 200);
    let admin = client_with(&pki.dir, &pki.admin_cert(), &pki.admin_key());
    assert_eq!(admin.get(format!("{url}/api/v1/namespaces/default/secrets")).send().await.unwrap().status().as_u16(), 200);
    // A wrong token: upstream's 401, never anonymous.
    let r = nobody.get(format!("{url}/healthz")).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    // Only a router may name a user to a shard: a client's X-Remote-User is not taken, nor its
    // range epoch (a standalone shard ignores epochs, so a stale one is no refusal either).
    let r = nobody.get(format!("{url}/api/v1/namespaces")).header("X-Remote-User", "system:admin").header("X-Remote-Group", "system:masters").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 403, "X-Remote-User from a client named a user");
    // Plain HTTP without the flag that says it is insecure: the shard does not start.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shard-router")).args(["shard", "--standalone", "--etcd-endpoints", &etcd.endpoint, "--listen", "127.0.0.1:0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--insecure-plain-http"), "{}", String::from_utf8_lossy(&out.stderr));
}
