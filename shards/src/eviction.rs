//! `pods/{name}/eviction` (policy/v1 Eviction; RFC 0014, "Eviction and PodDisruptionBudgets"):
//! a pod is deleted as a DELETE with the Eviction's options would delete it, unless the
//! PodDisruptionBudget covering it allows no disruption now (upstream's 429). The budget's
//! count-down (`disruptionsAllowed` one less, the pod in `disruptedPods`) and the pod's deletion
//! are one etcd transaction, a compare-and-swap on both: two evictions on two shards that read
//! the same budget cannot both commit, so a budget is never overspent, and a crash never leaves
//! a budget counted down for a pod that stays (upstream writes the two one after the other).
//! The decisions are `shardplane_apimachinery::disruption`'s.

use crate::shard::Shard;
use crate::write::{current_from, deletion, dry_run_values, stored_bytes, Call, Deletion, Source};
use shardplane_http::query::form_values;
use axum::body::Body;
use axum::http::{Response, StatusCode};
use serde_json::{json, Value};
use shardplane_apimachinery::delete_options::{self, DeleteOptions, QueryOptions};
use shardplane_apimachinery::disruption;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::{meta, ApiError};
use shardplane_http::body;
use shardplane_http::storage_errors::status_of as storage_err;
use shardplane_storage::{Companion, Kv, Primary, StorageError};

/// Lost races on the budget before the eviction gives up (upstream's `EvictionsRetry` steps).
const BUDGET_ROUNDS: usize = 20;

type Reply = Result<Response<Body>, ApiError>;

/// The answer to an eviction that went ahead: a Status with code 201, as upstream's create of
/// an Eviction answers.
fn success() -> Reply {
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
    Ok(body::json(StatusCode::CREATED, serde_json::to_vec(&status).expect("status")))
}

/// The budgets of the pod's namespace that cover it for an eviction, each with its revision:
/// found through the informer, read from etcd (the compare is on the budget as it is now).
async fn budgets(shard: &Shard, pod: &Value) -> Result<Vec<(Vec<u8>, u64, Value)>, ApiError> {
    let held = shard.informers.objects("policy", "poddisruptionbudgets").await?;
    let info = shard.builtin("policy", "poddisruptionbudgets");
    let covering: Vec<&Value> = held.iter().map(|b| &**b).filter(|b| disruption::covers(b, pod)).collect();
    let read = crate::informer::current(shard, &info, &covering).await.map_err(storage_err)?;
    Ok(read.into_iter().filter(|(_, _, b)| disruption::covers(b, pod)).collect())
}

/// Deletes the pod as the options say (marked, or gone) with `extra` keys in the same
/// transaction; nothing is written for a dry run.
async fn delete_pod(shard: &Shard, info: &ResourceInfo, key: &[u8], kv: &Kv, pod: &Value, options: &DeleteOptions, extra: &[Companion], dry: bool) -> Result<(), StorageError> {
    if dry {
        return Ok(());
    }
    match deletion(info, pod, options) {
        Deletion::Remove => crate::transaction::remove_with(shard, info, key, kv, pod, extra).await.map(|_| ()),
        Deletion::Unchanged if extra.is_empty() => Ok(()),
        Deletion::Unchanged => shard.store(info).commit(&Primary::Update { key: key.to_vec(), value: kv.value.to_vec(), expected: kv.mod_revision }, extra).await.map(|_| ()),
        Deletion::Mark(new) => shard.store(info).commit(&Primary::Update { key: key.to_vec(), value: stored_bytes(info, &new), expected: kv.mod_revision }, extra).await.map(|_| ()),
    }
}

/// Whether the budget can be written in the pod's transaction (both on one store).
fn one_store(shard: &Shard) -> bool {
    !shard.stores.is_overridden("policy", "poddisruptionbudgets") && !shard.stores.is_overridden("", "pods")
}

