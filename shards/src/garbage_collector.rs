//! The garbage collector (RFC 0014): what upstream's controller-manager does with
//! `ownerReferences`, done by every shard for the objects in its own ranges.
//!
//! Each pass does two duties, both from the shard's caches plus the store:
//! - **As dependents' shard**: for every cached object with owner references, each owner is
//!   read from the store (an owner usually hashes to another shard: one read of its whole
//!   resource when the dependents name many of its objects, else a GET by key) and
//!   classified as upstream's collector does: *dangling* (no object, or another uid), *waiting*
//!   (being deleted in the foreground) or *solid*. With a solid owner, the dangling and waiting
//!   references are removed; with none, the object is deleted (in the foreground when an owner
//!   waits for it, so that its own dependents go first).
//! - **As owners' shard**: an object of its ranges being deleted with the `orphan` finalizer has
//!   the references to it removed from every dependent; with `foregroundDeletion`, its
//!   dependents are deleted. Dependents live on every shard, so the store is read across the
//!   whole hash space at one revision, once per pass and only while such an owner exists here.
//!   The finalizer goes once no dependent refers to it (orphan) or none blocks it (foreground).
//!
//! Every write is a compare-and-swap on the object's own key, so a pass that races a client, a
//! range move or another shard's pass loses the CAS and looks again next pass; nothing is kept
//! in memory between passes, so a crashed or moved shard leaves nothing to repair but what the
//! next owner of the range does on its first pass.
//!
//! It never deletes an object one of whose owners exists and is not itself being deleted in
//! the foreground, and never removes a GC finalizer while a dependent it waits for exists at
//! the revision it read.

use crate::shard::{Served, Shard};
use serde_json::{json, Value};
use shardplane_apimachinery::delete_options::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER};
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::{encode, meta};
use shardplane_keyspace::{etcd_layout, HashRange};
use shardplane_storage::{Kv, RangeReader, Storage, StorageError};
use shardplane_watchcache::{CachedObject, Filter};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// How many objects a page of the owners' cross-shard read holds.
const PAGE: i64 = 500;

/// After a pass, the collector rests at least this many times as long as the pass spent
/// looking, so that looking takes at most a tenth of its time however many objects the shard
/// holds (RFC 0014): a pass over a large cache reads the store once per distinct owner, and
/// unpaced it would keep the store busy without end. The time spent writing what it decided
/// (a cascade's deletes and edits, one at a time) is not counted: that is work a client asked
/// for, and pacing it made a three-step foreground cascade take a minute on a loaded machine.
const REST_PER_PASS: u32 = 9;

/// Objects a pass looks at between two yields to the runtime.
const YIELD_EVERY: usize = 64;

/// The rest before the next pass: `period`, or [`REST_PER_PASS`] times the pass's looking, if
/// longer.
fn rest_after(looking: Duration, period: Duration) -> Duration {
    period.max(looking.saturating_mul(REST_PER_PASS))
}

/// The time a pass spent acting on what it found: writing a dependent's deletion or edit, or
/// removing an owner's finalizer (each write with the read of the object it swaps).
#[derive(Default)]
struct Acting(Duration);

impl Acting {
    /// Runs `act`, counting its time.
    async fn time<T>(&mut self, act: impl std::future::Future<Output = T>) -> T {
        let began = std::time::Instant::now();
        let out = act.await;
        self.0 += began.elapsed();
        out
    }
}

/// `shardplane_garbage_collector_pass_duration_seconds`: each pass's length (both duties),
/// registered with the shard's metrics; upstream's collector, driven by informers, has no
/// passes and so no such metric.
fn pass_histogram(shard: &Shard) -> prometheus::Histogram {
    let opts = prometheus::HistogramOpts::new("shardplane_garbage_collector_pass_duration_seconds", "How long each pass of the shard's garbage collector took (it then rests at least nine times the part spent looking rather than writing).")
        .buckets(vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0]);
    let histogram = prometheus::Histogram::with_opts(opts).expect("metric");
    let _ = shard.metrics.registry().register(Box::new(histogram.clone()));
    histogram
}

