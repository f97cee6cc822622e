//! What the shard writes and holds, for the axis diagnosis (RFC 0015): every committed write
//! counted by category (node leases, node status, events, pods, other built-ins, custom
//! resources), by resource and by operation, as `shardplane_writes_total` and in the shard's
//! member key, with what its caches hold per resource and the watchers on each. It never
//! decides anything: `shardctl axes` reads the member keys and names the axis.

use crate::shard::Shard;
use prometheus::IntCounterVec;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_storage::members::{ResourceLoad, ShardLoad, WriteCounts};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

/// A write's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Create,
    Update,
    Delete,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }
}

/// The category of a write of `info` in `namespace` (one of
/// [`WRITE_CATEGORIES`](shardplane_storage::members::WRITE_CATEGORIES)).
pub fn category(info: &ResourceInfo, namespace: &str) -> &'static str {
    match (info.storage_group(), info.plural.as_str()) {
        ("coordination.k8s.io", "leases") if namespace == "kube-node-lease" => "node-leases",
        ("", "nodes") => "node-status",
        ("", "events") => "events",
        ("", "pods") => "pods",
        _ if info.custom.is_some() => "custom",
        _ => "other-builtin",
    }
}

/// `plural` or `plural.group`, as the load names a resource.
pub fn resource_name(info: &ResourceInfo) -> String {
    let group = info.storage_group();
    if group.is_empty() { info.plural.to_string() } else { format!("{}.{group}", info.plural) }
}

/// The shard's write counters since it started.
pub struct WriteLoad {
    started: Instant,
    /// (category, resource) → counts.
    counts: Mutex<BTreeMap<(&'static str, String), WriteCounts>>,
    /// `shardplane_writes_total{category,resource,operation}`.
    metric: IntCounterVec,
}

impl WriteLoad {
    /// Counters registered in `registry`.
    pub fn new(registry: &prometheus::Registry) -> Self {
        let metric = IntCounterVec::new(prometheus::Opts::new("shardplane_writes_total", "Writes this shard committed to its stores, by category (RFC 0015), resource and operation."), &["category", "resource", "operation"]).expect("metric");
        let _ = registry.register(Box::new(metric.clone()));
        Self { started: Instant::now(), counts: Mutex::new(BTreeMap::new()), metric }
    }

    /// Counts one committed write of `info` in `namespace`.
    pub fn record(&self, info: &ResourceInfo, namespace: &str, op: Op) {
        let (cat, resource) = (category(info, namespace), resource_name(info));
        self.metric.with_label_values(&[cat, &resource, op.as_str()]).inc();
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let c = counts.entry((cat, resource)).or_default();
        match op {
            Op::Create => c.creates += 1,
            Op::Update => c.updates += 1,
            Op::Delete => c.deletes += 1,
        }
    }
}

/// What `shard` has written and holds now.
pub fn snapshot(shard: &Shard) -> ShardLoad {
    let wl = &shard.write_load;
    let mut load = ShardLoad { uptime_ms: wl.started.elapsed().as_millis() as u64, ..ShardLoad::default() };
    for ((cat, resource), c) in wl.counts.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        add(load.writes.entry((*cat).to_owned()).or_default(), c);
        add(load.writes_by_resource.entry(resource.clone()).or_default(), c);
    }
    for served in shard.all_served() {
        let st = served.cache.stats();
        let r = load.resources.entry(resource_name(&served.info)).or_default();
        *r = ResourceLoad { objects: r.objects + st.objects as u64, bytes: r.bytes + st.bytes as u64, watchers: r.watchers + st.watchers as u64 };
    }
    load
}

fn add(to: &mut WriteCounts, c: &WriteCounts) {
    to.creates += c.creates;
    to.updates += c.updates;
    to.deletes += c.deletes;
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardplane_apimachinery::resources::{builtin_resources, find};

    #[test]
    fn writes_fall_in_the_categories_the_diagnosis_names() {
        let all = builtin_resources();
        let info = |g: &str, v: &str, p: &str| find(&all, g, v, p).unwrap().clone();
        assert_eq!(category(&info("coordination.k8s.io", "v1", "leases"), "kube-node-lease"), "node-leases");
        assert_eq!(category(&info("coordination.k8s.io", "v1", "leases"), "kube-system"), "other-builtin");
        assert_eq!(category(&info("", "v1", "nodes"), ""), "node-status");
        assert_eq!(category(&info("", "v1", "events"), "default"), "events");
        assert_eq!(category(&info("events.k8s.io", "v1", "events"), "default"), "events");
        assert_eq!(category(&info("", "v1", "pods"), "default"), "pods");
        assert_eq!(category(&info("", "v1", "configmaps"), "default"), "other-builtin");
        for c in ["node-leases", "node-status", "events", "pods", "other-builtin"] {
            assert!(shardplane_storage::members::WRITE_CATEGORIES.contains(&c));
        }
    }
}
