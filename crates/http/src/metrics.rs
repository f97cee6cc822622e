//! Prometheus metrics with upstream's names where one exists, and the bounded label set of a
//! request (verb, group, version, resource, subresource, scope: never a name or a raw path).

use prometheus::{Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};
use axum::http::Method;
use shardplane_apimachinery::request_path::Target;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Set by binaries whose global allocator is jemalloc: only then is its `stats.allocated` the
/// process heap (test binaries use the system allocator and report no heap gauge).
static HEAP_IS_JEMALLOC: AtomicBool = AtomicBool::new(false);

/// Declares that this process allocates with jemalloc (call from `main`).
pub fn heap_is_jemalloc() {
    HEAP_IS_JEMALLOC.store(true, Ordering::Relaxed);
}

/// Bytes the application holds on the heap (jemalloc `stats.allocated`), if jemalloc is the
/// allocator.
pub fn heap_allocated_bytes() -> Option<u64> {
    if !HEAP_IS_JEMALLOC.load(Ordering::Relaxed) {
        return None;
    }
    // Statistics are cached per epoch; advancing it refreshes them.
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    tikv_jemalloc_ctl::stats::allocated::read().ok().map(|b| b as u64)
}

/// The process's resident set size from /proc (Linux), in bytes.
pub fn resident_memory_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // 4 KiB pages: the only size on the platforms shardplane builds for (x86-64, aarch64 Linux
    // default kernels); /proc/self/status would give kB directly but costs a larger parse.
    Some(pages * 4096)
}

/// A process's metrics (shard or router: the router leaves the cache gauges empty).
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// `apiserver_request_total{verb,group,version,resource,subresource,scope,component,code}`
    pub requests: IntCounterVec,
    /// `apiserver_request_duration_seconds{verb,group,version,resource,subresource,scope,component}`
    pub duration: HistogramVec,
    /// `apiserver_storage_objects{resource}` (objects in this shard's caches)
    pub storage_objects: IntGaugeVec,
    /// `apiserver_watch_cache_bytes{resource}`: serialized bytes held (shardplane-specific)
    pub cache_bytes: IntGaugeVec,
    /// `apiserver_watch_events_total{group,version,kind}`
    pub watch_events: IntCounterVec,
    /// `apiserver_registered_watchers{group,version,kind}`
    pub watchers: IntGaugeVec,
    /// `apiserver_terminated_watchers_total{resource}`
    pub terminated_watchers: IntGaugeVec,
    /// `shardplane_watch_cache_history_events{resource}`: changes the watch cache keeps for
    /// watches to resume from (bounded by count and age; no upstream name, as upstream's cache
    /// exports only its capacity)
    pub history_events: IntGaugeVec,
    /// `shardplane_request_panics_total`: requests whose handler panicked (each answered with a
    /// 500 Status; no upstream name, as kube-apiserver only logs them)
    pub panics: IntCounter,
    /// `process_resident_memory_bytes` (the Prometheus process collector's name)
    resident: IntGauge,
    /// `shardplane_heap_allocated_bytes`: jemalloc `stats.allocated` (as Go's
    /// `go_memstats_heap_alloc_bytes`)
    heap: IntGauge,
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new("apiserver_request_total", "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code."),
            &["verb", "group", "version", "resource", "subresource", "scope", "component", "code"],
        )
        .expect("metric");
        let duration = HistogramVec::new(
            HistogramOpts::new("apiserver_request_duration_seconds", "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.")
                .buckets(vec![0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0]),
            &["verb", "group", "version", "resource", "subresource", "scope", "component"],
        )
        .expect("metric");
        let storage_objects = IntGaugeVec::new(Opts::new("apiserver_storage_objects", "Number of stored objects at the time of last check split by kind."), &["resource"]).expect("metric");
        let cache_bytes = IntGaugeVec::new(Opts::new("apiserver_watch_cache_bytes", "Serialized bytes held by the watch cache, by resource."), &["resource"]).expect("metric");
        let watch_events = IntCounterVec::new(Opts::new("apiserver_watch_events_total", "Number of events sent in watch clients"), &["group", "version", "kind"]).expect("metric");
        let watchers = IntGaugeVec::new(Opts::new("apiserver_registered_watchers", "Number of currently registered watchers for a given resources"), &["group", "version", "kind"]).expect("metric");
        let terminated_watchers = IntGaugeVec::new(Opts::new("apiserver_terminated_watchers_total", "Number of watchers terminated because of being unresponsive, per resource"), &["resource"]).expect("metric");
        let history_events = IntGaugeVec::new(Opts::new("shardplane_watch_cache_history_events", "Changes the watch cache keeps for watches to resume from, by resource."), &["resource"]).expect("metric");
        let panics = IntCounter::new("shardplane_request_panics_total", "Requests whose handler panicked; each was answered with a 500 Status.").expect("metric");
        let resident = IntGauge::new("process_resident_memory_bytes", "Resident memory size in bytes.").expect("metric");
        let heap = IntGauge::new("shardplane_heap_allocated_bytes", "Bytes allocated by the application on the heap (jemalloc stats.allocated).").expect("metric");
        let mut all = vec![Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>, Box::new(duration.clone()), Box::new(storage_objects.clone()), Box::new(cache_bytes.clone()), Box::new(watch_events.clone()), Box::new(watchers.clone()), Box::new(terminated_watchers.clone()), Box::new(history_events.clone()), Box::new(panics.clone()), Box::new(resident.clone())];
        if HEAP_IS_JEMALLOC.load(Ordering::Relaxed) {
            all.push(Box::new(heap.clone()));
        }
        for m in all {
            registry.register(m).expect("register");
        }
        Self { registry, requests, duration, storage_objects, cache_bytes, watch_events, watchers, terminated_watchers, history_events, panics, resident, heap }
    }

    /// The registry, for other parts of the process to add their metrics to.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts one answered request and, unless it was a watch, its latency.
    pub fn observe(&self, l: &RequestLabels, code: u16, took: Option<Duration>) {
        let code = code.to_string();
        self.requests.with_label_values(&[&l.verb, &l.group, &l.version, &l.resource, &l.subresource, l.scope, "apiserver", &code]).inc();
        if let Some(took) = took {
            self.duration.with_label_values(&[&l.verb, &l.group, &l.version, &l.resource, &l.subresource, l.scope, "apiserver"]).observe(took.as_secs_f64());
        }
    }

    /// The text exposition.
    pub fn render(&self) -> Vec<u8> {
        if let Some(b) = resident_memory_bytes() {
            self.resident.set(b as i64);
        }
        if let Some(b) = heap_allocated_bytes() {
            self.heap.set(b as i64);
        }
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("encode metrics");
        out
    }
}

