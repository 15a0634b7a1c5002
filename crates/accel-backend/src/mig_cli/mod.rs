//! The MIG command-line dialect of `nvidia-smi mig`, which T-Head's `ppu-smi mig` forks: its
//! listings ([`listing`]) and a [`crate::partition::Partitioner`] that drives any tool speaking
//! it ([`partitioner`]), the tool's own differences (its name, how it names a device, where
//! it prints MIG UUIDs and compute processes) behind [`partitioner::MigTool`].
//!
//! It lives in the seam crate because two manufacturers' tools print it; it knows the dialect,
//! not either manufacturer.

pub mod listing;
pub mod partitioner;
pub mod replay;
