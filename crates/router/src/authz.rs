//! Authorization at the router (RFC 0012, "Authorization"): after authentication, every request
//! is decided by the modes of `--authorization-mode` in order (upstream's union: the first that
//! allows wins; none does: 403 with upstream's message), `system:masters` allowed before any.
//!
//! RBAC decides from every Role, ClusterRole and binding of every shard, followed from the store
//! by informers that ask the store for progress every second. A decision is made only from a
//! state the store confirmed current within [`STALENESS_BOUND`]; past it the router answers 503
//! rather than decide from older state. Decisions are cached (bounded, with expiry) under the
//! generation of the state they were made from, so a change to any RBAC object is never
//! answered from the cache.
//!
//! Writes of roles and bindings are checked for escalation here too ([`Authorizer::check_rbac_write`]):
//! a user grants only what it holds, unless it may `escalate` the role or `bind` to it.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Response;
use axum::middleware::Next;
use serde_json::Value;
use shardplane_apimachinery::ApiError;
use shardplane_http::query::Query;
use shardplane_identity::rbac::{self, Attributes, Decision, Objects, Policy, PolicyRule};
use shardplane_identity::user::{UserInfo, MASTERS};
use shardplane_storage::informer::{Held, InformerOptions, Informers};
use shardplane_storage::Stores;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The oldest RBAC state a decision is made from: the store must have confirmed, this recently,
/// that the router had taken every change.
pub const STALENESS_BOUND: Duration = Duration::from_secs(5);

/// How often each RBAC informer asks the store whether it has every change.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The most objects of one RBAC kind the router holds; past it RBAC answers 503 until it fits.
pub const MAX_OBJECTS: usize = 100_000;

/// The most decisions cached, and for how long one is kept.
const CACHED_DECISIONS: u64 = 10_000;
const DECISION_TTL: Duration = Duration::from_secs(60);

const GROUP: &str = "rbac.authorization.k8s.io";
/// The RBAC kinds, in the order [`Objects`] takes them.
const KINDS: [(&str, &str); 4] = [(GROUP, "clusterroles"), (GROUP, "roles"), (GROUP, "clusterrolebindings"), (GROUP, "rolebindings")];

/// One of `--authorization-mode`'s modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    AlwaysAllow,
    AlwaysDeny,
    Rbac,
}

/// Parses `--authorization-mode` (comma-separated, upstream's names).
pub fn parse_modes(flag: &str) -> Result<Vec<Mode>, String> {
    let mut modes = Vec::new();
    for m in flag.split(',').map(str::trim) {
        let mode = match m {
            "AlwaysAllow" => Mode::AlwaysAllow,
            "AlwaysDeny" => Mode::AlwaysDeny,
            "RBAC" => Mode::Rbac,
            "Node" | "ABAC" | "Webhook" => return Err(format!("authorization mode {m:?} is not supported (supported: AlwaysAllow, AlwaysDeny, RBAC)")),
            other => return Err(format!("authorization mode {other:?} is not a valid mode")),
        };
        if modes.contains(&mode) {
            return Err(format!("authorization mode {m:?} is specified more than once"));
        }
        modes.push(mode);
    }
    Ok(modes)
}

/// The RBAC objects as one policy, and which state of them it is.
pub struct Snapshot {
    /// Counts the states built; a cached decision names the one it was made from.
    pub generation: u64,
    pub policy: Policy,
}

/// What RBAC decides from now.
#[derive(Clone)]
enum Built {
    /// A kind has not been listed yet (at start).
    Loading,
    /// No policy: a kind is too large to hold.
    Failed(String),
    Ready(Arc<Snapshot>),
}

struct Rbac {
    informers: Arc<Informers>,
    /// The latest policy, or why there is none.
    snapshot: watch::Receiver<Built>,
    decisions: moka::sync::Cache<(u64, UserInfo, Attributes), Decision>,
}

/// The authorization modes and what they decide from.
pub struct Authorizer {
    modes: Vec<Mode>,
    rbac: Option<Rbac>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").field("modes", &self.modes).finish()
    }
}

impl Default for Authorizer {
    /// `AlwaysAllow`, upstream's default mode.
    fn default() -> Self {
        Self { modes: vec![Mode::AlwaysAllow], rbac: None }
    }
}

fn is_master(user: &UserInfo) -> bool {
    user.groups.iter().any(|g| g == MASTERS)
}

impl Authorizer {
    /// The modes, RBAC's informers started on `stores` when RBAC is one of them.
    pub fn start(modes: Vec<Mode>, stores: &Stores, stop: &CancellationToken) -> Self {
        let rbac = modes.contains(&Mode::Rbac).then(|| {
            let informers = Arc::new(Informers::start(&KINDS, |g, p| stores.of(g, p).clone(), stop, InformerOptions { max: MAX_OBJECTS, progress_every: Some(PROGRESS_EVERY) }));
            let (tx, snapshot) = watch::channel(Built::Loading);
            tokio::spawn(build_snapshots(informers.clone(), tx, stop.child_token()));
            let decisions = moka::sync::Cache::builder().max_capacity(CACHED_DECISIONS).time_to_live(DECISION_TTL).build();
            Rbac { informers, snapshot, decisions }
        });
        Self { modes, rbac }
    }

