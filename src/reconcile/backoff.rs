//! Backoff: of failed syncs and fetches, and of reverts another writer keeps undoing.

use std::time::Duration;

/// First retry delay after a failure.
pub const BACKOFF_MIN: Duration = Duration::from_secs(5);
/// Longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(180);
/// Exponential backoff: 5 s doubling to 3 min.
#[derive(Clone, Debug, Default)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    /// Records a failure and returns the delay before the next attempt.
    pub fn fail(&mut self) -> Duration {
        let d = BACKOFF_MIN.saturating_mul(1u32 << self.failures.min(10));
        self.failures = self.failures.saturating_add(1);
        d.min(BACKOFF_MAX)
    }

    /// Records a success.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// True after a failure not yet followed by a success.
    pub fn failing(&self) -> bool {
        self.failures > 0
    }
}
