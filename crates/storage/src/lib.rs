//! # shardplane-storage
//!
//! Owns every conversation with etcd: create-if-absent, compare-and-swap updates and deletes on
//! `mod_revision`, reads of one key, paged reads of a key range at one revision, range watches
//! with previous values and in-band progress, the current revision, periodic compaction, the
//! stored range map ([`range_map`]), membership on leases ([`members`]) and which etcd holds
//! which resource ([`contract`]).
//!
//! It must never interpret object bytes or know about HTTP: values go in and come out as bytes,
//! and revisions are etcd's own. The key layout lives in `shardplane-keyspace`.

mod compaction;
mod companions;
mod endpoints;
mod history;
pub mod maintenance;
pub mod contract;
pub mod follow;
pub mod informer;
pub mod members;
mod paged;
pub use paged::{RangeReader, PIECE_KEYS};
pub mod range_map;
pub mod roles;
pub mod space;
mod ttl_leases;
pub use ttl_leases::is_lease_not_found;
mod watch;

pub use compaction::run_compactor;
pub use companions::{Companion, Primary};
pub use contract::{StorageContract, Stores};
pub use history::HistoryBound;
pub use watch::{ProgressRequester, RangeWatch, RangeWatchStream, WatchEvent, WatchItem};

use bytes::Bytes;
use etcd_client::{Client, GetOptions};

/// A key, its value and its revisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: Bytes,
    pub mod_revision: u64,
    pub create_revision: u64,
}

impl Kv {
    fn from_etcd(kv: &etcd_client::KeyValue) -> Self {
        Self {
            key: kv.key().to_vec(),
            value: Bytes::copy_from_slice(kv.value()),
            mod_revision: kv.mod_revision() as u64,
            create_revision: kv.create_revision() as u64,
        }
    }
}

/// Why a storage call failed.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// Create of a key that exists.
    #[error("key already exists")]
    AlreadyExists,
    /// The key does not exist.
    #[error("key not found")]
    NotFound,
    /// A compare-and-swap lost: the key's current state (None if it is gone).
    #[error("revision precondition failed")]
    Conflict { current: Option<Kv> },
    /// The requested revision was compacted.
    #[error("required revision {requested} has been compacted (compacted at {compacted})")]
    Compacted { requested: u64, compacted: u64 },
    /// A transaction's companion key (see [`Storage::commit`]) was not as expected: the one at
    /// `index` exists where it was to be created, or changed where it was to be deleted.
    #[error("companion key {index} precondition failed")]
    CompanionConflict { index: usize },
    /// etcd could not be reached or answered with an error.
    #[error("etcd: {0}")]
    Etcd(String),
}

impl From<etcd_client::Error> for StorageError {
    fn from(e: etcd_client::Error) -> Self {
        StorageError::Etcd(e.to_string())
    }
}

/// The socket path of a `unix:` endpoint (`unix:/run/etcd.sock`, `unix:///run/etcd.sock`).
pub fn unix_socket_path(endpoint: &str) -> Option<&str> {
    endpoint.strip_prefix("unix://").or_else(|| endpoint.strip_prefix("unix:")).filter(|p| !p.is_empty())
}

/// Result alias.
pub type Result<T> = std::result::Result<T, StorageError>;

/// Page size of range reads (keeps each etcd response well under its 4 MiB gRPC limit).
pub const RANGE_PAGE: i64 = 500;

/// One page of a range read.
#[derive(Debug)]
pub struct RangePage {
    pub kvs: Vec<Kv>,
    /// The revision the page was read at.
    pub revision: u64,
    /// Where the next page starts, if there is more.
    pub next: Option<Vec<u8>>,
    /// How many keys `[from, end)` holds at the revision (etcd counts them on every read).
    pub count: u64,
}

/// The client certificate and CA every connection of this process to an `https://` store uses
/// (upstream's `--etcd-cafile`, `--etcd-certfile`, `--etcd-keyfile`; RFC 0012): given once, at
/// start, as upstream's flags apply to every store a process reaches.
#[derive(Clone, Debug)]
pub struct StoreTls {
    /// The CA that signed the store's serving certificate (PEM).
    pub ca: Vec<u8>,
    /// This process's client certificate (PEM).
    pub cert: Vec<u8>,
    /// Its key (PEM).
    pub key: Vec<u8>,
}

static STORE_TLS: std::sync::OnceLock<StoreTls> = std::sync::OnceLock::new();

