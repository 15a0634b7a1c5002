//! Leader election: the Lease requests against a recorded API server (acquire on a missing Lease,
//! renew with the resourceVersion read, a lost race is not an error), and, on the in-memory Lease,
//! that two candidates never both lead — not while both are healthy, not when the leader is cut
//! off from the API server, not when it comes back.

use std::time::Duration;

use accel_kube::lease::{ElectionConfig, Elector, KubeLeases, LeaseApi as _, MemoryLeases};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{Handle, SendResponse};

type Mock = Handle<Request<Body>, Response<Body>>;

async fn next(handle: &mut Mock, what: &str) -> (Request<Body>, SendResponse<Response<Body>>) {
    tokio::time::timeout(Duration::from_secs(10), handle.next_request())
        .await
        .unwrap_or_else(|_| panic!("no request: expected {what}"))
        .unwrap_or_else(|| panic!("the client went away: expected {what}"))
}

async fn body(request: Request<Body>) -> Value {
    let bytes = request.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

fn respond(send: SendResponse<Response<Body>>, status: StatusCode, body: &Value) {
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap(),
    );
}

fn status(code: u16, reason: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": reason,
        "code": code, "message": reason, "metadata": {}})
}

const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/gpustack-system/leases/worker";
const COLLECTION: &str = "/apis/coordination.k8s.io/v1/namespaces/gpustack-system/leases";

fn config(identity: &str) -> ElectionConfig {
    ElectionConfig {
        identity: identity.to_string(),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    }
}

#[tokio::test]
async fn acquires_a_missing_lease_then_renews_it_with_the_version_read() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let leases = KubeLeases::new(
        kube::Client::new(service, "default"),
        "gpustack-system",
        "worker",
    );
    let mut elector = Elector::new(leases, config("worker-a"));
    let round = tokio::spawn(async move {
        let first = elector.try_acquire_or_renew().await.unwrap();
        let second = elector.try_acquire_or_renew().await.unwrap();
        (first, second)
    });

    // Acquire: the Lease does not exist, so it is created with us as holder.
    let (request, send) = next(&mut handle, "the Lease read").await;
    assert_eq!(request.method(), http::Method::GET);
    assert_eq!(request.uri().path(), PATH);
    respond(send, StatusCode::NOT_FOUND, &status(404, "NotFound"));
    let (request, send) = next(&mut handle, "the Lease create").await;
    assert_eq!(request.method(), http::Method::POST);
    assert_eq!(request.uri().path(), COLLECTION);
    let created = body(request).await;
    assert_eq!(created["metadata"]["name"], "worker");
    assert_eq!(created["spec"]["holderIdentity"], "worker-a");
    assert_eq!(created["spec"]["leaseDurationSeconds"], 15);
    assert_eq!(created["spec"]["leaseTransitions"], 0);
    assert!(created["spec"]["renewTime"].is_string(), "{created}");
    assert!(created["spec"]["acquireTime"].is_string(), "{created}");
    let mut stored = created.clone();
    stored["metadata"]["resourceVersion"] = json!("41");
    respond(send, StatusCode::CREATED, &stored);

    // Renew: read, then replace carrying the resourceVersion read.
    let (request, send) = next(&mut handle, "the Lease read before renewing").await;
    assert_eq!(request.method(), http::Method::GET);
    respond(send, StatusCode::OK, &stored);
    let (request, send) = next(&mut handle, "the Lease renewal").await;
    assert_eq!(request.method(), http::Method::PUT);
    assert_eq!(request.uri().path(), PATH);
    let renewed = body(request).await;
    assert_eq!(renewed["metadata"]["resourceVersion"], "41");
    assert_eq!(renewed["spec"]["holderIdentity"], "worker-a");
    assert_eq!(
        renewed["spec"]["leaseTransitions"], 0,
        "a renewal is no transition"
    );
    assert_eq!(
        renewed["spec"]["acquireTime"],
        created["spec"]["acquireTime"]
    );
    let mut stored = renewed.clone();
    stored["metadata"]["resourceVersion"] = json!("42");
    respond(send, StatusCode::OK, &stored);

    assert_eq!(round.await.unwrap(), (true, true));
}

