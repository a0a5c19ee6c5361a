//! Content negotiation: which representation an `Accept` header asks for.
//!
//! The real API server serves one object in several shapes, picked by media-type
//! parameters (`application/json;as=Table;v=v1;g=meta.k8s.io`). Clients list what
//! they can read in order of preference and always end with a plain type they fall
//! back to; the first entry the server can produce wins. Protobuf is not emulated,
//! so `application/vnd.kubernetes.protobuf` entries are skipped and the JSON entry
//! that follows them is served, exactly as a client that offers both expects.

use crate::status::ApiError;

/// How a body is encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Yaml,
}

impl Encoding {
    pub fn media_type(self) -> &'static str {
        match self {
            Self::Json => "application/json",
            Self::Yaml => "application/yaml",
        }
    }
}

/// What the client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// The object itself.
    Object(Encoding),
    /// `meta.k8s.io` `Table` (the `v` parameter, v1 or v1beta1).
    Table(&'static str),
    /// `meta.k8s.io` `PartialObjectMetadata` / `PartialObjectMetadataList`.
    Metadata(&'static str),
    /// `apidiscovery.k8s.io` `APIGroupDiscoveryList` (v2 or v2beta1).
    AggregatedDiscovery(&'static str),
}

/// One entry of an `Accept` header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct MediaRange {
    essence: String,
    group: Option<String>,
    version: Option<String>,
    as_kind: Option<String>,
}

fn parse_entry(entry: &str) -> MediaRange {
    let mut parts = entry.split(';').map(str::trim);
    let mut out = MediaRange {
        essence: parts.next().unwrap_or("").to_ascii_lowercase(),
        ..MediaRange::default()
    };
    for p in parts {
        let Some((k, v)) = p.split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches('"').to_string();
        match k.trim() {
            "g" => out.group = Some(v),
            "v" => out.version = Some(v),
            "as" => out.as_kind = Some(v),
            _ => {}
        }
    }
    out
}

fn plain_encoding(essence: &str) -> Option<Encoding> {
    match essence {
        "application/json" | "application/*" | "*/*" | "" => Some(Encoding::Json),
        "application/yaml" => Some(Encoding::Yaml),
        _ => None,
    }
}

/// What a resource request (get, list, watch) should answer with. `list` tells
/// whether the response is a list, which decides the `as=` kind of metadata-only
/// requests.
pub fn for_resource(accept: &str, list: bool) -> Result<Wanted, ApiError> {
    pick(accept, |m| {
        let json = m.essence == "application/json";
        match (
            m.group.as_deref(),
            m.as_kind.as_deref(),
            m.version.as_deref(),
        ) {
            (None, None, _) => plain_encoding(&m.essence).map(Wanted::Object),
            (Some("meta.k8s.io"), Some("Table"), Some(v)) if json => {
                meta_version(v).map(Wanted::Table)
            }
            (Some("meta.k8s.io"), Some(kind), Some(v)) if json => {
                let want = if list {
                    "PartialObjectMetadataList"
                } else {
                    "PartialObjectMetadata"
                };
                (kind == want)
                    .then(|| meta_version(v))
                    .flatten()
                    .map(Wanted::Metadata)
            }
            _ => None,
        }
    })
}

/// What a discovery request (`/api`, `/apis`) should answer with.
pub fn for_discovery(accept: &str) -> Result<Wanted, ApiError> {
    pick(accept, |m| {
        match (
            m.group.as_deref(),
            m.as_kind.as_deref(),
            m.version.as_deref(),
        ) {
            (None, None, _) => plain_encoding(&m.essence).map(Wanted::Object),
            (Some("apidiscovery.k8s.io"), Some("APIGroupDiscoveryList"), Some(v))
                if m.essence == "application/json" =>
            {
                match v {
                    "v2" => Some(Wanted::AggregatedDiscovery("v2")),
                    "v2beta1" => Some(Wanted::AggregatedDiscovery("v2beta1")),
                    _ => None,
                }
            }
            _ => None,
        }
    })
}

/// What a non-resource request (`/version`, `/openapi/...`) answers with: JSON
/// unless the client only takes something else.
pub fn for_plain_json(accept: &str) -> Result<(), ApiError> {
    pick(accept, |m| {
        (m.group.is_none() && plain_encoding(&m.essence) == Some(Encoding::Json)).then_some(())
    })
}

fn meta_version(v: &str) -> Option<&'static str> {
    match v {
        "v1" => Some("v1"),
        "v1beta1" => Some("v1beta1"),
        _ => None,
    }
}

