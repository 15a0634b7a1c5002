//! AMD: the KFD topology, DRM sysfs, amd-smi and rocm-smi readers, the detector that joins them
//! by PCI address, the amdgpu kernel-log fault parser, the CU-mask arithmetic and the responder
//! (device nodes injected directly; `libvrocm.so` and `HSA_CU_MASK` for slices), behind
//! accel-backend's seam ([`backend`]). No ROCm library is loaded at build or run time.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod amdsmi;
pub mod backend;
pub mod cumask;
pub mod detector;
pub mod doctor;
pub mod drm;
pub mod kfd;
pub mod kmsg;
pub mod responder;
pub mod rocmsmi;
pub mod text;
pub mod usage;
