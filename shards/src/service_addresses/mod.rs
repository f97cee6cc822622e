//! Service addresses (RFC 0014, "Service addresses"): a Service's cluster IP comes from the
//! ServiceCIDRs and its node ports from `--service-node-port-range`; each address is held by an
//! IPAddress object named by the address and each node port by a key of its own, written in the
//! same etcd transaction as the Service (create-if-absent), so two Services on two shards can
//! never hold one address: the second transaction finds the key and fails as a whole. A Service
//! that changes or goes releases what it held in the transaction that changes or removes it.
//! [`repair`] reclaims what a split store or a hand edit left behind.
//!
//! The decisions (ranges, candidates, family fields, the update rules) are
//! `shardplane_apimachinery::service_network`'s.

pub mod flags;
pub mod repair;

use crate::shard::Shard;
use crate::write::stored_bytes;
use ipnet::IpNet;
use serde_json::{json, Value};
use shardplane_apimachinery::kind_rules::errors::{go_strings, invalid_shown};
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::service_network::{self as net, ServiceNetwork};
use shardplane_apimachinery::{meta, ApiError};
use shardplane_http::storage_errors::status_of as storage_err;
use shardplane_storage::{Companion, StorageError};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// Random picks of one address or port that may collide before the whole range is listed.
const RANDOM_TRIES: usize = 8;

/// Whether `info` is the core Services resource.
pub fn is_services(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.plural == "services"
}

/// The etcd key that holds a node port.
pub fn node_port_key(port: u16) -> Vec<u8> {
    format!("{}{port:05}", shardplane_keyspace::etcd_layout::NODE_PORTS_PREFIX).into_bytes()
}

/// Where a taken value goes in the Service.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Field {
    /// `spec.clusterIP` and `spec.clusterIPs[0]`.
    ClusterIp,
    /// `spec.ports[i].nodePort` for each listed index (ports sharing a port number share one).
    NodePorts(Vec<usize>),
    /// `spec.healthCheckNodePort`.
    HealthCheck,
}

/// One address or node port a write takes.
#[derive(Clone, Debug)]
struct Take {
    value: Taken,
    /// Picked here (another may be picked on a collision), or asked for by the client.
    dynamic: bool,
    field: Field,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Taken {
    Ip(IpAddr),
    Port(u16),
}

impl std::fmt::Display for Taken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Taken::Ip(ip) => ip.fmt(f),
            Taken::Port(p) => p.fmt(f),
        }
    }
}

/// What a Service write takes and gives back, as companions of its transaction.
#[derive(Default)]
pub(crate) struct Plan {
    takes: Vec<Take>,
    releases: Vec<Companion>,
    /// Values already found taken, never picked again.
    collided: BTreeSet<Taken>,
    /// The ranges addresses come from.
    pool: Vec<IpNet>,
}

/// The ranges addresses are allocated from: the flag's, and every Ready ServiceCIDR of the
/// same family not being deleted.
async fn pool(shard: &Shard) -> Result<Vec<IpNet>, ApiError> {
    let network = &shard.service_network;
    let mut nets = vec![network.cidr];
    for cidr in shard.informers.objects("networking.k8s.io", "servicecidrs").await? {
        let ready = cidr.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        if !ready || cidr.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        for s in cidr.pointer("/spec/cidrs").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            if let Ok(n) = s.parse::<IpNet>() && n.addr().is_ipv4() == network.cidr.addr().is_ipv4() && !nets.contains(&n) {
                nets.push(n);
            }
        }
    }
    Ok(nets)
}

fn invalid(name: &str, causes: Vec<shardplane_apimachinery::status::StatusCause>) -> ApiError {
    ApiError::invalid("", "Service", name, causes)
}

/// The refusal of a value the client asked for: upstream's words for each kind of value (a
/// health-check node port's is upstream's internal error).
fn refused(network: &ServiceNetwork, svc: &Value, take: &Take, why: Why) -> ApiError {
    let name = meta::meta_str(svc, "name");
    let port_detail = match why {
        Why::Taken => "provided port is already allocated".to_owned(),
        Why::OutOfRange => format!("provided port is not in the valid range. The range of valid ports is {}", network.node_port_range()),
    };
    match (&take.field, take.value) {
        (Field::ClusterIp, Taken::Ip(ip)) => {
            let detail = match why {
                Why::Taken => "provided IP is already allocated".to_owned(),
                Why::OutOfRange => format!("provided IP {ip} is not in the valid range"),
            };
            invalid(name, vec![invalid_shown("spec.clusterIPs", &go_strings(Some(&json!(net::cluster_ips(svc)))), &format!("failed to allocate IP {ip}: {detail}"))])
        }
        (Field::NodePorts(at), Taken::Port(p)) => invalid(name, vec![invalid_shown(&format!("spec.ports[{}].nodePort", at.first().copied().unwrap_or(0)), &p.to_string(), &port_detail)]),
        (_, value) => ApiError::internal(format!("failed to allocate requested HealthCheck NodePort {value}: {port_detail}")),
    }
}

