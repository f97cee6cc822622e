//! LIST and WATCH query parameters, validated with upstream's rules and reduced to what the
//! storage layer needs: which snapshot ([`ListSemantics`]) or start point ([`WatchStart`]).

use crate::continue_token::ContinueToken;
use crate::resources::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{cause, ApiError};
use shardplane_keyspace::shard_selector::ShardSelector;

/// `resourceVersionMatch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RvMatch {
    Exact,
    NotOlderThan,
}

/// Which state a LIST must show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListSemantics {
    /// A consistent read: at least etcd's current revision.
    MostRecent,
    /// Whatever the cache holds (RV "0").
    Any,
    /// At least this revision.
    NotOlderThan(u64),
    /// Exactly this revision (410 if no longer available).
    Exact(u64),
}

/// Where a WATCH starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchStart {
    /// Synthetic ADDED events for the state at a consistent read, then changes (RV unset).
    MostRecentWithState,
    /// Synthetic ADDED events for the cached state (RV "0"), then changes.
    AnyWithState,
    /// Events strictly after this revision, no initial state.
    After(u64),
    /// `sendInitialEvents=true`: initial state at least this fresh (None: consistent read), then
    /// the `k8s.io/initial-events-end` bookmark.
    InitialEvents(Option<u64>),
}

/// Parsed and validated list/watch options.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub label_selector: LabelSelector,
    pub field_selector: FieldSelector,
    pub shard_selector: Option<ShardSelector>,
    pub limit: Option<u64>,
    pub continue_token: Option<ContinueToken>,
    pub resource_version: Option<String>,
    pub rv_match: Option<RvMatch>,
    pub watch: bool,
    pub allow_bookmarks: bool,
    pub timeout_seconds: Option<u64>,
    pub send_initial_events: Option<bool>,
    /// `progressBookmarks=always` (shardplane, for routers): send a BOOKMARK as soon as the
    /// synced revision advances, in-band after the events it covers. Needs allowWatchBookmarks.
    pub eager_progress: bool,
    /// `watchIndex=FIELD` (shardplane, for routers; RFC 0015): every event addressed to the
    /// value(s) of FIELD it concerns, for a router to hand to the watchers of each value. Only on
    /// a watch that starts after a resourceVersion.
    pub index: Option<String>,
}

