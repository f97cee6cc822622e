//! Per-kind validation rules of upstream's `pkg/apis/*/validation` that clients rely on, with
//! upstream's field paths and messages, returned as Status causes for a 422: ConfigMap and
//! Secret ([`config`]), Events ([`events`]), PriorityClass ([`scheduling`]), pod specs
//! ([`pods`]), workloads ([`workloads`]), Services ([`services`]), RBAC bindings, leases,
//! autoscalers, claims, storage, ingress and runtime classes ([`cluster`]), APF's bootstrap
//! configuration ([`flowcontrol`]), Dynamic Resource Allocation ([`resource`]), volumes, claims
//! and disruption budgets ([`volumes`]), nodes, namespaces, endpoints and quotas ([`nodes`]),
//! network policies, ingresses, service CIDRs and IP addresses ([`networking`]), certificate
//! signing requests ([`certificates`]), the CSI kinds and volume attachments ([`storage`]),
//! limit ranges ([`limit_ranges`]), RBAC roles ([`cluster`]), flow schemas and priority levels
//! ([`flowcontrol`]), controller revisions ([`workloads`]); the error shapes are [`errors`]'s,
//! the shared field rules [`fields`]'s.
//! CustomResourceDefinitions' rules live in [`crate::crd`].

mod certificates;
mod cluster;
mod config;
mod containers;
pub mod errors;
mod events;
mod fields;
mod limit_ranges;
pub mod flowcontrol;
mod networking;
mod nodes;
mod placement;
pub mod pods;
mod resource;
mod scheduling;
mod services;
mod storage;
mod volumes;
mod workloads;

pub use config::MAX_DATA_BYTES;
pub use scheduling::{system_priority_class, SYSTEM_PRIORITY_CLASSES};

use crate::resources::ResourceInfo;
use crate::status::StatusCause;
use serde_json::Value;

/// Whether `info` is the CustomResourceDefinition resource.
pub fn is_crd(info: &ResourceInfo) -> bool {
    info.group == crate::crd::GROUP && info.plural == crate::crd::PLURAL
}

/// Rules on one object, on create and update.
pub fn validate(info: &ResourceInfo, obj: &Value) -> Vec<StatusCause> {
    match (info.group.as_str(), info.plural.as_str()) {
        (crate::crd::GROUP, crate::crd::PLURAL) => crate::crd::validate(obj),
        ("", "configmaps" | "secrets") => config::validate(info, obj),
        ("", "events") => events::validate_legacy(obj, "reportingComponent"),
        ("scheduling.k8s.io", "priorityclasses") => scheduling::validate_priority_class(obj),
        ("", "pods") => {
            let mut causes = Vec::new();
            pods::validate_spec(obj.get("spec"), "spec", &mut causes);
            causes
        }
        ("", "podtemplates") => {
            let mut causes = Vec::new();
            pods::validate_spec(obj.pointer("/template/spec"), "template.spec", &mut causes);
            causes
        }
        ("", "services") => services::validate(obj),
        ("apps", _) | ("batch", _) | ("", "replicationcontrollers") => workloads::validate(&info.group, &info.plural, obj),
        ("rbac.authorization.k8s.io", "roles") => cluster::validate_role(false, obj),
        ("rbac.authorization.k8s.io", "clusterroles") => cluster::validate_role(true, obj),
        ("rbac.authorization.k8s.io", "rolebindings") => cluster::validate_binding(false, obj),
        ("rbac.authorization.k8s.io", "clusterrolebindings") => cluster::validate_binding(true, obj),
        ("coordination.k8s.io", "leases") => cluster::validate_lease(obj),
        ("autoscaling", "horizontalpodautoscalers") if info.is_storage_version() => cluster::validate_autoscaler(obj),
        ("storage.k8s.io", "storageclasses") => cluster::validate_storage_class(obj),
        ("networking.k8s.io", "ingressclasses") | ("node.k8s.io", "runtimeclasses") => cluster::validate_class(&info.plural, obj),
        ("resource.k8s.io", _) if info.is_storage_version() => resource::validate(&info.plural, obj),
        ("", "persistentvolumes") => volumes::validate_volume(obj),
        ("", "persistentvolumeclaims") => volumes::validate_claim(obj),
        ("policy", "poddisruptionbudgets") => volumes::validate_disruption_budget(obj),
        ("", "nodes") => nodes::validate_node(obj),
        ("", "namespaces") => nodes::validate_namespace(obj),
        ("", "endpoints") => nodes::validate_endpoints(obj),
        ("discovery.k8s.io", "endpointslices") => nodes::validate_endpoint_slice(obj),
        ("", "resourcequotas") => nodes::validate_quota(obj),
        ("networking.k8s.io", "networkpolicies") => networking::validate_network_policy(obj),
        ("networking.k8s.io", "ingresses") => networking::validate_ingress(obj),
        ("certificates.k8s.io", "certificatesigningrequests") => certificates::validate(obj),
        ("networking.k8s.io", "servicecidrs") => networking::validate_service_cidr(obj),
        ("networking.k8s.io", "ipaddresses") => networking::validate_ip_address(obj),
        ("storage.k8s.io", "csidrivers") => storage::validate_csi_driver(obj),
        ("storage.k8s.io", "csinodes") => storage::validate_csi_node(obj),
        ("storage.k8s.io", "csistoragecapacities") => storage::validate_storage_capacity(obj),
        ("storage.k8s.io", "volumeattachments") => storage::validate_volume_attachment(obj),
        ("flowcontrol.apiserver.k8s.io", "flowschemas") => flowcontrol::validate_flow_schema(obj),
        ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations") => flowcontrol::validate_priority_level(obj),
        ("", "limitranges") => limit_ranges::validate(obj),
        _ => Vec::new(),
    }
}

