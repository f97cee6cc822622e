//! The read verbs on one resource, served from the watch cache: GET and LIST with upstream's
//! resourceVersion, paging and selector rules (WATCH is `watch.rs`).

use crate::render;
use crate::shard::Shard;
use crate::write::Reply;
use serde_json::json;
use shardplane_apimachinery::continue_token::ContinueToken;
use shardplane_apimachinery::list_options::{ListOptions, ListSemantics};
use shardplane_apimachinery::request_path::Target;
use shardplane_apimachinery::ApiError;
use shardplane_http::negotiation::View;
use shardplane_http::query::form_value;
use shardplane_http::storage_errors::status_of as storage_err;
use shardplane_storage::StorageError;
use shardplane_watchcache::{CacheError, Filter};
use std::time::Duration;

/// How long a read waits for the cache to reach a revision (upstream's blockTimeout).
pub const WAIT: Duration = Duration::from_secs(3);

/// Maps cache errors of a read at `rv` to upstream's Status.
pub fn cache_err(e: CacheError, continuing: bool) -> ApiError {
    match e {
        CacheError::TooOld { .. } if continuing => ApiError::expired(
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            None,
        ),
        CacheError::TooOld { .. } => ApiError::expired("The resourceVersion for the provided list is too old.", None),
        CacheError::TooNew { requested, current } => ApiError::too_large_resource_version(requested, current),
        CacheError::NotReady => ApiError::too_many_requests("storage is (re)initializing", 1),
    }
}

/// Builds the cache filter for a LIST or WATCH: the client's selectors, and while the shard
/// holds a range it does not own (loading or draining one, RFC 0006), only what it owns.
pub fn filter(shard: &Shard, t: &Target, o: &ListOptions) -> Filter {
    Filter { namespace: t.namespace.clone(), labels: o.label_selector.clone(), fields: o.field_selector.clone(), shard: o.shard_selector.clone(), owned: shard.owned_filter(&t.info), index: o.index.clone() }
}

/// GET of one object, from the cache (RV unset: after a consistent read, as fresh as etcd).
pub async fn get(shard: &Shard, t: &Target, name: &str, query: &str, view: View) -> Reply {
    let ns = t.namespace.as_deref().unwrap_or("");
    shard.owned_key(&t.info, ns, name)?;
    let served = match form_value(query, "resourceVersion").as_deref() {
        None | Some("") => {
            let rev = shard.store(&t.info).current_revision().await.map_err(storage_err)?;
            shard.synced(&t.info, rev, WAIT).await?
        }
        Some("0") => shard.served(&t.info)?,
        Some(v) => shard.synced(&t.info, shardplane_apimachinery::list_options::parse_rv(v)?, WAIT).await?,
    };
    match served.cache.get(ns, name) {
        Some(o) => render::render(&view, &t.info, &[o.clone()], json!({"resourceVersion": o.rv.to_string()}), true),
        None => Err(ApiError::not_found(&t.info.group, &t.info.plural, name)),
    }
}

/// LIST from the cache with upstream's resourceVersion, paging and selector rules.
pub async fn list(shard: &Shard, t: &Target, o: &ListOptions, view: View) -> Reply {
    let sem = o.list_semantics();
    let (served, at) = match sem {
        ListSemantics::MostRecent => {
            let rev = shard.store(&t.info).current_revision().await.map_err(storage_err)?;
            (shard.synced(&t.info, rev, WAIT).await?, None)
        }
        ListSemantics::Any => (shard.served(&t.info)?, None),
        ListSemantics::NotOlderThan(rv) => (shard.synced(&t.info, rv, WAIT).await?, None),
        ListSemantics::Exact(rv) => (shard.synced(&t.info, rv, WAIT).await?, Some(rv)),
    };
    let cache = &served.cache;
    let after = o.continue_token.as_ref().map(|c| shardplane_watchcache::cache_key(&c.after.0, &c.after.1));
    let f = filter(shard, t, o);
    let continuing = o.continue_token.is_some();
    // A continue token's revision must still be in etcd, as upstream reads continued pages from
    // etcd: once compacted away, the token is expired even if the cache still has the revision.
    let compacted = match (continuing, at) {
        (true, Some(rv)) => match shard.store(&t.info).ensure_not_compacted(rv).await {
            Err(StorageError::Compacted { .. }) => Some(CacheError::TooOld { requested: rv, oldest: rv.saturating_add(1) }),
            Err(e) => return Err(storage_err(e)),
            Ok(()) => None,
        },
        _ => None,
    };
    let listed = match compacted {
        Some(e) => Err(e),
        None => cache.list(at, &f, after.as_deref(), o.limit.map(|l| l as usize), o.selects_everything()),
    };
    let page = listed.map_err(|e| match e {
        CacheError::TooOld { .. } if continuing => {
            // Offer an inconsistent continuation from the same key, as upstream does.
            let c = o.continue_token.as_ref().expect("continuing");
            let token = ContinueToken { rv: None, after: c.after.clone(), epoch: None }.encode();
            ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                Some(token),
            )
        }
        other => cache_err(other, continuing),
    })?;
    let token = page.continue_after.as_ref().map(|k| {
        let (ns, name) = shardplane_watchcache::split_cache_key(k);
        ContinueToken { rv: Some(page.rv), after: (ns.to_owned(), name.to_owned()), epoch: None }.encode()
    });
    let mut meta = json!({"resourceVersion": page.rv.to_string()});
    if let Some(c) = token {
        meta["continue"] = c.into();
    }
    if let Some(r) = page.remaining {
        meta["remainingItemCount"] = r.into();
    }
    if let Some(s) = &o.shard_selector {
        meta["shardInfo"] = json!({"selector": s.canonical()});
    }
    render::render(&view, &t.info, &page.items, meta, false)
}

