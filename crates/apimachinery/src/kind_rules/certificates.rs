//! CertificateSigningRequests on create, as upstream's certificates validation words them: the
//! request is a PEM `CERTIFICATE REQUEST` block, the signer name a domain and a path, the usages
//! known and not repeated, the duration at least ten minutes. The request's DER is not parsed
//! here (RFC 0011): a block of the right type whose content is not a CSR is stored.

use super::errors::{duplicate, invalid, invalid_shown, not_supported, required};
use crate::status::StatusCause;
use base64::Engine;
use serde_json::Value;

/// Every key usage upstream accepts, sorted as its error lists them.
const USAGES: [&str; 23] = [
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];
const SIGNER_FORM: &str = "must be a fully qualified domain and path of the form 'example.com/signer-name'";

/// Go's `%#v` of a byte slice (`[]byte{0x2d, 0x2d}`, `[]byte(nil)`).
fn go_bytes(b: Option<&[u8]>) -> String {
    match b {
        None => "[]byte(nil)".into(),
        Some(b) => format!("[]byte{{{}}}", b.iter().map(|x| format!("0x{x:x}")).collect::<Vec<_>>().join(", ")),
    }
}

/// The type of the first PEM block in `bytes`, as Go's `pem.Decode` finds it.
fn pem_type(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let begin = text.find("-----BEGIN ")?;
    let rest = &text[begin + "-----BEGIN ".len()..];
    let ty = &rest[..rest.find("-----")?];
    text[begin..].contains(&format!("-----END {ty}-----")).then(|| ty.to_owned())
}

fn signer_name(name: &str, causes: &mut Vec<StatusCause>) {
    const FIELD: &str = "spec.signerName";
    if name.is_empty() {
        causes.push(required(FIELD));
        return;
    }
    let Some((domain, _)) = name.split_once('/').filter(|(_, path)| !path.contains('/')) else {
        causes.push(invalid(FIELD, &Value::from(name), SIGNER_FORM));
        return;
    };
    for label in domain.split('.') {
        if let Err(why) = crate::meta::validate_dns1123_label(label) {
            causes.push(invalid(FIELD, &Value::from(domain), &format!("validating label {label:?}: {why}")));
            break;
        }
    }
    if !domain.contains('.') {
        causes.push(invalid(FIELD, &Value::from(domain), "should be a domain with at least two segments separated by dots"));
    }
}

pub(super) fn validate(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let request = spec.get("request").and_then(Value::as_str).map(|r| base64::engine::general_purpose::STANDARD.decode(r).unwrap_or_default());
    if request.as_deref().and_then(pem_type).as_deref() != Some("CERTIFICATE REQUEST") {
        causes.push(invalid_shown("spec.request", &go_bytes(request.as_deref()), "PEM block type must be CERTIFICATE REQUEST"));
    }
    signer_name(spec.get("signerName").and_then(Value::as_str).unwrap_or(""), &mut causes);
    let usages = spec.get("usages").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    if usages.is_empty() {
        causes.push(required("spec.usages"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, u) in usages.iter().enumerate() {
        let u = u.as_str().unwrap_or("");
        if !USAGES.contains(&u) {
            causes.push(not_supported(&format!("spec.usages[{i}]"), u, &USAGES));
        } else if !seen.insert(u) {
            causes.push(duplicate(&format!("spec.usages[{i}]"), u));
        }
    }
    if let Some(e) = spec.get("expirationSeconds").filter(|e| e.as_i64().is_some_and(|n| n < 600)) {
        causes.push(invalid("spec.expirationSeconds", e, "may not specify a duration less than 600 seconds (10 minutes)"));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::super::errors::fields;
    use super::*;
    use serde_json::json;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn a_request_is_a_pem_csr_with_a_signer_and_known_usages() {
        let good = json!({"spec": {"request": b64("-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"), "signerName": "example.com/signer", "usages": ["client auth"]}});
        assert!(validate(&good).is_empty());
        let bad = json!({"spec": {"request": b64("ab"), "signerName": "signer", "usages": ["client auth", "flying", "client auth"], "expirationSeconds": 60}});
        let causes = validate(&bad);
        assert_eq!(fields(&causes), ["spec.request", "spec.signerName", "spec.usages[1]", "spec.usages[2]", "spec.expirationSeconds"]);
        assert_eq!(causes[0].message, "Invalid value: []byte{0x61, 0x62}: PEM block type must be CERTIFICATE REQUEST");
        assert_eq!(causes[1].message, format!("Invalid value: \"signer\": {SIGNER_FORM}"));
        let unqualified = validate(&json!({"spec": {"request": good["spec"]["request"], "signerName": "local/signer", "usages": ["any"]}}));
        assert_eq!(unqualified[0].message, "Invalid value: \"local\": should be a domain with at least two segments separated by dots");
    }
}
