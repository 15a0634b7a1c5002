//! Hygon DCUs (K100_AI, BW, Z100; PCI vendor `1d94`): the kernel's views (the `hycu`/`hydcu`
//! module, its DRM listing, the KFD topology its fork of AMD's stack keeps), the vendor CLI
//! (`hy-smi`, or the `rocm-smi` fork of older DTK releases), `rocminfo`, the node-wide
//! multi-instance registry (`/etc/dmi_mig_config`), the detector that joins them by PCI address,
//! the `vdev.conf` slot ledger of logical slices and the responder (device nodes and mounts the
//! allocator injects itself), behind accel-backend's seam ([`backend`]). No vendor library
//! (ROCm-SMI, HSA, hydmi) is loaded.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
pub mod detector;
pub mod doctor;
pub mod dtk;
pub mod health;
pub mod hysmi;
pub mod mig;
pub mod mig_replay;
pub mod module;
pub mod preflight;
pub mod registry;
pub mod responder;
pub mod rocminfo;
pub mod usage;
pub mod vdev;
