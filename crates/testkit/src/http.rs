//! The HTTP/1.1 server: hyper plumbing, body limits, JSON and streaming replies.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::admission::{self, Services};
use crate::discovery;
use crate::faults::{Fault, Faults, RequestRecord, fault_error};
use crate::routes::{self, Reply, Settings};
use crate::status::ApiError;
use crate::store::{GraceExpiry, Store};

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Emulator settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Events kept for watches; a watch from before them gets 410.
    pub history_limit: usize,
    /// How often a watch with `allowWatchBookmarks` gets a BOOKMARK when its
    /// resourceVersion moved (the real server: about once a minute).
    pub bookmark_interval: Duration,
    /// Watch length when the client sends no `timeoutSeconds`.
    pub default_watch_timeout: Duration,
    /// Request body limit; the real server's is 3 MiB.
    pub max_body_bytes: usize,
    /// When graceful pod deletions finish with no kubelet to finish them.
    pub grace_expiry: GraceExpiry,
    /// Where to listen; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Service ports that admission webhooks (`clientConfig.service`) are served
    /// on: `(namespace, name, port, address)`. More can be added at run time with
    /// [`ApiServer::register_service`].
    pub services: Vec<(String, String, u16, SocketAddr)>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            history_limit: 10_000,
            bookmark_interval: Duration::from_secs(1),
            default_watch_timeout: Duration::from_secs(1800),
            max_body_bytes: 3 * 1024 * 1024,
            grace_expiry: GraceExpiry::default(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            services: Vec::new(),
        }
    }
}

/// A running emulator; stops serving when dropped.
#[derive(Debug)]
pub struct ApiServer {
    addr: SocketAddr,
    store: Arc<Store>,
    faults: Arc<Faults>,
    services: Arc<Services>,
    task: JoinHandle<()>,
    reaper: JoinHandle<()>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        // Dropping the accept task drops its JoinSet, which aborts every connection.
        self.task.abort();
        self.reaper.abort();
    }
}

#[derive(Debug)]
struct Shared {
    addr: SocketAddr,
    store: Arc<Store>,
    faults: Arc<Faults>,
    services: Arc<Services>,
    settings: Settings,
    max_body: usize,
}

impl ApiServer {
    /// Starts on 127.0.0.1 with a random port and default options.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_with(Options::default()).await
    }

    /// Starts on `opts.listen` (127.0.0.1 with a random port by default).
    pub async fn start_with(opts: Options) -> std::io::Result<Self> {
        let listener = TcpListener::bind(opts.listen).await?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Store::new(opts.history_limit));
        store.set_grace_expiry(opts.grace_expiry);
        let reaper = {
            let store = store.clone();
            tokio::spawn(async move { store.run_reaper().await })
        };
        let faults = Arc::new(Faults::default());
        let services = Arc::new(Services::default());
        for (ns, name, port, to) in &opts.services {
            services.register(ns, name, *port, *to);
        }
        let shared = Arc::new(Shared {
            addr,
            store: store.clone(),
            faults: faults.clone(),
            services: services.clone(),
            settings: Settings {
                bookmark_interval: opts.bookmark_interval,
                default_watch_timeout: opts.default_watch_timeout,
            },
            max_body: opts.max_body_bytes,
        });
        let task = tokio::spawn(accept_loop(listener, shared));
        Ok(Self {
            addr,
            store,
            faults,
            services,
            task,
            reaper,
        })
    }

    /// Base URL, e.g. `http://127.0.0.1:34567`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Direct access to the objects, for seeding and assertions.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Fault-injection switches and the request log.
    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }

    /// Resolves when the server stopped serving on its own, with why: its accept loop
    /// or its deletion reaper ended, which only a bug (a panic) makes happen. Await it
    /// once.
    pub async fn stopped(&mut self) -> String {
        let (what, ended) = tokio::select! {
            r = &mut self.task => ("accept loop", r),
            r = &mut self.reaper => ("deletion reaper", r),
        };
        match ended {
            Ok(()) => format!("the {what} ended"),
            Err(e) if e.is_panic() => format!(
                "the {what} panicked: {}",
                hami_server::supervise::panic_text(e.into_panic())
            ),
            Err(e) => format!("the {what} was cancelled: {e}"),
        }
    }

    /// Routes calls to `https://<name>.<namespace>.svc:<port>` (webhook
    /// `clientConfig.service`) to `addr`, standing in for cluster DNS.
    pub fn register_service(&self, namespace: &str, name: &str, port: u16, addr: SocketAddr) {
        self.services.register(namespace, name, port, addr);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                // Accept errors (e.g. too many open files) are transient: keep serving.
                let Ok((stream, _)) = accepted else { continue };
                let shared = shared.clone();
                conns.spawn(async move {
                    let svc = service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(serve(&shared, req).await) }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
            Some(done) = conns.join_next(), if !conns.is_empty() => {
                if let Err(e) = done
                    && e.is_panic()
                {
                    tracing::error!(
                        error = %hami_server::supervise::panic_text(e.into_panic()),
                        "a connection's handler panicked; its client sees the connection close"
                    );
                }
            }
        }
    }
}

fn full(code: u16, v: &Value) -> Response<Body> {
    bytes_response(
        code,
        serde_json::to_vec(v).unwrap_or_default(),
        "application/json",
    )
}

