//! Prometheus metrics of the agent, served as text on `GET /metrics`.
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `driftless_app_info` | gauge (1) | app, revision, sync, health | the app's revision in force, sync status and health |
//! | `driftless_app_out_of_sync_seconds` | gauge | app | age of the gap (seconds since the app stopped being Synced), 0 when Synced; computed when scraped |
//! | `driftless_app_resources` | gauge | app, sync | objects per sync status |
//! | `driftless_app_condition` | gauge (0 or 1) | app, type, status | 1 for the status each condition has now (`True`, `False`, `Unknown`), 0 for the other two, as Flux's `gotk_reconcile_condition`; every condition type has its series from the start, all 0 while the app does not have the condition |
//! | `driftless_reconcile_duration_seconds` | histogram | app | duration of one reconcile |
//! | `driftless_drift_reverted_total` | counter | app, manager | objects whose drift was reverted; `manager` is the field manager behind the change, from the live object's `managedFields` (Kubernetes), `unknown` where the store keeps none (SQLite, etcd) or no manager is named |
//! | `driftless_source_fetch_duration_seconds` | histogram | app | duration of one fetch |
//! | `driftless_source_fetch_errors_total` | counter | app | failed fetches |
//! | `driftless_renders_total` | counter | app, renderer, result | parts of a desired set a renderer builds, per render pass: `result` is `rendered` (the binary ran and succeeded), `failed` (it ran and failed), `cached` (the output of the same inputs was reused) |
//! | `driftless_render_duration_seconds` | histogram | app, renderer | duration of one renderer run (`kustomize build`, `helm template`), cached parts not counted |
//! | `driftless_commit_status_requests_total` | counter | provider, result | requests to the Git host: `result` is `success`, `retry` (5xx/429, retried), `error` (other failures), `capped` (the provider's status limit), `skipped` (the provider already had it) |

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::SystemTime;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::status::{AppStatus, ConditionType, SyncStatus};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AppLabel {
    app: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DriftLabels {
    app: String,
    manager: String,
}

/// The `manager` of a drift whose manager is not known.
pub const UNKNOWN_MANAGER: &str = "unknown";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    app: String,
    revision: String,
    sync: String,
    health: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    app: String,
    sync: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    app: String,
    r#type: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RenderLabels {
    app: String,
    renderer: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RendererLabels {
    app: String,
    renderer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    provider: String,
    result: String,
}

type SecondsHistogram = Family<AppLabel, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    // 1 ms to about 33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Per app: the info labels last set (to drop the old series), when the gap opened, and the
/// condition types last set (to drop the series of one that went away).
type AppSeries = (InfoLabels, Option<SystemTime>, Vec<String>);

/// The agent's metrics. Shared (`Arc`) between the reconcile loops, the reporter and the
/// server.
pub struct Metrics {
    registry: Registry,
    app_info: Family<InfoLabels, Gauge>,
    out_of_sync: Family<AppLabel, Gauge<f64, AtomicU64>>,
    resources: Family<ResourceLabels, Gauge>,
    conditions: Family<ConditionLabels, Gauge>,
    reconcile_duration: SecondsHistogram,
    drift_reverted: Family<DriftLabels, Counter>,
    fetch_duration: SecondsHistogram,
    fetch_errors: Family<AppLabel, Counter>,
    status_requests: Family<RequestLabels, Counter>,
    renders: Family<RenderLabels, Counter>,
    render_duration: Family<RendererLabels, Histogram, fn() -> Histogram>,
    /// Per app: what was last set (see [`AppSeries`]).
    apps: Mutex<HashMap<String, AppSeries>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let app_info = Family::<InfoLabels, Gauge>::default();
        let out_of_sync = Family::<AppLabel, Gauge<f64, AtomicU64>>::default();
        let resources = Family::<ResourceLabels, Gauge>::default();
        let conditions = Family::<ConditionLabels, Gauge>::default();
        let reconcile_duration: SecondsHistogram = Family::new_with_constructor(seconds_histogram);
        let drift_reverted = Family::<DriftLabels, Counter>::default();
        let fetch_duration: SecondsHistogram = Family::new_with_constructor(seconds_histogram);
        let fetch_errors = Family::<AppLabel, Counter>::default();
        let status_requests = Family::<RequestLabels, Counter>::default();
        let renders = Family::<RenderLabels, Counter>::default();
        let render_duration: Family<RendererLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(seconds_histogram);
        registry.register(
            "driftless_renders",
            "Parts of a desired set a renderer builds, by result (rendered, failed, cached)",
            renders.clone(),
        );
        registry.register(
            "driftless_render_duration_seconds",
            "Duration of one renderer run (kustomize build, helm template)",
            render_duration.clone(),
        );
        registry.register(
            "driftless_app_info",
            "The app's revision in force, sync status and health (always 1)",
            app_info.clone(),
        );
        registry.register(
            "driftless_app_out_of_sync_seconds",
            "Seconds since the app stopped being Synced (the gap's age), 0 when Synced",
            out_of_sync.clone(),
        );
        registry.register(
            "driftless_app_resources",
            "Objects of the app by sync status",
            resources.clone(),
        );
        registry.register(
            "driftless_app_condition",
            "1 for the status each condition of the app has now (True, False, Unknown), 0 for the others",
            conditions.clone(),
        );
        registry.register(
            "driftless_reconcile_duration_seconds",
            "Duration of one reconcile of one app",
            reconcile_duration.clone(),
        );
        registry.register(
            "driftless_drift_reverted",
            "Objects whose drift was reverted (found by the store's change feed or by a periodic pass)",
            drift_reverted.clone(),
        );
        registry.register(
            "driftless_source_fetch_duration_seconds",
            "Duration of one fetch of an app's repository",
            fetch_duration.clone(),
        );
        registry.register(
            "driftless_source_fetch_errors",
            "Fetches that failed",
            fetch_errors.clone(),
        );
        registry.register(
            "driftless_commit_status_requests",
            "Commit-status requests to Git hosts, by outcome",
            status_requests.clone(),
        );
        Self {
            registry,
            app_info,
            out_of_sync,
            resources,
            conditions,
            reconcile_duration,
            drift_reverted,
            fetch_duration,
            fetch_errors,
            status_requests,
            renders,
            render_duration,
            apps: Mutex::new(HashMap::new()),
        }
    }

    /// Creates every per-app series of `app` at zero, so that a `rate()` or `increase()` alert
    /// has a series before the first event (Prometheus's advice for counters with labels known
    /// in advance).
    pub fn register_app(&self, app: &str) {
        let label = AppLabel { app: app.into() };
        let _ = self.drift_reverted.get_or_create(&DriftLabels {
            app: app.into(),
            manager: UNKNOWN_MANAGER.into(),
        });
        let _ = self.fetch_errors.get_or_create(&label);
        let _ = self.fetch_duration.get_or_create(&label);
        let _ = self.reconcile_duration.get_or_create(&label);
        for t in ConditionType::ALL {
            for v in ["True", "False", "Unknown"] {
                let _ = self.conditions.get_or_create(&ConditionLabels {
                    app: app.into(),
                    r#type: t.as_str().into(),
                    status: v.into(),
                });
            }
        }
    }

    /// Records an app's status: its info series, its gap's start and its object counts.
    pub fn observe_status(&self, status: &AppStatus) {
        let labels = InfoLabels {
            app: status.name.clone(),
            revision: status.revision.clone().unwrap_or_default(),
            sync: status.sync.to_string(),
            health: status.health.to_string(),
        };
        let since = status
            .out_of_sync_since
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339(t).ok());
        let condition = |type_: &str, value: &str| ConditionLabels {
            app: status.name.clone(),
            r#type: type_.to_string(),
            status: value.to_string(),
        };
        const VALUES: [&str; 3] = ["True", "False", "Unknown"];
        let types: Vec<String> = status
            .conditions
            .iter()
            .map(|c| c.type_.to_string())
            .collect();
        let mut apps = self.apps.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((old, _, old_types)) = apps.get(&status.name) {
            if *old != labels {
                self.app_info.remove(old);
            }
            // A type driftless does not know (another version's) that went away.
            for gone in old_types.iter().filter(|t| {
                !types.contains(t) && !ConditionType::ALL.iter().any(|a| a.as_str() == *t)
            }) {
                for v in VALUES {
                    self.conditions.remove(&condition(gone, v));
                }
            }
        }
        self.app_info.get_or_create(&labels).set(1);
        // Every condition type has its three series from the start: 0 for each status while
        // the app does not have the condition, so an alert on `== 1` always has a series.
        for t in ConditionType::ALL {
            let have = status.condition(t.clone()).map(|c| c.status.as_str());
            for v in VALUES {
                self.conditions
                    .get_or_create(&condition(t.as_str(), v))
                    .set(i64::from(have == Some(v)));
            }
        }
        for c in status
            .conditions
            .iter()
            .filter(|c| matches!(c.type_, ConditionType::Other(_)))
        {
            for v in VALUES {
                self.conditions
                    .get_or_create(&condition(c.type_.as_str(), v))
                    .set(i64::from(c.status.as_str() == v));
            }
        }
        apps.insert(status.name.clone(), (labels, since, types));
        drop(apps);
        for sync in [
            SyncStatus::Synced,
            SyncStatus::OutOfSync,
            SyncStatus::Unknown,
        ] {
            let n = status.resources.iter().filter(|r| r.sync == sync).count();
            self.resources
                .get_or_create(&ResourceLabels {
                    app: status.name.clone(),
                    sync: sync.to_string(),
                })
                .set(n as i64);
        }
    }

    /// Records one reconcile's duration in seconds.
    pub fn reconcile_duration(&self, app: &str, seconds: f64) {
        self.reconcile_duration
            .get_or_create(&AppLabel { app: app.into() })
            .observe(seconds);
    }

    /// Records one fetch: its duration in seconds and whether it failed.
    pub fn fetch(&self, app: &str, seconds: f64, failed: bool) {
        let label = AppLabel { app: app.into() };
        self.fetch_duration.get_or_create(&label).observe(seconds);
        let errors = self.fetch_errors.get_or_create(&label);
        if failed {
            errors.inc();
        }
    }

    /// Counts one part of a desired set a renderer built (`rendered`: the binary ran; `ok`:
    /// it succeeded), and the run's duration.
    pub fn render(&self, app: &str, renderer: &str, rendered: bool, ok: bool, seconds: f64) {
        let result = match (rendered, ok) {
            (false, _) => "cached",
            (true, true) => "rendered",
            (true, false) => "failed",
        };
        self.renders
            .get_or_create(&RenderLabels {
                app: app.into(),
                renderer: renderer.into(),
                result: result.into(),
            })
            .inc();
        if rendered {
            self.render_duration
                .get_or_create(&RendererLabels {
                    app: app.into(),
                    renderer: renderer.into(),
                })
                .observe(seconds);
        }
    }

    /// Counts objects whose drift was reverted, by the field manager behind the change
    /// ([`UNKNOWN_MANAGER`] when not known).
    pub fn drift_reverted(&self, app: &str, manager: &str, n: u64) {
        self.drift_reverted
            .get_or_create(&DriftLabels {
                app: app.into(),
                manager: manager.into(),
            })
            .inc_by(n);
    }

    /// Counts one commit-status request by outcome (see the module table).
    pub fn commit_status_request(&self, provider: &str, result: &str) {
        self.status_requests
            .get_or_create(&RequestLabels {
                provider: provider.into(),
                result: result.into(),
            })
            .inc();
    }

    /// The metrics in Prometheus text format. The gap's age is computed now.
    pub fn encode(&self) -> String {
        let now = SystemTime::now();
        {
            let apps = self.apps.lock().unwrap_or_else(|e| e.into_inner());
            for (app, (_, since, _)) in apps.iter() {
                let age = since
                    .and_then(|s| now.duration_since(s).ok())
                    .map_or(0.0, |d| d.as_secs_f64());
                self.out_of_sync
                    .get_or_create(&AppLabel { app: app.clone() })
                    .set(age);
            }
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Health;
    use crate::status::Reason;

    #[test]
    fn every_documented_metric_is_exposed_and_info_series_do_not_pile_up() {
        let m = Metrics::new();
        let mut st = AppStatus::new("web");
        st.revision = Some("abc".into());
        st.sync = SyncStatus::OutOfSync;
        st.health = Health::Healthy;
        st.out_of_sync_since = Some("2000-01-01T00:00:00Z".into());
        crate::status::set_condition(
            &mut st.conditions,
            ConditionType::Stale,
            true,
            Reason::GapExceededThreshold,
            "",
            "2000-01-01T00:00:00Z",
        );
        crate::status::set_condition(
            &mut st.conditions,
            ConditionType::Ready,
            false,
            Reason::OutOfSync,
            "",
            "2000-01-01T00:00:00Z",
        );
        m.observe_status(&st);
        let text = m.encode();
        for line in [
            "driftless_app_condition{app=\"web\",type=\"Stale\",status=\"True\"} 1",
            "driftless_app_condition{app=\"web\",type=\"Stale\",status=\"False\"} 0",
            "driftless_app_condition{app=\"web\",type=\"Ready\",status=\"False\"} 1",
            "driftless_app_condition{app=\"web\",type=\"Ready\",status=\"Unknown\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        // A condition the app does not have (now) reads 0 for every status.
        st.conditions.retain(|c| c.type_ != ConditionType::Stale);
        st.revision = Some("def".into());
        m.observe_status(&st);
        let text = m.encode();
        for v in ["True", "False", "Unknown"] {
            let line =
                format!("driftless_app_condition{{app=\"web\",type=\"Stale\",status=\"{v}\"}} 0");
            assert!(text.contains(&line), "{line} missing from:\n{text}");
        }
        assert!(
            text.contains("type=\"Contested\",status=\"True\"} 0"),
            "{text}"
        );
        m.reconcile_duration("web", 0.2);
        m.fetch("web", 0.1, true);
        m.drift_reverted("web", "kubectl-edit", 2);
        m.commit_status_request("github", "success");
        let text = m.encode();
        for name in [
            "driftless_app_info{",
            "driftless_app_out_of_sync_seconds{app=\"web\"}",
            "driftless_app_resources{",
            "driftless_reconcile_duration_seconds_bucket{",
            "driftless_drift_reverted_total{app=\"web\",manager=\"kubectl-edit\"} 2",
            "driftless_source_fetch_duration_seconds_count{app=\"web\"} 1",
            "driftless_source_fetch_errors_total{app=\"web\"} 1",
            "driftless_commit_status_requests_total{provider=\"github\",result=\"success\"} 1",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
        assert!(
            !text.contains("revision=\"abc\""),
            "the old info series is gone:\n{text}"
        );
        assert!(text.contains("revision=\"def\""));
        let age: f64 = text
            .lines()
            .find(|l| l.starts_with("driftless_app_out_of_sync_seconds{"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!(age > 800_000_000.0, "{age}");
    }
}
