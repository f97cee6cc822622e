//! Service addresses (RFC 0014, "Service addresses"): the cluster's service IP range and
//! node-port range, which addresses and node ports a Service holds, how a free address is
//! picked, the IPAddress object that names an address's owner, and the update rules that keep or
//! drop a Service's allocated values as upstream's service strategy does. Pure decisions: the
//! shard writes them.

use crate::kind_rules::errors::{go_strings, invalid_shown};
use crate::status::StatusCause;
use ipnet::IpNet;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// The label upstream's allocator puts on every IPAddress it manages, and its value.
pub const MANAGED_BY: (&str, &str) = ("ipaddress.kubernetes.io/managed-by", "ipallocator.k8s.io");
/// The label naming an IPAddress's family.
pub const FAMILY_LABEL: &str = "ipaddress.kubernetes.io/ip-family";
/// The default ServiceCIDR's name.
pub const DEFAULT_SERVICE_CIDR: &str = "kubernetes";
/// The finalizer upstream keeps on a ServiceCIDR while addresses in it are held.
pub const SERVICE_CIDR_FINALIZER: &str = "networking.k8s.io/service-cidr-finalizer";

/// `--service-cluster-ip-range` and `--service-node-port-range`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceNetwork {
    /// The service IP range (the default ServiceCIDR's).
    pub cidr: IpNet,
    /// The node-port range, both ends included.
    pub node_ports: (u16, u16),
}

impl Default for ServiceNetwork {
    /// 10.96.0.0/12 (kubeadm's, the range most clusters run with) and upstream's 30000-32767.
    fn default() -> Self {
        Self { cidr: "10.96.0.0/12".parse().expect("default range"), node_ports: (30000, 32767) }
    }
}

impl ServiceNetwork {
    /// Reads the two flags. One CIDR (a single-stack cluster): two, one per family, would give
    /// a dual-stack Service two IPAddress objects written at one revision, which RFC 0014 leaves
    /// for later.
    pub fn parse(cidr: &str, node_ports: &str) -> Result<Self, String> {
        if cidr.contains(',') {
            return Err(format!("--service-cluster-ip-range {cidr}: dual-stack service ranges are not supported yet (RFC 0014); give one CIDR"));
        }
        let net: IpNet = cidr.trim().parse().map_err(|e| format!("--service-cluster-ip-range {cidr}: {e}"))?;
        if net.trunc() != net {
            return Err(format!("--service-cluster-ip-range {cidr}: not a network address (did you mean {}?)", net.trunc()));
        }
        if usable(&net).is_none() {
            return Err(format!("--service-cluster-ip-range {cidr}: too small to hold the kubernetes Service's address"));
        }
        let (lo, hi) = node_ports.split_once('-').ok_or_else(|| format!("--service-node-port-range {node_ports}: expected LOW-HIGH"))?;
        let port = |s: &str| s.trim().parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| format!("--service-node-port-range {node_ports}: {s:?} is not a port"));
        let (lo, hi) = (port(lo)?, port(hi)?);
        if lo > hi {
            return Err(format!("--service-node-port-range {node_ports}: the low end is above the high end"));
        }
        Ok(Self { cidr: net, node_ports: (lo, hi) })
    }

    /// The family of the range: `IPv4` or `IPv6`.
    pub fn family(&self) -> &'static str {
        family_of(&self.cidr.addr())
    }

    /// The `default/kubernetes` Service's address: the range's first usable one.
    pub fn kubernetes_service_ip(&self) -> IpAddr {
        let (first, _) = usable(&self.cidr).expect("checked at parse");
        from_number(&self.cidr, first)
    }

    /// The node-port range as upstream prints it in errors.
    pub fn node_port_range(&self) -> String {
        format!("{}-{}", self.node_ports.0, self.node_ports.1)
    }

    /// The default ServiceCIDR object, as upstream's controller makes it (Ready).
    pub fn default_service_cidr(&self) -> Value {
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
            "metadata": {"name": DEFAULT_SERVICE_CIDR, "finalizers": [SERVICE_CIDR_FINALIZER]},
            "spec": {"cidrs": [self.cidr.to_string()]},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "", "message": "Kubernetes Service CIDR is ready", "lastTransitionTime": crate::meta::now_rfc3339()}]},
        })
    }
}

/// `IPv4` or `IPv6`.
pub fn family_of(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

fn number(ip: &IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(*a) as u128,
        IpAddr::V6(a) => u128::from(*a),
    }
}

