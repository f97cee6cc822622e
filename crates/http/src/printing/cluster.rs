//! Printer columns of the kinds that are not workloads: namespaces and the objects most
//! namespaces hold (config maps, secrets, services, endpoints, service accounts, events, leases),
//! nodes and volumes, quotas and limits, RBAC, networking, storage, certificates, priority and
//! fairness, and CRDs.

use super::kinds::{age_at, col, int, label_selector, n, none_if_empty, s, selector_text, shown, strings, text_or_none, wide, Column, AGE, CREATED_AT, NAME};
use serde_json::{json, Value};

fn count(obj: &Value, ptr: &str) -> usize {
    obj.pointer(ptr).map_or(0, |v| v.as_object().map_or_else(|| v.as_array().map_or(0, Vec::len), |m| m.len()))
}

fn service_type(obj: &Value) -> Value {
    json!(match s(obj, "/spec/type") {
        "" => "ClusterIP",
        t => t,
    })
}

fn service_ports(obj: &Value) -> Value {
    let ports: Vec<String> = obj
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let proto = p["protocol"].as_str().unwrap_or("TCP");
                    match p["nodePort"].as_i64() {
                        Some(np) if np != 0 => format!("{}:{np}/{proto}", p["port"]),
                        _ => format!("{}/{proto}", p["port"]),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    json!(none_if_empty(ports.join(",")))
}

const NAMESPACES: &[Column] = &[NAME, col("Status", "The status of the namespace", |o| json!(s(o, "/status/phase"))), AGE];
const CONFIG_MAPS: &[Column] = &[NAME, int("Data", "Data contains the configuration data.", |o| json!(count(o, "/data") + count(o, "/binaryData"))), AGE];
const SECRETS: &[Column] = &[
    NAME,
    col("Type", "The type of the secret", |o| json!(s(o, "/type"))),
    int("Data", "The number of entries in the secret's data.", |o| json!(count(o, "/data"))),
    AGE,
];
const SERVICES: &[Column] = &[
    NAME,
    col("Type", "type determines how the Service is exposed.", service_type),
    col("Cluster-IP", "clusterIP is the IP address of the service and is usually assigned randomly.", |o| text_or_none(o, "/spec/clusterIP")),
    col("External-IP", "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.", |o| json!(none_if_empty(strings(o, "/spec/externalIPs").join(",")))),
    col("Port(s)", "The list of ports that are exposed by this service.", service_ports),
    AGE,
    wide("Selector", "Route service traffic to pods with label keys and values matching this selector.", |o| json!(none_if_empty(selector_text(o.pointer("/spec/selector"))))),
];

fn endpoints_list(obj: &Value) -> Value {
    let mut all = Vec::new();
    for subset in obj.pointer("/subsets").and_then(Value::as_array).into_iter().flatten() {
        let ports: Vec<i64> = subset["ports"].as_array().map(|p| p.iter().filter_map(|p| p["port"].as_i64()).collect()).unwrap_or_default();
        for a in subset["addresses"].as_array().into_iter().flatten() {
            let ip = a["ip"].as_str().unwrap_or("");
            if ports.is_empty() {
                all.push(ip.to_owned());
            }
            all.extend(ports.iter().map(|p| format!("{ip}:{p}")));
        }
    }
    json!(first_three(all))
}

/// Upstream's short list: the first three, then how many more.
fn first_three(all: Vec<String>) -> String {
    match all.len() {
        0 => "<none>".into(),
        1..=3 => all.join(","),
        k => format!("{} + {} more...", all[..3].join(","), k - 3),
    }
}

const ENDPOINTS: &[Column] = &[NAME, col("Endpoints", "Endpoints is the list of endpoints for the service.", endpoints_list), AGE];
const SERVICE_ACCOUNTS: &[Column] = &[NAME, int("Secrets", "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.", |o| json!(count(o, "/secrets"))), AGE];

fn event_object(obj: &Value) -> Value {
    json!(format!("{}/{}", s(obj, "/involvedObject/kind").to_ascii_lowercase(), s(obj, "/involvedObject/name")))
}
fn event_last_seen(obj: &Value) -> Value {
    for p in ["/lastTimestamp", "/eventTime", "/series/lastObservedTime", "/metadata/creationTimestamp"] {
        if obj.pointer(p).and_then(Value::as_str).is_some() {
            return age_at(obj, p);
        }
    }
    json!("<unknown>")
}

const EVENTS: &[Column] = &[
    col("Last Seen", "The last time this event was observed.", event_last_seen),
    col("Type", "Type of this event (Normal, Warning), new types could be added in the future.", |o| json!(s(o, "/type"))),
    col("Reason", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.", |o| json!(s(o, "/reason"))),
    col("Object", "The object that this event is about.", event_object),
    wide("Subobject", "The subobject of the object that this event is about.", |o| json!(s(o, "/involvedObject/fieldPath"))),
    wide("Source", "The component reporting this event. Should be a short machine understandable string.", |o| json!(s(o, "/source/component"))),
    col("Message", "A human-readable description of the status of this operation.", |o| json!(s(o, "/message"))),
    wide("First Seen", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)", |o| age_at(o, "/firstTimestamp")),
    wide("Count", "The number of times this event has occurred.", |o| json!(n(o, "/count"))),
    Column { name: "Name", ty: "string", priority: 1, description: super::NAME_DESC, cell: super::kinds::name },
];

fn node_status(obj: &Value) -> Value {
    let ready = obj.pointer("/status/conditions").and_then(Value::as_array).and_then(|c| c.iter().find(|c| c["type"] == "Ready")).and_then(|c| c["status"].as_str());
    let mut status = match ready {
        Some("True") => "Ready".to_owned(),
        Some("False") => "NotReady".to_owned(),
        _ => "Unknown".to_owned(),
    };
    if obj.pointer("/spec/unschedulable") == Some(&json!(true)) {
        status.push_str(",SchedulingDisabled");
    }
    json!(status)
}
fn node_roles(obj: &Value) -> Value {
    let mut roles: Vec<String> = Vec::new();
    for (k, v) in obj.pointer("/metadata/labels").and_then(Value::as_object).into_iter().flatten() {
        if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
            roles.push(role.to_owned());
        } else if k == "kubernetes.io/role" && let Some(r) = v.as_str() {
            roles.push(r.to_owned());
        }
    }
    roles.sort();
    roles.dedup();
    json!(none_if_empty(roles.join(",")))
}
fn node_address(obj: &Value, ty: &str) -> Value {
    let a = obj.pointer("/status/addresses").and_then(Value::as_array).and_then(|a| a.iter().find(|a| a["type"] == ty)).and_then(|a| a["address"].as_str()).unwrap_or("");
    json!(none_if_empty(a.to_owned()))
}

const NODES: &[Column] = &[
    NAME,
    col("Status", "The status of the node", node_status),
    col("Roles", "The roles of the node", node_roles),
    AGE,
    col("Version", "Kubelet Version reported by the node.", |o| json!(s(o, "/status/nodeInfo/kubeletVersion"))),
    wide("Internal-IP", "List of addresses reachable to the node. Queried from cloud provider, if available.", |o| node_address(o, "InternalIP")),
    wide("External-IP", "List of addresses reachable to the node. Queried from cloud provider, if available.", |o| node_address(o, "ExternalIP")),
    wide("OS-Image", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).", |o| json!(s(o, "/status/nodeInfo/osImage"))),
    wide("Kernel-Version", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).", |o| json!(s(o, "/status/nodeInfo/kernelVersion"))),
    wide("Container-Runtime", "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).", |o| json!(s(o, "/status/nodeInfo/containerRuntimeVersion"))),
];

/// Access modes as upstream abbreviates them.
fn access_modes(obj: &Value, ptr: &str) -> Value {
    let short: Vec<&str> = strings(obj, ptr)
        .into_iter()
        .map(|m| match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect();
    json!(short.join(","))
}

const PERSISTENT_VOLUMES: &[Column] = &[
    NAME,
    col("Capacity", "capacity is the description of the persistent volume's resources and capacity.", |o| json!(s(o, "/spec/capacity/storage"))),
    col("Access Modes", "accessModes contains all ways the volume can be mounted.", |o| access_modes(o, "/spec/accessModes")),
    col("Reclaim Policy", "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim.", |o| json!(s(o, "/spec/persistentVolumeReclaimPolicy"))),
    col("Status", "phase indicates if a volume is available, bound to a claim, or released by a claim.", |o| json!(s(o, "/status/phase"))),
    col("Claim", "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim.", |o| {
        json!(if o.pointer("/spec/claimRef").is_some() { format!("{}/{}", s(o, "/spec/claimRef/namespace"), s(o, "/spec/claimRef/name")) } else { String::new() })
    }),
    col("StorageClass", "storageClassName is the name of StorageClass to which this persistent volume belongs.", |o| json!(s(o, "/spec/storageClassName"))),
    col("VolumeAttributesClass", "Name of VolumeAttributesClass to which this persistent volume belongs.", |o| json!(match s(o, "/spec/volumeAttributesClassName") { "" => "<unset>", v => v })),
    col("Reason", "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.", |o| json!(s(o, "/status/reason"))),
    AGE,
    wide("VolumeMode", "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.", |o| json!(s(o, "/spec/volumeMode"))),
];

const PERSISTENT_VOLUME_CLAIMS: &[Column] = &[
    NAME,
    col("Status", "phase represents the current phase of PersistentVolumeClaim.", |o| json!(if o.pointer("/metadata/deletionTimestamp").is_some() { "Terminating" } else { s(o, "/status/phase") })),
    col("Volume", "volumeName is the binding reference to the PersistentVolume backing this claim.", |o| json!(s(o, "/spec/volumeName"))),
    col("Capacity", "capacity represents the actual resources of the underlying volume.", |o| json!(s(o, "/status/capacity/storage"))),
    col("Access Modes", "accessModes contains the actual access modes the volume backing the PVC has.", |o| access_modes(o, "/status/accessModes")),
    col("StorageClass", "storageClassName is the name of the StorageClass required by the claim.", |o| json!(s(o, "/spec/storageClassName"))),
    col("VolumeAttributesClass", "volumeAttributesClassName may be used to set the VolumeAttributesClass used by this claim.", |o| json!(match s(o, "/spec/volumeAttributesClassName") { "" => "<unset>", v => v })),
    AGE,
    wide("VolumeMode", "volumeMode defines what type of volume is required by the claim.", |o| json!(s(o, "/spec/volumeMode"))),
];

/// A quota's used and hard amounts, requests or limits (`pods: 0/10, requests.cpu: 0/1`).
fn quota_amounts(obj: &Value, limits: bool) -> String {
    let Some(hard) = obj.pointer("/status/hard").or_else(|| obj.pointer("/spec/hard")).and_then(Value::as_object) else { return String::new() };
    let mut keys: Vec<&String> = hard.keys().filter(|k| k.starts_with("limits.") == limits).collect();
    keys.sort();
    keys.iter()
        .map(|k| {
            let used = obj.pointer("/status/used").and_then(|u| u.get(k.as_str())).and_then(Value::as_str).unwrap_or("0");
            format!("{k}: {used}/{}", hard[k.as_str()].as_str().unwrap_or(""))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

const RESOURCE_QUOTAS: &[Column] = &[
    NAME,
    AGE,
    col("Request", "Request represents a minimum amount of cpu/memory that a container may consume.", |o| json!(quota_amounts(o, false))),
    col("Limit", "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.", |o| json!(quota_amounts(o, true))),
];

const NAME_AND_CREATED: &[Column] = &[NAME, CREATED_AT];

const LEASES: &[Column] = &[NAME, col("Holder", "holderIdentity contains the identity of the holder of a current lease.", |o| json!(s(o, "/spec/holderIdentity"))), AGE];

fn subjects_of(obj: &Value, kind: &str) -> Value {
    let names: Vec<String> = obj
        .pointer("/subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|s| s["kind"] == kind)
        .map(|s| if kind == "ServiceAccount" { format!("{}/{}", s["namespace"].as_str().unwrap_or(""), s["name"].as_str().unwrap_or("")) } else { s["name"].as_str().unwrap_or("").to_owned() })
        .collect();
    json!(names.join(", "))
}

const ROLE_BINDINGS: &[Column] = &[
    NAME,
    col("Role", "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace.", |o| json!(format!("{}/{}", s(o, "/roleRef/kind"), s(o, "/roleRef/name")))),
    AGE,
    wide("Users", "Users in the roleBinding", |o| subjects_of(o, "User")),
    wide("Groups", "Groups in the roleBinding", |o| subjects_of(o, "Group")),
    wide("ServiceAccounts", "ServiceAccounts in the roleBinding", |o| subjects_of(o, "ServiceAccount")),
];

const ENDPOINT_SLICES: &[Column] = &[
    NAME,
    col("AddressType", "addressType specifies the type of address carried by this EndpointSlice.", |o| json!(s(o, "/addressType"))),
    col("Ports", "ports specifies the list of network ports exposed by each endpoint in this slice.", |o| {
        let ports: Vec<String> = o.pointer("/ports").and_then(Value::as_array).map(|p| p.iter().map(|p| shown(p, "/port")).collect()).unwrap_or_default();
        json!(if ports.is_empty() { "<unset>".to_owned() } else { ports.join(",") })
    }),
    col("Endpoints", "endpoints is a list of unique endpoints in this slice.", |o| {
        let addresses: Vec<String> = o.pointer("/endpoints").and_then(Value::as_array).into_iter().flatten().flat_map(|e| strings(e, "/addresses").into_iter().map(str::to_owned)).collect();
        json!(if addresses.is_empty() { "<unset>".to_owned() } else { first_three(addresses) })
    }),
    AGE,
];

const INGRESSES: &[Column] = &[
    NAME,
    col("Class", "ingressClassName is the name of an IngressClass cluster resource.", |o| text_or_none(o, "/spec/ingressClassName")),
    col("Hosts", "Hosts that incoming requests are matched against before the IngressRule's paths.", |o| {
        let hosts: Vec<&str> = o.pointer("/spec/rules").and_then(Value::as_array).into_iter().flatten().filter_map(|r| r["host"].as_str()).collect();
        json!(if hosts.is_empty() { "*".to_owned() } else { hosts.join(",") })
    }),
    col("Address", "Address is a list containing ingress points for the load-balancer.", |o| {
        let points: Vec<&str> = o.pointer("/status/loadBalancer/ingress").and_then(Value::as_array).into_iter().flatten().filter_map(|i| i["ip"].as_str().or_else(|| i["hostname"].as_str())).collect();
        json!(points.join(","))
    }),
    col("Ports", "Ports of TLS configurations that open.", |o| json!(if count(o, "/spec/tls") > 0 { "80, 443" } else { "80" })),
    AGE,
];

const INGRESS_CLASSES: &[Column] = &[
    NAME,
    col("Controller", "Controller that is responsible for handling this class.", |o| json!(s(o, "/spec/controller"))),
    col("Parameters", "A reference to a resource with additional parameters.", |o| {
        json!(match o.pointer("/spec/parameters") {
            Some(p) if p.is_object() => {
                let group = p["apiGroup"].as_str().unwrap_or("");
                let kind = p["kind"].as_str().unwrap_or("");
                let name = p["name"].as_str().unwrap_or("");
                if group.is_empty() { format!("{kind}/{name}") } else { format!("{kind}.{group}/{name}") }
            }
            _ => "<none>".to_owned(),
        })
    }),
    AGE,
];

const NETWORK_POLICIES: &[Column] = &[NAME, col("Pod-Selector", "Selects the pods to which this NetworkPolicy object applies.", |o| json!(label_selector(o.pointer("/spec/podSelector")))), AGE];
const SERVICE_CIDRS: &[Column] = &[NAME, col("CIDRs", "CIDRs defines the IP blocks in CIDR notation.", |o| json!(strings(o, "/spec/cidrs").join(","))), AGE];
const IP_ADDRESSES: &[Column] = &[
    NAME,
    col("ParentRef", "ParentRef references the resource that an IPAddress is attached to.", |o| {
        let (g, r, ns, name) = (s(o, "/spec/parentRef/group"), s(o, "/spec/parentRef/resource"), s(o, "/spec/parentRef/namespace"), s(o, "/spec/parentRef/name"));
        let resource = if g.is_empty() { r.to_owned() } else { format!("{r}.{g}") };
        json!(if ns.is_empty() { format!("{resource}/{name}") } else { format!("{resource}/{ns}/{name}") })
    }),
];
const RUNTIME_CLASSES: &[Column] = &[NAME, col("Handler", "Handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class.", |o| json!(s(o, "/handler"))), AGE];
const PRIORITY_CLASSES: &[Column] = &[
    NAME,
    int("Value", "value represents the integer value of this priority class.", |o| json!(n(o, "/value"))),
    col("Global-Default", "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class.", |o| json!(o.pointer("/globalDefault") == Some(&json!(true)))),
    AGE,
    col("PreemptionPolicy", "preemptionPolicy is the Policy for preempting pods with lower priority.", |o| json!(s(o, "/preemptionPolicy"))),
];

fn is_default_class(obj: &Value) -> bool {
    let a = obj.pointer("/metadata/annotations");
    ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"].iter().any(|k| a.and_then(|a| a.get(*k)).and_then(Value::as_str) == Some("true"))
}

const STORAGE_CLASSES: &[Column] = &[
    Column { cell: |o| json!(if is_default_class(o) { format!("{} (default)", s(o, "/metadata/name")) } else { s(o, "/metadata/name").to_owned() }), ..NAME },
    col("Provisioner", "provisioner indicates the type of the provisioner.", |o| json!(s(o, "/provisioner"))),
    col("ReclaimPolicy", "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class.", |o| json!(s(o, "/reclaimPolicy"))),
    col("VolumeBindingMode", "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.", |o| json!(s(o, "/volumeBindingMode"))),
    col("AllowVolumeExpansion", "allowVolumeExpansion shows whether the storage class allow volume expand.", |o| json!(o.pointer("/allowVolumeExpansion") == Some(&json!(true)))),
    AGE,
];

fn flag(o: &Value, ptr: &str) -> Value {
    json!(o.pointer(ptr) == Some(&json!(true)))
}

const CSI_DRIVERS: &[Column] = &[
    NAME,
    col("AttachRequired", "Indicates this CSI volume driver requires an attach operation.", |o| flag(o, "/spec/attachRequired")),
    col("PodInfoOnMount", "Indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations.", |o| flag(o, "/spec/podInfoOnMount")),
    col("StorageCapacity", "Indicates this CSI volume driver participates in storage capacity tracking.", |o| flag(o, "/spec/storageCapacity")),
    col("TokenRequests", "Indicates the CSIDriver requires ServiceAccountTokens for the audiences.", |o| {
        let audiences: Vec<&str> = o.pointer("/spec/tokenRequests").and_then(Value::as_array).into_iter().flatten().filter_map(|t| t["audience"].as_str()).collect();
        json!(if audiences.is_empty() { "<unset>".to_owned() } else { audiences.join(",") })
    }),
    col("RequiresRepublish", "RequiresRepublish indicates the CSI driver wants NodePublishVolume being periodically called.", |o| flag(o, "/spec/requiresRepublish")),
    col("Modes", "Defines the types of volumes this CSI volume driver supports.", |o| json!(none_if_empty(strings(o, "/spec/volumeLifecycleModes").join(",")))),
    AGE,
];
const CSI_NODES: &[Column] = &[NAME, int("Drivers", "Drivers indicates the list of CSI drivers on the node.", |o| json!(count(o, "/spec/drivers"))), AGE];
const CSI_STORAGE_CAPACITIES: &[Column] = &[
    NAME,
    col("StorageClassName", "storageClassName represents the name of the StorageClass that the reported capacity applies to.", |o| json!(s(o, "/storageClassName"))),
    col("Capacity", "capacity is the value reported by the CSI driver in its GetCapacityResponse.", |o| json!(s(o, "/capacity"))),
];
const VOLUME_ATTACHMENTS: &[Column] = &[
    NAME,
    col("Attacher", "Attacher indicates the name of the volume driver that MUST handle this request.", |o| json!(s(o, "/spec/attacher"))),
    col("PV", "Name of the persistent volume to attach.", |o| json!(s(o, "/spec/source/persistentVolumeName"))),
    col("Node", "The node that the volume should be attached to.", |o| json!(s(o, "/spec/nodeName"))),
    col("Attached", "Indicates the volume is successfully attached.", |o| flag(o, "/status/attached")),
    AGE,
];

fn csr_condition(obj: &Value) -> Value {
    let types: Vec<&str> = obj.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten().filter(|c| c["status"] != "False").filter_map(|c| c["type"].as_str()).collect();
    let mut shown: Vec<&str> = types.iter().copied().filter(|t| *t != "Approved" && *t != "Denied").collect();
    // Approved or Denied first, then the rest, as upstream orders them.
    if let Some(decision) = types.iter().find(|t| **t == "Approved" || **t == "Denied") {
        shown.insert(0, decision);
    }
    if obj.pointer("/status/certificate").is_some_and(|c| !c.is_null()) {
        shown.push("Issued");
    }
    json!(if shown.is_empty() { "Pending".to_owned() } else { shown.join(",") })
}

const CERTIFICATE_SIGNING_REQUESTS: &[Column] = &[
    NAME,
    AGE,
    col("SignerName", "Name of the signer that the request is for.", |o| json!(s(o, "/spec/signerName"))),
    col("Requestor", "Name of the user that created the request.", |o| json!(s(o, "/spec/username"))),
    col("RequestedDuration", "Requested duration of the issued certificate.", |o| {
        json!(o.pointer("/spec/expirationSeconds").and_then(Value::as_i64).map_or("<none>".to_owned(), super::human_duration))
    }),
    col("Condition", "Conditions applied to the request (Approved, Denied, Failed, Issued).", csr_condition),
];

const FLOW_SCHEMAS: &[Column] = &[
    NAME,
    col("PriorityLevel", "The name of the priority level this flow schema refers to.", |o| json!(s(o, "/spec/priorityLevelConfiguration/name"))),
    int("MatchingPrecedence", "The matching precedence of this flow schema.", |o| json!(n(o, "/spec/matchingPrecedence"))),
    col("DistinguisherMethod", "The distinguisher method of this flow schema.", |o| text_or_none(o, "/spec/distinguisherMethod/type")),
    AGE,
    col("MissingPL", "Whether the priority level this flow schema refers to is missing.", |o| {
        let dangling = o.pointer("/status/conditions").and_then(Value::as_array).and_then(|c| c.iter().find(|c| c["type"] == "Dangling")).and_then(|c| c["status"].as_str());
        json!(dangling.unwrap_or("?"))
    }),
];

fn queuing(o: &Value, field: &str) -> Value {
    match o.pointer(&format!("/spec/limited/limitResponse/queuing/{field}")) {
        Some(v) => v.clone(),
        None => json!("<none>"),
    }
}

const PRIORITY_LEVEL_CONFIGURATIONS: &[Column] = &[
    NAME,
    col("Type", "The type of the priority level.", |o| json!(s(o, "/spec/type"))),
    col("NominalConcurrencyShares", "The nominal concurrency shares of the priority level.", |o| json!(shown(o, "/spec/limited/nominalConcurrencyShares"))),
    col("Queues", "The number of queues of the priority level.", |o| queuing(o, "queues")),
    col("HandSize", "The hand size of the priority level.", |o| queuing(o, "handSize")),
    col("QueueLengthLimit", "The queue length limit of the priority level.", |o| queuing(o, "queueLengthLimit")),
    AGE,
];

/// The columns of a kind that is not a workload.
/// The first `Healthy` condition of a ComponentStatus (upstream's printer reads that one).
fn healthy_condition(obj: &Value) -> Option<&Value> {
    obj["conditions"].as_array()?.iter().find(|c| c["type"] == "Healthy")
}

const COMPONENT_STATUSES: &[Column] = &[
    NAME,
    col("Status", "Status of the component conditions", |o| {
        json!(match healthy_condition(o) {
            None => "Unknown",
            Some(c) if c["status"] == "True" => "Healthy",
            Some(_) => "Unhealthy",
        })
    }),
    col("Message", "Message of the component conditions", |o| json!(healthy_condition(o).and_then(|c| c["message"].as_str()).unwrap_or(""))),
    col("Error", "Error of the component conditions", |o| json!(healthy_condition(o).and_then(|c| c["error"].as_str()).unwrap_or(""))),
];

/// A claim's state as upstream summarizes it: deleted, pending, allocated, reserved.
fn resource_claim_state(obj: &Value) -> Value {
    let deleted = obj.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null());
    let mut states = Vec::new();
    if deleted {
        states.push("deleted");
    }
    if obj.pointer("/status/allocation").is_none_or(Value::is_null) {
        if !deleted {
            states.push("pending");
        }
    } else {
        states.push("allocated");
        if count(obj, "/status/reservedFor") > 0 {
            states.push("reserved");
        }
    }
    json!(states.join(","))
}

const RESOURCE_CLAIMS: &[Column] = &[NAME, col("State", "A summary of the current state (allocated, pending, reserved, etc.).", resource_claim_state), AGE];
const RESOURCE_SLICES: &[Column] = &[
    NAME,
    col("Node", "NodeName identifies the node which provides the resources in this pool.", |o| json!(s(o, "/spec/nodeName"))),
    col("Driver", "Driver identifies the DRA driver providing the capacity information.", |o| json!(s(o, "/spec/driver"))),
    col("Pool", "Name is used to identify the pool.", |o| json!(s(o, "/spec/pool/name"))),
    AGE,
];

pub(super) fn of(group: &str, plural: &str) -> Option<&'static [Column]> {
    Some(match (group, plural) {
        ("resource.k8s.io", "resourceclaims") => RESOURCE_CLAIMS,
        ("resource.k8s.io", "resourceslices") => RESOURCE_SLICES,
        ("", "componentstatuses") => COMPONENT_STATUSES,
        ("", "namespaces") => NAMESPACES,
        ("", "configmaps") => CONFIG_MAPS,
        ("", "secrets") => SECRETS,
        ("", "services") => SERVICES,
        ("", "endpoints") => ENDPOINTS,
        ("", "serviceaccounts") => SERVICE_ACCOUNTS,
        ("", "events") => EVENTS,
        ("", "nodes") => NODES,
        ("", "persistentvolumes") => PERSISTENT_VOLUMES,
        ("", "persistentvolumeclaims") => PERSISTENT_VOLUME_CLAIMS,
        ("", "resourcequotas") => RESOURCE_QUOTAS,
        ("", "limitranges") | ("rbac.authorization.k8s.io", "roles" | "clusterroles") | ("apiextensions.k8s.io", "customresourcedefinitions") => NAME_AND_CREATED,
        ("coordination.k8s.io", "leases") => LEASES,
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => ROLE_BINDINGS,
        ("discovery.k8s.io", "endpointslices") => ENDPOINT_SLICES,
        ("networking.k8s.io", "ingresses") => INGRESSES,
        ("networking.k8s.io", "ingressclasses") => INGRESS_CLASSES,
        ("networking.k8s.io", "networkpolicies") => NETWORK_POLICIES,
        ("networking.k8s.io", "servicecidrs") => SERVICE_CIDRS,
        ("networking.k8s.io", "ipaddresses") => IP_ADDRESSES,
        ("node.k8s.io", "runtimeclasses") => RUNTIME_CLASSES,
        ("scheduling.k8s.io", "priorityclasses") => PRIORITY_CLASSES,
        ("storage.k8s.io", "storageclasses") => STORAGE_CLASSES,
        ("storage.k8s.io", "csidrivers") => CSI_DRIVERS,
        ("storage.k8s.io", "csinodes") => CSI_NODES,
        ("storage.k8s.io", "csistoragecapacities") => CSI_STORAGE_CAPACITIES,
        ("storage.k8s.io", "volumeattachments") => VOLUME_ATTACHMENTS,
        ("certificates.k8s.io", "certificatesigningrequests") => CERTIFICATE_SIGNING_REQUESTS,
        ("flowcontrol.apiserver.k8s.io", "flowschemas") => FLOW_SCHEMAS,
        ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations") => PRIORITY_LEVEL_CONFIGURATIONS,
        _ => return None,
    })
}
