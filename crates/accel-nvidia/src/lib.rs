//! NVIDIA: procfs collector, nvidia-smi readers, enrich-by-UUID, samples, passthrough memory.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod smi;
