//! gRPC over unix sockets, the only transport of the device plugin API: both kubelet and
//! every plugin dial a socket path and serve on a socket file in the device plugin directory.

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// Opens a channel to the gRPC server listening on `path`.
///
/// The URI is a placeholder (gRPC needs one); `localhost` is the authority kubelet sends.
/// The channel has no keepalive, like kubelet's: a plugin must not ping kubelet, and a
/// dead peer shows up as a failed call or an ended stream.
pub async fn connect(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path: PathBuf = path.to_path_buf();
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
}

/// The accepted connections of `listener`, as tonic's `serve_with_incoming*` wants them.
pub fn incoming(listener: UnixListener) -> UnixListenerStream {
    UnixListenerStream::new(listener)
}