#[tokio::test]
async fn a_lost_race_and_a_live_holder_are_not_leadership() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let leases = KubeLeases::new(
        kube::Client::new(service, "default"),
        "gpustack-system",
        "worker",
    );
    let mut elector = Elector::new(leases.clone(), config("worker-b"));
    let round = tokio::spawn(async move {
        let lost_create = leases
            .create(&accel_kube::lease::LeaseRecord {
                holder: Some("worker-b".into()),
                lease_duration_seconds: Some(15),
                acquire_time: None,
                renew_time: None,
                transitions: Some(0),
                resource_version: None,
            })
            .await
            .unwrap();
        let held = elector.try_acquire_or_renew().await.unwrap();
        (lost_create, held)
    });
    let (request, send) = next(&mut handle, "the create").await;
    assert_eq!(request.method(), http::Method::POST);
    respond(send, StatusCode::CONFLICT, &status(409, "AlreadyExists"));
    // Someone else holds it and has just renewed: no write at all.
    let (request, send) = next(&mut handle, "the Lease read").await;
    assert_eq!(request.method(), http::Method::GET);
    respond(
        send,
        StatusCode::OK,
        &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "worker", "namespace": "gpustack-system", "resourceVersion": "9"},
            "spec": {"holderIdentity": "worker-a", "leaseDurationSeconds": 15,
                "renewTime": "2026-01-01T00:00:00.000000Z", "leaseTransitions": 3}}),
    );
    assert_eq!(round.await.unwrap(), (false, false));
    assert!(
        !matches!(
            tokio::time::timeout(Duration::from_millis(100), handle.next_request()).await,
            Ok(Some(_))
        ),
        "no write while another holds a live Lease"
    );
}

/// Two electors on one in-memory Lease, sampled every 100 ms of (paused) time for `span`:
/// returns how many samples each led, and fails if both ever lead at once.
async fn race(
    a: &tokio::sync::watch::Receiver<bool>,
    b: &tokio::sync::watch::Receiver<bool>,
    span: Duration,
) -> (u32, u32) {
    let (mut led_a, mut led_b) = (0, 0);
    let steps = (span.as_millis() / 100) as u32;
    for _ in 0..steps {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (la, lb) = (*a.borrow(), *b.borrow());
        assert!(!(la && lb), "both candidates lead at once");
        led_a += u32::from(la);
        led_b += u32::from(lb);
    }
    (led_a, led_b)
}

#[tokio::test(start_paused = true)]
async fn two_electors_never_both_lead() {
    let lease = MemoryLeases::default();
    let (tx_a, rx_a) = tokio::sync::watch::channel(false);
    let (tx_b, rx_b) = tokio::sync::watch::channel(false);
    let a = tokio::spawn(Elector::new(lease.for_candidate("a"), config("a")).run(tx_a));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let b = tokio::spawn(Elector::new(lease.for_candidate("b"), config("b")).run(tx_b));

    // Both healthy: the first one leads throughout, the other never.
    let (led_a, led_b) = race(&rx_a, &rx_b, Duration::from_secs(60)).await;
    assert_eq!((led_a, led_b), (600, 0));
    assert_eq!(
        lease.current().and_then(|l| l.holder),
        Some("a".to_string())
    );

    // The leader is cut off: it steps down before the other takes over, and the other does.
    lease.set_unreachable("a", true);
    let (_, led_b) = race(&rx_a, &rx_b, Duration::from_secs(60)).await;
    assert!(led_b > 0, "the other candidate took over");
    assert!(!*rx_a.borrow());
    assert!(*rx_b.borrow());
    let record = lease.current().unwrap();
    assert_eq!(record.holder.as_deref(), Some("b"));
    assert_eq!(record.transitions, Some(1));

    // It comes back: it finds the Lease held and stays a candidate.
    lease.set_unreachable("a", false);
    let (led_a, _) = race(&rx_a, &rx_b, Duration::from_secs(60)).await;
    assert_eq!(led_a, 0);
    assert!(*rx_b.borrow());
    a.abort();
    b.abort();
}

