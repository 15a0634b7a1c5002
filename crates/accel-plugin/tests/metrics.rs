//! The plugin's metrics through the real plugin over unix sockets, driven by the kubelet
//! emulator, read back by parsing the Prometheus text exposition: latency histograms per
//! resource for every Allocate and GetPreferredAllocation, a refused slice counted under its
//! reason, invalid arguments under theirs, and grants by family (a retry not counted twice).

use std::sync::Arc;
use std::time::Duration;

use accel_core::Manufacturer;
use accel_core::ledger::Seat;
use accel_nvidia::responder::{EngineFacts, NvidiaResponder};
use accel_plugin::metrics::LATENCY_BUCKETS;
use accel_plugin::metrics::exposition::Samples;
use accel_plugin::pods::MemoryPods;
use accel_plugin::service::Offer;
use accel_plugin::settings::{InjectionStrategy, Settings};
use accel_plugin::testing::{Kubelet, gpu_uuid as uuid, pod, seat};
use accel_plugin::{Config, DevicePlugins, PluginMetrics};
use prometheus_client::registry::Registry;
use tonic::Code;

const GPU: &str = "nvidia.com/gpu";
const SHARED: &str = "nvidia.com/gpu.shared";
const SLICED: &str = "nvidia.com/gpu.sliced";
const VISIBILITY: &str = "device.gpustack.ai/nvidia.visibility";
const MEMORY_PERCENTAGE: &str = "nvidia.com/gpu.sliced.memory-percentage";

fn seats(n: u32) -> Vec<Seat> {
    (0..n)
        .map(|i| Seat {
            numa_node: Some(0),
            ..seat(i)
        })
        .collect()
}

