//! hami-k8s: the Kubernetes glue every hami-rs service shares.
//!
//! - [`binding`]: the Binding of a pod to a node, naming the pod's UID.
//! - [`client`]: finding the API server the standard way (in-cluster, else `KUBECONFIG`).
//! - [`lock`]: HAMi's node lock (`hami.io/mutex.lock`) with owners, expiry, re-entrancy and
//!   takeover of dangling locks, every write guarded by the node's resourceVersion.
//! - [`vendor_lock`]: a vendor's own time-stamp lock (Cambricon's).
//! - [`patch`]: JSON merge patches of annotations, the only kind of write HAMi makes;
//!   pod writes carry the pod's UID.
//! - [`events`]: a non-blocking recorder of core/v1 Events.
//! - [`quotas`]: the namespaces' ResourceQuota limits on device resources, watch-fed.
//! - [`watch`]: which watch errors no retry fixes (they end a supervised watch).

pub mod binding;
pub mod client;
pub mod events;
pub mod lock;
pub mod patch;
pub mod quotas;
pub mod vendor_lock;
pub mod watch;
