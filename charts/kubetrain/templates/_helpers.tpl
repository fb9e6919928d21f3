{{/* The release-scoped name of every object the chart makes. */}}
{{- define "kubetrain.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kubetrain.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "kubetrain.labels" -}}
{{ include "kubetrain.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kubetrain
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kubetrain.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kubetrain.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kubetrain.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "kubetrain.trainerImage" -}}
{{- printf "%s:%s" .Values.trainerImage.repository (default .Chart.AppVersion .Values.trainerImage.tag) -}}
{{- end -}}

{{/* The rules the operator needs, exactly the verbs its requests use (operator/src:
     informer.c lists and watches; controller.c creates, deletes and patches pods, creates
     services, secrets and events, deletes a job whose TTL ran out, and PUTs status).
     Shared by the ClusterRole and the single-namespace Role. trainingjobs/finalizers
     update: the operator's owner references set blockOwnerDeletion, which the
     OwnerReferencesPermissionEnforcement admission plugin allows only with it.
     Secrets: create only. The operator never reads one, not even its own: each job's
     Secret gets a name the API server generates, which the operator records in the
     job's status (operator/README.md, "The job's Secret"). */}}
{{- define "kubetrain.rules" -}}
- apiGroups: [kubetrain.dev]
  resources: [trainingjobs]
  verbs: [list, watch, delete]
- apiGroups: [kubetrain.dev]
  resources: [trainingjobs/status]
  verbs: [update, patch]
- apiGroups: [kubetrain.dev]
  resources: [trainingjobs/finalizers]
  verbs: [update]
# pods patch: an elastic job's members annotation (kubetrain.dev/members).
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, create, delete, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch, create]
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
# spec.networkPolicy: the job's NetworkPolicy is created, and deleted when turned off.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch, create, delete]
# spec.gangScheduling: one PodGroup per attempt, created before its pods and deleted at
# the next attempt and when the job finishes (where the cluster serves the API); read
# first to check its owner (a 409 on create, and before a delete); patched when an
# elastic job's minWorkers changes (its minCount, where the API lets it change).
- apiGroups: [scheduling.k8s.io]
  resources: [podgroups]
  verbs: [get, create, delete, patch]
{{- end -}}
