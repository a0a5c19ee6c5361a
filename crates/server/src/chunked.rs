//! A response body sent as a list of chunks, so a large answer assembled from cached
//! pieces (the scheduler's `/metrics` page, `docs/extender.md#metrics`) goes out without
//! being copied into one buffer first.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// The chunks of a body, sent in order; its length is known up front (`Content-Length`).
#[derive(Debug, Default)]
pub struct ChunkedBody {
    chunks: VecDeque<Bytes>,
    len: u64,
}

impl ChunkedBody {
    /// A body of `chunks` in order (empty ones are skipped).
    pub fn new(chunks: impl IntoIterator<Item = Bytes>) -> Self {
        let chunks: VecDeque<Bytes> = chunks.into_iter().filter(|c| !c.is_empty()).collect();
        let len = chunks.iter().map(|c| c.len() as u64).sum();
        ChunkedBody { chunks, len }
    }
}

impl From<Bytes> for ChunkedBody {
    fn from(body: Bytes) -> Self {
        ChunkedBody::new([body])
    }
}

impl Body for ChunkedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        Poll::Ready(this.chunks.pop_front().map(|chunk| {
            this.len -= chunk.len() as u64;
            Ok(Frame::data(chunk))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn sends_the_chunks_in_order_with_their_total_length() {
        let body = ChunkedBody::new([
            Bytes::from_static(b"ab"),
            Bytes::new(),
            Bytes::from_static(b"cde"),
        ]);
        assert_eq!(body.size_hint().exact(), Some(5));
        let mut frames = Vec::new();
        let mut body = body;
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map(Frame::into_data);
            frames.push(data.unwrap_or_default());
        }
        assert_eq!(frames, [&b"ab"[..], &b"cde"[..]]);
        assert!(body.is_end_stream());
        assert_eq!(body.size_hint().exact(), Some(0));
    }
}
