//! Error texts as kubelet (Go) prints them, so the emulator's messages read like a real
//! node's events and pod statuses.

/// A gRPC status as Go's `status.Error(...).Error()` renders it.
pub fn go_status(status: &tonic::Status) -> String {
    format!(
        "rpc error: code = {} desc = {}",
        go_code_name(status.code()),
        status.message()
    )
}

/// Go's `codes.Code.String()`.
fn go_code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// A string quoted as Go's `%q` does for the printable ASCII names kubelet quotes.
pub fn go_quote(text: &str) -> String {
    format!("{text:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reads_like_grpc_go() {
        let s = tonic::Status::unknown("device number not matched");
        assert_eq!(
            go_status(&s),
            "rpc error: code = Unknown desc = device number not matched"
        );
        assert!(go_status(&tonic::Status::cancelled("x")).contains("code = Canceled"));
    }
}
