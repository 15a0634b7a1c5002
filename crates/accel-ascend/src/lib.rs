//! Huawei Ascend NPUs: the kernel's view (`/dev/davinci*`, the control nodes, the driver's and
//! CANN's version files), the `npu-smi` readers, the detector that joins them (both DCMI
//! generations, identity from the die id), the container-share flag, vcann-rt's
//! `npu_info.config`, and the responder (`ASCEND_VISIBLE_DEVICES` naming the driver's own
//! numbers), behind accel-backend's seam ([`backend`]). No DCMI library is loaded.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
pub mod detector;
pub mod doctor;
pub mod health;
pub mod kernel;
pub mod npuconfig;
pub mod npusmi;
pub mod preflight;
pub mod procs;
pub mod product;
pub mod responder;
pub mod share;
pub mod soc;
pub mod topo;
pub mod usage;
