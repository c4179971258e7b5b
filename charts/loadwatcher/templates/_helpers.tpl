{{/* Names, labels and the settings several templates share. */}}

{{- define "loadwatcher.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The selector: the name (ServiceMonitor's jobLabel, so job="loadwatcher" in the alerts)
and the release, so that two releases in one namespace select their own pods. */}}
{{- define "loadwatcher.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "loadwatcher.labels" -}}
{{ include "loadwatcher.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* metadata.annotations of every object, when any. */}}
{{- define "loadwatcher.annotations" -}}
{{- with .Values.commonAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "loadwatcher.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "loadwatcher.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: name the existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "loadwatcher.provider" -}}
{{- .Values.config.provider.name | default "host" -}}
{{- end -}}

{{- define "loadwatcher.port" -}}
{{- (.Values.config.server | default dict).port | default 2020 -}}
{{- end -}}

{{/* "true" when the service receives pushes (the push provider, or push.receive). */}}
{{- define "loadwatcher.receives" -}}
{{- if or (eq (include "loadwatcher.provider" .) "push") ((.Values.config.push | default dict).receive) -}}
true
{{- end -}}
{{- end -}}

{{- define "loadwatcher.persistent" -}}
{{- if .Values.journal.persistence.enabled -}}
true
{{- end -}}
{{- end -}}

{{- define "loadwatcher.replicas" -}}
{{- if kindIs "invalid" .Values.replicaCount -}}
{{- if or (include "loadwatcher.receives" .) (include "loadwatcher.persistent" .) -}}1{{- else -}}2{{- end -}}
{{- else -}}
{{- .Values.replicaCount -}}
{{- end -}}
{{- end -}}

{{- define "loadwatcher.readerTokensSecret" -}}
{{- with .Values.auth.readerTokens -}}
{{- if .existingSecret -}}{{ .existingSecret }}{{- else if .tokens -}}{{ include "loadwatcher.fullname" $ }}-reader-tokens{{- end -}}
{{- end -}}
{{- end -}}

{{- define "loadwatcher.writerTokensSecret" -}}
{{- if include "loadwatcher.receives" . -}}
{{- with .Values.push.writerTokens -}}
{{- if .existingSecret -}}{{ .existingSecret }}{{- else if .tokens -}}{{ include "loadwatcher.fullname" $ }}-writer-tokens{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "loadwatcher.scheme" -}}
{{- if .Values.tls.secretName -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* The address schedulers use: this release's Service. */}}
{{- define "loadwatcher.watcherAddress" -}}
{{- printf "%s://%s.%s.svc.%s:%s" (include "loadwatcher.scheme" .) (include "loadwatcher.fullname" .) .Release.Namespace .Values.clusterDomain (include "loadwatcher.port" .) -}}
{{- end -}}

{{/* Where the pod mounts what the configuration names. */}}
{{- define "loadwatcher.journalDir" -}}/var/lib/loadwatcher{{- end -}}
{{- define "loadwatcher.readerTokensDir" -}}/etc/loadwatcher/reader-tokens{{- end -}}
{{- define "loadwatcher.writerTokensDir" -}}/etc/loadwatcher/push-tokens{{- end -}}
{{- define "loadwatcher.tlsDir" -}}/etc/loadwatcher/tls{{- end -}}

{{/* Refusals of combinations that would deploy a service that cannot work. */}}
{{- define "loadwatcher.validate" -}}
{{- $replicas := include "loadwatcher.replicas" . | int -}}
{{- if and (include "loadwatcher.receives" .) (gt $replicas 1) -}}
{{- fail "replicaCount: the service receives pushes, and a Service spreads them over its pods: each replica would hold part of every node's samples; use one replica (the journal and the senders' retries cover its restarts)" -}}
{{- end -}}
{{- if and (include "loadwatcher.persistent" .) (gt $replicas 1) -}}
{{- fail "journal.persistence.enabled: one claim holds one journal, and a journal serves one replica; set replicaCount to 1 or use the emptyDir journal" -}}
{{- end -}}
{{- if and (include "loadwatcher.receives" .) (not (include "loadwatcher.writerTokensSecret" .)) -}}
{{- fail "push.writerTokens: the service receives pushes; set push.writerTokens.existingSecret or push.writerTokens.tokens, or anyone who reaches the Service can write node metrics" -}}
{{- end -}}
{{- $server := .Values.config.server | default dict -}}
{{- range $key := list "auth_token_file" "tls_cert_file" "tls_key_file" -}}
{{- if hasKey $server $key -}}
{{- fail (printf "config.server.%s: set by the chart; use auth.readerTokens or tls.secretName" $key) -}}
{{- end -}}
{{- end -}}
{{- if and $server.host (not (has $server.host (list "0.0.0.0" "::"))) -}}
{{- fail (printf "config.server.host: %s would not answer the Service, the probes or the scheduler; leave it unset (0.0.0.0)" $server.host) -}}
{{- end -}}
{{- if hasKey (.Values.config.push | default dict) "token_file" -}}
{{- fail "config.push.token_file: set by the chart; use push.writerTokens" -}}
{{- end -}}
{{- $journalPath := (.Values.config.journal | default dict).path -}}
{{- if and $journalPath (not (hasPrefix (printf "%s/" (include "loadwatcher.journalDir" .)) $journalPath)) -}}
{{- fail (printf "config.journal.path: %s is not on the journal volume; the root file system is read-only: use a path under %s/" $journalPath (include "loadwatcher.journalDir" .)) -}}
{{- end -}}
{{- if .Values.scheduler.enabled -}}
{{- if include "loadwatcher.readerTokensSecret" . -}}
{{- fail "scheduler.enabled: the Trimaran plugins send no token, so they cannot read a watcher with auth.readerTokens" -}}
{{- end -}}
{{- if .Values.tls.secretName -}}
{{- fail "scheduler.enabled: the Trimaran plugins' watcher client trusts only the system's CAs, not the certificate of tls.secretName; serve the scheduler over HTTP" -}}
{{- end -}}
{{- if not (or .Values.scheduler.targetLoadPacking.enabled .Values.scheduler.loadVariationRiskBalancing.enabled) -}}
{{- fail "scheduler: enable targetLoadPacking or loadVariationRiskBalancing (or both): the trimaran profile would score nothing by load" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The configuration file: the values' config block with what the chart decides. */}}
{{- define "loadwatcher.configFile" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $server := get $cfg "server" | default dict -}}
{{- $_ := set $server "port" (include "loadwatcher.port" . | int) -}}
{{- if include "loadwatcher.readerTokensSecret" . -}}
{{- $_ := set $server "auth_token_file" (printf "%s/%s" (include "loadwatcher.readerTokensDir" .) .Values.auth.readerTokens.key) -}}
{{- end -}}
{{- if .Values.tls.secretName -}}
{{- $_ := set $server "tls_cert_file" (printf "%s/tls.crt" (include "loadwatcher.tlsDir" .)) -}}
{{- $_ := set $server "tls_key_file" (printf "%s/tls.key" (include "loadwatcher.tlsDir" .)) -}}
{{- end -}}
{{- $_ := set $cfg "server" $server -}}
{{- $journal := get $cfg "journal" | default dict -}}
{{- if not $journal.path -}}
{{- $_ := set $journal "path" (printf "%s/loadwatcher.db" (include "loadwatcher.journalDir" .)) -}}
{{- end -}}
{{- $_ := set $cfg "journal" $journal -}}
{{- if include "loadwatcher.receives" . -}}
{{- $push := get $cfg "push" | default dict -}}
{{- $_ := set $push "token_file" (printf "%s/%s" (include "loadwatcher.writerTokensDir" .) .Values.push.writerTokens.key) -}}
{{- $_ := set $cfg "push" $push -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
