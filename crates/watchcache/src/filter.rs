//! What a LIST or WATCH selects: a namespace and label, field and shard selectors.

use crate::object::CachedObject;
use shardplane_apimachinery::selectors::{FieldSelector, LabelSelector};
use shardplane_keyspace::shard_selector::ShardSelector;
use shardplane_keyspace::{placement_hash, RangeSet};

/// Only objects whose placement hash the shard owns: set while its cache holds more than it owns
/// (a range it is loading, or draining, RFC 0006).
#[derive(Clone, Debug)]
pub struct Owned {
    pub group: String,
    pub plural: String,
    pub ranges: RangeSet,
}

/// A filter over cached objects. The default selects everything.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only this namespace, when set.
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub shard: Option<ShardSelector>,
    pub owned: Option<Owned>,
    /// For a watch: address each event to the value(s) of this field it concerns
    /// ([`WatchMsg::Addressed`](crate::WatchMsg::Addressed)) rather than narrowing to one value,
    /// so that one stream serves the watchers of every value (RFC 0015).
    pub index: Option<String>,
}

impl Filter {
    /// Whether `obj` is selected.
    pub fn matches(&self, obj: &CachedObject) -> bool {
        if let Some(ns) = &self.namespace && obj.namespace() != ns {
            return false;
        }
        if let Some(s) = &self.shard && !s.matches(&obj.uid, obj.namespace()) {
            return false;
        }
        if let Some(o) = &self.owned && !o.ranges.contains(placement_hash(&o.group, &o.plural, obj.namespace(), obj.name())) {
            return false;
        }
        self.labels.matches(|k| obj.label(k)) && self.fields.matches(|f| obj.field(f))
    }

    /// Whether nothing but the namespace narrows the selection.
    pub fn selects_whole_namespace(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty() && self.shard.is_none() && self.owned.is_none()
    }
}
