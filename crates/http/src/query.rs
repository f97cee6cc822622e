//! The one reading of a request's query string. Shard and router both take parameters from
//! here, so a router can never mean one thing by a query and the shard it forwards to another:
//! names and values are percent-decoded once, and the first occurrence of a name wins, as Go's
//! `url.Values.Get` (what kube-apiserver reads them with) does.

/// A parsed query string.
#[derive(Clone, Debug, Default)]
pub struct Query {
    raw: String,
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Decodes `raw` (the part of the URL after `?`, without it).
    pub fn parse(raw: &str) -> Self {
        let pairs = form_urlencoded::parse(raw.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
        Query { raw: raw.to_owned(), pairs }
    }

    /// The query as the client sent it.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Whether the request asks for a watch (`watch` present and not `0` or `false`, as
    /// upstream's parameter codec reads a boolean).
    pub fn is_watch(&self) -> bool {
        self.get("watch").is_some_and(shardplane_apimachinery::list_options::query_flag)
    }

    /// Only the parameters named, in that order, each with its first non-empty value, encoded
    /// again: a canonical query, in which parameters without meaning for the next hop (and
    /// their spelling, order and repetitions) cannot make two equal requests differ.
    pub fn only(&self, names: &[&str]) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        for name in names {
            if let Some(v) = self.get(name).filter(|v| !v.is_empty()) {
                out.append_pair(name, v);
            }
        }
        out.finish()
    }

    /// The query without the parameters named (compared decoded), encoded again: what a router
    /// forwards after taking over those parameters itself.
    pub fn without(&self, names: &[&str]) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        for (k, v) in self.pairs.iter().filter(|(k, _)| !names.contains(&k.as_str())) {
            out.append_pair(k, v);
        }
        out.finish()
    }
}

/// The first value of a query parameter in a raw query string ([`Query::get`] without keeping
/// the parse).
pub fn form_value(query: &str, name: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}

/// Every value of a list parameter (upstream decodes a `[]string` field, such as `dryRun`, from
/// all of a name's occurrences).
pub fn form_values(query: &str, name: &str) -> Vec<String> {
    form_urlencoded::parse(query.as_bytes()).filter(|(k, _)| k == name).map(|(_, v)| v.into_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_are_decoded_before_they_are_compared() {
        let q = Query::parse("%6Cimit=5&limit=7&watch=true&labelSelector=a%3Db");
        assert_eq!(q.get("limit"), Some("5"));
        assert!(q.is_watch());
        assert_eq!(q.get("labelSelector"), Some("a=b"));
        // The router's own parameters go whichever way the client spelled them.
        assert_eq!(q.without(&["limit", "watch"]), "labelSelector=a%3Db");
        assert!(Query::parse("watch=yes").is_watch() && Query::parse("watch=").is_watch());
        assert!(!Query::parse("watch=FALSE").is_watch() && !Query::parse("watch=0").is_watch() && !Query::parse("").is_watch());
        assert_eq!(form_value("a=1&a=2", "a").as_deref(), Some("1"));
        assert_eq!(form_values("a=1&b=0&%61=2", "a"), ["1", "2"]);
        // Canonical: order, spelling, repeats and other parameters do not matter.
        let a = Query::parse("pretty=1&fieldSelector=x%3Dy&%6CabelSelector=a&labelSelector=b&junk=9");
        let b = Query::parse("labelSelector=a&fieldSelector=x=y");
        assert_eq!(a.only(&["labelSelector", "fieldSelector"]), b.only(&["labelSelector", "fieldSelector"]));
        assert_eq!(b.only(&["labelSelector", "fieldSelector"]), "labelSelector=a&fieldSelector=x%3Dy");
    }

    proptest! {
        /// What `without` forwards reads back, parameter by parameter, as the original did
        /// (less the dropped names): the next hop cannot read it differently.
        #[test]
        fn without_keeps_every_other_parameters_meaning(pairs in proptest::collection::vec(("[a-zA-Z%=&+ ]{0,6}", "[a-zA-Z0-9%=&+ ,!]{0,8}"), 0..8), drop in "[a-z]{0,3}") {
            let mut raw = form_urlencoded::Serializer::new(String::new());
            for (k, v) in &pairs {
                raw.append_pair(k, v);
            }
            let q = Query::parse(&raw.finish());
            let forwarded = Query::parse(&q.without(&[drop.as_str()]));
            let kept: Vec<_> = q.pairs.iter().filter(|(k, _)| *k != drop).cloned().collect();
            prop_assert_eq!(forwarded.pairs, kept);
        }
    }
}