    /// Whether RBAC is one of the modes.
    pub fn uses_rbac(&self) -> bool {
        self.rbac.is_some()
    }

    /// The RBAC policy, if it is current within [`STALENESS_BOUND`] (503 otherwise).
    pub async fn policy(&self) -> Result<Option<Arc<Snapshot>>, ApiError> {
        let Some(rbac) = &self.rbac else { return Ok(None) };
        let mut rx = rbac.snapshot.clone();
        // At start, the first lists are waited for briefly (only then: a kind too large to hold
        // is answered at once).
        let _ = tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|s| !matches!(s, Built::Loading))).await;
        let built = rx.borrow().clone();
        let snapshot = match built {
            Built::Ready(s) => s,
            Built::Loading => return Err(ApiError::unavailable("authorization: the RBAC objects have not been read yet")),
            Built::Failed(why) => return Err(ApiError::unavailable(format!("authorization: {why}"))),
        };
        if !rbac.informers.current_within(STALENESS_BOUND) {
            return Err(ApiError::unavailable(format!("authorization: the RBAC objects have not been confirmed current in the last {}s", STALENESS_BOUND.as_secs())));
        }
        Ok(Some(snapshot))
    }

    /// Why the router is not ready to authorize yet (upstream's `rbac/bootstrap-roles`
    /// readiness check): RBAC's state not current, or a bootstrap ClusterRole or
    /// ClusterRoleBinding not there yet (every shard creates its own at start).
    pub async fn bootstrap_pending(&self) -> Option<String> {
        let snapshot = match self.policy().await {
            Ok(Some(s)) => s,
            Ok(None) => return None,
            Err(e) => return Some(e.message),
        };
        let name = |o: &Value| o["metadata"]["name"].as_str().unwrap_or("").to_owned();
        if let Some(role) = rbac::bootstrap::cluster_roles().iter().map(name).find(|n| snapshot.policy.cluster_role(n).is_none()) {
            return Some(format!("clusterrole {role:?} not created yet"));
        }
        rbac::bootstrap::cluster_role_bindings().iter().map(name).find(|n| !snapshot.policy.has_cluster_role_binding(n)).map(|b| format!("clusterrolebinding {b:?} not created yet"))
    }

    /// What the modes decide for `user` asking `attrs`: `system:masters` first, then each mode
    /// in order until one allows.
    pub async fn decide(&self, user: &UserInfo, attrs: &Attributes) -> Result<Decision, ApiError> {
        if is_master(user) {
            return Ok(Decision::Allow(String::new()));
        }
        let mut reasons = Vec::new();
        for mode in &self.modes {
            let decision = match mode {
                Mode::AlwaysAllow => Decision::Allow(String::new()),
                Mode::AlwaysDeny => return Ok(Decision::NoOpinion("Everything is forbidden.".into())),
                Mode::Rbac => {
                    let rbac = self.rbac.as_ref().expect("started with RBAC");
                    let snapshot = self.policy().await?.expect("RBAC is on");
                    let key = (snapshot.generation, user.clone(), attrs.clone());
                    rbac.decisions.get_with(key, || snapshot.policy.authorize(user, attrs))
                }
            };
            if decision.allowed() {
                return Ok(decision);
            }
            if !decision.reason().is_empty() {
                reasons.push(decision.reason().to_owned());
            }
        }
        Ok(Decision::NoOpinion(reasons.join(", ")))
    }

    /// The rules `user` holds in `namespace` (SelfSubjectRulesReview): RBAC's, or everything
    /// for `system:masters` and `AlwaysAllow`; the errors of bindings whose roles are missing.
    pub async fn rules_for(&self, user: &UserInfo, namespace: &str) -> Result<(Vec<PolicyRule>, Vec<String>), ApiError> {
        if is_master(user) || self.modes.first() == Some(&Mode::AlwaysAllow) {
            return Ok((vec![everything(), everything_paths()], Vec::new()));
        }
        match self.policy().await? {
            Some(s) => Ok(s.policy.rules_for(user, namespace)),
            None => Ok((Vec::new(), Vec::new())),
        }
    }

    /// Upstream's escalation check on creating or updating `obj` (a Role, ClusterRole,
    /// RoleBinding or ClusterRoleBinding, as it would be stored) in `namespace`: allowed to
    /// `system:masters`, to a user who may `escalate` the role (`bind` to the role a binding
    /// refers to), or to one who holds every rule it grants; 403 naming what is not held
    /// otherwise. A no-op unless RBAC is on.
    pub async fn check_rbac_write(&self, user: &UserInfo, plural: &str, namespace: &str, obj: &Value) -> Result<(), ApiError> {
        let Some(snapshot) = self.policy().await? else { return Ok(()) };
        if is_master(user) {
            return Ok(());
        }
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        let (kind, role) = (obj["roleRef"]["kind"].as_str().unwrap_or(""), obj["roleRef"]["name"].as_str().unwrap_or(""));
        // May the user escalate the role, or bind to the role the binding refers to?
        let special = match plural {
            "roles" | "clusterroles" => Attributes::resource("escalate", GROUP, plural, "", namespace, name),
            "rolebindings" | "clusterrolebindings" => Attributes::resource("bind", GROUP, if kind == "Role" { "roles" } else { "clusterroles" }, "", namespace, role),
            _ => return Ok(()),
        };
        if self.decide(user, &special).await?.allowed() {
            return Ok(());
        }
        let granted: Vec<PolicyRule> = match plural {
            "roles" | "clusterroles" => serde_json::from_value(obj["rules"].clone()).unwrap_or_default(),
            _ => snapshot.policy.referenced_rules(namespace, kind, role).map_err(|e| ApiError::forbidden(GROUP, plural, name, &e))?.to_vec(),
        };
        let (owned, errors) = snapshot.policy.rules_for(user, namespace);
        let missing = rbac::missing_rules(&owned, &granted);
        if !missing.is_empty() {
            return Err(ApiError::forbidden(GROUP, plural, name, &rbac::escalation_message(user, &missing, &errors)));
        }
        // An aggregation rule can gather anything: it takes holding everything.
        let aggregates = plural == "clusterroles" && obj["aggregationRule"]["clusterRoleSelectors"].as_array().is_some_and(|s| !s.is_empty());
        if aggregates && !rbac::missing_rules(&owned, &[everything(), everything_paths()]).is_empty() {
            return Err(ApiError::forbidden(GROUP, plural, name, "must have cluster-admin privileges to use the aggregationRule"));
        }
        Ok(())
    }
}

