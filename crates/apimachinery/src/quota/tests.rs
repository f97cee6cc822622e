use super::*;
use proptest::prelude::*;

fn pod(name: &str, containers: Value) -> Value {
    json!({"metadata": {"name": name, "namespace": "q"}, "spec": {"containers": containers}})
}

fn quota(hard: Value, used: Option<Value>) -> Value {
    let mut q = json!({"metadata": {"name": "compute", "namespace": "q"}, "spec": {"hard": hard.clone()}, "status": {"hard": hard}});
    if let Some(u) = used {
        q["status"]["used"] = u;
    }
    q
}

fn shown(u: &Usage) -> BTreeMap<String, String> {
    u.iter().map(|(k, q)| (k.clone(), q.canonical())).collect()
}

#[test]
fn a_pod_uses_its_effective_requests_and_limits() {
    let p = json!({"spec": {
        "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m"}}},
                       {"name": "b", "resources": {"requests": {"cpu": "100m", "example.com/gpu": "1"}}}],
        "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "500m"}}},
                           {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"memory": "16Mi"}}}],
        "overhead": {"cpu": "10m"}}});
    let u = shown(&usage("", "pods", &p));
    // The init container's 500m beats the containers' 200m; the sidecar adds to the containers.
    assert_eq!(u["requests.cpu"], "510m");
    assert_eq!(u["cpu"], "510m");
    assert_eq!(u["requests.memory"], "80Mi");
    assert_eq!(u["limits.cpu"], "210m");
    assert_eq!(u["requests.example.com/gpu"], "1");
    assert_eq!((u["pods"].as_str(), u["count/pods"].as_str()), ("1", "1"));
    // A finished pod keeps only its object count.
    let mut done = p.clone();
    done["status"] = json!({"phase": "Succeeded"});
    assert_eq!(shown(&usage("", "pods", &done)), BTreeMap::from([("count/pods".to_owned(), "1".to_owned())]));
}

