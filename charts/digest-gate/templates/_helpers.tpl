{{/* Names. */}}
{{- define "digest-gate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "digest-gate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "digest-gate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "digest-gate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "digest-gate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "digest-gate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "digest-gate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "digest-gate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The webhook Service; the certificate is issued for its DNS names. */}}
{{- define "digest-gate.serviceName" -}}
{{- include "digest-gate.fullname" . }}
{{- end }}

{{- define "digest-gate.tlsSecretName" -}}
{{- if eq .Values.certs.mode "external" }}
{{- required "certs.external.secretName is required with certs.mode=external" .Values.certs.external.secretName }}
{{- else }}
{{- printf "%s-tls" (include "digest-gate.fullname" .) }}
{{- end }}
{{- end }}

{{- define "digest-gate.allowlistConfigMap" -}}
{{- default (printf "%s-allowlist" (include "digest-gate.fullname" .)) .Values.allowlist.existingConfigMap }}
{{- end }}

{{- define "digest-gate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The service's DNS names, for the serving certificate. */}}
{{- define "digest-gate.dnsNames" -}}
{{- $svc := include "digest-gate.serviceName" . }}
{{- $ns := .Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson }}
{{- end }}

{{/* The namespaces every entry excludes by name, as a JSON list: the
release namespace, kube-system and webhook.excludeNamespaces. */}}
{{- define "digest-gate.excludedNamespaces" -}}
{{- concat (list .Release.Namespace "kube-system") .Values.webhook.excludeNamespaces | uniq | toJson }}
{{- end }}

{{/* The installed operators' namespaces (allowlist.fromInstalledOperators),
each once, as a JSON list. */}}
{{- define "digest-gate.operatorNamespaces" -}}
{{- $namespaces := list }}
{{- range .Values.allowlist.fromInstalledOperators }}
{{- $namespaces = append $namespaces .namespace }}
{{- end }}
{{- $namespaces | uniq | toJson }}
{{- end }}

{{/*
Namespace selection, called with (dict "root" $ "selector" SELECTOR): the
entry's selector, plus an exclusion of the release namespace and kube-system
that values cannot remove, so the webhook never reviews (and never blocks) its
own recovery. Cluster-scoped objects (ClusterServingRuntimes) are not subject to
namespaceSelector and always reach the webhook.
*/}}
{{- define "digest-gate.selectorExcluding" -}}
{{- $root := .root }}
{{- $excluded := include "digest-gate.excludedNamespaces" $root | fromJsonArray }}
{{- $exprs := list }}
{{- range .selector.matchExpressions }}
{{- $exprs = append $exprs . }}
{{- end }}
{{- $exprs = append $exprs (dict "key" "kubernetes.io/metadata.name" "operator" "NotIn" "values" $excluded) }}
{{- with $root.Values.webhook.breakGlassLabel }}
{{- $exprs = append $exprs (dict "key" . "operator" "DoesNotExist") }}
{{- end }}
{{- $selector := dict "matchExpressions" $exprs }}
{{- with .selector.matchLabels }}
{{- $_ := set $selector "matchLabels" . }}
{{- end }}
{{- toYaml $selector }}
{{- end }}

{{/*
Every namespace an entry of the webhooks selects or excludes by its
kubernetes.io/metadata.name label, as a JSON list: the release namespace and
kube-system (excluded from every entry), webhook.excludeNamespaces, the names
in the ConfigMap and Template entries' selectors (and any the main selector
names), and the installed operators' namespaces whose approvals are answered.
Kubernetes sets that label from 1.21 only: before, these must be labelled by
hand (NOTES.txt prints how) or their entries silently miss them, and serve's
background audit checks each carries it (--audit-named-namespaces).
*/}}
{{- define "digest-gate.namedNamespaces" -}}
{{- $names := include "digest-gate.excludedNamespaces" . | fromJsonArray }}
{{- $cm := .Values.webhook.configMaps }}
{{- $selectors := list .Values.webhook.namespaceSelector }}
{{- if and (kindIs "map" $cm) $cm.enabled }}
{{- $selectors = append $selectors ($cm.namespaceSelector | default dict) }}
{{- end }}
{{- if .Values.webhook.templates.enabled }}
{{- $selectors = append $selectors (.Values.webhook.templates.namespaceSelector | default dict) }}
{{- end }}
{{- range $selectors }}
{{- range .matchExpressions }}
{{- if and (eq .key "kubernetes.io/metadata.name") (has .operator (list "In" "NotIn")) }}
{{- $names = concat $names .values }}
{{- end }}
{{- end }}
{{- with .matchLabels }}
{{- with (index . "kubernetes.io/metadata.name") }}
{{- $names = append $names . }}
{{- end }}
{{- end }}
{{- end }}
{{- $pf := .Values.audit.preflight }}
{{- if and (kindIs "map" $pf) $pf.enabled }}
{{- $names = concat $names (include "digest-gate.operatorNamespaces" . | fromJsonArray) }}
{{- end }}
{{- $names | uniq | toJson }}
{{- end }}

{{/* The resources both webhook configurations review. */}}
{{- define "digest-gate.rules" -}}
- operations: ["CREATE", "UPDATE"]
  apiGroups: [""]
  apiVersions: ["v1"]
  resources: ["pods"]
  scope: Namespaced
- operations: ["UPDATE"]
  apiGroups: [""]
  apiVersions: ["v1"]
  resources: ["pods/ephemeralcontainers"]
  scope: Namespaced
- operations: ["CREATE", "UPDATE"]
  apiGroups: ["serving.kserve.io"]
  apiVersions: ["v1alpha1"]
  resources: ["servingruntimes"]
  scope: Namespaced
- operations: ["CREATE", "UPDATE"]
  apiGroups: ["serving.kserve.io"]
  apiVersions: ["v1alpha1"]
  resources: ["clusterservingruntimes"]
  scope: Cluster
{{- if .Values.webhook.inferenceServices }}
- operations: ["CREATE", "UPDATE"]
  apiGroups: ["serving.kserve.io"]
  apiVersions: ["v1beta1"]
  resources: ["inferenceservices"]
  scope: Namespaced
{{- end }}
{{- if .Values.webhook.llmInferenceServices }}
- operations: ["CREATE", "UPDATE"]
  apiGroups: ["serving.kserve.io"]
  apiVersions: ["v1alpha1", "v1alpha2"]
  resources: ["llminferenceservices", "llminferenceserviceconfigs"]
  scope: Namespaced
{{- end }}
{{- if .Values.webhook.clusterStorageContainers }}
- operations: ["CREATE", "UPDATE"]
  apiGroups: ["serving.kserve.io"]
  apiVersions: ["v1alpha1"]
  resources: ["clusterstoragecontainers"]
  scope: Cluster
{{- end }}
{{- if .Values.webhook.workloads }}
- operations: ["CREATE", "UPDATE"]
  apiGroups: ["apps"]
  apiVersions: ["v1"]
  resources: ["deployments", "replicasets", "statefulsets", "daemonsets"]
  scope: Namespaced
- operations: ["CREATE", "UPDATE"]
  apiGroups: ["batch"]
  apiVersions: ["v1"]
  resources: ["jobs", "cronjobs"]
  scope: Namespaced
- operations: ["CREATE", "UPDATE"]
  apiGroups: [""]
  apiVersions: ["v1"]
  resources: ["replicationcontrollers", "podtemplates"]
  scope: Namespaced
{{- end }}
{{- /* 0.1.0-0.3.0's boolean: ConfigMaps in the main entries. */}}
{{- if and (kindIs "bool" .Values.webhook.configMaps) .Values.webhook.configMaps }}
- operations: ["CREATE", "UPDATE"]
  apiGroups: [""]
  apiVersions: ["v1"]
  resources: ["configmaps"]
  scope: Namespaced
{{- end }}
{{- end }}

{{/*
Every entry of one webhook configuration, called with (dict "root" $ "prefix"
"mutate"|"validate" "caBundle" $caBundle): the main entry (Pods, runtimes and the
kinds switched on, under webhook.namespaceSelector), then ConfigMaps' and
Templates' entries, with namespaces and a failure policy of their own.
*/}}
{{- define "digest-gate.webhooks" -}}
{{- $root := .root }}
{{- /* matchConditions (CEL) are served from Kubernetes 1.28. */}}
{{- $matchConditions := semverCompare ">=1.28.0-0" $root.Capabilities.KubeVersion.Version }}
{{- $main := dict "name" "" "failurePolicy" $root.Values.webhook.failurePolicy "selector" $root.Values.webhook.namespaceSelector "objectSelector" $root.Values.webhook.objectSelector "rules" (include "digest-gate.rules" $root) }}
{{- $entries := list $main }}
{{- $cm := $root.Values.webhook.configMaps }}
{{- if and (kindIs "map" $cm) $cm.enabled }}
{{- $rules := include "digest-gate.kindRules" (dict "group" "" "resource" "configmaps") }}
{{- $entry := dict "name" "-configmaps" "failurePolicy" ($cm.failurePolicy | default "Ignore") "selector" ($cm.namespaceSelector | default dict) "rules" $rules }}
{{- /* Only the named ConfigMaps reach the webhook (CEL, Kubernetes 1.28+). */}}
{{- if and $cm.names $matchConditions }}
{{- $_ := set $entry "matchConditions" (list (dict "name" "named-configmaps" "expression" (printf "request.name in %s" (toJson $cm.names)))) }}
{{- end }}
{{- $entries = append $entries $entry }}
{{- end }}
{{- $t := $root.Values.webhook.templates }}
{{- if $t.enabled }}
{{- $rules := include "digest-gate.kindRules" (dict "group" "template.openshift.io" "resource" "templates") }}
{{- $entries = append $entries (dict "name" "-templates" "failurePolicy" ($t.failurePolicy | default "Ignore") "selector" ($t.namespaceSelector | default dict) "rules" $rules) }}
{{- end }}
{{- if and (eq .prefix "validate") $root.Values.webhook.checkAllowlists }}
{{- /* Allowlist ConfigMaps in the release namespace, and nothing else there. */}}
{{- $releaseNamespace := dict "matchExpressions" (list (dict "key" "kubernetes.io/metadata.name" "operator" "In" "values" (list $root.Release.Namespace))) }}
{{- $labelled := dict "matchExpressions" (list (dict "key" "digest-gate.dev/allowlist" "operator" "Exists")) }}
{{- $rules := include "digest-gate.kindRules" (dict "group" "" "resource" "configmaps") }}
{{- $entries = append $entries (dict "name" "-allowlist" "path" "/validate-allowlist" "failurePolicy" "Ignore" "exactSelector" $releaseNamespace "objectSelector" $labelled "rules" $rules) }}
{{- end }}
{{- $pf := $root.Values.audit.preflight }}
{{- if and (eq .prefix "validate") (kindIs "map" $pf) $pf.enabled }}
{{- /* An operator upgrade's approval, answered from the pre-flight's judgement
on the plan, and that judgement guarded (only digest-gate writes it): CREATEs
and UPDATEs of InstallPlans in the installed operators' namespaces only, never
blocked by the webhook being down. */}}
{{- $namespaces := include "digest-gate.operatorNamespaces" $root | fromJsonArray }}
{{- if not $namespaces }}
{{- fail "audit.preflight.enabled answers the approvals of the installed operators' upgrades: name their namespaces in allowlist.fromInstalledOperators" }}
{{- end }}
{{- $operators := dict "matchExpressions" (list (dict "key" "kubernetes.io/metadata.name" "operator" "In" "values" $namespaces)) }}
{{- $rules := list (dict "operations" (list "CREATE" "UPDATE") "apiGroups" (list "operators.coreos.com") "apiVersions" (list "v1alpha1") "resources" (list "installplans") "scope" "Namespaced") | toYaml }}
{{- $entry := dict "name" "-approvals" "path" "/validate-approval" "failurePolicy" "Ignore" "exactSelector" $operators "rules" $rules }}
{{- if $matchConditions }}
{{- /* Only an update that approves the plan, and a change that writes its
judgement, reach the webhook (CEL: the annotation's value, '' when absent;
oldObject is null on a CREATE). */}}
{{- $judged := "(has(%s.metadata.annotations) && 'digest-gate.dev/preflight' in %s.metadata.annotations ? %s.metadata.annotations['digest-gate.dev/preflight'] : '')" }}
{{- $new := printf $judged "object" "object" "object" }}
{{- $old := printf $judged "oldObject" "oldObject" "oldObject" }}
{{- $approves := "(request.operation == 'UPDATE' && has(object.spec.approved) && object.spec.approved == true && !(has(oldObject.spec.approved) && oldObject.spec.approved == true))" }}
{{- $writes := printf "(request.operation == 'CREATE' ? %s != '' : %s != %s)" $new $new $old }}
{{- $_ := set $entry "matchConditions" (list (dict "name" "approvals-and-judgements" "expression" (printf "%s || %s" $approves $writes))) }}
{{- end }}
{{- $entries = append $entries $entry }}
{{- end }}
{{- range $entries }}
- name: {{ $.prefix }}{{ .name }}.digest-gate.dev
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: {{ .failurePolicy }}
  matchPolicy: Equivalent
  timeoutSeconds: {{ $root.Values.webhook.timeoutSeconds }}
  {{- if eq $.prefix "mutate" }}
  # A later mutating webhook may add or change images; review them again.
  reinvocationPolicy: IfNeeded
  {{- end }}
  clientConfig:
    service:
      name: {{ include "digest-gate.serviceName" $root }}
      namespace: {{ $root.Release.Namespace }}
      path: {{ .path | default (printf "/%s" $.prefix) }}
      port: {{ $root.Values.service.port }}
    {{- if $.caBundle }}
    caBundle: {{ $.caBundle }}
    {{- end }}
  namespaceSelector:
    {{- if .exactSelector }}
    {{- toYaml .exactSelector | nindent 4 }}
    {{- else }}
    {{- include "digest-gate.selectorExcluding" (dict "root" $root "selector" .selector) | nindent 4 }}
    {{- end }}
  {{- with .objectSelector }}
  objectSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if $matchConditions }}
  matchConditions:
    # An object being deleted is only having its finalizers removed: never
    # hold that up (the server allows it too, but a down webhook under Fail
    # would refuse it).
    - name: not-being-deleted
      expression: "!has(object.metadata.deletionTimestamp)"
    {{- with .matchConditions }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
  rules:
    {{- .rules | nindent 4 }}
{{- end }}
{{- end }}

{{/* The rule of a kind that has an entry of its own. */}}
{{- define "digest-gate.kindRules" -}}
- operations: ["CREATE", "UPDATE"]
  apiGroups: [{{ .group | quote }}]
  apiVersions: ["v1"]
  resources: [{{ .resource | quote }}]
  scope: Namespaced
{{- end }}

{{/* caBundle as the webhook configurations want it: base64 of PEM. */}}
{{- define "digest-gate.externalCaBundle" -}}
{{- $ca := required "certs.external.caBundle is required with certs.mode=external" .Values.certs.external.caBundle }}
{{- if hasPrefix "-----BEGIN" (trim $ca) }}
{{- $ca | b64enc }}
{{- else }}
{{- $ca | replace "\n" "" | trim }}
{{- end }}
{{- end }}

{{/* Annotations that have the caBundle injected, per certificate mode. */}}
{{- define "digest-gate.caInjection" -}}
{{- if eq .Values.certs.mode "certManager" }}
annotations:
  cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "digest-gate.fullname" .) }}
{{- else if eq .Values.certs.mode "openshift" }}
annotations:
  service.beta.openshift.io/inject-cabundle: "true"
{{- end }}
{{- end }}

