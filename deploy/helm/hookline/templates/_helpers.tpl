{{/* Labels of every object: the base's (app.kubernetes.io/name, component, part-of; a ConfigMap, which kustomize
generates, has part-of only) and Helm's own two. */}}
{{- define "hookline.labels" -}}
{{- if not .configMap }}
app.kubernetes.io/name: hookline
{{- end }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
app.kubernetes.io/part-of: hookline
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end }}

{{/* The pods' selector labels. */}}
{{- define "hookline.selector" -}}
app.kubernetes.io/name: hookline
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- define "hookline.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{/* A service's TOML: the value given, or the chart's file. */}}
{{- define "hookline.config" -}}
{{- if .value }}{{ .value }}{{ else }}{{ .root.Files.Get (printf "files/%s" .file) }}{{ end }}
{{- end }}

{{/* The pod securityContext every hookline service runs with (the gateway adds fsGroup). */}}
{{- define "hookline.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
{{- if . }}
fsGroup: 10001
{{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "hookline.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* The environment of every hookline service but the gateway: the services' record key, the gateway's (to verify
its inbound records: inbound_only_keys), the log level and format. */}}
{{- define "hookline.env" -}}
- name: HOOKLINE_RECORD_KEY_K1
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.recordKeys }}
      key: k1
- name: HOOKLINE_RECORD_KEY_GATEWAY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.recordKeys }}
      key: gateway
{{- include "hookline.logEnv" . }}
{{- end }}

{{/* The gateway's environment: its own record key, the only one it holds (it signs inbound records only). */}}
{{- define "hookline.gatewayEnv" -}}
- name: HOOKLINE_RECORD_KEY_GATEWAY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.recordKeys }}
      key: gateway
{{- include "hookline.logEnv" . }}
{{- end }}

{{- define "hookline.logEnv" }}
- name: RUST_LOG
  value: info
- name: HOOKLINE_LOG_FORMAT
  value: json
{{- end }}

{{- define "hookline.probes" -}}
readinessProbe:
  httpGet:
    path: /readyz
    port: admin
  periodSeconds: {{ .readyPeriod }}
  timeoutSeconds: 2
  failureThreshold: {{ .readyFailures }}
livenessProbe:
  httpGet:
    path: /livez
    port: admin
  periodSeconds: {{ .livePeriod }}
  timeoutSeconds: 2
  failureThreshold: 3
{{- end }}
