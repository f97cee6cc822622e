//! Integration tests of one shard against a real etcd: every verb, the resourceVersion rules,
//! paging, selectors, watch semantics, errors, namespace lifecycle, and range ownership.


use shardplane_testkit::*;
use serde_json::{json, Value};
use shardplane_keyspace::{HashRange, ObjectKey, RangeSet};
use std::time::Duration;

const CM: &str = "/api/v1/namespaces/demo/configmaps";
const T: Duration = Duration::from_secs(10);

async fn setup() -> (Etcd, TestShard) {
    let etcd = Etcd::start().await;
    let shard = TestShard::start(test_config(&etcd, RangeSet::full())).await;
    shard.namespace("demo").await;
    (etcd, shard)
}


#[tokio::test]
async fn crud_with_server_set_fields_and_preconditions() {
    let (_etcd, s) = setup().await;
    let (code, created) = s.post(CM, &configmap("a", json!({"app": "web"}))).await;
    assert_eq!(code, 201, "{created}");
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    assert_eq!(uid.len(), 36);
    assert!(created["metadata"]["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(created["metadata"]["namespace"], "demo");
    let rv1 = rv(&created);

    // GET returns the same object (consistent read waits for the cache).
    let (code, got) = s.get(&format!("{CM}/a")).await;
    assert_eq!(code, 200);
    assert_eq!(got, created);

    // Duplicate create: 409 AlreadyExists.
    let (code, st) = s.post(CM, &configmap("a", json!({}))).await;
    assert_eq!((code, st["reason"].as_str()), (409, Some("AlreadyExists")));
    assert_eq!(st["message"], "configmaps \"a\" already exists");

    // Update with the current RV succeeds and moves the RV; a stale RV conflicts.
    let mut upd = created.clone();
    upd["data"]["k"] = "changed".into();
    let (code, updated) = s.put(&format!("{CM}/a"), &upd).await;
    assert_eq!(code, 200, "{updated}");
    assert!(rv(&updated) > rv1);
    assert_eq!(updated["metadata"]["uid"], uid.as_str());
    let (code, st) = s.put(&format!("{CM}/a"), &upd).await;
    assert_eq!((code, st["reason"].as_str()), (409, Some("Conflict")));
    // Unconditional update (no RV) succeeds.
    upd["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    upd["data"]["k"] = "again".into();
    assert_eq!(s.put(&format!("{CM}/a"), &upd).await.0, 200);

    // The three patch types.
    let (code, p) = s.send("PATCH", &format!("{CM}/a"), "application/merge-patch+json", r#"{"metadata":{"labels":{"tier":"front"}}}"#).await;
    assert_eq!((code, &p["metadata"]["labels"]), (200, &json!({"app": "web", "tier": "front"})));
    let (code, p) = s.send("PATCH", &format!("{CM}/a"), "application/json-patch+json", r#"[{"op":"replace","path":"/data/k","value":"jp"}]"#).await;
    assert_eq!((code, &p["data"]["k"]), (200, &json!("jp")));
    let (code, p) = s.send("PATCH", &format!("{CM}/a"), "application/strategic-merge-patch+json", r#"{"metadata":{"labels":{"app":null}}}"#).await;
    assert_eq!((code, &p["metadata"]["labels"]), (200, &json!({"tier": "front"})));
    // A failing JSON patch test op is 422; a stale RV in a merge patch is 409.
    let (code, _) = s.send("PATCH", &format!("{CM}/a"), "application/json-patch+json", r#"[{"op":"test","path":"/data/k","value":"nope"}]"#).await;
    assert_eq!(code, 422);
    let (code, st) = s.send("PATCH", &format!("{CM}/a"), "application/merge-patch+json", r#"{"metadata":{"resourceVersion":"1"}}"#).await;
    assert_eq!((code, st["reason"].as_str()), (409, Some("Conflict")));
    let (code, _) = s.send("PATCH", &format!("{CM}/a"), "text/plain", "x").await;
    assert_eq!(code, 415);

    // DELETE with a wrong uid precondition conflicts; then deletes, returning a Success Status.
    let (code, st) = s.delete(&format!("{CM}/a"), Some(&json!({"preconditions": {"uid": "wrong"}}))).await;
    assert_eq!((code, st["reason"].as_str()), (409, Some("Conflict")));
    let (code, st) = s.delete(&format!("{CM}/a"), None).await;
    assert_eq!((code, st["status"].as_str(), st["details"]["uid"].as_str()), (200, Some("Success"), Some(uid.as_str())));
    let (code, st) = s.get(&format!("{CM}/a")).await;
    assert_eq!((code, st["reason"].as_str()), (404, Some("NotFound")));
    assert_eq!(s.delete(&format!("{CM}/a"), None).await.0, 404);
}

#[tokio::test]
async fn writes_follow_upstream_rules() {
    let (_etcd, s) = setup().await;
    // generateName.
    let (code, g) = s.post(CM, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}})).await;
    assert_eq!(code, 201);
    assert!(g["metadata"]["name"].as_str().unwrap().starts_with("gen-") && g["metadata"]["name"].as_str().unwrap().len() == 9);
    // dryRun=All persists nothing.
    let (code, _) = s.post(&format!("{CM}?dryRun=All"), &configmap("dry", json!({}))).await;
    assert_eq!(code, 201);
    assert_eq!(s.get(&format!("{CM}/dry")).await.0, 404);
    // Generation moves only with spec; the status subresource ignores spec; main ignores status.
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    let (code, d) = s.post("/apis/apps/v1/namespaces/demo/deployments", &deploy).await;
    assert_eq!((code, &d["metadata"]["generation"]), (201, &json!(1)));
    let path = "/apis/apps/v1/namespaces/demo/deployments/web";
    let (_, d) = s.send("PATCH", path, "application/merge-patch+json", r#"{"metadata":{"labels":{"x":"y"}}}"#).await;
    assert_eq!(d["metadata"]["generation"], 1);
    let (_, d) = s.send("PATCH", path, "application/strategic-merge-patch+json", r#"{"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"c","image":"nginx:2"}]}}},"status":{"replicas":9}}"#).await;
    // The status is upstream's empty struct: the patch's status was ignored.
    assert_eq!((&d["metadata"]["generation"], &d["spec"]["replicas"], &d["status"]), (&json!(2), &json!(3), &json!({})));
    // Upstream's defaults are filled in on every write; the patch merged the container, so the
    // pull policy defaulted for the untagged image at create stays.
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"],
        json!([{"name": "c", "image": "nginx:2", "imagePullPolicy": "Always", "resources": {}, "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}])
    );
    assert_eq!((&d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], &d["spec"]["revisionHistoryLimit"], &d["spec"]["template"]["spec"]["restartPolicy"]), (&json!("25%"), &json!(10), &json!("Always")));
    let (code, d) = s.send("PATCH", &format!("{path}/status"), "application/merge-patch+json", r#"{"spec":{"replicas":7},"status":{"replicas":3}}"#).await;
    assert_eq!((code, &d["spec"]["replicas"], &d["status"]["replicas"], &d["metadata"]["generation"]), (200, &json!(3), &json!(3), &json!(2)));
    // Finalizers: delete marks, removing the last finalizer deletes.
    let mut fin = configmap("fin", json!({}));
    fin["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(s.post(CM, &fin).await.0, 201);
    let (code, marked) = s.delete(&format!("{CM}/fin"), None).await;
    assert_eq!(code, 200);
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(s.get(&format!("{CM}/fin")).await.0, 200);
    let (code, _) = s.send("PATCH", &format!("{CM}/fin"), "application/merge-patch+json", r#"{"metadata":{"finalizers":null}}"#).await;
    assert_eq!(code, 200);
    wait_for(T, || async { s.get(&format!("{CM}/fin")).await.0 == 404 }).await;
}

#[tokio::test]
async fn bad_input_gets_upstream_status() {
    let (_etcd, s) = setup().await;
    let cases: Vec<(&str, String, &str, Vec<u8>, u16, &str)> = vec![
        ("POST", CM.to_string(), "application/json", b"{not json".to_vec(), 400, "BadRequest"),
        ("POST", CM.to_string(), "application/json", b"[1,2]".to_vec(), 400, "BadRequest"),
        ("POST", CM.to_string(), "application/json", br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}"#.to_vec(), 400, "BadRequest"),
        ("POST", CM.to_string(), "application/json", br#"{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"x"}}"#.to_vec(), 400, "BadRequest"),
        ("POST", CM.to_string(), "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Bad_Name"}}"#.to_vec(), 422, "Invalid"),
        ("POST", CM.to_string(), "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","labels":{"a":"b c"}}}"#.to_vec(), 422, "Invalid"),
        ("POST", CM.to_string(), "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}"#.to_vec(), 422, "Invalid"),
        ("POST", CM.to_string(), "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":5}"#.to_vec(), 400, "BadRequest"),
        ("POST", CM.to_string(), "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","labels":{"a":1}}}"#.to_vec(), 400, "BadRequest"),
        ("POST", CM.to_string(), "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"other"}}"#.to_vec(), 400, "BadRequest"),
        ("POST", "/api/v1/namespaces/missing/configmaps".to_string(), "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#.to_vec(), 404, "NotFound"),
        ("POST", CM.to_string(), "application/vnd.kubernetes.protobuf", b"k8s\0\xff".to_vec(), 400, "BadRequest"),
        ("POST", CM.to_string(), "application/yaml-ish", b"a: b".to_vec(), 415, "UnsupportedMediaType"),
        ("POST", CM.to_string(), "application/json", vec![b' '; 3 * 1024 * 1024 + 10], 413, "RequestEntityTooLarge"),
        ("PUT", format!("{CM}/other"), "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#.to_vec(), 400, "BadRequest"),
        ("GET", format!("{CM}?limit=-1"), "", vec![], 422, "Invalid"),
        ("GET", format!("{CM}?limit=abc"), "", vec![], 400, "BadRequest"),
        ("GET", format!("{CM}?continue=garbage!"), "", vec![], 400, "BadRequest"),
        ("GET", format!("{CM}?labelSelector=a%20in%20("), "", vec![], 400, "BadRequest"),
        ("GET", format!("{CM}?fieldSelector=spec.nope%3Dx"), "", vec![], 400, "BadRequest"),
        ("GET", format!("{CM}?resourceVersion=abc"), "", vec![], 400, "BadRequest"),
        ("GET", format!("{CM}?resourceVersionMatch=Exact"), "", vec![], 422, "Invalid"),
        ("GET", format!("{CM}?resourceVersion=0&resourceVersionMatch=Exact"), "", vec![], 422, "Invalid"),
        ("GET", format!("{CM}?sendInitialEvents=true"), "", vec![], 422, "Invalid"),
        ("GET", format!("{CM}?watch=1&sendInitialEvents=true"), "", vec![], 422, "Invalid"),
        ("GET", format!("{CM}?resourceVersion=999999999&resourceVersionMatch=NotOlderThan"), "", vec![], 504, "Timeout"),
        ("GET", "/api/v1/nothings".to_string(), "", vec![], 404, "NotFound"),
        ("POST", format!("{CM}/x"), "application/json", b"{}".to_vec(), 405, "MethodNotAllowed"),
        // An unknown subresource is a path upstream has no route for: 404, whatever the verb.
        ("GET", "/api/v1/namespaces/demo/configmaps/x/bogus".to_string(), "", vec![], 404, "NotFound"),
        ("PUT", "/api/v1/namespaces/demo/configmaps/x/status".to_string(), "application/json", b"{}".to_vec(), 404, "NotFound"),
        ("GET", "/api/v1/namespaces/demo/configmaps/x".to_string(), "", vec![], 404, "NotFound"),
    ];
    for (method, path, ct, body, code, reason) in cases {
        let (got, st) = s.send(method, &path, if ct.is_empty() { "application/json" } else { ct }, body).await;
        assert_eq!((got, st["kind"].as_str(), st["reason"].as_str(), st["code"].as_u64()), (code, Some("Status"), Some(reason), Some(code as u64)), "{method} {path}: {st}");
    }
    let (_, st) = s.post(CM, &json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Bad_Name"}})).await;
    assert_eq!(st["details"]["causes"][0]["field"], "metadata.name");
    // Nothing was written by any of the above.
    let (_, list) = s.get(CM).await;
    assert_eq!(list["items"], json!([]));
    // An Accept nothing satisfies is 406; kubectl's Table-first list is answered in JSON.
    let r = client().get(format!("{}{CM}", s.url)).header("accept", "application/vnd.kubernetes.protobuf").send().await.unwrap();
    assert_eq!(r.status(), 406);
    let r = client().get(format!("{}{CM}", s.url)).header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json").send().await.unwrap();
    assert_eq!(r.status(), 200);
}

/// Numbers at the edges of their types, in every query parameter and body field that takes one:
/// each request gets an answer (a debug build panics on an overflow, which resets the
/// connection), never a 5xx but upstream's 504 Timeout for a resourceVersion that is not there
/// yet, a `Status` whenever it is not a success, and the server is still up afterwards.
#[tokio::test]
async fn numbers_at_the_edges_of_their_types_get_an_answer() {
    let (_etcd, s) = setup().await;
    assert_eq!(s.post(CM, &configmap("a", json!({}))).await.0, 201);
    assert_eq!(s.post(CM, &configmap("b", json!({}))).await.0, 201);
    assert_eq!(s.post(CM, &configmap("c", json!({}))).await.0, 201);
    let max = i64::MAX;
    let token = |rv: i64| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!(r#"{{"v":"meta.k8s.io/v1","rv":{rv},"start":"demo/a\u0000"}}"#))
    };
    // (method, path, body, the code upstream gives when it is one code)
    let cases: Vec<(&str, String, Vec<u8>, Option<u16>)> = vec![
        ("GET", format!("{CM}?limit={max}"), vec![], Some(200)),
        ("GET", format!("{CM}?limit={max}&resourceVersion=0"), vec![], Some(200)),
        ("GET", format!("{CM}?limit=1&continue={}", token(max)), vec![], None),
        ("GET", format!("{CM}?limit={max}&continue={}", token(1)), vec![], None),
        ("GET", format!("{CM}?limit=18446744073709551615"), vec![], Some(400)),
        ("GET", format!("{CM}?limit=99999999999999999999999"), vec![], Some(400)),
        ("GET", format!("{CM}?resourceVersion={max}&resourceVersionMatch=NotOlderThan"), vec![], Some(504)),
        ("GET", format!("{CM}?resourceVersion={}&resourceVersionMatch=Exact", u64::MAX), vec![], Some(504)),
        ("GET", format!("{CM}?resourceVersion={}&resourceVersionMatch=Exact&limit={max}", u64::MAX), vec![], Some(504)),
        ("GET", format!("{CM}?resourceVersion=18446744073709551616"), vec![], Some(400)),
        ("GET", format!("{CM}/a?resourceVersion={}", u64::MAX), vec![], None),
        ("GET", format!("{CM}?watch=1&resourceVersion={max}&timeoutSeconds=1"), vec![], None),
        ("GET", format!("{CM}?watch=1&resourceVersion={}&timeoutSeconds=1", u64::MAX), vec![], None),
        ("GET", format!("{CM}?watch=1&timeoutSeconds=18446744073709551615"), vec![], Some(400)),
        ("GET", format!("{CM}?watch=1&timeoutSeconds={}&resourceVersion=1", i64::MIN), vec![], None),
        ("DELETE", format!("{CM}/a?gracePeriodSeconds={max}"), vec![], None),
        ("DELETE", format!("{CM}/b"), format!(r#"{{"gracePeriodSeconds":{}}}"#, i64::MIN).into_bytes(), None),
        ("DELETE", format!("{CM}/c"), br#"{"gracePeriodSeconds":18446744073709551616}"#.to_vec(), Some(400)),
    ];
    let c = shardplane_http::outbound::client_builder().timeout(Duration::from_secs(20)).build().unwrap();
    for (method, path, body, want) in cases {
        // A watch that starts is answered with its headers: receiving them is the answer.
        let req = c.request(method.parse().unwrap(), format!("{}{path}", s.url)).header("content-type", "application/json").body(body);
        let r = req.send().await.unwrap_or_else(|e| panic!("{method} {path}: no answer: {e}"));
        let code = r.status().as_u16();
        if let Some(want) = want {
            assert_eq!(code, want, "{method} {path}");
        }
        assert!(code < 500 || code == 504, "{method} {path}: {code}");
        if !(200..300).contains(&code) {
            let st: Value = r.json().await.unwrap_or_else(|e| panic!("{method} {path}: {code} without a Status: {e}"));
            assert_eq!((st["kind"].as_str(), st["code"].as_u64()), (Some("Status"), Some(code as u64)), "{method} {path}: {st}");
        }
    }
    assert_eq!(client().get(format!("{}/readyz", s.url)).send().await.unwrap().status(), 200);
    // The refused delete left its object.
    assert_eq!(s.get(&format!("{CM}/c")).await.0, 200);
}

#[tokio::test]
async fn list_paging_selectors_and_resource_versions() {
    let (_etcd, s) = setup().await;
    s.namespace("other").await;
    for i in 0..23 {
        let color = if i % 3 == 0 { "red" } else { "blue" };
        assert_eq!(s.post(CM, &configmap(&format!("cm-{i:02}"), json!({"color": color, "n": i.to_string()}))).await.0, 201);
    }
    assert_eq!(s.post("/api/v1/namespaces/other/configmaps", &configmap("elsewhere", json!({"color": "red"}))).await.0, 201);
    let (_, full) = s.get(CM).await;
    let full_rv = rv(&full);
    let names: Vec<String> = full["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect();
    assert_eq!(names, (0..23).map(|i| format!("cm-{i:02}")).collect::<Vec<_>>());

    // Paging: every page at the first page's RV, in order, remainingItemCount consistent.
    let mut got = Vec::new();
    let mut cont = String::new();
    let mut page_rv = None;
    loop {
        let q = if cont.is_empty() { format!("{CM}?limit=5") } else { format!("{CM}?limit=5&continue={cont}") };
        let (code, page) = s.get(&q).await;
        assert_eq!(code, 200, "{page}");
        let this_rv = rv(&page);
        assert_eq!(*page_rv.get_or_insert(this_rv), this_rv);
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 5);
        got.extend(items.iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()));
        match page["metadata"]["continue"].as_str() {
            Some(c) => {
                assert_eq!(page["metadata"]["remainingItemCount"].as_u64().unwrap() as usize, 23 - got.len());
                cont = c.to_owned();
                // Writes while paging do not show up in later pages.
                let _ = s.post(CM, &configmap(&format!("zz-{}", got.len()), json!({}))).await;
            }
            None => break,
        }
    }
    assert_eq!(got, names);

    // Exact list at an older RV shows the state then.
    assert_eq!(s.delete(&format!("{CM}/cm-00"), None).await.0, 200);
    let (code, old) = s.get(&format!("{CM}?resourceVersion={full_rv}&resourceVersionMatch=Exact")).await;
    assert_eq!((code, rv(&old), old["items"].as_array().unwrap().len()), (200, full_rv, 23));
    let (_, now) = s.get(CM).await;
    assert!(now["items"].as_array().unwrap().iter().all(|i| i["metadata"]["name"] != "cm-00"));
    // RV=0 is served from the cache; NotOlderThan is at least as new.
    let (code, any) = s.get(&format!("{CM}?resourceVersion=0")).await;
    assert_eq!(code, 200);
    assert!(rv(&any) >= full_rv);
    let (_, nol) = s.get(&format!("{CM}?resourceVersion={full_rv}&resourceVersionMatch=NotOlderThan")).await;
    assert!(rv(&nol) >= full_rv);

    // Label selectors (set-based too) and field selectors.
    let (_, red) = s.get(&format!("{CM}?labelSelector=color%3Dred")).await;
    assert_eq!(red["items"].as_array().unwrap().len(), 7); // 3,6,..,21 (0 deleted)
    let (_, sel) = s.get(&format!("{CM}?labelSelector=color%20in%20(red),n%20notin%20(3,6)")).await;
    assert_eq!(sel["items"].as_array().unwrap().len(), 5);
    let (_, by_name) = s.get(&format!("{CM}?fieldSelector=metadata.name%3Dcm-05")).await;
    assert_eq!(by_name["items"].as_array().unwrap().len(), 1);
    let (_, all_ns) = s.get("/api/v1/configmaps?labelSelector=color%3Dred").await;
    assert_eq!(all_ns["items"].as_array().unwrap().len(), 8);
    // A limited, selected list has a continue token but no remainingItemCount.
    let (_, lim) = s.get(&format!("{CM}?labelSelector=color%3Dred&limit=2")).await;
    assert!(lim["metadata"]["continue"].is_string() && lim["metadata"].get("remainingItemCount").is_none());
    // KEP-5866 shardSelector: complementary halves partition the list and are echoed.
    let lo = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
    let hi = "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')";
    let (_, a) = s.get(&format!("{CM}?shardSelector={}", urlencode(lo))).await;
    let (_, b) = s.get(&format!("{CM}?shardSelector={}", urlencode(hi))).await;
    assert_eq!(a["metadata"]["shardInfo"]["selector"], lo);
    assert_eq!(a["items"].as_array().unwrap().len() + b["items"].as_array().unwrap().len(), now["items"].as_array().unwrap().len());
    let (code, _) = s.get(&format!("{CM}?shardSelector={}", urlencode("shardRange(object.metadata.uid, '0x0', '0x1')"))).await;
    assert_eq!(code, 400);
}

fn urlencode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

#[tokio::test]
async fn watch_semantics() {
    let etcd = Etcd::start().await;
    let mut cfg = test_config(&etcd, RangeSet::full());
    cfg.cache.history_max_events = 20;
    let s = TestShard::start(cfg).await;
    s.namespace("demo").await;
    let (_, a) = s.post(CM, &configmap("a", json!({"color": "red"}))).await;
    let start = rv(&a);

    // From an RV: exactly the later changes, in order, no initial state.
    let mut all = s.watch(&format!("{CM}?watch=1&resourceVersion={start}")).await;
    let mut red = s.watch(&format!("{CM}?watch=1&resourceVersion={start}&labelSelector=color%3Dred")).await;
    let (_, b) = s.post(CM, &configmap("b", json!({"color": "blue"}))).await;
    let (_, a2) = s.send("PATCH", &format!("{CM}/a"), "application/merge-patch+json", r#"{"metadata":{"labels":{"color":"blue"}}}"#).await;
    let (_, a3) = s.send("PATCH", &format!("{CM}/a"), "application/merge-patch+json", r#"{"metadata":{"labels":{"color":"red"}}}"#).await;
    s.delete(&format!("{CM}/a"), None).await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let e = all.next_change(T).await.expect("event");
        seen.push((e["type"].as_str().unwrap().to_owned(), rv(&e["object"])));
    }
    let del_rv = seen[3].1;
    assert_eq!(seen, vec![("ADDED".into(), rv(&b)), ("MODIFIED".into(), rv(&a2)), ("MODIFIED".into(), rv(&a3)), ("DELETED".into(), del_rv)]);
    assert!(del_rv > rv(&a3));
    // The selector watch sees the transitions as DELETED / ADDED, with the object equal to the write.
    let mut red_seen = Vec::new();
    for _ in 0..3 {
        let e = red.next_change(T).await.expect("event");
        red_seen.push((e["type"].as_str().unwrap().to_owned(), e["object"].clone()));
    }
    assert_eq!(red_seen[0], ("DELETED".to_owned(), a2.clone()));
    assert_eq!(red_seen[1], ("ADDED".to_owned(), a3.clone()));
    assert_eq!(red_seen[2].0, "DELETED");

    // RV unset: synthetic ADDED for the current state first.
    let mut fresh = s.watch(&format!("{CM}?watch=1")).await;
    let e = fresh.next_change(T).await.unwrap();
    assert_eq!((e["type"].as_str(), e["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("b")));

    // sendInitialEvents: state, then one initial-events-end bookmark, then changes.
    let mut wl = s.watch(&format!("{CM}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")).await;
    let e = wl.next(T).await.unwrap();
    assert_eq!((e["type"].as_str(), e["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("b")));
    let bm = wl.next(T).await.unwrap();
    assert_eq!(bm["type"], "BOOKMARK");
    assert_eq!(bm["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    assert!(bm["object"]["metadata"]["annotations"]["kubernetes.io/initial-events-list-blueprint"].is_string());
    assert!(rv(&bm["object"]) >= rv(&b));
    let (_, c) = s.post(CM, &configmap("c", json!({}))).await;
    let e = wl.next_change(T).await.unwrap();
    assert_eq!((e["type"].as_str(), rv(&e["object"])), (Some("ADDED"), rv(&c)));
    // Bookmarks arrive on an idle stream when allowed, with an RV no older than what was seen.
    let bm = loop {
        let e = wl.next(T).await.expect("bookmark");
        if e["type"] == "BOOKMARK" {
            break e;
        }
    };
    assert!(rv(&bm["object"]) >= rv(&c));
    assert_eq!(bm["object"]["kind"], "ConfigMap");

    // timeoutSeconds ends the stream.
    let mut short = s.watch(&format!("{CM}?watch=1&resourceVersion={}&timeoutSeconds=1", rv(&c))).await;
    assert!(short.next(Duration::from_secs(5)).await.is_none());

    // Push the start RV out of the bounded history (20 events per shard; through a router of up
    // to 4 shards each shard sees about a quarter of the writes): a watch from it gets a 410.
    for i in 0..120 {
        s.post(CM, &configmap(&format!("h{i}"), json!({}))).await;
    }
    let mut old = s.watch(&format!("{CM}?watch=1&resourceVersion={start}")).await;
    let e = old.next(T).await.unwrap();
    assert_eq!((e["type"].as_str(), e["object"]["code"].as_u64(), e["object"]["reason"].as_str()), (Some("ERROR"), Some(410), Some("Expired")));
    assert!(e["object"]["message"].as_str().unwrap().starts_with(&format!("too old resource version: {start} (")));
    // And an exact LIST there is 410 Expired as well.
    let (code, st) = s.get(&format!("{CM}?resourceVersion={start}&resourceVersionMatch=Exact")).await;
    assert_eq!((code, st["reason"].as_str()), (410, Some("Expired")));
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_contents_then_itself() {
    let (_etcd, s) = setup().await;
    s.namespace("keep").await;
    for i in 0..5 {
        assert_eq!(s.post(CM, &configmap(&format!("c{i}"), json!({}))).await.0, 201);
    }
    assert_eq!(s.post("/api/v1/namespaces/keep/configmaps", &configmap("stay", json!({}))).await.0, 201);
    let (code, ns) = s.delete("/api/v1/namespaces/demo", None).await;
    assert_eq!((code, ns["status"]["phase"].as_str()), (200, Some("Terminating")));
    // Creating in a terminating namespace is forbidden.
    let (code, st) = s.post(CM, &configmap("late", json!({}))).await;
    assert!(code == 403 || code == 404, "{st}");
    wait_for(T, || async { s.get("/api/v1/namespaces/demo").await.0 == 404 }).await;
    let (_, left) = s.get(CM).await;
    assert_eq!(left["items"], json!([]));
    assert_eq!(s.get("/api/v1/namespaces/keep/configmaps/stay").await.0, 200);
}

/// Creates racing a namespace's deletion (RFC 0017): every create that succeeded committed
/// before the namespace turned Terminating (its resourceVersion is below the Terminating one),
/// every later one is refused with 403 NamespaceTerminating (or 404 once it is gone), and a
/// namespace of the same name created again takes creates at once.
#[tokio::test]
async fn creates_racing_a_namespace_deletion_never_land_after_it() {
    const WRITERS: usize = 8;
    let (_etcd, s) = setup().await;
    for round in 0..3 {
        let ns = format!("race-{round}");
        s.namespace(&ns).await;
        let path = format!("/api/v1/namespaces/{ns}/configmaps");
        let created = std::sync::atomic::AtomicUsize::new(0);
        let writer = |w: usize| {
            let (s, path, created) = (&s, &path, &created);
            async move {
                let mut answers = Vec::new();
                // Bounded, so that a deletion that never takes effect fails the test, not hangs it.
                for i in 0..5000 {
                    let name = format!("w{w}-{i}");
                    let (code, body) = s.post(path, &configmap(&name, json!({}))).await;
                    let refused = code != 201;
                    if !refused {
                        created.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    answers.push((name, code, body));
                    if refused {
                        break;
                    }
                }
                answers
            }
        };
        let deleter = async {
            wait_for(T, || async { created.load(std::sync::atomic::Ordering::Relaxed) >= 4 * WRITERS }).await;
            s.delete(&format!("/api/v1/namespaces/{ns}"), None).await
        };
        let (answers, (code, terminating)) = tokio::join!(futures::future::join_all((0..WRITERS).map(writer)), deleter);
        assert_eq!((code, terminating["status"]["phase"].as_str()), (200, Some("Terminating")), "{terminating}");
        let at = rv(&terminating);
        assert!(answers.iter().all(|a| a.last().is_some_and(|(_, code, _)| *code != 201)), "every writer was refused in the end");
        for (name, code, body) in answers.iter().flatten() {
            match code {
                201 => assert!(rv(body) < at, "{ns}/{name} created at {} after its namespace turned Terminating at {at}", rv(body)),
                403 => {
                    assert_eq!(body["reason"], "Forbidden", "{body}");
                    assert_eq!(body["details"]["causes"][0]["reason"], "NamespaceTerminating", "{body}");
                    assert_eq!(body["message"], format!("configmaps \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated"));
                }
                404 => assert_eq!(body["reason"], "NotFound", "{body}"),
                _ => panic!("{ns}/{name}: {code} {body}"),
            }
        }
        wait_for(Duration::from_secs(20), || async { s.get(&format!("/api/v1/namespaces/{ns}")).await.0 == 404 }).await;
        assert_eq!(s.get(&path).await.1["items"], json!([]));
        // The same name again: known to no follower yet, admitted by a read.
        s.namespace(&ns).await;
        assert_eq!(s.post(&path, &configmap("again", json!({}))).await.0, 201);
    }
}

#[tokio::test]
async fn two_shards_on_halves_serve_disjoint_sets_whose_union_is_everything() {
    let etcd = Etcd::start().await;
    let halves = HashRange::split_even(2);
    let a = TestShard::start(test_config(&etcd, RangeSet::from_disjoint(vec![halves[0]]).unwrap())).await;
    let b = TestShard::start(test_config(&etcd, RangeSet::from_disjoint(vec![halves[1]]).unwrap())).await;
    let owner = |ns: &str, name: &str, res: &str| if halves[0].contains(ObjectKey::new("", res, ns, name).hash()) { &a } else { &b };
    owner("", "demo", "namespaces").namespace("demo").await;
    let mut names = Vec::new();
    for i in 0..40 {
        let name = format!("obj-{i}");
        let (own, other) = if std::ptr::eq(owner("demo", &name, "configmaps"), &a) { (&a, &b) } else { (&b, &a) };
        // The non-owner refuses with 421 NotOwned; the owner accepts.
        let (code, st) = other.post(CM, &configmap(&name, json!({}))).await;
        assert_eq!((code, st["reason"].as_str()), (421, Some("NotOwned")), "{st}");
        assert_eq!(own.post(CM, &configmap(&name, json!({}))).await.0, 201);
        assert_eq!(other.get(&format!("{CM}/{name}")).await.0, 421);
        names.push(name);
    }
    let (_, la) = a.get(CM).await;
    let (_, lb) = b.get(CM).await;
    let mut union: Vec<String> = la["items"].as_array().unwrap().iter().chain(lb["items"].as_array().unwrap()).map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect();
    let (na, nb) = (la["items"].as_array().unwrap().len(), lb["items"].as_array().unwrap().len());
    assert!(na > 0 && nb > 0, "both halves hold objects ({na}, {nb})");
    union.sort();
    let before = union.len();
    union.dedup();
    assert_eq!(before, union.len(), "no object on both shards");
    names.sort();
    assert_eq!(union, names);

    // Deleting the namespace on its owner empties it on both shards, then removes it.
    let ns_owner = owner("", "demo", "namespaces");
    let (code, ns) = ns_owner.delete("/api/v1/namespaces/demo", None).await;
    assert_eq!((code, ns["status"]["phase"].as_str()), (200, Some("Terminating")));
    wait_for(Duration::from_secs(20), || async { ns_owner.get("/api/v1/namespaces/demo").await.0 == 404 }).await;
    for shard in [&a, &b] {
        let (_, left) = shard.get(CM).await;
        assert_eq!(left["items"], json!([]));
    }
}

#[tokio::test]
async fn field_validation_drops_warns_or_refuses_unknown_fields() {
    let (_etcd, s) = setup().await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fv", "bogus": 1}, "data": {"k": "v"}, "extra": {"x": 1}});
    // Strict: 400 naming every unknown field; nothing written.
    let (code, st) = s.post(&format!("{CM}?fieldValidation=Strict"), &body).await;
    assert_eq!((code, st["reason"].as_str()), (400, Some("BadRequest")));
    assert_eq!(st["message"], "strict decoding error: unknown field \"extra\", unknown field \"metadata.bogus\"");
    assert_eq!(s.get(&format!("{CM}/fv")).await.0, 404);
    // Warn (the default): stored without the unknown fields, one Warning header each.
    let r = client().post(format!("{}{CM}", s.url)).header("content-type", "application/json").body(serde_json::to_vec(&body).unwrap()).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let warnings: Vec<String> = r.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_owned()).collect();
    assert_eq!(warnings, [r#"299 - "unknown field \"extra\"""#, r#"299 - "unknown field \"metadata.bogus\"""#]);
    let (_, stored) = s.get(&format!("{CM}/fv")).await;
    assert!(stored.get("extra").is_none() && stored["metadata"].get("bogus").is_none());
    assert_eq!(stored["data"]["k"], "v");
    // Ignore: dropped silently; a patch that adds an unknown field is dropped the same way.
    let r = client()
        .patch(format!("{}{CM}/fv?fieldValidation=Ignore", s.url))
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"extra":1,"data":{"k":"w"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("warning").is_none());
    let patched: Value = r.json().await.unwrap();
    assert!(patched.get("extra").is_none());
    assert_eq!(patched["data"]["k"], "w");
    let (code, _) = s.post(&format!("{CM}?fieldValidation=Loose"), &configmap("x", json!({}))).await;
    assert_eq!(code, 400);
    // A patch that gives a field the wrong type is refused and changes nothing.
    let (code, st) = s.send("PATCH", &format!("{CM}/fv"), "application/merge-patch+json", r#"{"data":{"k":[1]}}"#).await;
    assert_eq!((code, st["reason"].as_str()), (400, Some("BadRequest")), "{st}");
    assert_eq!(s.get(&format!("{CM}/fv")).await.1["data"]["k"], "w");
    // The OpenAPI documents kubectl reads.
    let (code, index) = s.get("/openapi/v3").await;
    assert_eq!(code, 200);
    let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"].as_str().unwrap().to_owned();
    let (code, doc) = s.get(&url).await;
    assert_eq!(code, 200);
    assert_eq!(doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"][0]["kind"], "Deployment");
    assert_eq!(s.get("/openapi/v3/apis/nope/v1").await.0, 404);
}

#[tokio::test]
async fn tables_and_partial_metadata_as_upstream_renders_them() {
    let (_etcd, s) = setup().await;
    let get = |path: String, accept: &'static str| {
        let url = format!("{}{path}", s.url);
        async move {
            let r = client().get(url).header("accept", accept).send().await.unwrap();
            let ct = r.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
            (r.status().as_u16(), ct, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    const KUBECTL: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1"}, "spec": {"nodeName": "n1", "containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
    assert_eq!(s.post("/api/v1/namespaces/demo/pods", &pod).await.0, 201);
    let (code, ct, t) = get("/api/v1/namespaces/demo/pods".into(), KUBECTL).await;
    assert_eq!((code, ct.as_str(), t["kind"].as_str(), t["apiVersion"].as_str()), (200, "application/json;as=Table;v=v1;g=meta.k8s.io", Some("Table"), Some("meta.k8s.io/v1")));
    let cols: Vec<&str> = t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(cols, ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]);
    let cells = &t["rows"][0]["cells"];
    assert_eq!((&cells[0], &cells[1], &cells[2], &cells[3], &cells[6]), (&json!("p1"), &json!("0/2"), &json!("Pending"), &json!("0"), &json!("n1")));
    assert!(cells[4].as_str().unwrap().ends_with('s'));
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    assert!(t["metadata"]["resourceVersion"].is_string());
    // One object as a v1beta1 Table; includeObject=None drops the row object.
    let (_, _, one) = get("/api/v1/namespaces/demo/pods/p1?includeObject=None".into(), "application/json;as=Table;v=v1beta1;g=meta.k8s.io").await;
    assert_eq!((one["apiVersion"].as_str(), one["rows"].as_array().unwrap().len()), (Some("meta.k8s.io/v1beta1"), 1));
    assert!(one["rows"][0].get("object").is_none());
    // Paged Tables keep RV and continue.
    for i in 0..3 {
        s.post("/api/v1/namespaces/demo/configmaps", &configmap(&format!("t{i}"), json!({}))).await;
    }
    let (_, _, page) = get(format!("{CM}?limit=2"), KUBECTL).await;
    assert_eq!(page["rows"].as_array().unwrap().len(), 2);
    assert!(page["metadata"]["continue"].is_string());
    assert_eq!(page["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(), ["Name", "Data", "Age"]);
    assert_eq!(page["rows"][0]["cells"][1], 1);
    // Deployments, services and namespaces carry upstream's columns.
    let (_, _, ns) = get("/api/v1/namespaces".into(), KUBECTL).await;
    assert_eq!(ns["rows"][0]["cells"][1], "Active");
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "protocol": "TCP"}]}});
    let (_, created) = s.post("/api/v1/namespaces/demo/services", &svc).await;
    let (_, _, st) = get("/api/v1/namespaces/demo/services".into(), KUBECTL).await;
    // The cluster IP column shows the address the Service was given (RFC 0014).
    assert!(created["spec"]["clusterIP"].as_str().is_some_and(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok()), "{created}");
    assert_eq!(st["rows"][0]["cells"], json!(["web", "ClusterIP", created["spec"]["clusterIP"], "<none>", "80/TCP", st["rows"][0]["cells"][5], "app=web"]));
    // PartialObjectMetadataList.
    let (code, _, meta) = get(CM.to_string(), "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io").await;
    assert_eq!((code, meta["kind"].as_str(), meta["apiVersion"].as_str()), (200, Some("PartialObjectMetadataList"), Some("meta.k8s.io/v1")));
    assert_eq!(meta["items"][0]["kind"], "PartialObjectMetadata");
    assert!(meta["items"][0].get("data").is_none() && meta["items"][0]["metadata"]["name"] == "t0");
    // A Table watch: each event's object is a one-row Table.
    let r = client().get(format!("{}{CM}?watch=1&resourceVersion={}", s.url, rv(&page))).header("accept", KUBECTL).send().await.unwrap();
    let mut w = WatchReader::from_response(r);
    s.post(CM, &configmap("t9", json!({}))).await;
    let e = w.next(T).await.expect("table event");
    assert_eq!((e["type"].as_str(), e["object"]["kind"].as_str(), &e["object"]["rows"][0]["cells"][0]), (Some("ADDED"), Some("Table"), &json!("t9")));
    // The initial state of a watch is rendered like its live events: one-row Tables with the
    // columns, then the initial-events-end bookmark; or PartialObjectMetadata.
    let initial = |accept: &'static str, query: &'static str, count: usize| {
        let url = format!("{}{CM}?watch=1&{query}", s.url);
        async move {
            let r = client().get(url).header("accept", accept).send().await.unwrap();
            assert_eq!(r.status(), 200);
            let mut w = WatchReader::from_response(r);
            let mut events = Vec::new();
            while events.len() < count {
                events.push(w.next(T).await.expect("initial event"));
            }
            events
        }
    };
    let events = initial(KUBECTL, "sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan", 5).await;
    let rows: Vec<&Value> = events[..4].iter().map(|e| {
        assert_eq!((e["type"].as_str(), e["object"]["kind"].as_str(), e["object"]["columnDefinitions"][1]["name"].as_str()), (Some("ADDED"), Some("Table"), Some("Data")), "{e}");
        assert_eq!(e["object"]["rows"].as_array().unwrap().len(), 1);
        assert_eq!(e["object"]["metadata"]["resourceVersion"], e["object"]["rows"][0]["object"]["metadata"]["resourceVersion"]);
        &e["object"]["rows"][0]["cells"][0]
    }).collect();
    assert_eq!(rows, [&json!("t0"), &json!("t1"), &json!("t2"), &json!("t9")]);
    assert_eq!((events[4]["type"].as_str(), events[4]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"].as_str()), (Some("BOOKMARK"), Some("true")));
    let events = initial("application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io", "resourceVersion=0", 4).await;
    for e in &events[..4] {
        assert_eq!((e["type"].as_str(), e["object"]["kind"].as_str()), (Some("ADDED"), Some("PartialObjectMetadata")), "{e}");
        assert!(e["object"].get("data").is_none() && e["object"]["metadata"]["name"].is_string());
    }
    // Nothing acceptable: 406.
    let (code, _, st) = get(CM.into(), "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io").await;
    assert_eq!((code, st["reason"].as_str()), (406, Some("NotAcceptable")));
}

#[tokio::test]
async fn deletecollection_health_and_metrics() {
    // A shard's own metrics: storage objects are counted by shards (a router counts requests).
    let etcd = Etcd::start().await;
    let s = TestShard::start_shard(test_config(&etcd, RangeSet::full())).await;
    s.namespace("demo").await;
    for i in 0..6 {
        let color = if i < 4 { "red" } else { "blue" };
        assert_eq!(s.post(CM, &configmap(&format!("d{i}"), json!({"color": color}))).await.0, 201);
    }
    let (code, deleted) = s.delete(&format!("{CM}?labelSelector=color%3Dred"), None).await;
    assert_eq!((code, deleted["kind"].as_str(), deleted["items"].as_array().unwrap().len()), (200, Some("ConfigMapList"), 4));
    let (_, left) = s.get(CM).await;
    let names: Vec<&str> = left["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["d4", "d5"]);

    for path in ["/healthz", "/livez", "/readyz"] {
        let r = client().get(format!("{}{path}", s.url)).send().await.unwrap();
        assert_eq!((r.status().as_u16(), r.text().await.unwrap()), (200, "ok".to_owned()), "{path}");
    }
    let metrics = client().get(format!("{}/metrics", s.url)).send().await.unwrap().text().await.unwrap();
    for needle in [
        r#"apiserver_request_total{code="201",component="apiserver",group="",resource="configmaps",scope="namespace",subresource="",verb="POST",version="v1"} 6"#,
        r#"apiserver_request_total{code="200",component="apiserver",group="",resource="configmaps",scope="namespace",subresource="",verb="DELETECOLLECTION",version="v1"} 1"#,
        r#"apiserver_storage_objects{resource="configmaps"} 2"#,
        "apiserver_request_duration_seconds_bucket{",
    ] {
        assert!(metrics.contains(needle), "missing {needle}\n{metrics}");
    }
}

#[tokio::test]
async fn periodic_compaction_compacts_etcd_history() {
    let etcd = Etcd::start().await;
    let mut cfg = test_config(&etcd, RangeSet::full());
    cfg.compaction_interval = Some(Duration::from_millis(300));
    let s = TestShard::start(cfg).await;
    s.namespace("demo").await;
    let (_, first) = s.post(CM, &configmap("c", json!({}))).await;
    let first_rv = rv(&first);
    for i in 0..3 {
        s.send("PATCH", &format!("{CM}/c"), "application/merge-patch+json", format!(r#"{{"data":{{"i":"{i}"}}}}"#)).await;
    }
    // Each tick compacts to the revision seen one tick earlier: soon the first write is gone
    // from etcd's history.
    let storage = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let (start, end) = shardplane_keyspace::etcd_layout::range_keys("", "configmaps", HashRange::FULL);
    wait_for(T, || {
        let storage = storage.clone();
        let (start, end) = (start.clone(), end.clone());
        async move { matches!(storage.list_range(&start, &end, first_rv).await, Err(shardplane_storage::StorageError::Compacted { .. })) }
    })
    .await;
    // The shard keeps serving, and its own watch is unaffected.
    let (code, cm) = s.get(&format!("{CM}/c")).await;
    assert_eq!((code, &cm["data"]["i"]), (200, &json!("2")));
}

#[tokio::test]
async fn requests_past_the_inflight_bound_get_429_and_watches_are_exempt() {
    let etcd = Etcd::start().await;
    let mut cfg = test_config(&etcd, RangeSet::full());
    // The plain bound of priority and fairness turned off (upstream's `--max-requests-inflight`).
    cfg.flow_control.enable_priority_and_fairness = false;
    cfg.flow_control.max_requests_inflight = 1;
    let s = TestShard::start_shard(cfg).await; // the bound belongs to a shard process
    // A watch holds no permit.
    let _w = s.watch(&"/api/v1/configmaps?watch=1&resourceVersion=0".to_string()).await;
    assert_eq!(s.get("/api/v1/configmaps").await.0, 200);
    // A list waiting for a revision that never comes holds the one permit for ~3 s.
    let url = format!("{}/api/v1/configmaps?resourceVersion=999999999&resourceVersionMatch=NotOlderThan", s.url);
    let waiting = tokio::spawn(async move { client().get(url).send().await.unwrap().status().as_u16() });
    // Poll (with a deadline) until a request meets the held permit.
    let deadline = std::time::Instant::now() + T;
    let throttled = loop {
        let r = client().get(format!("{}/api/v1/namespaces", s.url)).send().await.unwrap();
        if r.status() == 429 {
            break Some((r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned()), r.json::<Value>().await.unwrap()));
        }
        if waiting.is_finished() || std::time::Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let (retry_after, st) = throttled.expect("a request was throttled while the permit was held");
    assert_eq!((retry_after.as_deref(), st["reason"].as_str(), st["code"].as_u64()), (Some("1"), Some("TooManyRequests"), Some(429)));
    assert_eq!(waiting.await.unwrap(), 504);
    assert_eq!(s.get("/api/v1/namespaces").await.0, 200);
}

#[tokio::test]
async fn discovery_legacy_and_aggregated() {
    let (_etcd, s) = setup().await;
    let (_, api) = s.get("/api").await;
    assert_eq!((api["kind"].as_str(), &api["versions"]), (Some("APIVersions"), &json!(["v1"])));
    let (_, groups) = s.get("/apis").await;
    let names: Vec<&str> = groups["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    // Upstream's order of the groups served.
    let want = [
        "apps", "events.k8s.io", "authentication.k8s.io", "authorization.k8s.io", "autoscaling", "batch", "certificates.k8s.io", "networking.k8s.io", "policy", "rbac.authorization.k8s.io", "storage.k8s.io", "apiextensions.k8s.io",
        "scheduling.k8s.io", "coordination.k8s.io", "node.k8s.io", "discovery.k8s.io", "flowcontrol.apiserver.k8s.io", "resource.k8s.io",
    ];
    assert_eq!(names, want);
    // resource.k8s.io serves v1beta2 (preferred) and v1beta1.
    let dra = groups["groups"].as_array().unwrap().iter().find(|g| g["name"] == "resource.k8s.io").unwrap();
    assert_eq!(dra["versions"].as_array().unwrap().iter().map(|v| v["version"].as_str().unwrap()).collect::<Vec<_>>(), ["v1beta2", "v1beta1"]);
    // autoscaling serves v2 (preferred) and v1, as upstream.
    let autoscaling = groups["groups"].as_array().unwrap().iter().find(|g| g["name"] == "autoscaling").unwrap();
    assert_eq!(autoscaling["versions"].as_array().unwrap().iter().map(|v| v["version"].as_str().unwrap()).collect::<Vec<_>>(), ["v2", "v1"]);
    assert_eq!(autoscaling["preferredVersion"]["version"], "v2");
    for g in groups["groups"].as_array().unwrap() {
        let (code, group) = s.get(&format!("/apis/{}", g["name"].as_str().unwrap())).await;
        assert_eq!((code, group["kind"].as_str()), (200, Some("APIGroup")));
        assert!(group["versions"].as_array().unwrap().contains(&group["preferredVersion"]));
    }
    let (_, v1) = s.get("/api/v1").await;
    let cm = v1["resources"].as_array().unwrap().iter().find(|r| r["name"] == "configmaps").unwrap().clone();
    assert_eq!(cm, json!({"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap", "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"], "shortNames": ["cm"]}));
    assert!(v1["resources"].as_array().unwrap().iter().any(|r| r["name"] == "pods/status"));
    let r = client().get(format!("{}/apis", s.url)).header("accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json").send().await.unwrap();
    assert_eq!(r.headers()["content-type"], "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList");
    let agg: Value = r.json().await.unwrap();
    let apps = agg["items"].as_array().unwrap().iter().find(|g| g["metadata"]["name"] == "apps").unwrap();
    let deploy = apps["versions"][0]["resources"].as_array().unwrap().iter().find(|r| r["resource"] == "deployments").unwrap();
    let subs: Vec<&str> = deploy["subresources"].as_array().unwrap().iter().map(|s| s["subresource"].as_str().unwrap()).collect();
    assert_eq!((&deploy["scope"], &deploy["responseKind"]["kind"], subs), (&json!("Namespaced"), &json!("Deployment"), vec!["scale", "status"]));
    let (_, version) = s.get("/version").await;
    assert!(version["major"].as_str().unwrap().parse::<u32>().is_ok() && version["minor"].as_str().unwrap().parse::<u32>().is_ok());
}

#[tokio::test]
async fn per_kind_field_selectors_on_list_and_watch() {
    let (_etcd, s) = setup().await;
    let pod = |name: &str, node: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}});
    let (_, first) = s.post("/api/v1/namespaces/demo/pods", &pod("a", "n1")).await;
    s.post("/api/v1/namespaces/demo/pods", &pod("b", "n2")).await;
    let (_, on_n1) = s.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dn1").await;
    assert_eq!(on_n1["items"].as_array().unwrap().iter().map(|p| p["metadata"]["name"].as_str().unwrap()).collect::<Vec<_>>(), ["a"]);
    let (_, pending) = s.get("/api/v1/pods?fieldSelector=status.phase%3DPending,spec.nodeName!%3Dn1").await;
    assert_eq!(pending["items"].as_array().unwrap().len(), 1);
    let mut w = s.watch(&format!("/api/v1/namespaces/demo/pods?watch=1&resourceVersion={}&fieldSelector=spec.nodeName%3Dn3", rv(&first))).await;
    s.post("/api/v1/namespaces/demo/pods", &pod("c", "n3")).await;
    let e = w.next_change(T).await.unwrap();
    assert_eq!((e["type"].as_str(), e["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("c")));
    let (code, st) = s.get("/api/v1/pods?fieldSelector=spec.unknown%3Dx").await;
    assert_eq!((code, st["message"].as_str()), (400, Some("field label not supported: spec.unknown")));
}

#[tokio::test]
async fn progress_marks_on_demand_arrive_in_band_for_routers() {
    let etcd = Etcd::start().await;
    let mut cfg = test_config(&etcd, RangeSet::full());
    cfg.bookmark_interval = Duration::from_secs(3600); // periodic bookmarks cannot explain what follows
    let s = TestShard::start_shard(cfg).await; // the shard's own side channel for routers
    s.namespace("demo").await;
    let (_, cm) = s.post(CM, &configmap("a", json!({}))).await;
    let mut w = s.watch(&format!("{CM}?watch=1&resourceVersion={}&allowWatchBookmarks=true&progressBookmarks=always", rv(&cm))).await;
    // A write to another resource moves the revision; the configmaps stream is idle.
    let (_, other) = s.post("/api/v1/namespaces/demo/secrets", &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})).await;
    let (code, _) = s.send("POST", "/shardplane/v1/progress?group=&resource=configmaps", "application/json", "").await;
    assert_eq!(code, 202);
    let bm = w.next(T).await.expect("an in-band progress bookmark");
    assert_eq!(bm["type"], "BOOKMARK");
    assert!(rv(&bm["object"]) >= rv(&other), "{bm}");
    // Events still come first and in order; a later mark covers them.
    let (_, b) = s.post(CM, &configmap("b", json!({}))).await;
    let e = w.next(T).await.unwrap();
    assert_eq!((e["type"].as_str(), rv(&e["object"])), (Some("ADDED"), rv(&b)));
    assert_eq!(s.send("POST", "/shardplane/v1/progress?group=&resource=nothings", "application/json", "").await.0, 404);
}

/// Writes answer in the representation asked for, a metadata request of the wrong shape gets
/// upstream's 406, and objects are written with kind, apiVersion and metadata first.
#[tokio::test]
async fn write_answers_follow_accept_and_objects_are_written_in_upstream_key_order() {
    let (_etcd, s) = setup().await;
    const META: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    const META_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let send = |method: reqwest::Method, path: String, accept: &'static str, body: Option<Value>| {
        let url = format!("{}{path}", s.url);
        async move {
            let mut r = client().request(method, url).header("accept", accept);
            if let Some(b) = body {
                r = r.header("content-type", "application/merge-patch+json").body(b.to_string());
            }
            let r = r.send().await.unwrap();
            (r.status().as_u16(), r.bytes().await.unwrap())
        }
    };
    let parse = |b: &[u8]| serde_json::from_slice::<Value>(b).unwrap();
    let client_body = configmap("k", json!({}));
    let created = client().post(format!("{}{CM}", s.url)).header("accept", META).json(&client_body).send().await.unwrap();
    assert_eq!(created.status(), 201);
    let created: Value = created.json().await.unwrap();
    assert_eq!((created["kind"].as_str(), created["metadata"]["name"].as_str()), (Some("PartialObjectMetadata"), Some("k")));
    assert!(created.get("data").is_none());

    let (code, patched) = send(reqwest::Method::PATCH, format!("{CM}/k"), META, Some(json!({"data": {"a": "b"}}))).await;
    let patched = parse(&patched);
    assert_eq!((code, patched["kind"].as_str(), patched["apiVersion"].as_str()), (200, Some("PartialObjectMetadata"), Some("meta.k8s.io/v1")));
    // A Status answer is not transformed.
    let (code, missing) = send(reqwest::Method::PATCH, format!("{CM}/nope"), META, Some(json!({}))).await;
    assert_eq!((code, parse(&missing)["kind"].as_str()), (404, Some("Status")));

    // The wrong shape for the answer: 406 NotAcceptable, as upstream.
    let (code, st) = send(reqwest::Method::GET, format!("{CM}/k"), META_LIST, None).await;
    let st = parse(&st);
    assert_eq!((code, st["reason"].as_str()), (406, Some("NotAcceptable")));
    assert_eq!(st["message"], "you requested PartialObjectMetadataList, but the requested object is not a list (*core.ConfigMap)");
    let (code, st) = send(reqwest::Method::GET, CM.into(), META, None).await;
    assert_eq!((code, parse(&st)["message"].as_str()), (406, Some("you requested PartialObjectMetadata, but the requested object is a list (*core.ConfigMapList)")));

    // Raw bytes: kind, apiVersion, metadata first; ObjectMeta and ListMeta in their Go order.
    let (_, one) = send(reqwest::Method::GET, format!("{CM}/k"), "application/json", None).await;
    let text = String::from_utf8(one.to_vec()).unwrap();
    assert!(text.starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"k","namespace":"demo","uid":"#), "{text}");
    let (_, list) = send(reqwest::Method::GET, format!("{CM}?limit=1"), "application/json", None).await;
    let text = String::from_utf8(list.to_vec()).unwrap();
    assert!(text.starts_with(r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":""#), "{text}");
    assert!(text.contains(r#""items":[{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"k""#), "{text}");

    // A ConfigMap's delete answers a Success Status (passed as is); a pod's graceful delete
    // answers the object, transformed.
    let (code, deleted) = send(reqwest::Method::DELETE, format!("{CM}/k"), META, None).await;
    assert_eq!((code, parse(&deleted)["kind"].as_str(), parse(&deleted)["status"].as_str()), (200, Some("Status"), Some("Success")));
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "x"}]}});
    assert_eq!(s.post("/api/v1/namespaces/demo/pods", &pod).await.0, 201);
    let (code, deleted) = send(reqwest::Method::DELETE, "/api/v1/namespaces/demo/pods/p".into(), META, None).await;
    assert_eq!((code, parse(&deleted)["kind"].as_str(), parse(&deleted)["metadata"]["name"].as_str()), (200, Some("PartialObjectMetadata"), Some("p")));
}

/// A router that splits lists asks a shard for one entry per line (a shard's own surface, so
/// always a shard); nobody else gets that layout.
#[tokio::test]
async fn a_shard_frames_list_entries_one_per_line_only_when_a_router_asks() {
    let etcd = Etcd::start().await;
    let s = TestShard::start_shard(test_config(&etcd, RangeSet::full())).await;
    s.namespace("demo").await;
    assert_eq!(s.post(CM, &configmap("k", json!({}))).await.0, 201);
    assert_eq!(s.post(CM, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "k2"}, "data": {"x": "a\nb"}})).await.0, 201);
    let framed = client().get(format!("{}{CM}", s.url)).header(shardplane_http::protocol::LIST_FRAMING_HEADER, "lines").send().await.unwrap().text().await.unwrap();
    let lines: Vec<&str> = framed.lines().collect();
    assert_eq!(lines.len(), 4, "{framed}");
    assert!(lines[0].ends_with(r#""items":["#) && lines[1].starts_with('{') && lines[1].ends_with("},") && lines[2].ends_with('}') && lines[3] == "]}", "{framed}");
    assert_eq!(serde_json::from_str::<Value>(&framed).unwrap()["items"][1]["data"]["x"], "a\nb");
    let plain = client().get(format!("{}{CM}", s.url)).send().await.unwrap().bytes().await.unwrap();
    assert!(!plain.contains(&b'\n'));
}

/// Writes read the object they change from the watch cache first; a cache that has not seen the
/// latest write yet must never show through: an update carrying the newest resourceVersion
/// succeeds, and a patch lands on the newest state, even right after a write that bypassed the
/// shard (straight to etcd, as another shard or a restore would). Whether the cache is in fact
/// behind at each request depends on timing; the redo from etcd itself is tested
/// deterministically in `write::tests`.
#[tokio::test]
async fn writes_never_act_on_a_stale_cached_object() {
    let (etcd, s) = setup().await;
    let storage = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let (code, created) = s.post(CM, &configmap("stale", json!({}))).await;
    assert_eq!(code, 201, "{created}");
    let key = shardplane_keyspace::etcd_layout::object_key(&ObjectKey::new("", "configmaps", "demo", "stale"));
    let mut stored = created.clone();
    stored["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    let mut rv = rv(&created);
    for i in 0..40 {
        // Behind the shard's back: etcd moves on; the cache learns of it a little later.
        stored["data"] = json!({"direct": i.to_string()});
        rv = storage.update(key.as_bytes(), serde_json::to_vec(&stored).unwrap(), rv).await.unwrap();
        if i % 2 == 0 {
            // An update preconditioned on etcd's newest revision is not a conflict.
            let mut upd = stored.clone();
            upd["metadata"]["resourceVersion"] = json!(rv.to_string());
            upd["data"]["put"] = json!(i.to_string());
            let (code, out) = s.put(&format!("{CM}/stale"), &upd).await;
            assert_eq!(code, 200, "update {i} on the newest RV: {out}");
            stored["data"] = out["data"].clone();
            rv = out["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        } else {
            // A patch applies to the newest state, never to the cache's older one.
            let (code, out) = s.send("PATCH", &format!("{CM}/stale"), "application/merge-patch+json", json!({"data": {"patched": i.to_string()}}).to_string()).await;
            assert_eq!(code, 200, "patch {i}: {out}");
            assert_eq!((out["data"]["direct"].as_str(), out["data"]["patched"].as_str()), (Some(&*i.to_string()), Some(&*i.to_string())), "patch {i} lost the direct write: {out}");
            stored["data"] = out["data"].clone();
            rv = out["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        }
    }
    // A delete preconditioned on the newest revision succeeds too.
    stored["data"] = json!({"last": "1"});
    rv = storage.update(key.as_bytes(), serde_json::to_vec(&stored).unwrap(), rv).await.unwrap();
    let (code, out) = s.delete(&format!("{CM}/stale"), Some(&json!({"preconditions": {"resourceVersion": rv.to_string()}}))).await;
    assert_eq!(code, 200, "{out}");
}

/// The scale subresource of the built-in workloads: an autoscaling/v1 Scale with the selector
/// written as upstream writes it; PUT and PATCH change only the replicas (and bump the
/// generation); a stale resourceVersion is a conflict; kinds without it answer 404.
#[tokio::test]
async fn workloads_have_upstreams_scale_subresource() {
    let (_etcd, s) = setup().await;
    let template = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let (code, d) = s.post("/apis/apps/v1/namespaces/demo/deployments", &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}, "template": template}})).await;
    assert_eq!(code, 201, "{d}");
    let path = "/apis/apps/v1/namespaces/demo/deployments/web/scale";
    let (code, scale) = s.get(path).await;
    assert_eq!(code, 200, "{scale}");
    assert_eq!((scale["apiVersion"].as_str(), scale["kind"].as_str(), scale["spec"]["replicas"].as_i64()), (Some("autoscaling/v1"), Some("Scale"), Some(2)));
    assert_eq!(scale["status"]["selector"], "app=web,tier notin (db)");
    let (code, scaled) = s.send("PATCH", path, "application/merge-patch+json", r#"{"spec":{"replicas":5}}"#).await;
    assert_eq!((code, scaled["spec"]["replicas"].as_i64()), (200, Some(5)), "{scaled}");
    let (_, after) = s.get("/apis/apps/v1/namespaces/demo/deployments/web").await;
    assert_eq!((after["spec"]["replicas"].as_i64(), after["metadata"]["generation"].as_i64()), (Some(5), Some(2)));
    assert_eq!(after["spec"]["template"], d["spec"]["template"], "only the replicas change");
    let mut stale = scale.clone();
    stale["spec"]["replicas"] = json!(1);
    assert_eq!(s.put(path, &stale).await.0, 409);
    // A replication controller's selector is a label map.
    let (code, rc) = s.post("/api/v1/namespaces/demo/replicationcontrollers", &json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"}, "spec": {"replicas": 1, "template": template}})).await;
    assert_eq!(code, 201, "{rc}");
    let (code, scale) = s.get("/api/v1/namespaces/demo/replicationcontrollers/rc/scale").await;
    assert_eq!((code, scale["status"]["selector"].as_str()), (200, Some("app=web")), "{scale}");
    let mut up = scale.clone();
    up["spec"]["replicas"] = json!(3);
    let (code, put) = s.put("/api/v1/namespaces/demo/replicationcontrollers/rc/scale", &up).await;
    assert_eq!((code, put["spec"]["replicas"].as_i64()), (200, Some(3)), "{put}");
    // Discovery lists it; a kind without it has no such path.
    let (_, apps) = s.get("/apis/apps/v1").await;
    assert!(apps["resources"].as_array().unwrap().iter().any(|r| r["name"] == "deployments/scale" && r["kind"] == "Scale"));
    assert_eq!(s.get("/api/v1/namespaces/demo/configmaps/x/scale").await.0, 404);
}

/// Binding a pod as kube-scheduler does: `pods/{name}/binding` and the legacy `bindings`
/// collection set the node, the Binding's annotations and PodScheduled; a second binding is
/// upstream's 409; an invalid Binding is a 422; `bindings` takes nothing but POST.
#[tokio::test]
async fn pods_are_bound_to_nodes_once() {
    let (_etcd, s) = setup().await;
    let pod = |name: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    for name in ["p1", "p2"] {
        let (code, body) = s.post("/api/v1/namespaces/demo/pods", &pod(name)).await;
        assert_eq!(code, 201, "{body}");
    }
    let binding = |pod: &str, node: &str| json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod, "annotations": {"scheduled-by": "test"}}, "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    let (code, st) = s.post("/api/v1/namespaces/demo/pods/p1/binding", &binding("p1", "node-a")).await;
    assert_eq!((code, st["kind"].as_str(), st["status"].as_str()), (201, Some("Status"), Some("Success")), "{st}");
    let (_, p1) = s.get("/api/v1/namespaces/demo/pods/p1").await;
    assert_eq!((p1["spec"]["nodeName"].as_str(), p1["metadata"]["annotations"]["scheduled-by"].as_str()), (Some("node-a"), Some("test")));
    let scheduled = p1["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "PodScheduled").unwrap();
    assert_eq!(scheduled["status"], "True");
    // Bound already.
    let (code, st) = s.post("/api/v1/namespaces/demo/pods/p1/binding", &binding("p1", "node-b")).await;
    assert_eq!((code, st["reason"].as_str()), (409, Some("Conflict")), "{st}");
    assert_eq!(st["message"], "Operation cannot be fulfilled on pods/binding \"p1\": pod p1 is already assigned to node \"node-a\"");
    // The legacy collection names the pod in the Binding.
    let (code, st) = s.post("/api/v1/namespaces/demo/bindings", &binding("p2", "node-b")).await;
    assert_eq!(code, 201, "{st}");
    assert_eq!(s.get("/api/v1/namespaces/demo/pods/p2").await.1["spec"]["nodeName"], "node-b");
    // Invalid Bindings and wrong verbs.
    let (code, st) = s.post("/api/v1/namespaces/demo/pods/p2/binding", &json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p2"}, "target": {}})).await;
    assert_eq!((code, st["details"]["causes"][0]["field"].as_str()), (422, Some("target.name")), "{st}");
    assert_eq!(s.post("/api/v1/namespaces/demo/pods/p2/binding", &binding("other", "n")).await.0, 400);
    assert_eq!(s.post("/api/v1/namespaces/demo/pods/missing/binding", &binding("missing", "n")).await.0, 404);
    assert_eq!(s.get("/api/v1/namespaces/demo/bindings").await.0, 405);
    let (_, v1) = s.get("/api/v1").await;
    let listed = |name: &str| v1["resources"].as_array().unwrap().iter().find(|r| r["name"] == name).cloned().unwrap_or(Value::Null);
    assert_eq!((&listed("bindings")["verbs"], &listed("pods/binding")["verbs"]), (&json!(["create"]), &json!(["create"])));
}

/// A CertificateSigningRequest is approved through its `approval` subresource only: the main
/// resource keeps the status, `status` keeps the approval, `approval` changes the conditions
/// alone and stamps their times.
#[tokio::test]
async fn csrs_are_approved_through_their_approval_subresource() {
    let (_etcd, s) = setup().await;
    let csr = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": "c1"},
        "spec": {"request": CSR_REQUEST, "signerName": "example.com/signer", "usages": ["client auth"]},
        "status": {"conditions": [{"type": "Approved", "status": "True"}]}});
    let base = "/apis/certificates.k8s.io/v1/certificatesigningrequests/c1";
    let (code, created) = s.post("/apis/certificates.k8s.io/v1/certificatesigningrequests", &csr).await;
    assert_eq!(code, 201, "{created}");
    assert!(created["status"].get("conditions").is_none(), "a create sets no status: {created}");
    let mut approve = created.clone();
    approve["status"] = json!({"conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "approved by the test"}]});
    approve["spec"]["signerName"] = json!("changed.example.com/other");
    let (code, approved) = s.put(&format!("{base}/approval"), &approve).await;
    assert_eq!(code, 200, "{approved}");
    let c = &approved["status"]["conditions"][0];
    assert_eq!((c["type"].as_str(), c["reason"].as_str()), (Some("Approved"), Some("Test")));
    assert!(c["lastUpdateTime"].is_string() && c["lastTransitionTime"].is_string(), "{c}");
    assert_eq!(approved["spec"]["signerName"], "example.com/signer", "approval changes conditions only");
    // The status subresource cannot take the approval away; the main resource cannot touch status.
    let mut unapprove = approved.clone();
    unapprove["status"] = json!({"conditions": [{"type": "Failed", "status": "True", "reason": "X"}], "certificate": "Y2VydA=="});
    let (code, st) = s.put(&format!("{base}/status"), &unapprove).await;
    assert_eq!(code, 200, "{st}");
    let types: Vec<&str> = st["status"]["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["Approved", "Failed"]);
    assert_eq!(st["status"]["certificate"], "Y2VydA==");
    let mut main = st.clone();
    main["status"] = json!({});
    main["metadata"]["labels"] = json!({"x": "y"});
    let (code, m) = s.put(base, &main).await;
    assert_eq!((code, m["status"]["conditions"].as_array().map(Vec::len)), (200, Some(2)), "{m}");
    let (code, got) = s.get(&format!("{base}/approval")).await;
    assert_eq!((code, got["kind"].as_str()), (200, Some("CertificateSigningRequest")));
}

/// What kube-apiserver creates at start is there: the bootstrap namespaces, the
/// `default/kubernetes` Service, the system priority classes (which may not be deleted, and
/// whose prefix no other class may take), `cluster-admin` bound to `system:masters`, and API
/// Priority and Fairness' bootstrap configuration.
#[tokio::test]
async fn the_objects_kube_apiserver_creates_at_start_are_there() {
    let (_etcd, s) = setup().await;
    for path in ["/api/v1/namespaces/kube-node-lease", "/api/v1/namespaces/default/services/kubernetes"] {
        wait_for(T, || async { s.get(path).await.0 == 200 }).await;
    }
    let pc = "/apis/scheduling.k8s.io/v1/priorityclasses";
    wait_for(T, || async { s.get(&format!("{pc}/system-cluster-critical")).await.0 == 200 }).await;
    let (_, critical) = s.get(&format!("{pc}/system-node-critical")).await;
    assert_eq!((critical["value"].as_i64(), critical["preemptionPolicy"].as_str()), (Some(2_000_001_000), Some("PreemptLowerPriority")));
    let (code, st) = s.delete(&format!("{pc}/system-node-critical"), None).await;
    assert_eq!((code, st["message"].as_str()), (403, Some("priorityclasses.scheduling.k8s.io \"system-node-critical\" is forbidden: this is a system priority class and cannot be deleted")));
    let (code, st) = s.post(pc, &json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "system-mine"}, "value": 10})).await;
    assert_eq!((code, st["details"]["causes"][0]["field"].as_str()), (422, Some("metadata.name")), "{st}");
    let (code, st) = s.post(pc, &json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "too-high"}, "value": 1_000_000_001})).await;
    assert_eq!((code, st["details"]["causes"][0]["field"].as_str()), (422, Some("value")), "{st}");
    wait_for(T, || async { s.get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/cluster-admin").await.0 == 200 }).await;
    let (_, binding) = s.get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/cluster-admin").await;
    assert_eq!(binding["subjects"][0]["name"], "system:masters");
    let (_, role) = s.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin").await;
    assert_eq!(role["rules"][0]["verbs"], json!(["*"]));
    // API Priority and Fairness' mandatory and suggested configuration.
    let fc = "/apis/flowcontrol.apiserver.k8s.io/v1";
    wait_for(T, || async { s.get(&format!("{fc}/flowschemas")).await.1["items"].as_array().is_some_and(|i| i.len() == 13) }).await;
    let (_, schemas) = s.get(&format!("{fc}/flowschemas")).await;
    let mut names: Vec<(u64, String)> = schemas["items"].as_array().unwrap().iter().map(|f| (f["spec"]["matchingPrecedence"].as_u64().unwrap(), f["metadata"]["name"].as_str().unwrap().to_owned())).collect();
    names.sort();
    assert_eq!(names.first().map(|n| n.1.as_str()), Some("exempt"));
    assert_eq!(names.last().map(|n| n.1.as_str()), Some("catch-all"));
    wait_for(T, || async { s.get(&format!("{fc}/prioritylevelconfigurations")).await.1["items"].as_array().is_some_and(|i| i.len() == 8) }).await;
    let (_, catch_all) = s.get(&format!("{fc}/prioritylevelconfigurations/catch-all")).await;
    assert_eq!((catch_all["spec"]["limited"]["nominalConcurrencyShares"].as_u64(), catch_all["spec"]["limited"]["limitResponse"]["type"].as_str()), (Some(5), Some("Reject")));
    assert_eq!(catch_all["metadata"]["annotations"]["apf.kubernetes.io/autoupdate-spec"], "true");
}

/// A PEM certificate request (an EC P-256 key, CN e2e-user), base64 as the API carries it.
const CSR_REQUEST: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlITk1IVUNBUUF3RXpFUk1BOEdBMVVFQXd3SVpUSmxMWFZ6WlhJd1dUQVRCZ2NxaGtqT1BRSUJCZ2dxaGtqTwpQUU1CQndOQ0FBUkNZRXRpUHpXOTcwZFlFWmRzRWhzcEJrTlpOVDJSL1JxYy9xNHZzZVJRU0pQYzFKSGNVanlNCjNBYlZHTU5ydHRqOGR2WnVIZ2tGWnlEY2cwZnR4dHo4b0FBd0NnWUlLb1pJemowRUF3SURTQUF3UlFJZ0o2L1oKZmZ6TFk0UU42YnFtUXNQWDBvRnVtMTExQmVrZnRRbGhLaHVzckVjQ0lRREVod1o2bytobThtK2VVaTdJSHJBVAp6ZGhTVDZBV1dGcnhxOUJPM05JclJ3PT0KLS0tLS1FTkQgQ0VSVElGSUNBVEUgUkVRVUVTVC0tLS0tCg==";

const PLS: &str = "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations";
const FSS: &str = "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas";

#[tokio::test]
async fn the_mandatory_and_managed_flowcontrol_objects_are_kept_as_upstream_keeps_them() {
    let (_etcd, s) = setup().await;
    wait_for(T, || async { s.get(&format!("{PLS}/catch-all")).await.0 == 200 && s.get(&format!("{FSS}/catch-all")).await.0 == 200 && s.get(&format!("{PLS}/exempt")).await.0 == 200 }).await;
    // The exempt level's shares are the operator's to tune.
    let (_, mut exempt) = s.get(&format!("{PLS}/exempt")).await;
    exempt["spec"]["exempt"]["nominalConcurrencyShares"] = json!(7);
    assert_eq!(s.put(&format!("{PLS}/exempt"), &exempt).await.0, 200);
    // The rest of a mandatory spec is put back.
    let (_, mut catch_all) = s.get(&format!("{PLS}/catch-all")).await;
    let shares = catch_all["spec"]["limited"]["nominalConcurrencyShares"].clone();
    catch_all["spec"]["limited"]["nominalConcurrencyShares"] = json!(99);
    assert_eq!(s.put(&format!("{PLS}/catch-all"), &catch_all).await.0, 200);
    wait_for(T, || async { s.get(&format!("{PLS}/catch-all")).await.1["spec"]["limited"]["nominalConcurrencyShares"] == shares }).await;
    assert_eq!(s.get(&format!("{PLS}/exempt")).await.1["spec"]["exempt"]["nominalConcurrencyShares"], 7);
    // A deleted mandatory object comes back.
    assert_eq!(s.delete(&format!("{FSS}/catch-all"), None).await.0, 200);
    wait_for(T, || async { s.get(&format!("{FSS}/catch-all")).await.0 == 200 }).await;
    // An object handed to the server that is not one of upstream's is deleted; one not handed
    // over stays, and is marked Dangling while its level is missing.
    let schema = |name: &str, managed: bool| json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
        "metadata": {"name": name, "annotations": {"apf.kubernetes.io/autoupdate-spec": managed.to_string()}},
        "spec": {"priorityLevelConfiguration": {"name": "nowhere"}, "matchingPrecedence": 5000}});
    assert_eq!(s.post(FSS, &schema("managed", true)).await.0, 201);
    assert_eq!(s.post(FSS, &schema("mine", false)).await.0, 201);
    wait_for(T, || async { s.get(&format!("{FSS}/managed")).await.0 == 404 }).await;
    wait_for(T, || async { s.get(&format!("{FSS}/mine")).await.1["status"]["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Dangling" && c["status"] == "True")) }).await;
    assert_eq!(s.get(&format!("{FSS}/mine")).await.0, 200);
}