fn from_number(net: &IpNet, n: u128) -> IpAddr {
    match net {
        IpNet::V4(_) => IpAddr::V4((n as u32).into()),
        IpNet::V6(_) => IpAddr::V6(n.into()),
    }
}

/// The first and last allocatable address of `net` as numbers: not the network address, and not
/// an IPv4 broadcast address (upstream's allocator reserves both); `None` if none is left.
fn usable(net: &IpNet) -> Option<(u128, u128)> {
    let (first, mut last) = (number(&net.network()) + 1, number(&net.broadcast()));
    if net.addr().is_ipv4() {
        last = last.checked_sub(1)?;
    }
    (first <= last).then_some((first, last))
}

/// Whether `ip` is an allocatable address of one of `nets`.
pub fn allocatable_in(nets: &[IpNet], ip: &IpAddr) -> bool {
    nets.iter().any(|n| n.contains(ip) && usable(n).is_some_and(|(first, last)| (first..=last).contains(&number(ip))))
}

/// Addresses at the start of a range kept for static allocation (upstream's
/// `calculateRangeOffset`): a sixteenth of the range, at least 16 and at most 256, none for a
/// range under 16 addresses. Dynamic allocation picks above them first.
fn static_band(size: u128) -> u128 {
    if size < 16 { 0 } else { (size / 16).clamp(16, 256) }
}

/// `net`'s first allocatable address as a number, how many addresses its static band holds,
/// and how many its dynamic band holds (at least one).
fn bands(net: &IpNet) -> Option<(u128, u128, u128)> {
    let (first, last) = usable(net)?;
    let size = last - first + 1;
    let band = static_band(size).min(size - 1);
    Some((first, band, size - band))
}

/// A candidate for a dynamic allocation in `net`, from the random number `r`: an address of the
/// dynamic band (the whole range when it has none).
pub fn dynamic_candidate(net: &IpNet, r: u128) -> Option<IpAddr> {
    let (first, band, dynamic) = bands(net)?;
    Some(from_number(net, first + band + r % dynamic))
}

/// A free address of `nets` (none in `taken`), scanning from the random point `r` in each
/// range's dynamic band, then its static band; `None` when every range is full.
pub fn first_free(nets: &[IpNet], taken: &BTreeSet<IpAddr>, r: u128) -> Option<IpAddr> {
    for net in nets {
        let Some((first, band, dynamic)) = bands(net) else { continue };
        let start = r % dynamic;
        // The dynamic band from `start`, wrapping, then the static band.
        let order = (0..dynamic).map(|i| first + band + (start + i) % dynamic).chain((0..band).map(|i| first + i));
        if let Some(ip) = order.map(|n| from_number(net, n)).find(|ip| !taken.contains(ip)) {
            return Some(ip);
        }
    }
    None
}

/// A random number for [`dynamic_candidate`] and node ports.
pub fn random() -> u128 {
    u128::from_le_bytes(*uuid::Uuid::new_v4().as_bytes())
}

/// What a Service holds: its cluster addresses and node ports (those of its ports and its
/// health-check node port).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub ips: BTreeSet<IpAddr>,
    pub node_ports: BTreeSet<u16>,
}

/// The addresses and node ports `svc` holds as stored (unparsable values hold nothing).
pub fn held(svc: &Value) -> Held {
    let mut h = Held::default();
    if service_type(svc) != "ExternalName" {
        for ip in cluster_ips(svc) {
            if let Ok(ip) = ip.parse() {
                h.ips.insert(ip);
            }
        }
    }
    for p in svc.pointer("/spec/ports").and_then(Value::as_array).into_iter().flatten() {
        if let Some(n) = p.get("nodePort").and_then(Value::as_u64).and_then(|n| u16::try_from(n).ok()).filter(|n| *n > 0) {
            h.node_ports.insert(n);
        }
    }
    if let Some(n) = svc.pointer("/spec/healthCheckNodePort").and_then(Value::as_u64).and_then(|n| u16::try_from(n).ok()).filter(|n| *n > 0) {
        h.node_ports.insert(n);
    }
    h
}

/// `spec.type`, `ClusterIP` when absent.
pub fn service_type(svc: &Value) -> &str {
    svc.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP")
}

/// `spec.clusterIPs`, or the one `spec.clusterIP` where the list is absent; empty strings left out.
pub fn cluster_ips(svc: &Value) -> Vec<String> {
    let listed: Vec<String> = svc.pointer("/spec/clusterIPs").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect()).unwrap_or_default();
    let ips = if listed.is_empty() { svc.pointer("/spec/clusterIP").and_then(Value::as_str).map(|s| vec![s.to_owned()]).unwrap_or_default() } else { listed };
    ips.into_iter().filter(|s| !s.is_empty()).collect()
}

