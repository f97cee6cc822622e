//! ServiceAccount tokens through a router of four shards (RFC 0012, "ServiceAccount tokens"):
//! `kubectl create token` bound to a pod, the token naming its ServiceAccount (RBAC decides
//! from it), TokenReview's answers, the token refused once the pod is gone (measured against the
//! stated recheck bound), expired and misaddressed tokens refused, TokenRequest's validation,
//! and the issuer's discovery documents.

mod common;

use common::spawn;
use serde_json::{json, Value};
use shardplane_identity::service_accounts::Tokens;
use shardplane_testkit::*;
use std::process::Command;
use std::time::{Duration, Instant};

const KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";

fn kubectl(kubeconfig: &std::path::Path, home: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(KUBECTL).env("HOME", home).arg(format!("--kubeconfig={}", kubeconfig.display())).args(args).output().unwrap()
}

async fn kubectl_ok(kubeconfig: &std::path::Path, home: &std::path::Path, args: &[&str]) -> String {
    let (kc, h, args) = (kubeconfig.to_owned(), home.to_owned(), args.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let out = tokio::task::spawn_blocking(move || kubectl(&kc, &h, &args.iter().map(String::as_str).collect::<Vec<_>>())).await.unwrap();
    assert!(out.status.success(), "kubectl: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_work_while_their_objects_exist_and_are_reviewed_as_upstream() {
    let etcd = Etcd::start().await;
    let dir = common::TempDir::named("shardplane-sa");
    let (pki, kc, home) = (dir.join("pki"), dir.join("kubeconfig"), dir.join("home"));
    let started = spawn(&["--etcd-endpoints", &etcd.endpoint, "--shards", "4", "--listen", "127.0.0.1:0", "--kubeconfig", kc.to_str().unwrap(), "--pki-dir", pki.to_str().unwrap(), "--authorization-mode", "RBAC"]);
    let url = format!("https://{}", started.addr);
    let client = shardplane_http::outbound::client_builder().add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap()).build().unwrap();
    let call = |token: String, method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut r = client.request(method, format!("{url}{path}")).bearer_auth(token);
        if let Some(b) = body {
            r = r.json(&b);
        }
        async move {
            let resp = r.send().await.unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    wait_for(Duration::from_secs(60), || {
        let (kc, home) = (kc.clone(), home.clone());
        async move { tokio::task::spawn_blocking(move || kubectl(&kc, &home, &["get", "--raw", "/readyz"])).await.unwrap().status.success() }
    })
    .await;
    kubectl_ok(&kc, &home, &["create", "namespace", "apps"]).await;
    kubectl_ok(&kc, &home, &["create", "serviceaccount", "bot", "-n", "apps"]).await;
    kubectl_ok(&kc, &home, &["create", "rolebinding", "bot-view", "-n", "apps", "--clusterrole=view", "--serviceaccount=apps:bot"]).await;
    kubectl_ok(&kc, &home, &["run", "p", "-n", "apps", "--image=busybox", "--restart=Never"]).await;
    let pod_uid = kubectl_ok(&kc, &home, &["get", "pod", "p", "-n", "apps", "-o", "jsonpath={.metadata.uid}"]).await;

    // A token bound to the pod names the ServiceAccount, with the pod as extra attributes.
    let token = kubectl_ok(&kc, &home, &["create", "token", "bot", "-n", "apps", "--bound-object-kind=Pod", "--bound-object-name=p"]).await.trim().to_owned();
    let (code, review) = call(token.clone(), reqwest::Method::POST, "/apis/authentication.k8s.io/v1/selfsubjectreviews", Some(json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1"}))).await;
    assert_eq!(code, 201, "{review}");
    let user = &review["status"]["userInfo"];
    assert_eq!(user["username"], "system:serviceaccount:apps:bot");
    assert_eq!(user["groups"], json!(["system:serviceaccounts", "system:serviceaccounts:apps", "system:authenticated"]));
    assert_eq!(user["extra"]["authentication.kubernetes.io/pod-name"], json!(["p"]));
    assert_eq!(user["extra"]["authentication.kubernetes.io/pod-uid"], json!([pod_uid]));
    // RBAC decides from the ServiceAccount: view in apps.
    assert_eq!(call(token.clone(), reqwest::Method::GET, "/api/v1/namespaces/apps/pods", None).await.0, 200);
    assert_eq!(call(token.clone(), reqwest::Method::GET, "/api/v1/namespaces/apps/secrets", None).await.0, 403);
    // Every ServiceAccount may read the issuer's documents; they name this issuer and its key.
    let (code, config) = call(token.clone(), reqwest::Method::GET, "/.well-known/openid-configuration", None).await;
    assert_eq!((code, config["issuer"].as_str()), (200, Some("https://kubernetes.default.svc.cluster.local")));
    assert_eq!(config["jwks_uri"], format!("https://{}/openid/v1/jwks", started.addr));
    let (code, jwks) = call(token.clone(), reqwest::Method::GET, "/openid/v1/jwks", None).await;
    assert_eq!((code, jwks["keys"][0]["kty"].as_str(), jwks["keys"][0]["alg"].as_str()), (200, Some("EC"), Some("ES256")));
    let anonymous = client.get(format!("{url}/openid/v1/jwks")).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 403, "anonymous callers do not read the keys");

    // TokenReview, as the admin: authenticated, with the audiences it is valid for.
    let review_of = |token: &str, audiences: Value| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token, "audiences": audiences}});
    let reviewed = |body: Value| {
        let (kc, home) = (kc.clone(), home.clone());
        async move {
            let path = dir_file(&kc, &body);
            let out = kubectl_ok(&kc, &home, &["create", "-o", "json", "-f", path.to_str().unwrap()]).await;
            serde_json::from_str::<Value>(&out).unwrap()["status"].clone()
        }
    };
    let status = reviewed(review_of(&token, Value::Null)).await;
    assert_eq!((status["authenticated"].as_bool(), status["user"]["username"].as_str()), (Some(true), Some("system:serviceaccount:apps:bot")));
    assert_eq!(status["audiences"], json!(["https://kubernetes.default.svc.cluster.local"]));

    // A token for another audience is no credential for this API, but reviews for its own.
    let vault = kubectl_ok(&kc, &home, &["create", "token", "bot", "-n", "apps", "--audience=vault"]).await.trim().to_owned();
    assert_eq!(call(vault.clone(), reqwest::Method::GET, "/api/v1/namespaces/apps/pods", None).await.0, 401);
    let status = reviewed(review_of(&vault, json!(["vault"]))).await;
    assert_eq!((status["authenticated"].as_bool(), status["audiences"].clone()), (Some(true), json!(["vault"])));
    let status = reviewed(review_of(&vault, Value::Null)).await;
    assert_eq!(status, json!({"user": {}, "error": "token audiences is invalid"}));

    // An expired token (signed with the cluster's own key, so only its time is wrong).
    let signer = Tokens::new(&std::fs::read_to_string(pki.join("sa.key")).unwrap(), "https://kubernetes.default.svc.cluster.local", vec![]).unwrap();
    let (fresh, _) = signer.issue("apps", "bot", "", &[], 600, None).unwrap();
    let (mut claims, _) = signer.verify(&fresh, &[]).unwrap();
    claims.kubernetes.serviceaccount.uid = kubectl_ok(&kc, &home, &["get", "sa", "bot", "-n", "apps", "-o", "jsonpath={.metadata.uid}"]).await;
    assert_eq!(call(signer.sign(&claims).unwrap(), reqwest::Method::GET, "/api/v1/namespaces/apps/pods", None).await.0, 200, "the same claims, still valid");
    (claims.iat, claims.nbf, claims.exp) = (claims.iat - 7200, claims.nbf - 7200, claims.iat - 3600);
    let expired = signer.sign(&claims).unwrap();
    assert_eq!(call(expired.clone(), reqwest::Method::GET, "/api/v1/namespaces/apps/pods", None).await, (401, json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401})));
    assert_eq!(reviewed(review_of(&expired, Value::Null)).await["error"], "service account token has expired");

    // TokenRequest's validation, and a bound object that does not exist.
    let request = |spec: Value| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    let admin_token = fresh_admin_token(&kc, &home).await;
    let (code, refused) = call(admin_token.clone(), reqwest::Method::POST, "/api/v1/namespaces/apps/serviceaccounts/bot/token", Some(request(json!({"expirationSeconds": 599})))).await;
    assert_eq!((code, refused["message"].as_str()), (422, Some("TokenRequest.authentication.k8s.io \"bot\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes")));
    let (code, refused) = call(admin_token.clone(), reqwest::Method::POST, "/api/v1/namespaces/apps/serviceaccounts/bot/token", Some(request(json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "nope"}})))).await;
    assert_eq!((code, refused["message"].as_str()), (404, Some("pods \"nope\" not found")));
    let (code, _) = call(admin_token.clone(), reqwest::Method::POST, "/api/v1/namespaces/apps/serviceaccounts/nobody/token", Some(request(json!({})))).await;
    assert_eq!(code, 404);

    // Deleting the pod ends its token within the recheck bound.
    kubectl_ok(&kc, &home, &["delete", "pod", "p", "-n", "apps", "--wait=false"]).await;
    let since = Instant::now();
    let bound = shardplane_router::authn::TOKEN_RECHECK + Duration::from_secs(2);
    let mut last = 200;
    while since.elapsed() < bound && last != 401 {
        last = call(token.clone(), reqwest::Method::GET, "/api/v1/namespaces/apps/pods", None).await.0;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(last, 401, "the token of a deleted pod still worked {:?} later", since.elapsed());
    println!("a deleted pod's token was refused {} ms after the delete (recheck bound {} s)", since.elapsed().as_millis(), shardplane_router::authn::TOKEN_RECHECK.as_secs());
    assert_eq!(reviewed(review_of(&token, Value::Null)).await, json!({"user": {}, "error": "pods \"p\" not found"}));
}

