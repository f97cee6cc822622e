//! The table of served resources. Adding a built-in resource is one [`builtin`] call: group,
//! version, kind, plural and scope come from k8s-openapi's `Resource` trait; the rest are the
//! upstream registry facts k8s-openapi does not carry (short names, subresources, selectable
//! fields, which delete returns the object).

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};

/// Which upstream name rule validates `metadata.name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain (most kinds).
    Subdomain,
    /// RFC 1123 label (namespaces).
    Label,
    /// RFC 1035 label (services).
    Label1035,
    /// Any path segment (events).
    PathSegment,
    /// An IP address (IPAddresses, named by the address they hold).
    IpAddress,
}

/// Everything the server needs to know about one served resource.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceInfo {
    /// API group, `""` for core.
    pub group: String,
    /// API version (`v1`).
    pub version: String,
    /// Kind (`ConfigMap`).
    pub kind: String,
    /// Kind of the list (`ConfigMapList`).
    pub list_kind: String,
    /// Plural resource name (`configmaps`).
    pub plural: String,
    /// Singular name (lower-case kind).
    pub singular: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names for discovery (`cm`).
    pub short_names: Vec<String>,
    /// Categories for discovery (`all`).
    pub categories: Vec<String>,
    /// Whether the `status` subresource exists (main-resource writes then ignore status).
    pub has_status: bool,
    /// Whether `metadata.generation` is bumped on spec changes.
    pub tracks_generation: bool,
    /// Whether DELETE answers with the object (else a Success Status).
    pub returns_deleted_object: bool,
    /// Whether PUT of a missing object creates it.
    pub allow_create_on_update: bool,
    /// Field selectors beyond `metadata.name` and `metadata.namespace` (shared: every cached
    /// object points at its resource's list).
    pub selectable_fields: std::sync::Arc<[String]>,
    /// Name validation rule.
    pub name_rule: NameRule,
    /// Where its objects come from: storage (nearly every resource), nowhere (created only), or
    /// a probe made when read.
    pub backing: Backing,
    /// For a custom resource, what its CRD says of this version (schema, subresources,
    /// printer columns); None for built-ins.
    pub custom: Option<std::sync::Arc<crate::crd::CustomVersion>>,
    /// A built-in version whose objects are kept as another resource version and converted on
    /// the way in and out ([`crate::conversion`]); None when this version is the stored one.
    pub stored_as: Option<StoredAs>,
}

/// Where a resource's objects come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// Stored, cached and watched (every resource but the two below).
    Stored,
    /// Only created, never stored or read: core/v1 `bindings`, whose creation binds a pod
    /// (served by the pod's shard; no cache, no other verb).
    CreateOnly,
    /// Computed when read, never stored: core/v1 `componentstatuses`, upstream's probes of the
    /// control plane's components (GET and LIST only; any shard answers the same).
    Probed,
    /// Created and answered at once, never stored: the reviews of authentication.k8s.io and
    /// authorization.k8s.io (`TokenReview`, `SelfSubjectAccessReview`, …), answered where the
    /// caller is authenticated and authorized, the router (RFC 0012).
    Review,
}

/// Where a converted built-in version's objects are kept (RFC 0011): autoscaling/v1
/// HorizontalPodAutoscalers as autoscaling/v2 ones, events.k8s.io/v1 Events as core/v1 Events,
/// resource.k8s.io/v1beta1 objects as v1beta2 ones.
/// Keys, placement hash, cache and store are the stored resource's, so both versions read and
/// write the same objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredAs {
    /// Stored as autoscaling/v2 HorizontalPodAutoscalers.
    AutoscalingV2,
    /// Stored as core/v1 Events.
    CoreEvents,
    /// Stored as resource.k8s.io/v1beta2 (Dynamic Resource Allocation's kinds).
    ResourceV1beta2,
}

impl StoredAs {
    /// The (group, version) the objects are stored in.
    pub fn group_version(self) -> (&'static str, &'static str) {
        match self {
            StoredAs::AutoscalingV2 => ("autoscaling", "v2"),
            StoredAs::CoreEvents => ("", "v1"),
            StoredAs::ResourceV1beta2 => ("resource.k8s.io", "v1beta2"),
        }
    }
}

