//! The generated types must put every field on the wire under kubelet's field
//! numbers; these bytes are the protobuf encoding worked out by hand.

use hami_kubelet_api::v1beta1::{
    ContainerAllocateResponse, Device, DevicePluginOptions, NumaNode, RegisterRequest, TopologyInfo,
};
use prost::Message;

#[test]
fn register_request_uses_kubelets_field_numbers() {
    let req = RegisterRequest {
        version: "v1beta1".into(),
        endpoint: "a.sock".into(),
        resource_name: "x/y".into(),
        options: Some(DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }),
    };
    let mut want = vec![0x0a, 7];
    want.extend_from_slice(b"v1beta1");
    want.extend_from_slice(&[0x12, 6]);
    want.extend_from_slice(b"a.sock");
    want.extend_from_slice(&[0x1a, 3]);
    want.extend_from_slice(b"x/y");
    // field 4, length 2: { field 2 (varint) = 1 }
    want.extend_from_slice(&[0x22, 2, 0x10, 1]);
    assert_eq!(req.encode_to_vec(), want);
    assert_eq!(RegisterRequest::decode(want.as_slice()).ok(), Some(req));
}

#[test]
fn device_topology_and_allocate_maps_round_trip() {
    let dev = Device {
        id: "GPU-1-0".into(),
        health: hami_kubelet_api::HEALTHY.into(),
        topology: Some(TopologyInfo {
            nodes: vec![NumaNode { id: 1 }],
        }),
    };
    let bytes = dev.encode_to_vec();
    assert_eq!(&bytes[..2], &[0x0a, 7]);
    assert_eq!(Device::decode(bytes.as_slice()).ok(), Some(dev));

    let mut resp = ContainerAllocateResponse::default();
    resp.envs
        .insert("NVIDIA_VISIBLE_DEVICES".into(), "GPU-1".into());
    resp.annotations.insert("k".into(), "v".into());
    let back = ContainerAllocateResponse::decode(resp.encode_to_vec().as_slice()).ok();
    assert_eq!(back, Some(resp));
}
