//! The accept loop: plain or TLS connections, HTTP/1.1, graceful shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use hami_core::sync::MutexExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::chunked::ChunkedBody;
use crate::low_priority::{LowPriorityRuntime, LowPrioritySlot};
use crate::respond;
use crate::tls::{self, TlsConfig, TlsError};

/// What every handler answers with.
pub type HttpResponse = Response<ChunkedBody>;

/// A request handler shared by all connections.
pub type Handler = Arc<dyn Fn(Request<Incoming>) -> BoxFuture<'static, HttpResponse> + Send + Sync>;

/// Wraps an async function as a [`Handler`].
pub fn handler_fn<F, Fut>(f: F) -> Handler
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HttpResponse> + Send + 'static,
{
    Arc::new(move |req| Box::pin(f(req)))
}

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("could not read the listener's address: {0}")]
    LocalAddr(std::io::Error),
}

/// Timeouts that keep slow or idle clients from holding the server, and where some
/// connections are served.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Longest a client may take to finish the TLS handshake.
    pub handshake_timeout: Duration,
    /// Longest a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// After shutdown is asked, how long open connections get to finish.
    pub drain_timeout: Duration,
    /// Plain connections whose first request starts this way are served on another
    /// runtime.
    pub offload: Option<Offload>,
}

/// Plain (not TLS) connections whose first bytes are `prefix` (`GET /metrics`) are served
/// on the runtime `runtime` offers (a thread at the lowest CPU priority:
/// `low_priority.rs`), every request of the connection included; while it offers none
/// (its supervised task restarts it), where the others are. A TLS connection's first
/// bytes do not tell its path: it is served where the others are.
#[derive(Debug, Clone)]
pub struct Offload {
    pub prefix: &'static [u8],
    pub runtime: LowPrioritySlot,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(20),
            offload: None,
        }
    }
}

/// Serves `handler` on `listener` until `shutdown` is cancelled, then lets open
/// connections finish their requests (see [`ServeOptions::drain_timeout`]).
///
/// With [`TlsConfig::Files`] the certificate and key are loaded before the first
/// connection is accepted (a bad pair is an error here) and re-read whenever the files
/// change afterwards (a bad new pair is logged and the previous one kept).
pub async fn serve(
    listener: TcpListener,
    tls: TlsConfig,
    handler: Handler,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    serve_with(listener, tls, handler, shutdown, ServeOptions::default()).await
}

