{{/* Name prefix of every namespaced and RBAC object of the release. */}}
{{- define "csi-rclone.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "csi-rclone.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels; the argument is (list $ "component"). */}}
{{- define "csi-rclone.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ $root.Chart.Name }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* repository:tag or repository@digest; the argument is (list $ .image). */}}
{{- define "csi-rclone.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default $root.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* The driver name, checked: CSI names are at most 63 characters of [a-z0-9.-]. */}}
{{- define "csi-rclone.driverName" -}}
{{- $n := .Values.driverName -}}
{{- if or (gt (len $n) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$" $n)) -}}
{{- fail (printf "driverName %q: at most 63 characters of a-z, 0-9, '-' and '.', starting and ending alphanumeric" $n) -}}
{{- end -}}
{{- $n -}}
{{- end -}}

{{- define "csi-rclone.absPath" -}}
{{- $name := index . 0 -}}
{{- $p := index . 1 | clean -}}
{{- if or (not (isAbs $p)) (eq $p "/") -}}
{{- fail (printf "%s %q: an absolute path below /" $name (index . 1)) -}}
{{- end -}}
{{- $p -}}
{{- end -}}

{{- define "csi-rclone.kubeletDir" -}}
{{- include "csi-rclone.absPath" (list "kubeletDir" .Values.kubeletDir) -}}
{{- end -}}

{{/* The node plugin's socket dir: <kubeletDir>/plugins/<driverName>. */}}
{{- define "csi-rclone.pluginDir" -}}
{{- printf "%s/plugins/%s" (include "csi-rclone.kubeletDir" .) (include "csi-rclone.driverName" .) -}}
{{- end -}}

{{- define "csi-rclone.stateDir" -}}
{{- include "csi-rclone.absPath" (list "node.stateDir" (default (printf "/run/csi-rclone/%s" (include "csi-rclone.driverName" .)) .Values.node.stateDir)) -}}
{{- end -}}

{{- define "csi-rclone.cacheDir" -}}
{{- include "csi-rclone.absPath" (list "node.cacheDir" (default (printf "/var/lib/csi-rclone/%s/cache" (include "csi-rclone.driverName" .)) .Values.node.cacheDir)) -}}
{{- end -}}

{{/* The secret service the node plugin calls; empty: none. */}}
{{- define "csi-rclone.secretServiceEndpoint" -}}
{{- $ss := .Values.secretService -}}
{{- if $ss.endpoint -}}
{{- $ss.endpoint -}}
{{- else if $ss.server.enabled -}}
{{- printf "%s://%s-secret-service.%s.svc:%v" (ternary "grpcs" "grpc" (ne $ss.server.tls.secret "")) (include "csi-rclone.fullname" .) .Release.Namespace $ss.server.grpcPort -}}
{{- end -}}
{{- end -}}

{{/*
GOMEMLIMIT from the container's own memory limit, in bytes. It is a soft
limit for the Go runtime of the process it is set for: the garbage collector
works harder as the heap nears it, instead of the container being OOM-killed.
The argument is the container's name.
*/}}
{{- define "csi-rclone.gomemlimit" -}}
- name: GOMEMLIMIT
  valueFrom:
    resourceFieldRef:
      containerName: {{ . }}
      resource: limits.memory
      divisor: "1"
{{- end -}}

{{/* The tenant policy's flags, the same for the node plugin and the controller. */}}
{{- define "csi-rclone.tenantArgs" -}}
{{- $t := .Values.tenant -}}
{{- with $t.allowBackends }}
- --tenant-allow-backends={{ join "," . }}
{{- end }}
{{- with $t.allowOptions }}
- --tenant-allow-options={{ join "," . }}
{{- end }}
{{- with $t.denyNetworks }}
- --tenant-deny-networks={{ join "," . }}
{{- end }}
- --tenant-max-cache-size={{ $t.limits.maxCacheSize }}
- --default-cache-size={{ $t.limits.defaultCacheSize }}
- --tenant-max-read-ahead={{ $t.limits.maxReadAhead }}
- --tenant-max-chunk-size={{ $t.limits.maxChunkSize }}
- --tenant-max-buffer-size={{ $t.limits.maxBufferSize }}
- --tenant-max-streams={{ $t.limits.maxStreams }}
- --tenant-max-value-bytes={{ $t.limits.maxValueBytes }}
- --tenant-max-secret-bytes={{ $t.limits.maxSecretBytes }}
{{- end -}}

{{/* Namespace of the mount pods. */}}
{{- define "csi-rclone.mountNamespace" -}}
{{- default (printf "%s-mounts" (include "csi-rclone.fullname" .)) .Values.node.mountPods.namespace -}}
{{- end -}}