#[test]
fn services_and_claims_count_what_upstream_counts() {
    let svc = |ty: &str| json!({"spec": {"type": ty, "ports": [{"port": 80}, {"port": 443, "nodePort": 30001}]}});
    let np = shown(&usage("", "services", &svc("NodePort")));
    assert_eq!((np["services.nodeports"].as_str(), np["services.loadbalancers"].as_str()), ("2", "0"));
    let lb = shown(&usage("", "services", &svc("LoadBalancer")));
    assert_eq!((lb["services.nodeports"].as_str(), lb["services.loadbalancers"].as_str()), ("2", "1"));
    let mut no_ports = svc("LoadBalancer");
    no_ports["spec"]["allocateLoadBalancerNodePorts"] = json!(false);
    assert_eq!(shown(&usage("", "services", &no_ports))["services.nodeports"], "1");
    let claim = json!({"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "1Gi"}}}});
    let c = shown(&usage("", "persistentvolumeclaims", &claim));
    assert_eq!(c["gold.storageclass.storage.k8s.io/requests.storage"], "1Gi");
    assert_eq!(c["requests.storage"], "1Gi");
    assert_eq!(shown(&usage("apps", "deployments", &json!({}))), BTreeMap::from([("count/deployments.apps".to_owned(), "1".to_owned())]));
    assert_eq!(counted_resource("count/deployments.apps"), Some(("apps".into(), "deployments".into())));
    assert_eq!(counted_resource("limits.memory"), Some(("".into(), "pods".into())));
    assert_eq!(counted_resource("gold.storageclass.storage.k8s.io/persistentvolumeclaims"), Some(("".into(), "persistentvolumeclaims".into())));
}

#[test]
fn refusals_are_worded_as_upstream() {
    let q = quota(json!({"pods": "2", "requests.memory": "1Gi"}), Some(json!({"pods": "2", "requests.memory": "512Mi"})));
    let p = pod("p", json!([{"name": "c", "resources": {"requests": {"memory": "100Mi"}}}]));
    assert_eq!(charge(&q, "", "pods", None, Some(&p)), Decision::Refuse("exceeded quota: compute, requested: pods=1, used: pods=2, limited: pods=2".into()));
    let bare = pod("p", json!([{"name": "c"}, {"name": "d"}]));
    assert_eq!(charge(&q, "", "pods", None, Some(&bare)), Decision::Refuse("failed quota: compute: must specify requests.memory for: c,d".into()));
    let fresh = quota(json!({"pods": "2", "services": "1"}), None);
    assert_eq!(charge(&fresh, "", "pods", None, Some(&p)), Decision::Refuse("status unknown for quota: compute, resources: pods".into()));
    // A quota whose status the controller has not written yet limits nothing.
    let unwritten = json!({"metadata": {"name": "x"}, "spec": {"hard": {"pods": "0"}}});
    assert_eq!(charge(&unwritten, "", "pods", None, Some(&p)), Decision::Unchanged);
}

#[test]
fn a_write_charges_its_growth_and_gives_back_its_shrinking() {
    let q = quota(json!({"pods": "5", "requests.cpu": "1"}), Some(json!({"pods": "1", "requests.cpu": "100m"})));
    let p = pod("p", json!([{"name": "c", "resources": {"requests": {"cpu": "250m"}}}]));
    let Decision::Charge(used) = charge(&q, "", "pods", None, Some(&p)) else { panic!("charged") };
    assert_eq!(Value::Object(used), json!({"pods": "2", "requests.cpu": "350m"}));
    let Decision::Charge(used) = charge(&q, "", "pods", Some(&p), None) else { panic!("given back") };
    assert_eq!(Value::Object(used), json!({"pods": "0", "requests.cpu": "0"}));
    let mut done = p.clone();
    done["status"] = json!({"phase": "Failed"});
    let Decision::Charge(used) = charge(&q, "", "pods", Some(&p), Some(&done)) else { panic!("finished") };
    assert_eq!(Value::Object(used), json!({"pods": "0", "requests.cpu": "0"}));
    // A label change uses nothing more.
    let mut relabelled = p.clone();
    relabelled["metadata"]["labels"] = json!({"a": "b"});
    assert_eq!(charge(&q, "", "pods", Some(&p), Some(&relabelled)), Decision::Unchanged);
    // Nothing the quota limits: no change.
    assert_eq!(charge(&q, "", "configmaps", None, Some(&json!({}))), Decision::Unchanged);
}

#[test]
fn scopes_select_pods_and_nothing_else() {
    let mut q = quota(json!({"pods": "1", "services": "1"}), Some(json!({"pods": "0", "services": "0"})));
    q["spec"]["scopes"] = json!(["BestEffort"]);
    let best = pod("b", json!([{"name": "c"}]));
    let burstable = pod("n", json!([{"name": "c", "resources": {"requests": {"cpu": "1"}}}]));
    assert!(matches(&q, "", "pods", &best));
    assert!(!matches(&q, "", "pods", &burstable));
    assert!(!matches(&q, "", "services", &json!({"spec": {}})));
    let mut terminating = best.clone();
    terminating["spec"]["activeDeadlineSeconds"] = json!(30);
    q["spec"]["scopes"] = json!(["Terminating"]);
    assert!(matches(&q, "", "pods", &terminating) && !matches(&q, "", "pods", &best));
    q["spec"]["scopes"] = json!([]);
    q["spec"]["scopeSelector"] = json!({"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]});
    let mut high = best.clone();
    high["spec"]["priorityClassName"] = json!("high");
    assert!(matches(&q, "", "pods", &high) && !matches(&q, "", "pods", &best));
}

#[test]
fn the_controller_status_copies_hard_and_sums_what_matches() {
    let q = json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": "10", "count/configmaps": "3", "services.nodeports": "4"}}});
    assert!(status_stale(&q));
    let pods = [pod("a", json!([{"name": "c"}])), pod("b", json!([{"name": "c"}]))];
    let cm = json!({});
    let svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 1}]}});
    let objects = pods.iter().map(|p| ("", "pods", p)).chain([("", "configmaps", &cm), ("", "services", &svc)]);
    let status = recalculate(&q, objects);
    assert_eq!(status, json!({"hard": {"pods": "10", "count/configmaps": "3", "services.nodeports": "4"}, "used": {"count/configmaps": "1", "pods": "2", "services.nodeports": "1"}}));
    let mut written = q.clone();
    written["status"] = status;
    assert!(!status_stale(&written));
    assert!(same_usage(written.pointer("/status/used"), Some(&json!({"pods": "2", "count/configmaps": "1000m", "services.nodeports": "1"}))));
}

