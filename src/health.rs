//! Health: how well a live object is doing, and the worst of an app's objects.
//!
//! The built-in rules today are the baseline of issue 2: an object that is declared but absent
//! from the store is `Missing`; every present object is `Healthy`. Per-kind rules (Deployment,
//! Job, Pod...) come with the health work; the ordering and the app-level rule are final.

use serde::{Deserialize, Serialize};

use crate::object::Object;

/// Health of one object or of an app. Ordered from best to worst as DESIGN.md section 2 gives
/// it: Healthy < Suspended < Progressing < Missing < Degraded < Unknown, so the app's health is
/// the maximum of its objects'.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Health {
    /// Working as declared.
    Healthy,
    /// Deliberately paused (`spec.suspend`, `spec.paused`).
    Suspended,
    /// Not there yet, within its deadline.
    Progressing,
    /// Declared but absent from the store.
    Missing,
    /// Failed.
    Degraded,
    /// Cannot be assessed.
    Unknown,
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// The health of a declared object given its live copy (`None` when absent).
pub fn assess(live: Option<&Object>) -> Health {
    match live {
        None => Health::Missing,
        Some(_) => Health::Healthy,
    }
}

/// The health of an app: the worst of its objects', `Healthy` when it has none.
pub fn worst(healths: impl IntoIterator<Item = Health>) -> Health {
    healths.into_iter().max().unwrap_or(Health::Healthy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_health_is_the_worst_in_the_documented_order() {
        use Health::*;
        assert_eq!(worst([Healthy, Suspended]), Suspended);
        assert_eq!(worst([Progressing, Suspended, Healthy]), Progressing);
        assert_eq!(worst([Progressing, Missing]), Missing);
        assert_eq!(worst([Missing, Degraded]), Degraded);
        assert_eq!(worst([Degraded, Unknown]), Unknown);
        assert_eq!(worst([]), Healthy);
    }

    #[test]
    fn absent_objects_are_missing_and_present_ones_healthy() {
        let o = Object::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
        )
        .unwrap();
        assert_eq!(assess(None), Health::Missing);
        assert_eq!(assess(Some(&o)), Health::Healthy);
    }
}
