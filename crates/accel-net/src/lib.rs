//! The node's network, read from sysfs alone (spec/rdma.md §2, §4, §8.2): every `class/net`
//! interface with its bus, PCI place, NUMA and CPU affinity, SR-IOV virtual functions and the RDMA
//! device bound to it, each RDMA device's link verdict ([`inventory::read_interfaces`]); and the
//! verbs character device an RDMA device is reached through ([`verbs::verbs_device`]).
//!
//! Node-level, never keyed on a manufacturer: every manufacturer's daemon on a node reads the
//! same list. Reads go through accel-host's [`Host`](accel_host::Host), every link followed inside
//! the host root ([`accel_host::realpath`]), so a recorded host answers like a live one. The
//! record's shape and the pure rules over it (labels, change, first-seen) are accel-core's
//! [`accel_core::interfaces`].
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod inventory;
pub mod verbs;

pub use inventory::{NetError, read_interfaces};
pub use verbs::{VerbsError, verbs_device};
