//! The daemon's loops: a thread that blocks on the kernel log and hands each entry to the
//! health task; the health task (entries into the fault watch, the collection a burst asks
//! for, and a detection whenever a GPU's health changed); and the detection task (the
//! inventory's period, a changed PCI device set, the bursts, the health changes).
//! Detections run on the blocking pool, never on the runtime's workers. This module owns the
//! timing, not what an entry means ([`Daemon::on_entry`]).

use std::sync::Arc;
use std::time::Instant;

use accel_host::pci::PciSetFingerprint;
use accel_host::{KernelLog, KernelLogEntry};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::{Daemon, Reason};

/// Entries queued between the kernel-log thread and the health task; when full the thread
/// waits, and the kernel reports what it could not keep as an overrun.
const ENTRY_QUEUE: usize = 1024;

/// The running loops.
pub struct Loops {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Loops {
    /// Starts the loops over `daemon`, reading `kernel_log` when there is one. Must be called
    /// inside a tokio runtime.
    pub fn start(daemon: Arc<Daemon>, kernel_log: Option<Box<dyn KernelLog>>) -> Loops {
        let (stop, _) = watch::channel(false);
        let (detections, requests) = mpsc::unbounded_channel();
        let entries = kernel_log.map(read_kernel_log);
        // The PCI set the next change is measured against, read before the loops start, so a
        // card that leaves while the detection task is still being scheduled is a change, not
        // the baseline (a short sysfs scan, once).
        let pci_baseline = daemon.pci_fingerprint();
        let tasks = vec![
            tokio::spawn(health(
                daemon.clone(),
                entries,
                detections,
                stop.subscribe(),
            )),
            tokio::spawn(detection(daemon, pci_baseline, requests, stop.subscribe())),
        ];
        Loops { stop, tasks }
    }

    /// Stops the tasks (a detection under way finishes first). The kernel-log thread ends
    /// with the process, or when its log ends.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// The runtime's clock as a std instant: the fault watch takes std instants, and a paused test
/// clock moves both the same way.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Reads the kernel log on its own thread (reads block) into a queue.
fn read_kernel_log(mut log: Box<dyn KernelLog>) -> mpsc::Receiver<KernelLogEntry> {
    let (sender, receiver) = mpsc::channel(ENTRY_QUEUE);
    let spawned = std::thread::Builder::new()
        .name("kernel-log".to_string())
        .spawn(move || {
            loop {
                match log.next_entry() {
                    Ok(Some(entry)) => {
                        if sender.blocking_send(entry).is_err() {
                            return;
                        }
                    }
                    Ok(None) => {
                        tracing::warn!("the kernel log ended; XIDs are no longer watched");
                        return;
                    }
                    Err(e) => {
                        tracing::error!("XIDS ARE NO LONGER WATCHED: {e}");
                        return;
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!("XIDS ARE NOT WATCHED: cannot start the kernel-log thread: {e}");
    }
    receiver
}

async fn health(
    daemon: Arc<Daemon>,
    mut entries: Option<mpsc::Receiver<KernelLogEntry>>,
    detections: mpsc::UnboundedSender<Reason>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let due = daemon.next_collection().map(tokio::time::Instant::from_std);
        let collection = async {
            match due {
                Some(due) => tokio::time::sleep_until(due).await,
                None => std::future::pending().await,
            }
        };
        let entry = async {
            match entries.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.changed() => return,
            entry = entry => match entry {
                Some(entry) => {
                    // Seed 000: the device manager re-detects whenever health changes.
                    if daemon.on_entry(&entry, now()).changed.is_some() {
                        let _ = detections.send(Reason::HealthChange);
                    }
                }
                None => entries = None,
            },
            () = collection => {
                if daemon.collection_due(now()) {
                    let _ = detections.send(Reason::XidBurst);
                }
            }
        }
    }
}

async fn detection(
    daemon: Arc<Daemon>,
    mut fingerprint: Option<PciSetFingerprint>,
    mut requests: mpsc::UnboundedReceiver<Reason>,
    mut stop: watch::Receiver<bool>,
) {
    let start = tokio::time::Instant::now();
    let period = daemon.options.inventory_interval;
    let pci_period = daemon.options.pci_poll_interval;
    let mut periodic = tokio::time::interval_at(start + period, period);
    periodic.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut pci_poll = tokio::time::interval_at(start + pci_period, pci_period);
    pci_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let reason = tokio::select! {
            _ = stop.changed() => return,
            _ = periodic.tick() => Reason::Periodic,
            request = requests.recv() => match request {
                Some(reason) => reason,
                None => return,
            },
            _ = pci_poll.tick() => {
                let daemon = daemon.clone();
                let now = tokio::task::spawn_blocking(move || daemon.pci_fingerprint())
                    .await
                    .ok()
                    .flatten();
                match now {
                    Some(now) if fingerprint.as_ref() != Some(&now) => {
                        tracing::info!("the PCI device set changed: {now}");
                        fingerprint = Some(now);
                        Reason::PciChange
                    }
                    _ => continue,
                }
            }
        };
        let daemon = daemon.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || daemon.detect(reason)).await {
            tracing::error!("the inventory collection failed: {e}");
        }
        // A burst, a period and a PCI change that arrived during the pass are all answered by
        // it.
        while requests.try_recv().is_ok() {}
        periodic.reset();
    }
}
