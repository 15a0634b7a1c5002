//! When the ListAndWatch streams and the publisher hear of a grant: once the kubelet's calls have
//! gone quiet, not while they are flowing (issue 44, item 13).
//!
//! A grant changes what the other pools offer (the card a whole grant takes is no longer shared
//! or sliced), so every stream whose tokens moved sends the kubelet an update, and the kubelet
//! handles each one at once: it rewrites and syncs its device checkpoint, which on a two-core
//! node took 1–5 ms of CPU beside the next Allocates (the rig's `sched_switch` trace of a
//! `dp-bench` burst put the kubelet on the CPU during most of our slow calls, and the API server,
//! fed by the publisher, during the rest). A notification therefore waits until no Allocate or
//! GetPreferredAllocation has been answered for [`QUIET`], so that a burst of admissions (a
//! Pod's containers one after another, Pods admitted back to back) is told once, after it.
//!
//! It never waits longer than [`AT_MOST`] after the grant it announces: a kubelet that keeps
//! calling still hears of the grant within that bound. Nothing depends on the update for
//! safety: the ledger refuses a token of another mode whatever the kubelet believes, and
//! GetPreferredAllocation already steers away from it. Health changes are not deferred; they
//! notify at once ([`super::Shared::notify`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How long the kubelet's calls must have stopped before a grant is announced.
pub(super) const QUIET: Duration = Duration::from_millis(2);

/// The longest a grant's announcement waits for the calls to stop.
pub(super) const AT_MOST: Duration = Duration::from_millis(250);

/// The last call answered, and whether an announcement is waiting for quiet.
#[derive(Debug)]
pub(super) struct Announce {
    epoch: Instant,
    /// Microseconds from `epoch` to the last answer.
    last_answer: AtomicU64,
    pending: AtomicBool,
}

impl Announce {
    pub(super) fn new() -> Announce {
        Announce {
            epoch: Instant::now(),
            last_answer: AtomicU64::new(0),
            pending: AtomicBool::new(false),
        }
    }

    /// A call of the kubelet's was answered now.
    pub(super) fn answered(&self) {
        let micros = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.last_answer.fetch_max(micros, Ordering::AcqRel);
    }

    /// When an announcement of a grant made at `granted` is due: [`QUIET`] after the last
    /// answer, and never later than [`AT_MOST`] after the grant.
    pub(super) fn due(&self, granted: Instant) -> Instant {
        let last = self.epoch + Duration::from_micros(self.last_answer.load(Ordering::Acquire));
        (last.max(granted) + QUIET).min(granted + AT_MOST)
    }

    /// Claims the one announcement in flight: false when one is already waiting (it covers
    /// this grant too, being sent later).
    pub(super) fn claim(&self) -> bool {
        !self.pending.swap(true, Ordering::AcqRel)
    }

    /// Waits until the announcement of a grant made at `granted` is due, then hands the next
    /// grant its own announcement.
    pub(super) async fn until_due(&self, granted: Instant) {
        self.until_quiet(granted).await;
        self.pending.store(false, Ordering::Release);
    }

    /// Waits until the kubelet's calls have been quiet for [`QUIET`], at most until [`AT_MOST`]
    /// after `since`. The verifier waits so too before it asks the kubelet's pod-resources,
    /// whose answer the kubelet builds on the same CPUs.
    pub(super) async fn until_quiet(&self, since: Instant) {
        loop {
            let due = self.due(since);
            if due <= Instant::now() {
                break;
            }
            tokio::time::sleep_until(due).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::task::JoinHandle;
    use tokio::time::Instant;

    use super::{AT_MOST, Announce, QUIET};

    /// Advances the paused clock by `by` and lets the waiting task run.
    async fn advance(by: Duration) {
        tokio::time::advance(by).await;
        tokio::task::yield_now().await;
    }

    /// A call just answered and a grant made now, its announcement claimed and waited for.
    fn granted_now() -> (Arc<Announce>, Instant, JoinHandle<()>) {
        let announce = Arc::new(Announce::new());
        announce.answered();
        let granted = Instant::now();
        assert!(announce.claim());
        let waiting = tokio::spawn({
            let announce = announce.clone();
            async move { announce.until_due(granted).await }
        });
        (announce, granted, waiting)
    }

    /// A call every 500 µs, `calls` of them; none may see `waiting` finish.
    async fn burst(announce: &Announce, waiting: &JoinHandle<()>, calls: u32) {
        for _ in 0..calls {
            advance(Duration::from_micros(500)).await;
            announce.answered();
            assert!(!waiting.is_finished(), "done in the middle of a burst");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_grant_is_announced_once_the_calls_stop() {
        let (announce, _, waiting) = granted_now();
        assert!(
            !announce.claim(),
            "a second grant rides on the first announcement"
        );
        advance(QUIET - Duration::from_micros(100)).await;
        assert!(!waiting.is_finished());
        advance(Duration::from_micros(200)).await;
        assert!(waiting.is_finished());
        assert!(
            announce.claim(),
            "the next grant gets an announcement of its own"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn calls_in_a_burst_hold_the_announcement_until_they_stop() {
        let (announce, granted, waiting) = granted_now();
        // 50 ms of calls: far beyond QUIET, well within AT_MOST.
        burst(&announce, &waiting, 100).await;
        let stopped = Instant::now();
        advance(QUIET - Duration::from_micros(100)).await;
        assert!(!waiting.is_finished());
        advance(Duration::from_micros(200)).await;
        assert!(waiting.is_finished());
        assert!(stopped.duration_since(granted) < AT_MOST);
    }

    #[tokio::test(start_paused = true)]
    async fn the_verifier_waits_for_quiet_without_taking_the_announcement() {
        let announce = Arc::new(Announce::new());
        announce.answered();
        let waiting = tokio::spawn({
            let announce = announce.clone();
            let since = Instant::now();
            async move { announce.until_quiet(since).await }
        });
        burst(&announce, &waiting, 10).await;
        advance(QUIET + Duration::from_micros(100)).await;
        assert!(waiting.is_finished());
        assert!(announce.claim(), "waiting for quiet claims no announcement");
    }

    #[tokio::test(start_paused = true)]
    async fn calls_that_never_stop_still_hear_of_the_grant_within_the_bound() {
        let (announce, _, waiting) = granted_now();
        let step = Duration::from_micros(500);
        let mut elapsed = Duration::ZERO;
        while !waiting.is_finished() {
            advance(step).await;
            elapsed += step;
            announce.answered();
            assert!(elapsed <= AT_MOST + step, "still waiting after {elapsed:?}");
        }
        assert!(
            elapsed >= AT_MOST,
            "announced after {elapsed:?}, before the bound"
        );
    }
}
