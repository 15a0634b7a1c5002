//! MetaX GPUs: the `mx-smi` readers (the default table and `mx-smi -L`), the kernel's views
//! (PCI functions of vendor `9999`, virtual functions skipped, DRM minors from the `metax`
//! module's listing, its version), the detector that joins them by PCI address, and the
//! responder that hands the control nodes and each card's DRM nodes itself (no vendor runtime,
//! no CDI), behind accel-backend's seam ([`backend`]). No MXSML library is loaded.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
pub mod count_ecc;
pub mod detector;
pub mod doctor;
pub mod mxsmi;
pub mod preflight;
pub mod procs;
pub mod responder;
pub mod sgpu;
pub mod usage;