impl ResourceInfo {
    /// The group whose keys, placement hash, cache and store hold this resource's objects: its
    /// own, except for a version stored as another group's (events.k8s.io Events are core ones).
    pub fn storage_group(&self) -> &str {
        match self.stored_as {
            Some(s) => s.group_version().0,
            None => &self.group,
        }
    }

    /// Whether objects are stored, cached and watched (not created only, not probed).
    pub fn is_stored(&self) -> bool {
        self.backing == Backing::Stored
    }

    /// Whether objects are stored in this version (every built-in not converted, and a custom
    /// resource's storage version).
    pub fn is_storage_version(&self) -> bool {
        self.stored_as.is_none() && self.custom.as_ref().is_none_or(|c| c.storage_version == self.version)
    }

    /// `apiVersion` as written in objects: `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_owned() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The scale subresource, if the resource has one: a CRD's, or upstream's for deployments,
    /// replica sets, stateful sets and replication controllers.
    pub fn scale(&self) -> Option<crate::crd::ScalePaths> {
        use crate::crd::{ScalePaths, ScaleSelector};
        if let Some(c) = &self.custom {
            return c.scale.clone();
        }
        let label_selector = match (self.group.as_str(), self.plural.as_str()) {
            ("apps", "deployments" | "replicasets" | "statefulsets") => ScaleSelector::LabelSelector,
            ("", "replicationcontrollers") => ScaleSelector::Labels,
            _ => return None,
        };
        Some(ScalePaths { spec_replicas: ".spec.replicas".into(), status_replicas: ".status.replicas".into(), label_selector })
    }

    /// Whether a field selector label is supported for this resource.
    pub fn supports_field(&self, field: &str) -> bool {
        matches!(field, "metadata.name") || (field == "metadata.namespace") || self.selectable_fields.iter().any(|f| f == field)
    }
}

/// Maps a k8s-openapi scope type to "namespaced or not".
pub trait Scope {
    /// Whether the scope is a namespace.
    const NAMESPACED: bool;
}
impl Scope for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}
impl Scope for ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// The registry facts k8s-openapi does not carry. Defaults describe a plain namespaced object.
#[derive(Clone, Copy)]
pub struct Extra {
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub has_status: bool,
    pub tracks_generation: bool,
    pub returns_deleted_object: bool,
    pub allow_create_on_update: bool,
    pub selectable_fields: &'static [&'static str],
    pub name_rule: NameRule,
}

impl Extra {
    const PLAIN: Extra = Extra {
        short_names: &[],
        categories: &[],
        has_status: false,
        tracks_generation: false,
        returns_deleted_object: false,
        allow_create_on_update: false,
        selectable_fields: &[],
        name_rule: NameRule::Subdomain,
    };
    /// A workload with spec/status, generation and scale-like behaviour.
    const WORKLOAD: Extra = Extra { categories: &["all"], has_status: true, tracks_generation: true, ..Extra::PLAIN };
}

/// Declares a built-in resource from its k8s-openapi type.
pub fn builtin<K>(extra: Extra) -> ResourceInfo
where
    K: k8s_openapi::Resource + k8s_openapi::ListableResource,
    K::Scope: Scope,
{
    let owned = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect();
    ResourceInfo {
        group: K::GROUP.to_owned(),
        version: K::VERSION.to_owned(),
        kind: K::KIND.to_owned(),
        list_kind: K::LIST_KIND.to_owned(),
        plural: K::URL_PATH_SEGMENT.to_owned(),
        singular: K::KIND.to_ascii_lowercase(),
        namespaced: <K::Scope as Scope>::NAMESPACED,
        short_names: owned(extra.short_names),
        categories: owned(extra.categories),
        has_status: extra.has_status,
        tracks_generation: extra.tracks_generation,
        returns_deleted_object: extra.returns_deleted_object,
        allow_create_on_update: extra.allow_create_on_update,
        selectable_fields: extra.selectable_fields.iter().map(|s| (*s).to_owned()).collect(),
        name_rule: extra.name_rule,
        backing: Backing::Stored,
        custom: None,
        stored_as: None,
    }
}