#[derive(Clone, Copy)]
enum Why {
    Taken,
    OutOfRange,
}

/// Writes `value` into the field a take fills.
fn fill(svc: &mut Value, field: &Field, value: Taken) {
    match (field, value) {
        (Field::ClusterIp, Taken::Ip(ip)) => {
            svc["spec"]["clusterIP"] = json!(ip.to_string());
            svc["spec"]["clusterIPs"] = json!([ip.to_string()]);
        }
        (Field::NodePorts(at), Taken::Port(p)) => {
            for i in at {
                if let Some(port) = svc.pointer_mut(&format!("/spec/ports/{i}")) {
                    port["nodePort"] = json!(p);
                }
            }
        }
        (Field::HealthCheck, Taken::Port(p)) => svc["spec"]["healthCheckNodePort"] = json!(p),
        _ => {}
    }
}

/// A node port of the range not in `avoid`: random (a few tries), else the first such one;
/// `None` only when `avoid` holds the whole range.
fn free_port(network: &ServiceNetwork, avoid: &BTreeSet<Taken>) -> Option<u16> {
    let (lo, hi) = network.node_ports;
    let size = (hi - lo) as u128 + 1;
    let free = |p: &u16| !avoid.contains(&Taken::Port(*p));
    (0..RANDOM_TRIES).map(|_| lo + (net::random() % size) as u16).find(free).or_else(|| (lo..=hi).find(free))
}

