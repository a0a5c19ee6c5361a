//! The serving mode every vendor's binary shares: the plugin's tasks, a readiness that
//! follows registration and publishing, and the admin port (`/healthz`, `/readyz`,
//! `/metrics`), all under one supervisor.

use std::sync::Arc;

use hami_server::CancellationToken;
use hami_server::admin::{AdminState, Readiness};
use hami_server::listener::{Relistener, TakeOverError};
use hami_server::supervise::{RestartPolicy, Supervisor, supervise_admin};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::{Plugin, PluginStatus};

/// Starts `plugin` (its metrics already in `registry`), the readiness follower and the
/// admin server under one supervisor, which the caller runs; with the readiness
/// `/readyz` reports.
pub fn start(
    plugin: Plugin,
    registry: Registry,
    admin_listener: TcpListener,
    shutdown: CancellationToken,
    policy: RestartPolicy,
) -> Result<(Readiness, Supervisor), TakeOverError> {
    let readiness = Readiness::not_ready("not registered with kubelet yet");
    let mut sup = Supervisor::new(readiness.clone(), shutdown, policy);
    let (status, r) = (plugin.status(), readiness.clone());
    sup.spawn("plugin status", move |stop| {
        follow_status(status.clone(), r.clone(), stop)
    });
    let admin = AdminState {
        readiness: readiness.clone(),
        registry: Arc::new(registry),
    };
    supervise_admin(&mut sup, Relistener::new(admin_listener)?, admin);
    plugin.supervise(&mut sup);
    Ok((readiness, sup))
}

/// Ready once registered with kubelet and the node annotation is published.
async fn follow_status(
    mut status: tokio::sync::watch::Receiver<PluginStatus>,
    readiness: Readiness,
    stop: CancellationToken,
) -> Result<(), String> {
    loop {
        let s = status.borrow_and_update().clone();
        match (s.registered, s.published) {
            (true, true) => readiness.set_ready(),
            (false, _) => readiness.set_not_ready("not registered with kubelet"),
            (true, false) => readiness.set_not_ready(format!(
                "node annotation not published: {}",
                s.publish_error.as_deref().unwrap_or("pending")
            )),
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            changed = status.changed() => if changed.is_err() {
                return Err("the plugin's status feed closed".into());
            },
        }
    }
}
