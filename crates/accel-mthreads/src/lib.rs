//! Moore Threads (MTT S4000, S5000, S30; PCI vendor `1ed5`; `mthreads.com/gpu`): the
//! `mthreads-gmi` readers (its table and `-q` report), the detector that joins them with the
//! kernel's view by PCI address, the responder (`MTHREADS_VISIBLE_DEVICES` alone, which the MT
//! container runtime turns into nodes; the two QoS variables for slices), doctor and the usage
//! sampler, behind accel-backend's seam ([`backend`]). No MTML library is loaded.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
pub mod detector;
pub mod doctor;
pub mod gmi;
pub mod preflight;
pub mod responder;
pub mod usage;