/// Whether the Service gets a cluster address: not ExternalName, not headless (`None`).
pub fn wants_cluster_ip(svc: &Value) -> bool {
    service_type(svc) != "ExternalName" && cluster_ips(svc).first().map(String::as_str) != Some("None")
}

/// Whether each port of the Service gets a node port: NodePort, and LoadBalancer unless
/// `allocateLoadBalancerNodePorts` is false (upstream's `shouldAllocateNodePorts`).
pub fn allocates_node_ports(svc: &Value) -> bool {
    match service_type(svc) {
        "NodePort" => true,
        "LoadBalancer" => svc.pointer("/spec/allocateLoadBalancerNodePorts").and_then(Value::as_bool) != Some(false),
        _ => false,
    }
}

/// Whether the Service needs a health-check node port: LoadBalancer with
/// `externalTrafficPolicy: Local` (upstream's `NeedsHealthCheck`).
pub fn needs_health_check(svc: &Value) -> bool {
    service_type(svc) == "LoadBalancer" && svc.pointer("/spec/externalTrafficPolicy").and_then(Value::as_str) == Some("Local")
}

/// Fills the IP family fields of a Service being created or updated (`old`) on a single-stack
/// cluster of `family`, as upstream's `initIPFamilyFields` does there: the policy defaults to the
/// old one, RequireDualStack for a headless Service without selector, else SingleStack; the
/// families follow the addresses given, else the cluster's. Returns the 422 causes upstream
/// gives for a family or policy this cluster cannot serve.
pub fn init_ip_family_fields(svc: &mut Value, old: Option<&Value>, family: &str) -> Vec<StatusCause> {
    if service_type(svc) == "ExternalName" {
        return Vec::new();
    }
    let headless_selectorless = cluster_ips(svc).first().map(String::as_str) == Some("None") && svc.pointer("/spec/selector").and_then(Value::as_object).is_none_or(|m| m.is_empty());
    let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) else { return Vec::new() };
    if spec.get("ipFamilyPolicy").is_none_or(Value::is_null) {
        let policy = match old.and_then(|o| o.pointer("/spec/ipFamilyPolicy")).filter(|p| p.is_string()) {
            Some(p) => p.clone(),
            None if headless_selectorless => json!("RequireDualStack"),
            None => json!("SingleStack"),
        };
        spec.insert("ipFamilyPolicy".into(), policy);
    }
    let policy = spec.get("ipFamilyPolicy").and_then(Value::as_str).unwrap_or("SingleStack").to_owned();
    let mut families: Vec<String> = spec.get("ipFamilies").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect()).unwrap_or_default();
    let ips: Vec<String> = spec.get("clusterIPs").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect()).unwrap_or_default();
    let mut causes = Vec::new();
    let shown_ips = go_strings(spec.get("clusterIPs"));
    for (i, ip) in ips.iter().enumerate() {
        if ip == "None" {
            break;
        }
        let Ok(addr) = ip.parse::<IpAddr>() else { continue };
        if i >= families.len() {
            let fam = family_of(&addr);
            if fam == family {
                families.push(fam.to_owned());
            } else {
                causes.push(invalid_shown(&format!("spec.clusterIPs[{i}]"), &shown_ips, &format!("{fam} is not configured on this cluster")));
            }
        }
    }
    if !causes.is_empty() {
        return causes;
    }
    if headless_selectorless {
        if families.is_empty() {
            families.push(family.to_owned());
        }
        spec.insert("ipFamilies".into(), json!(families));
        return causes;
    }
    if policy == "RequireDualStack" {
        causes.push(invalid_shown("spec.ipFamilyPolicy", &format!("{policy:?}"), "this cluster is not configured for dual-stack services"));
    }
    for (i, f) in families.iter().enumerate() {
        if f != family {
            causes.push(invalid_shown(&format!("spec.ipFamilies[{i}]"), &format!("{f:?}"), "not configured on this cluster"));
        }
    }
    if causes.is_empty() {
        if families.is_empty() {
            families.push(family.to_owned());
        }
        spec.insert("ipFamilies".into(), json!(families));
    }
    causes
}