/// A random write: create pod `i`, delete it, or finish it.
#[derive(Clone, Debug)]
enum Step {
    Create(usize, u32, bool),
    Delete(usize),
    Finish(usize),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(prop_oneof![
        (0..12usize, 1..400u32, any::<bool>()).prop_map(|(i, m, deadline)| Step::Create(i, m, deadline)),
        (0..12usize).prop_map(Step::Delete),
        (0..12usize).prop_map(Step::Finish),
    ], 1..60)
}

proptest! {
    /// Applying every allowed write's charge keeps `status.used` equal to the controller's
    /// recount of the pods that exist, and within the limits, whatever the order of writes.
    #[test]
    fn charges_track_the_objects_and_never_exceed(steps in steps(), scoped in any::<bool>()) {
        let mut q = quota(json!({"pods": "4", "requests.cpu": "1", "count/pods": "6"}), Some(json!({"pods": "0", "requests.cpu": "0", "count/pods": "0"})));
        if scoped {
            q["spec"]["scopes"] = json!(["NotTerminating"]);
        }
        let mut pods: BTreeMap<usize, Value> = BTreeMap::new();
        for step in steps {
            let (old, new) = match &step {
                Step::Create(i, _, _) if pods.contains_key(i) => continue,
                Step::Create(i, milli, deadline) => {
                    let mut p = pod(&format!("p{i}"), json!([{"name": "c", "resources": {"requests": {"cpu": format!("{milli}m")}}}]));
                    if *deadline {
                        p["spec"]["activeDeadlineSeconds"] = json!(60);
                    }
                    (None, Some(p))
                }
                Step::Delete(i) => match pods.get(i) { Some(p) => (Some(p.clone()), None), None => continue },
                Step::Finish(i) => match pods.get(i) {
                    Some(p) => { let mut d = p.clone(); d["status"] = json!({"phase": "Succeeded"}); (Some(p.clone()), Some(d)) }
                    None => continue,
                },
            };
            let key = match step { Step::Create(i, ..) | Step::Delete(i) | Step::Finish(i) => i };
            match charge(&q, "", "pods", old.as_ref(), new.as_ref()) {
                Decision::Refuse(why) => {
                    prop_assert!(old.is_none(), "only a create can be refused: {}", why);
                    continue;
                }
                Decision::Charge(used) => q["status"]["used"] = Value::Object(used),
                Decision::Unchanged => {}
            }
            match new {
                Some(n) => { pods.insert(key, n); }
                None => { pods.remove(&key); }
            }
            let recount = recalculate(&q, pods.values().map(|p| ("", "pods", p)));
            prop_assert!(same_usage(q.pointer("/status/used"), recount.get("used")), "{:?} vs {:?}", q["status"]["used"], recount["used"]);
            let used = list(q.pointer("/status/used"));
            for (k, h) in hard(&q, "/status/hard") {
                prop_assert!(used.get(&k).is_none_or(|u| u.nanos <= h.nanos), "{} over its limit", k);
            }
        }
    }
}
