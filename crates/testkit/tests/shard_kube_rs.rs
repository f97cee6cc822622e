//! kube-rs, an independent client, against a shard on real etcd: its `watcher` (list-then-watch
//! and streaming lists, of built-in and of custom objects) and `reflector` observe exactly the
//! writes made, in order.


use shardplane_testkit::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{reflector, WatchStreamExt};
use serde_json::json;
use shardplane_keyspace::RangeSet;
use std::time::Duration;

fn kube_client(url: &str) -> kube::Client {
    let config = kube::Config::new(url.parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": "0"}})).unwrap()
}

/// Writes a fixed script and returns the (type, name, rv) a correct watcher must see after `Init`.
async fn script(api: &Api<ConfigMap>) -> Vec<(String, String, String)> {
    let mut want = Vec::new();
    for i in 0..5 {
        let c = api.create(&PostParams::default(), &cm(&format!("w{i}"))).await.unwrap();
        want.push(("apply".into(), format!("w{i}"), c.metadata.resource_version.unwrap()));
    }
    for i in 0..5 {
        let c = api.patch(&format!("w{i}"), &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "1"}}))).await.unwrap();
        want.push(("apply".into(), format!("w{i}"), c.metadata.resource_version.unwrap()));
    }
    for i in [1, 3] {
        api.delete(&format!("w{i}"), &DeleteParams::default()).await.unwrap();
        want.push(("delete".into(), format!("w{i}"), String::new()));
    }
    want
}

/// Reads a watcher's stream until its initial list is done.
async fn init_done<K: std::fmt::Debug>(stream: &mut (impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Unpin)) {
    loop {
        match tokio::time::timeout(Duration::from_secs(20), stream.try_next()).await.expect("init in time").unwrap() {
            Some(Event::InitDone) => return,
            Some(_) => {}
            None => panic!("stream ended"),
        }
    }
}

async fn observe(api: Api<ConfigMap>, config: watcher::Config, n: usize) -> Vec<(String, String, String)> {
    let stream = watcher::watcher(api.clone(), config);
    tokio::pin!(stream);
    // Wait until the initial list is done, then make the writes.
    init_done(&mut stream).await;
    let writer = tokio::spawn({
        let api = api.clone();
        async move { script(&api).await }
    });
    let mut got = Vec::new();
    while got.len() < n {
        match tokio::time::timeout(Duration::from_secs(20), stream.try_next()).await.expect("event in time").unwrap() {
            Some(Event::Apply(c)) => got.push(("apply".into(), c.metadata.name.unwrap(), c.metadata.resource_version.unwrap())),
            Some(Event::Delete(c)) => got.push(("delete".into(), c.metadata.name.unwrap(), String::new())),
            Some(other) => panic!("unexpected {other:?}"),
            None => panic!("stream ended"),
        }
    }
    let want = writer.await.unwrap();
    assert_eq!(got, want);
    got
}

/// etcd, a full-range shard with namespace `kw`, and a kube-rs ConfigMap API on it.
async fn setup() -> (Etcd, TestShard, Api<ConfigMap>) {
    let etcd = Etcd::start().await;
    let s = TestShard::start(test_config(&etcd, RangeSet::full())).await;
    s.namespace("kw").await;
    let api = Api::namespaced(kube_client(&s.url), "kw");
    (etcd, s, api)
}

#[tokio::test]
async fn watcher_list_then_watch_sees_every_write_in_order() {
    let (_etcd, _shard, api) = setup().await;
    observe(api, watcher::Config::default(), 12).await;
}

#[tokio::test]
async fn watcher_streaming_list_sees_every_write_in_order() {
    let (_etcd, _shard, api) = setup().await;
    api.create(&PostParams::default(), &cm("pre")).await.unwrap();
    observe(api, watcher::Config::default().streaming_lists(), 12).await;
}

