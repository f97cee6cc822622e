//! The audit policy (`--audit-policy-file`, audit.k8s.io/v1 `Policy`, YAML or JSON) and how it
//! decides a request's level and omitted stages: the first rule that matches, as upstream's
//! policy evaluator, or `None` when none does.

use serde::Deserialize;
use shardplane_identity::rbac::Attributes;
use shardplane_identity::user::UserInfo;

/// How much of a request is recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum Level {
    /// Not recorded.
    #[default]
    None,
    /// Who, what, when and the answer's code: no bodies.
    Metadata,
    /// And the request's body.
    Request,
    /// And the response's body.
    RequestResponse,
}

impl Level {
    /// Upstream's name for the level.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "None",
            Self::Metadata => "Metadata",
            Self::Request => "Request",
            Self::RequestResponse => "RequestResponse",
        }
    }
}

/// A point in a request's life an event is written at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Stage {
    RequestReceived,
    ResponseStarted,
    ResponseComplete,
    Panic,
}

impl Stage {
    /// Upstream's name for the stage.
    pub fn name(self) -> &'static str {
        match self {
            Self::RequestReceived => "RequestReceived",
            Self::ResponseStarted => "ResponseStarted",
            Self::ResponseComplete => "ResponseComplete",
            Self::Panic => "Panic",
        }
    }
}

/// A group and its resources a rule names.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupResources {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// One rule of the policy.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    pub level: Level,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub user_groups: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    #[serde(default)]
    pub omit_managed_fields: Option<bool>,
}

/// The policy file.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub rules: Vec<Rule>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    #[serde(default)]
    pub omit_managed_fields: bool,
}

/// What the policy decides for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    pub level: Level,
    /// Stages not written (the policy's and the rule's).
    pub omit_stages: Vec<Stage>,
    /// Whether `metadata.managedFields` is left out of recorded bodies.
    pub omit_managed_fields: bool,
}

impl Policy {
    /// Reads a policy file's text (YAML or JSON), checked as upstream's validation checks it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let policy: Policy = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        if policy.kind != "Policy" {
            return Err(format!("kind {:?}: an audit policy file holds one Policy", policy.kind));
        }
        if !matches!(policy.api_version.as_str(), "audit.k8s.io/v1") {
            return Err(format!("apiVersion {:?}: audit.k8s.io/v1 is served", policy.api_version));
        }
        for (i, r) in policy.rules.iter().enumerate() {
            if !r.non_resource_urls.is_empty() && (!r.resources.is_empty() || !r.namespaces.is_empty()) {
                return Err(format!("rules[{i}].nonResourceURLs: rules cannot apply to both regular resources and non-resource URLs"));
            }
            for (j, u) in r.non_resource_urls.iter().enumerate() {
                if u != "*" && !u.starts_with('/') {
                    return Err(format!("rules[{i}].nonResourceURLs[{j}]: {u:?}: must start with '/'"));
                }
                if u.len() > 1 && u[..u.len() - 1].contains('*') {
                    return Err(format!("rules[{i}].nonResourceURLs[{j}]: {u:?}: a '*' may only end the path"));
                }
            }
            for (j, g) in r.resources.iter().enumerate() {
                if !g.resource_names.is_empty() && g.resources.is_empty() {
                    return Err(format!("rules[{i}].resources[{j}].resourceNames: resourceNames require resources"));
                }
            }
        }
        Ok(policy)
    }

    /// The level and omitted stages for `user` asking `attrs`.
    pub fn decide(&self, user: &UserInfo, attrs: &Attributes) -> Decided {
        match self.rules.iter().find(|r| r.matches(user, attrs)) {
            Some(r) => {
                let mut omit = self.omit_stages.clone();
                omit.extend(r.omit_stages.iter().copied().filter(|s| !self.omit_stages.contains(s)));
                Decided { level: r.level, omit_stages: omit, omit_managed_fields: r.omit_managed_fields.unwrap_or(self.omit_managed_fields) }
            }
            None => Decided { level: Level::None, omit_stages: self.omit_stages.clone(), omit_managed_fields: self.omit_managed_fields },
        }
    }
}

impl Rule {
    fn matches(&self, user: &UserInfo, attrs: &Attributes) -> bool {
        if !self.users.is_empty() && !self.users.contains(&user.name) {
            return false;
        }
        if !self.user_groups.is_empty() && !user.groups.iter().any(|g| self.user_groups.contains(g)) {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&attrs.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(attrs);
        }
        if !self.non_resource_urls.is_empty() {
            return !attrs.resource_request && self.non_resource_urls.iter().any(|spec| path_matches(&attrs.path, spec));
        }
        true
    }

