//! Benchmarks that cross the manufacturers' backends, kept out of the binary's crate so that
//! measuring a detector compiles the backends alone (not kube, tonic and the daemon) in release.
//! The benchmarks are in `benches/`; this library is empty. Figures: `BENCHMARKS.md`.
