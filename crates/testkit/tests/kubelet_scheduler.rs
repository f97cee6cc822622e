//! A control plane's own clients through a router over four shards, with kube-rs as kubelets
//! and a scheduler would use it: 50 nodes register (object, status, a lease in kube-node-lease,
//! renewed), a scheduler binds 100 pending pods through `pods/binding`, each kubelet watches its
//! own pods (`spec.nodeName=<node>`) and sees exactly those, then reports them Running through
//! the status subresource; kubectl cordons a node and scales a deployment; an autoscaler is read
//! and written in autoscaling/v2 and v1; kubelets' events go in through events.k8s.io/v1. Also
//! the component statuses kubectl reads, and Dynamic Resource Allocation as a driver and a
//! scheduler use it, in both of its served versions.

use futures::TryStreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use shardplane_testkit::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const NODES: usize = 50;
const PODS: usize = 100;

fn kube_client(url: &str) -> kube::Client {
    kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
}

fn node_name(i: usize) -> String {
    format!("node-{i:02}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubelets_and_a_scheduler_run_against_the_router() {
    let (_etcd, shards, router) = routed_cluster(4).await;
    wait_for(Duration::from_secs(20), || async { router.get("/api/v1/namespaces/kube-node-lease").await.0 == 200 }).await;
    router.namespace("work").await;
    let client = kube_client(&router.url);
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "work");

    // Kubelets register: the Node, its status, its lease; then renew the lease.
    for i in 0..NODES {
        let name = node_name(i);
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": {}})).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        let status = json!({"status": {"capacity": {"cpu": "4", "pods": "110"}, "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
            "addresses": [{"type": "InternalIP", "address": format!("10.0.0.{i}")}], "nodeInfo": {"kubeletVersion": "v1.33.0", "architecture": "amd64", "operatingSystem": "linux", "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "", "kubeProxyVersion": "", "machineID": "", "osImage": "", "systemUUID": ""}}});
        let n = nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
        assert_eq!(n.status.as_ref().and_then(|s| s.allocatable.as_ref()).map(|a| a["cpu"].0.clone()), Some("4".into()), "allocatable defaults to capacity");
        let lease: Lease = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": "2026-01-01T00:00:00.000000Z"}})).unwrap();
        leases.create(&PostParams::default(), &lease).await.unwrap();
    }
    for i in 0..NODES {
        let renewed = leases.patch(&node_name(i), &PatchParams::default(), &Patch::Merge(json!({"spec": {"renewTime": "2026-01-01T00:00:10.000000Z"}}))).await.unwrap();
        assert_eq!(renewed.spec.unwrap().renew_time.unwrap().0.to_string(), "2026-01-01T00:00:10Z");
    }
    let ready = nodes.list(&ListParams::default().fields("spec.unschedulable=false")).await.unwrap();
    assert_eq!(ready.items.len(), NODES);

    // Each kubelet watches its own pods.
    let mut kubelets = Vec::new();
    for i in 0..NODES {
        let stream = watcher(pods.clone(), watcher::Config::default().fields(&format!("spec.nodeName={}", node_name(i))));
        kubelets.push(tokio::spawn(async move {
            let mut seen = BTreeSet::new();
            let mut s = Box::pin(stream);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while seen.len() < PODS / NODES {
                match tokio::time::timeout_at(deadline, s.try_next()).await {
                    Ok(Ok(Some(watcher::Event::Apply(p) | watcher::Event::InitApply(p)))) => {
                        seen.insert(p.metadata.name.unwrap());
                    }
                    Ok(Ok(Some(_))) => {}
                    other => panic!("kubelet {i}'s watch ended early: {other:?}"),
                }
            }
            seen
        }));
    }

    // Pending pods, and a scheduler that binds each to a node.
    for p in 0..PODS {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("pod-{p:03}")}, "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})).unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let pending = pods.list(&ListParams::default().fields("spec.nodeName=")).await.unwrap();
    assert_eq!(pending.items.len(), PODS);
    let mut placed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (k, pod) in pending.items.iter().enumerate() {
        let (name, node) = (pod.metadata.name.clone().unwrap(), node_name(k % NODES));
        let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
        let _: serde_json::Value = pods.create_subresource("binding", &name, &PostParams::default(), &binding).await.unwrap();
        placed.entry(node).or_default().insert(name);
    }
    assert!(pods.list(&ListParams::default().fields("spec.nodeName=")).await.unwrap().items.is_empty());
    for (i, k) in kubelets.into_iter().enumerate() {
        assert_eq!(k.await.unwrap(), placed[&node_name(i)], "kubelet {i} sees exactly its pods");
    }

    // Kubelets report their pods running.
    for (node, names) in &placed {
        for name in names {
            let status = json!({"status": {"phase": "Running", "podIP": "10.1.0.1", "hostIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}});
            let p = pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
            assert_eq!((p.spec.unwrap().node_name.as_deref(), p.status.unwrap().phase.as_deref()), (Some(node.as_str()), Some("Running")));
        }
    }
    let running = pods.list(&ListParams::default().fields("status.phase=Running")).await.unwrap();
    assert_eq!(running.items.len(), PODS);

    // kubectl: cordon a node, scale a deployment; an autoscaler read back.
    let k = Kubectl { bin: kubectl_path("1.33"), server: router.url.clone(), home: tempdir::Dir::new() };
    let kc = |args: Vec<String>| {
        let k = &k;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        k.ok(&args, None)
    };
    kc(vec!["cordon".into(), node_name(0)]);
    let schedulable = nodes.list(&ListParams::default().fields("spec.unschedulable=false")).await.unwrap();
    assert_eq!(schedulable.items.len(), NODES - 1);
    kc(vec!["uncordon".into(), node_name(0)]);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "work");
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})).unwrap();
    deployments.create(&PostParams::default(), &d).await.unwrap();
    kc(vec!["-n".into(), "work".into(), "scale".into(), "deployment/web".into(), "--replicas=4".into()]);
    assert_eq!(deployments.get("web").await.unwrap().spec.unwrap().replicas, Some(4));
    let scale = deployments.get_scale("web").await.unwrap();
    assert_eq!((scale.spec.unwrap().replicas, scale.status.unwrap().selector.as_deref()), (Some(4), Some("app=web")));
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), "work");
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 10}})).unwrap();
    hpas.create(&PostParams::default(), &hpa).await.unwrap();
    let back = hpas.get("web").await.unwrap().spec.unwrap();
    assert_eq!((back.min_replicas, back.metrics.unwrap().len()), (Some(1), 1), "upstream's defaults: one replica, 80% CPU");
    let printed = kc(vec!["-n".into(), "work".into(), "get".into(), "hpa".into(), "web".into()]);
    assert!(printed.contains("Deployment/web") && printed.contains("cpu: <unknown>/80%"), "{printed}");
    // The same autoscaler in autoscaling/v1, as older controllers read and write it: one stored
    // object, converted both ways, whichever shard holds it.
    let v1: Api<k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler> = Api::namespaced(client.clone(), "work");
    let old = v1.get("web").await.unwrap();
    assert_eq!(old.spec.as_ref().unwrap().target_cpu_utilization_percentage, Some(80));
    v1.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"targetCPUUtilizationPercentage": 50, "maxReplicas": 6}}))).await.unwrap();
    let now = hpas.get("web").await.unwrap().spec.unwrap();
    let cpu = now.metrics.unwrap()[0].resource.as_ref().unwrap().target.average_utilization;
    assert_eq!((cpu, now.max_replicas), (Some(50), 6), "a v1 write is seen in v2");
    hpas.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"metrics": [
        {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}},
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]}}))).await.unwrap();
    // A read-modify-write through v1 keeps the metric v1 cannot express (upstream's annotation).
    let mut through_v1 = v1.get("web").await.unwrap();
    through_v1.spec.as_mut().unwrap().max_replicas = 7;
    v1.replace("web", &PostParams::default(), &through_v1).await.unwrap();
    let kept = hpas.get("web").await.unwrap();
    assert_eq!(kept.spec.as_ref().unwrap().max_replicas, 7);
    assert_eq!(kept.spec.unwrap().metrics.unwrap().len(), 2, "the Pods metric survived a v1 update");
    assert!(kept.metadata.annotations.unwrap_or_default().keys().all(|k| !k.starts_with("autoscaling.alpha")), "round-trip annotations are never stored");
    // Kubelets report through events.k8s.io/v1 (as client-go's new recorder does); the core API
    // reads the same events, and each API selects by its own field names.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "work");
    for i in 0..10 {
        let e = json!({"metadata": {"name": format!("pulled.{i}")}, "eventTime": "2026-12-01T10:00:00.000000Z", "reportingController": "kubelet", "reportingInstance": node_name(i),
            "action": "Pulling", "reason": "Pulled", "note": "image pulled", "type": "Normal", "regarding": {"kind": "Pod", "name": format!("pod-{i}"), "namespace": "work"}});
        events.create(&PostParams::default(), &serde_json::from_value(e).unwrap()).await.unwrap();
    }
    let selected = events.list(&ListParams::default().fields("regarding.name=pod-3")).await.unwrap();
    assert_eq!(selected.items.iter().map(|e| e.metadata.name.clone().unwrap()).collect::<Vec<_>>(), vec!["pulled.3".to_owned()]);
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "work");
    let core_selected = core.list(&ListParams::default().fields("involvedObject.name=pod-3")).await.unwrap();
    assert_eq!(core_selected.items.len(), 1);
    assert_eq!(core_selected.items[0].message.as_deref(), Some("image pulled"));
    assert_eq!(core.list(&ListParams::default()).await.unwrap().items.len(), 10);
    drop(shards);
}