#[tokio::test(start_paused = true)]
async fn the_cut_off_leader_steps_down_within_its_renew_deadline() {
    let lease = MemoryLeases::default();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(Elector::new(lease.for_candidate("a"), config("a")).run(tx));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(*rx.borrow(), "a free Lease is taken at once");
    tokio::time::sleep(Duration::from_secs(5)).await;
    lease.set_unreachable("a", true);
    let cut = tokio::time::Instant::now();
    let mut rx2 = rx.clone();
    tokio::time::timeout(Duration::from_secs(15), rx2.wait_for(|leading| !leading))
        .await
        .expect("never stepped down")
        .unwrap();
    assert!(
        cut.elapsed() <= Duration::from_secs(10),
        "stepped down {:?} after the cut, past the renew deadline",
        cut.elapsed()
    );
    run.abort();
}

#[tokio::test(start_paused = true)]
async fn the_controllers_run_only_while_leading() {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<()>();
    let alive = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    struct Alive(std::sync::Arc<std::sync::atomic::AtomicUsize>);
    impl Drop for Alive {
        fn drop(&mut self) {
            self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let counter = alive.clone();
    let supervisor = tokio::spawn(accel_kube::lease::while_leading(rx, move || {
        let counter = counter.clone();
        let started_tx = started_tx.clone();
        async move {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _alive = Alive(counter);
            let _ = started_tx.send(());
            std::future::pending::<()>().await;
        }
    }));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        alive.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "not leading: nothing runs"
    );
    tx.send_replace(true);
    started.recv().await.unwrap();
    assert_eq!(alive.load(std::sync::atomic::Ordering::SeqCst), 1);
    tx.send_replace(false);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        alive.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "stopped on losing the lease"
    );
    tx.send_replace(true);
    started.recv().await.unwrap();
    assert_eq!(
        alive.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "started afresh"
    );
    drop(tx);
    tokio::time::timeout(Duration::from_secs(1), supervisor)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(alive.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_leader_told_to_stop_stops_leading_and_releases_the_lease() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let leases = KubeLeases::new(
        kube::Client::new(service, "default"),
        "gpustack-system",
        "worker",
    );
    let (leading_tx, mut leading) = tokio::sync::watch::channel(false);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(Elector::new(leases, config("worker-a")).run_until(
        leading_tx,
        async move {
            let _ = stop_rx.await;
        },
    ));

    let (request, send) = next(&mut handle, "the Lease read").await;
    assert_eq!(request.method(), http::Method::GET);
    respond(send, StatusCode::NOT_FOUND, &status(404, "NotFound"));
    let (request, send) = next(&mut handle, "the Lease create").await;
    assert_eq!(request.method(), http::Method::POST);
    let mut stored = body(request).await;
    stored["metadata"]["resourceVersion"] = json!("7");
    respond(send, StatusCode::CREATED, &stored);
    tokio::time::timeout(Duration::from_secs(10), leading.wait_for(|l| *l))
        .await
        .expect("never led after creating the Lease")
        .unwrap();

    // SIGTERM: the controllers stop, then the Lease is read and given up with the version read.
    stop_tx.send(()).unwrap();
    let (request, send) = next(&mut handle, "the Lease read before releasing").await;
    assert_eq!(request.method(), http::Method::GET);
    assert!(!*leading.borrow(), "stopped leading before releasing");
    respond(send, StatusCode::OK, &stored);
    let (request, send) = next(&mut handle, "the release").await;
    assert_eq!(request.method(), http::Method::PUT);
    assert_eq!(request.uri().path(), PATH);
    let released = body(request).await;
    assert_eq!(released["metadata"]["resourceVersion"], "7");
    assert!(
        released["spec"]["holderIdentity"].is_null(),
        "no holder after release: {released}"
    );
    assert_eq!(released["spec"]["leaseDurationSeconds"], 1);
    assert_eq!(
        released["spec"]["leaseTransitions"], 0,
        "a release is no transition"
    );
    respond(send, StatusCode::OK, &released);
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("run_until did not return after the release")
        .unwrap();
    assert!(
        !matches!(
            tokio::time::timeout(Duration::from_millis(100), handle.next_request()).await,
            Ok(Some(_))
        ),
        "nothing written after the release"
    );
}

#[tokio::test]
async fn a_replica_that_does_not_hold_the_lease_writes_nothing_when_it_stops() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let leases = KubeLeases::new(
        kube::Client::new(service, "default"),
        "gpustack-system",
        "worker",
    );
    let mut elector = Elector::new(leases, config("worker-b"));
    let release = tokio::spawn(async move { elector.release().await.unwrap() });
    let (request, send) = next(&mut handle, "the Lease read").await;
    assert_eq!(request.method(), http::Method::GET);
    respond(
        send,
        StatusCode::OK,
        &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "worker", "namespace": "gpustack-system", "resourceVersion": "9"},
            "spec": {"holderIdentity": "worker-a", "leaseDurationSeconds": 15}}),
    );
    assert!(!release.await.unwrap(), "another's Lease is not released");
    assert!(
        !matches!(
            tokio::time::timeout(Duration::from_millis(100), handle.next_request()).await,
            Ok(Some(_))
        ),
        "no write to another replica's Lease"
    );
}

