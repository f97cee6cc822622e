//! Round trips through every served version, as a property over generated objects: lossless
//! where upstream's conversion is.

use super::*;
use crate::resources::{builtin_resources, find};
use proptest::prelude::*;

fn info(group: &str, version: &str, plural: &str) -> ResourceInfo {
    find(&builtin_resources(), group, version, plural).unwrap().clone()
}

/// Top-level nulls dropped (what Go decodes a null time into is the zero time, which it
/// writes back as null; both sides mean "unset").
fn without_nulls(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.retain(|_, v| !v.is_null());
    }
    v
}

fn quantity() -> impl Strategy<Value = Value> {
    (1u32..5000, prop_oneof![Just(""), Just("m"), Just("Mi")]).prop_map(|(n, s)| json!(format!("{n}{s}")))
}

fn selector() -> impl Strategy<Value = Option<Value>> {
    proptest::option::of("[a-z]{1,5}".prop_map(|k| json!({"matchLabels": {k: "x"}})))
}

/// A v2 metric of each source type, in the shape a v1 round trip keeps (the values v1
/// requires are set; a target's type agrees with which value is set).
fn v2_metric() -> impl Strategy<Value = Value> {
    let name = "[a-z]{1,8}";
    prop_oneof![
        (name, selector(), quantity(), proptest::option::of(quantity())).prop_map(|(n, sel, value, avg)| {
            let ty = if avg.is_some() { "AverageValue" } else { "Value" };
            let target = present(&[("type", Some(&json!(ty))), ("value", Some(&value)), ("averageValue", avg.as_ref())]);
            json!({"type": "Object", "object": {"describedObject": {"kind": "Service", "name": n, "apiVersion": "v1"}, "metric": present(&[("name", Some(&json!(n))), ("selector", sel.as_ref())]), "target": target}})
        }),
        (name, selector(), quantity()).prop_map(|(n, sel, avg)| json!({"type": "Pods", "pods": {"metric": present(&[("name", Some(&json!(n))), ("selector", sel.as_ref())]), "target": {"type": "AverageValue", "averageValue": avg}}})),
        (prop_oneof![Just("memory"), Just("ephemeral-storage")], 1u32..100, quantity(), any::<bool>()).prop_map(|(n, u, avg, by_utilization)| {
            let target = if by_utilization { json!({"type": "Utilization", "averageUtilization": u}) } else { json!({"type": "AverageValue", "averageValue": avg}) };
            json!({"type": "Resource", "resource": {"name": n, "target": target}})
        }),
        (1u32..100, "[a-z]{1,6}").prop_map(|(u, c)| json!({"type": "ContainerResource", "containerResource": {"name": "cpu", "container": c, "target": {"type": "Utilization", "averageUtilization": u}}})),
        (name, selector(), quantity(), any::<bool>()).prop_map(|(n, sel, q, by_value)| {
            let target = if by_value { json!({"type": "Value", "value": q}) } else { json!({"type": "AverageValue", "averageValue": q}) };
            json!({"type": "External", "external": {"metric": present(&[("name", Some(&json!(n))), ("selector", sel.as_ref())]), "target": target}})
        }),
    ]
}

fn v2_metric_status() -> impl Strategy<Value = Value> {
    prop_oneof![
        (quantity(), proptest::option::of(1u32..100)).prop_map(|(avg, u)| json!({"type": "Resource", "resource": {"name": "cpu", "current": present(&[("averageValue", Some(&avg)), ("averageUtilization", u.map(|u| json!(u)).as_ref())])}})),
        ("[a-z]{1,8}", quantity()).prop_map(|(n, avg)| json!({"type": "Pods", "pods": {"metric": {"name": n}, "current": {"averageValue": avg}}})),
        ("[a-z]{1,8}", quantity()).prop_map(|(n, v)| json!({"type": "External", "external": {"metric": {"name": n}, "current": {"value": v}}})),
    ]
}