#[tokio::test]
async fn reflector_store_converges_to_the_server_state() {
    let (_etcd, _shard, api) = setup().await;
    api.create(&PostParams::default(), &cm("before")).await.unwrap();
    let (reader, writer) = reflector::store();
    let task = tokio::spawn(reflector::reflector(writer, watcher::watcher(api.clone(), watcher::Config::default())).applied_objects().for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    script(&api).await;
    wait_for(Duration::from_secs(20), || {
        let reader = reader.clone();
        async move {
            let mut names: Vec<String> = reader.state().iter().map(|c| c.metadata.name.clone().unwrap()).collect();
            names.sort();
            names == ["before", "w0", "w2", "w4"] && reader.state().iter().filter(|c| c.metadata.name.as_deref() != Some("before")).all(|c| c.data.as_ref().unwrap()["v"] == "1")
        }
    })
    .await;
    let server: Vec<String> = api.list(&Default::default()).await.unwrap().items.into_iter().map(|c| c.metadata.name.unwrap()).collect();
    assert_eq!(server, ["before", "w0", "w2", "w4"]);
    task.abort();
}

/// kube-rs's metadata API (`as=PartialObjectMetadata`): get, list, patch and a metadata
/// watcher see only metadata, and every answer, writes included, is a PartialObjectMetadata.
#[tokio::test]
async fn metadata_api_reads_writes_and_watches_partial_object_metadata() {
    let (_etcd, _shard, api) = setup().await;
    api.create(&PostParams::default(), &cm("m0")).await.unwrap();
    let got = api.get_metadata("m0").await.unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("m0"));
    assert_eq!(got.types.as_ref().map(|t| (t.kind.as_str(), t.api_version.as_str())), Some(("PartialObjectMetadata", "meta.k8s.io/v1")));
    let list = api.list_metadata(&Default::default()).await.unwrap();
    assert_eq!(list.items.iter().map(|o| o.metadata.name.clone().unwrap()).collect::<Vec<_>>(), ["m0"]);
    assert_eq!(list.items[0].types.as_ref().map(|t| t.kind.as_str()), Some("PartialObjectMetadata"));

    let patch = json!({"metadata": {"annotations": {"test": "123"}}});
    let patched = api.patch_metadata("m0", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    assert_eq!(patched.metadata.annotations.as_ref().unwrap()["test"], "123");
    assert_eq!(patched.types.as_ref().map(|t| (t.kind.as_str(), t.api_version.as_str())), Some(("PartialObjectMetadata", "meta.k8s.io/v1")));
    // The patch landed on the object itself.
    assert_eq!(api.get("m0").await.unwrap().metadata.annotations.unwrap()["test"], "123");

    // An Api over PartialObjectMeta watches with metadata-only requests.
    let meta_api: Api<kube::core::PartialObjectMeta<ConfigMap>> = Api::namespaced(api.clone().into_client(), "kw");
    let stream = watcher::watcher(meta_api, watcher::Config::default());
    tokio::pin!(stream);
    let mut seen = Vec::new();
    let mut wrote = false;
    while seen.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(20), stream.try_next()).await.expect("event in time").unwrap() {
            Some(Event::InitApply(o)) | Some(Event::Apply(o)) => seen.push(o.metadata.name.unwrap()),
            Some(Event::InitDone) if !wrote => {
                wrote = true;
                api.create(&PostParams::default(), &cm("m1")).await.unwrap();
            }
            Some(_) => {}
            None => panic!("stream ended"),
        }
    }
    assert_eq!(seen, ["m0", "m1"]);
}

/// kube-rs's `watcher` over a custom resource (the AgentSession CRD, created with kube-rs and
/// awaited with its `is_crd_established` condition), through `DynamicObject`: by list-then-watch
/// and by streaming list, it sees every create, spec patch, status patch and delete, in order,
/// with the RVs the writes answered.
#[tokio::test]
async fn watcher_sees_every_write_to_custom_objects_in_order() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let (_etcd, _shard, api) = setup().await;
    let client = api.into_client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "agentsessions.agents.shardplane.dev"},
        "spec": {"group": "agents.shardplane.dev", "scope": "Namespaced",
            "names": {"plural": "agentsessions", "singular": "agentsession", "kind": "AgentSession"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"agent": {"type": "string"}, "phase": {"type": "string", "enum": ["Running", "Suspended", "Completed"]}}},
                    "status": {"type": "object", "properties": {"steps": {"type": "integer"}}}}}}}]}
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let established = kube::runtime::wait::await_condition(crds, "agentsessions.agents.shardplane.dev", kube::runtime::wait::conditions::is_crd_established());
    tokio::time::timeout(Duration::from_secs(20), established).await.expect("established in time").unwrap();
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("agents.shardplane.dev", "v1", "AgentSession"), "agentsessions");
    let sessions: Api<DynamicObject> = Api::namespaced_with(client, "kw", &resource);

    for (round, config) in [("list", watcher::Config::default()), ("stream", watcher::Config::default().streaming_lists())] {
        let stream = watcher::watcher(sessions.clone(), config);
        tokio::pin!(stream);
        init_done(&mut stream).await;
        let writer = tokio::spawn({
            let sessions = sessions.clone();
            let resource = resource.clone();
            async move {
                let mut want = Vec::new();
                let rv = |o: DynamicObject| o.metadata.resource_version.unwrap();
                for i in 0..4 {
                    let mut o = DynamicObject::new(&format!("{round}{i}"), &resource);
                    o.data = json!({"spec": {"agent": "coder", "phase": "Running"}});
                    want.push(("apply", format!("{round}{i}"), rv(sessions.create(&PostParams::default(), &o).await.unwrap())));
                }
                let suspended = sessions.patch(&format!("{round}0"), &PatchParams::default(), &Patch::Merge(json!({"spec": {"phase": "Suspended"}}))).await.unwrap();
                assert_eq!(suspended.data["spec"]["phase"], "Suspended");
                want.push(("apply", format!("{round}0"), rv(suspended)));
                let stepped = sessions.patch_status(&format!("{round}1"), &PatchParams::default(), &Patch::Merge(json!({"status": {"steps": 3}}))).await.unwrap();
                assert_eq!(stepped.data["status"]["steps"], 3);
                want.push(("apply", format!("{round}1"), rv(stepped)));
                for i in [2, 3] {
                    sessions.delete(&format!("{round}{i}"), &DeleteParams::default()).await.unwrap();
                    want.push(("delete", format!("{round}{i}"), String::new()));
                }
                want
            }
        });
        let mut got = Vec::new();
        while got.len() < 8 {
            match tokio::time::timeout(Duration::from_secs(20), stream.try_next()).await.expect("event in time").unwrap() {
                Some(Event::Apply(o)) => got.push(("apply", o.metadata.name.unwrap(), o.metadata.resource_version.unwrap())),
                Some(Event::Delete(o)) => got.push(("delete", o.metadata.name.unwrap(), String::new())),
                Some(other) => panic!("unexpected {other:?}"),
                None => panic!("stream ended"),
            }
        }
        assert_eq!(got, writer.await.unwrap(), "{round}");
    }
}