/// Runs passes every `period` (or less often: [`rest_after`]) until shutdown.
pub async fn run(shard: Arc<Shard>, period: Duration) {
    let passes = pass_histogram(&shard);
    let mut rest = period;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(rest) => {}
            _ = shard.shutdown.cancelled() => return,
        }
        rest = period;
        if !shard.ready() {
            continue;
        }
        let began = std::time::Instant::now();
        let mut acting = Acting::default();
        let span = tracing::debug_span!("garbage_collection", shard = %shard.id);
        async {
            if let Err(e) = collect_dependents(&shard, &mut acting).await {
                tracing::warn!(error = %e, "garbage collection of dependents failed; next pass retries");
            }
            if let Err(e) = finish_owners(&shard, &mut acting).await {
                tracing::warn!(error = %e, "garbage collection for owners being deleted failed; next pass retries");
            }
        }
        .instrument(span)
        .await;
        let took = began.elapsed();
        passes.observe(took.as_secs_f64());
        let looking = took.saturating_sub(acting.0);
        tracing::debug!(shard = %shard.id, looking_ms = looking.as_millis() as u64, acting_ms = acting.0.as_millis() as u64, "garbage collection pass");
        rest = rest_after(looking, period);
    }
}

/// One `ownerReferences` entry, as the collector reads it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct OwnerRef {
    api_version: String,
    kind: String,
    name: String,
    uid: String,
    block: bool,
}

fn owner_refs(obj: &Value) -> Vec<OwnerRef> {
    let Some(refs) = obj.pointer("/metadata/ownerReferences").and_then(Value::as_array) else { return vec![] };
    refs.iter()
        .map(|r| OwnerRef {
            api_version: r["apiVersion"].as_str().unwrap_or("").to_owned(),
            kind: r["kind"].as_str().unwrap_or("").to_owned(),
            name: r["name"].as_str().unwrap_or("").to_owned(),
            uid: r["uid"].as_str().unwrap_or("").to_owned(),
            block: r["blockOwnerDeletion"].as_bool().unwrap_or(false),
        })
        .collect()
}

/// An object's owner references, read from its stored bytes without building the rest of it
/// (a pass reads every dependent's references, and most objects are much more than those);
/// [`owner_refs`] on the parsed object when the fields are not the types upstream validates.
fn owner_refs_in(bytes: &[u8]) -> Vec<OwnerRef> {
    #[derive(serde::Deserialize)]
    struct Object {
        #[serde(default)]
        metadata: Metadata,
    }
    #[derive(serde::Deserialize, Default)]
    struct Metadata {
        #[serde(default, rename = "ownerReferences")]
        owner_references: Option<Vec<Reference>>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Reference {
        #[serde(default)]
        api_version: String,
        #[serde(default)]
        kind: String,
        #[serde(default)]
        name: String,
        #[serde(default)]
        uid: String,
        #[serde(default)]
        block_owner_deletion: Option<bool>,
    }
    match serde_json::from_slice::<Object>(bytes) {
        Ok(o) => o.metadata.owner_references.unwrap_or_default().into_iter().map(|r| OwnerRef { api_version: r.api_version, kind: r.kind, name: r.name, uid: r.uid, block: r.block_owner_deletion.unwrap_or(false) }).collect(),
        Err(_) => serde_json::from_slice::<Value>(bytes).map(|o| owner_refs(&o)).unwrap_or_default(),
    }
}

/// What an owner reference points at now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OwnerState {
    /// No such object, or one with another uid.
    Dangling,
    /// Being deleted with `foregroundDeletion`: it waits for its dependents.
    Waiting,
    /// Exists (being orphaned or deleted otherwise counts: its own shard handles that).
    Solid,
    /// The kind is not served, or a cluster-scoped object names a namespaced owner: upstream
    /// leaves such an object alone.
    Unresolvable,
}

