{{/* The chart's name. */}}
{{- define "driftless.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name, at most 63 characters. */}}
{{- define "driftless.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Selector labels. */}}
{{- define "driftless.selectorLabels" -}}
app.kubernetes.io/name: {{ include "driftless.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Common labels. */}}
{{- define "driftless.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "driftless.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The agent's ServiceAccount. */}}
{{- define "driftless.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "driftless.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The namespace of the records of the kubernetes store. */}}
{{- define "driftless.recordsNamespace" -}}
{{- default .Release.Namespace .Values.kubernetes.recordsNamespace }}
{{- end }}

{{/* A secret file reference of the config: {file: /etc/driftless/secrets/<key>}. */}}
{{- define "driftless.secretFile" -}}
{file: {{ printf "/etc/driftless/secrets/%s" . | quote }}}
{{- end }}

{{/* The driftless config file, built from the values. */}}
{{- define "driftless.config" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not (or .Values.etcd.enabled .Values.kubernetes.enabled)) }}
{{- fail "replicaCount > 1 needs etcd.enabled or kubernetes.enabled: the SQLite store takes one agent" }}
{{- end }}
{{- $secretKeys := list .Values.server.tokenKey .Values.server.webhooks.githubSecretKey .Values.server.webhooks.giteaSecretKey .Values.server.webhooks.gitlabSecretKey .Values.etcd.passwordKey }}
{{- range $secretKeys }}
{{- if and . (not $.Values.existingSecret) }}
{{- fail (printf "the secret key %q needs existingSecret" .) }}
{{- end }}
{{- end }}
store:
{{- if and .Values.etcd.enabled .Values.kubernetes.enabled }}
{{- fail "etcd.enabled and kubernetes.enabled: choose one store" }}
{{- end }}
{{- if .Values.kubernetes.enabled }}
  kubernetes:
    fieldManager: {{ .Values.kubernetes.fieldManager | quote }}
    namespace: {{ include "driftless.recordsNamespace" . | quote }}
    force: {{ .Values.kubernetes.force }}
    leaseTTL: {{ .Values.kubernetes.leaseTTL | quote }}
{{- else if .Values.etcd.enabled }}
{{- if not .Values.etcd.endpoints }}
{{- fail "etcd.enabled needs etcd.endpoints" }}
{{- end }}
  etcd:
    endpoints: {{ toJson .Values.etcd.endpoints }}
    prefix: {{ .Values.etcd.prefix | quote }}
    leaseTTL: {{ .Values.etcd.leaseTTL | quote }}
    {{- if .Values.etcd.username }}
    username: {{ .Values.etcd.username | quote }}
    password: {{ include "driftless.secretFile" (required "etcd.username needs etcd.passwordKey" .Values.etcd.passwordKey) }}
    {{- end }}
    {{- if .Values.etcd.tls.secretName }}
    tls:
      ca: /etc/driftless/etcd-tls/ca.crt
      {{- if .Values.etcd.tls.clientCertificate }}
      cert: /etc/driftless/etcd-tls/tls.crt
      key: {file: /etc/driftless/etcd-tls/tls.key}
      {{- end }}
    {{- end }}
{{- else }}
  sqlite:
    path: /var/lib/driftless/store.db
{{- end }}
cacheDir: /var/lib/driftless/cache
server:
  listen: "0.0.0.0:{{ .Values.service.port }}"
  {{- with .Values.server.externalUrl }}
  externalUrl: {{ . | quote }}
  {{- end }}
  {{- with .Values.server.tokenKey }}
  token: {{ include "driftless.secretFile" . }}
  {{- end }}
  {{- with .Values.server.webhooks }}
  {{- if or .githubSecretKey .giteaSecretKey .gitlabSecretKey }}
  webhooks:
    {{- with .githubSecretKey }}
    github: {secret: {{ include "driftless.secretFile" . }}}
    {{- end }}
    {{- with .giteaSecretKey }}
    gitea: {secret: {{ include "driftless.secretFile" . }}}
    {{- end }}
    {{- with .gitlabSecretKey }}
    gitlab: {secret: {{ include "driftless.secretFile" . }}}
    {{- end }}
  {{- end }}
  {{- end }}
apps:
{{- if .Values.apps }}
{{ toYaml .Values.apps | indent 2 }}
{{- else }} []
{{- end }}
{{- with .Values.health }}
health:
{{ toYaml . | indent 2 }}
{{- end }}
{{- end }}
