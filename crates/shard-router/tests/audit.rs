//! Audit through a router of two shards (RFC 0012, "Audit"): `--audit-policy-file` and
//! `--audit-log-path` as an operator sets them, the events kubectl's and other callers'
//! requests leave (levels, stages, users, impersonation, authorization's annotations, refused
//! credentials, a watch's two stages), and the log rotated by size.

mod common;

use common::spawn;
use serde_json::{json, Value};
use shardplane_testkit::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
  - level: RequestResponse
    resources:
      - group: ""
        resources: ["configmaps"]
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets"]
  - level: Request
    verbs: ["watch"]
  - level: Metadata
"#;

fn events(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log).unwrap_or_default().lines().map(|l| serde_json::from_str(l).expect("each line is one JSON event")).collect()
}

/// Waits for an event `pick` finds in the log, and returns it (the log's events in the panic
/// message when none comes).
async fn event(log: &Path, pick: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let all = events(log);
        if let Some(e) = all.iter().find(|e| pick(e)) {
            return e.clone();
        }
        assert!(std::time::Instant::now() < deadline, "no such event within 10 s; the log has {} events: {:#?}", all.len(), all.iter().map(|e| (e["verb"].clone(), e["requestURI"].clone(), e["stage"].clone(), e["responseStatus"]["code"].clone())).collect::<Vec<_>>());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_audited_as_the_policy_says_and_the_log_rotates() {
    let etcd = Etcd::start().await;
    let dir = tempdir::Dir::new();
    let (pki, kubeconfig, home, tokens, policy, log) = (dir.0.join("pki"), dir.0.join("kubeconfig"), dir.0.join("home"), dir.0.join("tokens.csv"), dir.0.join("policy.yaml"), dir.0.join("audit").join("audit.log"));
    std::fs::write(&tokens, "vera-token,vera,u-1\n").unwrap();
    std::fs::write(&policy, POLICY).unwrap();
    let started = spawn(&[
        "--etcd-endpoints", &etcd.endpoint, "--shards", "2", "--listen", "127.0.0.1:0", "--kubeconfig", kubeconfig.to_str().unwrap(), "--pki-dir", pki.to_str().unwrap(),
        "--token-auth-file", tokens.to_str().unwrap(), "--audit-policy-file", policy.to_str().unwrap(), "--audit-log-path", log.to_str().unwrap(), "--audit-log-maxsize", "1", "--audit-log-maxbackup", "2",
    ]);
    let url = format!("https://{}", started.addr);
    let kubectl = |args: &[&str]| Command::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33").env("HOME", &home).arg(format!("--kubeconfig={}", kubeconfig.display())).args(args).output().unwrap();
    wait_for(Duration::from_secs(60), || async { kubectl(&["get", "--raw", "/readyz"]).status.success() }).await;
    assert!(events(&log).iter().all(|e| !e["requestURI"].as_str().unwrap_or("").starts_with("/readyz")), "health is not audited (level None)");

    // kubectl as the admin: a RequestResponse event with both bodies, and no RequestReceived
    // stage (omitted by the policy).
    let out = kubectl(&["create", "configmap", "audited", "--from-literal=k=v"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let created = event(&log, |e| e["verb"] == "create" && e["objectRef"]["name"] == "audited").await;
    assert_eq!((created["kind"].as_str(), created["apiVersion"].as_str(), created["level"].as_str(), created["stage"].as_str()), (Some("Event"), Some("audit.k8s.io/v1"), Some("RequestResponse"), Some("ResponseComplete")));
    assert_eq!(created["user"], json!({"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}));
    assert_eq!(created["objectRef"], json!({"resource": "configmaps", "namespace": "default", "name": "audited", "apiVersion": "v1"}));
    assert_eq!(created["responseStatus"], json!({"metadata": {}, "code": 201}));
    assert_eq!(created["requestObject"]["data"], json!({"k": "v"}));
    assert!(created["responseObject"]["metadata"]["resourceVersion"].is_string(), "{created}");
    assert_eq!(created["sourceIPs"], json!(["127.0.0.1"]));
    assert!(created["userAgent"].as_str().unwrap().starts_with("kubectl"), "{created}");
    assert_eq!(created["annotations"]["authorization.k8s.io/decision"], "allow");
    assert!(created["requestReceivedTimestamp"].as_str().unwrap().ends_with('Z') && created["stageTimestamp"].as_str().unwrap() >= created["requestReceivedTimestamp"].as_str().unwrap());
    assert!(events(&log).iter().all(|e| e["stage"] != "RequestReceived"), "an omitted stage was written");

    // A forbidden read by a token user: Metadata, the 403 Status, authorization's reason.
    let client = shardplane_http::outbound::client_builder().add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap()).build().unwrap();
    let r = client.get(format!("{url}/api/v1/namespaces/default/secrets/s")).bearer_auth("vera-token").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let id = r.headers().get("audit-id").expect("an Audit-Id header").to_str().unwrap().to_owned();
    let refused = event(&log, |e| e["auditID"] == id.as_str()).await;
    assert_eq!((refused["level"].as_str(), refused["user"]["username"].as_str()), (Some("Metadata"), Some("vera")));
    assert_eq!(refused["responseStatus"]["code"], 403);
    assert_eq!(refused["responseStatus"]["reason"], "Forbidden");
    assert_eq!(refused["annotations"]["authorization.k8s.io/decision"], "forbid");
    assert!(refused.get("requestObject").is_none() && refused.get("responseObject").is_none(), "Metadata records no bodies");

    // A credential that names nobody: one event, no user, 401.
    let r = client.get(format!("{url}/api/v1/namespaces")).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let unauthenticated = event(&log, |e| e["responseStatus"]["code"] == 401).await;
    assert_eq!((unauthenticated["user"].clone(), unauthenticated["level"].as_str(), unauthenticated["verb"].as_str()), (json!({}), Some("Metadata"), Some("list")));

    // Impersonation: the event names both the admin and whom it acted as.
    let out = kubectl(&["get", "pods", "--as=vera", "-n", "default"]);
    assert!(!out.status.success(), "vera may not list pods");
    let acted = event(&log, |e| e["impersonatedUser"]["username"] == "vera" && e["objectRef"]["resource"] == "pods").await;
    assert_eq!((acted["user"]["username"].as_str(), acted["verb"].as_str(), acted["responseStatus"]["code"].as_u64()), (Some("kubernetes-admin"), Some("list"), Some(403)));

    // A watch: ResponseStarted when it starts, ResponseComplete when it ends, at Request level.
    let admin_tls = shardplane_identity::tls::client_config(&pki.join("ca.crt"), &pki.join("admin.crt"), &pki.join("admin.key")).unwrap();
    let admin = shardplane_http::outbound::client_builder().tls_backend_preconfigured(admin_tls).build().unwrap();
    let w = admin.get(format!("{url}/api/v1/namespaces?watch=1&timeoutSeconds=1")).send().await.unwrap();
    let id = w.headers().get("audit-id").unwrap().to_str().unwrap().to_owned();
    let _ = w.text().await.unwrap();
    let complete = event(&log, |e| e["auditID"] == id.as_str() && e["stage"] == "ResponseComplete").await;
    let started_stage = event(&log, |e| e["auditID"] == id.as_str() && e["stage"] == "ResponseStarted").await;
    assert_eq!((started_stage["level"].as_str(), complete["verb"].as_str()), (Some("Request"), Some("watch")));
    assert!(complete["stageTimestamp"].as_str().unwrap() > started_stage["stageTimestamp"].as_str().unwrap());

    // Rotation at a megabyte, two backups kept: 120 creates of 10 KiB ConfigMaps, each event
    // carrying both bodies, write about 2.5 MB.
    let big = "x".repeat(10 * 1024);
    for i in 0..120 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("big-{i}")}, "data": {"x": big}});
        assert_eq!(admin.post(format!("{url}/api/v1/namespaces/default/configmaps")).json(&cm).send().await.unwrap().status().as_u16(), 201);
    }
    event(&log, |e| e["objectRef"]["name"] == "big-119").await;
    let backups: Vec<_> = std::fs::read_dir(log.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("audit-") && n.ends_with(".log")).collect();
    assert_eq!(backups.len(), 2, "{backups:?}");
    for b in &backups {
        let size = std::fs::metadata(log.parent().unwrap().join(b)).unwrap().len();
        assert!(size <= 1024 * 1024 && size > 900 * 1024, "{b}: {size} bytes");
    }
}