/// `kubectl get cs` and kube-rs read upstream's component statuses through the router: the
/// store's probe healthy, kube-scheduler's and kube-controller-manager's (not running here)
/// unhealthy with Go's wording of the refused connection; read-only, with upstream's warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn component_statuses_probe_the_control_plane() {
    use k8s_openapi::api::core::v1::ComponentStatus;
    let (_etcd, _shards, router) = routed_cluster(2).await;
    let api: Api<ComponentStatus> = Api::all(kube_client(&router.url));
    let list = api.list(&ListParams::default()).await.unwrap();
    let seen: Vec<(String, String)> = list.items.iter().map(|c| (c.metadata.name.clone().unwrap(), c.conditions.as_ref().unwrap()[0].status.clone())).collect();
    let want = [("controller-manager", "False"), ("etcd-0", "True"), ("scheduler", "False")].map(|(n, s)| (n.to_owned(), s.to_owned()));
    assert_eq!(seen, want);
    let scheduler = api.get("scheduler").await.unwrap();
    let condition = &scheduler.conditions.unwrap()[0];
    assert_eq!(condition.type_, "Healthy");
    assert_eq!(condition.message.as_deref(), Some("Get \"https://127.0.0.1:10259/healthz\": dial tcp 127.0.0.1:10259: connect: connection refused"));
    let selected = api.list(&ListParams::default().fields("metadata.name=etcd-0")).await.unwrap();
    assert_eq!(selected.items.len(), 1);
    assert_eq!(selected.items[0].conditions.as_ref().unwrap()[0].message.as_deref(), Some("ok"));
    let (code, body) = router.get("/api/v1/componentstatuses/nope").await;
    assert_eq!((code, body["reason"].as_str()), (404, Some("NotFound")));
    let (code, body) = router.send("DELETE", "/api/v1/componentstatuses/etcd-0", "application/json", "").await;
    assert_eq!((code, body["reason"].as_str()), (405, Some("MethodNotAllowed")));
    let (code, _) = router.get("/api/v1/componentstatuses?watch=true").await;
    assert_eq!(code, 405);
    let r = client().get(format!("{}/api/v1/componentstatuses", router.url)).send().await.unwrap();
    assert_eq!(r.headers()["warning"], "299 - \"v1 ComponentStatus is deprecated in v1.19+\"");

    let k = Kubectl { bin: kubectl_path("1.33"), server: router.url.clone(), home: tempdir::Dir::new() };
    let table = k.ok(&["get", "cs"], None);
    let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().take(2).collect()).collect();
    assert_eq!(rows, [vec!["NAME", "STATUS"], vec!["controller-manager", "Unhealthy"], vec!["etcd-0", "Healthy"], vec!["scheduler", "Unhealthy"]]);
    assert!(k.ok(&["api-resources", "--api-group="], None).lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["componentstatuses", "cs", "v1", "false", "ComponentStatus"]));
}