fn pick<T>(accept: &str, mut f: impl FnMut(&MediaRange) -> Option<T>) -> Result<T, ApiError> {
    let accept = accept.trim();
    if accept.is_empty()
        && let Some(t) = f(&MediaRange::default())
    {
        return Ok(t);
    }
    for entry in accept.split(',').filter(|e| !e.trim().is_empty()) {
        if let Some(t) = f(&parse_entry(entry)) {
            return Ok(t);
        }
    }
    Err(ApiError::NotAcceptable {
        message: format!(
            "only the following media types are accepted: application/json, application/yaml (got {accept:?})"
        ),
    })
}

/// The request body's encoding from `Content-Type` (create and update).
pub fn body_encoding(content_type: &str) -> Result<Encoding, ApiError> {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "" | "application/json" => Ok(Encoding::Json),
        "application/yaml" => Ok(Encoding::Yaml),
        other => Err(ApiError::UnsupportedMediaType {
            message: format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {other:?})"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_get_asks_for_a_table_first() {
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(for_resource(accept, true).unwrap(), Wanted::Table("v1"));
        assert_eq!(
            for_resource("application/json;as=Table;v=v1beta1;g=meta.k8s.io", false).unwrap(),
            Wanted::Table("v1beta1")
        );
    }

    #[test]
    fn protobuf_falls_back_to_json_and_alone_is_refused() {
        assert_eq!(
            for_resource(
                "application/vnd.kubernetes.protobuf, application/json",
                false
            )
            .unwrap(),
            Wanted::Object(Encoding::Json)
        );
        let e = for_resource("application/vnd.kubernetes.protobuf", false).unwrap_err();
        assert_eq!(e.code(), 406);
    }

    #[test]
    fn plain_and_wildcards_and_yaml() {
        for a in ["", "*/*", "application/json", "application/*;q=0.8"] {
            assert_eq!(
                for_resource(a, false).unwrap(),
                Wanted::Object(Encoding::Json),
                "{a}"
            );
        }
        assert_eq!(
            for_resource("application/yaml", false).unwrap(),
            Wanted::Object(Encoding::Yaml)
        );
        assert!(for_resource("text/html", false).is_err());
    }

    #[test]
    fn metadata_kind_must_match_list_or_item() {
        let list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(for_resource(list, true).unwrap(), Wanted::Metadata("v1"));
        assert!(for_resource(list, false).is_err());
        let item = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(for_resource(item, false).unwrap(), Wanted::Metadata("v1"));
        assert_eq!(
            for_resource(item, true).unwrap(),
            Wanted::Object(Encoding::Json)
        );
    }

    #[test]
    fn discovery_prefers_aggregated_when_offered() {
        let kubectl =
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
        assert_eq!(
            for_discovery(kubectl).unwrap(),
            Wanted::AggregatedDiscovery("v2")
        );
        assert_eq!(
            for_discovery("application/json").unwrap(),
            Wanted::Object(Encoding::Json)
        );
        assert_eq!(
            for_discovery("application/json;g=apidiscovery.k8s.io;v=v9;as=APIGroupDiscoveryList,application/json").unwrap(),
            Wanted::Object(Encoding::Json)
        );
    }

    #[test]
    fn body_types() {
        assert_eq!(
            body_encoding("application/json; charset=utf-8").unwrap(),
            Encoding::Json
        );
        assert_eq!(body_encoding("application/yaml").unwrap(), Encoding::Yaml);
        assert_eq!(
            body_encoding("application/vnd.kubernetes.protobuf")
                .unwrap_err()
                .code(),
            415
        );
    }
}
