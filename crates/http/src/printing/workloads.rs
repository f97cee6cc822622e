//! Printer columns of the workload kinds: pods and their templates, the controllers that make
//! them (replication controllers, deployments, replica sets, stateful sets, daemon sets, jobs,
//! cron jobs, controller revisions), autoscalers and disruption budgets.

use super::kinds::{age_at, col, containers, int, label_selector, n, none_if_empty, s, selector_text, shown, text_or_none, wide, Column, AGE, NAME};
use serde_json::{json, Value};

const CONTAINERS: &str = "Names of each container in the template.";
const IMAGES: &str = "Images referenced by each container in the template.";
const SELECTOR: &str = "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.";

fn template_containers(obj: &Value) -> Value {
    json!(containers(obj, "/spec/template/spec/containers").0)
}
fn template_images(obj: &Value) -> Value {
    json!(containers(obj, "/spec/template/spec/containers").1)
}
fn match_labels(obj: &Value) -> Value {
    json!(none_if_empty(selector_text(obj.pointer("/spec/selector/matchLabels"))))
}
fn full_selector(obj: &Value) -> Value {
    json!(label_selector(obj.pointer("/spec/selector")))
}

fn pod_ready(obj: &Value) -> Value {
    let total = obj.pointer("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
    let ready = obj.pointer("/status/containerStatuses").and_then(Value::as_array).map_or(0, |c| c.iter().filter(|c| c["ready"] == true).count());
    json!(format!("{ready}/{total}"))
}
fn pod_status(obj: &Value) -> Value {
    if obj.pointer("/metadata/deletionTimestamp").is_some() {
        return json!("Terminating");
    }
    match s(obj, "/status/reason") {
        "" => json!(s(obj, "/status/phase")),
        r => json!(r),
    }
}
fn pod_restarts(obj: &Value) -> Value {
    let restarts: i64 = obj.pointer("/status/containerStatuses").and_then(Value::as_array).map_or(0, |c| c.iter().map(|c| c["restartCount"].as_i64().unwrap_or(0)).sum());
    json!(restarts.to_string())
}

const PODS: &[Column] = &[
    NAME,
    col("Ready", "The aggregate readiness state of this pod for accepting traffic.", pod_ready),
    col("Status", "The aggregate status of the containers in this pod.", pod_status),
    col("Restarts", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.", pod_restarts),
    AGE,
    wide("IP", "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.", |o| text_or_none(o, "/status/podIP")),
    wide("Node", "NodeName is a request to schedule this pod onto a specific node. If it is non-empty, the scheduler simply schedules this pod onto that node, assuming that it fits resource requirements.", |o| text_or_none(o, "/spec/nodeName")),
    wide("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.", |o| text_or_none(o, "/status/nominatedNodeName")),
    wide("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness.", |_| json!("<none>")),
];

const POD_TEMPLATES: &[Column] = &[
    NAME,
    col("Containers", CONTAINERS, |o| json!(containers(o, "/template/spec/containers").0)),
    col("Images", IMAGES, |o| json!(containers(o, "/template/spec/containers").1)),
    col("Pod Labels", "The labels of the pod template.", |o| json!(none_if_empty(selector_text(o.pointer("/template/metadata/labels"))))),
];

const DEPLOYMENTS: &[Column] = &[
    NAME,
    col("Ready", "Number of the pod with ready state.", |o| json!(format!("{}/{}", n(o, "/status/readyReplicas"), o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)))),
    int("Up-to-date", "Total number of non-terminated pods targeted by this deployment that have the desired template spec.", |o| json!(n(o, "/status/updatedReplicas"))),
    int("Available", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.", |o| json!(n(o, "/status/availableReplicas"))),
    AGE,
    wide("Containers", CONTAINERS, template_containers),
    wide("Images", IMAGES, template_images),
    wide("Selector", SELECTOR, match_labels),
];

/// Desired, Current and Ready replicas, then the template: replica sets and replication
/// controllers alike.
const REPLICA_SETS: &[Column] = &[
    NAME,
    int("Desired", "Replicas is the number of desired replicas.", |o| json!(o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1))),
    int("Current", "Replicas is the most recently observed number of replicas.", |o| json!(n(o, "/status/replicas"))),
    int("Ready", "The number of ready replicas for this replica set.", |o| json!(n(o, "/status/readyReplicas"))),
    AGE,
    wide("Containers", CONTAINERS, template_containers),
    wide("Images", IMAGES, template_images),
    wide("Selector", SELECTOR, match_labels),
];

const REPLICATION_CONTROLLERS: &[Column] = &[
    NAME,
    int("Desired", "Replicas is the number of desired replicas.", |o| json!(o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1))),
    int("Current", "Replicas is the most recently observed number of replicas.", |o| json!(n(o, "/status/replicas"))),
    int("Ready", "The number of ready replicas for this replication controller.", |o| json!(n(o, "/status/readyReplicas"))),
    AGE,
    wide("Containers", CONTAINERS, template_containers),
    wide("Images", IMAGES, template_images),
    wide("Selector", SELECTOR, |o| json!(none_if_empty(selector_text(o.pointer("/spec/selector"))))),
];

