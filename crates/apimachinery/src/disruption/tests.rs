use super::*;
use proptest::prelude::*;

const NOW: &str = "2026-12-03T10:00:00Z";

fn pod(name: &str, ready: bool) -> Value {
    json!({"metadata": {"name": name, "namespace": "d", "labels": {"app": "web"}}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
}

fn budget(spec: Value) -> Value {
    let mut pdb = json!({"metadata": {"name": "web", "namespace": "d", "generation": 1}, "spec": {"selector": {"matchLabels": {"app": "web"}}}});
    for (k, v) in spec.as_object().cloned().unwrap_or_default() {
        pdb["spec"][k] = v;
    }
    pdb
}

fn with_status(mut pdb: Value, pods: &[Value], scale: Option<i64>) -> Value {
    let refs: Vec<&Value> = pods.iter().collect();
    pdb["status"] = status(&pdb, &refs, scale, NOW);
    pdb
}

#[test]
fn the_controller_counts_healthy_pods_against_the_budget() {
    let pods: Vec<Value> = (0..5).map(|i| pod(&format!("p{i}"), i != 4)).collect();
    let s = with_status(budget(json!({"minAvailable": 2})), &pods, None)["status"].clone();
    assert_eq!((s["currentHealthy"].as_i64(), s["desiredHealthy"].as_i64(), s["expectedPods"].as_i64(), s["disruptionsAllowed"].as_i64()), (Some(4), Some(2), Some(5), Some(2)));
    assert_eq!(s["conditions"][0]["status"], "True");
    assert_eq!(s["conditions"][0]["reason"], "SufficientPods");
    // maxUnavailable and percentages come from the controllers' scale.
    let s = with_status(budget(json!({"maxUnavailable": 1})), &pods, Some(5))["status"].clone();
    assert_eq!((s["desiredHealthy"].as_i64(), s["disruptionsAllowed"].as_i64()), (Some(4), Some(0)));
    assert_eq!(s["conditions"][0]["reason"], "InsufficientPods");
    let s = with_status(budget(json!({"minAvailable": "50%"})), &pods, Some(5))["status"].clone();
    assert_eq!((s["desiredHealthy"].as_i64(), s["disruptionsAllowed"].as_i64()), (Some(3), Some(1)));
    // No controller to scale by: nothing is allowed.
    let s = with_status(budget(json!({"maxUnavailable": "20%"})), &pods, None)["status"].clone();
    assert_eq!((s["disruptionsAllowed"].as_i64(), s["conditions"][0]["reason"].as_str()), (Some(0), Some("SyncFailed")));
}

#[test]
fn evictions_count_down_and_refuse_with_upstreams_words() {
    let pods: Vec<Value> = (0..3).map(|i| pod(&format!("p{i}"), true)).collect();
    let pdb = with_status(budget(json!({"minAvailable": 2})), &pods, None);
    let after = check_and_decrement(&pdb, "p0", NOW, false).unwrap();
    assert_eq!(after["status"]["disruptionsAllowed"], 0);
    assert_eq!(after["status"]["disruptedPods"], json!({"p0": NOW}));
    assert_eq!(after["status"]["conditions"][0]["status"], "False");
    let e = check_and_decrement(&after, "p1", NOW, false).unwrap_err();
    assert_eq!((e.code, e.reason, e.message.as_str()), (429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."));
    let d = e.details.unwrap();
    assert_eq!((d.causes[0].reason.as_str(), d.causes[0].message.as_str(), d.retry_after_seconds), ("DisruptionBudget", "The disruption budget web needs 2 healthy pods and has 3 currently", None));
    // The controller then sees p0 disrupted and counts it out until it goes or times out.
    let refs: Vec<&Value> = pods.iter().collect();
    let s = status(&after, &refs, None, NOW);
    assert_eq!((s["currentHealthy"].as_i64(), s["disruptionsAllowed"].as_i64()), (Some(2), Some(0)));
    let s = status(&after, &refs, None, "2026-12-03T10:02:01Z");
    assert_eq!((s["currentHealthy"].as_i64(), s.get("disruptedPods")), (Some(3), None));
    // A dry run counts down without naming the pod.
    assert_eq!(check_and_decrement(&pdb, "p0", NOW, true).unwrap()["status"].get("disruptedPods"), None);
    // A spec the controller has not seen yet.
    let mut newer = pdb.clone();
    newer["metadata"]["generation"] = json!(2);
    let e = check_and_decrement(&newer, "p0", NOW, false).unwrap_err();
    assert_eq!((e.code, e.details.unwrap().retry_after_seconds), (429, Some(10)));
}

#[test]
fn which_budgets_cover_a_pod() {
    let p = pod("p", true);
    assert!(covers(&budget(json!({})), &p));
    let mut empty = budget(json!({}));
    empty["spec"]["selector"] = json!({});
    assert!(!covers(&empty, &p), "an empty selector covers nothing for an eviction");
    assert!(counts(&empty, &p), "but the controller counts every pod for it");
    let mut other = budget(json!({}));
    other["metadata"]["namespace"] = json!("elsewhere");
    assert!(!covers(&other, &p));
    let mut pending = p.clone();
    pending["status"]["phase"] = json!("Pending");
    assert!(can_ignore_budget(&pending) && !can_ignore_budget(&p));
}

proptest! {
    /// Evictions decided one after another against the budget as the controller last wrote it
    /// never take the ready pods below `minAvailable`.
    #[test]
    fn evictions_never_take_healthy_pods_below_the_budget(ready in prop::collection::vec(any::<bool>(), 1..12), min in 0i64..12, order in prop::collection::vec(0usize..12, 0..30), recount in prop::collection::vec(any::<bool>(), 30)) {
        let mut pods: Vec<Value> = ready.iter().enumerate().map(|(i, r)| pod(&format!("p{i}"), *r)).collect();
        let mut pdb = with_status(budget(json!({"minAvailable": min})), &pods, None);
        let start_healthy = ready.iter().filter(|r| **r).count() as i64;
        for (step, i) in order.into_iter().enumerate() {
            let Some(target) = pods.get(i).cloned() else { continue };
            if target.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            if let Ok(next) = check_and_decrement(&pdb, crate::meta::meta_str(&target, "name"), NOW, false) {
                pdb = next;
                pods[i]["metadata"]["deletionTimestamp"] = json!(NOW);
            }
            if recount[step % recount.len()] {
                let refs: Vec<&Value> = pods.iter().collect();
                pdb["status"] = status(&pdb, &refs, None, NOW);
            }
            let healthy = pods.iter().filter(|p| pod_ready(p) && p.pointer("/metadata/deletionTimestamp").is_none()).count() as i64;
            prop_assert!(healthy >= min.min(start_healthy), "{} healthy under a budget of {}", healthy, min);
        }
    }
}
