//! Iluvatar CoreX (BI-V100, BI-V150; PCI vendor `1e3e`; `iluvatar.com/gpu`): the `ixsmi` readers
//! (its table and the CSV query it shares with nvidia-smi), the detector that joins them with
//! the kernel's view by PCI address, the responder (`IX_VISIBLE_DEVICES` alone, which
//! ix-container-runtime turns into nodes; HAMi-core's CUDA-12 build for slices), doctor and the
//! usage sampler, behind accel-backend's seam ([`backend`]). No IXML library is loaded.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
pub mod detector;
pub mod doctor;
pub mod ixsmi;
pub mod preflight;
pub mod procs;
pub mod responder;
pub mod usage;