fn everything() -> PolicyRule {
    let all = || vec![rbac::rules::ALL.to_owned()];
    PolicyRule { verbs: all(), api_groups: all(), resources: all(), ..Default::default() }
}

fn everything_paths() -> PolicyRule {
    let all = || vec![rbac::rules::ALL.to_owned()];
    PolicyRule { verbs: all(), non_resource_urls: all(), ..Default::default() }
}

/// Rebuilds the policy whenever one of the kinds changes.
async fn build_snapshots(informers: Arc<Informers>, tx: watch::Sender<Built>, stop: CancellationToken) {
    let mut kinds: Vec<watch::Receiver<Arc<Held>>> = KINDS.iter().map(|(g, p)| informers.subscribe(g, p).expect("followed")).collect();
    let mut generation = 0;
    loop {
        let held: Vec<Arc<Held>> = kinds.iter_mut().map(|k| k.borrow_and_update().clone()).collect();
        let maps: Result<Vec<_>, Built> = held
            .iter()
            .zip(KINDS)
            .map(|(h, (_, plural))| match &**h {
                Held::Objects(m) => Ok(m),
                Held::Loading => Err(Built::Loading),
                Held::TooMany => Err(Built::Failed(format!("more than {MAX_OBJECTS} {plural}: too many to hold"))),
            })
            .collect();
        let next = match maps {
            Ok(m) => {
                let values = |i: usize| m[i].values().map(|v| &**v).collect();
                generation += 1;
                let objects = Objects { cluster_roles: values(0), roles: values(1), cluster_role_bindings: values(2), role_bindings: values(3) };
                Built::Ready(Arc::new(Snapshot { generation, policy: Policy::new(&objects) }))
            }
            Err(why) => why,
        };
        let _previous = tx.send_replace(next);
        let changed = futures::future::select_all(kinds.iter_mut().map(|k| Box::pin(k.changed())));
        tokio::select! {
            (result, _, _) = changed => if result.is_err() { return },
            _ = stop.cancelled() => return,
        }
    }
}

/// The 403 for `user` not allowed `attrs`.
pub fn forbidden(user: &UserInfo, attrs: &Attributes, reason: &str) -> ApiError {
    ApiError::forbidden_worded(&attrs.api_group, &attrs.resource, &attrs.name, rbac::forbidden_message(user, attrs, reason))
}

/// The middleware: decides the request of the user [`crate::authn`] named, or refuses it.
pub async fn authorize(State(authz): State<Arc<Authorizer>>, req: Request, next: Next) -> Response<Body> {
    let user = req.extensions().get::<UserInfo>().cloned().unwrap_or_else(shardplane_identity::authn::anonymous);
    let query = Query::parse(req.uri().query().unwrap_or(""));
    let attrs = rbac::request::attributes(req.method().as_str(), req.uri().path(), query.is_watch(), query.get("fieldSelector").unwrap_or(""));
    let decided = authz.decide(&user, &attrs).await;
    if let (Ok(d), Some(r)) = (&decided, req.extensions().get::<crate::audit::Recorder>()) {
        r.decision(d.allowed(), d.reason());
    }
    match decided {
        Ok(d) if d.allowed() => next.run(req).await,
        Ok(d) => shardplane_http::body::error(&forbidden(&user, &attrs, d.reason())),
        Err(e) => shardplane_http::body::error(&e),
    }
}