impl StoreTls {
    /// Reads the three files (upstream's flags; none given: `None`, all three or none).
    pub fn from_files(ca: Option<&std::path::Path>, cert: Option<&std::path::Path>, key: Option<&std::path::Path>) -> std::result::Result<Option<Self>, String> {
        let read = |flag: &str, p: &std::path::Path| std::fs::read(p).map_err(|e| format!("{flag} {}: {e}", p.display()));
        match (ca, cert, key) {
            (None, None, None) => Ok(None),
            (Some(ca), Some(cert), Some(key)) => Ok(Some(Self { ca: read("--etcd-cafile", ca)?, cert: read("--etcd-certfile", cert)?, key: read("--etcd-keyfile", key)? })),
            _ => Err("--etcd-cafile, --etcd-certfile and --etcd-keyfile go together".into()),
        }
    }

    /// Makes these the credentials of every store connection this process opens from now on;
    /// a second call is refused (the first stays).
    pub fn install(self) -> std::result::Result<(), String> {
        STORE_TLS.set(self).map_err(|_| "the store's TLS credentials are already set".to_owned())
    }
}

/// Upstream's store TLS flags, for every binary that reaches the store.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug, Default)]
pub struct StoreTlsFlags {
    /// The CA of the store's serving certificate (PEM), as kube-apiserver's flag; with
    /// `--etcd-certfile` and `--etcd-keyfile`, for `https://` endpoints.
    #[arg(long)]
    pub etcd_cafile: Option<std::path::PathBuf>,
    /// The client certificate presented to the store (PEM).
    #[arg(long)]
    pub etcd_certfile: Option<std::path::PathBuf>,
    /// Its key (PEM).
    #[arg(long)]
    pub etcd_keyfile: Option<std::path::PathBuf>,
}

#[cfg(feature = "cli")]
impl StoreTlsFlags {
    /// Reads the files and makes them this process's store credentials (nothing when none is
    /// given).
    pub fn install(&self) -> std::result::Result<(), String> {
        match StoreTls::from_files(self.etcd_cafile.as_deref(), self.etcd_certfile.as_deref(), self.etcd_keyfile.as_deref())? {
            Some(tls) => tls.install(),
            None => Ok(()),
        }
    }

    /// The same flags, to pass to a child process.
    pub fn to_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (flag, v) in [("--etcd-cafile", &self.etcd_cafile), ("--etcd-certfile", &self.etcd_certfile), ("--etcd-keyfile", &self.etcd_keyfile)] {
            if let Some(p) = v {
                out.push(flag.to_owned());
                out.push(p.to_string_lossy().into_owned());
            }
        }
        out
    }
}

/// A handle on etcd; cheap to clone.
#[derive(Clone)]
pub struct Storage {
    /// One client per member, and the one in use (RFC 0016).
    endpoints: std::sync::Arc<endpoints::Endpoints>,
    /// Leases for objects that expire, shared (RFC 0015).
    ttl_leases: std::sync::Arc<ttl_leases::TtlLeases>,
    /// The last floor [`Storage::history_floor`] found, shared by every clone.
    history_floor: std::sync::Arc<tokio::sync::Mutex<Option<history::Floor>>>,
}

impl Storage {
    /// Whether `other` is this same connection (two resources on one store share one; only
    /// keys on one store can be written in one transaction).
    pub fn is_same_store(&self, other: &Storage) -> bool {
        std::sync::Arc::ptr_eq(&self.endpoints, &other.endpoints)
    }

