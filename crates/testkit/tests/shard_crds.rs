//! CustomResourceDefinitions (issue #8) on real etcd, against one shard or — with
//! `SHARDPLANE_ROUTER_SHARDS=K`, as CI runs this suite — a router over K shards: a CRD is
//! established on create and its resources are served at once by every shard, with discovery,
//! OpenAPI, pruning against its schema, type errors as 422, name conflicts refused, printer
//! columns, kubectl applying, listing and deleting custom objects, and CRD deletion.

#![recursion_limit = "256"]


use shardplane_testkit::*;
use serde_json::{json, Value};
use shardplane_keyspace::RangeSet;
use std::time::Duration;

const GROUP: &str = "agents.example.com";

fn agent_session_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("agentsessions.{GROUP}")},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"plural": "agentsessions", "kind": "AgentSession", "shortNames": ["as"], "categories": ["agents"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}},
                "additionalPrinterColumns": [
                    {"name": "Agent", "type": "string", "jsonPath": ".spec.agent"},
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["agent"], "properties": {
                        "agent": {"type": "string"}, "model": {"type": "string", "default": "small"}, "replicas": {"type": "integer", "minimum": 0, "maximum": 10},
                        "phase": {"type": "string", "enum": ["Running", "Suspended", "Completed"]},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "deadline": {"type": "string", "format": "date-time"},
                        "tools": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                        "mounts": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["path"],
                                   "items": {"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}, "readOnly": {"type": "boolean"}}}},
                        "limits": {"type": "object"}
                    }},
                    "status": {"type": "object", "properties": {"phase": {"type": "string"}, "replicas": {"type": "integer"}, "selector": {"type": "string"}}}
                }}}
            }]
        }
    })
}

fn session(name: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "AgentSession", "metadata": {"name": name}, "spec": spec})
}