/// Subresource names Kubernetes serves; any other is labelled `other`.
const SUBRESOURCES: [&str; 14] = ["status", "scale", "finalize", "binding", "eviction", "log", "exec", "attach", "portforward", "proxy", "ephemeralcontainers", "resize", "token", "approval"];

/// The upstream metric labels of a request. Every value comes from the served-resource table or
/// a fixed set, so a client cannot grow the label space.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestLabels {
    pub verb: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub scope: &'static str,
}

impl RequestLabels {
    /// The labels of `method` on `target` (a request naming no resource is labelled by its
    /// method alone).
    pub fn of(method: &Method, target: Option<&Target>, watch: bool) -> Self {
        // Any token is an HTTP method; only the ones an API server answers become label values.
        let method = match method.as_str() {
            m @ ("GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" | "OPTIONS" | "CONNECT") => m,
            _ => "other",
        };
        let Some(t) = target else { return RequestLabels { verb: method.to_owned(), ..Default::default() } };
        let verb = match (method, t.name.is_some(), watch) {
            ("GET", _, true) => "WATCH",
            ("GET", false, _) => "LIST",
            ("GET", true, _) => "GET",
            ("DELETE", false, _) => "DELETECOLLECTION",
            (m, _, _) => m,
        };
        let scope = if t.name.is_some() { "resource" } else if t.namespace.is_some() { "namespace" } else { "cluster" };
        // The path parser takes any last segment for a subresource; only Kubernetes' own names
        // become label values.
        let subresource = match t.subresource.as_deref() {
            None => "",
            Some(s) if SUBRESOURCES.contains(&s) => s,
            Some(_) => "other",
        };
        RequestLabels { verb: verb.to_owned(), group: t.info.group.to_owned(), version: t.info.version.to_owned(), resource: t.info.plural.to_owned(), subresource: subresource.to_owned(), scope }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
