//! Annotation and label keys of HAMi's wire protocol (`docs/protocol.md`, sections
//! Pod annotations the scheduler writes, Node annotations, User annotations).

/// Pod: chosen node (also written as a label of the same name).
pub const VGPU_NODE: &str = "hami.io/vgpu-node";
/// Pod: Unix seconds of the filter decision.
pub const VGPU_TIME: &str = "hami.io/vgpu-time";
/// Pod: devices still to hand out (NVIDIA); the device plugin erases entries as it allocates.
pub const NVIDIA_DEVICES_TO_ALLOCATE: &str = "hami.io/vgpu-devices-to-allocate";
/// Pod: devices given at filter time; the source of truth for usage accounting (NVIDIA).
pub const NVIDIA_DEVICES_ALLOCATED: &str = "hami.io/vgpu-devices-allocated";
/// Pod: MIG reservations (JSON).
pub const MIG_ALLOCATIONS: &str = "hami.io/vgpu-mig-allocations";
/// Pod: `allocating`, `success` or `failed`.
pub const BIND_PHASE: &str = "hami.io/bind-phase";
/// Pod: Unix seconds of the bind.
pub const BIND_TIME: &str = "hami.io/bind-time";

/// Node: NVIDIA device inventory.
pub const NVIDIA_NODE_REGISTER: &str = "hami.io/node-nvidia-register";
/// Node: NVIDIA pairwise topology scores.
pub const NVIDIA_NODE_SCORE: &str = "hami.io/node-nvidia-score";
/// Node: NVIDIA handshake.
pub const NVIDIA_NODE_HANDSHAKE: &str = "hami.io/node-handshake";
/// Node: the node lock shared by every vendor but Cambricon.
pub const NODE_LOCK: &str = "hami.io/mutex.lock";
/// Node: comma list of device UUIDs excluded from new allocations.
pub const DEVICE_CORDON: &str = "hami.io/device-cordon";

/// Pod: `binpack` or `spread` for node choice.
pub const NODE_SCHEDULER_POLICY: &str = "hami.io/node-scheduler-policy";
/// Pod: GPU policy or comma chain of policies.
pub const GPU_SCHEDULER_POLICY: &str = "hami.io/gpu-scheduler-policy";
/// Pod: `slot=<n>,core=<n>,memory=<n>` device score weights.
pub const DEVICE_SCORING_WEIGHTS: &str = "hami.io/device-scoring-weights";

/// Pod (NVIDIA): allowed / forbidden device models (substring match).
pub const NVIDIA_USE_GPUTYPE: &str = "nvidia.com/use-gputype";
pub const NVIDIA_NOUSE_GPUTYPE: &str = "nvidia.com/nouse-gputype";
/// Pod (NVIDIA): allowed / forbidden device UUIDs (exact match).
pub const NVIDIA_USE_GPUUUID: &str = "nvidia.com/use-gpuuuid";
pub const NVIDIA_NOUSE_GPUUUID: &str = "nvidia.com/nouse-gpuuuid";
/// Pod (NVIDIA): all GPUs of a container on one NUMA node.
pub const NVIDIA_NUMA_BIND: &str = "nvidia.com/numa-bind";
/// Pod (NVIDIA): allowed device modes (the device mode must be a substring).
pub const NVIDIA_VGPU_MODE: &str = "nvidia.com/vgpu-mode";
