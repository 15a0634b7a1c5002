//! The generated kubelet APIs (see `proto/README.md`): DRA plugin v1 and plugin registration v1.
//! Nothing here knows accelerators.

#[rustfmt::skip]
#[allow(clippy::all, clippy::pedantic, missing_docs)]
#[path = "gen/k8s.io.kubelet.pkg.apis.dra.v1.rs"]
pub mod dra;

#[rustfmt::skip]
#[allow(clippy::all, clippy::pedantic, missing_docs)]
#[path = "gen/pluginregistration.rs"]
pub mod registration;
