//! The admission steps kube-apiserver runs by default (its admission plugins), as decisions over
//! the objects they read: the shard reads those (its informers of the configuration kinds) and
//! applies these. Mutating: DefaultTolerationSeconds, TaintNodesByCondition, Priority,
//! RuntimeClass, DefaultStorageClass, DefaultIngressClass. Validating: what may not be deleted
//! ([`validate_delete`]), one global default priority class.

use crate::resources::ResourceInfo;
use crate::ApiError;
use serde_json::{json, Value};

/// The namespaces upstream's NamespaceLifecycle admission plugin never lets go.
pub const IMMORTAL_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// What upstream refuses to delete, 403 Forbidden as upstream words it: the immortal
/// namespaces (its NamespaceLifecycle plugin) and the system priority classes (their storage).
pub fn validate_delete(info: &ResourceInfo, name: &str) -> Result<(), ApiError> {
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "namespaces") if IMMORTAL_NAMESPACES.contains(&name) => Err(ApiError::forbidden("", "namespaces", name, "this namespace may not be deleted")),
        ("scheduling.k8s.io", "priorityclasses") if crate::kind_rules::SYSTEM_PRIORITY_CLASSES.iter().any(|(n, _, _)| *n == name) => {
            Err(ApiError::forbidden(&info.group, &info.plural, name, "this is a system priority class and cannot be deleted"))
        }
        _ => Ok(()),
    }
}

/// Upstream's DefaultTolerationSeconds admission plugin (on by default): a new pod tolerates
/// `not-ready` and `unreachable` nodes for 300 s unless it says otherwise for those keys.
pub fn default_toleration_seconds(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = tolerations.as_array_mut() else { return };
    for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
        let covered = list.iter().any(|t| {
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (effect.is_empty() || effect == "NoExecute") && (t.get("key").and_then(Value::as_str) == Some(key) || (t.get("key").is_none() && t.get("operator").and_then(Value::as_str) == Some("Exists")))
        });
        if !covered {
            list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
}

/// Upstream's TaintNodesByCondition plugin: a new node is tainted `not-ready:NoSchedule` until
/// its kubelet (through the node lifecycle controller) says it is ready.
pub fn taint_new_node(node: &mut Value) {
    const KEY: &str = "node.kubernetes.io/not-ready";
    let Some(spec) = node.as_object_mut().map(|o| o.entry("spec").or_insert_with(|| json!({}))).and_then(Value::as_object_mut) else { return };
    let taints = spec.entry("taints").or_insert_with(|| json!([]));
    let Some(list) = taints.as_array_mut() else { return };
    if !list.iter().any(|t| t["key"] == KEY && t["effect"] == "NoSchedule") {
        list.push(json!({"key": KEY, "effect": "NoSchedule"}));
    }
}

/// The newest of the objects marked default by one of `annotations` set to "true" (upstream
/// picks the most recently created when several are; a tie goes to the name first in order).
pub fn newest_default<'a>(objects: impl IntoIterator<Item = &'a Value>, annotations: &[&str]) -> Option<String> {
    objects
        .into_iter()
        .filter(|o| annotations.iter().any(|a| o.pointer("/metadata/annotations").and_then(|m| m.get(*a)).and_then(Value::as_str) == Some("true")))
        .map(|o| (crate::meta::meta_str(o, "creationTimestamp").to_owned(), crate::meta::meta_str(o, "name").to_owned()))
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
        .map(|(_, name)| name)
}

/// Upstream's DefaultStorageClass plugin: a claim that names no class (absent, not "") and has
/// no beta class annotation gets the default storage class, if there is one.
pub fn default_storage_class<'a>(claim: &mut Value, classes: impl IntoIterator<Item = &'a Value>) {
    if claim.pointer("/spec/storageClassName").is_some_and(|v| !v.is_null()) || claim.pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class").is_some() {
        return;
    }
    if let Some(name) = newest_default(classes, &["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"])
        && let Some(spec) = claim.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.insert("storageClassName".into(), Value::String(name));
    }
}

/// Upstream's DefaultIngressClass plugin: an ingress that names no class (field or the legacy
/// annotation) gets the default ingress class, if there is one.
pub fn default_ingress_class<'a>(ingress: &mut Value, classes: impl IntoIterator<Item = &'a Value>) {
    if ingress.pointer("/spec/ingressClassName").is_some_and(|v| !v.is_null()) || ingress.pointer("/metadata/annotations/kubernetes.io~1ingress.class").is_some() {
        return;
    }
    if let Some(name) = newest_default(classes, &["ingressclass.kubernetes.io/is-default-class"]) {
        let spec = ingress.as_object_mut().map(|o| o.entry("spec").or_insert_with(|| json!({})));
        if let Some(spec) = spec.and_then(Value::as_object_mut) {
            spec.insert("ingressClassName".into(), Value::String(name));
        }
    }
}

