//! kubectl (the real binaries from the base image) against a shard on real etcd, with default
//! flags: validation through `/openapi/v3` (1.29+) or the protobuf `/openapi/v2` (1.27, 1.28), after
//! which kubectl sends `fieldValidation=Strict`; client-side apply; `explain`; and generators that
//! send protobuf bodies.


use shardplane_testkit::*;
use shardplane_keyspace::RangeSet;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

const VERSIONS: [&str; 4] = ["1.27", "1.28", "1.30", "1.33"];

const MANIFEST: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: scenario}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27", ports: [{containerPort: 80}]}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: scenario}
data: {mode: blue}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: scenario}
spec: {selector: {app: web}, ports: [{port: 80}]}
"#;

async fn scenario(version: &str) {
    let etcd = Etcd::start().await;
    let s = TestShard::start(test_config(&etcd, RangeSet::full())).await;
    let k = Kubectl { bin: kubectl_path(version), server: s.url.clone(), home: tempdir::Dir::new() };
    // kubectl blocks; run it off the runtime's worker threads.
    tokio::task::spawn_blocking(move || run_steps(&k)).await.unwrap();
}

fn run_steps(k: &Kubectl) {
    let ns = k.ok(&["create", "-o", "name", "-f", "-"], Some("apiVersion: v1\nkind: Namespace\nmetadata: {name: scenario}\n"));
    assert_eq!(ns.trim(), "namespace/scenario");
    k.ok(&["apply", "-f", "-"], Some(MANIFEST));
    let table = k.ok(&["get", "deployments,configmaps,services", "-n", "scenario"], None);
    for name in ["deployment.apps/web", "configmap/settings", "service/web"] {
        assert!(table.contains(name), "{table}");
    }
    let json: serde_json::Value = serde_json::from_str(&k.ok(&["get", "configmap", "settings", "-n", "scenario", "-o", "json"], None)).unwrap();
    assert_eq!(json["data"]["mode"], "blue");
    k.ok(&["label", "configmap", "settings", "-n", "scenario", "tier=front"], None);
    k.ok(&["annotate", "configmap", "settings", "-n", "scenario", "owner=platform"], None);
    k.ok(&["patch", "deployment", "web", "-n", "scenario", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.28"}]}}}}"#], None);
    k.ok(&["patch", "configmap", "settings", "-n", "scenario", "--type", "merge", "-p", r#"{"data":{"mode":"green"}}"#], None);
    k.ok(&["patch", "service", "web", "-n", "scenario", "--type", "json", "-p", r#"[{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]"#], None);
    let d: serde_json::Value = serde_json::from_str(&k.ok(&["get", "deployment", "web", "-n", "scenario", "-o", "json"], None)).unwrap();
    assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.28");
    assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"], 80);
    assert_eq!(d["metadata"]["generation"], 2);
    let cm: serde_json::Value = serde_json::from_str(&k.ok(&["get", "configmap", "settings", "-n", "scenario", "-o", "json"], None)).unwrap();
    assert_eq!((&cm["data"]["mode"], &cm["metadata"]["labels"]["tier"], &cm["metadata"]["annotations"]["owner"]), (&"green".into(), &"front".into(), &"platform".into()));
    // Re-applying the manifest changes the deployment back (client-side apply, strategic patch).
    k.ok(&["apply", "-f", "-"], Some(MANIFEST));
    let d: serde_json::Value = serde_json::from_str(&k.ok(&["get", "deployment", "web", "-n", "scenario", "-o", "json"], None)).unwrap();
    assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.27");
    // get -w sees a change made while it watches.
    let mut watch = k.command(&["get", "configmap", "settings", "-n", "scenario", "-w", "-o", "jsonpath={.data.mode}{\"\\n\"}"]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "blue");
    k.ok(&["patch", "configmap", "settings", "-n", "scenario", "--type", "merge", "-p", r#"{"data":{"mode":"red"}}"#], None);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = false;
    while Instant::now() < deadline {
        match lines.next() {
            Some(Ok(l)) if l == "red" => {
                seen = true;
                break;
            }
            Some(Ok(_)) => {}
            _ => break,
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(seen, "kubectl get -w did not show the change");
    k.ok(&["delete", "configmap", "settings", "-n", "scenario"], None);
    k.ok(&["delete", "service", "web", "-n", "scenario", "--wait=false"], None);
    k.ok(&["wait", "--for=delete", "service/web", "-n", "scenario", "--timeout=20s"], None);
    let left = k.ok(&["get", "configmaps,services", "-n", "scenario", "-o", "name"], None);
    assert_eq!(left.trim(), "");
    // Generators send protobuf.
    k.ok(&["create", "configmap", "literal", "-n", "scenario", "--from-literal=color=teal"], None);
    let lit: serde_json::Value = serde_json::from_str(&k.ok(&["get", "configmap", "literal", "-n", "scenario", "-o", "json"], None)).unwrap();
    assert_eq!(lit["data"]["color"], "teal");
    let resources = k.ok(&["api-resources"], None);
    for r in ["configmaps", "deployments", "leases", "namespaces"] {
        assert!(resources.contains(r), "{resources}");
    }
    {
        let explain = k.ok(&["explain", "pods"], None);
        assert!(explain.contains("KIND:") && explain.contains("Pod") && explain.contains("spec"), "{explain}");
        let field = k.ok(&["explain", "deployment.spec.replicas"], None);
        assert!(field.contains("replicas") && field.contains("integer"), "{field}");
        // Default (strict) validation refuses an unknown field, on the server.
        let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad, namespace: scenario}\nbogus: 1\n";
        let out = k.run(&["create", "-f", "-"], Some(bad));
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field \"bogus\""), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

#[tokio::test]
async fn kubectl_scenario_1_27() {
    scenario(VERSIONS[0]).await;
}
#[tokio::test]
async fn kubectl_scenario_1_28() {
    scenario(VERSIONS[1]).await;
}
#[tokio::test]
async fn kubectl_scenario_1_30() {
    scenario(VERSIONS[2]).await;
}
#[tokio::test]
async fn kubectl_scenario_1_33() {
    scenario(VERSIONS[3]).await;
}

/// kubectl's generators send protobuf bodies. Each object created that way must be stored exactly
/// as the same object sent as JSON (kubectl's own `--dry-run=client -o json` rendering of it),
/// apart from the fields that identify one object.
async fn generators_decode_like_json(version: &str) {
    let etcd = Etcd::start().await;
    let s = TestShard::start(test_config(&etcd, RangeSet::full())).await;
    let k = Kubectl { bin: kubectl_path(version), server: s.url.clone(), home: tempdir::Dir::new() };
    let generators: Vec<(&str, Vec<&str>)> = vec![
        ("namespaces/gen", vec!["create", "namespace", "gen"]),
        ("namespaces/gen/configmaps/cm1", vec!["create", "configmap", "cm1", "-n", "gen", "--from-literal=a=1", "--from-literal=b=two"]),
        ("namespaces/gen/secrets/s1", vec!["create", "secret", "generic", "s1", "-n", "gen", "--from-literal=pw=hunter2"]),
        ("namespaces/gen/serviceaccounts/sa1", vec!["create", "serviceaccount", "sa1", "-n", "gen"]),
        ("namespaces/gen/services/web", vec!["create", "service", "clusterip", "web", "-n", "gen", "--tcp=80:8080"]),
    ];
    let apps: Vec<(&str, Vec<&str>)> = vec![
        ("apis/apps/v1/namespaces/gen/deployments/web", vec!["create", "deployment", "web", "-n", "gen", "--image=nginx:1.27", "--replicas=2", "--port=80"]),
        ("apis/batch/v1/namespaces/gen/jobs/j1", vec!["create", "job", "j1", "-n", "gen", "--image=busybox"]),
    ];
    let url = s.url.clone();
    let rendered: Vec<(String, serde_json::Value)> = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        for (path, args) in generators.iter().map(|(p, a)| (format!("/api/v1/{p}"), a)).chain(apps.iter().map(|(p, a)| (format!("/{p}"), a))) {
            let mut dry = args.clone();
            dry.extend(["--dry-run=client", "-o", "json"]);
            let json: serde_json::Value = serde_json::from_str(&k.ok(&dry, None)).unwrap();
            k.ok(args, None); // the real create: a protobuf body
            out.push((path, json));
        }
        let _ = url;
        out
    })
    .await
    .unwrap();
    // What identifies one object: its name, uid, timestamps, (for Jobs) the selector and
    // template labels generated from them, and (for Services) the address each was given.
    let strip = |mut v: serde_json::Value| {
        for f in ["name", "uid", "creationTimestamp", "resourceVersion"] {
            v["metadata"].as_object_mut().unwrap().remove(f);
        }
        if v["kind"] == "Service" {
            for f in ["clusterIP", "clusterIPs"] {
                v["spec"].as_object_mut().unwrap().remove(f);
            }
        }
        if v["kind"] == "Job" {
            v["spec"].as_object_mut().unwrap().remove("selector");
            v["spec"]["template"]["metadata"]["labels"].as_object_mut().unwrap().retain(|k, _| !k.ends_with("controller-uid") && !k.ends_with("job-name"));
        }
        v
    };
    for (path, mut json) in rendered {
        let (code, from_proto) = s.get(&path).await;
        assert_eq!(code, 200, "{path} was not created from protobuf: {from_proto}");
        if path == "/api/v1/namespaces/gen" {
            continue; // namespaces are unique by name; nothing to compare against
        }
        let name = json["metadata"]["name"].as_str().unwrap().to_owned();
        json["metadata"]["name"] = format!("{name}-json").into();
        let collection = path.rsplit_once('/').unwrap().0;
        let (code, from_json) = s.post(collection, &json).await;
        assert_eq!(code, 201, "{from_json}");
        assert_eq!(strip(from_proto), strip(from_json), "{path}: protobuf and JSON bodies stored differently");
    }
}

#[tokio::test]
async fn kubectl_1_33_generators_send_protobuf_that_decodes_like_json() {
    generators_decode_like_json("1.33").await;
}

#[tokio::test]
async fn kubectl_1_27_generators_send_protobuf_that_decodes_like_json() {
    generators_decode_like_json("1.27").await;
}