/// POST of an Eviction to `pods/{name}/eviction`.
pub async fn evict(c: Call<'_>) -> Reply {
    let Call { shard, target: t, headers, query, body: raw } = c;
    let info = &t.info;
    let name = c.name();
    let eviction = body::decode_object(headers, raw)?;
    let kind = eviction.get("kind").and_then(Value::as_str).unwrap_or("Eviction");
    let version = eviction.get("apiVersion").and_then(Value::as_str).unwrap_or("policy/v1");
    if kind != "Eviction" || !matches!(version, "policy/v1" | "policy/v1beta1") {
        return Err(ApiError::bad_request(format!("not a Eviction object: {version}, Kind={kind}")));
    }
    if meta::meta_str(&eviction, "name") != name {
        return Err(ApiError::bad_request("name in URL does not match name in Eviction object"));
    }
    let opts = eviction.get("deleteOptions").filter(|o| o.is_object()).cloned().unwrap_or_else(|| json!({}));
    // The request's dryRun goes into the options; both given and different is upstream's error.
    let from_query = form_values(query, "dryRun");
    let from_body: Vec<String> = opts.get("dryRun").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect()).unwrap_or_default();
    if !from_query.is_empty() && !from_body.is_empty() && from_query != from_body {
        return Err(ApiError::internal(format!("Non-matching dry-run options in request and content: {from_query:?} and {from_body:?}")));
    }
    let dry = dry_run_values(if from_body.is_empty() { &from_query } else { &from_body }, "DeleteOptions")?;
    let options = delete_options::parse(&opts, QueryOptions::default())?;
    let ns = t.namespace.clone().unwrap_or_default();
    let key = shard.owned_key(info, &ns, name)?;
    let mut rounds = 0;
    loop {
        let (pod, kv) = current_from(shard, info, &key, &ns, name, Source::Etcd).await?;
        let uid = meta::meta_str(&pod, "uid");
        if let Some(p) = opts.pointer("/preconditions/uid").and_then(Value::as_str) && p != uid {
            return Err(ApiError::conflict_msg(&info.group, &info.plural, name, &format!("Precondition failed: UID in precondition: {p}, UID in object meta: {uid}")));
        }
        let rv_given = opts.pointer("/preconditions/resourceVersion").and_then(Value::as_str);
        if let Some(p) = rv_given && p != kv.mod_revision.to_string() {
            return Err(ApiError::conflict_msg(&info.group, &info.plural, name, &format!("Precondition failed: ResourceVersion in precondition: {p}, ResourceVersion in object meta: {}", kv.mod_revision)));
        }
        // An ended, pending or already deleting pod goes without asking any budget.
        let (extra, budget) = if disruption::can_ignore_budget(&pod) {
            (Vec::new(), None)
        } else {
            let mut covering = budgets(shard, &pod).await?;
            if covering.len() > 1 {
                return Err(ApiError::failure(500, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."));
            }
            match covering.pop() {
                None => (Vec::new(), None),
                Some((bkey, brev, pdb)) => {
                    let bname = meta::meta_str(&pdb, "name").to_owned();
                    let ready = disruption::pod_ready(&pod);
                    let always = pdb.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str) == Some("AlwaysAllow");
                    let status_int = |f: &str| pdb.pointer(&format!("/status/{f}")).and_then(Value::as_i64).unwrap_or(0);
                    // An unready pod does not count as healthy: it may go without counting
                    // down while the budget is met (or always, by the budget's policy).
                    if !ready && (always || (status_int("currentHealthy") >= status_int("desiredHealthy") && status_int("desiredHealthy") > 0)) {
                        (Vec::new(), Some(bname))
                    } else {
                        let next = disruption::check_and_decrement(&pdb, name, &meta::now_rfc3339(), dry)?;
                        let info = shard.builtin("policy", "poddisruptionbudgets");
                        let update = Companion::Update { key: bkey, value: stored_bytes(&info, &next), expected: brev };
                        (vec![update], Some(bname))
                    }
                }
            }
        };
        let (with_pod, first): (&[Companion], &[Companion]) = if one_store(shard) { (&extra, &[]) } else { (&[], &extra) };
        // On two stores the budget is counted down first, as upstream does.
        if let Some(Companion::Update { key, value, expected }) = first.first().filter(|_| !dry) {
            let store = shard.store(&shard.builtin("policy", "poddisruptionbudgets"));
            match store.update(key, value.clone(), *expected).await {
                Ok(_) => {}
                Err(StorageError::Conflict { .. }) if rounds + 1 < BUDGET_ROUNDS => {
                    rounds += 1;
                    continue;
                }
                Err(StorageError::Conflict { .. }) => return Err(budget_contended(budget.as_deref())),
                Err(e) => return Err(storage_err(e)),
            }
        }
        match delete_pod(shard, info, &key, &kv, &pod, &options, with_pod, dry).await {
            Ok(()) => return success(),
            Err(StorageError::Conflict { .. } | StorageError::CompanionConflict { .. }) if rv_given.is_none() && rounds + 1 < BUDGET_ROUNDS => rounds += 1,
            Err(StorageError::CompanionConflict { .. }) => return Err(budget_contended(budget.as_deref())),
            // The pod kept changing (it may have become ready since it was read): upstream's
            // 429 under a budget, so that the client retries.
            Err(StorageError::Conflict { .. }) => return Err(match budget.as_deref() {
                Some(b) => disruption::still_processing(b),
                None => ApiError::conflict(&info.group, &info.plural, name),
            }),
            Err(e) => return Err(storage_err(e)),
        }
    }
}

/// Upstream's timeout for an eviction that kept losing the race for its budget.
fn budget_contended(budget: Option<&str>) -> ApiError {
    ApiError::timeout(format!("couldn't update PodDisruptionBudget {:?} due to conflicts", budget.unwrap_or("")))
}