/// Upstream's Priority plugin on a new pod: `priorityClassName` (or the global default class,
/// or none) decides `priority` and `preemptionPolicy`; a pod that gives other values, or names a
/// class that does not exist, is refused (the reason, for a 403).
pub fn pod_priority<'a>(pod: &mut Value, classes: impl IntoIterator<Item = &'a Value>) -> Result<(), String> {
    let classes: Vec<&Value> = classes.into_iter().collect();
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
    let named = spec.get("priorityClassName").and_then(Value::as_str).unwrap_or("").to_owned();
    let (class_name, value, policy) = if named.is_empty() {
        // The global default with the lowest value, else priority 0.
        match classes.iter().filter(|c| c["globalDefault"] == true).min_by_key(|c| c["value"].as_i64().unwrap_or(0)) {
            Some(c) => (crate::meta::meta_str(c, "name").to_owned(), c["value"].as_i64().unwrap_or(0), c.get("preemptionPolicy").cloned()),
            None => (String::new(), 0, Some(json!("PreemptLowerPriority"))),
        }
    } else {
        let c = classes.iter().find(|c| crate::meta::meta_str(c, "name") == named).ok_or_else(|| format!("no PriorityClass with name {named} was found"))?;
        (named.clone(), c["value"].as_i64().unwrap_or(0), c.get("preemptionPolicy").cloned())
    };
    if let Some(given) = spec.get("priority").and_then(Value::as_i64)
        && given != value
    {
        return Err(format!("the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"));
    }
    if let Some(p) = policy.filter(|p| !p.is_null()) {
        if let Some(given) = spec.get("preemptionPolicy").and_then(Value::as_str)
            && Some(given) != p.as_str()
        {
            return Err(format!("the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {} from the given PriorityClass name", p.as_str().unwrap_or("")));
        }
        spec.insert("preemptionPolicy".into(), p);
    }
    if !class_name.is_empty() {
        spec.insert("priorityClassName".into(), Value::String(class_name));
    }
    spec.insert("priority".into(), json!(value));
    Ok(())
}

/// What the Priority plugin keeps on a pod update: the priority it set on create, when the
/// update leaves it out (the field is immutable, so any other value fails validation).
pub fn keep_pod_priority(old: &Value, new: &mut Value) {
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else { return };
    for field in ["priority", "preemptionPolicy"] {
        if spec.get(field).is_none_or(Value::is_null)
            && let Some(v) = old.pointer(&format!("/spec/{field}"))
        {
            spec.insert(field.into(), v.clone());
        }
    }
}

/// The Priority plugin on a priority class being written: at most one global default (the
/// reason names the one there is, for a 403).
pub fn one_global_default<'a>(class: &Value, classes: impl IntoIterator<Item = &'a Value>) -> Result<(), String> {
    if class["globalDefault"] != true {
        return Ok(());
    }
    let name = crate::meta::meta_str(class, "name");
    match classes.into_iter().find(|c| c["globalDefault"] == true && crate::meta::meta_str(c, "name") != name) {
        Some(other) => Err(format!("PriorityClass {} is already marked as default. Only one default can exist", crate::meta::meta_str(other, "name"))),
        None => Ok(()),
    }
}

