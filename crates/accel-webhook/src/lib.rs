//! The worker's Pod admission webhooks: AdmissionReview v1 over HTTPS (axum + rustls), serving
//! `/mutate-pods` and `/validate-pods` with accel-core's verdicts, plus `/healthz`, `/readyz` and
//! Prometheus `/metrics`.
//!
//! The verdicts themselves live in `accel_core::admission`; this crate owns the wire (the review
//! envelope, HTTP status codes, TLS with certificate reload) and asks for a queue's pool and the
//! RuntimeClasses that exist through one trait, [`PoolSource`], so it runs in tests without a
//! cluster.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod metrics;
pub mod pool;
pub mod review;
pub mod server;
pub mod tls;

pub use pool::{PoolSource, Readiness, StaticPool};
pub use server::{ServerConfig, ServerError, router, serve};
pub use tls::{CertReloader, TlsError};