fn being_deleted(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
}

/// The served resource an owner reference's apiVersion and kind name.
fn resolve(resources: &[Arc<ResourceInfo>], r: &OwnerRef) -> Option<Arc<ResourceInfo>> {
    let (group, version) = r.api_version.rsplit_once('/').unwrap_or(("", &r.api_version));
    resources.iter().find(|i| i.kind == r.kind && i.group == group && i.version == version).or_else(|| resources.iter().find(|i| i.kind == r.kind && i.group == group)).cloned()
}

/// Reads the state of the owner `r` of an object in `namespace` (owners are in the dependent's
/// namespace, or cluster-scoped).
async fn owner_state(shard: &Shard, resources: &[Arc<ResourceInfo>], namespace: &str, r: &OwnerRef) -> Result<OwnerState, StorageError> {
    let Some(info) = resolve(resources, r) else { return Ok(OwnerState::Unresolvable) };
    if info.namespaced && namespace.is_empty() {
        return Ok(OwnerState::Unresolvable);
    }
    let ns = if info.namespaced { namespace } else { "" };
    let (kv, _) = shard.store(&info).get(&Shard::any_key(&info, ns, &r.name)).await?;
    let Some(kv) = kv else { return Ok(OwnerState::Dangling) };
    let Ok(owner) = serde_json::from_slice::<Value>(&kv.value) else { return Ok(OwnerState::Solid) };
    Ok(classify(&owner, r))
}

/// What `r` points at, given the object stored under its name.
fn classify(owner: &Value, r: &OwnerRef) -> OwnerState {
    if meta::meta_str(owner, "uid") != r.uid {
        OwnerState::Dangling
    } else if being_deleted(owner) && meta::finalizers(owner).contains(&FOREGROUND_FINALIZER) {
        OwnerState::Waiting
    } else {
        OwnerState::Solid
    }
}

/// The dependents a pass found, with each distinct reference kept once: a shard's dependents
/// mostly share their owners (a ReplicaSet's pods), and a pass that held every dependent's own
/// copy of its references held about 250 bytes per dependent for the pass's length, which the
/// memory benchmark saw as heap (RFC 0014, "Cost").
#[derive(Default)]
struct Dependents {
    /// The resources the dependents are of.
    served: Vec<Arc<Served>>,
    /// Each dependent: its resource (an index into `served`), the object, and its references
    /// (a range of `ref_ids`).
    objects: Vec<(u32, Arc<CachedObject>, std::ops::Range<u32>)>,
    /// Numbers into `refs`, each dependent's in a row.
    ref_ids: Vec<u32>,
    /// Each distinct (dependent's namespace, reference), by number.
    refs: Vec<(String, OwnerRef)>,
}

/// Every cached object of this shard with owner references.
async fn find_dependents(shard: &Shard) -> Dependents {
    let mut found = Dependents::default();
    let mut numbers: BTreeMap<(String, OwnerRef), u32> = BTreeMap::new();
    for served in shard.all_served() {
        let Ok(page) = served.cache.list(None, &Filter::default(), None, None, false) else { continue };
        let served_id = found.served.len() as u32;
        found.served.push(served);
        for (i, cached) in page.items.into_iter().enumerate() {
            // A pass over a large cache would otherwise hold its worker thread for as long as
            // it parses every object.
            if i % YIELD_EVERY == YIELD_EVERY - 1 {
                tokio::task::yield_now().await;
            }
            if memchr::memmem::find(&cached.bytes, b"\"ownerReferences\"").is_none() {
                continue;
            }
            let refs = owner_refs_in(&cached.bytes);
            if refs.is_empty() {
                continue;
            }
            let first = found.ref_ids.len() as u32;
            for r in refs {
                let key = (cached.namespace().to_owned(), r);
                let id = match numbers.get(&key) {
                    Some(id) => *id,
                    None => {
                        let id = found.refs.len() as u32;
                        found.refs.push(key.clone());
                        numbers.insert(key, id);
                        id
                    }
                };
                found.ref_ids.push(id);
            }
            let last = found.ref_ids.len() as u32;
            found.objects.push((served_id, cached, first..last));
        }
    }
    found
}

