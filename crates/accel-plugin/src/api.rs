//! The generated kubelet APIs (see `proto/README.md`): device plugin v1beta1 and pod-resources
//! v1, with the unix-socket plumbing both ends need. Nothing here knows accelerators.

#[rustfmt::skip]
#[allow(clippy::all, clippy::pedantic, missing_docs)]
#[path = "gen/v1beta1.rs"]
pub mod deviceplugin;

#[rustfmt::skip]
#[allow(clippy::all, clippy::pedantic, missing_docs)]
#[path = "gen/v1.rs"]
pub mod podresources;
