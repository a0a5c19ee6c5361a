//! Reading request bodies with an upper bound, so a hostile or broken client cannot
//! make the process buffer without limit.

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::StatusCode;
use hyper::body::Body;
use hyper::header::CONTENT_LENGTH;

use crate::respond;
use crate::serve::HttpResponse;

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("request body could not be read: {0}")]
    Read(String),
}

impl BodyError {
    /// 413 for an oversized body, 400 for a broken one.
    pub fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Read(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// The error as a JSON error response.
    pub fn to_response(&self) -> HttpResponse {
        respond::error_json(self.status(), &self.to_string())
    }
}

/// Reads all of `body`, failing with [`BodyError::TooLarge`] as soon as more than
/// `limit` bytes arrive.
pub async fn read_bounded<B>(body: B, limit: usize) -> Result<Bytes, BodyError>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(BodyError::TooLarge { limit }),
        Err(e) => Err(BodyError::Read(e.to_string())),
    }
}

/// Reads the body of `req` up to `limit`, refusing at once when its declared
/// `Content-Length` is already over the limit.
pub async fn read_request_bounded<B>(
    req: hyper::Request<B>,
    limit: usize,
) -> Result<(hyper::http::request::Parts, Bytes), BodyError>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge { limit });
    }
    let (parts, body) = req.into_parts();
    let bytes = read_bounded(body, limit).await?;
    Ok((parts, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    #[tokio::test]
    async fn under_limit_is_read() {
        let got = read_bounded(Full::new(Bytes::from_static(b"hello")), 5).await;
        assert_eq!(got.ok(), Some(Bytes::from_static(b"hello")));
    }

    #[tokio::test]
    async fn over_limit_is_413() {
        let err = read_bounded(Full::new(Bytes::from_static(b"hello!")), 5)
            .await
            .err();
        let err = err.map(|e| (e.status(), e.to_string()));
        assert_eq!(
            err,
            Some((
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body is larger than the limit of 5 bytes".to_string()
            ))
        );
    }

    #[tokio::test]
    async fn declared_length_over_limit_is_refused_unread() {
        let req = hyper::Request::builder()
            .header(CONTENT_LENGTH, "1000000")
            .body(Full::new(Bytes::from_static(b"x")));
        let Ok(req) = req else {
            unreachable!("static request is valid")
        };
        let err = read_request_bounded(req, 10).await.err();
        assert!(matches!(err, Some(BodyError::TooLarge { limit: 10 })));
    }
}