fn bytes_response(code: u16, bytes: Vec<u8>, content_type: &str) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(bytes)).boxed_unsync());
    *resp.status_mut() =
        hyper::StatusCode::from_u16(code).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(ct) = hyper::header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, ct);
    }
    resp
}

fn error(e: &ApiError) -> Response<Body> {
    full(e.code(), &e.to_status())
}

async fn serve(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let resp = serve_inner(shared, req).await;
    let verb = routes::verb(
        &method,
        &path,
        &form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect(),
    );
    shared.faults.record(RequestRecord {
        verb: verb.to_string(),
        method,
        path,
        query,
        code: resp.status().as_u16(),
    });
    resp
}

async fn serve_inner(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query: HashMap<String, String> = req
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let header = |name: hyper::header::HeaderName| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let content_type = header(hyper::header::CONTENT_TYPE);
    let accept = header(hyper::header::ACCEPT);
    let verb = routes::verb(&method, &path, &query);
    let (latency, fault, hook) = shared.faults.decide(verb, &path);
    let wait = match fault {
        Some(Fault::Timeout(d)) => latency + d,
        _ => latency,
    };
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    if let Some(hook) = hook {
        hook();
    }
    if let Some(f) = fault {
        return error(&fault_error(f, verb, &path));
    }
    let body = match Limited::new(req.into_body(), shared.max_body)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return error(&ApiError::RequestEntityTooLarge {
                message: "the server has received a request that is too large".into(),
            });
        }
    };
    if method == "GET"
        && let Some(doc) = discovery::handle(&path, &accept, &shared.addr.to_string())
    {
        return match doc {
            Ok(d) => bytes_response(
                200,
                serde_json::to_vec(&d.body).unwrap_or_default(),
                &d.content_type,
            ),
            Err(e) => error(&e),
        };
    }
    // Refused by the handler too, but before webhooks see a create that will not happen.
    if method == "POST" && query.get("dryRun").is_some_and(|v| !v.is_empty()) {
        return error(&ApiError::bad_request(
            "dryRun is not supported by the emulator; the request was not applied",
        ));
    }
    let (body, content_type, warnings) = if method == "POST" {
        match admit(shared, &path, &query, &content_type, body).await {
            Ok(admitted) => admitted,
            Err(e) => return error(&e),
        }
    } else {
        (body, content_type, Vec::new())
    };
    let call = routes::Call {
        method: &method,
        path: &path,
        query: &query,
        content_type: &content_type,
        accept: &accept,
        body: &body,
    };
    let mut resp = reply(
        shared,
        routes::handle(&shared.store, &shared.settings, call),
    );
    for w in warnings {
        let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
        if let Ok(v) = hyper::header::HeaderValue::from_str(&text) {
            resp.headers_mut().append(hyper::header::WARNING, v);
        }
    }
    resp
}

/// Mutating admission for creates: the body defaulted (pods) and run through the
/// webhooks, re-encoded as JSON; other requests pass through unchanged.
async fn admit(
    shared: &Shared,
    path: &str,
    query: &HashMap<String, String>,
    content_type: &str,
    body: Bytes,
) -> Result<(Bytes, String, Vec<String>), ApiError> {
    let Ok(routes::Target::Collection { res, ns }) = routes::parse_path(path) else {
        return Ok((body, content_type.to_string(), Vec::new()));
    };
    let mut object = routes::parse_body(content_type, &body)?;
    if !object.is_object() {
        // Let the handler reject it with its usual error.
        return Ok((body, content_type.to_string(), Vec::new()));
    }
    if res.namespaced
        && let Some(ns) = &ns
        && object.pointer("/metadata/namespace").is_none()
    {
        if !object.get("metadata").is_some_and(Value::is_object) {
            object["metadata"] = serde_json::json!({});
        }
        object["metadata"]["namespace"] = ns.clone().into();
    }
    if res == crate::resources::PODS {
        crate::defaulting::pod(&mut object);
    }
    let req = admission::Request {
        resource: &res,
        namespace: ns.as_deref(),
        field_manager: query.get("fieldManager").map(String::as_str),
    };
    let admitted = admission::admit_create(&shared.store, &shared.services, req, object).await?;
    let bytes = serde_json::to_vec(&admitted.object).unwrap_or_default();
    Ok((
        Bytes::from(bytes),
        "application/json".to_string(),
        admitted.warnings,
    ))
}

fn reply(shared: &Shared, handled: Result<Reply, ApiError>) -> Response<Body> {
    match handled {
        Ok(Reply::Json(code, v)) => full(code, &v),
        Ok(Reply::Yaml(code, v)) => match serde_yaml_ng::to_string(&v) {
            Ok(text) => bytes_response(code, text.into_bytes(), "application/yaml"),
            Err(e) => error(&ApiError::InternalError {
                message: format!("cannot encode the answer as YAML: {e}"),
            }),
        },
        Ok(Reply::Watch(w)) => {
            let (tx, rx) = mpsc::channel::<Bytes>(64);
            tokio::spawn(crate::watch::run(shared.store.clone(), *w, tx));
            let stream = futures::stream::unfold(rx, |mut rx| async move {
                rx.recv()
                    .await
                    .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
            })
            .boxed();
            let mut resp = Response::new(BodyExt::boxed_unsync(StreamBody::new(stream)));
            resp.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            resp
        }
        Err(e) => error(&e),
    }
}
