{{/* The second scheduler: names and its KubeSchedulerConfiguration. */}}

{{/* The service's name shortened first: cut after the suffix, a 63-character fullname
would name the scheduler's objects as the service's. */}}
{{- define "loadwatcher.scheduler.fullname" -}}
{{- printf "%s-scheduler" (include "loadwatcher.fullname" . | trunc 53 | trimSuffix "-") -}}
{{- end -}}

{{/* Its own name label: the service's selector (name and instance) must not pick the
scheduler's pods. */}}
{{- define "loadwatcher.scheduler.selectorLabels" -}}
app.kubernetes.io/name: trimaran-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "loadwatcher.scheduler.labels" -}}
{{ include "loadwatcher.scheduler.selectorLabels" . }}
app.kubernetes.io/component: scheduler
app.kubernetes.io/part-of: {{ .Chart.Name }}
app.kubernetes.io/version: {{ .Values.scheduler.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "loadwatcher.scheduler.subject" -}}
- kind: ServiceAccount
  name: {{ include "loadwatcher.scheduler.fullname" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{/* A profile: the plugins enabled at every extension point they implement (multiPoint),
allocation-based scoring off (its filters stay), each plugin's args with watcherAddress. */}}
{{- define "loadwatcher.scheduler.profile" -}}
{{- $values := .root.Values.scheduler -}}
{{- $address := include "loadwatcher.watcherAddress" .root -}}
{{- $enabled := list -}}
{{- $pluginConfig := list -}}
{{- range $plugin := .plugins -}}
{{- $settings := index $values (index $plugin 1) -}}
{{- if $settings.enabled -}}
{{- $enabled = append $enabled (dict "name" (index $plugin 0) "weight" ($settings.weight | int)) -}}
{{- $args := merge (dict "watcherAddress" $address) (deepCopy $settings.args) -}}
{{- $pluginConfig = append $pluginConfig (dict "name" (index $plugin 0) "args" $args) -}}
{{- end -}}
{{- end -}}
{{- $disabled := list -}}
{{- range $values.disabledScorePlugins -}}
{{- $disabled = append $disabled (dict "name" .) -}}
{{- end -}}
{{- $plugins := dict "multiPoint" (dict "enabled" $enabled) -}}
{{- if $disabled -}}
{{- $_ := set $plugins "score" (dict "disabled" $disabled) -}}
{{- end -}}
{{- toJson (dict "schedulerName" .name "plugins" $plugins "pluginConfig" $pluginConfig) -}}
{{- end -}}

{{- define "loadwatcher.scheduler.config" -}}
{{- $values := .Values.scheduler -}}
{{- $main := include "loadwatcher.scheduler.profile" (dict "root" . "name" $values.name "plugins" (list (list "TargetLoadPacking" "targetLoadPacking") (list "LoadVariationRiskBalancing" "loadVariationRiskBalancing"))) | fromJson -}}
{{- $profiles := list $main -}}
{{- if $values.lowRiskOverCommitment.enabled -}}
{{- $overcommit := include "loadwatcher.scheduler.profile" (dict "root" . "name" (printf "%s-overcommit" $values.name) "plugins" (list (list "LowRiskOverCommitment" "lowRiskOverCommitment"))) | fromJson -}}
{{- $profiles = append $profiles $overcommit -}}
{{- end -}}
{{- $election := dict "leaderElect" true "resourceLock" "leases" "resourceName" (include "loadwatcher.scheduler.fullname" .) "resourceNamespace" .Release.Namespace -}}
{{- toYaml (dict "apiVersion" "kubescheduler.config.k8s.io/v1" "kind" "KubeSchedulerConfiguration" "leaderElection" $election "profiles" $profiles) -}}
{{- end -}}