fn scrape(registry: &Registry) -> Samples {
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, registry).unwrap();
    Samples::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The histogram of `name` for `resource` is well formed (the project's buckets, cumulative,
/// `+Inf` equal to the count); returns its count.
fn histogram_count(samples: &Samples, name: &str, resource: &str) -> f64 {
    let count = samples
        .get(&format!("{name}_count"), &[("resource", resource)])
        .unwrap_or_else(|| panic!("no {name}_count for {resource}"));
    let mut buckets: Vec<(f64, f64)> = samples
        .all(&format!("{name}_bucket"))
        .into_iter()
        .filter(|(labels, _)| labels["resource"] == resource)
        .map(|(labels, n)| (labels["le"].parse::<f64>().unwrap(), n))
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let bounds: Vec<f64> = buckets.iter().map(|b| b.0).collect();
    let mut expected = LATENCY_BUCKETS.to_vec();
    expected.push(f64::INFINITY);
    assert_eq!(
        bounds, expected,
        "{name} for {resource}: the project's buckets"
    );
    assert!(
        buckets.windows(2).all(|w| w[0].1 <= w[1].1),
        "{name} buckets are cumulative: {buckets:?}"
    );
    assert_eq!(
        buckets.last().map(|b| b.1),
        Some(count),
        "+Inf is the count"
    );
    count
}

#[tokio::test]
async fn allocate_latency_refusals_and_grants_are_exposed() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
    let mut registry = Registry::with_prefix("device_manager");
    let metrics = PluginMetrics::register(&mut registry);
    let config = Config {
        kubelet_dir: dir.path().join("kubelet"),
        data_dir: dir.path().join("data"),
        settings: Settings::default(),
        offer: Offer::of(Manufacturer::Nvidia),
        seats: seats(3),
        responder: Arc::new(NvidiaResponder {
            strategy: InjectionStrategy::Envvar,
            cuda_major: Some(13),
            pod_dir_root: dir.path().join("data/pods"),
            preload_dir: dir.path().join("data/preload"),
            library_dir: accel_nvidia::responder::HOST_LIBRARY_DIR.into(),
            engine: std::sync::Arc::new(EngineFacts::default()),
        }),
        poll_interval: Duration::from_millis(20),
        partitions: None,
        metrics,
    };
    let plugins = DevicePlugins::start(config, Arc::new(kubelet.pods().clone()))
        .await
        .unwrap();
    kubelet.wait_for(&[GPU, SHARED, SLICED, VISIBILITY]).await;

    // Before any call: every resource's series exist, at zero.
    let samples = scrape(&registry);
    for resource in [GPU, SHARED, SLICED, VISIBILITY] {
        assert_eq!(
            histogram_count(
                &samples,
                "device_manager_allocate_duration_seconds",
                resource
            ),
            0.0
        );
    }

    // Exclusive with its SSH sidecar, shared, and a 60 % slice: one accelerator each.
    kubelet.create(pod(
        "a",
        1,
        &[("main", &[(GPU, "1")]), ("sshd", &[(VISIBILITY, "1")])],
    ));
    kubelet.admit("a").await.unwrap();
    kubelet.create(pod("b", 2, &[("main", &[(SHARED, "1")])]));
    kubelet.admit("b").await.unwrap();
    kubelet.create(pod(
        "c",
        3,
        &[("main", &[(SLICED, "1"), (MEMORY_PERCENTAGE, "60")])],
    ));
    kubelet.admit("c").await.unwrap();
    // A retried Allocate answers again without a second grant.
    let held = kubelet.held("a", "main", GPU);
    kubelet.allocate_raw(GPU, held).await.unwrap();
    // A 50 % slice where only the 60 % one's accelerator takes slices: refused for room.
    let slice_of = uuid(2);
    kubelet
        .wait_devices(SLICED, |d| {
            d.iter()
                .all(|t| (t.health == "Healthy") == t.id.starts_with(&slice_of))
        })
        .await;
    kubelet.create(pod(
        "d",
        4,
        &[("main", &[(SLICED, "1"), (MEMORY_PERCENTAGE, "50")])],
    ));
    let refused = kubelet.admit("d").await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains("units left"),
        "{}",
        refused.message()
    );
    // An unknown device ID.
    let invalid = kubelet
        .allocate_raw(GPU, vec!["GPU-nope".into()])
        .await
        .unwrap_err();
    assert_eq!(invalid.code(), Code::InvalidArgument);

    let samples = scrape(&registry);
    let allocate = "device_manager_allocate_duration_seconds";
    let preferred = "device_manager_preferred_allocation_duration_seconds";
    // Allocate: a, the retry, the invalid call on GPU; b; c and d; the sidecar.
    for (resource, calls) in [(GPU, 3.0), (SHARED, 1.0), (SLICED, 2.0), (VISIBILITY, 1.0)] {
        assert_eq!(
            histogram_count(&samples, allocate, resource),
            calls,
            "{resource}"
        );
    }
    // The hint: once per admitted container; the visibility pool offers none.
    for (resource, calls) in [(GPU, 1.0), (SHARED, 1.0), (SLICED, 2.0), (VISIBILITY, 0.0)] {
        assert_eq!(
            histogram_count(&samples, preferred, resource),
            calls,
            "{resource}"
        );
    }
    let refusals = samples.all("device_manager_allocate_refusals_total");
    let counted: Vec<(String, String, f64)> = refusals
        .iter()
        .filter(|(_, v)| *v > 0.0)
        .map(|(l, v)| (l["resource"].clone(), l["reason"].clone(), *v))
        .collect();
    assert_eq!(
        counted,
        vec![
            (GPU.to_string(), "invalid_argument".to_string(), 1.0),
            (SLICED.to_string(), "no_room".to_string(), 1.0),
        ]
    );
    // Every reason is there from the start, for every resource (no missing series to alert on).
    assert_eq!(
        refusals.len(),
        4 * accel_plugin::metrics::RefusalReason::ALL.len()
    );
    let grants = |family: &str| samples.get("device_manager_grants_total", &[("family", family)]);
    assert_eq!(
        grants("exclusive"),
        Some(1.0),
        "the retry is not a second grant"
    );
    assert_eq!(grants("shared"), Some(1.0));
    assert_eq!(
        grants("sliced"),
        Some(1.0),
        "the refused slice is not a grant"
    );
    assert_eq!(grants("visibility"), Some(1.0));
    assert_eq!(grants("partitioned"), Some(0.0));
    plugins.stop().await;
}
