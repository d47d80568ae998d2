//! How the replicas of one agent share the apps, the pure part (no I/O, the clock as a value):
//! who holds what, and what one replica does on each pass. The backends keep the holds (etcd:
//! keys under the replica's lease, `store::etcd::Replicas`; Kubernetes: one
//! `coordination.k8s.io` Lease per app, `store::kubernetes::Replicas`) and follow the same
//! rules, [`plan_pass`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// Which replica holds each app, and since when: read from the backend's lease records (etcd: `<prefix>/_leases/`; Kubernetes: the app's Lease).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The replica's name.
    pub replica: String,
    /// The revision at which it took the app (etcd: the key's create revision; Kubernetes: the
    /// Lease's resourceVersion when it was acquired).
    pub since_revision: u64,
    /// The session the hold is attached to: etcd's lease of the replica; on Kubernetes 1 while
    /// the app's Lease is renewed (its resourceVersion moved within the TTL), 0 once expired.
    pub lease: i64,
}

/// What a replica remembers between passes.
#[derive(Debug, Default)]
pub struct PassMemory {
    /// When each free app was first seen free.
    pub free_since: HashMap<String, tokio::time::Instant>,
    /// Stale lease keys seen on the last pass: app to the key's create revision.
    pub stale: HashMap<String, i64>,
    /// When this replica last gave an app back.
    pub last_give_back: Option<tokio::time::Instant>,
}

/// What one pass does.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PassPlan {
    /// Free apps to take.
    pub take: Vec<String>,
    /// An app to give back.
    pub give_back: Option<String>,
    /// Stale lease keys to remove: app and the key's create revision.
    pub clear: Vec<(String, i64)>,
}

