{{/*
Names. Every object is "<fullname>-<component>" so two releases never collide,
and selectors use name + instance + component.
*/}}
{{- define "hami-rs.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hami-rs.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "hami-rs.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{- define "hami-rs.scheduler.fullname" -}}{{ include "hami-rs.fullname" . }}-scheduler{{- end }}
{{- define "hami-rs.webhook.fullname" -}}{{ include "hami-rs.fullname" . }}-webhook{{- end }}
{{- define "hami-rs.certgen.fullname" -}}{{ include "hami-rs.fullname" . }}-certgen{{- end }}
{{- define "hami-rs.devicePlugin.fullname" -}}{{ include "hami-rs.fullname" . }}-device-plugin{{- end }}
{{- define "hami-rs.deviceConfig.name" -}}{{ include "hami-rs.fullname" . }}-device-config{{- end }}
{{- define "hami-rs.webhook.secretName" -}}{{ include "hami-rs.fullname" . }}-webhook-tls{{- end }}

{{- define "hami-rs.nodeConfig.name" -}}
{{- if .Values.devicePlugin.nodeConfiguration.externalConfigName }}
{{- .Values.devicePlugin.nodeConfiguration.externalConfigName }}
{{- else }}
{{- include "hami-rs.fullname" . }}-node-config
{{- end }}
{{- end }}

{{- define "hami-rs.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels; call with (dict "ctx" $ "component" "scheduler"). */}}
{{- define "hami-rs.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hami-rs.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* All labels of an object; call with (dict "ctx" $ "component" "scheduler"). */}}
{{- define "hami-rs.labels" -}}
helm.sh/chart: {{ include "hami-rs.chart" .ctx }}
{{ include "hami-rs.selectorLabels" . }}
app.kubernetes.io/part-of: hami-rs
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- with .ctx.Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels of every pod the chart runs. hami.io/webhook=ignore keeps our own pods
out of our webhook: with failurePolicy Fail a webhook that had to admit its own
replacement pod (or the certgen Job that makes its certificate) could never start.
*/}}
{{- define "hami-rs.podLabels" -}}
{{ include "hami-rs.labels" . }}
hami.io/webhook: ignore
{{- end }}

{{- define "hami-rs.annotations" -}}
{{- with .Values.global.annotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Image reference; call with (dict "ctx" $ "image" .Values.x.image "defaultTag" "v1.2.3").
The tag falls back to global.imageTag, then to "v" + appVersion (our images) or
to defaultTag (third-party images).
*/}}
{{- define "hami-rs.image" -}}
{{- $registry := .image.registry -}}
{{- if .ctx.Values.global.imageRegistry }}
{{- $registry = .ctx.Values.global.imageRegistry -}}
{{- end }}
{{- $tag := .image.tag -}}
{{- $defaultTag := get . "defaultTag" -}}
{{- if not $tag }}
{{- if $defaultTag }}
{{- $tag = $defaultTag -}}
{{- else }}
{{- $tag = default (printf "v%s" .ctx.Chart.AppVersion) .ctx.Values.global.imageTag -}}
{{- end }}
{{- end }}
{{- if $registry }}
{{- printf "%s/%s:%s" $registry .image.repository $tag }}
{{- else }}
{{- printf "%s:%s" .image.repository $tag }}
{{- end }}
{{- end }}

{{/*
kube-scheduler's tag: the cluster's own version (a scheduler must not be newer
than its API server), with any distribution suffix (+k3s1, -eks-...) cut off.
*/}}
{{- define "hami-rs.kubeSchedulerTag" -}}
{{- $v := regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version }}
{{- if not $v }}
{{- fail (printf "cannot derive a kube-scheduler tag from the cluster version %q; set scheduler.kubeScheduler.image.tag" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- if hasPrefix "v" $v }}{{ $v }}{{ else }}v{{ $v }}{{ end }}
{{- end }}

{{- define "hami-rs.imagePullSecrets" -}}
{{- with .Values.global.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  {{- if kindIs "string" . }}
  - name: {{ . }}
  {{- else }}
  - {{ toYaml . | nindent 4 | trim }}
  {{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The directory on the node (and in the plugin) that holds HAMi-core. */}}
{{- define "hami-rs.hamiCoreDir" -}}
{{- printf "%s/vgpu" (trimSuffix "/" .Values.global.gpuHookPath) }}
{{- end }}

{{/* Where the device plugin creates the containers' HAMi-core directories. */}}
{{- define "hami-rs.monitorContainersDir" -}}
{{- printf "%s/containers" (include "hami-rs.hamiCoreDir" .) }}
{{- end }}

{{/*
The monitor's image: devicePlugin.monitor.image when it names a repository, else
HAMi's old devicePlugin.monitorimage ("repo:tag"), else the device plugin's image.
*/}}
{{- define "hami-rs.monitorImage" -}}
{{- $dp := .Values.devicePlugin }}
{{- $img := ($dp.monitor | default dict).image | default dict }}
{{- if $img.repository }}
{{- include "hami-rs.image" (dict "ctx" . "image" $img) }}
{{- else if get $dp "monitorimage" }}
{{- get $dp "monitorimage" }}
{{- else }}
{{- include "hami-rs.image" (dict "ctx" . "image" $dp.image) }}
{{- end }}
{{- end }}

{{/* HAMi's string-or-bool values ("false", false, "true", true). */}}
{{- define "hami-rs.bool" -}}
{{- if eq (toString .) "true" }}true{{ else }}false{{ end }}
{{- end }}

{{/* Every extended resource the extender owns, HAMi's order, no duplicates. */}}
{{- define "hami-rs.managedResources" -}}
{{- $names := list .Values.resourceName .Values.resourceMem .Values.resourceCores .Values.resourceMemPercentage .Values.resourcePriority }}
{{- range .Values.scheduler.extraManagedResources }}
{{- $names = append $names . }}
{{- end }}
{{- toJson (uniq $names) }}
{{- end }}

{{/* Paths inside the containers. */}}
{{- define "hami-rs.deviceConfigDir" -}}/etc/hami-rs/device-config{{- end }}
{{- define "hami-rs.deviceConfigFile" -}}/etc/hami-rs/device-config/device-config.yaml{{- end }}
{{- define "hami-rs.nodeConfigFile" -}}/config/config.json{{- end }}
{{- define "hami-rs.fakeDevicesFile" -}}/etc/hami-rs/fake-devices/fake-devices.yaml{{- end }}

{{/* Port of an "[host]:port" address. */}}
{{- define "hami-rs.port" -}}
{{- $parts := splitList ":" . }}
{{- last $parts }}
{{- end }}

{{/* The security context of a non-root service container. */}}
{{- define "hami-rs.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{- define "hami-rs.restrictedPod" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Environment every hami-rs binary shares (hami-server's logging flags). */}}
{{- define "hami-rs.loggingEnv" -}}
- name: LOG_FORMAT
  value: {{ .Values.logging.format | quote }}
{{- with .Values.logging.level }}
- name: LOG_LEVEL
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/*
Checks on value combinations that a schema cannot express; rendered by
templates/validate.yaml, which emits no object.
*/}}
{{- define "hami-rs.validate" -}}
{{- if and .Chart.KubeVersion (not (semverCompare .Chart.KubeVersion .Capabilities.KubeVersion.Version)) }}
{{- fail (printf "Kubernetes %s is not supported: this chart needs %s (kube-scheduler's v1 configuration and the APIs it uses)" .Capabilities.KubeVersion.Version .Chart.KubeVersion) }}
{{- end }}
{{- $sched := .Values.scheduler }}
{{- if and (gt (int $sched.replicas) 1) (not $sched.leaderElect) }}
{{- fail "scheduler.replicas > 1 needs scheduler.leaderElect: true (only the leader may schedule)" }}
{{- end }}
{{- $libPath := .Values.devicePlugin.libPath }}
{{- if and $libPath (ne (trimSuffix "/" $libPath) (include "hami-rs.hamiCoreDir" .)) }}
{{- fail (printf "devicePlugin.libPath (%s) must be global.gpuHookPath + /vgpu (%s): the device plugin mounts HAMi-core from <gpuHookPath>/vgpu; set global.gpuHookPath instead" $libPath (include "hami-rs.hamiCoreDir" .)) }}
{{- end }}
{{- $ctrPath := (.Values.devicePlugin.monitor | default dict).ctrPath }}
{{- if and $ctrPath (ne (trimSuffix "/" $ctrPath) (include "hami-rs.monitorContainersDir" .)) }}
{{- fail (printf "devicePlugin.monitor.ctrPath (%s) must be global.gpuHookPath + /vgpu/containers (%s): the device plugin creates the container directories there; set global.gpuHookPath instead" $ctrPath (include "hami-rs.monitorContainersDir" .)) }}
{{- end }}
{{- if and (eq .Values.devicePlugin.backend "fake") (not .Values.devicePlugin.fakeDevices) }}
{{- fail "devicePlugin.backend fake needs devicePlugin.fakeDevices (the content of the --fake-devices file)" }}
{{- end }}
{{- $wh := $sched.admissionWebhook }}
{{- if and $wh.enabled (not $sched.certManager.enabled) (not $sched.patch.enabled) (not $wh.caBundle) }}
{{- fail "the webhook needs a certificate: enable scheduler.patch (certgen Job) or scheduler.certManager, or create the Secret yourself and set scheduler.admissionWebhook.caBundle" }}
{{- end }}
{{- end }}

{{/* The device-config.yaml text. */}}
{{- define "hami-rs.deviceConfigContent" -}}
{{- $override := index .Values "device-config" | default dict }}
{{- if $override.content }}
{{- $override.content }}
{{- else }}
{{- $dp := .Values.devicePlugin }}
{{- $nv := .Values.devices.nvidia }}
nvidia:
  resourceCountName: {{ .Values.resourceName | quote }}
  resourceMemoryName: {{ .Values.resourceMem | quote }}
  resourceMemoryPercentageName: {{ .Values.resourceMemPercentage | quote }}
  resourceCoreName: {{ .Values.resourceCores | quote }}
  resourcePriorityName: {{ .Values.resourcePriority | quote }}
  overwriteEnv: {{ include "hami-rs.bool" .Values.scheduler.overwriteEnv }}
  defaultMemory: {{ int $nv.defaultMemory }}
  defaultCores: {{ int $nv.defaultCores }}
  defaultGPUNum: {{ int $nv.defaultGPUNum }}
  memoryFactor: {{ int $nv.memoryFactor }}
  deviceSplitCount: {{ int $dp.deviceSplitCount }}
  deviceMemoryScaling: {{ $dp.deviceMemoryScaling }}
  deviceCoreScaling: {{ $dp.deviceCoreScaling }}
  preConfiguredDeviceMemory: {{ int $dp.preConfiguredDeviceMemory }}
  enableNumaTopology: {{ include "hami-rs.bool" $dp.enableNumaTopology }}
  disableCoreLimit: {{ include "hami-rs.bool" $dp.disablecorelimit }}
  gpuCorePolicy: {{ $nv.gpuCorePolicy | quote }}
  libCudaLogLevel: {{ toString $nv.libCudaLogLevel | quote }}
  runtimeClassName: {{ $dp.runtimeClassName | quote }}
{{- end }}
{{- end }}

{{/* The extender listens on loopback only: kube-scheduler in the same Pod is its one client. */}}
{{- define "hami-rs.extenderPort" -}}8888{{- end }}

{{/* {a: b, c: d} as "a=b,c=d" (sorted, HAMi's --node-label-selector form). */}}
{{- define "hami-rs.labelSelectorArg" -}}
{{- $pairs := list }}
{{- range $k, $v := . }}
{{- $pairs = append $pairs (printf "%s=%s" $k (toString $v)) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/* Names a client may use for the webhook Service (what certgen puts in the certificate). */}}
{{- define "hami-rs.webhook.dnsNames" -}}
{{- $svc := include "hami-rs.webhook.fullname" . }}
{{- $ns := include "hami-rs.namespace" . }}
{{- toJson (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) }}
{{- end }}

{{/* The certgen RBAC lives as long as the certgen hooks; call with (dict "weight" "-10"). */}}
{{- define "hami-rs.certgen.hookAnnotations" -}}
helm.sh/hook: pre-install,pre-upgrade,post-install,post-upgrade
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}
