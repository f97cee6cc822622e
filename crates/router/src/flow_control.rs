//! Priority and fairness at the router (RFC 0013, "Where fairness is enforced"): every client
//! request is classified and given its seats here, after authentication and impersonation and
//! before authorization, as upstream orders it; the shards judge it again by the same objects
//! (the router names its user to them). A list's width is counted from the store: how many keys
//! its resource has, asked at most once a [`COUNT_EVERY`] per resource (upstream refreshes
//! `apiserver_storage_objects` as seldom), and not known (one seat) until the first answer.

use crate::state::RouterState;
use shardplane_flowcontrol::{follow, Gate, StoredCount, Unnamed};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How old a resource's count may be before it is asked again.
pub const COUNT_EVERY: Duration = Duration::from_secs(60);

/// One resource's count: the last answer (none yet), when it was asked, and whether a question
/// is out.
#[derive(Default)]
struct Count {
    objects: Option<u64>,
    asked: Option<Instant>,
    asking: bool,
}

/// The router's gate over `seats` seats, configured from the store from now on; its metrics go
/// into `registry`.
pub fn start(shards: &Arc<RouterState>, seats: u32, registry: &prometheus::Registry, stop: &CancellationToken) -> Arc<Gate> {
    // Only resources the catalog serves are counted, so the map is bounded by the catalog.
    let counts: Arc<Mutex<HashMap<(String, String), Count>>> = Arc::default();
    let weak = Arc::downgrade(shards);
    let stored: StoredCount = Arc::new(move |group, plural| {
        let shards = weak.upgrade()?;
        let info = shards.catalog.now().resources.iter().find(|r| r.group == group && r.plural == plural)?.clone();
        let key = (group.to_owned(), plural.to_owned());
        let mut all = counts.lock().unwrap_or_else(|p| p.into_inner());
        let c = all.entry(key.clone()).or_default();
        if !c.asking && c.asked.is_none_or(|at| at.elapsed() >= COUNT_EVERY) {
            c.asking = true;
            let counts = counts.clone();
            tokio::spawn(async move {
                let prefix = shardplane_keyspace::etcd_layout::resource_prefix(info.storage_group(), &info.plural);
                let answer = shards.stores.of(info.storage_group(), &info.plural).count_prefix(prefix.as_bytes()).await;
                let mut all = counts.lock().unwrap_or_else(|p| p.into_inner());
                let c = all.entry(key).or_default();
                c.asking = false;
                c.asked = Some(Instant::now());
                match answer {
                    Ok(n) => c.objects = Some(n),
                    Err(e) => tracing::debug!(resource = %info.plural, error = %e, "objects not counted; a list's width stays as it was"),
                }
            });
        }
        c.objects
    });
    let gate = Gate::new(seats, Unnamed::Anonymous, stored, registry);
    follow::follow(gate.clone(), |g, p| shards.stores.of(g, p).clone(), stop);
    gate
}