/// The dependents' duty over every cached object of this shard with owner references.
async fn collect_dependents(shard: &Shard, acting: &mut Acting) -> Result<(), String> {
    let resources = shard.resources();
    let found = find_dependents(shard).await;
    // Owners are read once per pass, however many dependents share them; those many
    // dependents name are read with their whole resource.
    let mut states = solid_owners(shard, &resources, &found.refs).await;
    for (i, (served_id, cached, ids)) in found.objects.iter().enumerate() {
        if i % YIELD_EVERY == YIELD_EVERY - 1 {
            tokio::task::yield_now().await;
        }
        let ns = cached.namespace();
        let mut classified = Vec::with_capacity(ids.len());
        for &id in &found.ref_ids[ids.start as usize..ids.end as usize] {
            let r = &found.refs[id as usize].1;
            let state = match states[id as usize] {
                Some(s) => s,
                None => {
                    let s = owner_state(shard, &resources, ns, r).await.map_err(|e| e.to_string())?;
                    states[id as usize] = Some(s);
                    s
                }
            };
            classified.push((r, state));
        }
        // Every owner there: nothing to do (what `settle` would find).
        if classified.iter().all(|(_, s)| matches!(s, OwnerState::Solid | OwnerState::Unresolvable)) {
            continue;
        }
        let Ok(obj) = serde_json::from_slice::<Value>(&cached.bytes) else { continue };
        let served = &found.served[*served_id as usize];
        if let Err(e) = acting.time(settle(shard, &served.info, ns, cached.name(), &obj, &classified)).await {
            tracing::debug!(resource = %served.info.plural, namespace = %ns, name = cached.name(), error = %e, "dependent not settled this pass");
        }
    }
    Ok(())
}

/// Owners one resource must hold at least this many of before they are read with the whole
/// resource ([`solid_owners`]) rather than one by one.
const BULK_OWNERS: usize = 64;

/// Those owners must also be at least one in `BULK_SHARE` of the resource's objects, so that
/// the read costs no more than the GETs would (its pages carry objects no dependent names).
const BULK_SHARE: u64 = 16;

/// The state of each of `refs` (by number) that names an owner that exists and is not waiting
/// for its dependents, read with the owner's whole resource where a resource holds many of
/// them (RFC 0014): one GET per owner kept the store busy for seconds every pass on a shard of
/// 25,000 pods and their ReplicaSets, and slowed every client's writes meanwhile. Owners found
/// missing, replaced or waiting are left `None`, so the pass reads them again, one by one, just
/// before it acts on them.
async fn solid_owners(shard: &Shard, resources: &[Arc<ResourceInfo>], refs: &[(String, OwnerRef)]) -> Vec<Option<OwnerState>> {
    // By owner resource, then by owner: the references naming it.
    let mut wanted: BTreeMap<(String, String), (Arc<ResourceInfo>, Named)> = BTreeMap::new();
    for (id, (ns, r)) in refs.iter().enumerate() {
        let Some(info) = resolve(resources, r) else { continue };
        if info.namespaced && ns.is_empty() {
            continue;
        }
        let owner_ns = if info.namespaced { ns.as_str() } else { "" };
        let (_, named) = wanted.entry((info.storage_group().to_owned(), info.plural.clone())).or_insert_with(|| (info.clone(), BTreeMap::new()));
        named.entry((owner_ns.to_owned(), r.name.clone())).or_default().push(id as u32);
    }
    let mut states = vec![None; refs.len()];
    for ((group, plural), (info, named)) in wanted.into_iter().filter(|(_, (_, named))| named.len() >= BULK_OWNERS) {
        if let Err(e) = read_solid(shard.store(&info), &group, &plural, &named, refs, &mut states).await {
            tracing::debug!(resource = %plural, error = %e, "owners not read together this pass; one by one instead");
        }
    }
    states
}

