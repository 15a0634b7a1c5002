//! The edge to the machine: files under a root, programs with deadlines, the PCI bus.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