const STATEFUL_SETS: &[Column] = &[
    NAME,
    col("Ready", "Number of the pod with ready state.", |o| json!(format!("{}/{}", n(o, "/status/readyReplicas"), o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)))),
    AGE,
    wide("Containers", CONTAINERS, template_containers),
    wide("Images", IMAGES, template_images),
];

const DAEMON_SETS: &[Column] = &[
    NAME,
    int("Desired", "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).", |o| json!(n(o, "/status/desiredNumberScheduled"))),
    int("Current", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.", |o| json!(n(o, "/status/currentNumberScheduled"))),
    int("Ready", "numberReady is the number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition.", |o| json!(n(o, "/status/numberReady"))),
    int("Up-to-date", "The total number of nodes that are running updated daemon pod", |o| json!(n(o, "/status/updatedNumberScheduled"))),
    int("Available", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)", |o| json!(n(o, "/status/numberAvailable"))),
    col("Node Selector", "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node.", |o| json!(none_if_empty(selector_text(o.pointer("/spec/template/spec/nodeSelector"))))),
    AGE,
    wide("Containers", CONTAINERS, template_containers),
    wide("Images", IMAGES, template_images),
    wide("Selector", SELECTOR, full_selector),
];

fn condition_true(obj: &Value, ty: &str) -> bool {
    obj.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|c| c.iter().any(|c| c["type"] == ty && c["status"] == "True"))
}

fn job_status(obj: &Value) -> Value {
    for (ty, shown) in [("Failed", "Failed"), ("Complete", "Complete"), ("Suspended", "Suspended"), ("FailureTarget", "FailureTarget"), ("SuccessCriteriaMet", "SuccessCriteriaMet")] {
        if condition_true(obj, ty) {
            return json!(shown);
        }
    }
    json!("Running")
}

fn job_completions(obj: &Value) -> Value {
    let succeeded = n(obj, "/status/succeeded");
    match obj.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => json!(format!("{succeeded}/{c}")),
        None => match n(obj, "/spec/parallelism") {
            p if p > 1 => json!(format!("{succeeded}/1 of {p}")),
            _ => json!(format!("{succeeded}/1")),
        },
    }
}

fn job_duration(obj: &Value) -> Value {
    let Some(start) = obj.pointer("/status/startTime").and_then(Value::as_str).and_then(|t| t.parse::<jiff::Timestamp>().ok()) else { return json!("") };
    let end = obj.pointer("/status/completionTime").and_then(Value::as_str).and_then(|t| t.parse::<jiff::Timestamp>().ok()).unwrap_or_else(jiff::Timestamp::now);
    json!(super::human_duration(end.as_second() - start.as_second()))
}

const JOBS: &[Column] = &[
    NAME,
    col("Status", "Status of the job.", job_status),
    col("Completions", "The completion status of the job.", job_completions),
    col("Duration", "Time required to complete the job.", job_duration),
    AGE,
    wide("Containers", CONTAINERS, template_containers),
    wide("Images", IMAGES, template_images),
    wide("Selector", SELECTOR, full_selector),
];