fn condition(crd: &Value, type_: &str) -> String {
    crd["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == type_).map(|c| c["status"].as_str().unwrap_or("").to_owned()).unwrap_or_default()
}

#[tokio::test]
async fn a_crd_is_established_and_its_objects_served_pruned_and_watched() {
    let etcd = Etcd::start().await;
    let s = TestShard::start(test_config(&etcd, RangeSet::full())).await;

    // Upstream's checks: the name must be plural.group.
    let mut wrong = agent_session_crd();
    wrong["metadata"]["name"] = json!("sessions.example.com");
    let (code, body) = s.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &wrong).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "metadata.name", "{body}");

    let (code, crd) = s.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &agent_session_crd()).await;
    assert_eq!(code, 201, "{crd}");
    assert_eq!((condition(&crd, "NamesAccepted").as_str(), condition(&crd, "Established").as_str()), ("True", "True"), "{crd}");
    assert_eq!(crd["status"]["acceptedNames"]["listKind"], "AgentSessionList");
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));

    // Served at once: discovery, OpenAPI and the collection, on whichever shard answers.
    let (code, list) = s.get(&format!("/apis/{GROUP}/v1")).await;
    assert_eq!(code, 200, "{list}");
    let names: Vec<&str> = list["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"agentsessions") && names.contains(&"agentsessions/status"), "{list}");
    let (_, groups) = s.get("/apis").await;
    assert!(groups["groups"].as_array().unwrap().iter().any(|g| g["name"] == GROUP), "{groups}");
    let (code, doc) = s.get(&format!("/openapi/v3/apis/{GROUP}/v1")).await;
    assert_eq!(code, 200);
    assert!(doc["components"]["schemas"]["com.example.agents.v1.AgentSession"]["properties"]["spec"].is_object(), "the CRD's schema is published");

    // A second CRD claiming the same kind in the group is not established.
    let mut twin = agent_session_crd();
    twin["metadata"]["name"] = json!(format!("twins.{GROUP}"));
    twin["spec"]["names"] = json!({"plural": "twins", "kind": "AgentSession"});
    let (code, twin) = s.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &twin).await;
    assert_eq!(code, 201, "{twin}");
    assert_eq!((condition(&twin, "NamesAccepted").as_str(), condition(&twin, "Established").as_str()), ("False", "False"), "{twin}");
    assert_eq!(s.get(&format!("/apis/{GROUP}/v1/twins")).await.0, 404);

    // Objects: unknown fields pruned (and warned about), kept under preserve-unknown-fields;
    // the wrong type is 422 with the field's path.
    let base = format!("/apis/{GROUP}/v1/namespaces/default/agentsessions");
    let (code, rv_list) = s.get(&base).await;
    assert_eq!(code, 200, "{rv_list}");
    let mut w = s.watch(&format!("{base}?watch=1&resourceVersion={}", rv_list["metadata"]["resourceVersion"].as_str().unwrap())).await;
    let (code, created) = s.post(&base, &session("first", json!({"agent": "planner", "model": "m1", "bogus": 1, "extra": {"anything": [1, 2]}, "limits": {"cpu": 1}}))).await;
    assert_eq!(code, 201, "{created}");
    assert!(created["spec"].get("bogus").is_none(), "an unknown field is pruned: {created}");
    assert_eq!(created["spec"]["extra"]["anything"], json!([1, 2]), "preserve-unknown-fields keeps it");
    assert_eq!(created["spec"]["limits"], json!({}), "an object that names no field keeps none");
    assert_eq!(created["metadata"]["generation"], 1);
    let (code, defaulted) = s.post(&base, &session("defaulted", json!({"agent": "planner"}))).await;
    assert_eq!(code, 201, "{defaulted}");
    assert_eq!(defaulted["spec"]["model"], "small", "the schema's default is filled in");
    let (code, bad) = s.post(&base, &session("second", json!({"replicas": "three"}))).await;
    assert_eq!(code, 422, "{bad}");
    assert_eq!(bad["details"]["causes"][0]["field"], "spec.replicas", "{bad}");
    // The schema's value rules: 422 with every cause, at its path.
    let (code, bad) = s.post(&base, &session("fourth", json!({"phase": "Sleeping", "replicas": 11}))).await;
    assert_eq!(code, 422, "{bad}");
    let causes: Vec<(&str, &str)> = bad["details"]["causes"].as_array().unwrap().iter().map(|c| (c["field"].as_str().unwrap(), c["reason"].as_str().unwrap())).collect();
    assert_eq!(causes, [("spec.agent", "FieldValueRequired"), ("spec.phase", "FieldValueNotSupported"), ("spec.replicas", "FieldValueInvalid")], "{bad}");
    // Formats, and the uniqueness of set and map lists.
    let (code, bad) = s.post(&base, &session("fifth", json!({"agent": "a", "deadline": "tomorrow", "tools": ["git", "git"], "mounts": [{"path": "/w"}, {"path": "/w", "readOnly": true}]}))).await;
    assert_eq!(code, 422, "{bad}");
    let causes: Vec<(&str, &str)> = bad["details"]["causes"].as_array().unwrap().iter().map(|c| (c["field"].as_str().unwrap(), c["reason"].as_str().unwrap())).collect();
    assert_eq!(causes, [("spec.deadline", "FieldValueInvalid"), ("spec.mounts[1]", "FieldValueDuplicate"), ("spec.tools[1]", "FieldValueDuplicate")], "{bad}");
    assert!(bad["message"].as_str().unwrap().contains("spec.deadline in body must be of type date-time: \"tomorrow\""), "{bad}");
    let (code, fine) = s.post(&base, &session("sixth", json!({"agent": "a", "deadline": "2026-12-01T09:00:00Z", "tools": ["git", "make"], "mounts": [{"path": "/w"}, {"path": "/x"}]}))).await;
    assert_eq!(code, 201, "{fine}");
    let (code, strict) = s.post(&format!("{base}?fieldValidation=Strict"), &session("third", json!({"bogus": 1}))).await;
    assert_eq!(code, 400, "{strict}");
    assert!(strict["message"].as_str().unwrap().contains("unknown field \"spec.bogus\""), "{strict}");

    let e = w.next_change(Duration::from_secs(10)).await.expect("the watch sees the create");
    assert_eq!((e["type"].as_str(), e["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("first")), "{e}");
    assert_eq!(e["object"]["apiVersion"], format!("{GROUP}/v1"));

    // Status through its subresource only; a spec change bumps the generation.
    let mut update = created.clone();
    update["spec"]["model"] = json!("m2");
    update["status"] = json!({"phase": "Running"});
    let (code, updated) = s.put(&format!("{base}/first"), &update).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!((updated["metadata"]["generation"].as_i64(), updated.get("status").cloned()), (Some(2), None), "{updated}");
    let mut status = updated.clone();
    status["status"] = json!({"phase": "Running"});
    let (code, with_status) = s.put(&format!("{base}/first/status"), &status).await;
    assert_eq!(code, 200, "{with_status}");
    assert_eq!((with_status["status"]["phase"].as_str(), with_status["metadata"]["generation"].as_i64()), (Some("Running"), Some(2)));

    // Scale: read from and written to the CRD's replica paths.
    assert!(names.contains(&"agentsessions/scale"), "{list}");
    let mut status = with_status.clone();
    status["status"]["replicas"] = json!(1);
    status["status"]["selector"] = json!("agent=planner");
    assert_eq!(s.put(&format!("{base}/first/status"), &status).await.0, 200);
    let (code, scale) = s.get(&format!("{base}/first/scale")).await;
    assert_eq!(code, 200, "{scale}");
    assert_eq!((scale["kind"].as_str(), scale["apiVersion"].as_str(), scale["status"]["replicas"].as_i64(), scale["status"]["selector"].as_str()), (Some("Scale"), Some("autoscaling/v1"), Some(1), Some("agent=planner")), "{scale}");
    let mut scaled = scale.clone();
    scaled["spec"]["replicas"] = json!(4);
    let (code, after) = s.put(&format!("{base}/first/scale"), &scaled).await;
    assert_eq!((code, after["spec"]["replicas"].as_i64()), (200, Some(4)), "{after}");
    let (code, after) = s.send("PATCH", &format!("{base}/first/scale"), "application/merge-patch+json", r#"{"spec":{"replicas":6}}"#).await;
    assert_eq!((code, after["spec"]["replicas"].as_i64()), (200, Some(6)), "{after}");
    let (_, obj) = s.get(&format!("{base}/first")).await;
    assert_eq!((obj["spec"]["replicas"].as_i64(), obj["metadata"]["generation"].as_i64()), (Some(6), Some(4)), "the object follows, its generation with it: {obj}");
    let (code, stale) = s.put(&format!("{base}/first/scale"), &scaled).await;
    assert_eq!(code, 409, "a stale resourceVersion in the Scale is a conflict: {stale}");
    let (code, over) = s.send("PATCH", &format!("{base}/first/scale"), "application/merge-patch+json", r#"{"spec":{"replicas":11}}"#).await;
    assert_eq!((code, over["details"]["causes"][0]["field"].as_str()), (422, Some("spec.replicas")), "the schema's maximum holds through scale: {over}");
}

#[tokio::test]
async fn kubectl_applies_lists_and_deletes_custom_objects() {
    let etcd = Etcd::start().await;
    let s = TestShard::start(test_config(&etcd, RangeSet::full())).await;
    let k = Kubectl { bin: kubectl_path("1.33"), server: s.url.clone(), home: tempdir::Dir::new() };
    // kubectl blocks: it runs off the runtime that serves it.
    tokio::task::spawn_blocking(move || {
        let crd = serde_json::to_string(&agent_session_crd()).unwrap();
        k.ok(&["apply", "-f", "-"], Some(&crd));
        k.ok(&["wait", "--for=condition=Established", &format!("crd/agentsessions.{GROUP}"), "--timeout=20s"], None);
        for i in 0..6 {
            let o = serde_json::to_string(&session(&format!("s{i}"), json!({"agent": "coder", "model": "m"}))).unwrap();
            k.ok(&["apply", "-n", "default", "-f", "-"], Some(&o));
        }
        let names = k.ok(&["get", "agentsessions", "-n", "default", "-o", "name"], None);
        let mut got: Vec<&str> = names.lines().collect();
        got.sort();
        let want: Vec<String> = (0..6).map(|i| format!("agentsession.{GROUP}/s{i}")).collect();
        assert_eq!(got, want);
        // The CRD's printer columns, in kubectl's table.
        let table = k.ok(&["get", "agentsessions", "-n", "default"], None);
        let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["NAME", "AGENT", "REPLICAS", "AGE"], "{table}");
        let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
        // An absent value (no spec.replicas) is an empty cell.
        assert_eq!(row.len(), 3, "{table}");
        assert_eq!(&row[..2], ["s0", "coder"], "{table}");
        // The short name resolves through discovery.
        assert_eq!(k.ok(&["get", "as", "-n", "default", "-o", "name"], None).lines().count(), 6);
        // kubectl's own strict validation refuses a field the schema does not have.
        let bogus = serde_json::to_string(&session("bogus", json!({"agent": "coder", "bogus": 1}))).unwrap();
        let out = k.run(&["apply", "-n", "default", "-f", "-"], Some(&bogus));
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("bogus"), "{}", String::from_utf8_lossy(&out.stderr));
        // Deleted, then gone from the list (kubectl waits for the object to go by default).
        k.ok(&["delete", "agentsession", "s0", "-n", "default"], None);
        assert_eq!(k.ok(&["get", "agentsessions", "-n", "default", "-o", "name"], None).lines().count(), 5);
    })
    .await
    .unwrap();
}

/// etcd, a server (a shard, or a router over K shards), and the AgentSession CRD created on it:
/// the CRD's path and the default namespace's collection of sessions.
async fn with_agent_sessions() -> (Etcd, TestShard, String, String) {
    let etcd = Etcd::start().await;
    let s = TestShard::start(test_config(&etcd, RangeSet::full())).await;
    let crd_path = format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/agentsessions.{GROUP}");
    assert_eq!(s.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &agent_session_crd()).await.0, 201);
    (etcd, s, crd_path, format!("/apis/{GROUP}/v1/namespaces/default/agentsessions"))
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects_on_every_shard_first() {
    let (_etcd, s, crd_path, base) = with_agent_sessions().await;
    for i in 0..8 {
        let mut o = session(&format!("s{i}"), json!({"agent": "a"}));
        if i == 0 {
            // One object another controller still holds: the CRD waits for it.
            o["metadata"]["finalizers"] = json!(["example.com/hold"]);
        }
        let (code, body) = s.post(&base, &o).await;
        assert_eq!(code, 201, "{body}");
    }
    let (code, deleting) = s.delete(&crd_path, None).await;
    assert_eq!(code, 200, "{deleting}");
    assert!(deleting["metadata"]["deletionTimestamp"].is_string(), "{deleting}");
    assert_eq!(deleting["metadata"]["finalizers"], json!(["customresourcecleanup.apiextensions.k8s.io"]));
    assert_eq!(condition(&deleting, "Terminating"), "True");

    // Every shard deletes its own objects; the held one waits, marked.
    wait_for(Duration::from_secs(20), || async {
        let (_, list) = s.get(&base).await;
        list["items"].as_array().is_some_and(|items| items.len() == 1 && items[0]["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    let (code, refused) = s.post(&base, &session("late", json!({"agent": "a"}))).await;
    assert_eq!(code, 405, "{refused}");
    assert_eq!(s.get(&crd_path).await.0, 200, "the CRD stays while an object of it does");

    // Once the last object goes, so does the CRD, and its resources are no longer served.
    let (code, released) = s.send("PATCH", &format!("{base}/s0"), "application/merge-patch+json", r#"{"metadata":{"finalizers":null}}"#).await;
    assert_eq!(code, 200, "{released}");
    wait_for(Duration::from_secs(20), || async { s.get(&crd_path).await.0 == 404 }).await;
    wait_for(Duration::from_secs(10), || async { s.get(&base).await.0 == 404 }).await;
}

#[tokio::test]
async fn a_default_added_to_the_crd_shows_on_objects_already_stored() {
    let (etcd, s, crd_path, base) = with_agent_sessions().await;
    let (code, before) = s.post(&base, &session("stored", json!({"agent": "a"}))).await;
    assert_eq!(code, 201, "{before}");
    assert!(before["spec"].get("tier").is_none());

    // The CRD gains a field with a default: objects read from storage get it, as upstream.
    let (_, mut crd) = s.get(&crd_path).await;
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["tier"] = json!({"type": "string", "default": "gold"});
    let (code, body) = s.put(&crd_path, &crd).await;
    assert_eq!(code, 200, "{body}");
    wait_for(Duration::from_secs(10), || async { s.get(&format!("{base}/stored")).await.1["spec"]["tier"] == "gold" }).await;
    let (_, list) = s.get(&base).await;
    assert_eq!(list["items"][0]["spec"]["tier"], "gold", "{list}");
    // Stored as it was: the default is applied on reading, not written back.
    let key = shardplane_keyspace::etcd_layout::object_key(&shardplane_keyspace::ObjectKey::new(GROUP, "agentsessions", "default", "stored"));
    let storage = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let (kv, _) = storage.get(key.as_bytes()).await.unwrap();
    let raw: Value = serde_json::from_slice(&kv.unwrap().value).unwrap();
    assert!(raw["spec"].get("tier").is_none(), "{raw}");
}

/// A read that arrives while a CRD change replaces its resource's cache waits for the new cache
/// instead of timing out on the old one, which no longer advances: every GET and LIST right
/// after a CRD change is answered (a 504 here was the old cache's).
#[tokio::test]
async fn reads_right_after_a_crd_change_are_answered_by_the_new_cache() {
    let (_etcd, s, crd_path, base) = with_agent_sessions().await;
    assert_eq!(s.post(&base, &session("read", json!({"agent": "a"}))).await.0, 201);
    for round in 0..12 {
        let (_, mut crd) = s.get(&crd_path).await;
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][format!("field{round}")] = json!({"type": "string"});
        let (code, body) = s.put(&crd_path, &crd).await;
        assert_eq!(code, 200, "{body}");
        let (code, got) = s.get(&format!("{base}/read")).await;
        assert_eq!(code, 200, "round {round}: {got}");
        let (code, listed) = s.get(&base).await;
        assert_eq!(code, 200, "round {round}: {listed}");
    }
}

/// Several served versions under conversion `None`: an object written through any of them is
/// stored in the storage version and every read, list and watch answers in the version asked.
#[tokio::test]
async fn every_served_version_answers_in_its_own_apiversion() {
    let etcd = Etcd::start().await;
    let s = TestShard::start(test_config(&etcd, RangeSet::full())).await;
    let mut crd = agent_session_crd();
    let v1 = crd["spec"]["versions"][0].clone();
    let mut beta = v1.clone();
    beta["name"] = json!("v1beta1");
    beta["storage"] = json!(false);
    crd["spec"]["versions"] = json!([beta, v1]);
    let (code, created) = s.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &crd).await;
    assert_eq!(code, 201, "{created}");
    let (stable, old) = (format!("/apis/{GROUP}/v1/namespaces/default/agentsessions"), format!("/apis/{GROUP}/v1beta1/namespaces/default/agentsessions"));
    wait_for(Duration::from_secs(10), || async { s.get(&old).await.0 == 200 && s.get(&stable).await.0 == 200 }).await;
    let (_, list) = s.get(&old).await;
    let mut w = s.watch(&format!("{old}?watch=1&resourceVersion={}", list["metadata"]["resourceVersion"].as_str().unwrap())).await;

    let mut o = session("versioned", json!({"agent": "a"}));
    o["apiVersion"] = json!(format!("{GROUP}/v1beta1"));
    let (code, made) = s.post(&old, &o).await;
    assert_eq!((code, made["apiVersion"].as_str()), (201, Some(format!("{GROUP}/v1beta1").as_str())), "{made}");
    let storage = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let key = shardplane_keyspace::etcd_layout::object_key(&shardplane_keyspace::ObjectKey::new(GROUP, "agentsessions", "default", "versioned"));
    let stored: Value = serde_json::from_slice(&storage.get(key.as_bytes()).await.unwrap().0.expect("stored").value).unwrap();
    assert_eq!(stored["apiVersion"], format!("{GROUP}/v1"), "stored in the storage version");

    for (path, version) in [(&stable, "v1"), (&old, "v1beta1")] {
        let want = format!("{GROUP}/{version}");
        let (_, got) = s.get(&format!("{path}/versioned")).await;
        assert_eq!(got["apiVersion"], want, "{got}");
        let (_, list) = s.get(path).await;
        assert_eq!((list["apiVersion"].as_str(), list["items"][0]["apiVersion"].as_str()), (Some(want.as_str()), Some(want.as_str())), "{list}");
        // A patch through either version answers in it, and keeps the storage version stored.
        let (code, patched) = s.send("PATCH", &format!("{path}/versioned"), "application/merge-patch+json", format!(r#"{{"spec":{{"model":"{version}"}}}}"#)).await;
        assert_eq!((code, patched["apiVersion"].as_str()), (200, Some(want.as_str())), "{patched}");
    }
    let stored: Value = serde_json::from_slice(&storage.get(key.as_bytes()).await.unwrap().0.unwrap().value).unwrap();
    assert_eq!((stored["apiVersion"].as_str(), stored["spec"]["model"].as_str()), (Some(format!("{GROUP}/v1").as_str()), Some("v1beta1")));
    for _ in 0..3 {
        let e = w.next_change(Duration::from_secs(10)).await.expect("an event");
        assert_eq!(e["object"]["apiVersion"], format!("{GROUP}/v1beta1"), "the v1beta1 watch sees v1beta1: {e}");
    }
}
