//! The `Registration` service on `kubelet.sock`: validate, dial the plugin back, ask its
//! options, then watch its devices, as kubelet's device manager does.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hami_kubelet_api::v1beta1::device_plugin_client::DevicePluginClient;
use hami_kubelet_api::v1beta1::registration_server::Registration;
use hami_kubelet_api::v1beta1::{Empty, RegisterRequest};
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::Inner;
use super::go_error::{go_quote, go_status};
use super::resource_name::is_extended_resource_name;
use super::state::{Endpoint, PluginCall, RegistrationRecord};

/// kubelet's `errFailedToDialDevicePlugin`.
const FAILED_TO_DIAL: &str = "failed to dial device plugin:";

pub(crate) struct RegistrationService {
    pub inner: Arc<Inner>,
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        tracing::info!(resource = %req.resource_name, endpoint = %req.endpoint, "kubelet: registration request");
        let index = self.inner.update(|s| {
            s.registrations.push(RegistrationRecord {
                version: req.version.clone(),
                endpoint: req.endpoint.clone(),
                resource_name: req.resource_name.clone(),
                options: req.options,
                result: None,
            });
            s.registrations.len() - 1
        });
        let result = register(&self.inner, &req).await;
        if let Err(e) = &result {
            tracing::info!(resource = %req.resource_name, error = %e, "kubelet: bad registration request");
        }
        self.inner.update(|s| {
            if let Some(r) = s.registrations.get_mut(index) {
                r.result = Some(result.clone());
            }
        });
        // A plain Go error returned from a gRPC handler reaches the client as code Unknown.
        result
            .map(|()| Response::new(Empty {}))
            .map_err(Status::unknown)
    }
}

async fn register(inner: &Arc<Inner>, req: &RegisterRequest) -> Result<(), String> {
    if req.version != hami_kubelet_api::VERSION {
        return Err(format!(
            "requested API version {} is not supported by kubelet. Supported version is [{}]",
            go_quote(&req.version),
            go_quote(hami_kubelet_api::VERSION)
        ));
    }
    if !is_extended_resource_name(&req.resource_name) {
        return Err(format!(
            "the ResourceName {} is invalid",
            go_quote(&req.resource_name)
        ));
    }
    let socket = endpoint_socket(&inner.dir, &req.endpoint)?;
    let mut client = dial(&socket, inner.opts.dial_timeout).await?;
    let resource = req.resource_name.clone();
    // PluginConnected: kubelet uses the options the plugin answers here, not those of Register.
    let options = client
        .get_device_plugin_options(Empty {})
        .await
        .map(|r| r.into_inner());
    inner.update(|s| {
        s.calls.push(PluginCall::GetDevicePluginOptions {
            resource: resource.clone(),
            result: options.clone().map_err(|e| go_status(&e)),
        })
    });
    let options =
        options.map_err(|e| format!("failed to get device plugin options: {}", go_status(&e)))?;

    let id = inner.update(|s| {
        let id = s.next_id();
        s.endpoints.insert(
            resource.clone(),
            Endpoint {
                id,
                socket: Some(socket.clone()),
                client: Some(client.clone()),
                options: Some(options),
                stopped_at: None,
                watch_task: None,
            },
        );
        s.updates.insert(resource.clone(), 0);
        id
    });
    let task = tokio::spawn(watch_devices(inner.clone(), resource.clone(), id, client));
    inner.update(|s| {
        if let Some(e) = s.endpoints.get_mut(&resource).filter(|e| e.id == id) {
            e.watch_task = Some(task.abort_handle());
        }
    });
    tracing::info!(%resource, socket = %socket.display(), "kubelet: device plugin connected");
    Ok(())
}

/// The plugin's socket. Kubelet joins the endpoint to its directory without checking it; the
/// emulator insists on a plain file name, since anything else is a plugin bug that a real
/// node would only show as a failed dial.
fn endpoint_socket(dir: &Path, endpoint: &str) -> Result<PathBuf, String> {
    let plain = !endpoint.is_empty()
        && endpoint != "."
        && endpoint != ".."
        && !endpoint.contains('/')
        && !endpoint.contains('\0');
    if !plain {
        return Err(format!(
            "{FAILED_TO_DIAL} endpoint {} is not a socket file name in {}",
            go_quote(endpoint),
            dir.display()
        ));
    }
    Ok(dir.join(endpoint))
}

/// Kubelet dials with `WithBlock` and a 10 s deadline: it keeps trying until the plugin
/// answers or the deadline passes.
async fn dial(socket: &Path, timeout: Duration) -> Result<DevicePluginClient<Channel>, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match hami_kubelet_api::unix::connect(socket).await {
            Ok(channel) => return Ok(DevicePluginClient::new(channel)),
            Err(e) if Instant::now() >= deadline => {
                tracing::info!(socket = %socket.display(), error = %e, "kubelet: cannot dial device plugin");
                return Err(format!("{FAILED_TO_DIAL} context deadline exceeded"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// `client.Run`: read ListAndWatch until it ends, then disconnect the plugin.
async fn watch_devices(
    inner: Arc<Inner>,
    resource: String,
    id: u64,
    mut client: DevicePluginClient<Channel>,
) {
    let why = match client.list_and_watch(Empty {}).await {
        Err(e) => go_status(&e),
        Ok(response) => {
            let mut stream = response.into_inner();
            loop {
                match stream.message().await {
                    Ok(Some(update)) => {
                        tracing::debug!(%resource, devices = update.devices.len(), "kubelet: state pushed by device plugin");
                        inner.update(|s| {
                            if s.endpoints.get(&resource).is_some_and(|e| e.id == id) {
                                s.replace_devices(&resource, update.devices);
                            }
                        });
                    }
                    Ok(None) => break "stream closed by the plugin".to_owned(),
                    Err(e) => break go_status(&e),
                }
            }
        }
    };
    tracing::info!(%resource, reason = %why, "kubelet: ListAndWatch ended unexpectedly for device plugin");
    // Only the registration this stream belongs to is disconnected: kubelet can stop a newer
    // registration over the same socket path when an old stream's end is processed late; a
    // plugin avoids that by ending its old streams before registering again.
    inner.update(|s| {
        if s.endpoints.get(&resource).is_some_and(|e| e.id == id) {
            s.disconnect(&resource);
        }
    });
}
