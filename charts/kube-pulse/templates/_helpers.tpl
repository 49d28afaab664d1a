{{/*
Names, labels and the checks every template shares.
*/}}

{{- define "kube-pulse.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' base name: the release name, followed by the chart's name
unless it already contains it (release `kube-pulse` gives `kube-pulse`,
the names deploy/ uses).
*/}}
{{- define "kube-pulse.fullname" -}}
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

{{/*
A generated name within Kubernetes' limits: `base`, followed by `-suffix`
when the suffix is not empty, at most `max` characters (63 for a DNS
label or a label value; 52 for a StatefulSet, whose pods' controller-
revision-hash label is its name and a hash of up to 10 characters). One
too long keeps its suffix whole and cuts the base, adding 8 characters of
the base's SHA-256 (`RELEASE-kube-p-1a2b3c4d-nats`), so that two long
bases cut alike (two releases, two namespaces) still give two names.
Arguments: (list BASE SUFFIX MAX).
*/}}
{{- define "kube-pulse.boundedName" -}}
{{- $base := index . 0 }}
{{- $suffix := index . 1 }}
{{- $max := int (index . 2) }}
{{- $tail := ternary (printf "-%s" $suffix) "" (ne $suffix "") }}
{{- $name := printf "%s%s" $base $tail }}
{{- if gt (len $name) $max }}
{{- $room := int (sub (sub $max (len $tail)) 9) }}
{{- $name = printf "%s-%s%s" ($base | trunc $room | trimSuffix "-") ($base | sha256sum | trunc 8) $tail }}
{{- end }}
{{- $name }}
{{- end }}

{{- define "kube-pulse.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The gateway pods' selector labels. */}}
{{- define "kube-pulse.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-pulse.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The gateway's (or the agent's) pod labels: the selector labels, then
podLabels. The selector labels are the chart's: podLabels may repeat one
with the same value (written once), and is refused when it gives another
(the Deployment's selector would not select its own pods, and a selector
cannot change after install).
*/}}
{{- define "kube-pulse.podLabels" -}}
{{- $own := dict "app.kubernetes.io/name" (include "kube-pulse.name" .) "app.kubernetes.io/instance" (.Release.Name | trunc 63 | trimSuffix "-") }}
{{- $extra := dict }}
{{- range $key, $value := .Values.podLabels }}
{{- if not (hasKey $own $key) }}
{{- $_ := set $extra $key $value }}
{{- else if ne (toString $value) (index $own $key) }}
{{- fail (printf "podLabels: %s is a selector label the chart sets to %s, not %v (the Deployment would not select its pods): leave it out of podLabels (nameOverride changes app.kubernetes.io/name, the release's name app.kubernetes.io/instance)" $key (index $own $key) $value) }}
{{- end }}
{{- end }}
{{- include "kube-pulse.selectorLabels" . }}
{{- with $extra }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of every object of the gateway. */}}
{{- define "kube-pulse.labels" -}}
{{ include "kube-pulse.selectorLabels" . }}
app.kubernetes.io/part-of: kube-pulse
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "kube-pulse.chart" . }}
{{- end }}

{{/*
The NATS servers: name and selector labels (deploy/nats's). The name is
the StatefulSet's, so at most 52 characters; the names made from it (the
headless Service, the Secrets) stay within 63.
*/}}
{{- define "kube-pulse.natsName" -}}
{{- include "kube-pulse.boundedName" (list (include "kube-pulse.fullname" .) "nats" 52) }}
{{- end }}

{{/* The StatefulSet's governing Service (NAME-headless). */}}
{{- define "kube-pulse.natsHeadlessName" -}}
{{- include "kube-pulse.boundedName" (list (include "kube-pulse.natsName" .) "headless" 63) }}
{{- end }}

{{- define "kube-pulse.natsSelectorLabels" -}}
app.kubernetes.io/name: nats
app.kubernetes.io/instance: {{ include "kube-pulse.natsName" . }}
{{- end }}

{{- define "kube-pulse.natsLabels" -}}
{{ include "kube-pulse.natsSelectorLabels" . }}
app.kubernetes.io/part-of: kube-pulse
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "kube-pulse.chart" . }}
{{- end }}