fn behavior() -> impl Strategy<Value = Option<Value>> {
    let rules = (proptest::option::of(0u32..3600), proptest::option::of(prop_oneof![Just("Max"), Just("Min"), Just("Disabled")]), proptest::collection::vec((prop_oneof![Just("Pods"), Just("Percent")], 1u32..100, 1u32..1800), 0..3))
        .prop_map(|(w, sel, ps)| {
            let policies: Vec<Value> = ps.into_iter().map(|(t, v, p)| json!({"type": t, "value": v, "periodSeconds": p})).collect();
            present(&[("stabilizationWindowSeconds", w.map(|w| json!(w)).as_ref()), ("selectPolicy", sel.map(|s| json!(s)).as_ref()), ("policies", (!policies.is_empty()).then(|| json!(policies)).as_ref())])
        });
    proptest::option::of((proptest::option::of(rules.clone()), rules).prop_map(|(up, down)| present(&[("scaleUp", up.as_ref()), ("scaleDown", Some(&down))])))
}

prop_compose! {
    fn v2_hpa()(
        others in proptest::collection::vec(v2_metric(), 0..4),
        cpu in proptest::option::of(1u32..100),
        behavior in behavior(),
        current in proptest::collection::vec(v2_metric_status(), 0..3),
        conditions in proptest::collection::vec(prop_oneof![Just("AbleToScale"), Just("ScalingActive")], 0..2),
        min in proptest::option::of(1u32..5),
        annotated in any::<bool>(),
    ) -> Value {
        let mut metrics = others;
        if let Some(u) = cpu {
            // v1 writes the CPU target last when it lifts it out of the annotation.
            metrics.push(json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": u}}}));
        }
        if metrics.is_empty() {
            metrics.push(json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}));
        }
        let spec = present(&[
            ("scaleTargetRef", Some(&json!({"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"}))),
            ("minReplicas", min.map(|m| json!(m)).as_ref()),
            ("maxReplicas", Some(&json!(10))),
            ("metrics", Some(&json!(metrics))),
            ("behavior", behavior.as_ref()),
        ]);
        let conditions: Vec<Value> = conditions.into_iter().map(|t| json!({"type": t, "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z", "reason": "R", "message": "m"})).collect();
        let status = present(&[
            ("currentReplicas", Some(&json!(2))),
            ("desiredReplicas", Some(&json!(3))),
            ("currentMetrics", (!current.is_empty()).then(|| json!(current)).as_ref()),
            ("conditions", (!conditions.is_empty()).then(|| json!(conditions)).as_ref()),
        ]);
        let mut meta = json!({"name": "h", "namespace": "default", "uid": "u-1"});
        if annotated {
            meta["annotations"] = json!({"team": "a"});
        }
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta, "spec": spec, "status": status})
    }
}

fn core_event() -> impl Strategy<Value = Value> {
    (proptest::option::of("[A-Za-z]{1,10}"), proptest::option::of("[a-z ]{0,30}"), proptest::option::of(1u32..50), any::<bool>(), any::<bool>()).prop_map(|(reason, message, count, new_style, with_source)| {
        let mut e = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e.1", "namespace": "default"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}, "type": "Normal"});
        let o = e.as_object_mut().unwrap();
        for (k, v) in [("reason", reason.map(Value::from)), ("message", message.map(Value::from)), ("count", count.map(Value::from))] {
            if let Some(v) = v {
                o.insert(k.into(), v);
            }
        }
        // Go writes the source struct even when empty.
        o.insert("source".into(), if with_source { json!({"component": "kubelet", "host": "n1"}) } else { json!({}) });
        if new_style {
            o.insert("eventTime".into(), json!("2026-12-01T10:00:00.000001Z"));
            o.insert("reportingComponent".into(), json!("kubelet"));
            o.insert("reportingInstance".into(), json!("n1"));
            o.insert("action".into(), json!("Pulled"));
            o.insert("series".into(), json!({"count": 3, "lastObservedTime": "2026-12-01T10:00:01.000001Z"}));
        } else {
            o.insert("firstTimestamp".into(), json!("2026-12-01T10:00:00Z"));
            o.insert("lastTimestamp".into(), json!("2026-12-01T10:00:05Z"));
        }
        e
    })
}