/// A boolean query parameter as kube-apiserver's parameter codec reads it: `0` and `false` (in
/// any case) are false, anything else present, the empty string included, is true. Never an
/// error: `watch=yes` is a watch upstream.
pub fn query_flag(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

/// Parses a decimal resourceVersion (400 on anything else).
pub fn parse_rv(v: &str) -> Result<u64, ApiError> {
    v.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid resource version: strconv.ParseUint: parsing {v:?}: invalid syntax")))
}

fn list_options_invalid(field: &str, reason: &str, msg: &str) -> ApiError {
    let prefix = match reason {
        "FieldValueForbidden" => "Forbidden",
        "FieldValueNotSupported" => "Unsupported value",
        _ => "Invalid value",
    };
    ApiError::invalid("meta.k8s.io", "ListOptions", "", vec![cause(reason, field, format!("{prefix}: {msg}"))])
}

impl ListOptions {
    /// Parses a raw query string for `resource`. The first occurrence of a parameter wins, as in Go.
    pub fn parse(query: &str, resource: &ResourceInfo) -> Result<Self, ApiError> {
        let mut o = ListOptions::default();
        let mut seen = std::collections::HashSet::new();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            if !seen.insert(k.to_string()) {
                continue;
            }
            match k.as_ref() {
                "labelSelector" => o.label_selector = LabelSelector::parse(&v).map_err(ApiError::bad_request)?,
                "fieldSelector" => o.field_selector = FieldSelector::parse(&v, resource).map_err(ApiError::bad_request)?,
                "shardSelector" => {
                    o.shard_selector = Some(ShardSelector::parse(&v).map_err(|e| ApiError::bad_request(format!("invalid shard selector: {e}")))?)
                }
                "limit" => {
                    let n: i64 = v.parse().map_err(|_| ApiError::bad_request(format!("invalid limit: strconv.ParseInt: parsing {v:?}: invalid syntax")))?;
                    if n < 0 {
                        return Err(list_options_invalid("limit", "FieldValueInvalid", &format!("{n}: must be greater than or equal to 0")));
                    }
                    o.limit = (n > 0).then_some(n as u64);
                }
                "continue" if !v.is_empty() => o.continue_token = Some(ContinueToken::decode(&v).map_err(ApiError::bad_request)?),
                "resourceVersion" => o.resource_version = Some(v.into_owned()),
                "resourceVersionMatch" => {
                    o.rv_match = match v.as_ref() {
                        "" => None,
                        "Exact" => Some(RvMatch::Exact),
                        "NotOlderThan" => Some(RvMatch::NotOlderThan),
                        other => {
                            return Err(list_options_invalid(
                                "resourceVersionMatch",
                                "FieldValueNotSupported",
                                &format!("{other:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""),
                            ));
                        }
                    }
                }
                "watch" => o.watch = query_flag(&v),
                "allowWatchBookmarks" => o.allow_bookmarks = query_flag(&v),
                "sendInitialEvents" => o.send_initial_events = Some(query_flag(&v)),
                "progressBookmarks" => o.eager_progress = v == "always",
                "watchIndex" => {
                    let field = crate::conversion::field_label(resource, &v).filter(|f| resource.supports_field(f));
                    let Some(field) = field else { return Err(ApiError::bad_request(format!("watchIndex: field label not supported: {v}"))) };
                    o.index = Some(field.into_owned());
                }
                "timeoutSeconds" => {
                    let n: i64 = v.parse().map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: strconv.ParseInt: parsing {v:?}: invalid syntax")))?;
                    o.timeout_seconds = (n > 0).then_some(n as u64);
                }
                _ => {}
            }
        }
        if let Some(rv) = o.resource_version.as_deref() && !rv.is_empty() {
            parse_rv(rv)?;
        }
        if o.resource_version.as_deref() == Some("") {
            o.resource_version = None;
        }
        o.validate()?;
        Ok(o)
    }

    fn validate(&self) -> Result<(), ApiError> {
        let rv = self.resource_version.as_deref();
        if self.watch {
            match (self.send_initial_events, self.rv_match) {
                (Some(_), m) if m != Some(RvMatch::NotOlderThan) => {
                    return Err(list_options_invalid("sendInitialEvents", "FieldValueForbidden", "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"));
                }
                (None, Some(_)) => {
                    return Err(list_options_invalid("resourceVersionMatch", "FieldValueForbidden", "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"));
                }
                _ => {}
            }
            if self.index.is_some() && !matches!(self.watch_start(), WatchStart::After(_)) {
                return Err(ApiError::bad_request("watchIndex needs a watch that starts after a resourceVersion"));
            }
            if self.send_initial_events == Some(true) && !self.allow_bookmarks {
                return Err(list_options_invalid("allowWatchBookmarks", "FieldValueForbidden", "allowWatchBookmarks must be set to true when sendInitialEvents is set to true"));
            }
            return Ok(());
        }
        if self.index.is_some() {
            return Err(ApiError::bad_request("watchIndex is only for a watch"));
        }
        if self.send_initial_events.is_some() {
            return Err(list_options_invalid("sendInitialEvents", "FieldValueForbidden", "sendInitialEvents is forbidden for list"));
        }
        if let Some(m) = self.rv_match {
            if rv.is_none() {
                return Err(list_options_invalid("resourceVersionMatch", "FieldValueForbidden", "resourceVersionMatch is forbidden unless resourceVersion is provided"));
            }
            if self.continue_token.is_some() {
                return Err(list_options_invalid("resourceVersionMatch", "FieldValueForbidden", "resourceVersionMatch is forbidden when continue is provided"));
            }
            if m == RvMatch::Exact && rv == Some("0") {
                return Err(list_options_invalid("resourceVersionMatch", "FieldValueForbidden", "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""));
            }
        }
        if self.continue_token.is_some() && rv.is_some_and(|r| r != "0") {
            return Err(ApiError::bad_request("specifying resource version is not allowed when using continue"));
        }
        Ok(())
    }

    /// The state a LIST must show (continue tokens are handled by the caller: their RV is exact).
    pub fn list_semantics(&self) -> ListSemantics {
        if let Some(t) = &self.continue_token {
            return t.rv.map_or(ListSemantics::MostRecent, ListSemantics::Exact);
        }
        let rv = self.resource_version.as_deref();
        match (rv, self.rv_match) {
            (None, _) => ListSemantics::MostRecent,
            (Some("0"), _) => ListSemantics::Any,
            (Some(n), Some(RvMatch::Exact)) => ListSemantics::Exact(n.parse().expect("validated")),
            (Some(n), Some(RvMatch::NotOlderThan)) => ListSemantics::NotOlderThan(n.parse().expect("validated")),
            // Legacy: RV=N with a limit is an exact read; without a limit, not older than.
            (Some(n), None) if self.limit.is_some() => ListSemantics::Exact(n.parse().expect("validated")),
            (Some(n), None) => ListSemantics::NotOlderThan(n.parse().expect("validated")),
        }
    }

    /// Where a WATCH starts.
    pub fn watch_start(&self) -> WatchStart {
        let rv = self.resource_version.as_deref();
        match self.send_initial_events {
            Some(true) => WatchStart::InitialEvents(rv.filter(|r| *r != "0").map(|r| r.parse().expect("validated"))),
            _ => match rv {
                None => WatchStart::MostRecentWithState,
                Some("0") => WatchStart::AnyWithState,
                Some(n) => WatchStart::After(n.parse().expect("validated")),
            },
        }
    }

    /// Whether no label, field or shard selector narrows the result (upstream then reports
    /// `remainingItemCount`).
    pub fn selects_everything(&self) -> bool {
        self.label_selector.is_empty() && self.field_selector.is_empty() && self.shard_selector.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{builtin_resources, find};

    fn parse(q: &str) -> Result<ListOptions, ApiError> {
        let all = builtin_resources();
        ListOptions::parse(q, find(&all, "", "v1", "configmaps").unwrap())
    }

    #[test]
    fn rv_table_matches_upstream() {
        assert_eq!(parse("").unwrap().list_semantics(), ListSemantics::MostRecent);
        assert_eq!(parse("resourceVersion=0").unwrap().list_semantics(), ListSemantics::Any);
        assert_eq!(parse("resourceVersion=0&limit=5").unwrap().list_semantics(), ListSemantics::Any);
        assert_eq!(parse("resourceVersion=7").unwrap().list_semantics(), ListSemantics::NotOlderThan(7));
        assert_eq!(parse("resourceVersion=7&limit=5").unwrap().list_semantics(), ListSemantics::Exact(7));
        assert_eq!(parse("resourceVersion=7&resourceVersionMatch=Exact").unwrap().list_semantics(), ListSemantics::Exact(7));
        assert_eq!(parse("resourceVersion=0&resourceVersionMatch=NotOlderThan").unwrap().list_semantics(), ListSemantics::Any);
        let tok = ContinueToken { rv: Some(9), after: ("a".into(), "b".into()), epoch: None }.encode();
        assert_eq!(parse(&format!("continue={tok}")).unwrap().list_semantics(), ListSemantics::Exact(9));
        assert_eq!(parse(&format!("continue={tok}&resourceVersion=0")).unwrap().list_semantics(), ListSemantics::Exact(9));
        assert_eq!(parse(&format!("continue={tok}&resourceVersion=5")).unwrap_err().code, 400);
        for (q, field) in [
            ("resourceVersionMatch=Exact", "resourceVersionMatch"),
            ("resourceVersion=0&resourceVersionMatch=Exact", "resourceVersionMatch"),
            ("resourceVersion=1&resourceVersionMatch=Bogus", "resourceVersionMatch"),
            ("sendInitialEvents=true", "sendInitialEvents"),
            ("limit=-1", "limit"),
        ] {
            let e = parse(q).unwrap_err();
            assert_eq!((e.code, e.reason), (422, "Invalid"), "{q}");
            assert_eq!(e.details.as_ref().unwrap().causes[0].field, field);
        }
        assert!(parse(&format!("continue={tok}&resourceVersion=1&resourceVersionMatch=Exact")).is_err());
        assert_eq!(parse("resourceVersion=abc").unwrap_err().code, 400);
        assert_eq!(parse("limit=x").unwrap_err().code, 400);
        assert_eq!(parse("continue=%%%").unwrap_err().code, 400);
    }

    #[test]
    fn a_watch_index_names_a_selectable_field_of_a_watch_after_an_rv() {
        let all = builtin_resources();
        let pods = find(&all, "", "v1", "pods").unwrap();
        let o = ListOptions::parse("watch=1&resourceVersion=5&watchIndex=spec.nodeName", pods).unwrap();
        assert_eq!(o.index.as_deref(), Some("spec.nodeName"));
        assert_eq!(parse("watch=1&resourceVersion=5&watchIndex=metadata.name").unwrap().index.as_deref(), Some("metadata.name"));
        for q in ["watch=1&resourceVersion=5&watchIndex=spec.nodeName", "watch=1&watchIndex=metadata.name", "watch=1&resourceVersion=0&watchIndex=metadata.name", "watchIndex=metadata.name"] {
            assert_eq!(parse(q).unwrap_err().code, 400, "{q}");
        }
    }

    #[test]
    fn watch_rules() {
        assert_eq!(parse("watch=1").unwrap().watch_start(), WatchStart::MostRecentWithState);
        assert_eq!(parse("watch=true&resourceVersion=0").unwrap().watch_start(), WatchStart::AnyWithState);
        assert_eq!(parse("watch=true&resourceVersion=5").unwrap().watch_start(), WatchStart::After(5));
        assert_eq!(
            parse("watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true").unwrap().watch_start(),
            WatchStart::InitialEvents(None)
        );
        assert_eq!(parse("watch=true&sendInitialEvents=true").unwrap_err().code, 422);
        assert_eq!(parse("watch=true&resourceVersionMatch=NotOlderThan&resourceVersion=1").unwrap_err().code, 422);
        // Upstream's parameter codec: anything but `0` and `false` is true.
        assert!(parse("watch=maybe").unwrap().watch && parse("watch=").unwrap().watch && !parse("watch=False").unwrap().watch);
        // kube-rs sends a leading '&'.
        assert!(parse("&watch=true&resourceVersion=3").unwrap().watch);
    }
}