/// Upstream's RuntimeClass plugin on a new pod whose `runtimeClassName` is `class` (None: no
/// such class): the class's pod overhead and scheduling constraints are applied; the reason for
/// a 403 otherwise.
pub fn runtime_class(pod: &mut Value, name: &str, class: Option<&Value>) -> Result<(), String> {
    let class = class.ok_or_else(|| format!("pod rejected: RuntimeClass {name:?} not found"))?;
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
    if let Some(fixed) = class.pointer("/overhead/podFixed").filter(|v| !v.is_null()) {
        match spec.get("overhead") {
            Some(o) if o != fixed => return Err("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead".into()),
            _ => {
                spec.insert("overhead".into(), fixed.clone());
            }
        }
    } else if spec.get("overhead").is_some_and(|o| !o.is_null()) {
        return Err("pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead".into());
    }
    if let Some(wanted) = class.pointer("/scheduling/nodeSelector").and_then(Value::as_object) {
        let selector = spec.entry("nodeSelector").or_insert_with(|| json!({}));
        if let Some(sel) = selector.as_object_mut() {
            for (k, v) in wanted {
                match sel.get(k) {
                    Some(have) if have != v => return Err(format!("conflict: runtimeClass.scheduling.nodeSelector[{k}] = {}; pod.spec.nodeSelector[{k}] = {}", v.as_str().unwrap_or(""), have.as_str().unwrap_or(""))),
                    _ => {
                        sel.insert(k.clone(), v.clone());
                    }
                }
            }
        }
    }
    if let Some(wanted) = class.pointer("/scheduling/tolerations").and_then(Value::as_array) {
        let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
        if let Some(list) = tolerations.as_array_mut() {
            for t in wanted {
                if !list.contains(t) {
                    list.push(t.clone());
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, value: i64, default: bool, created: &str) -> Value {
        json!({"metadata": {"name": name, "creationTimestamp": created}, "value": value, "globalDefault": default, "preemptionPolicy": "PreemptLowerPriority"})
    }

    #[test]
    fn a_pod_gets_its_class_priority_or_the_default_or_zero() {
        let classes = [class("high", 1000, false, "2026-01-01T00:00:00Z")];
        let mut pod = json!({"spec": {"priorityClassName": "high"}});
        pod_priority(&mut pod, &classes).unwrap();
        assert_eq!((pod["spec"]["priority"].clone(), pod["spec"]["preemptionPolicy"].clone()), (json!(1000), json!("PreemptLowerPriority")));
        let mut plain = json!({"spec": {}});
        pod_priority(&mut plain, &classes).unwrap();
        assert_eq!(plain["spec"]["priority"], 0);
        assert!(plain["spec"].get("priorityClassName").is_none());
        let with_default = [class("high", 1000, false, "x"), class("base", 10, true, "x")];
        let mut defaulted = json!({"spec": {}});
        pod_priority(&mut defaulted, &with_default).unwrap();
        assert_eq!((defaulted["spec"]["priorityClassName"].clone(), defaulted["spec"]["priority"].clone()), (json!("base"), json!(10)));
        let err = pod_priority(&mut json!({"spec": {"priorityClassName": "nope"}}), &classes).unwrap_err();
        assert_eq!(err, "no PriorityClass with name nope was found");
        let err = pod_priority(&mut json!({"spec": {"priorityClassName": "high", "priority": 5}}), &classes).unwrap_err();
        assert!(err.starts_with("the integer value of priority (5) must not be provided"), "{err}");
    }

    #[test]
    fn only_one_global_default_priority_class() {
        let classes = [class("base", 10, true, "x")];
        assert_eq!(one_global_default(&class("other", 5, true, "x"), &classes).unwrap_err(), "PriorityClass base is already marked as default. Only one default can exist");
        assert!(one_global_default(&class("base", 11, true, "x"), &classes).is_ok());
        assert!(one_global_default(&class("other", 5, false, "x"), &classes).is_ok());
    }

    #[test]
    fn the_newest_default_class_is_given_to_what_names_none() {
        let sc = |name: &str, created: &str, default: bool| json!({"metadata": {"name": name, "creationTimestamp": created, "annotations": {"storageclass.kubernetes.io/is-default-class": if default { "true" } else { "false" }}}});
        let classes = [sc("old", "2026-01-01T00:00:00Z", true), sc("new", "2026-02-01T00:00:00Z", true), sc("newest", "2026-03-01T00:00:00Z", false)];
        let mut claim = json!({"spec": {}});
        default_storage_class(&mut claim, &classes);
        assert_eq!(claim["spec"]["storageClassName"], "new");
        let mut explicit = json!({"spec": {"storageClassName": ""}});
        default_storage_class(&mut explicit, &classes);
        assert_eq!(explicit["spec"]["storageClassName"], "");
        let ic = json!({"metadata": {"name": "nginx", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}}});
        let mut ingress = json!({"spec": {}});
        default_ingress_class(&mut ingress, [&ic]);
        assert_eq!(ingress["spec"]["ingressClassName"], "nginx");
    }

    #[test]
    fn a_runtime_class_sets_overhead_and_scheduling() {
        let rc = json!({"metadata": {"name": "kata"}, "handler": "kata", "overhead": {"podFixed": {"cpu": "250m"}}, "scheduling": {"nodeSelector": {"sandbox": "yes"}, "tolerations": [{"key": "sandbox", "operator": "Exists"}]}});
        let mut pod = json!({"spec": {"runtimeClassName": "kata"}});
        runtime_class(&mut pod, "kata", Some(&rc)).unwrap();
        assert_eq!(pod["spec"]["overhead"], json!({"cpu": "250m"}));
        assert_eq!(pod["spec"]["nodeSelector"], json!({"sandbox": "yes"}));
        assert_eq!(pod["spec"]["tolerations"], json!([{"key": "sandbox", "operator": "Exists"}]));
        assert_eq!(runtime_class(&mut json!({"spec": {}}), "gone", None).unwrap_err(), "pod rejected: RuntimeClass \"gone\" not found");
        let err = runtime_class(&mut json!({"spec": {"nodeSelector": {"sandbox": "no"}}}), "kata", Some(&rc)).unwrap_err();
        assert_eq!(err, "conflict: runtimeClass.scheduling.nodeSelector[sandbox] = yes; pod.spec.nodeSelector[sandbox] = no");
    }

    #[test]
    fn a_new_node_is_not_ready_for_scheduling() {
        let mut node = json!({"metadata": {"name": "n"}});
        taint_new_node(&mut node);
        taint_new_node(&mut node);
        assert_eq!(node["spec"]["taints"], json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]));
    }
}
