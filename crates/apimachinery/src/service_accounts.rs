//! Upstream's ServiceAccount admission plugin (on by default), as decisions over the pod and the
//! service account it runs as (the shard reads that account: `shards/src/admission.rs`), and the
//! `default` ServiceAccount every namespace gets (kube-controller-manager's service-account
//! controller creates it upstream; shardplane runs no controller manager, so the shards do:
//! RFC 0011).
//!
//! On a pod's create: the account defaults to `default`; a mirror pod may name none; unless the
//! pod or its account opts out, every container and init container mounts the projected API
//! access volume (`kube-api-access-xxxxx`: a bound token, the cluster's CA bundle from the
//! `kube-root-ca.crt` ConfigMap, the namespace) at the service account path, as upstream's
//! `BoundServiceAccountTokenVolume` mounts it; and a pod without image pull secrets takes the
//! account's.

use serde_json::{json, Value};

/// The account a pod runs as when it names none.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
/// Where the API access volume is mounted in every container.
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The prefix of the API access volume's name.
pub const TOKEN_VOLUME_PREFIX: &str = "kube-api-access-";
/// The annotation of a pod a kubelet mirrors from a static manifest.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// How long the projected token lives (upstream's `WarnOnlyBoundTokenExpirationSeconds`).
const TOKEN_EXPIRATION_SECONDS: i64 = 3607;

/// The `default` ServiceAccount of `namespace`, as the service-account controller creates it.
pub fn default_service_account(namespace: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": DEFAULT_SERVICE_ACCOUNT, "namespace": namespace}})
}

/// Whether `pod` is a mirror pod (the plugin leaves those alone, but for the rule below).
pub fn is_mirror_pod(pod: &Value) -> bool {
    pod.pointer("/metadata/annotations").and_then(|a| a.get(MIRROR_POD_ANNOTATION)).is_some()
}

/// Gives a new pod its service account name (`default` unless it names one) and returns it;
/// a mirror pod that names an account is refused with upstream's reason.
pub fn service_account_name(pod: &mut Value) -> Result<String, String> {
    let named = pod.pointer("/spec/serviceAccountName").and_then(Value::as_str).filter(|n| !n.is_empty()).map(str::to_owned);
    // The deprecated field names the account when the current one does not (upstream's v1
    // conversion), and is written back equal to it.
    let named = named.or_else(|| pod.pointer("/spec/serviceAccount").and_then(Value::as_str).filter(|n| !n.is_empty()).map(str::to_owned));
    if is_mirror_pod(pod) {
        return match named {
            Some(_) => Err("a mirror pod may not reference service accounts".into()),
            None => Ok(String::new()),
        };
    }
    let name = named.unwrap_or_else(|| DEFAULT_SERVICE_ACCOUNT.to_owned());
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("serviceAccountName".into(), json!(name));
        spec.insert("serviceAccount".into(), json!(name));
    }
    Ok(name)
}

/// Why the account could not be read, as upstream's plugin refuses the pod (a 403).
pub fn lookup_failure(namespace: &str, name: &str, why: &str) -> String {
    format!("error looking up service account {namespace}/{name}: {why}")
}

/// Whether the token is mounted: the pod's choice, else its account's, else yes.
fn automount(pod: &Value, account: &Value) -> bool {
    pod.pointer("/spec/automountServiceAccountToken").and_then(Value::as_bool).or_else(|| account.get("automountServiceAccountToken").and_then(Value::as_bool)).unwrap_or(true)
}

/// The projected API access volume upstream adds.
fn token_volume(name: &str) -> Value {
    json!({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}})
}

