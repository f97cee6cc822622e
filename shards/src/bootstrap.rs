//! What kube-apiserver creates when it starts, created by the shard that owns each object.

use crate::shard::Shard;
use serde_json::Value;
use shardplane_apimachinery::kind_rules;
use shardplane_apimachinery::resources::ResourceInfo;
use std::sync::Arc;
use std::time::Duration;

/// The namespaces kube-apiserver creates at start-up.
pub const BOOTSTRAP: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The `default/kubernetes` Service kube-apiserver keeps for in-cluster clients (clients and
/// conformance tests look for it). Its cluster IP is the first of upstream's default service
/// range; shardplane allocates no others yet.
fn kubernetes_service() -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"], "type": "ClusterIP", "sessionAffinity": "None",
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]},
    })
}

/// The `cluster-admin` ClusterRole and its binding to `system:masters`, as upstream's RBAC
/// bootstrap policy writes them (the rest of that policy comes with RBAC enforcement).
fn cluster_admin() -> [Value; 2] {
    let meta = serde_json::json!({"name": "cluster-admin", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}, "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}});
    [
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta,
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["*"]}]}),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]}),
    ]
}

/// Creates what kube-apiserver creates at start, where this shard owns it and it is absent
/// (retrying until etcd answers): the bootstrap namespaces, their `default` ServiceAccounts and
/// the `default/kubernetes` Service (its bootstrap controller), the system priority classes (the scheduling group's post-start
/// hook), `cluster-admin` (the RBAC bootstrap policy), and API Priority and Fairness'
/// mandatory and suggested FlowSchemas and PriorityLevelConfigurations.
pub async fn bootstrap(shard: Arc<Shard>) {
    let ns_info = shard.builtin("", "namespaces");
    let svc_info = shard.builtin("", "services");
    let pc_info = shard.builtin("scheduling.k8s.io", "priorityclasses");
    let objects = BOOTSTRAP
        .iter()
        .map(|name| (ns_info.clone(), "", *name, serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})))
        .chain([(svc_info, "default", "kubernetes", kubernetes_service())])
        // Each bootstrap namespace's default service account (the service-account controller's).
        .chain(BOOTSTRAP.iter().map(|ns| (shard.builtin("", "serviceaccounts"), *ns, shardplane_apimachinery::service_accounts::DEFAULT_SERVICE_ACCOUNT, shardplane_apimachinery::service_accounts::default_service_account(ns))))
        .chain(kind_rules::SYSTEM_PRIORITY_CLASSES.iter().map(|(name, value, description)| (pc_info.clone(), "", *name, kind_rules::system_priority_class(name, *value, description))))
        .chain(cluster_admin().into_iter().zip(["clusterroles", "clusterrolebindings"]).map(|(obj, plural)| (shard.builtin("rbac.authorization.k8s.io", plural), "", "cluster-admin", obj)));
    // API Priority and Fairness' mandatory and suggested configuration (its config-producer
    // post-start hook); names are taken out of each object below.
    let pl_info = shard.builtin("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations");
    let fs_info = shard.builtin("flowcontrol.apiserver.k8s.io", "flowschemas");
    let flowcontrol: Vec<(Arc<ResourceInfo>, Value)> = kind_rules::flowcontrol::priority_levels().into_iter().map(|o| (pl_info.clone(), o)).chain(kind_rules::flowcontrol::flow_schemas().into_iter().map(|o| (fs_info.clone(), o))).collect();
    let names: Vec<String> = flowcontrol.iter().map(|(_, o)| o["metadata"]["name"].as_str().unwrap_or("").to_owned()).collect();
    let objects = objects.chain(flowcontrol.into_iter().zip(names.iter()).map(|((info, obj), name)| (info, "", name.as_str(), obj)));
    for (info, namespace, name, mut obj) in objects {
        let Ok(key) = shard.owned_key(&info, namespace, name) else { continue };
        shardplane_apimachinery::defaults::set_defaults(&info, &mut obj);
        shardplane_apimachinery::strategy::prepare_for_create(&info, &mut obj);
        loop {
            match shard.store(&info).create(&key, shardplane_apimachinery::encode::object_bytes(&obj)).await {
                Ok(_) | Err(shardplane_storage::StorageError::AlreadyExists) => break,
                Err(e) => {
                    tracing::warn!(object = name, error = %e, "bootstrap object not created yet; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = shard.shutdown.cancelled() => return,
                    }
                }
            }
        }
    }
}

