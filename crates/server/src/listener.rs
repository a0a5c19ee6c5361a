//! A listening socket that outlives the server on it, so a supervised server that
//! stopped can be started again on the same address.

use std::io;
use std::net::SocketAddr;

use tokio::net::TcpListener;

/// A bound socket each run of a server gets a handle of.
#[derive(Debug)]
pub struct Relistener(std::net::TcpListener);

/// The socket could not be taken over from tokio.
#[derive(Debug, thiserror::Error)]
#[error("cannot take over the socket listening on {address}: {source}")]
pub struct TakeOverError {
    pub address: String,
    pub source: io::Error,
}

impl Relistener {
    /// Takes over a bound tokio listener.
    pub fn new(listener: TcpListener) -> Result<Self, TakeOverError> {
        let address = listener
            .local_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string());
        // tokio hands it over non-blocking, as `from_std` needs it.
        listener
            .into_std()
            .map(Relistener)
            .map_err(|source| TakeOverError { address, source })
    }

    /// Takes over a bound std listener.
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<Self> {
        listener.set_nonblocking(true)?;
        Ok(Relistener(listener))
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    /// A tokio listener on the socket, for one run; needs a tokio runtime.
    pub fn tokio(&self) -> io::Result<TcpListener> {
        self.0.try_clone().and_then(TcpListener::from_std)
    }

    /// A std listener on the socket, for a run on a runtime of its own.
    pub fn std(&self) -> io::Result<std::net::TcpListener> {
        self.0.try_clone()
    }
}
