//! The Moore Threads responder: every answer is environment only — no device node, no mount, no
//! file on the host, nothing kept (spec §4). Exclusive, shared and visibility grants are exactly
//! `MTHREADS_VISIBLE_DEVICES=<IDs>` (the accelerators' UUIDs, comma-joined in ascending index),
//! which the MT container runtime turns into device nodes and the user-space driver. A slice adds
//! the two QoS variables the host's sGPU kernel module enforces:
//! `MTHREADS_QOS_MEMORY_LIMIT` (the VRAM budget in **bytes**, the hard cap) and
//! `MTHREADS_QOS_COMPUTING_POWER_WEIGHT` (the cores percentage, 100 unless asked — a relative
//! scheduling weight, not a cap). A slice is one accelerator (the webhook's rule), whose VRAM is
//! the budget's basis. The cap comes from the container's `.sliced.memory-percentage` or
//! `.sliced.memory-mib` request; a slice with neither (a Pod that bypassed the webhook) is refused,
//! "derive sliced memory limit: …" (spec §4.3), never given a cap it did not ask for.

use accel_backend::pod::Container;
use accel_backend::respond::{Answer, Injection, PrepareError, Responder, ResponderError};
use accel_backend::vendor_runtime::{slice_mib, visible_devices};
use accel_core::ledger::Family;

/// The visible-devices variable the MT container runtime reads.
pub const VISIBLE_DEVICES: &str = "MTHREADS_VISIBLE_DEVICES";
/// A slice's VRAM cap, in bytes.
pub const QOS_MEMORY_LIMIT: &str = "MTHREADS_QOS_MEMORY_LIMIT";
/// A slice's compute weight.
pub const QOS_COMPUTING_POWER_WEIGHT: &str = "MTHREADS_QOS_COMPUTING_POWER_WEIGHT";

/// The Moore Threads responder (stateless).
#[derive(Debug, Clone, Copy, Default)]
pub struct MthreadsResponder;

impl MthreadsResponder {
    /// The answer for one container.
    pub fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        let mut injection = visible_devices(VISIBLE_DEVICES, answer.seats)?;
        if answer.family == Some(Family::Sliced) {
            let name = answer.container.map_or("main", |c| c.name.as_str());
            let Some(first) = answer.seats.first() else {
                return Err(ResponderError::Refused(format!(
                    "no allocated accelerator found for sliced container {name:?}"
                )));
            };
            if let Some(base) = without_memory(answer.container) {
                return Err(ResponderError::Refused(format!(
                    "derive sliced memory limit: container {name:?} has no \
                     {base}.sliced.memory-percentage or {base}.sliced.memory-mib request"
                )));
            }
            let bytes = slice_mib(first, answer.slice_units)?.saturating_mul(1024 * 1024);
            injection
                .envs
                .insert(QOS_MEMORY_LIMIT.into(), bytes.to_string());
            injection.envs.insert(
                QOS_COMPUTING_POWER_WEIGHT.into(),
                answer.cores_percentage.unwrap_or(100).to_string(),
            );
        }
        Ok(injection)
    }
}

/// The resource base of a `<base>.sliced` request of the container that carries neither
/// `<base>.sliced.memory-percentage` nor `<base>.sliced.memory-mib` (`.units` alone is no memory
/// dimension: the webhook only ever writes it beside one of them), the first such; `None` when
/// every sliced request has one. The base is read from the request, so a renamed resource base
/// is read alike; no container known is the default base without memory.
fn without_memory(container: Option<&Container>) -> Option<String> {
    let Some(container) = container else {
        return Some(
            accel_core::Manufacturer::Mthreads
                .default_resource_base()
                .to_string(),
        );
    };
    let has = |key: String| container.count(&key).is_some();
    container
        .limits
        .keys()
        .filter_map(|key| key.strip_suffix(".sliced"))
        .find(|base| {
            !has(format!("{base}.sliced.memory-percentage"))
                && !has(format!("{base}.sliced.memory-mib"))
        })
        .map(str::to_string)
}

impl Responder for MthreadsResponder {
    fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        MthreadsResponder::respond(self, answer)
    }

    fn answers_alike(&self) -> bool {
        true
    }

    /// Nothing to stage: the sGPU kernel module and the runtime enforce the variables.
    fn prepare_slicing(&self) -> Result<(), PrepareError> {
        Ok(())
    }

    /// Nothing was kept for the Pod.
    fn reclaim(&self, _pod_uid: &str) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_backend::pod::{Phase, Pod};
    use accel_core::inventory::{Accelerator, Source};
    use accel_core::ledger::Seat;

    fn seat() -> Seat {
        let mut a = Accelerator::new(0, Source::Driver);
        a.uuid = Some("1ed50000-0000-4000-8000-00000000f000".into());
        a.memory_mib = Some(49_152);
        Seat::from_accelerator(&a, 16)
    }

    fn pod(limits: &[(&str, &str)]) -> Pod {
        Pod {
            uid: "p".into(),
            namespace: "ns".into(),
            name: "pod-p".into(),
            created: 0,
            phase: Phase::Pending,
            runtime_class: None,
            containers: vec![Container {
                name: "main".into(),
                limits: limits
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                env: Default::default(),
            }],
            allocated: None,
        }
    }

    fn slice(pod: &Pod) -> Result<Injection, ResponderError> {
        let seat = seat();
        MthreadsResponder.respond(&Answer {
            family: Some(Family::Sliced),
            seats: &[&seat],
            slice_units: 800_000,
            cores_percentage: Some(8),
            partition: None,
            pod,
            container: pod.containers.first(),
        })
    }

    #[test]
    fn a_renamed_base_is_read_from_the_request() {
        let served = pod(&[
            ("example.com/mt.sliced", "1"),
            ("example.com/mt.sliced.memory-percentage", "50"),
        ]);
        assert_eq!(
            slice(&served).unwrap().envs[QOS_MEMORY_LIMIT],
            "25769803776"
        );
        let refused = pod(&[
            ("example.com/mt.sliced", "1"),
            ("example.com/mt.sliced.units", "800000"),
        ]);
        assert_eq!(
            slice(&refused).unwrap_err().to_string(),
            "derive sliced memory limit: container \"main\" has no \
             example.com/mt.sliced.memory-percentage or example.com/mt.sliced.memory-mib request"
        );
    }

    #[test]
    fn no_container_known_is_no_memory_asked() {
        let seat = seat();
        let pod = pod(&[]);
        let error = MthreadsResponder
            .respond(&Answer {
                family: Some(Family::Sliced),
                seats: &[&seat],
                slice_units: 1_600_000,
                cores_percentage: None,
                partition: None,
                pod: &pod,
                container: None,
            })
            .unwrap_err();
        assert!(
            error.to_string().starts_with(
                "derive sliced memory limit: container \"main\" has no mthreads.com/gpu"
            ),
            "{error}"
        );
    }
}
