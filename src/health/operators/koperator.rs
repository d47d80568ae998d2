//! Koperator, the Kafka operator once Banzai Cloud's (banzaicloud/koperator, now
//! adobe/koperator): KafkaCluster (`kafka.banzaicloud.io`).
//!
//! `status.state` is `ClusterReconciling`, `ClusterRollingUpgrading` or `ClusterRunning`; each
//! broker of `status.brokersState` reports its configuration (`ConfigInSync`/`ConfigOutOfSync`,
//! and `PerBrokerConfigInSync`/`PerBrokerConfigOutOfSync`/`PerBrokerConfigError` for the
//! dynamically updatable part), its Cruise Control action (`Graceful{Up,Down}scale{Required,
//! Scheduled,Running,Succeeded,CompletedWithError,Paused}`; `Paused` is "completed with an error
//! and it will not be retried"), its disks' rebalance and its rack awareness
//! (`WaitingForRackAwareness`) (`api/v1beta1/common_types.go`, `api/v1beta1/kafkacluster_types.go`
//! `KafkaClusterStatus`, `BrokerState`, `GracefulActionState`).
//!
//! Pure: no I/O.

use serde_json::{Map, Value};

use super::{status, verdict, waiting};
use crate::health::Live;
use crate::health::{Assessment, Health};

/// A KafkaCluster, in this order:
/// 1. no status yet: `Progressing`;
/// 2. a broker whose Cruise Control action or disk rebalance completed with an error
///    (`…CompletedWithError`, `…Paused`), or whose per-broker configuration failed to apply
///    (`PerBrokerConfigError`): `Degraded`, naming the broker;
/// 3. `ClusterReconciling` or `ClusterRollingUpgrading`: `Progressing`;
/// 4. a broker whose configuration is out of sync (the operator restarts or reconfigures it),
///    whose Cruise Control action or disk rebalance is required, scheduled or running, or which
///    waits for rack awareness; or the Cruise Control topic not created yet: `Progressing`;
/// 5. `ClusterRunning`: `Healthy`; any other state: `Unknown`.
pub(super) fn kafka_cluster(obj: &Live) -> Assessment {
    let Some(st) = status(obj) else {
        return waiting("Koperator");
    };
    let brokers: Vec<(&String, &Map<String, Value>)> = st
        .get("brokersState")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(id, b)| b.as_object().map(|b| (id, b)))
        .collect();
    let text = |m: &Map<String, Value>, k: &str| -> String {
        m.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    // Every (field, value) a broker reports, its disks' rebalance states included.
    let states = |b: &Map<String, Value>| -> Vec<(String, String)> {
        let mut out = vec![
            ("configurationState".into(), text(b, "configurationState")),
            (
                "perBrokerConfigurationState".into(),
                text(b, "perBrokerConfigurationState"),
            ),
            ("rackAwarenessState".into(), text(b, "rackAwarenessState")),
        ];
        if let Some(g) = b.get("gracefulActionState").and_then(Value::as_object) {
            out.push((
                "gracefulActionState.cruiseControlState".into(),
                text(g, "cruiseControlState"),
            ));
            for (disk, v) in g
                .get("volumeStates")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                if let Some(v) = v.as_object() {
                    out.push((
                        format!("volumeStates.{disk}.cruiseControlVolumeState"),
                        text(v, "cruiseControlVolumeState"),
                    ));
                }
            }
        }
        out
    };
    for (id, b) in &brokers {
        for (field, value) in states(b) {
            if value.ends_with("CompletedWithError")
                || value.ends_with("Paused")
                || value == "PerBrokerConfigError"
            {
                return verdict(Health::Degraded, format!("broker {id}: {field} is {value}"));
            }
        }
    }
    let state = st.get("state").and_then(Value::as_str).unwrap_or_default();
    if matches!(state, "ClusterReconciling" | "ClusterRollingUpgrading") {
        return verdict(Health::Progressing, format!("status.state is {state}"));
    }
    for (id, b) in &brokers {
        for (field, value) in states(b) {
            if value.ends_with("OutOfSync")
                || value.ends_with("Required")
                || value.ends_with("Scheduled")
                || value.ends_with("Running")
                || value == "WaitingForRackAwareness"
            {
                return verdict(
                    Health::Progressing,
                    format!("broker {id}: {field} is {value}"),
                );
            }
        }
    }
    if st.get("cruiseControlTopicStatus").and_then(Value::as_str)
        == Some("CruiseControlTopicNotReady")
    {
        return verdict(
            Health::Progressing,
            "status.cruiseControlTopicStatus is CruiseControlTopicNotReady",
        );
    }
    match state {
        "ClusterRunning" => verdict(Health::Healthy, "status.state is ClusterRunning"),
        "" => verdict(Health::Unknown, "Koperator reports no state"),
        other => verdict(Health::Unknown, format!("status.state is {other}")),
    }
}
