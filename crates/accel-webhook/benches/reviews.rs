//! Webhook load benchmark: AdmissionReviews over TLS on loopback, measured by a small load
//! client of our own (not a timed test; figures go to BENCHMARKS.md).
//!
//! 1. Open loop: a fixed rate (default 2,000 reviews/s) spread over keep-alive connections. Two
//!    latencies per request: from the moment it was sent (the service time), and from the moment
//!    it was due (charging a stall to every request it delays, so no coordinated omission). The
//!    second includes tokio's 1 ms timer granularity: a request is sent up to 1 ms after it was
//!    due even on an idle server.
//! 2. Closed loop: as many reviews as the connections can push, for the ceiling.
//! 3. In process: `review::answer` alone on one thread (parse, pool, admit, patch, serialize),
//!    the CPU a review costs without TLS or HTTP; the least noisy figure on a shared machine.
//!
//! Reviews alternate between /mutate-pods (a logical slice: units, cores, patch) and
//! /validate-pods (a partition). `BENCH_RATE`, `BENCH_SECONDS`, `BENCH_CONNECTIONS` and
//! `BENCH_SERVER_THREADS` override the defaults.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use accel_webhook::{ServerConfig, StaticPool};
use serde_json::json;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(name: &str, elapsed: Duration, mut latencies: Vec<Duration>) {
    latencies.sort();
    let n = latencies.len();
    println!(
        "{name}: {n} reviews in {:.2} s = {:.0} reviews/s; latency p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64(),
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.90).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        percentile(&latencies, 0.999).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}

fn bodies() -> [(&'static str, Vec<u8>); 2] {
    let mutate = common::review_of(
        "m",
        json!({"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50", "nvidia.com/gpu.sliced.cores-percentage": "40"}),
    );
    let validate = common::review_of(
        "v",
        json!({"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}),
    );
    [
        ("/mutate-pods", serde_json::to_vec(&mutate).unwrap()),
        ("/validate-pods", serde_json::to_vec(&validate).unwrap()),
    ]
}

async fn open_loop(
    addr: std::net::SocketAddr,
    cert: &common::Cert,
    rate: u64,
    seconds: u64,
    connections: u64,
) -> (Duration, Vec<Duration>, Vec<Duration>) {
    let per_connection = Duration::from_secs_f64(connections as f64 / rate as f64);
    let total = rate * seconds / connections;
    let start = Instant::now() + Duration::from_millis(100);
    let mut tasks = Vec::new();
    for c in 0..connections {
        let mut client = common::connect(addr, &[&cert.der]).await;
        let bodies = bodies();
        // Stagger the connections across one interval.
        let offset = per_connection.mul_f64(c as f64 / connections as f64);
        tasks.push(tokio::spawn(async move {
            let mut from_sent = Vec::with_capacity(total as usize);
            let mut from_due = Vec::with_capacity(total as usize);
            for i in 0..total {
                let due = start + offset + per_connection * i as u32;
                tokio::time::sleep_until(due.into()).await;
                let (path, body) = &bodies[(i % 2) as usize];
                let sent = Instant::now();
                let (status, _) = client.call("POST", path, body.clone()).await;
                assert_eq!(status, 200);
                from_sent.push(sent.elapsed());
                from_due.push(due.elapsed());
            }
            (from_sent, from_due)
        }));
    }
    let mut sent = Vec::new();
    let mut due = Vec::new();
    for t in tasks {
        let (s, d) = t.await.unwrap();
        sent.extend(s);
        due.extend(d);
    }
    (start.elapsed(), sent, due)
}

async fn closed_loop(
    addr: std::net::SocketAddr,
    cert: &common::Cert,
    seconds: u64,
    connections: u64,
) -> (Duration, Vec<Duration>) {
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let mut client = common::connect(addr, &[&cert.der]).await;
        let bodies = bodies();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = 0usize;
            while Instant::now() < end {
                let (path, body) = &bodies[i % 2];
                let sent = Instant::now();
                let (status, _) = client.call("POST", path, body.clone()).await;
                assert_eq!(status, 200);
                latencies.push(sent.elapsed());
                i += 1;
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    (start.elapsed(), all)
}

fn in_process(iterations: u32) {
    use accel_core::admission::Phase;
    use accel_core::resources::KeyGrammar;
    let pools = StaticPool(common::h100());
    let grammar = KeyGrammar::default();
    for ((path, body), phase) in bodies().iter().zip([Phase::Mutate, Phase::Validate]) {
        let start = Instant::now();
        for _ in 0..iterations {
            let answer = accel_webhook::review::answer(body, phase, &pools, &grammar).unwrap();
            std::hint::black_box(serde_json::to_vec(&answer.body).unwrap());
        }
        let each = start.elapsed() / iterations;
        println!(
            "in process {path}: {iterations} reviews, {:.1} µs each",
            each.as_secs_f64() * 1e6
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing and wants a quick run.
    let quick = !std::env::args().any(|a| a == "--bench");
    let rate = env("BENCH_RATE", 2000);
    let seconds = if quick { 1 } else { env("BENCH_SECONDS", 10) };
    let connections = env("BENCH_CONNECTIONS", 16);
    let server_threads = env("BENCH_SERVER_THREADS", 2) as usize;

    in_process(if quick { 1_000 } else { 100_000 });

    let cert = common::cert();
    // The server on its own runtime and threads, as in the worker; the load client on one thread.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(server_threads)
        .enable_all()
        .build()
        .unwrap();
    let hook = server_rt.block_on(common::start(
        &cert,
        Arc::new(StaticPool(common::h100())),
        ServerConfig::default(),
        Duration::from_secs(60),
    ));
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = hook.addr;

    // Warm up: handshakes, allocator, caches.
    client_rt.block_on(closed_loop(addr, &cert, 1, 4));

    let (elapsed, from_sent, from_due) =
        client_rt.block_on(open_loop(addr, &cert, rate, seconds, connections));
    let name = format!("open loop at {rate}/s over {connections} connections");
    report(&format!("{name}, from sent"), elapsed, from_sent);
    report(&format!("{name}, from due"), elapsed, from_due);
    let (elapsed, latencies) =
        client_rt.block_on(closed_loop(addr, &cert, seconds.min(5), connections));
    report(
        &format!("closed loop over {connections} connections"),
        elapsed,
        latencies,
    );
    drop(hook);
    drop(server_rt);
}