    /// Connects to the given endpoints (`http://127.0.0.1:2379`), or to one unix socket
    /// (`unix:/path/to/socket`, or `unix:///path/to/socket`, as etcd spells it).
    pub async fn connect(endpoints: &[String]) -> Result<Self> {
        const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
        const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
        // HTTP/2 keepalive: a connection to a member that vanished without closing it (a
        // black-holed host, a frozen process) is noticed within interval + timeout, and the
        // process moves to another member (RFC 0016). etcd refuses pings more often than every
        // 5 s (its --grpc-keepalive-min-time).
        const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
        const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);
        let sockets: Vec<&str> = endpoints.iter().filter_map(|e| unix_socket_path(e)).collect();
        if sockets.is_empty() {
            if endpoints.is_empty() {
                return Err(StorageError::Etcd("no etcd endpoint given".into()));
            }
            // Every request requires a leader: a member cut off from its peers refuses at once
            // rather than answering from a minority (RFC 0016).
            let mut opts = etcd_client::ConnectOptions::new()
                .with_connect_timeout(CONNECT_TIMEOUT)
                .with_timeout(TIMEOUT)
                .with_keep_alive(KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT)
                .with_keep_alive_while_idle(true)
                .with_require_leader(true);
            if endpoints.iter().any(|e| e.starts_with("https://")) {
                let Some(tls) = STORE_TLS.get() else {
                    return Err(StorageError::Etcd(format!("{endpoints:?}: an https store needs --etcd-cafile, --etcd-certfile and --etcd-keyfile")));
                };
                let config = etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(&tls.ca)).identity(etcd_client::Identity::from_pem(&tls.cert, &tls.key));
                opts = opts.with_tls(config);
            }
            // One client per member (each connects lazily, so a member down at start is no
            // obstacle); processes start on different members to spread their load.
            let mut clients = Vec::with_capacity(endpoints.len());
            for endpoint in endpoints {
                clients.push(Client::connect([endpoint], Some(opts.clone())).await?);
            }
            return Ok(Self::over(clients));
        }
        let [path] = sockets[..] else {
            return Err(StorageError::Etcd(format!("a unix socket endpoint must be the only endpoint, got {endpoints:?}")));
        };
        let path = std::path::PathBuf::from(path);
        // The URI names no host: the connector dials the socket whatever it says.
        let channel = tonic::transport::Endpoint::from_static("http://unix.socket")
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(TIMEOUT)
            .connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move { Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
            }));
        Ok(Self::over(vec![Client::from_channel(etcd_client::Channel::Tonic(channel), None).await?]))
    }

    fn over(clients: Vec<Client>) -> Self {
        let first = std::process::id() as usize;
        Self { endpoints: std::sync::Arc::new(endpoints::Endpoints::new(clients, first)), ttl_leases: Default::default(), history_floor: Default::default() }
    }

    /// Runs a read, or a request whose repetition does no harm, on the member in use, moving to
    /// another member and trying again while the store is out of reach (RFC 0016).
    pub(crate) async fn repeatable<T, F, Fut>(&self, request: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        Ok(self.endpoints.call(endpoints::Repeat::Safe, request).await?.0)
    }

    /// Runs a write, trying it again only where etcd certainly did not take it (RFC 0016).
    pub(crate) async fn write<T, F, Fut>(&self, request: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        Ok(self.endpoints.call(endpoints::Repeat::OnlyIfNotTaken, request).await?.0)
    }

    /// The members and the one in use.
    pub(crate) fn endpoints(&self) -> &std::sync::Arc<endpoints::Endpoints> {
        &self.endpoints
    }

    /// Runs a write that may be tried again whatever happened to an earlier attempt; also says
    /// whether an earlier attempt's fate is unknown, so that a precondition failing now may be
    /// the earlier attempt's own success.
    async fn write_told_apart<T, F, Fut>(&self, request: F) -> Result<(T, bool)>
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        Ok(self.endpoints.call(endpoints::Repeat::Safe, request).await?)
    }

    /// The raw client of the member in use, for maintenance.
    pub fn client(&self) -> Client {
        self.endpoints.current().1
    }

    /// The current revision of the store (a quorum read that returns no data).
    pub async fn current_revision(&self) -> Result<u64> {
        // One key's count, of a key every role may read (RFC 0012's store roles): the header's
        // revision is the store's whatever the key.
        let resp = self.repeatable(|c| async move { c.kv_client().get(shardplane_keyspace::etcd_layout::REGISTRY_PREFIX, Some(GetOptions::new().with_count_only())).await }).await?;
        Ok(resp.header().map_or(0, |h| h.revision() as u64))
    }

    /// How many keys start with `prefix`, now (a count-only range: no values are sent).
    pub async fn count_prefix(&self, prefix: &[u8]) -> Result<u64> {
        let end = shardplane_keyspace::etcd_layout::prefix_end(prefix);
        let resp = self.repeatable(|c| {
            let end = end.clone();
            async move { c.kv_client().get(prefix, Some(GetOptions::new().with_range(end).with_count_only())).await }
        })
        .await?;
        Ok(resp.count().max(0) as u64)
    }

    /// Reads one key at the current revision; also returns that revision.
    pub async fn get(&self, key: &[u8]) -> Result<(Option<Kv>, u64)> {
        let resp = self.repeatable(|c| async move { c.kv_client().get(key, None).await }).await?;
        let rev = resp.header().map_or(0, |h| h.revision() as u64);
        Ok((resp.kvs().first().map(Kv::from_etcd), rev))
    }

    /// Creates `key` only if it does not exist. Returns the new revision.
    pub async fn create(&self, key: &[u8], value: Vec<u8>) -> Result<u64> {
        self.commit(&Primary::Create { key: key.to_vec(), value }, &[]).await
    }

    /// Replaces `key` if its mod_revision is still `expected`. Returns the new revision.
    pub async fn update(&self, key: &[u8], value: Vec<u8>, expected: u64) -> Result<u64> {
        self.commit(&Primary::Update { key: key.to_vec(), value, expected }, &[]).await
    }

    /// Deletes `key` if its mod_revision is still `expected`. Returns the deletion revision.
    pub async fn delete(&self, key: &[u8], expected: u64) -> Result<u64> {
        self.commit(&Primary::Delete { key: key.to_vec(), expected }, &[]).await
    }

    /// Reads every key in `[start, end)` at `revision` (0: current). Returns the pairs and the
    /// revision they were read at. Pages internally so no single response is large, and reads a
    /// large range in pieces ([`RangeReader`]).
    pub async fn list_range(&self, start: &[u8], end: &[u8], revision: u64) -> Result<(Vec<Kv>, u64)> {
        let mut out = Vec::new();
        let mut reader = RangeReader::new(start, end, revision, RANGE_PAGE);
        while let Some(kvs) = reader.next_page(self).await? {
            out.extend(kvs);
        }
        Ok((out, reader.revision()))
    }

    /// One page of `[from, end)` at `revision` (0: current), at most `limit` keys.
    pub async fn range_page(&self, from: &[u8], end: &[u8], revision: u64, limit: i64) -> Result<RangePage> {
        self.read_page(from, end, revision, limit, false).await
    }

    /// One page, with the values or (`keys_only`) without them.
    async fn read_page(&self, from: &[u8], end: &[u8], revision: u64, limit: i64, keys_only: bool) -> Result<RangePage> {
        let mut opts = GetOptions::new().with_range(end.to_vec()).with_limit(limit);
        if revision > 0 {
            opts = opts.with_revision(revision as i64);
        }
        if keys_only {
            opts = opts.with_keys_only();
        }
        let resp = self
            .endpoints
            .call(endpoints::Repeat::Safe, |c| {
                let opts = opts.clone();
                async move { c.kv_client().get(from.to_vec(), Some(opts)).await }
            })
            .await
            .map_err(|e| compacted_or(e, revision))?
            .0;
        let read_at = if revision > 0 { revision } else { resp.header().map_or(0, |h| h.revision() as u64) };
        let kvs: Vec<Kv> = resp.kvs().iter().map(Kv::from_etcd).collect();
        let next = (resp.more() && !kvs.is_empty()).then(|| {
            let mut k = kvs.last().expect("non-empty").key.clone();
            k.push(0);
            k
        });
        Ok(RangePage { kvs, revision: read_at, next, count: resp.count().max(0) as u64 })
    }

    /// Keys only of `[start, end)`, all at the revision current when the read starts.
    pub async fn list_keys(&self, start: &[u8], end: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        let mut reader = RangeReader::new(start, end, 0, RANGE_PAGE * 10).keys_only();
        while let Some(kvs) = reader.next_page(self).await? {
            out.extend(kvs.into_iter().map(|kv| kv.key));
        }
        Ok(out)
    }

    /// Writes a value unconditionally (control data, tests).
    pub async fn put(&self, key: &[u8], value: Vec<u8>) -> Result<u64> {
        let resp = self.write(|c| {
            let value = value.clone();
            async move { c.kv_client().put(key, value, None).await }
        })
        .await?;
        Ok(resp.header().map_or(0, |h| h.revision() as u64))
    }

    /// Whether etcd still keeps `revision` (it has not been compacted away):
    /// [`StorageError::Compacted`] if it has.
    pub async fn ensure_not_compacted(&self, revision: u64) -> Result<()> {
        let opts = GetOptions::new().with_revision(revision as i64).with_count_only();
        match self.endpoints.call(endpoints::Repeat::Safe, |c| {
            let opts = opts.clone();
            async move { c.kv_client().get("\0", Some(opts)).await }
        }).await {
            Ok(_) => Ok(()),
            Err(e) => Err(compacted_or(e, revision)),
        }
    }

    /// Compacts history up to `revision`.
    pub async fn compact(&self, revision: u64) -> Result<()> {
        // Compacting twice to one revision is harmless (the second is told it is compacted).
        self.repeatable(|c| async move { c.kv_client().compact(revision as i64, None).await }).await?;
        Ok(())
    }

    /// Opens a watch of `[start, end)` delivering every change after `after_revision`.
    pub async fn watch_range(&self, start: &[u8], end: &[u8], after_revision: u64) -> Result<RangeWatch> {
        self.open_watch(start, end, true, after_revision).await
    }

    /// [`Storage::watch_range`], with previous values only when `prev_kv`.
    pub(crate) async fn open_watch(&self, start: &[u8], end: &[u8], prev_kv: bool, after_revision: u64) -> Result<RangeWatch> {
        // Opening a watch has no effect on the store: safe on any member. A watch etcd
        // refused (a compacted start) is an answer, returned as it is.
        let endpoints = &self.endpoints;
        let (opened, _) = endpoints.call_on_member(endpoints::Repeat::Safe, |member, c| RangeWatch::open(c, (start, end, prev_kv), after_revision, (endpoints.clone(), member))).await.map_err(|e| compacted_or(e, after_revision))?;
        opened
    }
}

fn compacted_or(e: etcd_client::Error, requested: u64) -> StorageError {
    let msg = e.to_string();
    if msg.contains("required revision has been compacted") {
        StorageError::Compacted { requested, compacted: 0 }
    } else {
        StorageError::Etcd(msg)
    }
}