{{/* The NATS password's Secret: yours, or the chart's. */}}
{{- define "kube-pulse.natsAuthSecret" -}}
{{- default (include "kube-pulse.boundedName" (list (include "kube-pulse.natsName" .) "auth" 63)) .Values.nats.auth.existingSecret }}
{{- end }}

{{/* The NATS signing key's Secret: yours, or the chart's. */}}
{{- define "kube-pulse.natsSigningSecret" -}}
{{- default (include "kube-pulse.boundedName" (list (include "kube-pulse.natsName" .) "signing" 63)) .Values.nats.signing.existingSecret }}
{{- end }}

{{- define "kube-pulse.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kube-pulse.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: the ServiceAccount to use when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Cluster-wide objects' names (the gateway's and the agent's ClusterRoles
and bindings): the full name and the release namespace, so that two
releases named alike in different namespaces do not collide, followed by
a suffix when given; within 63 characters, with the hash of the full name
and namespace when cut (kube-pulse.boundedName), so that the namespace
still tells them apart. Arguments: (list . SUFFIX).
*/}}
{{- define "kube-pulse.clusterScopedName" -}}
{{- $ctx := index . 0 }}
{{- include "kube-pulse.boundedName" (list (printf "%s-%s" (include "kube-pulse.fullname" $ctx) $ctx.Release.Namespace) (index . 1) 63) }}
{{- end }}

{{- define "kube-pulse.clusterRoleName" -}}
{{- include "kube-pulse.clusterScopedName" (list . "") }}
{{- end }}

{{/* The Role and RoleBinding of the Leases (the gateway's or the agent's). */}}
{{- define "kube-pulse.leasesName" -}}
{{- include "kube-pulse.boundedName" (list (include "kube-pulse.fullname" .) "leases" 63) }}
{{- end }}

