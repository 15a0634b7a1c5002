//! The generated kubelet APIs (see `proto/README.md`): DRA plugin v1, plugin registration v1 and
//! DRA device health v1alpha1.
//! Nothing here knows accelerators.

#[rustfmt::skip]
#[allow(clippy::all, clippy::pedantic, missing_docs)]
#[path = "gen/k8s.io.kubelet.pkg.apis.dra.v1.rs"]
pub mod dra;

#[rustfmt::skip]
#[allow(clippy::all, clippy::pedantic, missing_docs)]
#[path = "gen/pluginregistration.rs"]
pub mod registration;

#[rustfmt::skip]
#[allow(clippy::all, clippy::pedantic, missing_docs)]
#[path = "gen/v1alpha1.rs"]
pub mod health;
