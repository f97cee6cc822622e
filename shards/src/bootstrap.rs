//! What kube-apiserver creates when it starts, created by the shard that owns each object.

use crate::shard::Shard;
use serde_json::Value;
use shardplane_apimachinery::kind_rules;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_identity::rbac::bootstrap as rbac_bootstrap;
use std::sync::Arc;
use std::time::Duration;

/// The namespaces kube-apiserver creates at start-up.
pub const BOOTSTRAP: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The `default/kubernetes` Service kube-apiserver keeps for in-cluster clients (clients and
/// conformance tests look for it). Its cluster IP is the first of the service range, held by an
/// IPAddress created with it (RFC 0014).
fn kubernetes_service(shard: &Shard) -> Value {
    let ip = shard.service_network.kubernetes_service_ip().to_string();
    serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"clusterIP": ip, "clusterIPs": [ip], "type": "ClusterIP", "sessionAffinity": "None", "ipFamilies": [shard.service_network.family()], "ipFamilyPolicy": "SingleStack",
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]},
    })
}

/// Creates what kube-apiserver creates at start, where this shard owns it and it is absent
/// (retrying until etcd answers): the bootstrap namespaces, their `default` ServiceAccounts and
/// the `default/kubernetes` Service (its bootstrap controller), the system priority classes (the
/// scheduling group's post-start hook), the RBAC bootstrap policy's ClusterRoles and
/// ClusterRoleBindings, and API Priority and Fairness' mandatory and suggested FlowSchemas and
/// PriorityLevelConfigurations.
pub async fn bootstrap(shard: Arc<Shard>) {
    let ns_info = shard.builtin("", "namespaces");
    let svc_info = shard.builtin("", "services");
    let pc_info = shard.builtin("scheduling.k8s.io", "priorityclasses");
    let objects = BOOTSTRAP
        .iter()
        .map(|name| (ns_info.clone(), "", *name, serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})))
        .chain([(svc_info, "default", "kubernetes", kubernetes_service(&shard))])
        // The default ServiceCIDR (upstream's default-servicecidr controller's).
        .chain([(shard.builtin("networking.k8s.io", "servicecidrs"), "", shardplane_apimachinery::service_network::DEFAULT_SERVICE_CIDR, shard.service_network.default_service_cidr())])
        // Each bootstrap namespace's default service account (the service-account controller's).
        .chain(BOOTSTRAP.iter().map(|ns| (shard.builtin("", "serviceaccounts"), *ns, shardplane_apimachinery::service_accounts::DEFAULT_SERVICE_ACCOUNT, shardplane_apimachinery::service_accounts::default_service_account(ns))))
        .chain(kind_rules::SYSTEM_PRIORITY_CLASSES.iter().map(|(name, value, description)| (pc_info.clone(), "", *name, kind_rules::system_priority_class(name, *value, description))));
    // The RBAC bootstrap policy; names are taken out of each object below, as for flowcontrol.
    let (cr_info, crb_info) = (shard.builtin("rbac.authorization.k8s.io", "clusterroles"), shard.builtin("rbac.authorization.k8s.io", "clusterrolebindings"));
    let rbac: Vec<(Arc<ResourceInfo>, Value)> = rbac_bootstrap::cluster_roles().into_iter().map(|o| (cr_info.clone(), o)).chain(rbac_bootstrap::cluster_role_bindings().into_iter().map(|o| (crb_info.clone(), o))).collect();
    // API Priority and Fairness' mandatory and suggested configuration (its config-producer
    // post-start hook); names are taken out of each object below.
    let pl_info = shard.builtin("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations");
    let fs_info = shard.builtin("flowcontrol.apiserver.k8s.io", "flowschemas");
    let named: Vec<(Arc<ResourceInfo>, Value)> = kind_rules::flowcontrol::priority_levels().into_iter().map(|o| (pl_info.clone(), o)).chain(kind_rules::flowcontrol::flow_schemas().into_iter().map(|o| (fs_info.clone(), o))).chain(rbac).collect();
    let names: Vec<String> = named.iter().map(|(_, o)| o["metadata"]["name"].as_str().unwrap_or("").to_owned()).collect();
    let objects = objects.chain(named.into_iter().zip(names.iter()).map(|((info, obj), name)| (info, "", name.as_str(), obj)));
    for (info, namespace, name, mut obj) in objects {
        let Ok(key) = shard.owned_key(&info, namespace, name) else { continue };
        let status = obj.get("status").cloned();
        shardplane_apimachinery::defaults::set_defaults(&info, &mut obj);
        shardplane_apimachinery::strategy::prepare_for_create(&info, &mut obj);
        if info.plural == "servicecidrs" && let Some(status) = status {
            // Ready from the start, as its controller marks it.
            obj["status"] = status;
        }
        let mut companions = if crate::service_addresses::is_services(&info) { crate::service_addresses::kubernetes_service_companions(&shard) } else { Vec::new() };
        loop {
            let primary = shardplane_storage::Primary::Create { key: key.clone(), value: shardplane_apimachinery::encode::object_bytes(&obj) };
            match shard.store(&info).commit(&primary, &companions).await {
                Ok(_) | Err(shardplane_storage::StorageError::AlreadyExists) => break,
                // The address is held already (a Service of an earlier run, or a hand-made
                // IPAddress): the Service is created without it and the repair loop reports it.
                Err(shardplane_storage::StorageError::CompanionConflict { .. }) => companions.clear(),
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

