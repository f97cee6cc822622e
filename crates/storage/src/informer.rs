//! Every object of a few kinds, followed across the whole hash space (as each kube-apiserver's
//! informers follow them): what a shard's admission plugins read (classes, limit ranges) and
//! what the router's RBAC decisions read (roles and bindings). Their objects live on whichever
//! shard owns their keys; every process that decides from them needs them all.
//!
//! Bounded: a kind holds at most the `max` objects it was started with. Past that the informer
//! lets what it read go, a reader of the kind is told it is unavailable, and the kind is listed
//! again every few seconds until it fits.
//!
//! A reader that must not decide from old state asks [`Informers::current_within`]: started
//! with `progress_every`, each kind asks its store for progress that often, and is current as
//! of the last time the store confirmed that every change had been taken.

use crate::follow::{self, FollowOptions, Followed};
use crate::Storage;
use serde_json::Value;
use shardplane_keyspace::{etcd_layout, HashRange};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

/// How long a reader waits for a kind's first list before it is told the kind is unavailable.
const FIRST_LIST: Duration = Duration::from_secs(5);

/// One kind as last heard from the store.
#[derive(Debug, Default)]
pub enum Held {
    /// Not listed yet.
    #[default]
    Loading,
    /// Every object, by etcd key.
    Objects(BTreeMap<Vec<u8>, Arc<Value>>),
    /// More than the bound.
    TooMany,
}

/// One followed kind.
struct Kind {
    group: &'static str,
    plural: &'static str,
    held: watch::Receiver<Arc<Held>>,
    /// When the store last confirmed that every change of the kind had been taken.
    current_at: Arc<Mutex<Option<Instant>>>,
}

/// The followed kinds.
pub struct Informers {
    kinds: Vec<Kind>,
    /// The most objects held of one kind.
    max: usize,
}

/// How informers run.
#[derive(Clone, Copy, Debug)]
pub struct InformerOptions {
    /// The most objects held of one kind.
    pub max: usize,
    /// Ask the store for progress this often (for [`Informers::current_within`]).
    pub progress_every: Option<Duration>,
}

impl Informers {
    /// Starts one follower per kind of `kinds` (group, plural), each on the store `store_of`
    /// gives for it.
    pub fn start(kinds: &[(&'static str, &'static str)], store_of: impl Fn(&str, &str) -> Storage, stop: &CancellationToken, options: InformerOptions) -> Self {
        let kinds = kinds
            .iter()
            .map(|&(group, plural)| {
                let (tx, held) = watch::channel(Arc::new(Held::Loading));
                let current_at = Arc::new(Mutex::new(None));
                let stop = stop.child_token();
                let progress = options.progress_every.map(|every| {
                    let notify = Arc::new(Notify::new());
                    tokio::spawn(ask_progress(notify.clone(), every, stop.clone()));
                    notify
                });
                tokio::spawn(run(store_of(group, plural), group, plural, options.max, tx, current_at.clone(), progress, stop));
                Kind { group, plural, held, current_at }
            })
            .collect();
        Self { kinds, max: options.max }
    }

    fn kind(&self, group: &str, plural: &str) -> Result<&Kind, String> {
        self.kinds.iter().find(|k| (k.group, k.plural) == (group, plural)).ok_or_else(|| format!("{plural} are not followed here"))
    }

    /// Every held object of (group, plural), once listed; `Err` (why it is unavailable) while
    /// loading past a few seconds or when the kind has too many objects.
    pub async fn objects(&self, group: &str, plural: &str) -> Result<Vec<Arc<Value>>, String> {
        let mut rx = self.kind(group, plural)?.held.clone();
        let held = match tokio::time::timeout(FIRST_LIST, rx.wait_for(|h| !matches!(**h, Held::Loading))).await {
            Ok(Ok(h)) => h.clone(),
            _ => return Err(format!("the {plural} have not been read yet")),
        };
        match &*held {
            Held::Objects(m) => Ok(m.values().cloned().collect()),
            Held::TooMany => Err(format!("more than {} {plural}: too many to hold", self.max)),
            Held::Loading => unreachable!("waited past loading"),
        }
    }

    /// What is held of (group, plural), told again at every change.
    pub fn subscribe(&self, group: &str, plural: &str) -> Result<watch::Receiver<Arc<Held>>, String> {
        Ok(self.kind(group, plural)?.held.clone())
    }

    /// Whether the store has confirmed, within `bound`, that every kind held every change.
    pub fn current_within(&self, bound: Duration) -> bool {
        self.kinds.iter().all(|k| k.current_at.lock().expect("not poisoned").is_some_and(|at| at.elapsed() <= bound))
    }
}

async fn ask_progress(notify: Arc<Notify>, every: Duration, stop: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while stop.run_until_cancelled(tick.tick()).await.is_some() {
        notify.notify_one();
    }
}

fn parsed(bytes: &[u8]) -> Option<Arc<Value>> {
    serde_json::from_slice(bytes).ok().map(Arc::new)
}

#[allow(clippy::too_many_arguments)]
async fn run(storage: Storage, group: &'static str, plural: &'static str, max: usize, tx: watch::Sender<Arc<Held>>, current_at: Arc<Mutex<Option<Instant>>>, progress: Option<Arc<Notify>>, stop: CancellationToken) {
    let (start, end) = etcd_layout::range_keys(group, plural, HashRange::FULL);
    let mut objects: BTreeMap<Vec<u8>, Arc<Value>> = BTreeMap::new();
    let options = FollowOptions { max_retry: Duration::from_secs(10), progress, ..FollowOptions::fixed(format!("{plural} informer"), Duration::from_millis(500), stop) };
    follow::follow(&storage, &start, &end, options, |f| {
        // A list, or a progress report, says every change up to a moment ago has been taken
        // (a change alone says nothing of later ones).
        let confirmed = !matches!(f, Followed::Changed(_));
        match f {
            Followed::Listed { kvs, .. } => objects = kvs.iter().filter_map(|kv| Some((kv.key.clone(), parsed(&kv.value)?))).collect(),
            Followed::Changed(events) => {
                for e in events {
                    if e.deleted {
                        objects.remove(&e.kv.key);
                    } else if let Some(v) = parsed(&e.kv.value) {
                        objects.insert(e.kv.key.clone(), v);
                    }
                }
            }
            Followed::Progress(_) => {
                *current_at.lock().expect("not poisoned") = Some(Instant::now());
                return Ok(());
            }
        }
        if objects.len() > max {
            // Not held: what was read is let go, and the kind is listed again after the
            // follower's pause (up to 10 s) to see whether it has shrunk.
            objects.clear();
            *current_at.lock().expect("not poisoned") = None;
            tx.send_replace(Arc::new(Held::TooMany));
            return Err(format!("more than {max} {plural}: not held"));
        }
        tx.send_replace(Arc::new(Held::Objects(objects.clone())));
        if confirmed {
            *current_at.lock().expect("not poisoned") = Some(Instant::now());
        }
        Ok(())
    })
    .await;
}
