//! Kubernetes `Status` error bodies, shaped like the real API server's so that
//! `kube::Error::Api` decodes them into `reason` / `code` the way clients branch on.

use serde_json::{Value, json};

/// An API error as the API server reports it (HTTP code + `Status.reason`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    NotFound { message: String },
    #[error("{message}")]
    AlreadyExists { message: String },
    #[error("{message}")]
    Conflict { message: String },
    #[error("{message}")]
    Invalid { message: String },
    #[error("{message}")]
    BadRequest { message: String },
    /// Watch or continue token older than the retained history. The real server
    /// reports this as reason `Expired`, code 410 (`errors.NewResourceExpired`).
    #[error("{message}")]
    Expired { message: String },
    #[error("{message}")]
    Gone { message: String },
    #[error("{message}")]
    MethodNotAllowed { message: String },
    #[error("{message}")]
    UnsupportedMediaType { message: String },
    #[error("{message}")]
    RequestEntityTooLarge { message: String },
    #[error("{message}")]
    InternalError { message: String },
    #[error("{message}")]
    Timeout { message: String },
    #[error("{message}")]
    Forbidden { message: String },
    /// The `Accept` header named no representation the emulator produces.
    #[error("{message}")]
    NotAcceptable { message: String },
    /// A Status someone else decided on (an admission webhook's denial).
    #[error("{message}")]
    Other {
        code: u16,
        reason: String,
        message: String,
    },
}

impl ApiError {
    pub fn not_found(plural: &str, name: &str) -> Self {
        Self::NotFound {
            message: format!("{plural} \"{name}\" not found"),
        }
    }
    pub fn already_exists(plural: &str, name: &str) -> Self {
        Self::AlreadyExists {
            message: format!("{plural} \"{name}\" already exists"),
        }
    }
    /// The exact wording of the API server's optimistic-concurrency failure.
    pub fn conflict(plural: &str, name: &str) -> Self {
        Self::Conflict {
            message: format!(
                "Operation cannot be fulfilled on {plural} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid {
            message: message.into(),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::BadRequest {
            message: message.into(),
        }
    }

    /// HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            Self::NotFound { .. } => 404,
            Self::AlreadyExists { .. } | Self::Conflict { .. } => 409,
            Self::Invalid { .. } => 422,
            Self::BadRequest { .. } => 400,
            Self::Expired { .. } | Self::Gone { .. } => 410,
            Self::MethodNotAllowed { .. } => 405,
            Self::UnsupportedMediaType { .. } => 415,
            Self::RequestEntityTooLarge { .. } => 413,
            Self::InternalError { .. } => 500,
            Self::Timeout { .. } => 504,
            Self::Forbidden { .. } => 403,
            Self::NotAcceptable { .. } => 406,
            Self::Other { code, .. } => *code,
        }
    }

    /// `Status.reason` as in k8s.io/apimachinery/pkg/apis/meta/v1 `StatusReason`.
    pub fn reason(&self) -> &str {
        match self {
            Self::NotFound { .. } => "NotFound",
            Self::AlreadyExists { .. } => "AlreadyExists",
            Self::Conflict { .. } => "Conflict",
            Self::Invalid { .. } => "Invalid",
            Self::BadRequest { .. } => "BadRequest",
            Self::Expired { .. } => "Expired",
            Self::Gone { .. } => "Gone",
            Self::MethodNotAllowed { .. } => "MethodNotAllowed",
            Self::UnsupportedMediaType { .. } => "UnsupportedMediaType",
            Self::RequestEntityTooLarge { .. } => "RequestEntityTooLarge",
            Self::InternalError { .. } => "InternalError",
            Self::Timeout { .. } => "Timeout",
            Self::Forbidden { .. } => "Forbidden",
            Self::NotAcceptable { .. } => "NotAcceptable",
            Self::Other { reason, .. } => reason,
        }
    }

    /// The `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        // The real server leaves `reason` out when it has none (StatusReasonUnknown).
        if self.reason().is_empty()
            && let Some(m) = status.as_object_mut()
        {
            m.remove("reason");
        }
        status
    }
}