/// Server-side apply through kube-rs (`Patch::Apply`): an apply creates the object and records
/// its manager's fields; a second apply by the same manager drops what it no longer sets; another
/// manager changing an owned field gets a 409 naming the field and its owner, and takes the
/// field when it forces.
#[tokio::test]
async fn server_side_apply_creates_merges_removes_and_conflicts() {
    let (_etcd, _shard, api) = setup().await;
    let first = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied", "labels": {"team": "a"}}, "data": {"a": "1", "b": "2"}});
    let created = api.patch("applied", &PatchParams::apply("deployer"), &Patch::Apply(&first)).await.unwrap();
    assert_eq!(created.data.as_ref().unwrap().len(), 2);
    let managed = created.metadata.managed_fields.as_ref().expect("managed fields");
    assert_eq!((managed.len(), managed[0].manager.as_deref(), managed[0].operation.as_deref()), (1, Some("deployer"), Some("Apply")));
    assert_eq!(managed[0].fields_v1.as_ref().unwrap().0, json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {".": {}, "f:team": {}}}}));
    // A merge patch by someone else adds a key the applier does not manage: it survives.
    api.patch("applied", &PatchParams::default(), &Patch::Merge(json!({"data": {"other": "x"}}))).await.unwrap();
    let second = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "1"}});
    let reapplied = api.patch("applied", &PatchParams::apply("deployer"), &Patch::Apply(&second)).await.unwrap();
    let data = reapplied.data.unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["a", "other"], "b and the label went; other was never the applier's");
    assert!(reapplied.metadata.labels.unwrap_or_default().is_empty());
    // A second applier changing a: 409 with the field and its owner, unless forced.
    let rival = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "2"}});
    let err = api.patch("applied", &PatchParams::apply("rival"), &Patch::Apply(&rival)).await.unwrap_err();
    let kube::Error::Api(status) = err else { panic!("not a Status: {err:?}") };
    assert_eq!((status.code, status.reason.as_str(), status.message.as_str()), (409, "Conflict", "Apply failed with 1 conflict: conflict with \"deployer\": .data.a"));
    let forced = api.patch("applied", &PatchParams::apply("rival").force(), &Patch::Apply(&rival)).await.unwrap();
    assert_eq!(forced.data.unwrap()["a"], "2");
    let owners: Vec<(String, serde_json::Value)> = forced.metadata.managed_fields.unwrap().into_iter().map(|m| (m.manager.unwrap(), m.fields_v1.unwrap().0)).collect();
    assert_eq!(owners, [("deployer".to_owned(), json!({"f:data": {}})), ("rival".to_owned(), json!({"f:data": {".": {}, "f:a": {}}}))], "deployer lost a and keeps only the map itself");
    // Strict refuses a field the schema does not declare, as upstream words it for apply.
    let bogus = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "strict"}, "bogus": 1});
    let err = api.patch("strict", &PatchParams::apply("deployer").validation_strict(), &Patch::Apply(&bogus)).await.unwrap_err();
    let kube::Error::Api(status) = err else { panic!("not a Status: {err:?}") };
    assert_eq!(status.code, 400);
    assert!(status.message.ends_with(": .bogus: field not declared in schema"), "{}", status.message);
}
