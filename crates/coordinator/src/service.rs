//! The coordinator as a running service (RFC 0006): at most one leader, elected on an etcd
//! lease; the leader applies [`rebalance::step`] to the stored map and the live members and
//! writes the result by compare-and-swap, guarded by its leadership. It runs inside each router
//! by default (one of them leads) and as the `shardplane-coordinator` binary in production.
//!
//! It reads etcd every `period` rather than following watches: two small reads a period, and a
//! dead shard's ranges are reassigned within its lease TTL plus one period.

use crate::rebalance::{self, Config};
use prometheus::{Histogram, HistogramOpts, IntCounter, IntGauge, IntGaugeVec, Opts, Registry};
use shardplane_keyspace::HashRange;
use shardplane_storage::members::LEADER_KEY;
use shardplane_storage::{Storage, StorageError};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// What the leading coordinator counts (`/metrics` of the process it runs in).
#[derive(Debug)]
pub struct CoordinatorMetrics {
    /// `shardplane_range_moves_started_total`
    pub started: IntCounter,
    /// `shardplane_range_moves_completed_total`
    pub completed: IntCounter,
    /// `shardplane_range_moves_failed_total`: cancelled before the flip (the target died or
    /// was drained, or the dead owner came back).
    pub failed: IntCounter,
    /// `shardplane_range_move_duration_seconds`: from the request to the end of the drain, as
    /// seen by the leader.
    pub duration: Histogram,
    /// `shardplane_shard_objects{shard}` and `shardplane_shard_cache_bytes{shard}`, as each live
    /// shard reports them.
    pub objects: IntGaugeVec,
    pub cache_bytes: IntGaugeVec,
    /// `shardplane_range_map_epoch`
    pub epoch: IntGauge,
}

impl CoordinatorMetrics {
    /// The metrics, registered in `registry`.
    pub fn new(registry: &Registry) -> Arc<Self> {
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("metric");
            registry.register(Box::new(c.clone())).expect("register");
            c
        };
        let gauges = |name: &str, help: &str| {
            let g = IntGaugeVec::new(Opts::new(name, help), &["shard"]).expect("metric");
            registry.register(Box::new(g.clone())).expect("register");
            g
        };
        let duration = Histogram::with_opts(HistogramOpts::new("shardplane_range_move_duration_seconds", "Time from a range move's request to the end of its drain.").buckets(vec![0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0])).expect("metric");
        registry.register(Box::new(duration.clone())).expect("register");
        let epoch = IntGauge::new("shardplane_range_map_epoch", "The range map's epoch.").expect("metric");
        registry.register(Box::new(epoch.clone())).expect("register");
        Arc::new(Self {
            started: counter("shardplane_range_moves_started_total", "Range moves requested."),
            completed: counter("shardplane_range_moves_completed_total", "Range moves whose drain ended."),
            failed: counter("shardplane_range_moves_failed_total", "Range moves cancelled before their flip."),
            duration,
            objects: gauges("shardplane_shard_objects", "Objects a live shard caches."),
            cache_bytes: gauges("shardplane_shard_cache_bytes", "Serialized bytes a live shard caches."),
            epoch,
        })
    }
}

/// How the service runs.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// This coordinator's name (the leader key holds it).
    pub id: String,
    /// The leadership lease's TTL.
    pub ttl: Duration,
    /// How often the leader looks at the map and the members.
    pub period: Duration,
    pub plan: Config,
    pub metrics: Option<Arc<CoordinatorMetrics>>,
}

