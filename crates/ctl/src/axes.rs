//! The axis diagnosis (RFC 0015, "Which axis saturates"): from two readings of the shards'
//! member keys, the write rate by category and by resource, the cache bytes, objects and
//! watchers by resource, and the axis the cluster is loaded along, with the numbers that say
//! so and the seam that helps. Pure: the readings come from etcd (`shardctl axes`).

use serde::Serialize;
use shardplane_storage::members::{ShardMember, WriteCounts};
use std::collections::BTreeMap;

/// Below this many writes a second, writes say nothing about an axis.
pub const MIN_WRITES_PER_SECOND: f64 = 0.5;
/// Node-bound: node leases and node status are at least this share of writes.
pub const NODE_SHARE: f64 = 0.5;
/// Churn-bound: creates and deletes are at least this share of writes...
pub const CHURN_SHARE: f64 = 0.5;
/// ...and the three kinds that churn most carry at least this share of them.
pub const CHURN_TOP3: f64 = 0.8;
/// State-bound: at least this many kinds each hold at least 1% of the cache bytes...
pub const STATE_KINDS: usize = 8;
/// ...the largest holds less than this share...
pub const STATE_LARGEST: f64 = 0.5;
/// ...the objects are idle: fewer writes a second than this share of them...
pub const STATE_IDLE: f64 = 0.01;
/// ...and there are at least this many (a cluster smaller than this is not loaded at all).
pub const STATE_OBJECTS: u64 = 1000;

/// Which way the cluster is loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Axis {
    NodeBound,
    ChurnBound,
    StateBound,
    /// No rule holds.
    None,
}

/// One resource's row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResourceRow {
    pub resource: String,
    pub writes_per_second: f64,
    pub creates_deletes_per_second: f64,
    pub objects: u64,
    pub bytes: u64,
    pub watchers: u64,
}

/// The diagnosis.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnosis {
    /// Seconds the rates are over (the longest shard's window).
    pub window_seconds: f64,
    /// Writes a second by category, every category listed.
    pub writes_per_second: BTreeMap<String, f64>,
    pub total_writes_per_second: f64,
    /// By resource, the most cache bytes first.
    pub resources: Vec<ResourceRow>,
    pub axis: Axis,
    /// The numbers that decided it.
    pub because: String,
    /// The seam that helps.
    pub seam: String,
}

fn rate(before: Option<&WriteCounts>, after: &WriteCounts, seconds: f64) -> (f64, f64) {
    let b = before.copied().unwrap_or_default();
    let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / seconds;
    (d(after.total(), b.total()), d(after.creates, b.creates) + d(after.deletes, b.deletes))
}

