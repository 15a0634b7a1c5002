//! NVIDIA: the procfs collector, nvidia-smi readers, enrich-by-UUID, samples, passthrough memory,
//! the XID parser ([`xid`]) and the fault record behind the health rule ([`faults`]).
//!
//! The detector follows seed 002: layer 1 is procfs/sysfs ([`procfs`]), layer 2 is nvidia-smi
//! ([`smi`]), merged by UUID into one inventory section ([`enrich`]).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod arch;
pub mod backend;
pub mod cdi;
pub mod detector;
pub mod doctor;
pub mod engine;
pub mod enrich;
/// The fault record is the seam's (every manufacturer's faults, one file); re-exported here.
pub use accel_backend::faults;
pub mod layer2;
pub mod mig_replay;
pub mod partitioner;
pub mod passthrough;
pub mod preflight;
pub mod procfs;
pub mod reset;
pub mod responder;
pub mod samples;
pub mod smi;
pub mod xid;