proptest! {
    #[test]
    fn an_hpa_survives_a_trip_through_autoscaling_v1(hpa in v2_hpa()) {
        let v1 = info("autoscaling", "v1", "horizontalpodautoscalers");
        let served = from_storage(&v1, hpa.clone());
        prop_assert_eq!(&served["apiVersion"], "autoscaling/v1");
        prop_assert!(served["spec"].get("metrics").is_none());
        prop_assert_eq!(to_storage(&v1, served), hpa);
    }

    #[test]
    fn a_v1_hpa_survives_a_trip_through_storage(min in proptest::option::of(1u32..5), cpu in proptest::option::of(1u32..100), current in proptest::option::of(0u32..100)) {
        let v1 = info("autoscaling", "v1", "horizontalpodautoscalers");
        let spec = present(&[("scaleTargetRef", Some(&json!({"kind": "Deployment", "name": "web"}))), ("minReplicas", min.map(|m| json!(m)).as_ref()), ("maxReplicas", Some(&json!(4))), ("targetCPUUtilizationPercentage", Some(&json!(cpu.unwrap_or(80))))]);
        let status = present(&[("currentReplicas", Some(&json!(1))), ("desiredReplicas", Some(&json!(1))), ("currentCPUUtilizationPercentage", current.map(|c| json!(c)).as_ref())]);
        let obj = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"}, "spec": spec, "status": status});
        let stored = to_storage(&v1, obj.clone());
        prop_assert_eq!(&stored["apiVersion"], "autoscaling/v2");
        let back = from_storage(&v1, stored);
        // The CPU figure also travels in the current-metrics annotation, as upstream's does.
        let mut expected = obj;
        if current.is_some() {
            let text = back["metadata"]["annotations"][METRIC_STATUSES_ANNOTATION].as_str().unwrap_or("").to_owned();
            expected["metadata"]["annotations"] = json!({METRIC_STATUSES_ANNOTATION: text});
        }
        prop_assert_eq!(back, expected);
    }

    #[test]
    fn an_event_survives_a_trip_through_events_k8s_io(event in core_event()) {
        let v1 = info("events.k8s.io", "v1", "events");
        let served = from_storage(&v1, event.clone());
        prop_assert_eq!(&served["apiVersion"], "events.k8s.io/v1");
        prop_assert!(served.get("involvedObject").is_none() && served.get("message").is_none());
        prop_assert_eq!(without_nulls(to_storage(&v1, served.clone())), without_nulls(event));
        // And the other way: what an events.k8s.io client wrote reads back as it wrote it.
        let again = from_storage(&v1, to_storage(&v1, served.clone()));
        prop_assert_eq!(again, served);
    }
}

#[test]
fn a_v2_only_metric_travels_in_upstreams_annotation_shape() {
    let v1 = info("autoscaling", "v1", "horizontalpodautoscalers");
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3,
        "metrics": [{"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}}}});
    let served = from_storage(&v1, hpa);
    let a = &served["metadata"]["annotations"];
    let metrics: Value = serde_json::from_str(a[METRIC_SPECS_ANNOTATION].as_str().unwrap()).unwrap();
    assert_eq!(metrics, json!([{"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "10"}}]));
    assert_eq!(a[BEHAVIOR_ANNOTATION], json!("{\"ScaleUp\":null,\"ScaleDown\":{\"StabilizationWindowSeconds\":60,\"SelectPolicy\":\"Max\",\"Policies\":[{\"Type\":\"Percent\",\"Value\":100,\"PeriodSeconds\":15}],\"Tolerance\":null}}"));
    assert!(served["spec"].get("targetCPUUtilizationPercentage").is_none());
    assert_eq!(served["status"], json!({"currentReplicas": 0, "desiredReplicas": 0}));
}

#[test]
fn a_v1_hpa_without_a_target_gets_upstreams_implicit_cpu_target() {
    let v1 = info("autoscaling", "v1", "horizontalpodautoscalers");
    let stored = to_storage(&v1, json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"}, "spec": {"maxReplicas": 3}}));
    assert_eq!(stored["spec"]["metrics"], json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]));
    let partial = partial_to_storage(&v1, json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"}, "spec": {"maxReplicas": 3}}));
    assert!(partial["spec"].get("metrics").is_none());
}

#[test]
fn events_k8s_io_selects_by_its_own_field_names() {
    let v1 = info("events.k8s.io", "v1", "events");
    assert_eq!(field_label(&v1, "regarding.name").as_deref(), Some("involvedObject.name"));
    assert_eq!(field_label(&v1, "reportingController").as_deref(), Some("reportingComponent"));
    assert_eq!(field_label(&v1, "involvedObject.name"), None);
    assert_eq!(field_label(&v1, "source"), None);
    let core = info("", "v1", "events");
    assert_eq!(field_label(&core, "involvedObject.name").as_deref(), Some("involvedObject.name"));
}