/// A Service update's allocated values as upstream's strategy leaves them: node ports the
/// update leaves out are kept by port name while both sides need them, and the health-check
/// node port likewise (`patchAllocatedValues`); values of a type the Service leaves are dropped
/// when the update did not change them (`dropTypeDependentFields`).
pub fn prepare_update(old: &Value, new: &mut Value) {
    let ports_of = |v: &Value| v.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
    let node_port = |p: &Value| p.get("nodePort").and_then(Value::as_u64).filter(|n| *n > 0);
    if needs_node_ports(old) && needs_node_ports(new) {
        let used: BTreeSet<u64> = ports_of(new).iter().filter_map(node_port).collect();
        let by_name: std::collections::BTreeMap<String, u64> = ports_of(old).iter().filter_map(|p| Some((p.get("name").and_then(Value::as_str).unwrap_or("").to_owned(), node_port(p)?))).collect();
        for p in new.pointer_mut("/spec/ports").and_then(Value::as_array_mut).into_iter().flatten() {
            if node_port(p).is_none() && let Some(kept) = by_name.get(p.get("name").and_then(Value::as_str).unwrap_or("")).filter(|n| !used.contains(n)) {
                p["nodePort"] = json!(kept);
            }
        }
    }
    let hc = |v: &Value| v.pointer("/spec/healthCheckNodePort").and_then(Value::as_u64).filter(|n| *n > 0);
    if needs_health_check(old) && needs_health_check(new) && hc(new).is_none() && let Some(kept) = hc(old) {
        new["spec"]["healthCheckNodePort"] = json!(kept);
    }
    // dropTypeDependentFields: only values the update left as they were.
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else { return };
    if service_type(old) != "ExternalName" && spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if spec.get(field) == old.pointer(&format!("/spec/{field}")) {
                spec.remove(field);
            }
        }
    }
    let new_needs = matches!(spec.get("type").and_then(Value::as_str), Some("NodePort" | "LoadBalancer"));
    if needs_node_ports(old) && !new_needs && spec.get("ports") == old.pointer("/spec/ports") {
        for p in spec.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(p) = p.as_object_mut() {
                p.remove("nodePort");
            }
        }
    }
    // The external traffic policy and the load balancer's own fields, for a type without them.
    let new_type = spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP").to_owned();
    for (field, kept_by) in [("externalTrafficPolicy", &["NodePort", "LoadBalancer"][..]), ("allocateLoadBalancerNodePorts", &["LoadBalancer"][..]), ("loadBalancerClass", &["LoadBalancer"][..])] {
        if !kept_by.contains(&new_type.as_str()) && spec.get(field) == old.pointer(&format!("/spec/{field}")) {
            spec.remove(field);
        }
    }
    let wants_hc = spec.get("type").and_then(Value::as_str) == Some("LoadBalancer") && spec.get("externalTrafficPolicy").and_then(Value::as_str) == Some("Local");
    if !wants_hc && spec.get("healthCheckNodePort") == old.pointer("/spec/healthCheckNodePort") {
        spec.remove("healthCheckNodePort");
    }
}

/// NodePort and LoadBalancer Services keep node ports (upstream's `needsNodePort`).
fn needs_node_ports(svc: &Value) -> bool {
    matches!(service_type(svc), "NodePort" | "LoadBalancer")
}

/// The IPAddress object recording that the Service `namespace/name` holds `ip`, as upstream's
/// allocator writes it.
pub fn ip_address_object(ip: &IpAddr, namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IPAddress",
        "metadata": {"name": ip.to_string(), "labels": {FAMILY_LABEL: family_of(ip), MANAGED_BY.0: MANAGED_BY.1}},
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": namespace, "name": name}},
    })
}

/// The Service an IPAddress names as its parent (`namespace`, `name`), if it is one.
pub fn parent_service(ip_address: &Value) -> Option<(String, String)> {
    let r = ip_address.pointer("/spec/parentRef")?;
    let s = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("").to_owned();
    (s("group").is_empty() && s("resource") == "services").then(|| (s("namespace"), s("name")))
}

/// Whether upstream's allocator (or ours) manages the IPAddress: only those are repaired.
pub fn managed(ip_address: &Value) -> bool {
    ip_address.pointer("/metadata/labels").and_then(|l| l.get(MANAGED_BY.0)).and_then(Value::as_str) == Some(MANAGED_BY.1)
}

/// The record kept under a node port's key: the Service holding it.
pub fn node_port_record(namespace: &str, name: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"namespace": namespace, "name": name})).expect("json")
}

/// The Service a node port's record names.
pub fn node_port_holder(record: &[u8]) -> Option<(String, String)> {
    let v: Value = serde_json::from_slice(record).ok()?;
    Some((v.get("namespace")?.as_str()?.to_owned(), v.get("name")?.as_str()?.to_owned()))
}

#[cfg(test)]
mod tests;