/// Plans what `svc` (a Service being created, or updated from `old`) takes and gives back, and
/// fills the fields of values picked here. Values the client asked for are checked against the
/// ranges (422 as upstream); whether they are free is the transaction's to find.
pub(crate) async fn plan(shard: &Shard, info: &ResourceInfo, old: Option<&Value>, svc: &mut Value) -> Result<Plan, ApiError> {
    if !is_services(info) {
        return Ok(Plan::default());
    }
    let network = &shard.service_network;
    let name = meta::meta_str(svc, "name").to_owned();
    let causes = net::init_ip_family_fields(svc, old, network.family());
    if !causes.is_empty() {
        return Err(invalid(&name, causes));
    }
    let before = old.map(net::held).unwrap_or_default();
    let mut plan = Plan::default();
    // The cluster address (the ServiceCIDRs are read only when one is taken: a status update
    // never waits for them).
    if net::wants_cluster_ip(svc) {
        match net::cluster_ips(svc).first() {
            Some(given) => {
                let ip: IpAddr = given.parse().map_err(|_| invalid(&name, vec![invalid_shown("spec.clusterIPs[0]", &format!("{given:?}"), "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")]))?;
                if !before.ips.contains(&ip) {
                    let take = Take { value: Taken::Ip(ip), dynamic: false, field: Field::ClusterIp };
                    plan.pool = pool(shard).await?;
                    if !net::allocatable_in(&plan.pool, &ip) {
                        return Err(refused(network, svc, &take, Why::OutOfRange));
                    }
                    plan.takes.push(take);
                }
            }
            None => {
                plan.pool = pool(shard).await?;
                let ip = net::dynamic_candidate(&plan.pool[0], net::random()).ok_or_else(|| ApiError::internal("failed to allocate a serviceIP: range is full"))?;
                fill(svc, &Field::ClusterIp, Taken::Ip(ip));
                plan.takes.push(Take { value: Taken::Ip(ip), dynamic: true, field: Field::ClusterIp });
            }
        }
    }
    // Node ports: one per port number (TCP and UDP of one port share it), as upstream.
    let ports = svc.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
    let allocates = net::allocates_node_ports(svc);
    let mut by_number: Vec<(u64, Option<u16>, Vec<usize>)> = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let number = p.get("port").and_then(Value::as_u64).unwrap_or(0);
        let given = p.get("nodePort").and_then(Value::as_u64).filter(|n| *n > 0);
        if given.is_none() && !allocates {
            continue;
        }
        let given = given.map(|n| u16::try_from(n).unwrap_or(0));
        match by_number.iter_mut().find(|(n, g, _)| *n == number && (given.is_none() || *g == given || g.is_none())) {
            Some(entry) => {
                entry.2.push(i);
                if entry.1.is_none() {
                    entry.1 = given;
                }
            }
            None => by_number.push((number, given, vec![i])),
        }
    }
    let mut chosen: BTreeSet<u16> = BTreeSet::new();
    for (_, given, at) in by_number {
        let field = Field::NodePorts(at);
        match given {
            Some(p) => {
                let take = Take { value: Taken::Port(p), dynamic: false, field };
                if p < network.node_ports.0 || p > network.node_ports.1 {
                    return Err(refused(network, svc, &take, Why::OutOfRange));
                }
                fill(svc, &take.field, take.value);
                if !before.node_ports.contains(&p) && chosen.insert(p) {
                    plan.takes.push(take);
                }
            }
            None => {
                let avoid: BTreeSet<Taken> = chosen.iter().chain(&before.node_ports).map(|p| Taken::Port(*p)).collect();
                let p = free_port(network, &avoid).ok_or_else(|| ApiError::internal("failed to allocate a nodePort: range is full"))?;
                chosen.insert(p);
                fill(svc, &field, Taken::Port(p));
                plan.takes.push(Take { value: Taken::Port(p), dynamic: true, field });
            }
        }
    }
    if net::needs_health_check(svc) {
        let given = svc.pointer("/spec/healthCheckNodePort").and_then(Value::as_u64).filter(|n| *n > 0).map(|n| u16::try_from(n).unwrap_or(0));
        match given {
            Some(p) if before.node_ports.contains(&p) || chosen.contains(&p) => {}
            Some(p) => {
                let take = Take { value: Taken::Port(p), dynamic: false, field: Field::HealthCheck };
                if p < network.node_ports.0 || p > network.node_ports.1 {
                    return Err(refused(network, svc, &take, Why::OutOfRange));
                }
                plan.takes.push(take);
            }
            None => {
                let avoid: BTreeSet<Taken> = chosen.iter().chain(&before.node_ports).map(|p| Taken::Port(*p)).collect();
                let p = free_port(network, &avoid).ok_or_else(|| ApiError::internal("failed to allocate a HealthCheck NodePort: range is full"))?;
                fill(svc, &Field::HealthCheck, Taken::Port(p));
                plan.takes.push(Take { value: Taken::Port(p), dynamic: true, field: Field::HealthCheck });
            }
        }
    }
    // What the old object held and the new one does not is given back.
    if let Some(old) = old {
        let after = net::held(svc);
        let ns = meta::meta_str(old, "namespace").to_owned();
        let gone_ips: Vec<IpAddr> = before.ips.difference(&after.ips).copied().collect();
        let gone_ports: Vec<u16> = before.node_ports.difference(&after.node_ports).copied().collect();
        plan.releases = releases_of(shard, &ns, &name, &gone_ips, &gone_ports).await.map_err(storage_err)?;
    }
    Ok(plan)
}

/// The deletes that give back `ips` and `ports` held by the Service `ns/name`: each key as it
/// is now, where it still names that Service (one another Service holds now is not touched).
async fn releases_of(shard: &Shard, ns: &str, name: &str, ips: &[IpAddr], ports: &[u16]) -> Result<Vec<Companion>, StorageError> {
    let ip_info = shard.builtin("networking.k8s.io", "ipaddresses");
    let svc_info = shard.builtin("", "services");
    let mut out = Vec::new();
    for ip in ips {
        let key = Shard::any_key(&ip_info, "", &ip.to_string());
        let (kv, _) = shard.store(&ip_info).get(&key).await?;
        if let Some(kv) = kv.filter(|kv| serde_json::from_slice::<Value>(&kv.value).ok().and_then(|v| net::parent_service(&v)) == Some((ns.to_owned(), name.to_owned()))) {
            out.push(Companion::Delete { key, expected: kv.mod_revision });
        }
    }
    for port in ports {
        let key = node_port_key(*port);
        let (kv, _) = shard.store(&svc_info).get(&key).await?;
        if let Some(kv) = kv.filter(|kv| net::node_port_holder(&kv.value) == Some((ns.to_owned(), name.to_owned()))) {
            out.push(Companion::Delete { key, expected: kv.mod_revision });
        }
    }
    Ok(out)
}