/// Owners of one resource by (namespace, name), each with the numbers of the references naming
/// it.
type Named = BTreeMap<(String, String), Vec<u32>>;

/// Reads the resource `group/plural` whole, at one revision, if `named` is a large enough share
/// of it, and marks in `states` each reference whose owner is there and solid.
async fn read_solid(store: &Storage, group: &str, plural: &str, named: &Named, refs: &[(String, OwnerRef)], states: &mut [Option<OwnerState>]) -> Result<(), StorageError> {
    let count = store.count_prefix(etcd_layout::resource_prefix(group, plural).as_bytes()).await?;
    if (named.len() as u64).saturating_mul(BULK_SHARE) < count {
        return Ok(());
    }
    let (start, end) = etcd_layout::range_keys(group, plural, HashRange::FULL);
    let mut reader = RangeReader::new(&start, &end, 0, PAGE);
    while let Some(kvs) = reader.next_page(store).await? {
        for kv in &kvs {
            let Some((_, ns, name)) = etcd_layout::parse_object_key(group, plural, &kv.key) else { continue };
            let Some(ids) = named.get(&(ns.to_owned(), name.to_owned())) else { continue };
            let Ok(owner) = serde_json::from_slice::<Value>(&kv.value) else { continue };
            for &id in ids.iter().filter(|id| classify(&owner, &refs[**id as usize].1) == OwnerState::Solid) {
                states[id as usize] = Some(OwnerState::Solid);
            }
        }
        tokio::task::yield_now().await;
    }
    Ok(())
}

/// Acts on one dependent whose owners are classified, as upstream's `attemptToDeleteItem`.
async fn settle(shard: &Shard, info: &ResourceInfo, ns: &str, name: &str, obj: &Value, owners: &[(&OwnerRef, OwnerState)]) -> Result<(), StorageError> {
    let solid = owners.iter().any(|(_, s)| matches!(s, OwnerState::Solid | OwnerState::Unresolvable));
    let uid = meta::meta_str(obj, "uid").to_owned();
    let key = Shard::any_key(info, ns, name);
    if solid {
        let gone: BTreeSet<&str> = owners.iter().filter(|(_, s)| matches!(s, OwnerState::Dangling | OwnerState::Waiting)).map(|(r, _)| r.uid.as_str()).collect();
        if gone.is_empty() {
            return Ok(());
        }
        return edit(shard, info, &key, &uid, |o| remove_refs(o, &gone)).await;
    }
    if being_deleted(obj) && !meta::finalizers(obj).contains(&ORPHAN_FINALIZER) {
        // Already going (its own finalizers, or a foreground deletion under way).
        return Ok(());
    }
    let waiting = owners.iter().any(|(r, s)| *s == OwnerState::Waiting && r.block);
    delete_dependent(shard, info, &key, &uid, waiting).await
}

/// Deletes a dependent by compare-and-swap, as a DELETE with preconditions on its uid would:
/// in the foreground (marked with `foregroundDeletion`) when `foreground`, marked for
/// deletion when it has finalizers or is a pod on a node (its kubelet finishes it), else gone.
async fn delete_dependent(shard: &Shard, info: &ResourceInfo, key: &[u8], uid: &str, foreground: bool) -> Result<(), StorageError> {
    let store = shard.store(info);
    let (Some(kv), _) = store.get(key).await? else { return Ok(()) };
    let Ok(mut obj) = serde_json::from_slice::<Value>(&kv.value) else { return Ok(()) };
    if meta::meta_str(&obj, "uid") != uid || being_deleted(&obj) {
        return Ok(());
    }
    let on_node = info.group.is_empty() && info.plural == "pods" && obj.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
    if foreground || meta::has_finalizers(&obj) || on_node {
        let grace = obj.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(30);
        let m = meta::metadata_mut(&mut obj);
        m.insert("deletionTimestamp".into(), Value::String(meta::now_rfc3339()));
        m.insert("deletionGracePeriodSeconds".into(), json!(if on_node { grace } else { 0 }));
        if foreground {
            let list = m.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(list) = list.as_array_mut() {
                list.push(json!(FOREGROUND_FINALIZER));
            }
        }
        return cas(store.update(key, encode::object_bytes(&obj), kv.mod_revision).await.map(|_| ()));
    }
    cas(crate::transaction::remove(shard, info, key, &kv, &obj).await.map(|_| ()))
}