const CRON_JOBS: &[Column] = &[
    NAME,
    col("Schedule", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.", |o| json!(s(o, "/spec/schedule"))),
    col("Timezone", "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.", |o| text_or_none(o, "/spec/timeZone")),
    col("Suspend", "This flag tells the controller to suspend subsequent executions.", |o| json!(if o.pointer("/spec/suspend") == Some(&json!(true)) { "True" } else { "False" })),
    int("Active", "A list of pointers to currently running jobs.", |o| json!(o.pointer("/status/active").and_then(Value::as_array).map_or(0, Vec::len))),
    col("Last Schedule", "Information when was the last time the job was successfully scheduled.", |o| age_at(o, "/status/lastScheduleTime")),
    AGE,
    wide("Containers", CONTAINERS, |o| json!(containers(o, "/spec/jobTemplate/spec/template/spec/containers").0)),
    wide("Images", IMAGES, |o| json!(containers(o, "/spec/jobTemplate/spec/template/spec/containers").1)),
    wide("Selector", SELECTOR, |o| json!(label_selector(o.pointer("/spec/jobTemplate/spec/selector")))),
];

const CONTROLLER_REVISIONS: &[Column] = &[
    NAME,
    col("Controller", "Controller of the object.", |o| {
        let owner = o.pointer("/metadata/ownerReferences").and_then(Value::as_array).and_then(|refs| refs.iter().find(|r| r["controller"] == true));
        json!(owner.map_or("<none>".to_owned(), |r| {
            let group = r["apiVersion"].as_str().unwrap_or("").rsplit_once('/').map_or("", |(g, _)| g);
            let kind = r["kind"].as_str().unwrap_or("").to_ascii_lowercase();
            let name = r["name"].as_str().unwrap_or("");
            if group.is_empty() { format!("{kind}/{name}") } else { format!("{kind}.{group}/{name}") }
        }))
    }),
    int("Revision", "Revision indicates the revision of the state represented by Data.", |o| json!(n(o, "/revision"))),
    AGE,
];

/// An autoscaler's targets as upstream prints them: each metric's current and target value
/// (`cpu: <unknown>/80%` before any is measured).
fn hpa_targets(obj: &Value) -> Value {
    let metrics = obj.pointer("/spec/metrics").and_then(Value::as_array).cloned().unwrap_or_default();
    let current = obj.pointer("/status/currentMetrics").and_then(Value::as_array).cloned().unwrap_or_default();
    let parts: Vec<String> = metrics
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let ty = m["type"].as_str().unwrap_or("");
            let key = match ty {
                "Resource" => "resource",
                "ContainerResource" => "containerResource",
                "Pods" => "pods",
                "Object" => "object",
                "External" => "external",
                _ => "",
            };
            let source = &m[key];
            let target = &source["target"];
            let now = current.get(i).map(|c| &c[key]["current"]);
            let (cur, want) = match target["type"].as_str() {
                Some("Utilization") => (now.and_then(|c| c["averageUtilization"].as_i64()).map(|u| format!("{u}%")), format!("{}%", target["averageUtilization"].as_i64().unwrap_or(0))),
                Some("AverageValue") => (now.and_then(|c| c["averageValue"].as_str().map(str::to_owned)), shown(target, "/averageValue")),
                _ => (now.and_then(|c| c["value"].as_str().map(str::to_owned)), shown(target, "/value")),
            };
            let cur = cur.unwrap_or_else(|| "<unknown>".into());
            match ty {
                "Resource" | "ContainerResource" => format!("{}: {cur}/{want}", source["name"].as_str().unwrap_or("")),
                _ => format!("{cur}/{want}"),
            }
        })
        .collect();
    json!(if parts.is_empty() { "<none>".to_owned() } else { parts.join(", ") })
}

const HORIZONTAL_POD_AUTOSCALERS: &[Column] = &[
    NAME,
    col("Reference", "The identifier for the referent.", |o| json!(format!("{}/{}", s(o, "/spec/scaleTargetRef/kind"), s(o, "/spec/scaleTargetRef/name")))),
    col("Targets", "The current and target metrics of the autoscaler.", hpa_targets),
    col("MinPods", "Lower limit for the number of pods that can be set by the autoscaler, default 1.", |o| json!(shown(o, "/spec/minReplicas"))),
    int("MaxPods", "Upper limit for the number of pods that can be set by the autoscaler; cannot be smaller than MinReplicas.", |o| json!(n(o, "/spec/maxReplicas"))),
    int("Replicas", "Current number of replicas of pods managed by this autoscaler.", |o| json!(n(o, "/status/currentReplicas"))),
    AGE,
];

const POD_DISRUPTION_BUDGETS: &[Column] = &[
    NAME,
    col("Min Available", "The minimum number of pods that must be available simultaneously. This can be either an integer or a string specifying a percentage, e.g. \"28%\".", |o| json!(if o.pointer("/spec/minAvailable").is_some() { shown(o, "/spec/minAvailable") } else { "N/A".into() })),
    col("Max Unavailable", "The maximum number of pods that may be unavailable. This can be either an integer or a string specifying a percentage, e.g. \"28%\".", |o| json!(if o.pointer("/spec/maxUnavailable").is_some() { shown(o, "/spec/maxUnavailable") } else { "N/A".into() })),
    int("Allowed Disruptions", "Number of pod disruptions that are currently allowed.", |o| json!(n(o, "/status/disruptionsAllowed"))),
    AGE,
];

/// The columns of a workload kind.
pub(super) fn of(group: &str, plural: &str) -> Option<&'static [Column]> {
    Some(match (group, plural) {
        ("", "pods") => PODS,
        ("", "podtemplates") => POD_TEMPLATES,
        ("", "replicationcontrollers") => REPLICATION_CONTROLLERS,
        ("apps", "deployments") => DEPLOYMENTS,
        ("apps", "replicasets") => REPLICA_SETS,
        ("apps", "statefulsets") => STATEFUL_SETS,
        ("apps", "daemonsets") => DAEMON_SETS,
        ("apps", "controllerrevisions") => CONTROLLER_REVISIONS,
        ("batch", "jobs") => JOBS,
        ("batch", "cronjobs") => CRON_JOBS,
        ("autoscaling", "horizontalpodautoscalers") => HORIZONTAL_POD_AUTOSCALERS,
        ("policy", "poddisruptionbudgets") => POD_DISRUPTION_BUDGETS,
        _ => return None,
    })
}