/// The companions of a plan for the Service `ns/name`: a create per take, then the releases.
pub(crate) fn companions(shard: &Shard, plan: &Plan, ns: &str, name: &str) -> Vec<Companion> {
    if plan.takes.is_empty() {
        return plan.releases.clone();
    }
    let ip_info = shard.builtin("networking.k8s.io", "ipaddresses");
    let mut out: Vec<Companion> = plan.takes.iter().map(|t| match t.value {
        Taken::Ip(ip) => {
            let mut obj = net::ip_address_object(&ip, ns, name);
            shardplane_apimachinery::strategy::prepare_for_create(&ip_info, &mut obj);
            Companion::Create { key: Shard::any_key(&ip_info, "", &ip.to_string()), value: stored_bytes(&ip_info, &obj) }
        }
        Taken::Port(p) => Companion::Create { key: node_port_key(p), value: net::node_port_record(ns, name) },
    }).collect();
    out.extend(plan.releases.iter().cloned());
    out
}

/// After a collision on take `index`: picks another value for a take picked here (listing what
/// is held once random picks keep colliding), or refuses one the client asked for.
pub(crate) async fn pick_again(shard: &Shard, plan: &mut Plan, index: usize, svc: &mut Value) -> Result<(), ApiError> {
    let take = plan.takes[index].clone();
    plan.collided.insert(take.value);
    if !take.dynamic {
        return Err(refused(&shard.service_network, svc, &take, Why::Taken));
    }
    let collisions = plan.collided.iter().filter(|v| matches!((v, take.value), (Taken::Ip(_), Taken::Ip(_)) | (Taken::Port(_), Taken::Port(_)))).count();
    let next = match take.value {
        Taken::Ip(_) if collisions < RANDOM_TRIES => net::dynamic_candidate(&plan.pool[0], net::random()).filter(|ip| !plan.collided.contains(&Taken::Ip(*ip))).map(Taken::Ip),
        Taken::Ip(_) => {
            let held = held_addresses(shard).await.map_err(storage_err)?;
            let taken: BTreeSet<IpAddr> = held.into_iter().chain(plan.collided.iter().filter_map(|v| if let Taken::Ip(ip) = v { Some(*ip) } else { None })).collect();
            Some(Taken::Ip(net::first_free(&plan.pool, &taken, net::random()).ok_or_else(|| ApiError::internal("failed to allocate a serviceIP: range is full"))?))
        }
        Taken::Port(_) => {
            let mut avoid = plan.collided.clone();
            avoid.extend(plan.takes.iter().map(|t| t.value));
            if collisions >= RANDOM_TRIES {
                avoid.extend(held_ports(shard).await.map_err(storage_err)?.into_iter().map(Taken::Port));
            }
            Some(Taken::Port(free_port(&shard.service_network, &avoid).ok_or_else(|| ApiError::internal("failed to allocate a nodePort: range is full"))?))
        }
    };
    // A random pick that repeated a collision is simply tried again next round.
    let value = next.unwrap_or(take.value);
    fill(svc, &take.field, value);
    plan.takes[index].value = value;
    Ok(())
}

/// Every address an IPAddress object holds now.
async fn held_addresses(shard: &Shard) -> Result<Vec<IpAddr>, StorageError> {
    let info = shard.builtin("networking.k8s.io", "ipaddresses");
    let (start, end) = shardplane_keyspace::etcd_layout::range_keys(info.storage_group(), &info.plural, shardplane_keyspace::HashRange::FULL);
    let (kvs, _) = shard.store(&info).list_range(&start, &end, 0).await?;
    Ok(kvs.iter().filter_map(|kv| serde_json::from_slice::<Value>(&kv.value).ok()).filter_map(|v| meta::meta_str(&v, "name").parse().ok()).collect())
}

/// Every node port held now.
async fn held_ports(shard: &Shard) -> Result<BTreeSet<u16>, StorageError> {
    let prefix = shardplane_keyspace::etcd_layout::NODE_PORTS_PREFIX.as_bytes();
    let keys = shard.store(&shard.builtin("", "services")).list_keys(prefix, &shardplane_keyspace::etcd_layout::prefix_end(prefix)).await?;
    Ok(keys.iter().filter_map(|k| std::str::from_utf8(&k[prefix.len()..]).ok()?.parse().ok()).collect())
}

