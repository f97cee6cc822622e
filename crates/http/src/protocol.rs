//! The router↔shard protocol: the headers and internal paths a router uses on the shards behind
//! it, beyond the Kubernetes API both serve. Everything here is shardplane's own; a Kubernetes
//! client never sends or sees it.

/// The range-map epoch a router routed a request by (RFC 0003): a shard with a newer map answers
/// 421 so that the router refreshes its map and retries.
pub const EPOCH_HEADER: &str = "shardplane-range-epoch";

/// `lines`: a router asks for a JSON list's entries one per line, so its merge splits them with
/// one `memchr` each (cached bytes are compact JSON, which has no raw newline).
pub const LIST_FRAMING_HEADER: &str = "shardplane-list-framing";

/// The name a router picked for a create with `generateName`, to find the owner; the shard uses
/// it instead of picking another.
pub const GENERATED_NAME_HEADER: &str = "shardplane-generated-name";

/// `POST` here with `group` and `resource` parameters: a router asks for a progress mark, which
/// arrives in-band on that resource's `progressBookmarks` watches.
pub const PROGRESS_PATH: &str = "/shardplane/v1/progress";

/// `GET` here: who a shard is and what it caches (id, ranges, epoch, history bounds); a router
/// builds the range map from these.
pub const SHARD_INFO_PATH: &str = "/shardplane/v1/shard";

/// Set in a shard process's environment by the router that starts it: the shard stops when its
/// standard input closes, so shards never outlive the router (RFC 0006).
pub const EXIT_WITH_STDIN: &str = "SHARDPLANE_EXIT_WITH_STDIN";
