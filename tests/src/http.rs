//! A plain-HTTP GET for the components' admin ports (/readyz, /metrics).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// GETs `path` from `addr`; the status and the body as text.
pub async fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let exchange = async {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("handshake with {addr}: {e}"))?;
        let conn = tokio::spawn(conn);
        let req = hyper::Request::get(path)
            .header(hyper::header::HOST, addr.to_string())
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("GET {path}: {e}"))?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("GET {path} body: {e}"))?
            .to_bytes();
        conn.abort();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| format!("GET http://{addr}{path} timed out"))?
}