/// Runs until `stop`: campaigns, and while leader, coordinates.
pub async fn run(storage: Storage, cfg: ServiceConfig, stop: CancellationToken) {
    while !stop.is_cancelled() {
        match lead(&storage, &cfg, &stop).await {
            Ok(()) => {}
            Err(e) => tracing::warn!(coordinator = %cfg.id, error = %e, "coordinator lost etcd or its leadership; campaigning again"),
        }
        tokio::select! {
            _ = tokio::time::sleep(cfg.period) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// One campaign: Ok(()) when another coordinator leads (try again later) or on stop.
async fn lead(storage: &Storage, cfg: &ServiceConfig, stop: &CancellationToken) -> Result<(), StorageError> {
    let lease = storage.grant_lease(cfg.ttl).await?;
    if !storage.create_on_lease(LEADER_KEY, cfg.id.clone().into_bytes(), lease).await? {
        let _ = storage.revoke_lease(lease).await;
        return Ok(());
    }
    tracing::info!(coordinator = %cfg.id, "leading");
    let lost = CancellationToken::new();
    let alive = {
        let (storage, lost, stop, ttl) = (storage.clone(), lost.clone(), stop.clone(), cfg.ttl);
        tokio::spawn(async move {
            if let Err(e) = storage.keep_alive(lease, ttl, &stop).await {
                tracing::warn!(error = %e, "coordinator leadership lease lost");
            }
            lost.cancel();
        })
    };
    let mut started: HashMap<HashRange, Instant> = HashMap::new();
    let result = async {
        loop {
            if let Err(e) = coordinate_once(storage, cfg, &mut started).await {
                match e {
                    // Someone else wrote the map meanwhile (an operator, a router): read again.
                    StorageError::Conflict { .. } | StorageError::AlreadyExists => {}
                    e => return Err(e),
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(cfg.period) => {}
                _ = lost.cancelled() => return Ok(()),
            }
        }
    }
    .await;
    alive.abort();
    let _ = storage.revoke_lease(lease).await;
    result
}

/// One look: if the map calls for a change, write it. `started` remembers when this leader
/// first saw each move, for its duration.
async fn coordinate_once(storage: &Storage, cfg: &ServiceConfig, started: &mut HashMap<HashRange, Instant>) -> Result<(), StorageError> {
    let Some(current) = storage.load_range_map().await? else { return Ok(()) };
    let members = storage.members().await?;
    if let Some(m) = &cfg.metrics {
        m.epoch.set(current.map.epoch as i64);
        m.objects.reset();
        m.cache_bytes.reset();
        for s in &members.shards {
            m.objects.with_label_values(&[&s.id]).set(s.loaded.iter().map(|l| l.objects).sum::<u64>() as i64);
            m.cache_bytes.with_label_values(&[&s.id]).set(s.loaded.iter().map(|l| l.cache_bytes).sum::<u64>() as i64);
        }
    }
    for m in &current.map.moves {
        if let std::collections::hash_map::Entry::Vacant(e) = started.entry(m.range) {
            // A move this leader had not seen (asked for by an operator, or by a leader before it).
            e.insert(Instant::now());
            if let Some(metrics) = &cfg.metrics {
                metrics.started.inc();
            }
        }
    }
    if let Some(next) = rebalance::step(&current.map, &members, &cfg.plan) {
        if let Err(e) = rebalance::check(&next) {
            // A bug, not a state of the world: never write it.
            tracing::error!(error = %e, "the coordinator computed an invalid map; not writing it");
            return Ok(());
        }
        storage.store_range_map_as_leader(&next, Some(current.mod_revision), LEADER_KEY, &cfg.id).await?;
        tracing::info!(epoch = next.epoch, moves = next.moves.len(), "range map updated");
        let (new, completed, cancelled) = rebalance::transitions(&current.map, &next);
        for r in &new {
            started.insert(*r, Instant::now());
        }
        if let Some(m) = &cfg.metrics {
            m.started.inc_by(new.len() as u64);
            m.failed.inc_by(cancelled.len() as u64);
            m.completed.inc_by(completed.len() as u64);
            for r in &completed {
                if let Some(at) = started.get(r) {
                    m.duration.observe(at.elapsed().as_secs_f64());
                }
            }
        }
        for r in completed.iter().chain(&cancelled) {
            started.remove(r);
        }
    }
    Ok(())
}