/// core/v1 `bindings`: a Binding created here binds the pod it names (upstream's legacy form of
/// `pods/{name}/binding`).
fn bindings() -> ResourceInfo {
    ResourceInfo {
        group: String::new(),
        version: "v1".into(),
        kind: "Binding".into(),
        list_kind: "BindingList".into(),
        plural: "bindings".into(),
        singular: "binding".into(),
        namespaced: true,
        short_names: Vec::new(),
        categories: Vec::new(),
        has_status: false,
        tracks_generation: false,
        returns_deleted_object: false,
        allow_create_on_update: false,
        selectable_fields: std::sync::Arc::new([]),
        name_rule: NameRule::Subdomain,
        backing: Backing::CreateOnly,
        custom: None,
        stored_as: None,
    }
}

/// A review of authentication.k8s.io/v1 or authorization.k8s.io/v1 (see [`Backing::Review`]).
fn review(group: &str, kind: &str, namespaced: bool) -> ResourceInfo {
    let plural = format!("{}s", kind.to_ascii_lowercase());
    ResourceInfo {
        group: group.into(),
        version: "v1".into(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        singular: kind.to_ascii_lowercase(),
        plural,
        namespaced,
        backing: Backing::Review,
        ..bindings()
    }
}

/// The reviews, in upstream's discovery order.
fn reviews() -> [ResourceInfo; 6] {
    let (authn, authz) = ("authentication.k8s.io", "authorization.k8s.io");
    [
        review(authn, "SelfSubjectReview", false),
        review(authn, "TokenReview", false),
        review(authz, "LocalSubjectAccessReview", true),
        review(authz, "SelfSubjectAccessReview", false),
        review(authz, "SelfSubjectRulesReview", false),
        review(authz, "SubjectAccessReview", false),
    ]
}

/// core/v1 `componentstatuses` (`cs`): probed when read (see [`Backing::Probed`]).
fn component_statuses() -> ResourceInfo {
    use k8s_openapi::api::core::v1::ComponentStatus;
    ResourceInfo { backing: Backing::Probed, ..builtin::<ComponentStatus>(Extra { short_names: &["cs"], ..Extra::PLAIN }) }
}

/// A built-in version stored as another resource version (see [`StoredAs`]).
fn converted<K>(extra: Extra, stored_as: StoredAs) -> ResourceInfo
where
    K: k8s_openapi::Resource + k8s_openapi::ListableResource,
    K::Scope: Scope,
{
    ResourceInfo { stored_as: Some(stored_as), ..builtin::<K>(extra) }
}

/// core/v1 Events' selectable fields (upstream's `event.GetAttrs`).
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// Every resource a shard serves, in discovery order.
pub fn builtin_resources() -> Vec<ResourceInfo> {
    use k8s_openapi::api::{autoscaling::v1 as autoscaling_v1, events::v1 as events};
    use k8s_openapi::api::{apps::v1 as apps, autoscaling::v2 as autoscaling, batch::v1 as batch, certificates::v1 as certificates, coordination::v1 as coord, core::v1 as core};
    use k8s_openapi::api::{discovery::v1 as discovery, flowcontrol::v1 as flowcontrol, networking::v1 as networking, node::v1 as node, policy::v1 as policy};
    use k8s_openapi::api::{rbac::v1 as rbac, resource::v1beta1 as dra_v1beta1, resource::v1beta2 as dra, scheduling::v1 as scheduling, storage::v1 as storage};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    // What upstream's registries say of each (pkg/registry/<group>/<resource>: ShortNames,
    // Categories, a status store, ReturnDeletedObject, AllowCreateOnUpdate, GetAttrs' fields).
    // Which deletes answer with the object is also in upstream's OpenAPI (the delete
    // operation's response type), which generated clients decode by.
    let status = Extra { has_status: true, ..Extra::PLAIN };
    let rbac_object = Extra { allow_create_on_update: true, name_rule: NameRule::PathSegment, ..Extra::PLAIN };
    let device_class = Extra { tracks_generation: true, returns_deleted_object: true, ..Extra::PLAIN };
    let resource_claim = Extra { returns_deleted_object: true, ..status };
    let resource_claim_template = Extra { returns_deleted_object: true, ..Extra::PLAIN };
    let resource_slice = Extra { tracks_generation: true, returns_deleted_object: true, selectable_fields: &["spec.nodeName", "spec.driver"], ..Extra::PLAIN };
    let mut all = vec![
        builtin::<core::Namespace>(Extra {
            short_names: &["ns"],
            has_status: true,
            returns_deleted_object: true,
            selectable_fields: &["status.phase"],
            name_rule: NameRule::Label,
            ..Extra::PLAIN
        }),
        builtin::<core::ConfigMap>(Extra { short_names: &["cm"], ..Extra::PLAIN }),
        builtin::<core::Secret>(Extra { selectable_fields: &["type"], ..Extra::PLAIN }),
        builtin::<core::Pod>(Extra {
            short_names: &["po"],
            categories: &["all"],
            has_status: true,
            returns_deleted_object: true,
            selectable_fields: &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ],
            ..Extra::PLAIN
        }),
        builtin::<core::Service>(Extra {
            short_names: &["svc"],
            categories: &["all"],
            has_status: true,
            returns_deleted_object: true,
            selectable_fields: &["spec.clusterIP", "spec.type"],
            name_rule: NameRule::Label1035,
            ..Extra::PLAIN
        }),
        builtin::<core::Endpoints>(Extra { short_names: &["ep"], allow_create_on_update: true, ..Extra::PLAIN }),
        builtin::<core::ServiceAccount>(Extra { short_names: &["sa"], returns_deleted_object: true, ..Extra::PLAIN }),
        builtin::<core::Event>(Extra {
            short_names: &["ev"],
            allow_create_on_update: true,
            selectable_fields: EVENT_FIELDS,
            name_rule: NameRule::PathSegment,
            ..Extra::PLAIN
        }),
        builtin::<core::PodTemplate>(Extra { returns_deleted_object: true, ..Extra::PLAIN }),
        bindings(),
        component_statuses(),
        builtin::<core::ReplicationController>(Extra { short_names: &["rc"], selectable_fields: &["status.replicas"], ..Extra::WORKLOAD }),
        builtin::<core::Node>(Extra { short_names: &["no"], selectable_fields: &["spec.unschedulable"], ..status }),
        builtin::<core::PersistentVolume>(Extra { short_names: &["pv"], returns_deleted_object: true, ..status }),
        builtin::<core::PersistentVolumeClaim>(Extra { short_names: &["pvc"], returns_deleted_object: true, ..status }),
        builtin::<core::ResourceQuota>(Extra { short_names: &["quota"], returns_deleted_object: true, ..status }),
        builtin::<core::LimitRange>(Extra { short_names: &["limits"], ..Extra::PLAIN }),
        builtin::<coord::Lease>(Extra { allow_create_on_update: true, ..Extra::PLAIN }),
        builtin::<apps::Deployment>(Extra { short_names: &["deploy"], ..Extra::WORKLOAD }),
        builtin::<apps::ReplicaSet>(Extra { short_names: &["rs"], selectable_fields: &["status.replicas"], ..Extra::WORKLOAD }),
        builtin::<apps::StatefulSet>(Extra { short_names: &["sts"], ..Extra::WORKLOAD }),
        builtin::<apps::DaemonSet>(Extra { short_names: &["ds"], ..Extra::WORKLOAD }),
        builtin::<apps::ControllerRevision>(Extra::PLAIN),
        builtin::<batch::Job>(Extra { selectable_fields: &["status.successful"], ..Extra::WORKLOAD }),
        builtin::<batch::CronJob>(Extra { short_names: &["cj"], ..Extra::WORKLOAD }),
        builtin::<autoscaling::HorizontalPodAutoscaler>(Extra { short_names: &["hpa"], categories: &["all"], ..status }),
        converted::<autoscaling_v1::HorizontalPodAutoscaler>(Extra { short_names: &["hpa"], categories: &["all"], ..status }, StoredAs::AutoscalingV2),
        builtin::<policy::PodDisruptionBudget>(Extra { short_names: &["pdb"], tracks_generation: true, ..status }),
        builtin::<rbac::Role>(rbac_object),
        builtin::<rbac::ClusterRole>(rbac_object),
        builtin::<rbac::RoleBinding>(rbac_object),
        builtin::<rbac::ClusterRoleBinding>(rbac_object),
        builtin::<discovery::EndpointSlice>(Extra::PLAIN),
        // Selectable by the core names its field labels map to (crate::conversion::field_label).
        converted::<events::Event>(Extra { short_names: &["ev"], selectable_fields: EVENT_FIELDS, ..Extra::PLAIN }, StoredAs::CoreEvents),
    ];
    all.extend(reviews());
    all.extend([
        builtin::<networking::Ingress>(Extra { short_names: &["ing"], tracks_generation: true, ..status }),
        builtin::<networking::IngressClass>(Extra::PLAIN),
        builtin::<networking::NetworkPolicy>(Extra { short_names: &["netpol"], tracks_generation: true, ..Extra::PLAIN }),
        builtin::<networking::ServiceCIDR>(Extra { ..status }),
        builtin::<networking::IPAddress>(Extra { short_names: &["ip"], name_rule: NameRule::IpAddress, ..Extra::PLAIN }),
        builtin::<node::RuntimeClass>(Extra::PLAIN),
        builtin::<scheduling::PriorityClass>(Extra { short_names: &["pc"], ..Extra::PLAIN }),
        builtin::<storage::StorageClass>(Extra { short_names: &["sc"], returns_deleted_object: true, ..Extra::PLAIN }),
        builtin::<storage::CSIDriver>(Extra { returns_deleted_object: true, ..Extra::PLAIN }),
        builtin::<storage::CSINode>(Extra { returns_deleted_object: true, ..Extra::PLAIN }),
        builtin::<storage::CSIStorageCapacity>(Extra::PLAIN),
        builtin::<storage::VolumeAttachment>(Extra { returns_deleted_object: true, ..status }),
        // "We don't care what you call your certificate requests" (upstream): any name a path holds.
        builtin::<certificates::CertificateSigningRequest>(Extra { short_names: &["csr"], selectable_fields: &["spec.signerName"], name_rule: NameRule::PathSegment, ..status }),
        builtin::<flowcontrol::FlowSchema>(Extra { tracks_generation: true, ..status }),
        builtin::<flowcontrol::PriorityLevelConfiguration>(Extra { tracks_generation: true, ..status }),
        // Dynamic Resource Allocation: v1beta2 (upstream's internal shape) stored, v1beta1
        // converted (crate::conversion::resource).
        builtin::<dra::DeviceClass>(device_class),
        builtin::<dra::ResourceClaim>(resource_claim),
        builtin::<dra::ResourceClaimTemplate>(resource_claim_template),
        builtin::<dra::ResourceSlice>(resource_slice),
        converted::<dra_v1beta1::DeviceClass>(device_class, StoredAs::ResourceV1beta2),
        converted::<dra_v1beta1::ResourceClaim>(resource_claim, StoredAs::ResourceV1beta2),
        converted::<dra_v1beta1::ResourceClaimTemplate>(resource_claim_template, StoredAs::ResourceV1beta2),
        converted::<dra_v1beta1::ResourceSlice>(resource_slice, StoredAs::ResourceV1beta2),
        builtin::<apiextensions::CustomResourceDefinition>(Extra {
            short_names: &["crd", "crds"],
            categories: &["api-extensions"],
            has_status: true,
            tracks_generation: true,
            returns_deleted_object: true,
            ..Extra::PLAIN
        }),
    ]);
    all
}


/// Looks up a resource by group, version and plural.
pub fn find<'a>(resources: &'a [ResourceInfo], group: &str, version: &str, plural: &str) -> Option<&'a ResourceInfo> {
    resources.iter().find(|r| r.group == group && r.version == version && r.plural == plural)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trait_facts_flow_into_the_table() {
        let all = builtin_resources();
        let deploy = find(&all, "apps", "v1", "deployments").unwrap();
        assert_eq!((deploy.kind.as_str(), deploy.list_kind.as_str(), deploy.namespaced), ("Deployment", "DeploymentList", true));
        let ns = find(&all, "", "v1", "namespaces").unwrap();
        assert!(!ns.namespaced);
        assert_eq!(ns.api_version(), "v1");
        assert_eq!(find(&all, "coordination.k8s.io", "v1", "leases").unwrap().api_version(), "coordination.k8s.io/v1");
    }
}