/// Whether a Service write can commit its companions in its own transaction: the Service, its
/// IPAddresses and node-port keys on one store (RFC 0008's contract moves neither by default).
pub(crate) fn one_store(shard: &Shard) -> bool {
    !shard.stores.is_overridden("", "services") && !shard.stores.is_overridden("networking.k8s.io", "ipaddresses")
}

/// The store a companion of a Service write is on (with the Service's, or the IPAddresses').
fn store_of<'a>(shard: &'a Shard, c: &Companion) -> &'a shardplane_storage::Storage {
    if c.key().starts_with(shardplane_keyspace::etcd_layout::NODE_PORTS_PREFIX.as_bytes()) {
        shard.store(&shard.builtin("", "services"))
    } else {
        shard.store(&shard.builtin("networking.k8s.io", "ipaddresses"))
    }
}

/// With the Service and its addresses on two stores: creates the records `companions` take, one
/// by one, before the Service is written (a collision is `CompanionConflict` at its index, and
/// the records created so far are deleted again).
pub(crate) async fn take_first(shard: &Shard, companions: &[Companion]) -> Result<(), StorageError> {
    let mut created = Vec::new();
    for (index, c) in companions.iter().enumerate() {
        if let Companion::Create { key, value } = c {
            match store_of(shard, c).create(key, value.clone()).await {
                Ok(_) => created.push(c),
                Err(e) => {
                    for c in created {
                        let (kv, _) = store_of(shard, c).get(c.key()).await.unwrap_or((None, 0));
                        if let Some(kv) = kv {
                            let _ = store_of(shard, c).delete(c.key(), kv.mod_revision).await;
                        }
                    }
                    return Err(if matches!(e, StorageError::AlreadyExists) { StorageError::CompanionConflict { index } } else { e });
                }
            }
        }
    }
    Ok(())
}

/// With the Service and its addresses on two stores: deletes the records `companions` give back,
/// after the Service is written (a crash before leaves a leak the repair loop reclaims, never a
/// shared address).
pub(crate) async fn release_after(shard: &Shard, companions: &[Companion]) {
    for c in companions {
        if let Companion::Delete { key, expected } = c {
            let _ = store_of(shard, c).delete(key, *expected).await;
        }
    }
}

/// What the Service `old` holds, given back: a delete of each record that still names it.
pub(crate) async fn releases_of_removed(shard: &Shard, info: &ResourceInfo, old: &Value) -> Result<Vec<Companion>, StorageError> {
    if !is_services(info) {
        return Ok(Vec::new());
    }
    let held = net::held(old);
    let ips: Vec<IpAddr> = held.ips.into_iter().collect();
    let ports: Vec<u16> = held.node_ports.into_iter().collect();
    releases_of(shard, meta::meta_str(old, "namespace"), meta::meta_str(old, "name"), &ips, &ports).await
}

/// How many of a plan's companions are takes (a conflict on one of them is a collision to pick
/// again after; past them, a release raced).
pub(crate) fn takes(plan: &Plan) -> usize {
    plan.takes.len()
}

/// Refuses, for a dry run, a value the client asked for that is held already (a dry run
/// writes nothing, so no transaction finds it).
pub(crate) async fn check_dry_run(shard: &Shard, plan: &Plan, svc: &Value) -> Result<(), ApiError> {
    let ip_info = shard.builtin("networking.k8s.io", "ipaddresses");
    for take in plan.takes.iter().filter(|t| !t.dynamic) {
        let (store, key) = match take.value {
            Taken::Ip(ip) => (shard.store(&ip_info), Shard::any_key(&ip_info, "", &ip.to_string())),
            Taken::Port(p) => (shard.store(&shard.builtin("", "services")), node_port_key(p)),
        };
        if store.get(&key).await.map_err(storage_err)?.0.is_some() {
            return Err(refused(&shard.service_network, svc, take, Why::Taken));
        }
    }
    Ok(())
}

/// The `default/kubernetes` Service's address and its IPAddress, created with it at start.
pub(crate) fn kubernetes_service_companions(shard: &Shard) -> Vec<Companion> {
    if !one_store(shard) {
        // The repair loop creates it on the other store.
        return Vec::new();
    }
    let ip = shard.service_network.kubernetes_service_ip();
    let plan = Plan { takes: vec![Take { value: Taken::Ip(ip), dynamic: false, field: Field::ClusterIp }], ..Plan::default() };
    companions(shard, &plan, "default", "kubernetes")
}
