//! Built-in health rules for the kinds of the operators people run most, each read from that
//! operator's own documented status semantics (the doc comment of every rule names the
//! documentation or source file it follows).
//!
//! | Operator | Group | Kinds |
//! |---|---|---|
//! | cert-manager | `cert-manager.io` (`certmanager.k8s.io` before v0.11) | Certificate, CertificateRequest, Issuer, ClusterIssuer |
//! | Argo Rollouts | `argoproj.io` | Rollout, AnalysisRun, Experiment |
//! | Argo Workflows | `argoproj.io` | Workflow |
//! | Crossplane | `*.crossplane.io`, `*.upbound.io` | managed resources, provider configs |
//! | Crossplane packages | `pkg.crossplane.io` | Provider, Configuration, Function and their revisions |
//! | External Secrets | `external-secrets.io` | ExternalSecret, ClusterExternalSecret, SecretStore, ClusterSecretStore, PushSecret |
//! | Flux | `*.toolkit.fluxcd.io` | every kind (Kustomization, HelmRelease, GitRepository, ...) |
//! | KEDA | `keda.sh` | ScaledObject, ScaledJob, TriggerAuthentication, ClusterTriggerAuthentication |
//! | Strimzi | `kafka.strimzi.io` | Kafka, KafkaTopic, KafkaUser, KafkaConnect, KafkaConnector, KafkaMirrorMaker2, KafkaBridge, KafkaNodePool, KafkaRebalance |
//! | Prometheus Operator | `monitoring.coreos.com` | Prometheus, Alertmanager, ThanosRuler, PrometheusAgent, and the configuration kinds |
//! | CloudNativePG | `postgresql.cnpg.io` | Cluster, Backup, ScheduledBackup, Pooler |
//! | Istio | `install.istio.io`, `networking.istio.io`, `security.istio.io`, `telemetry.istio.io`, `extensions.istio.io` | IstioOperator, every configuration kind |
//! | Knative | `*.knative.dev` | every kind (Service, Route, Configuration, Revision, Broker, Trigger, KnativeServing, ...) |
//! | Zalando Postgres Operator | `acid.zalan.do` | postgresql |
//! | Gateway API | `gateway.networking.k8s.io` | GatewayClass, Gateway, HTTPRoute, GRPCRoute, TLSRoute, TCPRoute, UDPRoute, BackendTLSPolicy |
//! | Velero | `velero.io` | Backup, Restore, Schedule, BackupStorageLocation, VolumeSnapshotLocation |
//! | Tekton | `tekton.dev` | PipelineRun, TaskRun, CustomRun |
//! | Kyverno | `kyverno.io` | ClusterPolicy, Policy |
//! | Argo CD (`argocd.rs`) | `argoproj.io` | ApplicationSet |
//! | GitOps Promoter (`promoter.rs`) | `promoter.argoproj.io` | PromotionStrategy, ChangeTransferPolicy, PullRequest, CommitStatus, ArgoCDCommitStatus, GitCommitStatus, TimedCommitStatus, WebRequestCommitStatus, ScheduledCommitStatus, GitRepository, ScmProvider, ClusterScmProvider, ControllerConfiguration |
//! | Gardener (`gardener.rs`) | `core.gardener.cloud` | Shoot |
//! | OpenShift (`openshift.rs`) | `apps.openshift.io`, `route.openshift.io` | DeploymentConfig, Route |
//! | Sealed Secrets (`sealed_secrets.rs`) | `bitnami.com` | SealedSecret |
//! | CSI snapshots (`snapshots.rs`) | `snapshot.storage.k8s.io` | VolumeSnapshot, VolumeSnapshotContent |
//! | Elastic Cloud on Kubernetes (`eck.rs`) | `*.k8s.elastic.co` | Elasticsearch, Kibana, ApmServer, EnterpriseSearch, Beat, Agent, Logstash, ElasticMapsServer, PackageRegistry |
//! | MinIO Operator | `minio.min.io` | Tenant |
//! | Cluster API | `cluster.x-k8s.io`, `addons.cluster.x-k8s.io` | Cluster, Machine, MachineDeployment, MachineSet, MachinePool, MachineHealthCheck, ClusterResourceSet |
//! | Karmada | `work.karmada.io` | ResourceBinding, ClusterResourceBinding |
//! | Grafana Operator | `grafana.integreatly.org` | Grafana, GrafanaDashboard, GrafanaDatasource, GrafanaFolder, GrafanaAlertRuleGroup, GrafanaContactPoint, GrafanaLibraryPanel, GrafanaMuteTiming, GrafanaNotificationPolicy, GrafanaNotificationTemplate, GrafanaManifest, GrafanaServiceAccount |
//! | Karpenter | `karpenter.sh`, `karpenter.k8s.aws` | NodePool, NodeClaim, EC2NodeClass |
//! | 3scale operator | `capabilities.3scale.net`, `apps.3scale.net` | Product, Backend, ActiveDoc, Application, ApplicationAuth, CustomPolicyDefinition, DeveloperAccount, DeveloperUser, OpenAPI, ProxyConfigPromote, Tenant, APIManager |
//! | Numaflow | `numaflow.numaproj.io` | Pipeline, Vertex, MonoVertex, InterStepBufferService |
//! | Numaplane | `numaplane.numaproj.io` | PipelineRollout, MonoVertexRollout, ISBServiceRollout, NumaflowControllerRollout |
//! | Open Cluster Management | `policy.open-cluster-management.io` | Policy, ConfigurationPolicy, CertificatePolicy, OperatorPolicy |
//! | Koperator (`koperator.rs`) | `kafka.banzaicloud.io` | KafkaCluster |
//! | OpenKruise | `apps.kruise.io` | CloneSet, StatefulSet (Advanced StatefulSet), DaemonSet (Advanced DaemonSet), AdvancedCronJob, BroadcastJob |
//! | Kruise Rollout | `rollouts.kruise.io` | Rollout |
//! | OpenKruiseGame | `game.kruise.io` | GameServer, GameServerSet |
//! | RabbitMQ Cluster Operator | `rabbitmq.com` | RabbitmqCluster |
//! | RabbitMQ Messaging Topology Operator | `rabbitmq.com` | Queue, Exchange, Binding, User, Vhost, Policy, OperatorPolicy, Permission, TopicPermission, Federation, Shovel, SchemaReplication, SuperStream |
//!
//! What every rule keeps to:
//!
//! - an object of a kind whose controller writes a status, with no status yet, is `Progressing`
//!   ("waiting for <operator> to report a status"): the controller has not seen it;
//! - a rule never says `Healthy` for an object whose own status says it failed: the failure
//!   readings come before the healthy ones;
//! - every message says why: the condition (`type=status: reason: message`), the phase, or the
//!   field the verdict was read from.
//!
//! Kinds of these groups that have no rule here (Argo CD's Application, Crossplane's
//! Composition, Tekton's Pipeline, ...) get `None`: the generic rules decide for them.
//!
//! Pure: no I/O.

mod argocd;
mod cluster_api;
mod eck;
mod gardener;
mod grafana;
mod karmada;
mod karpenter;
mod koperator;
mod kruise;
mod minio;
mod numaflow;
mod ocm;
mod openshift;
mod promoter;
mod rabbitmq;
mod sealed_secrets;
mod snapshots;
mod threescale;

use serde_json::{Map, Value};

use super::generic::{Word, terminal_reason, word};
use super::{Assessment, Health, conditions_in, cstr};
use crate::health::Live;

/// One entry of a `conditions` list.
type Cond = Map<String, Value>;

/// The operator rule for the object's group and kind: `Some` when there is one, `None` for the
/// generic rules to decide.
pub(super) fn assess(obj: &Live) -> Option<Assessment> {
    let (group, kind) = (obj.group(), obj.kind());
    Some(match group {
        // `certmanager.k8s.io`: cert-manager before v0.11.
        "cert-manager.io" | "certmanager.k8s.io" => match kind {
            "Certificate" => certificate(obj),
            "CertificateRequest" => certificate_request(obj),
            "Issuer" | "ClusterIssuer" => ready_condition(obj, &CERT_MANAGER_ISSUER),
            _ => return None,
        },
        "argoproj.io" => match kind {
            "Rollout" => rollout(obj),
            "AnalysisRun" | "Experiment" => analysis_run(obj),
            "Workflow" => workflow(obj),
            "ApplicationSet" => argocd::application_set(obj),
            _ => return None,
        },
        "promoter.argoproj.io" => return promoter::assess(obj),
        "pkg.crossplane.io" => match kind {
            "Provider" | "Configuration" | "Function" => crossplane_package(obj),
            "ProviderRevision" | "ConfigurationRevision" | "FunctionRevision" => {
                crossplane_package_revision(obj)
            }
            _ => return None,
        },
        // Crossplane's own machinery (Compositions, XRDs, Operations, Usages) follows no
        // managed-resource conventions: the generic rules read them.
        "apiextensions.crossplane.io" | "ops.crossplane.io" | "protection.crossplane.io" => {
            return None;
        }
        g if g.ends_with(".crossplane.io") || g.ends_with(".upbound.io") => crossplane_managed(obj),
        "external-secrets.io" => match kind {
            "ExternalSecret" | "PushSecret" | "SecretStore" | "ClusterSecretStore" => {
                ready_condition(obj, &EXTERNAL_SECRETS)
            }
            "ClusterExternalSecret" => cluster_external_secret(obj),
            _ => return None,
        },
        g if g.ends_with(".toolkit.fluxcd.io") => flux(obj),
        "keda.sh" => match kind {
            "ScaledObject" | "ScaledJob" => keda_scaler(obj),
            "TriggerAuthentication" | "ClusterTriggerAuthentication" => keda_authentication(obj),
            _ => return None,
        },
        "kafka.strimzi.io" => match kind {
            "KafkaRebalance" => strimzi_rebalance(obj),
            "Kafka" | "KafkaTopic" | "KafkaUser" | "KafkaConnect" | "KafkaConnector"
            | "KafkaMirrorMaker2" | "KafkaMirrorMaker" | "KafkaBridge" | "KafkaNodePool" => {
                strimzi(obj)
            }
            _ => return None,
        },
        "monitoring.coreos.com" => match kind {
            "Prometheus" | "Alertmanager" | "ThanosRuler" | "PrometheusAgent" => {
                prometheus_workload(obj)
            }
            "ServiceMonitor" | "PodMonitor" | "PrometheusRule" | "Probe" | "ScrapeConfig"
            | "AlertmanagerConfig" => prometheus_config(obj),
            _ => return None,
        },
        "postgresql.cnpg.io" => match kind {
            "Cluster" => cnpg_cluster(obj),
            "Backup" => cnpg_backup(obj),
            "ScheduledBackup" => cnpg_scheduled_backup(obj),
            "Pooler" => cnpg_pooler(obj),
            _ => return None,
        },
        "install.istio.io" if kind == "IstioOperator" => istio_operator(obj),
        "networking.istio.io"
        | "security.istio.io"
        | "telemetry.istio.io"
        | "extensions.istio.io" => istio_config(obj),
        g if g.ends_with(".knative.dev") => ready_condition(obj, &KNATIVE),
        "acid.zalan.do" if kind == "postgresql" => zalando_postgresql(obj),
        "gateway.networking.k8s.io" => match kind {
            "GatewayClass" => gateway_class(obj),
            "Gateway" => gateway(obj),
            "HTTPRoute" | "GRPCRoute" | "TLSRoute" | "TCPRoute" | "UDPRoute" => {
                gateway_attachments(obj, "parents", "parentRef")
            }
            "BackendTLSPolicy" => gateway_attachments(obj, "ancestors", "ancestorRef"),
            _ => return None,
        },
        "velero.io" => match kind {
            "Backup" | "Restore" => velero_operation(obj),
            "Schedule" => velero_schedule(obj),
            "BackupStorageLocation" | "VolumeSnapshotLocation" => velero_location(obj),
            _ => return None,
        },
        "tekton.dev" => match kind {
            "PipelineRun" | "TaskRun" | "CustomRun" => tekton_run(obj),
            _ => return None,
        },
        "kyverno.io" => match kind {
            "ClusterPolicy" | "Policy" => kyverno_policy(obj),
            _ => return None,
        },
        "gloo.solo.io" | "gateway.solo.io" | "enterprise.gloo.solo.io" => solo_kit(obj),
        "core.gardener.cloud" if kind == "Shoot" => gardener::shoot(obj),
        "apps.openshift.io" if kind == "DeploymentConfig" => openshift::deployment_config(obj),
        "route.openshift.io" if kind == "Route" => openshift::route(obj),
        "bitnami.com" if kind == "SealedSecret" => sealed_secrets::sealed_secret(obj),
        "snapshot.storage.k8s.io" => match kind {
            "VolumeSnapshot" | "VolumeSnapshotContent" => snapshots::snapshot(obj),
            _ => return None,
        },
        g if g.ends_with(".k8s.elastic.co") => match kind {
            "Elasticsearch" | "Kibana" | "ApmServer" | "EnterpriseSearch" | "Beat" | "Agent"
            | "Logstash" | "ElasticMapsServer" | "PackageRegistry" => eck::assess(obj),
            _ => return None,
        },
        "minio.min.io" if kind == "Tenant" => minio::tenant(obj),
        "cluster.x-k8s.io" | "addons.cluster.x-k8s.io" => return cluster_api::assess(obj),
        "work.karmada.io" => match kind {
            "ResourceBinding" | "ClusterResourceBinding" => karmada::binding(obj),
            _ => return None,
        },
        "grafana.integreatly.org" => match kind {
            "Grafana" => grafana::grafana(obj),
            k if grafana::GRAFANA_SYNCED_KINDS.contains(&k) => grafana::synchronized(obj),
            _ => return None,
        },
        "karpenter.sh" | "karpenter.k8s.aws" => return karpenter::assess(obj),
        "capabilities.3scale.net" => match kind {
            "Product"
            | "Backend"
            | "ActiveDoc"
            | "Application"
            | "ApplicationAuth"
            | "CustomPolicyDefinition"
            | "DeveloperAccount"
            | "DeveloperUser"
            | "OpenAPI"
            | "ProxyConfigPromote"
            | "Tenant" => threescale::capability(obj),
            _ => return None,
        },
        "apps.3scale.net" if kind == "APIManager" => threescale::api_manager(obj),
        "numaflow.numaproj.io" => match kind {
            "Pipeline" | "Vertex" | "MonoVertex" | "InterStepBufferService" => {
                numaflow::numaflow(obj)
            }
            _ => return None,
        },
        "numaplane.numaproj.io" => match kind {
            "PipelineRollout"
            | "MonoVertexRollout"
            | "ISBServiceRollout"
            | "NumaflowControllerRollout" => numaflow::numaplane(obj),
            _ => return None,
        },
        "policy.open-cluster-management.io" => match kind {
            "Policy" => ocm::policy(obj),
            "ConfigurationPolicy" | "CertificatePolicy" => ocm::configuration_policy(obj),
            "OperatorPolicy" => ocm::operator_policy(obj),
            _ => return None,
        },
        "apps.kruise.io" => match kind {
            "CloneSet" => kruise::cloneset(obj),
            "StatefulSet" => kruise::statefulset(obj),
            "DaemonSet" => kruise::daemonset(obj),
            "AdvancedCronJob" => kruise::advanced_cronjob(obj),
            "BroadcastJob" => kruise::broadcast_job(obj),
            _ => return None,
        },
        "rollouts.kruise.io" if kind == "Rollout" => kruise::kruise_rollout(obj),
        "kafka.banzaicloud.io" if kind == "KafkaCluster" => koperator::kafka_cluster(obj),
        "game.kruise.io" => match kind {
            "GameServer" => kruise::game_server(obj),
            "GameServerSet" => kruise::game_server_set(obj),
            _ => return None,
        },
        "rabbitmq.com" => match kind {
            "RabbitmqCluster" => rabbitmq::cluster(obj),
            "Queue" | "Exchange" | "Binding" | "User" | "Vhost" | "Policy" | "OperatorPolicy"
            | "Permission" | "TopicPermission" | "Federation" | "Shovel" | "SchemaReplication"
            | "SuperStream" => rabbitmq::topology(obj),
            _ => return None,
        },
        _ => return None,
    })
}

