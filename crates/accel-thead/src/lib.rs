//! T-Head (Alibaba) PPUs: the `ppu-smi` readers (device table, `-L`, `-q`, the MIG devices
//! table), the detector that joins them with the PCI bus, the device-node proof by kernel minor,
//! the responder (device nodes only; the HGGC shim pair, `ppu-monitor` and a per-container
//! ledger directory for slices; the control, card and capability nodes for a partition), the
//! `ppu-smi mig` partitioner with its per-card ownership marker ([`mig`]), a recorded host's
//! MIG replay ([`mig_replay`]), doctor and preflight ([`preflight`]), behind accel-backend's seam ([`backend`]). No HGML
//! library is loaded at build or run time.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
pub mod detector;
pub mod devnode;
pub mod doctor;
pub mod kmsg;
pub mod mig;
pub mod mig_replay;
pub mod preflight;
pub mod responder;
pub mod smi;
pub mod usage;
