//! Elastic Cloud on Kubernetes (ECK, elastic/cloud-on-k8s): Elasticsearch, Kibana, APM Server,
//! Enterprise Search, Beat, Elastic Agent, Logstash, Elastic Maps Server and the package registry
//! (`*.k8s.elastic.co`).
//!
//! Every one of these kinds reports a traffic-light `status.health` and a count of available
//! instances (`pkg/apis/common/v1/common.go` `DeploymentStatus`; `pkg/apis/beat/v1beta1/beat_types.go`
//! `BeatHealth`; `pkg/apis/elasticsearch/v1/status.go` `ElasticsearchHealth` and
//! `ElasticsearchOrchestrationPhase`); the association to an Elasticsearch or Kibana is
//! `Pending`, `Established` or `Failed` (`pkg/apis/common/v1/association.go`
//! `AssociationStatus`).
//!
//! Pure: no I/O.

use serde_json::Value;

use super::{generation_lag, int_at, status, str_at, value, verdict, waiting};
use crate::health::Live;
use crate::health::{Assessment, Health};

/// The ECK rule for Elasticsearch, Kibana, ApmServer, EnterpriseSearch, Beat, Agent, Logstash,
/// ElasticMapsServer and PackageRegistry (the dispatch in `mod.rs` names them; the autoscaling,
/// AutoOps and stack config policy kinds, whose status is not a deployment's, are left to the
/// generic rules).
///
/// In this order:
/// 1. no status yet: `Progressing` (waiting for ECK);
/// 2. an association `Failed`, or Elasticsearch's orchestration phase `Invalid` or `Stalled`
///    (a node shutdown that cannot make progress), or `health: red`: `Degraded`;
/// 3. `status.observedGeneration` behind: `Progressing`;
/// 4. an association `Pending`, the phase `ApplyingChanges` or `MigratingData`, or
///    `health: yellow` (Elasticsearch: replica shards unassigned, which it recovers from itself;
///    the other kinds: some instances not ready yet): `Progressing`;
/// 5. a health outside ECK's set, or `unknown` (Elasticsearch's health API not reachable):
///    `Unknown`, saying so;
/// 6. fewer available instances than expected (`availableNodes` below `expectedNodes`, or
///    below the sum of `spec.nodeSets[].count` for Elasticsearch, or below `spec.count` for the
///    kinds that have one): `Progressing`;
/// 7. `health: green`: `Healthy`; no health with every instance available: `Unknown`.
///
/// Argo CD calls an empty status `Unknown` for Elasticsearch and Beat; here it is `Progressing`,
/// as for every kind whose controller writes a status and has not yet.
pub(super) fn assess(obj: &Live) -> Assessment {
    let Some(st) = status(obj) else {
        return waiting("ECK");
    };
    let health = st.get("health").and_then(Value::as_str).unwrap_or_default();
    let phase = str_at(obj, &["status", "phase"]).unwrap_or_default();
    let associations: Vec<(&String, &str)> = st
        .iter()
        .filter(|(k, _)| k.ends_with("AssociationStatus") || k.ends_with("AssociationsStatus"))
        .flat_map(|(k, v)| match v {
            Value::String(s) => vec![(k, s.as_str())],
            // `monitoringAssociationStatus` and `elasticsearchAssociationsStatus` map each
            // Elasticsearch reference to its status.
            Value::Object(m) => m
                .values()
                .filter_map(Value::as_str)
                .map(|s| (k, s))
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    if let Some((k, _)) = associations.iter().find(|(_, s)| *s == "Failed") {
        return verdict(Health::Degraded, format!("status.{k} is Failed"));
    }
    if matches!(phase, "Invalid" | "Stalled") {
        return verdict(
            Health::Degraded,
            format!("status.phase is {phase} (health {health})"),
        );
    }
    if health == "red" {
        return verdict(Health::Degraded, "status.health is red");
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    if let Some((k, s)) = associations.iter().find(|(_, s)| *s == "Pending") {
        return verdict(Health::Progressing, format!("status.{k} is {s}"));
    }
    if matches!(phase, "ApplyingChanges" | "MigratingData") {
        return verdict(Health::Progressing, format!("status.phase is {phase}"));
    }
    match health {
        "yellow" => return verdict(Health::Progressing, "status.health is yellow"),
        "green" | "" => {}
        other => return verdict(Health::Unknown, format!("status.health is {other}")),
    }
    let available = int_at(obj, &["status", "availableNodes"]).unwrap_or(0);
    if let Some(expected) = expected_nodes(obj)
        && available < expected
    {
        return verdict(
            Health::Progressing,
            format!("{available} of {expected} instances available"),
        );
    }
    if health == "green" {
        verdict(Health::Healthy, "status.health is green")
    } else {
        verdict(Health::Unknown, "ECK reports no health")
    }
}

/// How many instances ECK should run: `status.expectedNodes` (Beat, Agent, Logstash), else the
/// sum of `spec.nodeSets[].count` (Elasticsearch), else `spec.count` (Kibana, APM Server,
/// Enterprise Search, Maps; ECK's default is 1 but the default is not counted here: a kind
/// without a count reports its own health).
fn expected_nodes(obj: &Live) -> Option<i64> {
    if let Some(n) = int_at(obj, &["status", "expectedNodes"]) {
        return Some(n);
    }
    if let Some(sets) = value(obj, &["spec", "nodeSets"]).and_then(Value::as_array) {
        return Some(
            sets.iter()
                .map(|s| s.get("count").and_then(Value::as_i64).unwrap_or(0))
                .sum(),
        );
    }
    int_at(obj, &["spec", "count"])
}
