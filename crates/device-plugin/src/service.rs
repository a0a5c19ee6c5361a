//! The `DevicePlugin` gRPC service kubelet calls.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use hami_kubelet_api::v1beta1::device_plugin_server::DevicePlugin;
use hami_kubelet_api::v1beta1::{
    AllocateRequest, AllocateResponse, Device, DevicePluginOptions, Empty, ListAndWatchResponse,
    PreStartContainerRequest, PreStartContainerResponse, PreferredAllocationRequest,
    PreferredAllocationResponse,
};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::config::PluginConfig;
use crate::shared::Shared;

/// The options we register with and answer with (HAMi answers `GetDevicePluginOptions`
/// with preferred allocation on even when it registered it off; kubelet believes the RPC).
pub fn plugin_options(cfg: &PluginConfig) -> DevicePluginOptions {
    DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: cfg.preferred_allocation,
    }
}

pub(crate) struct PluginService {
    pub shared: Arc<Shared>,
    /// Cancelled when this server incarnation stops: open ListAndWatch streams end with it,
    /// otherwise graceful shutdown would wait for them forever.
    pub stop: CancellationToken,
}

#[tonic::async_trait]
impl DevicePlugin for PluginService {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(plugin_options(&self.shared.cfg)))
    }

    type ListAndWatchStream = BoxStream<'static, Result<ListAndWatchResponse, Status>>;

    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let cfg = self.shared.cfg.clone();
        let mut last: Option<Vec<Device>> = None;
        // The current list at once, then again whenever it changes.
        let stream = tokio_stream::wrappers::WatchStream::new(self.shared.inventory.subscribe())
            .filter_map(move |inventory| {
                let devices = inventory.plugin_devices(&cfg);
                let update = if last.as_ref() == Some(&devices) {
                    None
                } else {
                    last = Some(devices.clone());
                    tracing::debug!(devices = devices.len(), "ListAndWatch: sending device list");
                    Some(Ok(ListAndWatchResponse { devices }))
                };
                futures::future::ready(update)
            })
            .take_until(self.stop.clone().cancelled_owned());
        Ok(Response::new(stream.boxed()))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let span = hami_server::pod_span!("preferred_allocation");
        let answer = crate::preferred::preferred(&self.shared, request.into_inner())
            .instrument(span)
            .await;
        Ok(Response::new(answer))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let span = hami_server::pod_span!("allocate");
        crate::allocate::allocate(&self.shared, request.into_inner())
            .instrument(span)
            .await
            .map(Response::new)
            .map_err(|e| e.to_status())
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        // Nothing to do (the plugin registers without pre_start_required), and the call
        // names no pod: its span stays without one.
        let _call = hami_server::pod_span!("pre_start_container").entered();
        tracing::debug!("PreStartContainer: nothing to prepare");
        Ok(Response::new(PreStartContainerResponse {}))
    }
}