/// How long after the leader goes away the other candidate leads, sampled every 100 ms.
async fn takeover_after(
    stop_leader: impl FnOnce(),
    b: &tokio::sync::watch::Receiver<bool>,
) -> Duration {
    let gone = tokio::time::Instant::now();
    stop_leader();
    let mut b = b.clone();
    tokio::time::timeout(Duration::from_secs(60), b.wait_for(|l| *l))
        .await
        .expect("the other candidate never took over")
        .unwrap();
    gone.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_taken_at_the_next_try_not_after_the_lease_duration() {
    for release in [true, false] {
        let lease = MemoryLeases::default();
        let (tx_a, rx_a) = tokio::sync::watch::channel(false);
        let (tx_b, rx_b) = tokio::sync::watch::channel(false);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let a = tokio::spawn(
            Elector::new(lease.for_candidate("a"), config("a")).run_until(tx_a, async move {
                let _ = stop_rx.await;
            }),
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(*rx_a.borrow(), "a leads");
        let b = tokio::spawn(Elector::new(lease.for_candidate("b"), config("b")).run(tx_b));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!*rx_b.borrow(), "b waits while a leads");

        let took = if release {
            // An orderly stop: a releases the Lease, b takes it at its next try.
            let took = takeover_after(|| stop_tx.send(()).unwrap(), &rx_b).await;
            tokio::time::timeout(Duration::from_secs(1), a)
                .await
                .expect("a did not finish releasing")
                .unwrap();
            assert!(!*rx_a.borrow());
            took
        } else {
            // A crash: b waits out the lease duration.
            takeover_after(|| a.abort(), &rx_b).await
        };
        let record = lease.current().unwrap();
        assert_eq!(record.holder.as_deref(), Some("b"));
        if release {
            assert!(
                took <= Duration::from_secs(2),
                "released, yet b took over only after {took:?} (the retry period is 2 s)"
            );
        } else {
            assert!(
                took >= Duration::from_secs(13),
                "not released, yet b took over after {took:?}, before the 15 s lease ran out"
            );
        }
        b.abort();
    }
}
