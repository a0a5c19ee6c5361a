//! Kubernetes `Status` error bodies, shaped like the real API server's so that
//! `kube::Error::Api` decodes them into `reason` / `code` the way clients branch on.

use serde_json::{Value, json};

use crate::resources::Resource;

/// Which precondition of a delete failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreconditionField {
    Uid,
    ResourceVersion,
}

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
    /// A Status whose `details` name the object (and, for `Invalid`, the causes), as
    /// the real server sends for precondition failures.
    #[error("{message}")]
    Detailed {
        code: u16,
        reason: &'static str,
        message: String,
        details: Value,
    },
}

/// `schema.GroupResource.String()`: `pods`, `deployments.apps`.
fn qualified(group: &str, name: &str) -> String {
    if group.is_empty() {
        name.to_string()
    } else {
        format!("{name}.{group}")
    }
}

/// `metav1.StatusDetails` for `name` of `kind` in `group` (group left out when empty).
fn details(group: &str, kind: &str, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": kind});
    if !group.is_empty() {
        d["group"] = group.into();
    }
    d
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

    /// An update or Binding whose precondition (the body's `metadata.uid`, or a
    /// Binding's `metadata.resourceVersion`) does not hold for the object stored under
    /// `name`: the storage layer's check (`storage.Preconditions.Check`), turned into a
    /// Conflict by `InterpretUpdateError`, word for word.
    pub fn storage_precondition_failed(
        res: &Resource,
        namespace: Option<&str>,
        name: &str,
        field: PreconditionField,
        wanted: &str,
        stored: &str,
    ) -> Self {
        let key = match namespace.filter(|_| res.namespaced) {
            Some(ns) => format!("/registry/{}/{ns}/{name}", res.plural),
            None => format!("/registry/{}/{name}", res.plural),
        };
        let what = match field {
            PreconditionField::Uid => "UID",
            PreconditionField::ResourceVersion => "ResourceVersion",
        };
        let resource = qualified(res.group, res.plural);
        Self::Detailed {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {stored}"
            ),
            details: details(res.group, res.plural, name),
        }
    }

    /// A delete whose preconditions (`uid` or `resourceVersion`) do not hold: the check
    /// `rest.BeforeDelete` makes, word for word (it names the kind, not the resource).
    pub fn delete_precondition_failed(
        res: &Resource,
        name: &str,
        field: PreconditionField,
        wanted: &str,
        stored: &str,
    ) -> Self {
        let kind = qualified(res.group, res.kind);
        let detail = match field {
            PreconditionField::Uid => format!(
                "the UID in the precondition ({wanted}) does not match the UID in record ({stored}). The object might have been deleted and then recreated"
            ),
            PreconditionField::ResourceVersion => format!(
                "the ResourceVersion in the precondition ({wanted}) does not match the ResourceVersion in record ({stored}). The object might have been modified"
            ),
        };
        Self::Detailed {
            code: 409,
            reason: "Conflict",
            message: format!("Operation cannot be fulfilled on {kind} \"{name}\": {detail}"),
            details: details(res.group, res.kind, name),
        }
    }

    /// A patch that would change `metadata.uid` (how a UID in a merge or strategic
    /// patch acts as a precondition): update validation's immutable-field error.
    pub fn uid_immutable(res: &Resource, name: &str, value: &str) -> Self {
        let kind = qualified(res.group, res.kind);
        let cause = format!("Invalid value: \"{value}\": field is immutable");
        let mut d = details(res.group, res.kind, name);
        d["causes"] =
            json!([{"reason": "FieldValueInvalid", "message": cause, "field": "metadata.uid"}]);
        Self::Detailed {
            code: 422,
            reason: "Invalid",
            message: format!("{kind} \"{name}\" is invalid: metadata.uid: {cause}"),
            details: d,
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
            Self::Other { code, .. } | Self::Detailed { code, .. } => *code,
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
            Self::Detailed { reason, .. } => reason,
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
        if let Self::Detailed { details, .. } = self {
            status["details"] = details.clone();
        }
        // The real server leaves `reason` out when it has none (StatusReasonUnknown).
        if self.reason().is_empty()
            && let Some(m) = status.as_object_mut()
        {
            m.remove("reason");
        }
        status
    }
}
