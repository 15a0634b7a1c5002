//! The device-manager binary.
fn main() {}