/// A lost compare-and-swap is the next pass's to look at again.
fn cas(r: Result<(), StorageError>) -> Result<(), StorageError> {
    match r {
        Err(StorageError::Conflict { .. }) => Ok(()),
        other => other,
    }
}

/// Rewrites the object at `key` (if it still has `uid`) with `change`, by compare-and-swap;
/// `change` returns false when there is nothing to write.
async fn edit(shard: &Shard, info: &ResourceInfo, key: &[u8], uid: &str, change: impl Fn(&mut Value) -> bool) -> Result<(), StorageError> {
    let store = shard.store(info);
    let (Some(kv), _) = store.get(key).await? else { return Ok(()) };
    let Ok(mut obj) = serde_json::from_slice::<Value>(&kv.value) else { return Ok(()) };
    if meta::meta_str(&obj, "uid") != uid || !change(&mut obj) {
        return Ok(());
    }
    cas(store.update(key, encode::object_bytes(&obj), kv.mod_revision).await.map(|_| ()))
}

/// Removes the owner references with one of `uids`; the list goes when it is left empty.
fn remove_refs(obj: &mut Value, uids: &BTreeSet<&str>) -> bool {
    let m = meta::metadata_mut(obj);
    let Some(list) = m.get_mut("ownerReferences").and_then(Value::as_array_mut) else { return false };
    let before = list.len();
    list.retain(|r| !r["uid"].as_str().is_some_and(|u| uids.contains(u)));
    let changed = list.len() != before;
    if list.is_empty() {
        m.remove("ownerReferences");
    }
    changed
}

/// An owner of this shard's ranges being deleted with a GC finalizer.
struct Pending {
    info: Arc<ResourceInfo>,
    key: Vec<u8>,
    uid: String,
    orphan: bool,
    foreground: bool,
    /// Dependents that still refer to it (orphan) or block it (foreground), at the read.
    remaining: usize,
}

/// The owners' duty: orphans or deletes the dependents of this shard's owners being deleted
/// with a GC finalizer, then removes the finalizer once none is left.
async fn finish_owners(shard: &Shard, acting: &mut Acting) -> Result<(), String> {
    let mut pending: BTreeMap<String, Pending> = BTreeMap::new();
    for served in shard.all_served() {
        let Ok(page) = served.cache.list(None, &Filter::default(), None, None, false) else { continue };
        for cached in page.items {
            let bytes = &cached.bytes;
            if memchr::memmem::find(bytes, b"\"deletionTimestamp\"").is_none() {
                continue;
            }
            let Ok(obj) = serde_json::from_slice::<Value>(bytes) else { continue };
            let f = meta::finalizers(&obj);
            let (orphan, foreground) = (f.contains(&ORPHAN_FINALIZER), f.contains(&FOREGROUND_FINALIZER));
            if being_deleted(&obj) && (orphan || foreground) {
                let key = Shard::any_key(&served.info, cached.namespace(), cached.name());
                pending.insert(cached.uid.to_string(), Pending { info: served.info.clone(), key, uid: cached.uid.to_string(), orphan, foreground, remaining: 0 });
            }
        }
    }
    if pending.is_empty() {
        return Ok(());
    }
    // Dependents are on every shard: read them all at one revision. Objects being deleted in
    // the foreground are noted with the owners they block, to find circles.
    let mut waiting: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let resources = shard.resources();
    for info in resources.iter() {
        let (start, end) = etcd_layout::range_keys(info.storage_group(), &info.plural, HashRange::FULL);
        let store = shard.store(info);
        // One revision per resource: a page never mixes states.
        let at = store.current_revision().await.map_err(|e| e.to_string())?;
        let mut reader = RangeReader::new(&start, &end, at, PAGE);
        while let Some(kvs) = reader.next_page(&store).await.map_err(|e| e.to_string())? {
            for kv in &kvs {
                note_waiting(kv, &mut waiting);
                dependent_of_pending(shard, info, kv, &mut pending, acting).await;
            }
        }
    }
    acting.time(break_circles(shard, &pending, &waiting)).await;
    for p in pending.values().filter(|p| p.remaining == 0) {
        // Both at once (an object can be given both by hand): foreground's wait covers orphaning's.
        let done = [(p.foreground, FOREGROUND_FINALIZER), (p.orphan, ORPHAN_FINALIZER)];
        for f in done.into_iter().filter(|(held, _)| *held).map(|(_, f)| f) {
            if let Err(e) = acting.time(crate::sweep::drop_finalizer(shard, &p.info, &p.key, "/metadata/finalizers", f, None)).await {
                tracing::debug!(uid = %p.uid, error = %e, "GC finalizer not removed this pass");
            }
        }
    }
    Ok(())
}