/// A token of the admin's own: a ServiceAccount bound to cluster-admin (the admin's client
/// certificate is in the kubeconfig; reqwest here sends bearer tokens).
async fn fresh_admin_token(kc: &std::path::Path, home: &std::path::Path) -> String {
    kubectl_ok(kc, home, &["create", "serviceaccount", "root", "-n", "kube-system"]).await;
    kubectl_ok(kc, home, &["create", "clusterrolebinding", "root", "--clusterrole=cluster-admin", "--serviceaccount=kube-system:root"]).await;
    kubectl_ok(kc, home, &["create", "token", "root", "-n", "kube-system"]).await.trim().to_owned()
}

/// `body` written beside the kubeconfig, for `kubectl create -f`.
fn dir_file(kc: &std::path::Path, body: &Value) -> std::path::PathBuf {
    let path = kc.with_file_name(format!("review-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&path, body.to_string()).unwrap();
    path
}

/// Rotation (RFC 0012, "Credentials and their lifetimes"): a token signed by the previous key
/// keeps working while `--service-account-key-file` lists that key, and the JWKS shows both; a
/// key not listed is refused.
#[tokio::test]
async fn tokens_of_a_listed_previous_key_keep_working() {
    let etcd = Etcd::start().await;
    let dir = common::TempDir::named("shardplane-sa-rotation");
    let (pki, kc, home, old_pub) = (dir.join("pki"), dir.join("kubeconfig"), dir.join("home"), dir.join("old.pub"));
    let old_pair = shardplane_identity::pki::Authority::generate("unused").unwrap();
    let old_key = old_pair.key().serialize_pem();
    std::fs::write(&old_pub, old_pair.key().public_key_pem()).unwrap();
    let started = spawn(&["--etcd-endpoints", &etcd.endpoint, "--shards", "1", "--listen", "127.0.0.1:0", "--kubeconfig", kc.to_str().unwrap(), "--pki-dir", pki.to_str().unwrap(), "--service-account-key-file", old_pub.to_str().unwrap()]);
    let url = format!("https://{}", started.addr);
    let client = shardplane_http::outbound::client_builder().add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap()).build().unwrap();
    wait_for(Duration::from_secs(60), || {
        let (kc, home) = (kc.clone(), home.clone());
        // Ready (the bootstrap policy in place, issuer discovery's binding with it), and the
        // namespace's ServiceAccount made.
        async move { tokio::task::spawn_blocking(move || kubectl(&kc, &home, &["get", "--raw", "/readyz"]).status.success() && kubectl(&kc, &home, &["get", "sa", "default", "-n", "default"]).status.success()).await.unwrap() }
    })
    .await;
    let uid = kubectl_ok(&kc, &home, &["get", "sa", "default", "-n", "default", "-o", "jsonpath={.metadata.uid}"]).await;
    let issuer = "https://kubernetes.default.svc.cluster.local";
    let token_of = |key_pem: &str| Tokens::new(key_pem, issuer, vec![]).unwrap().issue("default", "default", &uid, &[], 600, None).unwrap().0;
    let get = |token: String, path: &'static str| {
        let r = client.get(format!("{url}{path}")).bearer_auth(token);
        async move {
            let resp = r.send().await.unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (code, jwks) = get(token_of(&old_key), "/openid/v1/jwks").await;
    assert_eq!(code, 200, "a token of the listed previous key: {jwks}");
    assert_eq!(jwks["keys"].as_array().map(Vec::len), Some(2), "the signing key and the previous one: {jwks}");
    let (code, _) = get(token_of(&std::fs::read_to_string(pki.join("sa.key")).unwrap()), "/openid/v1/jwks").await;
    assert_eq!(code, 200, "a token of the signing key");
    let stranger = shardplane_identity::pki::Authority::generate("unused").unwrap().key().serialize_pem();
    assert_eq!(get(token_of(&stranger), "/apis").await.0, 401, "a key not listed");
}