/// [`serve`] with explicit timeouts.
pub async fn serve_with(
    listener: TcpListener,
    tls: TlsConfig,
    handler: Handler,
    shutdown: CancellationToken,
    opts: ServeOptions,
) -> Result<(), ServeError> {
    let acceptor = tls::acceptor(&tls)?;
    let local = listener.local_addr().map_err(ServeError::LocalAddr)?;
    tracing::info!(
        address = %local,
        tls = acceptor.is_some(),
        "serving HTTP"
    );
    let tracker = TaskTracker::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    tracker.spawn(connection(
                        stream,
                        peer,
                        acceptor.clone(),
                        handler.clone(),
                        shutdown.clone(),
                        opts.clone(),
                    ));
                }
                Err(e) => {
                    // Usually out of file descriptors: back off instead of spinning.
                    tracing::warn!(address = %local, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    drop(listener);
    tracker.close();
    if tokio::time::timeout(opts.drain_timeout, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            address = %local,
            open = tracker.len(),
            "connections still open after the drain timeout; closing them"
        );
    }
    tracing::info!(address = %local, "server stopped");
    Ok(())
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: Option<TlsAcceptor>,
    handler: Handler,
    shutdown: CancellationToken,
    opts: ServeOptions,
) {
    let _ = stream.set_nodelay(true);
    match acceptor {
        None => match offload_runtime(&stream, peer, &opts).await {
            Some(runtime) => serve_offloaded(stream, peer, handler, shutdown, opts, runtime).await,
            None => http(TokioIo::new(stream), peer, handler, shutdown, &opts).await,
        },
        Some(acceptor) => {
            match tokio::time::timeout(opts.handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => http(TokioIo::new(tls), peer, handler, shutdown, &opts).await,
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        }
    }
}

/// The runtime a plain connection is served on when it is to be offloaded and one is
/// running; `None`: here.
async fn offload_runtime(
    stream: &TcpStream,
    peer: SocketAddr,
    opts: &ServeOptions,
) -> Option<Arc<LowPriorityRuntime>> {
    let offload = opts.offload.as_ref()?;
    if !starts_with(stream, offload.prefix, opts).await {
        return None;
    }
    let runtime = offload.runtime.current();
    if runtime.is_none() {
        tracing::debug!(%peer, thread = offload.runtime.name(), "the thread is down (restarting); serving the connection at normal priority");
    }
    runtime
}

/// Whether the first bytes the client sent on `stream` are `prefix` (left unread). A
/// client that sends nothing within the header timeout, or only part of the prefix in
/// its first segment, is served as any other.
async fn starts_with(stream: &TcpStream, prefix: &[u8], opts: &ServeOptions) -> bool {
    let mut buf = [0u8; 64];
    let Some(first) = buf.get_mut(..prefix.len()) else {
        return false;
    };
    let peeked = tokio::time::timeout(opts.header_read_timeout, stream.peek(first)).await;
    matches!(peeked, Ok(Ok(n)) if n == prefix.len()) && buf.starts_with(prefix)
}

/// Serves the connection on `runtime` (the socket moved to that runtime's reactor), and
/// waits for it there, so the server's drain and shutdown cover it as any other; the
/// runtime runs on while it is held here. A connection is never dropped unsaid: if the
/// runtime stopped before the connection's task began, the socket comes back and is
/// served here at normal priority; if it stopped while serving it (or the task
/// panicked), the connection is closed and that is logged as an error
/// (`docs/architecture.md#supervision`).
async fn serve_offloaded(
    stream: TcpStream,
    peer: SocketAddr,
    handler: Handler,
    shutdown: CancellationToken,
    opts: ServeOptions,
    runtime: Arc<LowPriorityRuntime>,
) {
    let socket = match stream.into_std() {
        Ok(socket) => socket,
        Err(e) => {
            tracing::error!(%peer, error = %e, "cannot move the connection to its runtime; closing it");
            return;
        }
    };
    // The connection's task takes the socket when it begins; one that never began (its
    // runtime stopped first) leaves it here.
    let handoff = Arc::new(Mutex::new(Some(socket)));
    let served = runtime.handle().spawn({
        let (handoff, handler, shutdown, opts) = (
            handoff.clone(),
            handler.clone(),
            shutdown.clone(),
            opts.clone(),
        );
        async move {
            let Some(socket) = handoff.lock_unpoisoned().take() else {
                return;
            };
            serve_socket(socket, peer, handler, shutdown, &opts).await
        }
    });
    let Err(e) = served.await else {
        return;
    };
    let left = handoff.lock_unpoisoned().take();
    match left {
        Some(socket) => {
            tracing::warn!(%peer, thread = runtime.name(), "the thread stopped before it served the connection; serving it at normal priority");
            serve_socket(socket, peer, handler, shutdown, &opts).await
        }
        None => tracing::error!(
            %peer,
            thread = runtime.name(),
            error = %e,
            "the connection was closed: its thread stopped or its task panicked while serving it"
        ),
    }
}

/// Serves a socket taken off another runtime's reactor on this one.
async fn serve_socket(
    socket: std::net::TcpStream,
    peer: SocketAddr,
    handler: Handler,
    shutdown: CancellationToken,
    opts: &ServeOptions,
) {
    match TcpStream::from_std(socket) {
        Ok(stream) => http(TokioIo::new(stream), peer, handler, shutdown, opts).await,
        Err(e) => {
            tracing::error!(%peer, error = %e, "cannot serve the connection on this runtime; closing it")
        }
    }
}

async fn http<I>(
    io: I,
    peer: SocketAddr,
    handler: Handler,
    shutdown: CancellationToken,
    opts: &ServeOptions,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let handler = handler.clone();
        async move { Ok::<_, Infallible>(guarded(handler, req).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(opts.header_read_timeout);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// Runs the handler; a panic inside it becomes a 500 for this request instead of a
/// dropped connection.
async fn guarded(handler: Handler, req: Request<Incoming>) -> HttpResponse {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    match AssertUnwindSafe(handler(req)).catch_unwind().await {
        Ok(resp) => resp,
        Err(_) => {
            tracing::error!(%method, %path, "handler panicked");
            respond::error_json(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cpu_class_handler, http_request, request};

    /// A connection handed to a runtime that has stopped is served here, not dropped.
    #[tokio::test]
    async fn a_connection_for_a_stopped_runtime_is_served_here() {
        let runtime = Arc::new(LowPriorityRuntime::start("test-stopped").unwrap());
        runtime.shut_down();
        assert_eq!(runtime.ended().await, "its runtime was shut down");

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (stream, peer) = listener.accept().await.unwrap();
            let handler = cpu_class_handler();
            let (opts, shutdown) = (ServeOptions::default(), CancellationToken::new());
            serve_offloaded(stream, peer, handler, shutdown, opts, runtime).await;
        });
        let answer = http_request(addr, request("GET", "/metrics", "").unwrap())
            .await
            .unwrap();
        assert_eq!(
            (answer.status, answer.text()),
            (StatusCode::OK, "normal\n".into())
        );
        server.await.unwrap();
    }
}