{{/* Whole seconds of a duration value like "5s", "500ms", "2m" or 5. */}}
{{- define "digest-gate.seconds" -}}
{{- $d := toString . }}
{{- if hasSuffix "ms" $d }}
{{- div (int (trimSuffix "ms" $d)) 1000 }}
{{- else if hasSuffix "s" $d }}
{{- int (trimSuffix "s" $d) }}
{{- else if hasSuffix "m" $d }}
{{- mul (int (trimSuffix "m" $d)) 60 }}
{{- else }}
{{- int $d }}
{{- end }}
{{- end }}

{{/* The background audit's names: its ClusterRole (the owner of the reports
and Events it writes, so the garbage collector deletes them on uninstall) and
its Lease. */}}
{{- define "digest-gate.auditName" -}}
{{- printf "%s-audit" (include "digest-gate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "true" when the pod calls the apiserver: the background audit, or the
watch of allowlist.fromInstalledOperators. It then gets a token, and with
networkPolicy an egress rule. */}}
{{- define "digest-gate.callsApiServer" -}}
{{- if or .Values.audit.enabled .Values.allowlist.fromInstalledOperators }}true{{ else }}false{{ end }}
{{- end }}

{{/* audit.namespaceSelector (matchLabels, matchExpressions) as the label
selector string `--audit-namespace-selector` takes; empty for all. */}}
{{- define "digest-gate.auditNamespaceSelector" -}}
{{- $terms := list }}
{{- range $k, $v := .Values.audit.namespaceSelector.matchLabels }}
{{- $terms = append $terms (printf "%s=%s" $k $v) }}
{{- end }}
{{- range .Values.audit.namespaceSelector.matchExpressions }}
{{- if eq .operator "In" }}
{{- $terms = append $terms (printf "%s in (%s)" .key (join "," .values)) }}
{{- else if eq .operator "NotIn" }}
{{- $terms = append $terms (printf "%s notin (%s)" .key (join "," .values)) }}
{{- else if eq .operator "Exists" }}
{{- $terms = append $terms .key }}
{{- else if eq .operator "DoesNotExist" }}
{{- $terms = append $terms (printf "!%s" .key) }}
{{- else }}
{{- fail (printf "audit.namespaceSelector: operator %q is not one of In, NotIn, Exists, DoesNotExist" .operator) }}
{{- end }}
{{- end }}
{{- join "," $terms }}
{{- end }}

{{/* The pod and container security contexts every digest-gate pod runs with
(the webhook and the uninstall hook): non-root, RuntimeDefault seccomp, a
read-only root filesystem and no capabilities. */}}
{{- define "digest-gate.podSecurityContext" -}}
runAsNonRoot: true
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "digest-gate.containerSecurityContext" -}}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/*
Registry verification's CA: the ConfigMap and key to mount, or nothing.
*/}}
{{- define "digest-gate.registryCa" -}}
{{- $v := .Values.allowlist.verifyRegistry -}}
{{- if and $v.enabled $v.caBundle -}}
{{- dict "name" (printf "%s-registry-ca" (include "digest-gate.fullname" .)) "key" "ca.crt" | toJson -}}
{{- else if and $v.enabled $v.caConfigMap.name -}}
{{- dict "name" $v.caConfigMap.name "key" ($v.caConfigMap.key | default "ca-bundle.crt") | toJson -}}
{{- end -}}
{{- end -}}