/// Notes an object being deleted in the foreground: its uid and the owners it blocks.
fn note_waiting(kv: &Kv, waiting: &mut BTreeMap<String, BTreeSet<String>>) {
    if memchr::memmem::find(&kv.value, FOREGROUND_FINALIZER.as_bytes()).is_none() {
        return;
    }
    let Ok(obj) = serde_json::from_slice::<Value>(&kv.value) else { return };
    if being_deleted(&obj) && meta::finalizers(&obj).contains(&FOREGROUND_FINALIZER) {
        let blocks = owner_refs(&obj).into_iter().filter(|r| r.block).map(|r| r.uid).collect();
        waiting.insert(meta::meta_str(&obj, "uid").to_owned(), blocks);
    }
}

/// Upstream's circle breaking: an owner of this shard waiting for dependents that, through
/// other objects waiting in the foreground, wait for it, would wait forever. Such an owner's
/// own blocking references to owners that wait are made non-blocking (upstream does the same to
/// an object whose owner waits and whose dependent waits), so each owner of the circle can
/// finish once its dependents have gone. A chain without a circle is left in its order.
async fn break_circles(shard: &Shard, pending: &BTreeMap<String, Pending>, waiting: &BTreeMap<String, BTreeSet<String>>) {
    // Owner uid -> the waiting objects that block it.
    let mut dependents: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (uid, owners) in waiting {
        for o in owners {
            dependents.entry(o.as_str()).or_default().push(uid.as_str());
        }
    }
    for p in pending.values().filter(|p| p.foreground) {
        let (mut stack, mut seen) = (vec![p.uid.as_str()], BTreeSet::new());
        let mut circle = false;
        while let Some(at) = stack.pop() {
            for d in dependents.get(at).into_iter().flatten() {
                if *d == p.uid {
                    circle = true;
                } else if seen.insert(*d) {
                    stack.push(d);
                }
            }
        }
        let blocked: BTreeSet<&str> = waiting.get(&p.uid).into_iter().flatten().filter(|o| waiting.contains_key(*o)).map(String::as_str).collect();
        if !circle || blocked.is_empty() {
            continue;
        }
        tracing::info!(uid = %p.uid, "owner in a circle of foreground deletions: its references made non-blocking");
        let unblock = |o: &mut Value| {
            let mut changed = false;
            for r in meta::metadata_mut(o).get_mut("ownerReferences").and_then(Value::as_array_mut).into_iter().flatten() {
                if r["uid"].as_str().is_some_and(|u| blocked.contains(u)) && r["blockOwnerDeletion"] == true {
                    r["blockOwnerDeletion"] = json!(false);
                    changed = true;
                }
            }
            changed
        };
        if let Err(e) = edit(shard, &p.info, &p.key, &p.uid, unblock).await {
            tracing::debug!(uid = %p.uid, error = %e, "circle not broken this pass");
        }
    }
}