/// The plugin's mutations of a new (non-mirror) pod running as `account`: the API access
/// volume and its mounts (`volume_name` names the volume when the pod has none yet), and the
/// account's image pull secrets when the pod has none.
pub fn admit(pod: &mut Value, account: &Value, volume_name: &str) {
    let mount_token = automount(pod, account);
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return };
    if spec.get("imagePullSecrets").and_then(Value::as_array).is_none_or(|s| s.is_empty()) {
        if let Some(secrets) = account.get("imagePullSecrets").and_then(Value::as_array).filter(|s| !s.is_empty()) {
            let refs: Vec<Value> = secrets.iter().map(|s| json!({"name": s.get("name").cloned().unwrap_or(json!(""))})).collect();
            spec.insert("imagePullSecrets".into(), Value::Array(refs));
        }
    }
    if !mount_token {
        return;
    }
    let existing = spec.get("volumes").and_then(Value::as_array).into_iter().flatten().filter_map(|v| v["name"].as_str()).find(|n| n.starts_with(TOKEN_VOLUME_PREFIX)).map(str::to_owned);
    let name = existing.clone().unwrap_or_else(|| volume_name.to_owned());
    let mount = json!({"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    let mut mounted = false;
    for field in ["initContainers", "containers"] {
        for c in spec.get_mut(field).and_then(Value::as_array_mut).into_iter().flatten() {
            let Some(c) = c.as_object_mut() else { continue };
            let mounts = c.entry("volumeMounts").or_insert_with(|| json!([]));
            let Some(mounts) = mounts.as_array_mut() else { continue };
            // A container that mounts something at the path already keeps it.
            if !mounts.iter().any(|m| m["mountPath"] == TOKEN_MOUNT_PATH) {
                mounts.push(mount.clone());
                mounted = true;
            }
        }
    }
    if mounted && existing.is_none() {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(v) = volumes.as_array_mut() {
            v.push(token_volume(&name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec})
    }

    #[test]
    fn a_pod_runs_as_default_and_every_container_mounts_the_token() {
        let mut p = pod(json!({"initContainers": [{"name": "i", "image": "x"}], "containers": [{"name": "c", "image": "x"}, {"name": "own", "image": "x", "volumeMounts": [{"name": "mine", "mountPath": TOKEN_MOUNT_PATH}]}]}));
        assert_eq!(service_account_name(&mut p).unwrap(), "default");
        admit(&mut p, &default_service_account("ns"), "kube-api-access-abcde");
        assert_eq!((p["spec"]["serviceAccountName"].as_str(), p["spec"]["serviceAccount"].as_str()), (Some("default"), Some("default")));
        let mount = json!({"name": "kube-api-access-abcde", "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
        assert_eq!(p["spec"]["initContainers"][0]["volumeMounts"], json!([mount]));
        assert_eq!(p["spec"]["containers"][0]["volumeMounts"], json!([mount]));
        assert_eq!(p["spec"]["containers"][1]["volumeMounts"].as_array().unwrap().len(), 1, "its own mount at the path stays");
        assert_eq!(p["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"], 3607);
    }

    #[test]
    fn opting_out_pull_secrets_and_mirror_pods() {
        let account = json!({"metadata": {"name": "robot"}, "automountServiceAccountToken": false, "imagePullSecrets": [{"name": "registry"}]});
        let mut p = pod(json!({"serviceAccountName": "robot", "containers": [{"name": "c", "image": "x"}]}));
        assert_eq!(service_account_name(&mut p).unwrap(), "robot");
        admit(&mut p, &account, "kube-api-access-abcde");
        assert!(p["spec"].get("volumes").is_none(), "the account opted out");
        assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "registry"}]));
        let mut opted_in = pod(json!({"automountServiceAccountToken": true, "containers": [{"name": "c", "image": "x"}]}));
        admit(&mut opted_in, &account, "kube-api-access-abcde");
        assert_eq!(opted_in["spec"]["volumes"].as_array().map(Vec::len), Some(1), "the pod's choice wins");
        let mut mirror = json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}, "spec": {"serviceAccountName": "robot"}});
        assert_eq!(service_account_name(&mut mirror).unwrap_err(), "a mirror pod may not reference service accounts");
    }
}
