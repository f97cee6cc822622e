//! The one mapping of storage errors to the `Status` a client gets, for shard and router alike.
//! A caller that gives a variant a meaning of its own (a create's `AlreadyExists` is a 409 naming
//! the object; a lost compare-and-swap retries) handles it first and passes the rest here.

use shardplane_apimachinery::ApiError;
use shardplane_storage::StorageError;

/// The `Status` for a storage error no caller gave a meaning of its own: etcd out of reach is 503
/// (the client retries), a compacted revision is 410 Expired with upstream's words, and anything
/// else is a 500 (a state the caller should have handled).
pub fn status_of(e: StorageError) -> ApiError {
    match e {
        // etcd refuses a value past its request limit (1.5 MiB by default): the object is too
        // large, which retrying does not change.
        StorageError::Etcd(m) if m.contains("request is too large") => ApiError::too_large_message("etcdserver: request is too large"),
        // The store is full (its NOSPACE alarm): upstream passes etcd's error on as a 500;
        // retrying does not help until an operator recovers the space (RFC 0010).
        StorageError::Etcd(m) if m.contains(shardplane_storage::space::NOSPACE_MESSAGE) => ApiError::internal("etcdserver: mvcc: database space exceeded"),
        StorageError::Etcd(m) => ApiError::unavailable(format!("storage is unavailable: {m}")),
        StorageError::Compacted { requested, compacted } => ApiError::expired(format!("too old resource version: {requested} ({compacted})"), None),
        other => ApiError::internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_gets_its_class_of_status() {
        assert_eq!((status_of(StorageError::Etcd("down".into())).code, status_of(StorageError::Etcd("down".into())).message), (503, "storage is unavailable: down".to_owned()));
        let e = status_of(StorageError::Compacted { requested: 5, compacted: 9 });
        assert_eq!((e.code, e.reason, e.message.as_str()), (410, "Expired", "too old resource version: 5 (9)"));
        assert_eq!(status_of(StorageError::NotFound).code, 500);
        assert_eq!(status_of(StorageError::Etcd("grpc: etcdserver: request is too large".into())).code, 413);
    }
}
