{{/* Names: <release>-reservoir unless the release is already called reservoir. */}}
{{- define "reservoir.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "reservoir.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one process kind: (dict "root" $ "component" "web") */}}
{{- define "reservoir.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The ServiceAccount a process kind runs as: its own, or the one it shares ("account": the cluster worker runs as
     the worker, whose rights are the cluster tasks'). */}}
{{- define "reservoir.serviceAccount" -}}
{{ include "reservoir.fullname" .root }}-{{ .account | default .component }}
{{- end -}}

{{- define "reservoir.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The ClusterRoles bound in each team namespace, by the portal's namespace reconciler. */}}
{{- define "reservoir.teamRoleBindings" -}}
{{- $name := include "reservoir.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{ $name }}-team-worker={{ $ns }}/{{ $name }}-worker,{{ $name }}-team-web={{ $ns }}/{{ $name }}-web,{{ $name }}-team-sync={{ $ns }}/{{ $name }}-sync
{{- end -}}

{{/* One secret-backed variable: (dict "root" $ "name" "DATABASE_URL" "ref" .Values.secrets.databaseUrl). An optional
     one for which no Secret is named (neither its secretName nor existingSecret) is left out. */}}
{{- define "reservoir.secretEnv" -}}
{{- $secret := .ref.secretName | default .root.Values.existingSecret -}}
{{- if or $secret (not .ref.optional) -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret | required "existingSecret or secrets.*.secretName is required" }}
      key: {{ .ref.key }}
      {{- if .ref.optional }}
      optional: true
      {{- end }}
{{- end -}}
{{- end -}}

{{/* The settings every portal process reads (values and existing Secrets; never a secret value inline). */}}
{{- define "reservoir.env" -}}
- name: DJANGO_SETTINGS_MODULE
  value: portal.settings.prod
{{ include "reservoir.secretEnv" (dict "root" . "name" "DATABASE_URL" "ref" .Values.secrets.databaseUrl) }}
{{ include "reservoir.secretEnv" (dict "root" . "name" "REDIS_URL" "ref" .Values.secrets.redisUrl) }}
{{ include "reservoir.secretEnv" (dict "root" . "name" "DJANGO_SECRET_KEY" "ref" .Values.secrets.djangoSecretKey) }}
- name: DJANGO_ALLOWED_HOSTS
  value: {{ join "," .Values.config.allowedHosts | quote }}
- name: DJANGO_CSRF_TRUSTED_ORIGINS
  value: {{ join "," .Values.config.csrfTrustedOrigins | quote }}
- name: DJANGO_SECURE_PROXY_SSL_HEADER
  value: {{ .Values.config.secureProxySslHeader | quote }}
- name: DJANGO_LOG_LEVEL
  value: {{ .Values.config.logLevel | quote }}
- name: RESERVOIR_TRUSTED_PROXY_COUNT
  value: {{ .Values.config.trustedProxyCount | quote }}
- name: RESERVOIR_BASE_URL
  value: {{ .Values.config.baseUrl | quote }}
- name: RESERVOIR_TEAM_NAMESPACE_PREFIX
  value: {{ .Values.config.teamNamespacePrefix | quote }}
- name: RESERVOIR_EBCLOUD_ANNOTATIONS
  value: {{ .Values.config.ebcloudAnnotations | quote }}
- name: PROMETHEUS_URL
  value: {{ .Values.config.prometheusUrl | quote }}
- name: RESERVOIR_VOLUME_STORAGE_CLASSES
  value: {{ join "," .Values.config.volumeStorageClasses | quote }}
- name: RESERVOIR_IMAGE_REGISTRIES
  value: {{ join "," .Values.config.imageRegistries | quote }}
- name: RESERVOIR_TEAM_ROLE_BINDINGS
  value: {{ include "reservoir.teamRoleBindings" . | quote }}
{{- if .Values.oidc.issuer }}
- name: RESERVOIR_OIDC_ISSUER
  value: {{ .Values.oidc.issuer | quote }}
- name: RESERVOIR_OIDC_CLIENT_ID
  value: {{ .Values.oidc.clientId | required "oidc.clientId is required with oidc.issuer" | quote }}
{{ include "reservoir.secretEnv" (dict "root" . "name" "RESERVOIR_OIDC_CLIENT_SECRET" "ref" .Values.secrets.oidcClientSecret) }}
- name: RESERVOIR_OIDC_SCOPES
  value: {{ join "," .Values.oidc.scopes | quote }}
- name: RESERVOIR_OIDC_LABEL
  value: {{ .Values.oidc.label | quote }}
- name: RESERVOIR_OIDC_GROUPS_CLAIM
  value: {{ .Values.oidc.groupsClaim | quote }}
{{- end }}
{{- with .Values.oidc.localPasswordLogin }}
- name: RESERVOIR_LOCAL_PASSWORD_LOGIN
  value: {{ . | quote }}
{{- end }}
{{- range $name, $value := .Values.extraEnv }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- range $name, $ref := .Values.extraSecretEnv }}
{{ include "reservoir.secretEnv" (dict "root" $ "name" $name "ref" $ref) }}
{{- end }}
{{- end -}}

{{/* The restricted Pod Security Standard: pod and container halves. */}}
{{- define "reservoir.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "reservoir.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The pod of one process kind: (dict "root" $ "component" "worker" "command" (list ...) "kube" true
     "resources" .Values.worker.resources "extra" "<yaml of more container fields>"); "env" adds variables,
     "secretEnv" secret-backed ones ((list (dict "name" ... "ref" .Values.secrets.x)), as reservoir.secretEnv). */}}
{{- define "reservoir.pod" -}}
{{- $root := .root -}}
metadata:
  labels:
    {{- include "reservoir.selector" . | nindent 4 }}
    app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
  {{- with $root.Values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "reservoir.serviceAccount" . }}
  # Only the processes that call the Kubernetes API get a token.
  automountServiceAccountToken: {{ .kube }}
  securityContext:
    {{- include "reservoir.podSecurityContext" $root | nindent 4 }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if .restartPolicy }}
  restartPolicy: {{ .restartPolicy }}
  {{- end }}
  containers:
    - name: {{ .component }}
      image: {{ include "reservoir.image" $root | quote }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      command:
        {{- toYaml .command | nindent 8 }}
      env:
        {{- include "reservoir.env" $root | nindent 8 }}
        {{- with .env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- range .secretEnv }}
        {{- include "reservoir.secretEnv" (dict "root" $root "name" .name "ref" .ref) | nindent 8 }}
        {{- end }}
      securityContext:
        {{- include "reservoir.containerSecurityContext" $root | nindent 8 }}
      resources:
        {{- toYaml .resources | nindent 8 }}
      volumeMounts:
        - name: tmp
          mountPath: /tmp
      {{- with .extra }}
      {{- . | nindent 6 }}
      {{- end }}
  volumes:
    # The root filesystem is read-only: temporary files (gunicorn's heartbeats, beat's schedule) go here.
    - name: tmp
      emptyDir:
        sizeLimit: 256Mi
  {{- with $root.Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