/// Handles one stored object that may be a dependent of a pending owner.
async fn dependent_of_pending(shard: &Shard, info: &ResourceInfo, kv: &Kv, pending: &mut BTreeMap<String, Pending>, acting: &mut Acting) {
    if memchr::memmem::find(&kv.value, b"\"ownerReferences\"").is_none() {
        return;
    }
    let Ok(obj) = serde_json::from_slice::<Value>(&kv.value) else { return };
    let refs = owner_refs(&obj);
    let uid = meta::meta_str(&obj, "uid").to_owned();
    let mut orphaned = BTreeSet::new();
    let mut delete_for = None;
    for r in &refs {
        let Some(p) = pending.get_mut(&r.uid) else { continue };
        if p.foreground {
            if r.block {
                p.remaining += 1;
            }
            delete_for.get_or_insert(r.block);
        } else if p.orphan {
            p.remaining += 1;
            orphaned.insert(r.uid.clone());
        }
    }
    let result = if !orphaned.is_empty() {
        let uids: BTreeSet<&str> = orphaned.iter().map(String::as_str).collect();
        acting.time(edit(shard, info, &kv.key, &uid, |o| remove_refs(o, &uids))).await
    } else if let Some(block) = delete_for {
        // Its other owners decide whether it goes: the dependents' duty settles it on its own
        // shard (a solid co-owner keeps it, minus this reference).
        if refs.iter().any(|r| !pending.contains_key(&r.uid)) {
            Ok(())
        } else if being_deleted(&obj) {
            Ok(())
        } else {
            acting.time(delete_dependent(shard, info, &kv.key, &uid, block)).await
        }
    } else {
        Ok(())
    };
    if let Err(e) = result {
        tracing::debug!(resource = %info.plural, error = %e, "dependent of an owner being deleted not handled this pass");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_read_from_the_bytes_are_those_of_the_parsed_object() {
        let objects = [
            json!({"metadata": {"name": "a", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1", "controller": true, "blockOwnerDeletion": true},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u2", "blockOwnerDeletion": null}]},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            json!({"metadata": {"name": "no-refs"}}),
            json!({"metadata": {"name": "null-refs", "ownerReferences": null}}),
            json!({"kind": "NoMetadata"}),
            // Types upstream's validation would refuse: read as the parsed object reads them.
            json!({"metadata": {"ownerReferences": [{"apiVersion": 1, "kind": "ConfigMap", "name": "x", "uid": "u3", "blockOwnerDeletion": "yes"}]}}),
        ];
        let first = owner_refs_in(&serde_json::to_vec(&objects[0]).unwrap());
        assert_eq!(first.iter().map(|r| (r.name.as_str(), r.uid.as_str(), r.block)).collect::<Vec<_>>(), [("rs", "u1", true), ("cm", "u2", false)]);
        for o in objects {
            assert_eq!(owner_refs_in(&serde_json::to_vec(&o).unwrap()), owner_refs(&o), "{o}");
        }
    }

    #[test]
    fn long_looking_is_followed_by_a_rest_nine_times_as_long() {
        let period = Duration::from_secs(1);
        // Short passes keep the period.
        assert_eq!(rest_after(Duration::from_millis(5), period), period);
        assert_eq!(rest_after(Duration::from_millis(111), period), period);
        // A pass that looked for long: looking at most a tenth of the time.
        let pass = Duration::from_secs(20);
        let rest = rest_after(pass, period);
        assert_eq!(rest, Duration::from_secs(180));
        assert!(pass.as_secs_f64() / (pass + rest).as_secs_f64() <= 0.1);
        // No overflow at the edge.
        assert_eq!(rest_after(Duration::MAX, period), Duration::MAX);
    }
}
