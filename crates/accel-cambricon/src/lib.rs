//! Cambricon MLUs: the `cnmon` readers (the default card table and `cnmon info`'s per-card
//! blocks), the kernel's views (PCI functions of vendor `cabc`, `/dev/cambricon_dev<N>`, the
//! `cambricon_drv` module's version), the detector that joins them by PCI address, what cnmon's
//! health readings mean (`health`), the responder that hands each whole card's device nodes
//! itself (no vendor runtime, no CDI), and sMLU slices: the driver's listing (`procfs`), cnmon's
//! sMLU commands (`cnmon_smlu`), the manager that makes and reclaims instances (`smlu`), a
//! recorded host's stateful replay of them (`smlu_replay`) and preflight's `smlu-mode` row
//! (`preflight`), behind accel-backend's seam ([`backend`]). No cnDev library is loaded at build
//! or run time.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
pub mod cnmon;
pub mod cnmon_smlu;
pub mod detector;
pub mod doctor;
pub mod health;
pub mod nodes;
pub mod preflight;
pub mod procfs;
pub mod procs;
pub mod responder;
pub mod smlu;
pub mod smlu_replay;
pub mod usage;
