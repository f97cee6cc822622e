//! The Service address repair loop (RFC 0014), upstream's IP and node-port repair controllers
//! in one: every shard, for the Services whose keys are in its ranges, creates an address record
//! a Service holds without one (a Service stored before allocation existed, or a record deleted
//! by hand) and deletes a record whose Service no longer holds it (a Service and its addresses
//! on two stores, with a crash between their writes). Everything it reads is read at one
//! revision when the Service and its records share a store, and every delete is a
//! compare-and-swap at that revision, so a record taken by a write after the read is never
//! released. With two stores a record is released only when a second pass finds it orphaned at
//! the same revision (a create under way has finished by then).

use super::{node_port_key, one_store};
use crate::shard::Shard;
use serde_json::Value;
use shardplane_apimachinery::meta;
use shardplane_apimachinery::service_network as net;
use shardplane_keyspace::etcd_layout::{prefix_end, range_keys, NODE_PORTS_PREFIX};
use shardplane_keyspace::{HashRange, ObjectKey};
use shardplane_storage::{Kv, StorageError};
use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// How often a shard started from the command line repairs.
pub const PERIOD: Duration = Duration::from_secs(10);

/// What one pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Records created for Services that held an address without one.
    pub created: usize,
    /// Records of addresses no Service holds, deleted.
    pub released: usize,
    /// Addresses two Services hold (upstream reports them as events; nothing is changed).
    pub conflicts: usize,
}

/// Repairs every `period` until the shard stops.
pub async fn run(shard: Arc<Shard>, period: Duration) {
    let mut suspects = HashSet::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shard.shutdown.cancelled() => return,
        }
        match pass(&shard, &mut suspects).await {
            Ok(r) if r != Report::default() => tracing::info!(shard = %shard.id, created = r.created, released = r.released, conflicts = r.conflicts, "service addresses repaired"),
            Ok(_) => {}
            Err(e) => tracing::warn!(shard = %shard.id, error = %e, "service address repair failed; next pass retries"),
        }
    }
}

/// A record read: its key and entry, and the Service it names.
struct Record {
    kv: Kv,
    holder: (String, String),
}

/// One pass. `suspects` carries the orphans seen by the previous pass (used with two stores).
pub async fn pass(shard: &Shard, suspects: &mut HashSet<(Vec<u8>, u64)>) -> Result<Report, StorageError> {
    let svc_info = shard.builtin("", "services");
    let ip_info = shard.builtin("networking.k8s.io", "ipaddresses");
    let (svc_store, ip_store) = (shard.store(&svc_info), shard.store(&ip_info));
    let together = one_store(shard);
    let (start, end) = range_keys(ip_info.storage_group(), &ip_info.plural, HashRange::FULL);
    let (ip_kvs, rev) = ip_store.list_range(&start, &end, 0).await?;
    let at = if together { rev } else { 0 };
    // This shard's Services only: the ranges it holds, then those the map gives it.
    let mut svc_kvs = Vec::new();
    for range in shard.ranges().ranges() {
        let (start, end) = range_keys(svc_info.storage_group(), &svc_info.plural, *range);
        svc_kvs.extend(svc_store.list_range(&start, &end, at).await?.0);
    }
    let (port_kvs, _) = svc_store.list_range(NODE_PORTS_PREFIX.as_bytes(), &prefix_end(NODE_PORTS_PREFIX.as_bytes()), at).await?;

    let mine = |ns: &str, name: &str| shard.owns(ObjectKey::new("", "services", ns, name).hash());
    let services: BTreeMap<(String, String), Value> = svc_kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice::<Value>(&kv.value).ok())
        .map(|v| ((meta::meta_str(&v, "namespace").to_owned(), meta::meta_str(&v, "name").to_owned()), v))
        .filter(|((ns, name), _)| mine(ns, name))
        .collect();
    let mut addresses: BTreeMap<IpAddr, Record> = BTreeMap::new();
    for kv in ip_kvs {
        let Ok(v) = serde_json::from_slice::<Value>(&kv.value) else { continue };
        let (Ok(ip), Some(holder)) = (meta::meta_str(&v, "name").parse::<IpAddr>(), net::parent_service(&v).filter(|_| net::managed(&v))) else { continue };
        addresses.insert(ip, Record { kv, holder });
    }
    let mut ports: BTreeMap<u16, Record> = BTreeMap::new();
    for kv in port_kvs {
        let port = std::str::from_utf8(&kv.key[NODE_PORTS_PREFIX.len()..]).ok().and_then(|p| p.parse().ok());
        if let (Some(port), Some(holder)) = (port, net::node_port_holder(&kv.value)) {
            ports.insert(port, Record { kv, holder });
        }
    }

    let mut report = Report::default();
    // Records a Service of this shard holds without.
    for ((ns, name), svc) in &services {
        let held = net::held(svc);
        for ip in &held.ips {
            match addresses.get(ip) {
                Some(r) if r.holder != (ns.clone(), name.clone()) => {
                    report.conflicts += 1;
                    tracing::warn!(service = %format!("{ns}/{name}"), address = %ip, holder = %format!("{}/{}", r.holder.0, r.holder.1), "cluster IP already allocated to another Service");
                }
                Some(_) => {}
                None => {
                    let mut obj = net::ip_address_object(ip, ns, name);
                    shardplane_apimachinery::strategy::prepare_for_create(&ip_info, &mut obj);
                    match ip_store.create(&Shard::any_key(&ip_info, "", &ip.to_string()), crate::write::stored_bytes(&ip_info, &obj)).await {
                        Ok(_) => report.created += 1,
                        Err(StorageError::AlreadyExists) => report.conflicts += 1,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        for port in &held.node_ports {
            match ports.get(port) {
                Some(r) if r.holder != (ns.clone(), name.clone()) => {
                    report.conflicts += 1;
                    tracing::warn!(service = %format!("{ns}/{name}"), node_port = port, "node port already allocated to another Service");
                }
                Some(_) => {}
                None => match svc_store.create(&node_port_key(*port), net::node_port_record(ns, name)).await {
                    Ok(_) => report.created += 1,
                    Err(StorageError::AlreadyExists) => report.conflicts += 1,
                    Err(e) => return Err(e),
                },
            }
        }
    }
    // Records whose Service (one of this shard's) does not hold them.
    let mut orphans: Vec<(&Kv, bool)> = Vec::new();
    for (ip, r) in &addresses {
        if mine(&r.holder.0, &r.holder.1) && !services.get(&r.holder).is_some_and(|s| net::held(s).ips.contains(ip)) {
            orphans.push((&r.kv, true));
        }
    }
    for (port, r) in &ports {
        if mine(&r.holder.0, &r.holder.1) && !services.get(&r.holder).is_some_and(|s| net::held(s).node_ports.contains(port)) {
            orphans.push((&r.kv, false));
        }
    }
    let mut seen = HashSet::new();
    for (kv, is_ip) in orphans {
        let id = (kv.key.clone(), kv.mod_revision);
        if !together && !suspects.contains(&id) {
            seen.insert(id);
            continue;
        }
        let store = if is_ip { ip_store } else { svc_store };
        match store.delete(&kv.key, kv.mod_revision).await {
            Ok(_) => report.released += 1,
            // Taken or released by a write since the read: nothing to repair.
            Err(StorageError::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    *suspects = seen;
    Ok(report)
}