/// Decides a pass of replica `me` (lease `lease`, running `apps`) from the registered replicas
/// (name to the apps each runs; `None` when unreadable, taken as every app) and the holders.
///
/// - A free app is taken at once when no other replica that runs it holds fewer apps than
///   `me`; otherwise once it has stayed free for `beat` (so no app stays unheld for long).
/// - A holder whose replica is not registered, or whose key has no lease, is stale: its key is
///   cleared once seen stale on two passes.
/// - At most once per `beat`, one app is given back when another replica that runs it holds
///   at least two fewer: each move narrows the gap, so balancing ends, and an app that only
///   `me` runs is never given back.
#[allow(clippy::too_many_arguments)]
pub fn plan_pass(
    me: &str,
    lease: i64,
    apps: &[String],
    replicas: &BTreeMap<String, Option<BTreeSet<String>>>,
    holders: &BTreeMap<String, Holder>,
    memory: &mut PassMemory,
    now: tokio::time::Instant,
    beat: Duration,
) -> PassPlan {
    let mut plan = PassPlan::default();
    let live = |h: &Holder| h.lease != 0 && replicas.contains_key(&h.replica);
    let mut count: BTreeMap<&str, usize> = replicas.keys().map(|r| (r.as_str(), 0)).collect();
    for h in holders.values().filter(|h| live(h)) {
        *count.entry(h.replica.as_str()).or_default() += 1;
    }
    let runs = |r: &str, app: &str| {
        replicas
            .get(r)
            .is_some_and(|a| a.as_ref().is_none_or(|a| a.contains(app)))
    };
    let others_min = |app: &str, count: &BTreeMap<&str, usize>| {
        count
            .iter()
            .filter(|(r, _)| **r != me && runs(r, app))
            .map(|(_, n)| *n)
            .min()
    };
    let mut stale_now = HashMap::new();
    let mut mine = count.get(me).copied().unwrap_or(0);
    for app in apps {
        let free = match holders.get(app) {
            None => true,
            Some(h) if live(h) => false,
            Some(h) => {
                let created = h.since_revision as i64;
                if memory.stale.get(app) == Some(&created) {
                    plan.clear.push((app.clone(), created));
                }
                stale_now.insert(app.clone(), created);
                false
            }
        };
        if !free {
            memory.free_since.remove(app);
            continue;
        }
        let since = *memory.free_since.entry(app.clone()).or_insert(now);
        let least = others_min(app, &count).is_none_or(|n| mine <= n);
        if least || now.duration_since(since) >= beat {
            plan.take.push(app.clone());
            mine += 1;
        }
    }
    memory.stale = stale_now;
    let may_give = memory
        .last_give_back
        .is_none_or(|t| now.duration_since(t) >= beat);
    if may_give {
        plan.give_back = apps
            .iter()
            .filter(|a| {
                holders
                    .get(*a)
                    .is_some_and(|h| h.replica == me && h.lease == lease)
            })
            .find(|a| others_min(a, &count).is_some_and(|n| n + 2 <= mine))
            .cloned();
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(replica: &str, lease: i64, since: u64) -> Holder {
        Holder {
            replica: replica.into(),
            since_revision: since,
            lease,
        }
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_pass_takes_free_apps_as_the_least_loaded_replica_and_gives_back_rarely() {
        let apps = names(&["a1", "a2", "a3", "a4"]);
        let every: BTreeMap<String, Option<BTreeSet<String>>> =
            [("r1".to_string(), None), ("r2".to_string(), None)].into();
        let t0 = tokio::time::Instant::now();
        let beat = Duration::from_secs(5);
        // Alone among free apps: take them all.
        let mut m = PassMemory::default();
        let p = plan_pass("r1", 7, &apps, &every, &BTreeMap::new(), &mut m, t0, beat);
        assert_eq!(
            p.take,
            names(&["a1"]),
            "r2 has none either: r1 takes while it is not ahead"
        );
        // What r1 did not take, it takes once free for a beat.
        let p = plan_pass(
            "r1",
            7,
            &apps,
            &every,
            &BTreeMap::new(),
            &mut m,
            t0 + beat,
            beat,
        );
        assert_eq!(p.take, apps, "nobody took them for a beat");
        // Holding all four with r2 at none: give one back, then wait a beat before another.
        let all: BTreeMap<String, Holder> = apps
            .iter()
            .map(|a| (a.clone(), holder("r1", 7, 1)))
            .collect();
        let mut m = PassMemory::default();
        let p = plan_pass("r1", 7, &apps, &every, &all, &mut m, t0, beat);
        assert_eq!(p.give_back.as_deref(), Some("a1"));
        m.last_give_back = Some(t0);
        let p = plan_pass("r1", 7, &apps, &every, &all, &mut m, t0 + beat / 2, beat);
        assert_eq!(p.give_back, None, "at most one per beat: no hot loop");
    }

    #[test]
    fn an_app_only_this_replica_runs_is_never_given_back() {
        // r2 runs only a1 (a rolling update with another app list): r1 keeps a2..a4.
        let apps = names(&["a1", "a2", "a3", "a4"]);
        let replicas: BTreeMap<String, Option<BTreeSet<String>>> = [
            ("r1".to_string(), None),
            ("r2".to_string(), Some(["a1".to_string()].into())),
        ]
        .into();
        let mut held: BTreeMap<String, Holder> = names(&["a2", "a3", "a4"])
            .into_iter()
            .map(|a| (a, holder("r1", 7, 1)))
            .collect();
        held.insert("a1".into(), holder("r2", 9, 2));
        let mut m = PassMemory::default();
        let t0 = tokio::time::Instant::now();
        let p = plan_pass(
            "r1",
            7,
            &apps,
            &replicas,
            &held,
            &mut m,
            t0,
            Duration::from_secs(5),
        );
        assert_eq!(p, PassPlan::default());
    }

    #[test]
    fn a_lease_key_without_a_live_replica_is_cleared_on_the_second_look() {
        let apps = names(&["a1"]);
        let replicas: BTreeMap<String, Option<BTreeSet<String>>> =
            [("r1".to_string(), None)].into();
        let ghost: BTreeMap<String, Holder> = [("a1".to_string(), holder("ghost", 0, 42))].into();
        let mut m = PassMemory::default();
        let t0 = tokio::time::Instant::now();
        let beat = Duration::from_secs(5);
        let p = plan_pass("r1", 7, &apps, &replicas, &ghost, &mut m, t0, beat);
        assert!(p.clear.is_empty() && p.take.is_empty());
        let p = plan_pass("r1", 7, &apps, &replicas, &ghost, &mut m, t0, beat);
        assert_eq!(p.clear, vec![("a1".to_string(), 42)]);
    }
}