/// The diagnosis from the shards' keys read at two moments. A shard not in `before` (or
/// restarted since) counts from its start.
pub fn diagnose(before: &[ShardMember], after: &[ShardMember]) -> Diagnosis {
    let mut by_cat: BTreeMap<String, f64> = shardplane_storage::members::WRITE_CATEGORIES.iter().map(|c| ((*c).to_owned(), 0.0)).collect();
    let mut rows: BTreeMap<String, ResourceRow> = BTreeMap::new();
    let mut window: f64 = 0.0;
    for a in after {
        let b = before.iter().find(|b| b.id == a.id && b.load.uptime_ms <= a.load.uptime_ms);
        let since = b.map_or(0, |b| b.load.uptime_ms);
        let seconds = ((a.load.uptime_ms - since) as f64 / 1000.0).max(0.001);
        window = window.max(seconds);
        for (cat, c) in &a.load.writes {
            *by_cat.entry(cat.clone()).or_default() += rate(b.and_then(|b| b.load.writes.get(cat)), c, seconds).0;
        }
        for (res, c) in &a.load.writes_by_resource {
            let (w, cd) = rate(b.and_then(|b| b.load.writes_by_resource.get(res)), c, seconds);
            let row = rows.entry(res.clone()).or_insert_with(|| ResourceRow { resource: res.clone(), writes_per_second: 0.0, creates_deletes_per_second: 0.0, objects: 0, bytes: 0, watchers: 0 });
            row.writes_per_second += w;
            row.creates_deletes_per_second += cd;
        }
        for (res, l) in &a.load.resources {
            let row = rows.entry(res.clone()).or_insert_with(|| ResourceRow { resource: res.clone(), writes_per_second: 0.0, creates_deletes_per_second: 0.0, objects: 0, bytes: 0, watchers: 0 });
            row.objects += l.objects;
            row.bytes += l.bytes;
            row.watchers += l.watchers;
        }
    }
    let mut resources: Vec<ResourceRow> = rows.into_values().collect();
    resources.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.resource.cmp(&b.resource)));
    let total: f64 = by_cat.values().sum();
    let (axis, because, seam) = decide(&by_cat, total, &resources);
    Diagnosis { window_seconds: window, writes_per_second: by_cat, total_writes_per_second: total, resources, axis, because, seam }
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// The rules, in order (RFC 0015): idle state spread over many kinds, then node liveness, then
/// churn.
fn decide(by_cat: &BTreeMap<String, f64>, total: f64, resources: &[ResourceRow]) -> (Axis, String, String) {
    let get = |c: &str| by_cat.get(c).copied().unwrap_or(0.0);
    let bytes: u64 = resources.iter().map(|r| r.bytes).sum();
    let objects: u64 = resources.iter().map(|r| r.objects).sum();
    let spread = resources.iter().filter(|r| bytes > 0 && r.bytes as f64 / bytes as f64 >= 0.01).count();
    if let Some(l) = resources.first()
        && objects >= STATE_OBJECTS
        && spread >= STATE_KINDS
        && (l.bytes as f64 / bytes as f64) < STATE_LARGEST
        && total < STATE_IDLE * objects as f64
    {
        return (
            Axis::StateBound,
            format!(
                "cache bytes are spread over {spread} kinds holding 1% or more each (the largest, {}, holds {}): {:.1} MiB in {objects} objects, idle ({total:.1} writes/s, under {} of the objects a second)",
                l.resource,
                pct(l.bytes as f64 / bytes as f64),
                bytes as f64 / 1048576.0,
                pct(STATE_IDLE)
            ),
            "cache residency: each shard caches only its hash ranges, so more shards (K) divide the cache (RFC 0002, RFC 0005)".to_owned(),
        );
    }
    let node = get("node-leases") + get("node-status");
    if total >= MIN_WRITES_PER_SECOND && node / total >= NODE_SHARE {
        return (
            Axis::NodeBound,
            format!("node leases and node status are {} of writes ({node:.1}/s of {total:.1}/s; leases {:.1}/s)", pct(node / total), get("node-leases")),
            "the node-liveness seam: Leases and Events on the liveness tier, a store that commits in groups (shard-router --store-only --store-commit-interval-ms, named by a storage contract; RFC 0015)".to_owned(),
        );
    }
    let churn: f64 = resources.iter().map(|r| r.creates_deletes_per_second).sum();
    let mut churning: Vec<&ResourceRow> = resources.iter().filter(|r| r.creates_deletes_per_second > 0.0).collect();
    churning.sort_by(|a, b| b.creates_deletes_per_second.total_cmp(&a.creates_deletes_per_second));
    let top3: f64 = churning.iter().take(3).map(|r| r.creates_deletes_per_second).sum();
    if total >= MIN_WRITES_PER_SECOND && churn / total >= CHURN_SHARE && top3 / churn >= CHURN_TOP3 {
        let names: Vec<&str> = churning.iter().take(3).map(|r| r.resource.as_str()).collect();
        return (
            Axis::ChurnBound,
            format!("creates and deletes are {} of writes ({churn:.1}/s of {total:.1}/s), {} of them on {}", pct(churn / total), pct(top3 / churn), names.join(", ")),
            "the sharding axis: more shards each take 1/K of the churn (shard-router --shards K, shardctl add); a kind that churns alone can go on a store of its own (the storage contract, RFC 0008)".to_owned(),
        );
    }
    (Axis::None, format!("no rule holds: {total:.1} writes/s, node {node:.1}/s, creates and deletes {churn:.1}/s, {objects} objects, cache spread over {spread} kinds"), "none needed yet".to_owned())
}