/// Gloo Edge's kinds (`gloo.solo.io`, `gateway.solo.io`: Upstream, Proxy, Settings,
/// VirtualService, RouteTable, Gateway, ...): solo-kit's `core.Status`, one per reporting
/// namespace in `status.statuses.<namespace>` (Gloo 1.8 and later) or a single `status` before,
/// with `state` `Pending` (0), `Accepted` (1), `Rejected` (2) or `Warning` (3), as text or as
/// the enum's number (solo-io/solo-kit `api/v1/status.proto`). Rejected is Degraded; Warning
/// is Degraded too: the resource was accepted with problems Gloo reports as not working as
/// written (a route to a missing upstream); Pending and no status yet are Progressing.
fn solo_kit(obj: &Live) -> Assessment {
    let Some(st) = status(obj) else {
        return waiting("Gloo");
    };
    let mut reports: Vec<(String, &Map<String, Value>)> = Vec::new();
    if let Some(per_ns) = st.get("statuses").and_then(Value::as_object) {
        for (ns, v) in per_ns {
            if let Some(m) = v.as_object() {
                reports.push((format!("reported by {ns}: "), m));
            }
        }
    } else if st.contains_key("state") {
        reports.push((String::new(), st));
    }
    if reports.is_empty() {
        return waiting("Gloo");
    }
    let state = |m: &Map<String, Value>| match m.get("state") {
        Some(Value::String(s)) => s.clone(),
        Some(v) => match number(v) {
            Some(0) => "Pending".into(),
            Some(1) => "Accepted".into(),
            Some(2) => "Rejected".into(),
            Some(3) => "Warning".into(),
            _ => v.to_string(),
        },
        None => String::new(),
    };
    let reason = |m: &Map<String, Value>| {
        m.get("reason")
            .and_then(Value::as_str)
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    };
    let mut worst = verdict(Health::Healthy, "accepted");
    for (who, m) in &reports {
        let s = state(m);
        let a = match s.as_str() {
            "Rejected" | "Warning" => verdict(Health::Degraded, format!("{who}{s}{}", reason(m))),
            "Pending" => verdict(Health::Progressing, format!("{who}Pending{}", reason(m))),
            "Accepted" => continue,
            other => verdict(Health::Unknown, format!("{who}unknown state {other}")),
        };
        if a.health > worst.health {
            worst = a;
        }
    }
    worst
}

// ---------------------------------------------------------------------------------------------
// Reading objects.

/// An assessment.
fn verdict(health: Health, message: impl Into<String>) -> Assessment {
    Assessment::new(health, message)
}

/// The value at a path of fields (`["status", "phase"]`).
fn value<'a>(obj: &'a Live, path: &[&str]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    rest.iter().try_fold(obj.get(first)?, |v, k| v.get(*k))
}

/// The string at a path.
fn str_at<'a>(obj: &'a Live, path: &[&str]) -> Option<&'a str> {
    value(obj, path).and_then(Value::as_str)
}

/// Whether the value at a path is the boolean `true`.
fn true_at(obj: &Live, path: &[&str]) -> bool {
    value(obj, path).and_then(Value::as_bool) == Some(true)
}

/// A number, or a string of one (Argo Rollouts wrote `observedGeneration` as a string).
fn number(v: &Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

/// The number at a path ([`number`]).
fn int_at(obj: &Live, path: &[&str]) -> Option<i64> {
    value(obj, path).and_then(number)
}

/// A `metadata.annotations` value.
fn annotation<'a>(obj: &'a Live, key: &str) -> Option<&'a str> {
    obj.metadata()
        .get("annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// `status` when it is a non-empty mapping.
fn status(obj: &Live) -> Option<&Map<String, Value>> {
    obj.get("status")
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
}

/// `status.conditions`.
fn conditions(obj: &Live) -> Vec<&Cond> {
    conditions_in(value(obj, &["status", "conditions"]))
}

/// The last condition of a type (a list should hold one of each; Strimzi and External Secrets
/// have appended).
fn find<'a>(conds: &[&'a Cond], type_: &str) -> Option<&'a Cond> {
    conds
        .iter()
        .rev()
        .copied()
        .find(|c| cstr(c, "type") == type_)
}

/// A condition's `status`: `True`, `False` or `Unknown`; a YAML boolean (hand-written objects,
/// test data) reads as its text, as the generic rules read it.
fn state(c: &Cond) -> &str {
    match c.get("status") {
        Some(Value::Bool(true)) => "True",
        Some(Value::Bool(false)) => "False",
        _ => cstr(c, "status"),
    }
}

/// Whether a condition of this type is there with this status.
fn has(conds: &[&Cond], type_: &str, status: &str) -> bool {
    find(conds, type_).is_some_and(|c| state(c) == status)
}

/// `type=status: reason: message`, for a message.
fn say(c: &Cond) -> String {
    let mut s = format!("{}={}", cstr(c, "type"), state(c));
    for k in ["reason", "message"] {
        let v = cstr(c, k).trim();
        if !v.is_empty() {
            s.push_str(": ");
            s.push_str(v);
        }
    }
    s
}

/// The verdict for an object whose controller has not written a status yet.
fn waiting(operator: &str) -> Assessment {
    verdict(
        Health::Progressing,
        format!("waiting for {operator} to report a status"),
    )
}

/// `Some((seen, generation))` when the generation at `path` (a number or a numeric string:
/// `status.observedGeneration`, or a controller's own field such as Karmada's
/// `status.schedulerObservedGeneration`) is behind `metadata.generation`; `None` when it caught
/// up or is absent.
fn generation_behind(obj: &Live, path: &[&str]) -> Option<(i64, i64)> {
    let seen = int_at(obj, path)?;
    let generation = obj.generation() as i64;
    (seen < generation).then_some((seen, generation))
}

/// `Progressing` when `status.observedGeneration` is behind `metadata.generation`
/// ([`generation_behind`]): the controller has not seen the latest spec.
fn generation_lag(obj: &Live) -> Option<Assessment> {
    let (seen, generation) = generation_behind(obj, &["status", "observedGeneration"])?;
    Some(verdict(
        Health::Progressing,
        format!("waiting for generation {generation} to be observed (observed {seen})"),
    ))
}

/// A `metadata.labels` value.
fn label<'a>(obj: &'a Live, key: &str) -> Option<&'a str> {
    obj.metadata()
        .get("labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

/// Whether a condition says it was written for an older generation than the object's.
fn stale(obj: &Live, c: &Cond) -> bool {
    c.get("observedGeneration")
        .and_then(number)
        .is_some_and(|g| g < obj.generation() as i64)
}

/// `Progressing` for a condition written for an older generation.
fn stale_condition(obj: &Live, c: &Cond) -> Assessment {
    verdict(
        Health::Progressing,
        format!(
            "waiting for generation {} to be observed ({} is of generation {})",
            obj.generation(),
            cstr(c, "type"),
            c.get("observedGeneration").and_then(number).unwrap_or(0)
        ),
    )
}

/// `field is value: message`, for a phase.
fn phase_message(field: &str, phase: &str, message: Option<&str>) -> String {
    match message.map(str::trim).filter(|m| !m.is_empty()) {
        Some(m) => format!("{field} is {phase}: {m}"),
        None => format!("{field} is {phase}"),
    }
}

// ---------------------------------------------------------------------------------------------
// One readiness condition, as many operators write it.

/// How a readiness condition that is `False` reads.
#[derive(Clone, Copy)]
enum OnFalse {
    /// Failed, unless the reason is one of these (the controller is still working).
    Degraded { except: &'static [&'static str] },
    /// Still working, unless the reason names a failure ([`terminal_reason`]) or is one of these.
    Progressing { unless: &'static [&'static str] },
}

impl OnFalse {
    /// The health of a `False` condition with this reason.
    fn health(self, reason: &str) -> Health {
        match self {
            OnFalse::Degraded { except } if except.contains(&reason) => Health::Progressing,
            OnFalse::Degraded { .. } => Health::Degraded,
            OnFalse::Progressing { unless } if unless.contains(&reason) => Health::Degraded,
            OnFalse::Progressing { .. } if terminal_reason(reason) => Health::Degraded,
            OnFalse::Progressing { .. } => Health::Progressing,
        }
    }
}

/// A rule that reads one readiness condition.
struct ReadyRule {
    /// Who writes the status, for messages.
    operator: &'static str,
    /// The condition type (`Ready`).
    condition: &'static str,
    /// What `False` means.
    on_false: OnFalse,
}

/// cert-manager's issuers: `Ready=False` means the issuer could not be set up (ACME account not
/// registered, CA secret missing).
const CERT_MANAGER_ISSUER: ReadyRule = ReadyRule {
    operator: "cert-manager",
    condition: "Ready",
    on_false: OnFalse::Degraded { except: &[] },
};

