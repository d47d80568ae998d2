//! Backoff: of failed syncs and fetches, and of reverts another writer keeps undoing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::object::ObjectKey;

/// First retry delay after a failure, by default.
pub const BACKOFF_MIN: Duration = Duration::from_secs(5);
/// Longest retry delay, by default.
pub const BACKOFF_MAX: Duration = Duration::from_secs(180);

/// Exponential backoff of failed syncs and fetches: by default 5 s, doubling, up to 3 min
/// (`sync.retry`).
#[derive(Clone, Debug)]
pub struct Backoff {
    failures: u32,
    base: Duration,
    factor: u32,
    max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(BACKOFF_MIN, 2, BACKOFF_MAX)
    }
}

impl Backoff {
    /// `base`, multiplied by `factor` per failure, at most `max`.
    pub fn new(base: Duration, factor: u32, max: Duration) -> Self {
        Self {
            failures: 0,
            base,
            factor: factor.max(1),
            max,
        }
    }

    /// Records a failure and returns the delay before the next attempt.
    pub fn fail(&mut self) -> Duration {
        let mut d = self.base;
        for _ in 0..self.failures.min(32) {
            d = d.saturating_mul(self.factor);
            if d >= self.max {
                break;
            }
        }
        self.failures = self.failures.saturating_add(1);
        d.min(self.max)
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

/// A revert undone again within this long counts toward a fight.
pub const FIGHT_WINDOW: Duration = Duration::from_secs(60);
/// Reverts in a row, each undone within [`FIGHT_WINDOW`], that make a fight.
pub const FIGHT_THRESHOLD: u32 = 3;
/// A fight quiet for this long is forgotten.
pub const FIGHT_MEMORY: Duration = Duration::from_secs(600);
/// First hold of a fought object.
pub const FIGHT_BACKOFF_MIN: Duration = Duration::from_secs(2);
/// Longest hold.
pub const FIGHT_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// One object another writer keeps changing back.
#[derive(Clone, Debug)]
pub struct Fight {
    /// Reverts in a row, each undone within [`FIGHT_WINDOW`].
    pub reverts: u32,
    /// Holds so far: the hold is 2 s × 3^(level − 1), at most 5 min.
    pub level: u32,
    /// The fields reverted last time.
    pub fields: Vec<String>,
    last_revert: Instant,
    hold_until: Option<Instant>,
}

impl Fight {
    /// True once the reverts make a fight (they are being held back).
    pub fn fighting(&self) -> bool {
        self.level > 0
    }
}

/// Fight detection: when another writer keeps changing the same object back, reverts of that
/// object back off exponentially (2 s, ×3, up to 5 min) instead of racing it, and the app says
/// so in a condition.
#[derive(Clone, Debug, Default)]
pub struct Fights {
    entries: HashMap<ObjectKey, Fight>,
}

fn hold_for(level: u32) -> Duration {
    let mut d = FIGHT_BACKOFF_MIN;
    for _ in 1..level.min(16) {
        d = d.saturating_mul(3);
    }
    d.min(FIGHT_BACKOFF_MAX)
}

impl Fights {
    /// Records a revert of `key` (its `fields`) at `now`; returns the hold it starts, if the
    /// reverts now make a fight.
    pub fn reverted(
        &mut self,
        key: &ObjectKey,
        fields: Vec<String>,
        now: Instant,
    ) -> Option<Duration> {
        let e = self.entries.entry(key.clone()).or_insert_with(|| Fight {
            reverts: 0,
            level: 0,
            fields: Vec::new(),
            last_revert: now,
            hold_until: None,
        });
        if e.reverts > 0 && now.duration_since(e.last_revert) > FIGHT_WINDOW {
            e.reverts = 0;
            e.level = 0;
        }
        e.reverts += 1;
        e.last_revert = now;
        e.fields = fields;
        if e.reverts >= FIGHT_THRESHOLD {
            e.level += 1;
            let hold = hold_for(e.level);
            e.hold_until = Some(now + hold);
            Some(hold)
        } else {
            None
        }
    }

    /// True when reverting `key` must wait.
    pub fn held(&self, key: &ObjectKey, now: Instant) -> bool {
        self.entries
            .get(key)
            .and_then(|f| f.hold_until)
            .is_some_and(|t| t > now)
    }

    /// The objects held at `now` (a few at most: a pass looks here rather than at each of its
    /// objects).
    pub fn held_now(&self, now: Instant) -> impl Iterator<Item = &ObjectKey> {
        self.entries
            .iter()
            .filter(move |(_, f)| f.hold_until.is_some_and(|t| t > now))
            .map(|(k, _)| k)
    }

    /// When something is due: a hold ends, or a quiet fight is to be forgotten.
    pub fn next_due(&self, now: Instant) -> Option<Instant> {
        self.entries
            .values()
            .flat_map(|f| [f.hold_until, Some(f.last_revert + FIGHT_MEMORY)])
            .flatten()
            .filter(|t| *t > now)
            .min()
    }

    /// Forgets fights quiet for [`FIGHT_MEMORY`]; true when one was forgotten.
    pub fn expire(&mut self, now: Instant) -> bool {
        let before = self.entries.len();
        self.entries
            .retain(|_, f| now.duration_since(f.last_revert) < FIGHT_MEMORY);
        self.entries.len() != before
    }

    /// The objects being fought over, by key.
    pub fn active(&self) -> Vec<(&ObjectKey, &Fight)> {
        let mut v: Vec<_> = self.entries.iter().filter(|(_, f)| f.fighting()).collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v
    }

    /// The hold of `key` ends at this time, if held.
    pub fn hold_until(&self, key: &ObjectKey) -> Option<Instant> {
        self.entries.get(key).and_then(|f| f.hold_until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_five_seconds_to_three_minutes() {
        let mut b = Backoff::default();
        let delays: Vec<u64> = (0..8).map(|_| b.fail().as_secs()).collect();
        assert_eq!(delays, vec![5, 10, 20, 40, 80, 160, 180, 180]);
        assert!(b.failing());
        b.reset();
        assert_eq!(b.fail().as_secs(), 5);
        let mut custom = Backoff::new(Duration::from_secs(1), 3, Duration::from_secs(20));
        let delays: Vec<u64> = (0..5).map(|_| custom.fail().as_secs()).collect();
        assert_eq!(delays, vec![1, 3, 9, 20, 20]);
    }

    #[test]
    fn a_writer_undoing_reverts_is_held_back_exponentially() {
        let key = ObjectKey::new("", "ConfigMap", "d", "a");
        let mut f = Fights::default();
        let t0 = Instant::now();
        assert_eq!(f.reverted(&key, vec!["data.k".into()], t0), None);
        assert_eq!(
            f.reverted(&key, vec!["data.k".into()], t0 + Duration::from_secs(1)),
            None
        );
        let holds: Vec<u64> = (0..7)
            .map(|i| {
                f.reverted(&key, vec!["data.k".into()], t0 + Duration::from_secs(2 + i))
                    .unwrap()
                    .as_secs()
            })
            .collect();
        assert_eq!(holds, vec![2, 6, 18, 54, 162, 300, 300]);
        assert!(f.held(&key, t0 + Duration::from_secs(9)));
        assert_eq!(f.active().len(), 1);
        assert_eq!(f.active()[0].1.fields, vec!["data.k"]);
        // Quiet for ten minutes: forgotten.
        assert!(f.expire(t0 + Duration::from_secs(8) + FIGHT_MEMORY + Duration::from_secs(1)));
        assert!(f.active().is_empty());
    }

    #[test]
    fn occasional_reverts_are_not_a_fight() {
        let key = ObjectKey::new("", "ConfigMap", "d", "a");
        let mut f = Fights::default();
        let t0 = Instant::now();
        for i in 0..10 {
            assert_eq!(
                f.reverted(&key, vec![], t0 + FIGHT_WINDOW * (2 * i + 1)),
                None
            );
        }
        assert!(f.active().is_empty());
    }
}