{{/*
Non-empty when the host cluster is a member: a config.clusters entry
reaches it through the pod's service account (its token file, or the
in-cluster apiserver's address), as the default entry `host` does. The
gateway's ClusterRole then grants what its sources read and its tasks
write there.
*/}}
{{- define "kube-pulse.hostMember" -}}
{{- range .Values.config.clusters }}
{{- if or (eq (toString (default "" .tokenFile)) "/var/run/secrets/kubernetes.io/serviceaccount/token") (hasPrefix "https://kubernetes.default.svc" (toString (default "" .server))) }}
{{- "true" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The gateway's scheme: HTTPS with tls.secretName. */}}
{{- define "kube-pulse.scheme" -}}
{{- if .Values.tls.secretName }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/* Karpor's namespace: karpor.namespace, or the release's when empty. */}}
{{- define "kube-pulse.karporNamespace" -}}
{{- default .Release.Namespace .Values.karpor.namespace }}
{{- end }}

{{/* Where Karpor's kubeconfig is mounted. */}}
{{- define "kube-pulse.karporDir" -}}
/etc/karpor
{{- end }}

{{/*
Gateway pods: replicas.count with Leases; else replicaCount, whose
default is 2, or 1 with Karpor (one status writer).
*/}}
{{- define "kube-pulse.replicas" -}}
{{- if .Values.replicas.enabled }}
{{- .Values.replicas.count }}
{{- else if not (kindIs "invalid" .Values.replicaCount) }}
{{- .Values.replicaCount }}
{{- else if .Values.karpor.enabled }}
{{- 1 }}
{{- else }}
{{- 2 }}
{{- end }}
{{- end }}

{{/*
Combinations the gateway would refuse or run wrongly, refused at render
time with the reason.
*/}}
{{- define "kube-pulse.checks" -}}
{{- if and .Values.nats.enabled (not .Values.replicas.enabled) }}
{{- fail "nats.enabled needs replicas.enabled: --nats needs Lease ownership (docs/SCALE-OUT.md)" }}
{{- end }}
{{- with .Values.nats.signing.key }}
{{- if lt (len (trimSuffix "\r" (trimSuffix "\n" .))) 32 }}
{{- fail "nats.signing.key is shorter than 32 bytes: the gateway refuses a shorter signing key (e.g. `openssl rand -hex 32`)" }}
{{- end }}
{{- end }}
{{- if and .Values.nats.agents (not .Values.nats.enabled) }}
{{- fail "nats.agents needs nats.enabled: the agents log in to the chart's NATS" }}
{{- end }}
{{- $members := list }}
{{- $keys := list }}
{{- range .Values.nats.agents }}
{{- if has .member $members }}
{{- fail (printf "nats.agents: member %s twice: one agent user per member" .member) }}
{{- end }}
{{- if has .publicKey $keys }}
{{- fail (printf "nats.agents: the key of %s is another agent's too: one nkey per agent" .member) }}
{{- end }}
{{- $members = append $members .member }}
{{- $keys = append $keys .publicKey }}
{{- end }}
{{- if gt (int .Values.nats.streamReplicas) (int .Values.nats.servers) }}
{{- fail (printf "nats.streamReplicas (%v) exceeds nats.servers (%v): JetStream places each copy on its own server" .Values.nats.streamReplicas .Values.nats.servers) }}
{{- end }}
{{- range .Values.extraArgs }}
{{- if or (hasPrefix "--tls-cert" .) (hasPrefix "--tls-key" .) }}
{{- fail (printf "extraArgs: %s: give the certificate with tls.secretName, which sets the flags and turns the probes and the ServiceMonitor to HTTPS (with the flag alone the probes stay HTTP and the pods restart forever)" .) }}
{{- end }}
{{- end }}
{{- if .Values.agent.enabled }}
{{- if .Values.tls.secretName }}
{{- fail "tls.secretName with agent.enabled: the agent serves /livez, /readyz and /metrics over HTTP only" }}
{{- end }}
{{- range $block := list "replicas" "nats" "karpor" }}
{{- if (index $.Values $block).enabled }}
{{- fail (printf "%s.enabled with agent.enabled: the agent mode installs the agent only (the hub's chart has the gateway's blocks)" $block) }}
{{- end }}
{{- end }}
{{- range $name, $block := .Values.monitoring }}
{{- if $block.enabled }}
{{- fail (printf "monitoring.%s.enabled with agent.enabled: the rules, scraping and dashboard are the gateway's" $name) }}
{{- end }}
{{- end }}
{{- if not .Values.agent.member }}
{{- fail "agent.member: the member's name on the hub is required with agent.enabled" }}
{{- end }}
{{- if not .Values.agent.nats.url }}
{{- fail "agent.nats.url: the hub's NATS is required with agent.enabled" }}
{{- end }}
{{- if and (not .Values.agent.seed) (not .Values.agent.existingSecret) }}
{{- fail "agent.seed or agent.existingSecret: the agent's nkey seed is required with agent.enabled (its public key is the hub's nats.agents entry)" }}
{{- end }}
{{- if and .Values.agent.tasks (not .Values.agent.hubKey) }}
{{- fail "agent.tasks needs agent.hubKey: without the hub's key the agent refuses every task" }}
{{- end }}
{{- if and (dig "podWatch" "onDemand" false .Values.agent.config) (not .Values.agent.hubKey) }}
{{- fail "agent.config.podWatch.onDemand needs agent.hubKey: podWatch.onDemand on an agent needs --hub-key (the hub says when to watch, signed with its key)" }}
{{- end }}
{{- end }}
{{- if .Values.karpor.enabled }}
{{- if ne (include "kube-pulse.karporNamespace" .) .Release.Namespace }}
{{- fail (printf "karpor.namespace is %s but the release is in %s: a pod mounts ConfigMaps of its own namespace only; install the chart in Karpor's namespace (helm install … -n %s), or set karpor.namespace to Karpor's namespace (empty: this release's)" .Values.karpor.namespace .Release.Namespace .Values.karpor.namespace) }}
{{- end }}
{{- if and (not .Values.replicas.enabled) (not .Values.karpor.readOnly) (gt (int (include "kube-pulse.replicas" .)) 1) }}
{{- fail "replicaCount > 1 with karpor.enabled: every replica would write Karpor's status and all but one stand by; set replicas.enabled=true (Leases: each writes the Clusters it owns), replicaCount=1, or karpor.readOnly=true" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The agent's seed Secret: yours, or the chart's. */}}
{{- define "kube-pulse.agentSeedSecret" -}}
{{- default (include "kube-pulse.fullname" .) .Values.agent.existingSecret }}
{{- end }}