/// The rules only a converted version has (RFC 0011), checked on the object in that version
/// before it is converted and written as the stored version (whose own rules then apply too):
/// events.k8s.io/v1's strict event rules. `old` is the object being replaced, if any.
pub fn validate_version(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Vec<StatusCause> {
    match (info.group.as_str(), info.plural.as_str()) {
        ("events.k8s.io", "events") => {
            let core = crate::conversion::to_storage(info, obj.clone());
            match old {
                None => events::validate_v1_create(&core),
                Some(old) => events::validate_v1_update(&crate::conversion::to_storage(info, old.clone()), &core),
            }
        }
        _ => Vec::new(),
    }
}

/// Rules on an update from `old` to `new` (beyond those on `new` alone).
pub fn validate_update(info: &ResourceInfo, old: &Value, new: &Value) -> Vec<StatusCause> {
    match (info.group.as_str(), info.plural.as_str()) {
        (crate::crd::GROUP, crate::crd::PLURAL) => crate::crd::validate_update(old, new),
        ("", "configmaps") => config::validate_update(info, old, new),
        ("scheduling.k8s.io", "priorityclasses") => scheduling::validate_priority_class_update(old, new),
        ("", "pods") => pods::validate_pod_update(old, new),
        ("apps", _) | ("batch", _) => workloads::validate_update(&info.group, &info.plural, old, new),
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => cluster::validate_binding_update(old, new),
        ("", "persistentvolumeclaims") => cluster::validate_claim_update(old, new),
        ("", "persistentvolumes") => volumes::validate_volume_update(old, new),
        ("", "resourcequotas") => nodes::validate_quota_update(old, new),
        ("", "namespaces") => nodes::validate_namespace_update(new),
        ("", "services") => services::validate_update(old, new),
        ("storage.k8s.io", "storageclasses") => cluster::validate_storage_class_update(old, new),
        ("networking.k8s.io", "ingressclasses") => cluster::immutable_string("spec.controller", "/spec/controller", old, new),
        ("node.k8s.io", "runtimeclasses") => cluster::immutable_string("handler", "/handler", old, new),
        ("discovery.k8s.io", "endpointslices") => cluster::immutable_string("addressType", "/addressType", old, new),
        ("resource.k8s.io", _) if info.is_storage_version() => resource::validate_update(&info.plural, old, new),
        ("networking.k8s.io", "servicecidrs") => networking::validate_service_cidr_update(old, new),
        ("networking.k8s.io", "ipaddresses") => networking::validate_ip_address_update(old, new),
        ("storage.k8s.io", "csidrivers") => storage::validate_csi_driver_update(old, new),
        ("storage.k8s.io", "csinodes") => storage::validate_csi_node_update(old, new),
        ("storage.k8s.io", "csistoragecapacities") => storage::validate_storage_capacity_update(old, new),
        ("storage.k8s.io", "volumeattachments") => storage::validate_volume_attachment_update(old, new),
        ("", "secrets") => {
            let mut causes = config::validate_update(info, old, new);
            causes.extend(cluster::immutable_string("type", "/type", old, new));
            causes
        }
        _ => Vec::new(),
    }
}
