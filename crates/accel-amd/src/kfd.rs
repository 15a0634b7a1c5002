//! The KFD topology as AMD reads it: [`accel_host::kfd`]'s reader (the tree is the kernel's,
//! whichever KFD driver publishes it), re-exported under this crate's name so its source
//! modules keep one place each. The detector keeps the nodes of AMD's vendor ids.

pub use accel_host::kfd::*;