/// The diagnosis as `shardctl axes` prints it.
pub fn render(d: &Diagnosis) -> String {
    let mut out = format!("writes by category over {:.1} s:\n", d.window_seconds);
    for (cat, r) in &d.writes_per_second {
        let share = if d.total_writes_per_second > 0.0 { r / d.total_writes_per_second } else { 0.0 };
        out.push_str(&format!("  {cat:<14} {r:>10.1}/s {:>5}\n", pct(share)));
    }
    out.push_str(&format!("  {:<14} {:>10.1}/s\n\n", "total", d.total_writes_per_second));
    // Resources with nothing cached, watched or written are left out.
    let shown: Vec<&ResourceRow> = d.resources.iter().filter(|r| r.objects > 0 || r.watchers > 0 || r.writes_per_second > 0.0).collect();
    let width = shown.iter().map(|r| r.resource.len()).max().unwrap_or(8).max(8);
    out.push_str(&format!("{:<width$} {:>10} {:>12} {:>9} {:>10} {:>9}\n", "RESOURCE", "OBJECTS", "CACHE BYTES", "WATCHERS", "WRITES/S", "C+D/S"));
    for r in shown {
        out.push_str(&format!("{:<width$} {:>10} {:>12} {:>9} {:>10.1} {:>9.1}\n", r.resource, r.objects, r.bytes, r.watchers, r.writes_per_second, r.creates_deletes_per_second));
    }
    // The name `-o json` gives it.
    let axis = serde_json::to_value(d.axis).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    out.push_str(&format!("\naxis: {axis}: {}\nseam that helps: {}\n", d.because, d.seam));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardplane_storage::members::{ResourceLoad, ShardLoad};

    fn member(id: &str, uptime_ms: u64, writes: &[(&str, &str, WriteCounts)], resources: &[(&str, u64, u64)]) -> ShardMember {
        let mut load = ShardLoad { uptime_ms, ..ShardLoad::default() };
        for (cat, res, c) in writes {
            let add = |to: &mut WriteCounts| {
                to.creates += c.creates;
                to.updates += c.updates;
                to.deletes += c.deletes;
            };
            add(load.writes.entry((*cat).to_owned()).or_default());
            add(load.writes_by_resource.entry((*res).to_owned()).or_default());
        }
        for (res, objects, bytes) in resources {
            load.resources.insert((*res).to_owned(), ResourceLoad { objects: *objects, bytes: *bytes, watchers: 1 });
        }
        ShardMember { id: id.into(), url: String::new(), capacity_bytes: 0, loaded: vec![], load }
    }

    fn counts(creates: u64, updates: u64, deletes: u64) -> WriteCounts {
        WriteCounts { creates, updates, deletes }
    }

    #[test]
    fn renewals_dominating_writes_is_node_bound() {
        let before = [member("a", 1000, &[("node-leases", "leases.coordination.k8s.io", counts(0, 100, 0))], &[])];
        let after = [member("a", 11_000, &[("node-leases", "leases.coordination.k8s.io", counts(0, 1100, 0)), ("pods", "pods", counts(50, 50, 0))], &[("pods", 50, 50_000)])];
        let d = diagnose(&before, &after);
        assert_eq!(d.axis, Axis::NodeBound, "{}", d.because);
        assert_eq!(d.window_seconds, 10.0);
        assert_eq!(d.writes_per_second["node-leases"], 100.0);
        assert_eq!(d.total_writes_per_second, 110.0);
        assert!(d.because.contains("91%"), "{}", d.because);
        assert!(d.seam.contains("liveness"));
    }

    #[test]
    fn creates_and_deletes_of_a_few_kinds_is_churn_bound_summed_over_shards() {
        let after = [
            member("a", 10_000, &[("custom", "agentsessions.agents.example.com", counts(400, 100, 400))], &[]),
            member("b", 10_000, &[("custom", "agentsessions.agents.example.com", counts(400, 100, 400)), ("node-leases", "leases.coordination.k8s.io", counts(0, 200, 0))], &[]),
        ];
        let d = diagnose(&[], &after);
        assert_eq!(d.axis, Axis::ChurnBound, "{}", d.because);
        assert_eq!(d.resources.iter().find(|r| r.resource.starts_with("agentsessions")).unwrap().creates_deletes_per_second, 160.0);
        assert!(d.because.contains("agentsessions.agents.example.com"), "{}", d.because);
    }

    #[test]
    fn bytes_spread_over_many_kinds_with_few_writes_is_state_bound() {
        let kinds: Vec<String> = (0..20).map(|i| format!("widgets{i}.example.com")).collect();
        let resources: Vec<(&str, u64, u64)> = kinds.iter().map(|k| (k.as_str(), 100, 100_000)).collect();
        // A few node renewals a second do not make 2,000 idle objects node-bound.
        let after = [member("a", 10_000, &[("custom", "widgets0.example.com", counts(0, 1, 0)), ("node-leases", "leases.coordination.k8s.io", counts(0, 50, 0))], &resources)];
        let d = diagnose(&[], &after);
        assert_eq!(d.axis, Axis::StateBound, "{}", d.because);
        // One kind holding most of the cache, busy objects, or a small cluster, is not.
        let lopsided = [member("a", 10_000, &[], &[("pods", 1000, 10_000_000), ("configmaps", 10, 10_000)])];
        assert_eq!(diagnose(&[], &lopsided).axis, Axis::None);
        let busy = [member("a", 10_000, &[("custom", "widgets0.example.com", counts(0, 1000, 0))], &resources)];
        assert_ne!(diagnose(&[], &busy).axis, Axis::StateBound);
        let small: Vec<(&str, u64, u64)> = kinds.iter().map(|k| (k.as_str(), 10, 100_000)).collect();
        assert_eq!(diagnose(&[], &[member("a", 10_000, &[], &small)]).axis, Axis::None);
    }

    #[test]
    fn a_restarted_shard_counts_from_its_start_and_rates_never_go_negative() {
        let before = [member("a", 50_000, &[("pods", "pods", counts(1000, 0, 1000))], &[])];
        let after = [member("a", 2_000, &[("pods", "pods", counts(10, 0, 10))], &[])];
        let d = diagnose(&before, &after);
        assert_eq!(d.window_seconds, 2.0);
        assert_eq!(d.writes_per_second["pods"], 10.0);
        assert!(d.writes_per_second.values().all(|r| *r >= 0.0));
    }
}
