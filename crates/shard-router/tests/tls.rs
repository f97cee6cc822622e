//! `shard-router --pki-dir` as a user runs it (RFC 0012): it makes the cluster PKI, serves
//! HTTPS with it (HTTP/2 or HTTP/1.1, as ALPN chooses), writes a private kubeconfig that
//! kubectl uses as the admin, and names each caller by the client certificate it verified or
//! the token-file token it sent.

mod common;

use common::spawn;
use shardplane_testkit::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

fn kubectl(kubeconfig: &std::path::Path, home: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33").env("HOME", home).arg(format!("--kubeconfig={}", kubeconfig.display())).args(args).output().unwrap()
}

#[tokio::test]
async fn a_pki_dir_serves_https_that_kubectl_uses_as_the_admin_and_names_every_caller() {
    let etcd = Etcd::start().await;
    let dir = std::env::temp_dir().join(format!("shardplane-tls-{}", uuid::Uuid::new_v4()));
    let (pki, kubeconfig, home, tokens) = (dir.join("pki"), dir.join("kubeconfig"), dir.join("home"), dir.join("tokens.csv"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(&tokens, "s3cret,alice,uid-7,\"dev,ops\"\n").unwrap();
    let started = spawn(&["--etcd-endpoints", &etcd.endpoint, "--shards", "1", "--listen", "127.0.0.1:0", "--kubeconfig", kubeconfig.to_str().unwrap(), "--pki-dir", pki.to_str().unwrap(), "--token-auth-file", tokens.to_str().unwrap(), "--authorization-mode", "AlwaysAllow"]);
    assert_eq!(std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777, 0o600, "the kubeconfig holds the admin's key");
    assert_eq!(std::fs::metadata(pki.join("ca.key")).unwrap().permissions().mode() & 0o777, 0o600);

    // kubectl over TLS (it asks for HTTP/2) with the admin's certificate from the kubeconfig.
    let (kc, h) = (kubeconfig.clone(), home.clone());
    wait_for(Duration::from_secs(30), || {
        let (kc, h) = (kc.clone(), h.clone());
        async move { tokio::task::spawn_blocking(move || kubectl(&kc, &h, &["get", "namespace", "default", "-o", "name"])).await.unwrap().status.success() }
    })
    .await;
    let (kc, h) = (kubeconfig.clone(), home.clone());
    let out = tokio::task::spawn_blocking(move || kubectl(&kc, &h, &["auth", "whoami", "-o", "json"])).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let review: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(review["status"]["userInfo"], serde_json::json!({"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}));

    // HTTP/2 and HTTP/1.1, as the client's ALPN offer says, trusting the cluster CA, without a
    // client certificate: served, as an anonymous caller.
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap();
    let url = format!("https://{}", started.addr);
    for (http1_only, version) in [(false, reqwest::Version::HTTP_2), (true, reqwest::Version::HTTP_11)] {
        let mut builder = shardplane_http::outbound::client_builder().add_root_certificate(ca.clone());
        if http1_only {
            builder = builder.http1_only();
        }
        let anonymous = builder.build().unwrap();
        let answer = anonymous.post(format!("{url}/apis/authentication.k8s.io/v1/selfsubjectreviews")).json(&serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})).send().await.unwrap();
        assert_eq!((answer.status().as_u16(), answer.version()), (201, version));
        let review: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(review["status"]["userInfo"], serde_json::json!({"username": "system:anonymous", "groups": ["system:unauthenticated"]}));
        // A watch streams over either.
        let watch = anonymous.get(format!("{url}/api/v1/namespaces?watch=1&timeoutSeconds=1")).send().await.unwrap();
        assert_eq!((watch.status().as_u16(), watch.version()), (200, version));
        assert!(watch.text().await.unwrap().contains("\"ADDED\""), "the watch sent the namespaces");
    }

    // A token of the token file names its user (kubectl sends it instead of the certificate);
    // a token nobody knows is upstream's 401, not an anonymous request.
    let (kc, h) = (kubeconfig.clone(), home.clone());
    let ca_file = pki.join("ca.crt");
    let out = tokio::task::spawn_blocking(move || {
        let server = format!("--server=https://{}", std::fs::read_to_string(&kc).unwrap().lines().find_map(|l| l.trim().strip_prefix("server: https://").map(str::to_owned)).unwrap());
        Command::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33").env("HOME", &h).env("KUBECONFIG", "/dev/null")
            .args([server.as_str(), &format!("--certificate-authority={}", ca_file.display()), "--token=s3cret", "auth", "whoami", "-o", "json"]).output().unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let review: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(review["status"]["userInfo"], serde_json::json!({"username": "alice", "uid": "uid-7", "groups": ["dev", "ops", "system:authenticated"]}));
    let ca_only = shardplane_http::outbound::client_builder().add_root_certificate(ca.clone()).build().unwrap();
    let refused = ca_only.get(format!("{url}/api/v1/namespaces")).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    assert_eq!(refused.json::<serde_json::Value>().await.unwrap(), serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401}));

    // A client certificate from another CA is refused in the handshake; plain HTTP gets nothing.
    let stranger = shardplane_identity::pki::Authority::generate("another-ca").unwrap();
    let (cert, key) = stranger.client_certificate("mallory", Some("system:masters")).unwrap();
    let identity = reqwest::Identity::from_pem(format!("{}{}", cert.pem(), key.serialize_pem()).as_bytes()).unwrap();
    let forged = shardplane_http::outbound::client_builder().add_root_certificate(ca).identity(identity).build().unwrap();
    assert!(forged.get(format!("{url}/api/v1/namespaces")).send().await.is_err(), "a certificate the client CA did not sign");
    assert!(client().get(format!("http://{}/api/v1/namespaces", started.addr)).send().await.is_err(), "plain HTTP to the TLS port");
    drop(started);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn without_anonymous_requests_only_a_credential_is_served() {
    let etcd = Etcd::start().await;
    let dir = std::env::temp_dir().join(format!("shardplane-tls-{}", uuid::Uuid::new_v4()));
    let (pki, kubeconfig, home) = (dir.join("pki"), dir.join("kubeconfig"), dir.join("home"));
    let started = spawn(&["--etcd-endpoints", &etcd.endpoint, "--shards", "1", "--listen", "127.0.0.1:0", "--kubeconfig", kubeconfig.to_str().unwrap(), "--pki-dir", pki.to_str().unwrap(), "--anonymous-auth=false"]);
    let (kc, h) = (kubeconfig.clone(), home.clone());
    wait_for(Duration::from_secs(30), || {
        let (kc, h) = (kc.clone(), h.clone());
        async move { tokio::task::spawn_blocking(move || kubectl(&kc, &h, &["get", "namespace", "default", "-o", "name"])).await.unwrap().status.success() }
    })
    .await;
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap();
    let no_credential = shardplane_http::outbound::client_builder().add_root_certificate(ca).build().unwrap();
    for path in ["/api/v1/namespaces", "/healthz", "/version"] {
        let answer = no_credential.get(format!("https://{}{path}", started.addr)).send().await.unwrap();
        assert_eq!(answer.status().as_u16(), 401, "{path}");
    }
    drop(started);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The bare command, as a new user runs it (only the store and a free port given): HTTPS with a
/// PKI made under `.shardplane/pki`, a kubeconfig at `.shardplane/kubeconfig` that kubectl uses
/// as the admin, RBAC deciding (an anonymous caller reads health, not the API), and plain HTTP
/// refused.
#[tokio::test]
async fn by_default_the_router_serves_https_with_rbac_and_its_own_pki() {
    let etcd = Etcd::start().await;
    let dir = std::env::temp_dir().join(format!("shardplane-default-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let started = common::spawn_in(&dir, &["--etcd-endpoints", &etcd.endpoint, "--shards", "1", "--listen", "127.0.0.1:0"]);
    let (kubeconfig, home, pki) = (dir.join(".shardplane/kubeconfig"), dir.join("home"), dir.join(".shardplane/pki"));
    for file in ["ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key", "sa.key", "sa.pub"] {
        assert_eq!(std::fs::metadata(pki.join(file)).unwrap().permissions().mode() & 0o777, 0o600, "{file}");
    }
    let (kc, h) = (kubeconfig.clone(), home.clone());
    wait_for(Duration::from_secs(30), || {
        let (kc, h) = (kc.clone(), h.clone());
        // Ready once the bootstrap policy is in place (upstream's rbac/bootstrap-roles check).
        async move { tokio::task::spawn_blocking(move || kubectl(&kc, &h, &["get", "--raw", "/readyz"])).await.unwrap().status.success() }
    })
    .await;
    let out = tokio::task::spawn_blocking(move || kubectl(&kubeconfig, &home, &["auth", "can-i", "delete", "nodes"])).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "yes", "the admin may do anything");
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap();
    let anonymous = shardplane_http::outbound::client_builder().add_root_certificate(ca).build().unwrap();
    let url = format!("https://{}", started.addr);
    assert_eq!(anonymous.get(format!("{url}/healthz")).send().await.unwrap().status().as_u16(), 200);
    assert_eq!(anonymous.get(format!("{url}/api/v1/namespaces")).send().await.unwrap().status().as_u16(), 403, "RBAC by default");
    assert!(client().get(format!("http://{}/api/v1/namespaces", started.addr)).send().await.is_err(), "plain HTTP is not served");
    drop(started);
    let _ = std::fs::remove_dir_all(&dir);
}