/// External Secrets writes `Ready=False` only on errors (`SecretSyncedError`, `SecretMissing`,
/// `InvalidStoreConfiguration`, `ValidationFailed`, `Errored`, ...).
const EXTERNAL_SECRETS: ReadyRule = ReadyRule {
    operator: "External Secrets",
    condition: "Ready",
    on_false: OnFalse::Degraded { except: &[] },
};

/// Knative's `apis.Condition`: `Ready=Unknown` while reconciling, `False` when it failed.
const KNATIVE: ReadyRule = ReadyRule {
    operator: "Knative",
    condition: "Ready",
    on_false: OnFalse::Degraded { except: &[] },
};

/// Reads one readiness condition: a `False` of the current generation that means failure is
/// `Degraded`; then the latest spec not observed yet is `Progressing`; `True` is `Healthy`;
/// `False` reads as the rule says; `Unknown` or none yet is `Progressing`, a status value none of
/// `True`, `False`, `Unknown` is `Unknown`; no status at all is `Progressing` (waiting for the
/// controller).
///
/// Follows the Kubernetes API conventions for conditions
/// (<https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md#typical-status-properties>)
/// and, for the rules built on it: cert-manager's `IssuerCondition`
/// (cert-manager `pkg/apis/certmanager/v1/types_issuer.go`), External Secrets'
/// `ExternalSecretReady`/`SecretStoreReady` (external-secrets `apis/externalsecrets/v1beta1`),
/// Knative's `apis.Condition` (knative/pkg `apis/condition_types.go`,
/// <https://github.com/knative/specs/blob/main/specs/serving/knative-api-specification-1.0.md#error-signalling>).
fn ready_condition(obj: &Live, rule: &ReadyRule) -> Assessment {
    if status(obj).is_none() {
        return waiting(rule.operator);
    }
    let conds = conditions(obj);
    let ready = find(&conds, rule.condition);
    if let Some(c) = ready
        && state(c) == "False"
        && !stale(obj, c)
        && rule.on_false.health(cstr(c, "reason")) == Health::Degraded
    {
        return verdict(Health::Degraded, say(c));
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    match ready {
        Some(c) if stale(obj, c) => stale_condition(obj, c),
        Some(c) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        Some(c) if state(c) == "False" => verdict(rule.on_false.health(cstr(c, "reason")), say(c)),
        Some(c) if state(c) != "Unknown" => verdict(
            Health::Unknown,
            format!("{} (a status none of True, False, Unknown)", say(c)),
        ),
        Some(c) => verdict(Health::Progressing, say(c)),
        None => verdict(
            Health::Progressing,
            format!(
                "waiting for {} to set the {} condition",
                rule.operator, rule.condition
            ),
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// cert-manager.

/// cert-manager's reasons for `Certificate` `Ready=False` that trigger a (re)issuance
/// (`internal/controller/certificates/policies/constants.go`): not failures by themselves.
const CERT_MANAGER_REISSUE: &[&str] = &[
    "DoesNotExist",
    "MissingData",
    "InvalidKeyPair",
    "InvalidManagedFields",
    "InvalidPrivateKey",
    "InvalidCertificate",
    "InvalidCertificateRequest",
    "SecretMismatch",
    "IncorrectIssuer",
    "IncorrectCertificate",
    "RequestChanged",
    "Renewing",
    "Expired",
    "ManuallyTriggered",
    "SecretTemplateMismatch",
    "SecretManagedMetadataMismatch",
    "AdditionalOutputFormatsMismatch",
    "ManagedFieldsParseError",
    "SecretOwnerReferenceMismatch",
];

/// cert-manager Certificate: `Issuing=True` is an issuance under way (`Progressing`);
/// `Issuing=False` with reason `Failed` is a failed issuance, retried with back-off
/// (`Degraded`, even while the old certificate is still valid); `Ready=True` is `Healthy`;
/// `Ready=False` is `Degraded` when the last issuance failed (`status.lastFailureTime`) or its
/// reason names a failure other than the ones that trigger a new issuance
/// ([`CERT_MANAGER_REISSUE`]; `ConfigError` of older versions is one), `Progressing` otherwise
/// (the trigger controller is about to issue); no status is `Progressing`.
///
/// Follows cert-manager `pkg/apis/certmanager/v1/types_certificate.go` (`CertificateConditionReady`,
/// `CertificateConditionIssuing`, `lastFailureTime`) and
/// <https://cert-manager.io/docs/usage/certificate/#inner-workings-diagram-for-developers>.
fn certificate(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("cert-manager");
    }
    let conds = conditions(obj);
    let issuing = find(&conds, "Issuing");
    let ready = find(&conds, "Ready");
    if let Some(c) = issuing
        && state(c) == "True"
    {
        return verdict(Health::Progressing, say(c));
    }
    if let Some(c) = issuing
        && state(c) == "False"
        && cstr(c, "reason") == "Failed"
    {
        return verdict(Health::Degraded, say(c));
    }
    let failed_at = str_at(obj, &["status", "lastFailureTime"]);
    match ready {
        Some(c) if state(c) == "False" => {
            let reason = cstr(c, "reason");
            if terminal_reason(reason) && !CERT_MANAGER_REISSUE.contains(&reason) {
                verdict(Health::Degraded, say(c))
            } else if let Some(at) = failed_at {
                verdict(
                    Health::Degraded,
                    format!("{} (last issuance failed at {at})", say(c)),
                )
            } else {
                verdict(Health::Progressing, say(c))
            }
        }
        Some(c) if stale(obj, c) => stale_condition(obj, c),
        Some(c) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        Some(c) => verdict(Health::Progressing, say(c)),
        None => verdict(
            Health::Progressing,
            "waiting for cert-manager to set the Ready condition",
        ),
    }
}

/// cert-manager CertificateRequest: `Denied=True` or `InvalidRequest=True` is `Degraded` (the
/// request will never be signed); `Ready` with reason `Failed` or `Denied` is `Degraded`,
/// `Issued` (`Ready=True`) is `Healthy`, `Pending` is `Progressing`; no `Ready` yet is
/// `Progressing` (waiting for approval or the issuer).
///
/// Follows cert-manager `pkg/apis/certmanager/v1/types_certificaterequest.go`
/// (`CertificateRequestReasonPending`/`Failed`/`Issued`/`Denied`, conditions `Ready`,
/// `InvalidRequest`, `Approved`, `Denied`).
fn certificate_request(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("cert-manager");
    }
    let conds = conditions(obj);
    for t in ["Denied", "InvalidRequest"] {
        if let Some(c) = find(&conds, t)
            && state(c) == "True"
        {
            return verdict(Health::Degraded, say(c));
        }
    }
    match find(&conds, "Ready") {
        Some(c) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        Some(c) if matches!(cstr(c, "reason"), "Failed" | "Denied") => {
            verdict(Health::Degraded, say(c))
        }
        Some(c) if state(c) == "False" && terminal_reason(cstr(c, "reason")) => {
            verdict(Health::Degraded, say(c))
        }
        Some(c) => verdict(Health::Progressing, say(c)),
        None if has(&conds, "Approved", "True") => verdict(
            Health::Progressing,
            "approved, waiting for the issuer to sign",
        ),
        None => verdict(
            Health::Progressing,
            "waiting for the request to be approved",
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Argo Rollouts and Argo Workflows.

/// Argo Rollouts Rollout, as the project's own `GetRolloutPhase` reads it: the latest spec not
/// observed yet (`status.observedGeneration`, a string in old versions: a non-numeric one is a
/// pre-v0.10 hash and counts as observed), an unpause not acted on yet, or a referenced
/// workload's generation not observed yet is `Progressing`; `status.abort` or an `InvalidSpec`
/// condition is `Degraded`; then the controller's `status.phase` (v1.0+): `Healthy`,
/// `Progressing`, `Degraded`, and `Paused` as `Suspended`; without a phase, the client-side
/// `CalculateRolloutPhase`: `RolloutAborted`/`ProgressDeadlineExceeded` is `Degraded`,
/// `spec.paused` or `status.pauseConditions` is `Suspended`, replicas or steps behind are
/// `Progressing`.
///
/// Follows argo-rollouts `utils/rollout/rolloututil.go` (`GetRolloutPhase`,
/// `CalculateRolloutPhase`) and `pkg/apis/rollouts/v1alpha1/types.go` (`RolloutPhase`).
fn rollout(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("Argo Rollouts");
    }
    let generation = obj.generation() as i64;
    if let Some(seen) = int_at(obj, &["status", "observedGeneration"])
        && seen < generation
    {
        return verdict(
            Health::Progressing,
            format!(
                "waiting for rollout spec update to be observed (generation {generation}, observed {seen})"
            ),
        );
    }
    let pause_conditions = value(obj, &["status", "pauseConditions"])
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if true_at(obj, &["status", "controllerPause"]) && pause_conditions.is_empty() {
        return verdict(Health::Progressing, "waiting for rollout to unpause");
    }
    if let Some(want) = annotation(obj, "rollout.argoproj.io/workload-generation")
        .and_then(|s| s.parse::<i64>().ok())
        && let Some(seen) = int_at(obj, &["status", "workloadObservedGeneration"])
        && seen != want
    {
        return verdict(
            Health::Progressing,
            "waiting for rollout spec update to be observed for the reference workload",
        );
    }
    let message = str_at(obj, &["status", "message"]);
    if true_at(obj, &["status", "abort"]) {
        return verdict(
            Health::Degraded,
            phase_message("status.abort", "true", message.or(Some("rollout aborted"))),
        );
    }
    let conds = conditions(obj);
    if let Some(c) = find(&conds, "InvalidSpec")
        && state(c) != "False"
    {
        return verdict(Health::Degraded, say(c));
    }
    if let Some(phase) = str_at(obj, &["status", "phase"]).filter(|p| !p.is_empty()) {
        let health = match phase {
            "Healthy" => Health::Healthy,
            "Progressing" => Health::Progressing,
            "Paused" => Health::Suspended,
            "Degraded" => Health::Degraded,
            _ => Health::Unknown,
        };
        return verdict(health, phase_message("status.phase", phase, message));
    }
    // Before v1.0: the phase, computed client-side.
    for c in &conds {
        if matches!(
            cstr(c, "reason"),
            "RolloutAborted" | "ProgressDeadlineExceeded"
        ) {
            return verdict(Health::Degraded, say(c));
        }
    }
    if true_at(obj, &["spec", "paused"]) {
        return verdict(Health::Suspended, "spec.paused is true: manually paused");
    }
    if let Some(p) = pause_conditions.first() {
        let reason = p.get("reason").and_then(Value::as_str).unwrap_or("paused");
        return verdict(
            Health::Suspended,
            format!("status.pauseConditions: {reason}"),
        );
    }
    let want = int_at(obj, &["spec", "replicas"]).unwrap_or(1);
    let replicas = int_at(obj, &["status", "replicas"]).unwrap_or(0);
    let updated = int_at(obj, &["status", "updatedReplicas"]).unwrap_or(0);
    let available = int_at(obj, &["status", "availableReplicas"]).unwrap_or(0);
    if updated < want {
        return verdict(
            Health::Progressing,
            format!("more replicas need to be updated ({updated} of {want})"),
        );
    }
    if available < updated {
        return verdict(
            Health::Progressing,
            format!("updated replicas are still becoming available ({available} of {updated})"),
        );
    }
    let current = str_at(obj, &["status", "currentPodHash"]).unwrap_or("");
    let stable = str_at(obj, &["status", "stableRS"])
        .or_else(|| str_at(obj, &["status", "canary", "stableRS"]))
        .unwrap_or("");
    if value(obj, &["spec", "strategy", "blueGreen"]).is_some() {
        let active = str_at(obj, &["status", "blueGreen", "activeSelector"]).unwrap_or("");
        if active.is_empty() || active != current {
            return verdict(Health::Progressing, "active service cutover pending");
        }
        // Before v0.8 a blue-green rollout had no `stableRS`: the active selector says it all.
        if !stable.is_empty() && stable != current {
            return verdict(
                Health::Progressing,
                "waiting for post-promotion analysis or verification to complete",
            );
        }
    } else if value(obj, &["spec", "strategy", "canary"]).is_some() {
        if value(obj, &["spec", "strategy", "canary", "trafficRouting"]).is_none()
            && replicas > updated
        {
            return verdict(Health::Progressing, "old replicas are pending termination");
        }
        if stable.is_empty() || stable != current {
            return verdict(Health::Progressing, "waiting for all steps to complete");
        }
    }
    verdict(Health::Healthy, "rollout is fully promoted")
}

/// Argo Rollouts AnalysisRun and Experiment: `status.phase` `Successful` is `Healthy`, `Failed`
/// and `Error` are `Degraded`, `Inconclusive` is `Unknown` (a person must judge it), `Pending`
/// and `Running` are `Progressing`; no phase yet is `Progressing`.
///
/// Follows argo-rollouts `pkg/apis/rollouts/v1alpha1/analysis_types.go` (`AnalysisPhase`) and
/// <https://argo-rollouts.readthedocs.io/en/stable/features/analysis/>.
fn analysis_run(obj: &Live) -> Assessment {
    let Some(phase) = str_at(obj, &["status", "phase"]).filter(|p| !p.is_empty()) else {
        return waiting("Argo Rollouts");
    };
    let health = match phase {
        "Successful" => Health::Healthy,
        "Failed" | "Error" => Health::Degraded,
        "Inconclusive" => Health::Unknown,
        "Pending" | "Running" => Health::Progressing,
        _ => Health::Unknown,
    };
    verdict(
        health,
        phase_message("status.phase", phase, str_at(obj, &["status", "message"])),
    )
}

/// Argo Workflows Workflow: `status.phase` `Succeeded` is `Healthy`, `Failed` and `Error` are
/// `Degraded`, `Pending` and `Running` are `Progressing` (`Suspended` while `spec.suspend` is
/// true); no phase yet is `Progressing`.
///
/// Follows argo-workflows `pkg/apis/workflow/v1alpha1/workflow_phase.go` (`WorkflowPhase`) and
/// <https://argo-workflows.readthedocs.io/en/latest/fields/#workflowstatus>.
fn workflow(obj: &Live) -> Assessment {
    let phase = str_at(obj, &["status", "phase"]).filter(|p| !p.is_empty());
    let message = str_at(obj, &["status", "message"]);
    match phase {
        Some(p @ ("Failed" | "Error")) => {
            verdict(Health::Degraded, phase_message("status.phase", p, message))
        }
        Some(p @ "Succeeded") => {
            verdict(Health::Healthy, phase_message("status.phase", p, message))
        }
        _ if true_at(obj, &["spec", "suspend"]) => {
            verdict(Health::Suspended, "spec.suspend is true")
        }
        Some(p @ ("Pending" | "Running")) => verdict(
            Health::Progressing,
            phase_message("status.phase", p, message),
        ),
        Some(p) => verdict(Health::Unknown, phase_message("status.phase", p, message)),
        None => waiting("Argo Workflows"),
    }
}

// ---------------------------------------------------------------------------------------------
// Crossplane.

/// Crossplane kinds that carry configuration only: no condition is ever written on them (a
/// `ProviderConfig` counts its users at most).
const CROSSPLANE_CONFIG_KINDS: &[&str] = &[
    "ProviderConfig",
    "ClusterProviderConfig",
    "ProviderConfigUsage",
    "ClusterProviderConfigUsage",
    "StoreConfig",
];

/// Crossplane managed resources (any kind of a group ending in `.crossplane.io` or
/// `.upbound.io`, but Crossplane's own `pkg`, `apiextensions`, `ops` and `protection` groups):
/// the `crossplane.io/paused` annotation or `Synced=False` with reason `ReconcilePaused` is
/// `Suspended`; `Synced=False` (`ReconcileError`) or `LastAsyncOperation=False` (an Upjet
/// provider's failed create/update/delete) is `Degraded`; the latest spec not observed is
/// `Progressing`; `Ready=True` (and `Synced` not `False`) is `Healthy`; `Ready=False` with a
/// failure reason is `Degraded`, `Ready=False`/`Unknown` (`Creating`, `Unavailable`,
/// `Deleting`) otherwise `Progressing`; no status is `Progressing`. Provider configs (no
/// conditions by design) are `Healthy`.
///
/// Follows crossplane-runtime `apis/common/v1/condition.go` (`TypeReady`, `TypeSynced`,
/// `ReasonReconcileError`, `ReasonReconcilePaused`, `ReasonAvailable`, `ReasonCreating`, ...),
/// <https://docs.crossplane.io/latest/managed-resources/managed-resources/#conditions> and
/// upjet `pkg/resource/conditions.go` (`TypeLastAsyncOperation`).
fn crossplane_managed(obj: &Live) -> Assessment {
    let mut conds = conditions(obj);
    if conds.is_empty() {
        // Crossplane v0.x nested them: `status.conditionedStatus.conditions`.
        conds = conditions_in(value(obj, &["status", "conditionedStatus", "conditions"]));
    }
    if conds.is_empty() && CROSSPLANE_CONFIG_KINDS.contains(&obj.kind()) {
        let users = int_at(obj, &["status", "users"]);
        return verdict(
            Health::Healthy,
            match users {
                Some(n) => format!("{} holds configuration only ({n} users)", obj.kind()),
                None => format!("{} holds configuration only", obj.kind()),
            },
        );
    }
    if annotation(obj, "crossplane.io/paused") == Some("true") {
        return verdict(
            Health::Suspended,
            "the crossplane.io/paused annotation is true",
        );
    }
    if status(obj).is_none() {
        return waiting("the Crossplane provider");
    }
    let synced = find(&conds, "Synced");
    if let Some(c) = synced
        && state(c) == "False"
    {
        let health = if cstr(c, "reason") == "ReconcilePaused" {
            Health::Suspended
        } else {
            Health::Degraded
        };
        return verdict(health, say(c));
    }
    if let Some(c) = find(&conds, "LastAsyncOperation")
        && state(c) == "False"
    {
        return verdict(Health::Degraded, say(c));
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    match find(&conds, "Ready") {
        Some(c) if state(c) == "True" => match synced {
            Some(s) if state(s) != "True" => verdict(Health::Progressing, say(s)),
            _ => verdict(Health::Healthy, say(c)),
        },
        Some(c) if state(c) == "False" && terminal_reason(cstr(c, "reason")) => {
            verdict(Health::Degraded, say(c))
        }
        Some(c) => verdict(Health::Progressing, say(c)),
        None => verdict(
            Health::Progressing,
            "waiting for the Crossplane provider to set the Ready condition",
        ),
    }
}

/// The conditions a Crossplane package or revision reports its health in: `Healthy` (v1),
/// `RevisionHealthy` and `RuntimeHealthy` (v2).
const CROSSPLANE_HEALTH: &[&str] = &["Healthy", "RevisionHealthy", "RuntimeHealthy"];

/// The worst health condition of a Crossplane package or revision: a failed signature
/// verification (`Verified=False`, `SignatureVerificationFailed`) or a health condition `False`
/// is `Degraded`, except while the health is only not known yet (reason
/// `AwaitingSignatureVerification`, or a package's `Healthy=False` whose message says the
/// revision's or runtime's health "is \"Unknown\"", as crossplane's `PackageHealth` words it):
/// `Progressing`, like `Unknown`.
fn crossplane_package_health(conds: &[&Cond]) -> Option<Assessment> {
    if let Some(c) = find(conds, "Verified")
        && state(c) == "False"
        && cstr(c, "reason") == "SignatureVerificationFailed"
    {
        return Some(verdict(Health::Degraded, say(c)));
    }
    let present: Vec<&Cond> = CROSSPLANE_HEALTH
        .iter()
        .filter_map(|t| find(conds, t))
        .collect();
    let not_known_yet = |c: &Cond| {
        cstr(c, "reason") == "AwaitingSignatureVerification"
            || cstr(c, "message").contains("health is \"Unknown\"")
    };
    if let Some(c) = present
        .iter()
        .find(|c| state(c) == "False" && !not_known_yet(c))
    {
        return Some(verdict(Health::Degraded, say(c)));
    }
    if let Some(c) = present.iter().find(|c| state(c) != "True") {
        return Some(verdict(Health::Progressing, say(c)));
    }
    None
}

/// Crossplane packages (`pkg.crossplane.io` Provider, Configuration, Function): a health
/// condition (`Healthy`; `RevisionHealthy`/`RuntimeHealthy` in v2) `False` is `Degraded`
/// (unless the health is not known yet: [`crossplane_package_health`]);
/// `Installed=False` is `Suspended` with reason `InactivePackageRevision` (a revision waiting
/// for manual activation), `Progressing` while `UnpackingPackage`, `Degraded` with a failure
/// reason; both `True` is `Healthy`; `Unknown` or missing is `Progressing`.
///
/// Follows crossplane `apis/pkg/v1/conditions.go` (`TypeInstalled`, `TypeHealthy`,
/// `ReasonUnpacking`, `ReasonInactive`, `ReasonActive`, `ReasonUnhealthy`) and
/// <https://docs.crossplane.io/latest/packages/providers/#conditions>.
fn crossplane_package(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("Crossplane");
    }
    let conds = conditions(obj);
    if let Some(c) = find(&conds, "Installed")
        && state(c) == "False"
    {
        let health = match cstr(c, "reason") {
            "InactivePackageRevision" => Health::Suspended,
            r if terminal_reason(r) => Health::Degraded,
            _ => Health::Progressing,
        };
        if health != Health::Progressing {
            return verdict(health, say(c));
        }
    }
    if let Some(a) = crossplane_package_health(&conds)
        && a.health == Health::Degraded
    {
        return a;
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    match find(&conds, "Installed") {
        Some(c) if state(c) != "True" => verdict(Health::Progressing, say(c)),
        None => verdict(
            Health::Progressing,
            "waiting for the package to be installed",
        ),
        Some(installed) => match crossplane_package_health(&conds) {
            Some(a) => a,
            None if CROSSPLANE_HEALTH.iter().any(|t| find(&conds, t).is_some()) => {
                let healthy: Vec<String> = CROSSPLANE_HEALTH
                    .iter()
                    .filter_map(|t| find(&conds, t))
                    .map(say)
                    .collect();
                verdict(
                    Health::Healthy,
                    format!("{}; {}", say(installed), healthy.join("; ")),
                )
            }
            None => verdict(
                Health::Progressing,
                format!(
                    "{}; waiting for the package to report its health",
                    say(installed)
                ),
            ),
        },
    }
}

/// Crossplane package revisions: an inactive revision (`spec.desiredState: Inactive`) is an old
/// one kept for rollback, `Healthy`; an active one reads its health conditions as
/// [`crossplane_package`] does.
///
/// Follows crossplane `apis/pkg/v1/revision_types.go` (`PackageRevisionDesiredState`) and
/// `apis/pkg/v1/conditions.go`.
fn crossplane_package_revision(obj: &Live) -> Assessment {
    if str_at(obj, &["spec", "desiredState"]) == Some("Inactive") {
        return verdict(
            Health::Healthy,
            "spec.desiredState is Inactive: a revision kept for rollback",
        );
    }
    if status(obj).is_none() {
        return waiting("Crossplane");
    }
    let conds = conditions(obj);
    if let Some(a) = crossplane_package_health(&conds) {
        return a;
    }
    match CROSSPLANE_HEALTH.iter().find_map(|t| find(&conds, t)) {
        Some(c) => verdict(Health::Healthy, say(c)),
        None => verdict(
            Health::Progressing,
            "waiting for Crossplane to report the revision's health",
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// External Secrets.

/// External Secrets ClusterExternalSecret: namespaces it failed to create its ExternalSecret in
/// (`status.failedNamespaces`), or a `NotReady`/`PartiallyReady` condition as the latest one
/// (older versions), is `Degraded`; `Ready=True` is `Healthy`, `Ready=False` `Degraded`; no
/// status is `Progressing`.
///
/// Follows external-secrets `apis/externalsecrets/v1beta1/clusterexternalsecret_types.go`
/// (`ClusterExternalSecretReady`, `ClusterExternalSecretPartiallyReady`,
/// `ClusterExternalSecretNotReady`, `FailedNamespaces`).
fn cluster_external_secret(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("External Secrets");
    }
    let failed: Vec<String> = value(obj, &["status", "failedNamespaces"])
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|f| match f {
                    Value::String(s) => s.clone(),
                    other => {
                        let ns = other
                            .get("namespace")
                            .and_then(Value::as_str)
                            .unwrap_or("?");
                        match other.get("reason").and_then(Value::as_str) {
                            Some(r) => format!("{ns} ({r})"),
                            None => ns.to_string(),
                        }
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if !failed.is_empty() {
        return verdict(
            Health::Degraded,
            format!("failed in namespaces: {}", failed.join(", ")),
        );
    }
    let conds = conditions(obj);
    if let Some(last) = conds.last()
        && matches!(cstr(last, "type"), "NotReady" | "PartiallyReady")
    {
        return verdict(Health::Degraded, say(last));
    }
    ready_condition(obj, &EXTERNAL_SECRETS)
}

// ---------------------------------------------------------------------------------------------
// Flux.

/// Reasons of a Flux `Ready=False` that are not a failure: the object waits.
const FLUX_WAITING: &[&str] = &["DependencyNotReady", "Progressing"];

/// Flux (every kind of a `*.toolkit.fluxcd.io` group), by kstatus as Flux documents it:
/// `spec.suspend` is `Suspended`; `Stalled=True` is `Degraded`, and so is an abnormal-true
/// condition of the current generation (`FetchFailed`, `BuildFailed`,
/// `StorageOperationFailed`: a type ending in `Failed`); `Ready=False` of the current
/// generation is `Degraded` (a reconciliation that ended in failure, or is being retried after
/// one: `Reconciling` with reason `ProgressingWithRetry`), unless a new reconciliation is under
/// way (`Reconciling=True` with reason `Progressing`) or the reason says it waits
/// (`DependencyNotReady`); the latest spec not observed, `Reconciling=True` or `Ready=Unknown`
/// is `Progressing`; `Ready=True` is `Healthy`. No status is `Progressing`, except for
/// notification-controller's Alert and Provider, which have had no status since `v1beta3`,
/// and a HelmRepository of type `oci`, which Flux does not reconcile: `Healthy`.
///
/// Follows fluxcd/pkg `apis/meta/conditions.go` (`ReadyCondition`, `StalledCondition`,
/// `ReconcilingCondition`, `ProgressingWithRetryReason`, `DependencyNotReadyReason`),
/// fluxcd/pkg `runtime/reconcile` (`ProgressiveStatus`, `ComputeReconcileResult`) and the
/// "Conditions" section of each kind's spec, e.g.
/// <https://fluxcd.io/flux/components/kustomize/kustomizations/#kustomization-status>.
fn flux(obj: &Live) -> Assessment {
    if true_at(obj, &["spec", "suspend"]) {
        return verdict(
            Health::Suspended,
            format!("spec.suspend is true: {} is suspended", obj.kind()),
        );
    }
    if conditions(obj).is_empty()
        && obj.kind() == "HelmRepository"
        && str_at(obj, &["spec", "type"]) == Some("oci")
    {
        return verdict(
            Health::Healthy,
            "HelmRepository of type oci holds configuration only (not reconciled by Flux)",
        );
    }
    if status(obj).is_none() {
        if obj.group().starts_with("notification.") && matches!(obj.kind(), "Alert" | "Provider") {
            return verdict(
                Health::Healthy,
                format!(
                    "{} holds configuration only (no status since v1beta3)",
                    obj.kind()
                ),
            );
        }
        return waiting("Flux");
    }
    let conds = conditions(obj);
    if let Some(c) = find(&conds, "Stalled")
        && state(c) == "True"
    {
        return verdict(Health::Degraded, say(c));
    }
    // Abnormal-true conditions: `FetchFailed`, `BuildFailed`, `StorageOperationFailed`, ...
    if let Some(c) = conds
        .iter()
        .find(|c| cstr(c, "type").ends_with("Failed") && state(c) == "True" && !stale(obj, c))
    {
        return verdict(Health::Degraded, say(c));
    }
    let reconciling = find(&conds, "Reconciling").filter(|c| state(c) == "True");
    let ready = find(&conds, "Ready");
    if let Some(c) = ready
        && state(c) == "False"
        && !stale(obj, c)
        && !FLUX_WAITING.contains(&cstr(c, "reason"))
        && reconciling.is_none_or(|r| cstr(r, "reason") == "ProgressingWithRetry")
    {
        return verdict(Health::Degraded, say(c));
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    if let Some(c) = ready
        && state(c) == "False"
        && FLUX_WAITING.contains(&cstr(c, "reason"))
    {
        return verdict(Health::Progressing, say(c));
    }
    if let Some(r) = reconciling {
        return verdict(Health::Progressing, say(r));
    }
    match ready {
        Some(c) if stale(obj, c) => stale_condition(obj, c),
        Some(c) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        Some(c) => verdict(Health::Progressing, say(c)),
        None => verdict(
            Health::Progressing,
            "waiting for Flux to set the Ready condition",
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// KEDA.

/// KEDA ScaledObject and ScaledJob: `Ready=False` is `Degraded` (the scaler or its target is
/// broken), and so is `Ready=Unknown` with an error reason (`PartialTriggerError`: some
/// triggers fail); `Fallback=True` is `Degraded` (a ScaledObject's scalers fail and it runs on its
/// fallback replicas); `Paused=True` is `Suspended` (the `autoscaling.keda.sh/paused`
/// annotations); `Ready=True` is `Healthy`; `Ready=Unknown` or none yet is `Progressing`.
///
/// Follows keda `apis/keda/v1alpha1/condition_types.go` (`ConditionReady`, `ConditionActive`,
/// `ConditionFallback`, `ConditionPaused`) and
/// <https://keda.sh/docs/latest/reference/scaledobject-spec/#fallback>.
fn keda_scaler(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("KEDA");
    }
    let conds = conditions(obj);
    let ready = find(&conds, "Ready");
    // `Ready=Unknown` with an error reason (`PartialTriggerError`): some triggers fail.
    if let Some(c) = ready
        && (state(c) == "False" || (state(c) == "Unknown" && terminal_reason(cstr(c, "reason"))))
    {
        return verdict(Health::Degraded, say(c));
    }
    if let Some(c) = find(&conds, "Fallback")
        && state(c) == "True"
    {
        return verdict(Health::Degraded, say(c));
    }
    if let Some(c) = find(&conds, "Paused")
        && state(c) == "True"
    {
        return verdict(Health::Suspended, say(c));
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    match ready {
        Some(c) if state(c) == "True" => {
            let active = find(&conds, "Active")
                .map(|a| format!("; {}", say(a)))
                .unwrap_or_default();
            verdict(Health::Healthy, format!("{}{active}", say(c)))
        }
        Some(c) => verdict(Health::Progressing, say(c)),
        None => verdict(
            Health::Progressing,
            "waiting for KEDA to set the Ready condition",
        ),
    }
}

/// KEDA TriggerAuthentication and ClusterTriggerAuthentication: configuration read by the
/// scalers; the status only lists who uses them. Always `Healthy`.
///
/// Follows keda `apis/keda/v1alpha1/triggerauthentication_types.go`
/// (`TriggerAuthenticationStatus`: `scaledobjects`, `scaledjobs`).
fn keda_authentication(obj: &Live) -> Assessment {
    let users: Vec<&str> = ["scaledobjects", "scaledjobs"]
        .iter()
        .filter_map(|k| str_at(obj, &["status", k]))
        .filter(|s| !s.is_empty())
        .collect();
    verdict(
        Health::Healthy,
        if users.is_empty() {
            format!("{} holds configuration only", obj.kind())
        } else {
            format!("{} used by {}", obj.kind(), users.join(", "))
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Strimzi.

/// Whether Strimzi was told not to reconcile the object.
fn strimzi_paused(obj: &Live, conds: &[&Cond]) -> Option<Assessment> {
    if let Some(c) = find(conds, "ReconciliationPaused")
        && state(c) == "True"
    {
        return Some(verdict(Health::Suspended, say(c)));
    }
    (annotation(obj, "strimzi.io/pause-reconciliation") == Some("true")).then(|| {
        verdict(
            Health::Suspended,
            "the strimzi.io/pause-reconciliation annotation is true",
        )
    })
}

/// Kafka Connect connector and task states (a KafkaConnector's `status.connectorStatus`, a
/// KafkaMirrorMaker2's `status.connectors[]`) that say it failed or was stopped.
fn strimzi_connectors(obj: &Live) -> Option<Assessment> {
    let mut statuses: Vec<&Value> = Vec::new();
    if let Some(s) = value(obj, &["status", "connectorStatus"]) {
        statuses.push(s);
    }
    if let Some(list) = value(obj, &["status", "connectors"]).and_then(Value::as_array) {
        statuses.extend(list);
    }
    for s in statuses {
        let name = s.get("name").and_then(Value::as_str).unwrap_or("connector");
        if s.pointer("/connector/state").and_then(Value::as_str) == Some("FAILED") {
            return Some(verdict(
                Health::Degraded,
                format!("connector {name} is FAILED"),
            ));
        }
        for t in s
            .get("tasks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if t.get("state").and_then(Value::as_str) == Some("FAILED") {
                let id = t.get("id").map(Value::to_string).unwrap_or_default();
                return Some(verdict(
                    Health::Degraded,
                    format!("connector {name}: task {id} is FAILED"),
                ));
            }
        }
    }
    None
}

/// Strimzi's Kafka, KafkaTopic, KafkaUser, KafkaConnect, KafkaConnector, KafkaMirrorMaker2,
/// KafkaBridge and KafkaNodePool: reconciliation paused (the `strimzi.io/pause-reconciliation`
/// annotation, a `ReconciliationPaused` condition) or a connector asked to stop
/// (`spec.state: paused|stopped`, `spec.pause`) is `Suspended`; `NotReady=True` is `Degraded`
/// (Strimzi names the exception in the reason), but while the reason is `Creating`
/// (`Progressing`); a failed connector or task is `Degraded`; the latest spec not observed is
/// `Progressing`; `Ready=False` with a reason (the Topic Operator's `KafkaError`,
/// `NotSupported`, ...) is `Degraded`; `Ready=True` is `Healthy` (`Warning` conditions, such as deprecated fields,
/// do not degrade: they are named in the message); a KafkaNodePool, which gets no `Ready`,
/// is `Healthy` once its generation is observed.
///
/// Follows strimzi-kafka-operator `operator-common/.../StatusUtils.java`
/// (`buildConditionFromException`: `NotReady`, reason the exception's class name) and
/// <https://strimzi.io/docs/operators/latest/configuring.html#type-Condition-reference>.
fn strimzi(obj: &Live) -> Assessment {
    let conds = conditions(obj);
    if let Some(a) = strimzi_paused(obj, &conds) {
        return a;
    }
    if obj.kind() == "KafkaConnector" {
        if let Some(s) =
            str_at(obj, &["spec", "state"]).filter(|s| matches!(*s, "paused" | "stopped"))
        {
            return verdict(Health::Suspended, format!("spec.state is {s}"));
        }
        if true_at(obj, &["spec", "pause"]) {
            return verdict(Health::Suspended, "spec.pause is true");
        }
    }
    if status(obj).is_none() {
        return waiting("Strimzi");
    }
    if let Some(c) = find(&conds, "NotReady")
        && state(c) == "True"
    {
        let health = if cstr(c, "reason") == "Creating" {
            Health::Progressing
        } else {
            Health::Degraded
        };
        return verdict(health, say(c));
    }
    if let Some(a) = strimzi_connectors(obj) {
        return a;
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    let warnings: Vec<String> = conds
        .iter()
        .filter(|c| cstr(c, "type") == "Warning" && state(c) == "True")
        .map(|c| say(c))
        .collect();
    let with_warnings = |m: String| {
        if warnings.is_empty() {
            m
        } else {
            format!("{m}; {}", warnings.join("; "))
        }
    };
    match find(&conds, "Ready") {
        Some(c) if state(c) == "True" => verdict(Health::Healthy, with_warnings(say(c))),
        // The Topic Operator reports its errors so (`KafkaError`, `NotSupported`, ...).
        Some(c) if state(c) == "False" && !cstr(c, "reason").is_empty() => {
            verdict(Health::Degraded, say(c))
        }
        Some(c) => verdict(Health::Progressing, say(c)),
        None if obj.kind() == "KafkaNodePool"
            && int_at(obj, &["status", "observedGeneration"]).is_some() =>
        {
            let ids = value(obj, &["status", "nodeIds"])
                .map(Value::to_string)
                .unwrap_or_else(|| "[]".into());
            verdict(Health::Healthy, with_warnings(format!("node IDs {ids}")))
        }
        None => verdict(
            Health::Progressing,
            "waiting for Strimzi to set the Ready condition",
        ),
    }
}

/// Strimzi KafkaRebalance, whose state is the type of its one `True` condition: `New`,
/// `PendingProposal` and `Rebalancing` are `Progressing`; `ProposalReady` is `Suspended` (the
/// proposal waits for the `strimzi.io/rebalance: approve` annotation, unless
/// `strimzi.io/rebalance-auto-approval` is set: `Progressing`); `Ready` is `Healthy`;
/// `NotReady` is `Degraded`; `Stopped` and `ReconciliationPaused` are `Suspended`.
///
/// Follows strimzi-kafka-operator `api/.../KafkaRebalanceState.java` and
/// <https://strimzi.io/docs/operators/latest/deploying.html#con-optimization-proposals-str>.
fn strimzi_rebalance(obj: &Live) -> Assessment {
    let conds = conditions(obj);
    if let Some(a) = strimzi_paused(obj, &conds) {
        return a;
    }
    if status(obj).is_none() {
        return waiting("Strimzi");
    }
    const STATES: &[&str] = &[
        "NotReady",
        "Stopped",
        "ProposalReady",
        "Rebalancing",
        "PendingProposal",
        "New",
        "Ready",
    ];
    let Some(c) = STATES
        .iter()
        .find_map(|s| find(&conds, s).filter(|c| state(c) == "True"))
    else {
        return verdict(
            Health::Progressing,
            "waiting for Strimzi to report the rebalance state",
        );
    };
    let auto = annotation(obj, "strimzi.io/rebalance-auto-approval") == Some("true");
    let health = match cstr(c, "type") {
        "NotReady" => Health::Degraded,
        "Stopped" => Health::Suspended,
        "ProposalReady" if auto => Health::Progressing,
        "ProposalReady" => {
            return verdict(
                Health::Suspended,
                format!(
                    "{}: waiting for the strimzi.io/rebalance=approve annotation",
                    say(c)
                ),
            );
        }
        "Ready" => Health::Healthy,
        _ => Health::Progressing,
    };
    verdict(health, say(c))
}

// ---------------------------------------------------------------------------------------------
// Prometheus Operator.

/// Prometheus Operator workloads (Prometheus, Alertmanager, ThanosRuler, PrometheusAgent):
/// `spec.paused` is `Suspended`; `Reconciled=False` is `Degraded` (the operator could not
/// reconcile the spec); `Available=False` (no pod ready) and `Available=Degraded` (some pods
/// not ready) are `Degraded`, but `Progressing` while a rollout replaces pods
/// (`status.updatedReplicas` behind `status.replicas`); a condition of an older generation is
/// `Progressing`; `Available=True` and `Reconciled=True` is `Healthy`; no status is
/// `Progressing`. Statuses without conditions (operator before v0.69) read the replica counters.
///
/// Follows prometheus-operator `pkg/apis/monitoring/v1/types.go` (`Available`: "True: all pods
/// are running and ready ... Degraded: some pods aren't ready, the service is partially
/// available ... False: no pods are running"; `Reconciled`) and
/// `Documentation/api-reference/api.md#monitoring.coreos.com/v1.Condition`.
fn prometheus_workload(obj: &Live) -> Assessment {
    if true_at(obj, &["spec", "paused"]) {
        return verdict(
            Health::Suspended,
            "spec.paused is true: the operator does not reconcile it",
        );
    }
    if status(obj).is_none() {
        return waiting("the Prometheus Operator");
    }
    let conds = conditions(obj);
    let replicas = int_at(obj, &["status", "replicas"]).unwrap_or(0);
    let updated = int_at(obj, &["status", "updatedReplicas"]).unwrap_or(replicas);
    let rolling = updated < replicas;
    if let Some(c) = find(&conds, "Reconciled")
        && state(c) == "False"
        && !stale(obj, c)
    {
        return verdict(Health::Degraded, say(c));
    }
    let available = find(&conds, "Available");
    if let Some(c) = available
        && matches!(state(c), "False" | "Degraded")
        && !stale(obj, c)
    {
        if rolling {
            return verdict(
                Health::Progressing,
                format!("{} ({updated} of {replicas} replicas updated)", say(c)),
            );
        }
        return verdict(Health::Degraded, say(c));
    }
    if conds.is_empty() {
        let unavailable = int_at(obj, &["status", "unavailableReplicas"]).unwrap_or(0);
        if rolling || unavailable > 0 {
            return verdict(
                Health::Progressing,
                format!("{updated} of {replicas} replicas updated, {unavailable} unavailable"),
            );
        }
        return verdict(Health::Healthy, format!("{replicas} replicas available"));
    }
    if let Some(c) = conds.iter().find(|c| stale(obj, c)) {
        return stale_condition(obj, c);
    }
    let reconciled = find(&conds, "Reconciled");
    match (available, reconciled) {
        (Some(a), Some(r)) if state(a) == "True" && state(r) == "True" => {
            verdict(Health::Healthy, format!("{}; {}", say(a), say(r)))
        }
        (Some(a), None) if state(a) == "True" => verdict(Health::Healthy, say(a)),
        (Some(a), _) if state(a) != "True" => verdict(Health::Progressing, say(a)),
        (_, Some(r)) if state(r) != "True" => verdict(Health::Progressing, say(r)),
        _ => verdict(
            Health::Progressing,
            "waiting for the Prometheus Operator to set the Available condition",
        ),
    }
}

/// Prometheus Operator configuration kinds (ServiceMonitor, PodMonitor, PrometheusRule, Probe,
/// ScrapeConfig, AlertmanagerConfig): configuration read by the workloads that select it,
/// `Healthy`, unless a workload rejected it: an `Accepted=False` condition in
/// `status.bindings[]` (operator v0.79+) is `Degraded`.
///
/// Follows prometheus-operator `pkg/apis/monitoring/v1/types.go` (`ConfigResourceStatus`,
/// `WorkloadBinding`, `Accepted`: "False: the controller rejected the configuration due to an
/// error").
fn prometheus_config(obj: &Live) -> Assessment {
    let bindings = value(obj, &["status", "bindings"])
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for b in bindings {
        for c in conditions_in(b.get("conditions")) {
            if cstr(c, "type") == "Accepted" && state(c) == "False" {
                let name = b.get("name").and_then(Value::as_str).unwrap_or("?");
                let resource = b
                    .get("resource")
                    .and_then(Value::as_str)
                    .unwrap_or("workload");
                return verdict(
                    Health::Degraded,
                    format!("rejected by {resource} {name}: {}", say(c)),
                );
            }
        }
    }
    if bindings.is_empty() {
        verdict(
            Health::Healthy,
            format!("{} holds configuration only", obj.kind()),
        )
    } else {
        verdict(
            Health::Healthy,
            format!("accepted by {} workload(s)", bindings.len()),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// CloudNativePG.

/// CloudNativePG Cluster phases that need a person: the operator cannot go on by itself.
const CNPG_FAILED: &[&str] = &[
    "Failing over",
    "Cluster is unrecoverable and needs manual intervention",
    "Cluster cannot proceed to reconciliation due to an unknown plugin being required",
    "Cluster cannot proceed to reconciliation due to an error while interacting with plugins",
    "Cluster has incomplete or invalid image catalog",
    "Cluster cannot execute instance online upgrade due to missing architecture binary",
    "Unable to create required cluster objects",
];

/// CloudNativePG Cluster: hibernation (the `cnpg.io/hibernation: "on"` annotation, a True
/// `cnpg.io/hibernation` condition) or a disabled reconciliation loop
/// (`cnpg.io/reconciliationLoop: disabled`) is `Suspended`; `status.phase`
/// `Cluster in healthy state` is `Healthy`; a failing or unrecoverable phase (`Failing over`,
/// `Cluster is unrecoverable ...`, plugin, image catalog and object-creation errors) is
/// `Degraded`; `Waiting for user action` (a supervised primary update waiting for a switchover)
/// is `Suspended`; every other phase (setting up, creating a replica, upgrading, switchover,
/// applying configuration, ...) is `Progressing`.
///
/// Follows cloudnative-pg `api/v1/cluster_types.go` (the `Phase*` constants) and
/// <https://cloudnative-pg.io/documentation/current/declarative_hibernation/>.
fn cnpg_cluster(obj: &Live) -> Assessment {
    if annotation(obj, "cnpg.io/hibernation") == Some("on") {
        return verdict(
            Health::Suspended,
            "hibernated: the cnpg.io/hibernation annotation is on",
        );
    }
    if annotation(obj, "cnpg.io/reconciliationLoop") == Some("disabled") {
        return verdict(
            Health::Suspended,
            "the cnpg.io/reconciliationLoop annotation is disabled",
        );
    }
    if status(obj).is_none() {
        return waiting("CloudNativePG");
    }
    let conds = conditions(obj);
    if let Some(c) = find(&conds, "cnpg.io/hibernation")
        && state(c) == "True"
    {
        return verdict(Health::Suspended, say(c));
    }
    let reason = str_at(obj, &["status", "phaseReason"]);
    let Some(phase) = str_at(obj, &["status", "phase"]).filter(|p| !p.is_empty()) else {
        return verdict(
            Health::Progressing,
            "waiting for CloudNativePG to report a phase",
        );
    };
    let message = phase_message("status.phase", phase, reason);
    if CNPG_FAILED.contains(&phase) || word(phase) == Some(Word::Failed) {
        return verdict(Health::Degraded, message);
    }
    if phase == "Waiting for user action" {
        return verdict(Health::Suspended, message);
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    if phase == "Cluster in healthy state" {
        return verdict(Health::Healthy, message);
    }
    verdict(Health::Progressing, message)
}

/// CloudNativePG Backup: `status.phase` `completed` is `Healthy`; `failed` and
/// `walArchivingFailing` are `Degraded`; `pending`, `started`, `running` and `finalizing`
/// are `Progressing`; no phase yet is `Progressing`.
///
/// Follows cloudnative-pg `api/v1/backup_types.go` (`BackupPhase*`).
fn cnpg_backup(obj: &Live) -> Assessment {
    let Some(phase) = str_at(obj, &["status", "phase"]).filter(|p| !p.is_empty()) else {
        return waiting("CloudNativePG");
    };
    let error = str_at(obj, &["status", "error"]);
    let health = match phase {
        "completed" => Health::Healthy,
        "failed" | "walArchivingFailing" => Health::Degraded,
        "pending" | "started" | "running" | "finalizing" => Health::Progressing,
        p => match word(p) {
            Some(Word::Failed) => Health::Degraded,
            Some(Word::Fine) => Health::Healthy,
            _ => Health::Progressing,
        },
    };
    verdict(health, phase_message("status.phase", phase, error))
}

/// CloudNativePG ScheduledBackup: `spec.suspend` is `Suspended`; once the operator has checked
/// the schedule (`status.lastCheckTime`) it is `Healthy` (each Backup it creates has its own
/// health); before that `Progressing`.
///
/// Follows cloudnative-pg `api/v1/scheduledbackup_types.go` (`ScheduledBackupStatus`).
fn cnpg_scheduled_backup(obj: &Live) -> Assessment {
    if true_at(obj, &["spec", "suspend"]) {
        return verdict(Health::Suspended, "spec.suspend is true");
    }
    match str_at(obj, &["status", "lastCheckTime"]) {
        Some(_) => {
            let next = str_at(obj, &["status", "nextScheduleTime"])
                .map(|t| format!(", next backup at {t}"))
                .unwrap_or_default();
            verdict(Health::Healthy, format!("schedule active{next}"))
        }
        None => waiting("CloudNativePG"),
    }
}

/// CloudNativePG Pooler: `spec.pgbouncer.paused` is `Suspended`; `status.instances` below
/// `spec.instances` (default 1) is `Progressing`; caught up is `Healthy`; no status is
/// `Progressing`.
///
/// Follows cloudnative-pg `api/v1/pooler_types.go` (`PoolerSpec.Instances`,
/// `PgBouncerSpec.Paused`, `PoolerStatus.Instances`).
fn cnpg_pooler(obj: &Live) -> Assessment {
    if true_at(obj, &["spec", "pgbouncer", "paused"]) {
        return verdict(
            Health::Suspended,
            "spec.pgbouncer.paused is true: connections are paused",
        );
    }
    if status(obj).is_none() {
        return waiting("CloudNativePG");
    }
    let want = int_at(obj, &["spec", "instances"]).unwrap_or(1);
    let have = int_at(obj, &["status", "instances"]).unwrap_or(0);
    if have < want {
        return verdict(
            Health::Progressing,
            format!("{have} of {want} pooler instances"),
        );
    }
    verdict(
        Health::Healthy,
        format!("{have} of {want} pooler instances"),
    )
}

// ---------------------------------------------------------------------------------------------
// Istio.

/// Istio IstioOperator: `status.status` (a name or its number) `HEALTHY` is `Healthy`;
/// `UPDATING` and `RECONCILING` are `Progressing`; `ERROR` and `ACTION_REQUIRED` are
/// `Degraded` (the components in error are named); `NONE` is `Unknown`; no status is
/// `Progressing`.
///
/// Follows istio `operator/pkg/apis/istio/v1alpha1/values_types.proto` and
/// `InstallStatus.Status` (`NONE = 0; UPDATING = 1; RECONCILING = 2; HEALTHY = 3; ERROR = 4;
/// ACTION_REQUIRED = 5`).
fn istio_operator(obj: &Live) -> Assessment {
    let Some(s) = value(obj, &["status", "status"]) else {
        return waiting("the Istio operator");
    };
    let name = match s.as_i64() {
        Some(0) => "NONE",
        Some(1) => "UPDATING",
        Some(2) => "RECONCILING",
        Some(3) => "HEALTHY",
        Some(4) => "ERROR",
        Some(5) => "ACTION_REQUIRED",
        _ => s.as_str().unwrap_or(""),
    };
    let mut failing: Vec<String> = value(obj, &["status", "componentStatus"])
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(_, c)| {
                    matches!(
                        c.get("status").and_then(Value::as_str),
                        Some("ERROR" | "ACTION_REQUIRED")
                    ) || c
                        .get("status")
                        .and_then(Value::as_i64)
                        .is_some_and(|n| n >= 4)
                })
                .map(|(k, c)| match c.get("error").and_then(Value::as_str) {
                    Some(e) => format!("{k}: {e}"),
                    None => k.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    failing.sort();
    let message = if failing.is_empty() {
        format!("status.status is {name}")
    } else {
        format!("status.status is {name}; failing: {}", failing.join(", "))
    };
    let health = match name {
        "HEALTHY" => Health::Healthy,
        "UPDATING" | "RECONCILING" => Health::Progressing,
        "ERROR" | "ACTION_REQUIRED" => Health::Degraded,
        _ => Health::Unknown,
    };
    verdict(health, message)
}

/// Istio configuration (every kind of `networking.istio.io`, `security.istio.io`,
/// `telemetry.istio.io` and `extensions.istio.io`: VirtualService, DestinationRule, Gateway,
/// ServiceEntry, PeerAuthentication, AuthorizationPolicy, ...): configuration pushed to the
/// proxies, `Healthy`, unless istiod's status analysis (`status.validationMessages`) has an
/// `ERROR` level entry: `Degraded`. Warnings are named in the message.
///
/// Follows istio/api `meta/v1alpha1/status.proto` (`IstioStatus.validationMessages`),
/// `analysis/v1alpha1/message.proto` (`AnalysisMessageBase.Level`: `ERROR = 3`,
/// `WARNING = 8`, `INFO = 12`) and <https://istio.io/latest/docs/reference/config/config-status/>.
fn istio_config(obj: &Live) -> Assessment {
    let messages = value(obj, &["status", "validationMessages"])
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let describe = |m: &Value| {
        let code = m
            .pointer("/type/code")
            .and_then(Value::as_str)
            .unwrap_or("");
        let name = m
            .pointer("/type/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let text = m.get("message").and_then(Value::as_str).unwrap_or("");
        let mut s = [code, name]
            .iter()
            .filter(|x| !x.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        if !text.is_empty() {
            s = format!("{s}: {text}");
        }
        s
    };
    let level = |m: &Value| match m.get("level") {
        Some(Value::Number(n)) => match n.as_i64() {
            Some(3) => "ERROR".to_string(),
            Some(8) => "WARNING".to_string(),
            _ => "INFO".to_string(),
        },
        Some(Value::String(s)) => s.to_ascii_uppercase(),
        _ => String::new(),
    };
    let errors: Vec<String> = messages
        .iter()
        .filter(|m| level(m) == "ERROR")
        .map(describe)
        .collect();
    if !errors.is_empty() {
        return verdict(
            Health::Degraded,
            format!("validation error: {}", errors.join("; ")),
        );
    }
    let warnings: Vec<String> = messages
        .iter()
        .filter(|m| level(m) == "WARNING")
        .map(describe)
        .collect();
    if warnings.is_empty() {
        verdict(
            Health::Healthy,
            format!("{} holds configuration only", obj.kind()),
        )
    } else {
        verdict(
            Health::Healthy,
            format!("validation warning: {}", warnings.join("; ")),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Zalando Postgres Operator.

/// Zalando Postgres Operator `postgresql`: `status.PostgresClusterStatus` `Running` is
/// `Healthy`; `Creating` and `Updating` are `Progressing`; `CreateFailed`, `UpdateFailed`,
/// `SyncFailed`, `DeleteFailed` and `Invalid` are `Degraded`; no status is `Progressing`.
///
/// Follows zalando/postgres-operator `pkg/apis/acid.zalan.do/v1/const.go`
/// (`ClusterStatusCreating`, `ClusterStatusUpdating`, `ClusterStatusUpdateFailed`,
/// `ClusterStatusSyncFailed`, `ClusterStatusAddFailed`, `ClusterStatusRunning`,
/// `ClusterStatusInvalid`).
fn zalando_postgresql(obj: &Live) -> Assessment {
    let Some(s) = str_at(obj, &["status", "PostgresClusterStatus"]).filter(|s| !s.is_empty())
    else {
        return waiting("the Postgres Operator");
    };
    let health = match s {
        "Running" => Health::Healthy,
        "Creating" | "Updating" | "Pending" => Health::Progressing,
        "Invalid" => Health::Degraded,
        s if s.ends_with("Failed") => Health::Degraded,
        s => match word(s) {
            Some(Word::Failed) => Health::Degraded,
            Some(Word::Unknown) | None => Health::Unknown,
            _ => Health::Progressing,
        },
    };
    verdict(health, format!("status.PostgresClusterStatus is {s}"))
}

// ---------------------------------------------------------------------------------------------
// Gateway API.

/// The verdict of a Gateway API condition list (a Gateway's, a listener's, a route parent's):
/// `Accepted=False` or `ResolvedRefs=False` with a reason other than `Pending`, `Conflicted=True`,
/// or `Programmed=False` with a failure reason (`Invalid`, `NoResources`, `AddressNotAssigned`,
/// `AddressNotUsable`, ...) is `Degraded`; `Accepted`/`Programmed` not `True` yet is
/// `Progressing`; `None` when all is well.
fn gateway_conditions(conds: &[&Cond], prefix: &str) -> Option<Assessment> {
    let say = |c: &Cond| format!("{prefix}{}", say(c));
    for c in conds {
        let (t, s, r) = (cstr(c, "type"), state(c), cstr(c, "reason"));
        let failed = match t {
            "Accepted" | "ResolvedRefs" => s == "False" && r != "Pending",
            "Programmed" => {
                s == "False"
                    && (matches!(
                        r,
                        "Invalid" | "NoResources" | "AddressNotAssigned" | "AddressNotUsable"
                    ) || terminal_reason(r))
            }
            "Conflicted" => s == "True",
            _ => false,
        };
        if failed {
            return Some(verdict(Health::Degraded, say(c)));
        }
    }
    for c in conds {
        if matches!(cstr(c, "type"), "Accepted" | "Programmed") && state(c) != "True" {
            return Some(verdict(Health::Progressing, say(c)));
        }
    }
    None
}

/// Gateway API GatewayClass: `Accepted=True` is `Healthy`; `Accepted=False` (`InvalidParameters`,
/// `Unsupported`, `UnsupportedVersion`) or `SupportedVersion=False` is `Degraded`; `Unknown`
/// (`Pending`: no controller has claimed it) is `Progressing`.
///
/// Follows gateway-api `apis/v1/gatewayclass_types.go` (`GatewayClassConditionStatusAccepted`,
/// `GatewayClassReasonPending`, `GatewayClassConditionStatusSupportedVersion`).
fn gateway_class(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("a Gateway API controller");
    }
    let conds = conditions(obj);
    if let Some(c) = find(&conds, "SupportedVersion")
        && state(c) == "False"
    {
        return verdict(Health::Degraded, say(c));
    }
    match find(&conds, "Accepted") {
        Some(c) if stale(obj, c) => stale_condition(obj, c),
        Some(c) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        Some(c) if state(c) == "False" && cstr(c, "reason") != "Pending" => {
            verdict(Health::Degraded, say(c))
        }
        Some(c) => verdict(Health::Progressing, say(c)),
        None => waiting("a Gateway API controller"),
    }
}

/// Gateway API Gateway: read from `status.conditions` and every `status.listeners[].conditions`
/// ([`gateway_conditions`]): a condition of an older generation is `Progressing`; `Accepted`
/// and `Programmed` both `True`, and every listener well, is `Healthy`.
///
/// Follows gateway-api `apis/v1/gateway_types.go` (`GatewayConditionAccepted`,
/// `GatewayConditionProgrammed`, `ListenerConditionConflicted`, `ListenerConditionResolvedRefs`,
/// `GatewayReasonPending`).
fn gateway(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("a Gateway API controller");
    }
    let conds = conditions(obj);
    if let Some(a) = gateway_conditions(&conds, "")
        && a.health == Health::Degraded
    {
        return a;
    }
    let listeners = value(obj, &["status", "listeners"])
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for l in listeners {
        let name = l.get("name").and_then(Value::as_str).unwrap_or("?");
        let lc = conditions_in(l.get("conditions"));
        if let Some(a) = gateway_conditions(&lc, &format!("listener {name}: "))
            && a.health == Health::Degraded
        {
            return a;
        }
    }
    if let Some(c) = conds.iter().find(|c| stale(obj, c)) {
        return stale_condition(obj, c);
    }
    if let Some(a) = gateway_conditions(&conds, "") {
        return a;
    }
    for l in listeners {
        let name = l.get("name").and_then(Value::as_str).unwrap_or("?");
        let lc = conditions_in(l.get("conditions"));
        if let Some(a) = gateway_conditions(&lc, &format!("listener {name}: ")) {
            return a;
        }
    }
    match (find(&conds, "Accepted"), find(&conds, "Programmed")) {
        (Some(a), Some(p)) => verdict(Health::Healthy, format!("{}; {}", say(a), say(p))),
        (Some(c), None) | (None, Some(c)) => verdict(Health::Healthy, say(c)),
        (None, None) => verdict(
            Health::Progressing,
            "waiting for a Gateway API controller to accept the Gateway",
        ),
    }
}

/// Gateway API routes (HTTPRoute, GRPCRoute, TLSRoute, TCPRoute, UDPRoute; `status.parents`)
/// and policies (BackendTLSPolicy; `status.ancestors`): each parent's conditions read as
/// [`gateway_conditions`] (a parent's `Accepted=False` such as `NotAllowedByListeners`, or
/// `ResolvedRefs=False` such as `BackendNotFound`, is `Degraded`); an entry of an older
/// generation is `Progressing` (its controller has not caught up), unless the same controller
/// (`controllerName`) wrote a current entry too: then it is left over from an earlier spec and
/// skipped; no parent yet is `Progressing` (no Gateway has taken it);
/// every parent accepted is `Healthy`.
///
/// Follows gateway-api `apis/v1/shared_types.go` (`RouteParentStatus`, `RouteConditionAccepted`,
/// `RouteConditionResolvedRefs`, `RouteReasonPending`) and `apis/v1alpha2/policy_types.go`
/// (`PolicyAncestorStatus`).
fn gateway_attachments(obj: &Live, list: &str, reference: &str) -> Assessment {
    let parents = value(obj, &["status", list])
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if parents.is_empty() {
        return verdict(
            Health::Progressing,
            format!("waiting for a Gateway to report on it (no status.{list})"),
        );
    }
    let name_of = |p: &Value| {
        p.get(reference)
            .and_then(|r| r.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string()
    };
    // Each controller writes its own entries. An entry of an older generation from a controller
    // that has written a current one is left over from an earlier spec (a parent since removed):
    // skipped. From any other controller, it has not caught up yet: `Progressing`.
    let is_stale = |p: &Value| {
        conditions_in(p.get("conditions"))
            .iter()
            .any(|c| stale(obj, c))
    };
    fn controller(p: &Value) -> &str {
        p.get("controllerName")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    let (current, old): (Vec<&Value>, Vec<&Value>) = parents.iter().partition(|p| !is_stale(p));
    for p in old {
        if current.iter().any(|c| controller(c) == controller(p)) {
            continue;
        }
        let pc = conditions_in(p.get("conditions"));
        if let Some(c) = pc.iter().find(|c| stale(obj, c)) {
            let a = stale_condition(obj, c);
            return verdict(
                a.health,
                format!("{reference} {}: {}", name_of(p), a.message),
            );
        }
    }
    let mut progressing = None;
    for p in &current {
        let pc = conditions_in(p.get("conditions"));
        let prefix = format!("{reference} {}: ", name_of(p));
        match gateway_conditions(&pc, &prefix) {
            Some(a) if a.health == Health::Degraded => return a,
            Some(a) => {
                progressing.get_or_insert(a);
            }
            None if find(&pc, "Accepted").is_none() => {
                progressing.get_or_insert_with(|| {
                    verdict(
                        Health::Progressing,
                        format!("{prefix}waiting for the Accepted condition"),
                    )
                });
            }
            None => {}
        }
    }
    if let Some(a) = progressing {
        return a;
    }
    let names: Vec<String> = current.iter().map(|p| name_of(p)).collect();
    verdict(Health::Healthy, format!("accepted by {}", names.join(", ")))
}

// ---------------------------------------------------------------------------------------------
// Velero.

/// Velero Backup and Restore: `status.phase` `Completed` is `Healthy`; `Failed`,
/// `FailedValidation` and `PartiallyFailed` (and the in-flight `...PartiallyFailed` phases:
/// some items already failed) are `Degraded`; `New`, `InProgress`,
/// `WaitingForPluginOperations`, `Finalizing` and `Deleting` are `Progressing`; no phase yet is
/// `Progressing`.
///
/// Follows velero `pkg/apis/velero/v1/backup_types.go` (`BackupPhase*`) and
/// `pkg/apis/velero/v1/restore_types.go` (`RestorePhase*`).
fn velero_operation(obj: &Live) -> Assessment {
    let Some(phase) = str_at(obj, &["status", "phase"]).filter(|p| !p.is_empty()) else {
        return waiting("Velero");
    };
    let errors = value(obj, &["status", "validationErrors"])
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("; ")
        })
        .filter(|s| !s.is_empty())
        .or_else(|| str_at(obj, &["status", "failureReason"]).map(str::to_string))
        .or_else(|| {
            let (e, w) = (
                int_at(obj, &["status", "errors"]).unwrap_or(0),
                int_at(obj, &["status", "warnings"]).unwrap_or(0),
            );
            (e > 0 || w > 0).then(|| format!("{e} errors, {w} warnings"))
        });
    let health = match phase {
        "Completed" => Health::Healthy,
        "New" | "InProgress" | "WaitingForPluginOperations" | "Finalizing" | "Deleting" => {
            Health::Progressing
        }
        p if p.contains("Failed") => Health::Degraded,
        _ => Health::Unknown,
    };
    verdict(
        health,
        phase_message("status.phase", phase, errors.as_deref()),
    )
}

/// Velero Schedule: `spec.paused` is `Suspended`; `status.phase` `Enabled` is `Healthy`,
/// `FailedValidation` `Degraded` (with the validation errors), `New` or none `Progressing`.
///
/// Follows velero `pkg/apis/velero/v1/schedule_types.go` (`SchedulePhase*`, `Paused`).
fn velero_schedule(obj: &Live) -> Assessment {
    if true_at(obj, &["spec", "paused"]) {
        return verdict(Health::Suspended, "spec.paused is true");
    }
    let errors = value(obj, &["status", "validationErrors"])
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("; ")
        })
        .filter(|s| !s.is_empty());
    match str_at(obj, &["status", "phase"]).filter(|p| !p.is_empty()) {
        Some(p @ "Enabled") => verdict(Health::Healthy, phase_message("status.phase", p, None)),
        Some(p @ "FailedValidation") => verdict(
            Health::Degraded,
            phase_message("status.phase", p, errors.as_deref()),
        ),
        Some(p) => verdict(Health::Progressing, phase_message("status.phase", p, None)),
        None => waiting("Velero"),
    }
}

/// Velero BackupStorageLocation and VolumeSnapshotLocation: `status.phase` `Available` is
/// `Healthy`, `Unavailable` `Degraded` (with `status.message`); no phase yet is `Progressing`.
///
/// Follows velero `pkg/apis/velero/v1/backupstoragelocation_types.go`
/// (`BackupStorageLocationPhaseAvailable`, `BackupStorageLocationPhaseUnavailable`).
fn velero_location(obj: &Live) -> Assessment {
    let message = str_at(obj, &["status", "message"]);
    match str_at(obj, &["status", "phase"]).filter(|p| !p.is_empty()) {
        Some(p @ "Available") => {
            verdict(Health::Healthy, phase_message("status.phase", p, message))
        }
        Some(p @ "Unavailable") => {
            verdict(Health::Degraded, phase_message("status.phase", p, message))
        }
        Some(p) => verdict(Health::Unknown, phase_message("status.phase", p, message)),
        None => waiting("Velero"),
    }
}

// ---------------------------------------------------------------------------------------------
// Tekton.

/// Tekton PipelineRun, TaskRun and CustomRun: `spec.status` `PipelineRunPending`/`TaskRunPending`
/// (held back before it starts) is `Suspended`; the `Succeeded` condition `True` is `Healthy`,
/// `False` is `Degraded` (failed, timed out or cancelled: the run did not succeed), `Unknown`
/// (`Running`, `Started`, `Pending`) is `Progressing`; no status is `Progressing`.
///
/// Follows tektoncd/pipeline `docs/pipelineruns.md#monitoring-execution-status`,
/// `docs/taskruns.md#monitoring-execution-status` and knative/pkg `apis/condition_types.go`
/// (`ConditionSucceeded`).
fn tekton_run(obj: &Live) -> Assessment {
    if let Some(s) = str_at(obj, &["spec", "status"]).filter(|s| s.ends_with("Pending")) {
        return verdict(Health::Suspended, format!("spec.status is {s}"));
    }
    if status(obj).is_none() {
        return waiting("Tekton");
    }
    let conds = conditions(obj);
    match find(&conds, "Succeeded") {
        Some(c) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        Some(c) if state(c) == "False" => verdict(Health::Degraded, say(c)),
        Some(c) => verdict(Health::Progressing, say(c)),
        None => verdict(
            Health::Progressing,
            "waiting for Tekton to set the Succeeded condition",
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Kyverno.

/// Kyverno ClusterPolicy and Policy: `Ready=True` is `Healthy`; `Ready=False` with a failure
/// reason is `Degraded`, otherwise `Progressing` (the webhooks are being configured); older
/// versions' `status.ready` boolean is read the same; no status is `Progressing`.
///
/// Follows kyverno `api/kyverno/v1/common_types.go` (`PolicyStatus`: `ready`, `conditions`,
/// `PolicyConditionReady`) and <https://kyverno.io/docs/policy-types/cluster-policy/policy-settings/>.
fn kyverno_policy(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("Kyverno");
    }
    let conds = conditions(obj);
    if find(&conds, "Ready").is_none()
        && let Some(ready) = value(obj, &["status", "ready"]).and_then(Value::as_bool)
    {
        return if ready {
            verdict(Health::Healthy, "status.ready is true")
        } else {
            verdict(Health::Progressing, "status.ready is false")
        };
    }
    ready_condition(
        obj,
        &ReadyRule {
            operator: "Kyverno",
            condition: "Ready",
            on_false: OnFalse::Progressing { unless: &[] },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Object;
    use serde_json::json;

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    /// Every group and kind with fixtures in `tests/data/health/builtin/<group>/<Kind>/`.
    fn kinds_with_fixtures() -> Vec<(String, String)> {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/health/builtin");
        let mut out = Vec::new();
        for g in std::fs::read_dir(&root).unwrap().flatten() {
            for k in std::fs::read_dir(g.path()).unwrap().flatten() {
                out.push((
                    g.file_name().to_string_lossy().into_owned(),
                    k.file_name().to_string_lossy().into_owned(),
                ));
            }
        }
        out.sort();
        out
    }

    /// Any JSON value, a few levels deep, with keys and strings drawn from the words statuses
    /// use, so that the rules' readers meet their own fields with unexpected types and values.
    fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let words = proptest::sample::select(vec![
            "status",
            "type",
            "reason",
            "message",
            "phase",
            "state",
            "health",
            "conditions",
            "Ready",
            "True",
            "False",
            "Unknown",
            "replicas",
            "readyReplicas",
            "observedGeneration",
            "currentState",
            "ingress",
            "environments",
            "brokersState",
            "lastOperation",
            "availableNodes",
            "expectedNodes",
            "statuses",
            "applicationStatus",
            "red",
            "0/2",
            "Failed",
            "Running",
            "",
            "é✓",
            "aggregatedStatus",
            "compliant",
            "NonCompliant",
        ]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|f| json!(f)),
            words.clone().prop_map(|w| json!(w)),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(words.clone(), inner, 0..6).prop_map(|m| {
                    Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                }),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// No operator rule panics, whatever the object's spec, status and labels hold: each
        /// kind that has fixtures gets statuses of any shape.
        #[test]
        fn every_operator_rule_reads_any_status_without_panicking(
            spec in any_value(),
            status in any_value(),
            labels in any_value(),
            generation in proptest::option::of(0i64..5),
        ) {
            for (group, kind) in kinds_with_fixtures() {
                let mut meta = json!({"name": "x", "namespace": "n"});
                if let Some(g) = generation {
                    meta["generation"] = json!(g);
                }
                if labels.is_object() {
                    meta["labels"] = json!({"shoot.gardener.cloud/status": labels.clone()});
                }
                let o = obj(json!({
                    "apiVersion": format!("{group}/v1"), "kind": kind,
                    "metadata": meta, "spec": spec.clone(), "status": status.clone(),
                }));
                let _ = assess(&Live::of(&o));
            }
        }
    }

    #[test]
    fn kinds_without_a_rule_are_left_to_the_generic_rules() {
        for (api_version, kind) in [
            ("argoproj.io/v1alpha1", "Application"),
            ("apiextensions.crossplane.io/v1", "Composition"),
            ("ops.crossplane.io/v1alpha1", "Operation"),
            ("pkg.crossplane.io/v1beta1", "DeploymentRuntimeConfig"),
            ("tekton.dev/v1", "Pipeline"),
            ("kafka.strimzi.io/v1beta2", "KafkaSomethingNew"),
            ("example.com/v1", "Widget"),
            ("acid.zalan.do/v1", "OperatorConfiguration"),
            ("promoter.argoproj.io/v1alpha1", "RevertCommit"),
            ("apps.kruise.io/v1alpha1", "SidecarSet"),
            ("rollouts.kruise.io/v1beta1", "BatchRelease"),
            ("rabbitmq.com/v1beta1", "SomethingNew"),
        ] {
            let o =
                obj(json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}));
            assert_eq!(assess(&Live::of(&o)), None, "{api_version} {kind}");
        }
    }

    #[test]
    fn cert_manager_before_v0_11_has_the_same_rules() {
        let o = obj(
            json!({"apiVersion": "certmanager.k8s.io/v1alpha1", "kind": "Certificate",
            "metadata": {"name": "shop-tls"},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "ConfigError",
                "message": "Resource validation failed"}]}}),
        );
        let a = assess(&Live::of(&o)).unwrap();
        assert_eq!(a.health, Health::Degraded, "{}", a.message);
        assert!(a.message.contains("ConfigError"), "{}", a.message);
    }

    #[test]
    fn a_condition_status_written_as_a_yaml_boolean_reads_as_its_text() {
        let o = obj(
            json!({"apiVersion": "promoter.argoproj.io/v1alpha1", "kind": "GitRepository",
            "metadata": {"name": "deploy", "generation": 1},
            "status": {"conditions": [{"type": "Ready", "status": true, "observedGeneration": 1}]}}),
        );
        let a = assess(&Live::of(&o)).unwrap();
        assert_eq!(a.health, Health::Healthy, "{}", a.message);
        assert_eq!(a.message, "Ready=True");
    }

    #[test]
    fn on_false_reads_reasons() {
        let degraded = OnFalse::Degraded {
            except: &["Waiting"],
        };
        assert_eq!(degraded.health("Oops"), Health::Degraded);
        assert_eq!(degraded.health("Waiting"), Health::Progressing);
        let progressing = OnFalse::Progressing { unless: &["Stuck"] };
        assert_eq!(progressing.health("Creating"), Health::Progressing);
        assert_eq!(progressing.health("Stuck"), Health::Degraded);
        assert_eq!(progressing.health("ReconcileError"), Health::Degraded);
    }
}