    fn matches_resource(&self, attrs: &Attributes) -> bool {
        if !attrs.resource_request {
            return false;
        }
        if !self.namespaces.is_empty() && !self.namespaces.contains(&attrs.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let combined = attrs.combined_resource();
        self.resources.iter().filter(|g| g.group == attrs.api_group).any(|g| {
            g.resources.is_empty()
                || g.resources.iter().any(|res| {
                    (g.resource_names.is_empty() || g.resource_names.contains(&attrs.name))
                        && (*res == combined || res == "*" || (!attrs.subresource.is_empty() && res.strip_prefix("*/") == Some(attrs.subresource.as_str())) || res.strip_suffix("/*") == Some(attrs.resource.as_str()))
                })
        })
    }
}

fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*" || spec == path || spec.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    users: ["system:kube-proxy"]
    verbs: ["watch"]
    resources:
      - group: ""
        resources: ["endpoints", "services"]
  - level: None
    nonResourceURLs: ["/healthz*", "/version"]
  - level: RequestResponse
    resources:
      - group: ""
        resources: ["pods/log", "*/status"]
  - level: Request
    namespaces: ["kube-system"]
    omitStages: ["ResponseStarted"]
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets", "configmaps"]
        resourceNames: ["s"]
  - level: Metadata
    userGroups: ["system:authenticated"]
"#;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo { name: name.into(), groups: groups.iter().map(|g| (*g).into()).collect(), ..Default::default() }
    }

    fn level(p: &Policy, u: &UserInfo, a: Attributes) -> Level {
        p.decide(u, &a).level
    }

    #[test]
    fn the_first_matching_rule_decides_as_upstreams_evaluator() {
        let p = Policy::parse(POLICY).unwrap();
        let proxy = user("system:kube-proxy", &["system:authenticated"]);
        let jane = user("jane", &["system:authenticated"]);
        let anon = user("system:anonymous", &["system:unauthenticated"]);
        assert_eq!(level(&p, &proxy, Attributes::resource("watch", "", "services", "", "", "")), Level::None);
        assert_eq!(level(&p, &proxy, Attributes::resource("list", "", "services", "", "", "")), Level::Metadata, "another verb falls through");
        assert_eq!(level(&p, &anon, Attributes::non_resource("get", "/healthz/etcd")), Level::None);
        assert_eq!(level(&p, &anon, Attributes::non_resource("get", "/metrics")), Level::None, "no rule for anonymous: None");
        assert_eq!(level(&p, &jane, Attributes::resource("get", "", "pods", "log", "a", "p")), Level::RequestResponse);
        assert_eq!(level(&p, &jane, Attributes::resource("update", "", "pods", "status", "a", "p")), Level::RequestResponse, "*/status");
        assert_eq!(level(&p, &jane, Attributes::resource("update", "apps", "deployments", "status", "a", "d")), Level::Metadata, "another group's status is not the core group's");
        let ks = p.decide(&jane, &Attributes::resource("get", "apps", "deployments", "", "kube-system", "d"));
        assert_eq!((ks.level, ks.omit_stages), (Level::Request, vec![Stage::RequestReceived, Stage::ResponseStarted]));
        assert_eq!(level(&p, &anon, Attributes::resource("get", "", "secrets", "", "a", "s")), Level::Metadata, "named");
        assert_eq!(level(&p, &anon, Attributes::resource("get", "", "secrets", "", "a", "other")), Level::None, "another name");
        assert_eq!(level(&p, &jane, Attributes::non_resource("get", "/api")), Level::Metadata);
    }

    #[test]
    fn json_policies_are_read_too_and_bad_ones_are_refused_with_the_reason() {
        let p = Policy::parse(r#"{"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}"#).unwrap();
        assert_eq!(p.decide(&UserInfo::default(), &Attributes::non_resource("get", "/")).level, Level::Metadata);
        for (bad, why) in [
            (r#"{"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Loud"}]}"#, "Loud"),
            (r#"{"apiVersion": "v1", "kind": "Policy"}"#, "apiVersion"),
            (r#"{"apiVersion": "audit.k8s.io/v1", "kind": "Pod"}"#, "kind"),
            (r#"{"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "None", "nonResourceURLs": ["/a"], "namespaces": ["x"]}]}"#, "both"),
            (r#"{"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "None", "nonResourceURLs": ["a"]}]}"#, "start with"),
            (r#"{"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "None", "verb": ["get"]}]}"#, "verb"),
        ] {
            let err = Policy::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