/// Dynamic Resource Allocation through a router over four shards, as a DRA driver, a scheduler
/// and kubectl use it, in both served versions: a driver publishes its devices in v1beta1
/// (`basic`) and v1beta2 reads them flattened, a claim made in v1beta1 (inline request) reads
/// in v1beta2 under `exactly` with upstream's defaults, a scheduler's allocation written through
/// v1beta1's status subresource reaches a v1beta2 watcher, and what upstream forbids is a 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_resource_allocation_in_both_versions() {
    use k8s_openapi::api::resource::{v1beta1, v1beta2};
    use kube::api::WatchEvent;
    let (_etcd, _shards, router) = routed_cluster(4).await;
    router.namespace("work").await;
    let client = kube_client(&router.url);

    let classes: Api<v1beta2::DeviceClass> = Api::all(client.clone());
    let class: v1beta2::DeviceClass = serde_json::from_value(json!({"metadata": {"name": "gpu.example.com"}, "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}})).unwrap();
    let class = classes.create(&PostParams::default(), &class).await.unwrap();
    assert_eq!(class.metadata.generation, Some(1));

    // A driver on each of three nodes publishes one GPU, through v1beta1.
    let old_slices: Api<v1beta1::ResourceSlice> = Api::all(client.clone());
    for n in 0..3 {
        let slice: v1beta1::ResourceSlice = serde_json::from_value(json!({"metadata": {"name": format!("node-{n}-gpu")}, "spec": {
            "driver": "gpu.example.com", "nodeName": format!("node-{n}"), "pool": {"name": format!("node-{n}"), "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "basic": {"attributes": {"model": {"string": "a100"}}, "capacity": {"memory": {"value": "40Gi"}}}}]}})).unwrap();
        old_slices.create(&PostParams::default(), &slice).await.unwrap();
    }
    let slices: Api<v1beta2::ResourceSlice> = Api::all(client.clone());
    let on_node = slices.list(&ListParams::default().fields("spec.nodeName=node-1")).await.unwrap();
    assert_eq!(on_node.items.len(), 1);
    let device = &on_node.items[0].spec.devices.as_ref().unwrap()[0];
    assert_eq!((device.name.as_str(), device.capacity.as_ref().unwrap()["memory"].value.0.as_str()), ("gpu-0", "40Gi"));
    assert_eq!(slices.list(&ListParams::default().fields("spec.driver=gpu.example.com")).await.unwrap().items.len(), 3);

    // A claim in v1beta1, read in v1beta2 with upstream's defaults; watched in v1beta2.
    let old_claims: Api<v1beta1::ResourceClaim> = Api::namespaced(client.clone(), "work");
    let claims: Api<v1beta2::ResourceClaim> = Api::namespaced(client.clone(), "work");
    let claim: v1beta1::ResourceClaim = serde_json::from_value(json!({"metadata": {"name": "train"}, "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.example.com"}]}}})).unwrap();
    let made = old_claims.create(&PostParams::default(), &claim).await.unwrap();
    let read = claims.get("train").await.unwrap();
    let exactly = read.spec.devices.as_ref().unwrap().requests.as_ref().unwrap()[0].exactly.clone().unwrap();
    assert_eq!((exactly.device_class_name.as_str(), exactly.allocation_mode.as_deref(), exactly.count), ("gpu.example.com", Some("ExactCount"), Some(1)));
    let rv = made.metadata.resource_version.clone().unwrap();
    let mut watch = futures::StreamExt::boxed(claims.watch(&kube::api::WatchParams::default(), &rv).await.unwrap());

    // The scheduler allocates node-1's GPU and reserves it for a pod, through v1beta1's status.
    let status = json!({"status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "trainer", "uid": "6c5b2f1e-0000-4000-8000-000000000001"}]}});
    old_claims.patch_status("train", &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = watch.try_next().await.unwrap() {
            if let WatchEvent::Modified(c) = event {
                return c;
            }
        }
        panic!("the watch ended");
    })
    .await
    .expect("the allocation reaches a v1beta2 watcher");
    assert_eq!(seen.status.unwrap().allocation.unwrap().devices.unwrap().results.unwrap()[0].device, "gpu-0");

    // What upstream forbids: a changed claim spec, a request of two kinds, a slice on no node.
    let (code, body) = router.send("PATCH", "/apis/resource.k8s.io/v1beta1/namespaces/work/resourceclaims/train", "application/merge-patch+json", json!({"spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.example.com", "count": 2}]}}}).to_string()).await;
    assert_eq!((code, body["details"]["causes"][0]["field"].as_str()), (422, Some("spec")), "{body}");
    let (code, body) = router.post("/apis/resource.k8s.io/v1beta2/namespaces/work/resourceclaims", &json!({"metadata": {"name": "both"}, "spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}, "firstAvailable": [{"name": "a", "deviceClassName": "gpu.example.com"}]}]}}})).await;
    assert_eq!(code, 422);
    assert_eq!(body["details"]["causes"][0]["message"], "Invalid value: null: exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set");
    let (code, body) = router.post("/apis/resource.k8s.io/v1beta1/resourceslices", &json!({"metadata": {"name": "nowhere"}, "spec": {"driver": "gpu.example.com", "pool": {"name": "p", "resourceSliceCount": 1}}})).await;
    assert_eq!((code, body["details"]["causes"][0]["field"].as_str()), (422, Some("spec")), "{body}");

    // kubectl prints the claim's state and deletes a slice (the answer is the object).
    let k = Kubectl { bin: kubectl_path("1.33"), server: router.url.clone(), home: tempdir::Dir::new() };
    let table = k.ok(&["get", "resourceclaims", "-n", "work"], None);
    assert!(table.lines().nth(1).is_some_and(|l| l.split_whitespace().take(2).eq(["train", "allocated,reserved"])), "{table}");
    let (code, gone) = router.send("DELETE", "/apis/resource.k8s.io/v1beta1/resourceslices/node-0-gpu", "application/json", "").await;
    assert_eq!((code, gone["kind"].as_str(), gone["spec"]["devices"][0]["basic"]["attributes"]["model"]["string"].as_str()), (200, Some("ResourceSlice"), Some("a100")));
}
