//! Content negotiation: which representation a request asked for (JSON, a Table, or
//! PartialObjectMetadata), what Table rows carry, and turning an answer into that representation.

use crate::body;
use crate::printing;
use axum::body::Body;
use axum::http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Value};
use shardplane_apimachinery::encode;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::ApiError;

/// Which representation the client asked for first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Representation {
    Json,
    /// A Table of this meta.k8s.io version.
    Table(&'static str),
    /// PartialObjectMetadata of this meta.k8s.io version; `list` when the client asked for
    /// PartialObjectMetadataList (upstream answers 406 when that does not match the response).
    Metadata { version: &'static str, list: bool },
}

/// Reads the Accept header in order: the first media range we can serve wins.
pub fn negotiate(headers: &HeaderMap) -> Option<Representation> {
    let Some(accept) = headers.get(axum::http::header::ACCEPT).and_then(|v| v.to_str().ok()) else { return Some(Representation::Json) };
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |k: &str| params.iter().find(|(pk, _)| *pk == k).map(|(_, v)| *v);
        match (media, param("as")) {
            ("application/json" | "*/*" | "application/*", Some("Table")) if param("g") == Some("meta.k8s.io") => match param("v") {
                Some("v1") => return Some(Representation::Table("v1")),
                Some("v1beta1") => return Some(Representation::Table("v1beta1")),
                _ => {}
            },
            ("application/json" | "*/*" | "application/*", Some(kind @ ("PartialObjectMetadata" | "PartialObjectMetadataList"))) if param("g") == Some("meta.k8s.io") => {
                let list = kind == "PartialObjectMetadataList";
                match param("v") {
                    Some("v1") => return Some(Representation::Metadata { version: "v1", list }),
                    Some("v1beta1") => return Some(Representation::Metadata { version: "v1beta1", list }),
                    _ => {}
                }
            }
            ("application/json" | "application/yaml" | "*/*" | "application/*", None) => return Some(Representation::Json),
            _ => {}
        }
    }
    None
}

/// `includeObject`: what each row carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    /// Parses the query parameter (default Metadata).
    pub fn parse(v: Option<&str>) -> Result<Self, shardplane_apimachinery::ApiError> {
        match v.unwrap_or("") {
            "" | "Metadata" => Ok(Self::Metadata),
            "None" => Ok(Self::None),
            "Object" => Ok(Self::Object),
            other => Err(shardplane_apimachinery::ApiError::bad_request(format!("includeObject: Unsupported value: {other:?}: supported values: \"Metadata\", \"None\", \"Object\""))),
        }
    }
}

/// How a read is rendered: its representation, what Table rows carry, and whether a JSON list
/// goes one entry per line (for a router that splits them, [`crate::protocol::LIST_FRAMING_HEADER`]).
#[derive(Clone, Copy, Debug)]
pub struct View {
    pub repr: Representation,
    pub include: IncludeObject,
    pub lines: bool,
}

impl View {
    /// The view a request asks for: its Accept header (406 when nothing there can be served), its
    /// `includeObject` parameter, and the list framing header.
    pub fn of_request(headers: &HeaderMap, query: &crate::query::Query) -> Result<Self, ApiError> {
        let accept = headers.get(axum::http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
        let repr = negotiate(headers).ok_or_else(|| ApiError::not_acceptable(accept))?;
        let lines = headers.get(crate::protocol::LIST_FRAMING_HEADER).is_some_and(|v| v == "lines");
        Ok(View { repr, include: IncludeObject::parse(query.get("includeObject"))?, lines })
    }

    /// A write's answer (the object, or the list a delete-collection returns) in the asked
    /// representation; a `Status` answer and plain JSON pass unchanged, as upstream.
    pub async fn transform_write(&self, info: &ResourceInfo, reply: Result<Response<Body>, ApiError>) -> Result<Response<Body>, ApiError> {
        let resp = reply?;
        if self.repr == Representation::Json || !resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.map_err(|e| ApiError::internal(e.to_string()))?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| ApiError::internal(e.to_string()))?;
        if v["kind"] == "Status" {
            return Ok(body::json(status, bytes));
        }
        match v.get("items").and_then(Value::as_array) {
            Some(items) => {
                let items: Vec<Vec<u8>> = items.iter().map(|o| serde_json::to_vec(o).expect("json")).collect();
                let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
                self.transformed(info, status, &refs, v["metadata"].clone(), false)
            }
            None => self.transformed(info, status, &[&bytes], json!({"resourceVersion": v["metadata"]["resourceVersion"]}), true),
        }
    }

    /// The PartialObjectMetadata or Table form of one object or a list; plain JSON is not
    /// transformed (the caller answers the bytes it has).
    pub fn transformed(&self, info: &ResourceInfo, status: StatusCode, objects: &[&[u8]], meta: Value, single: bool) -> Result<Response<Body>, ApiError> {
        match self.repr {
            Representation::Json => Err(ApiError::internal("plain JSON is not transformed")),
            Representation::Metadata { list, .. } if list == single => Err(ApiError::metadata_shape_mismatch(list, &info.group, &info.kind)),
            Representation::Metadata { version, .. } if single => Ok(body::json(status, encode::object_bytes(&printing::partial_metadata(version, objects[0])))),
            Representation::Metadata { version, .. } => {
                let list = json!({"kind": "PartialObjectMetadataList", "apiVersion": format!("meta.k8s.io/{version}"), "metadata": meta, "items": objects.iter().map(|o| printing::partial_metadata(version, o)).collect::<Vec<_>>()});
                Ok(body::json(status, encode::object_bytes(&list)))
            }
            Representation::Table(version) => {
                let mut r = body::json(status, printing::table(info, version, objects, meta, self.include));
                if let Ok(ct) = axum::http::HeaderValue::from_str(&printing::content_type(version)) {
                    r.headers_mut().insert(axum::http::header::CONTENT_TYPE, ct);
                }
                Ok(r)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_accept_order() {
        let h = |a: &str| {
            let mut m = HeaderMap::new();
            m.insert(axum::http::header::ACCEPT, a.parse().unwrap());
            negotiate(&m)
        };
        assert_eq!(h("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"), Some(Representation::Table("v1")));
        assert_eq!(h("application/json;as=Table;v=v1beta1;g=meta.k8s.io"), Some(Representation::Table("v1beta1")));
        assert_eq!(h("application/json, */*"), Some(Representation::Json));
        assert_eq!(h("application/vnd.kubernetes.protobuf,application/json"), Some(Representation::Json));
        assert_eq!(h("application/vnd.kubernetes.protobuf"), None);
        assert_eq!(h("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"), Some(Representation::Metadata { version: "v1", list: true }));
        assert_eq!(h("application/json;as=Other;v=v1;g=meta.k8s.io"), None);
    }
}
