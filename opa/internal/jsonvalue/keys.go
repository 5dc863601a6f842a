package jsonvalue

import "github.com/open-policy-agent/opa/v1/ast"

// commonKeys are the key terms shared by every document read: the field
// names of Pods (and of the objects inside them) that every pod repeats.
// Terms are immutable values to OPA, so sharing them is safe; the table is
// only a matter of speed (a key not in it gets its own term) and is read-
// only after init.
var commonKeys = func() map[string]*ast.Term {
	names := []string{
		// object and metadata
		"apiVersion", "kind", "metadata", "name", "namespace", "uid", "generateName",
		"resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
		"labels", "annotations", "ownerReferences", "controller", "blockOwnerDeletion",
		"finalizers", "managedFields", "manager", "operation", "time", "fieldsType", "fieldsV1",
		"subresource",
		// pod spec
		"spec", "status", "containers", "initContainers", "ephemeralContainers", "volumes",
		"nodeName", "nodeSelector", "affinity", "tolerations", "priority", "priorityClassName",
		"schedulerName", "serviceAccountName", "serviceAccount", "automountServiceAccountToken",
		"securityContext", "podSecurityContext", "hostNetwork", "hostPID", "hostIPC", "hostUsers",
		"restartPolicy", "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy",
		"dnsConfig", "enableServiceLinks", "preemptionPolicy", "runtimeClassName", "overhead",
		"topologySpreadConstraints", "readinessGates", "imagePullSecrets", "hostAliases",
		"hostname", "subdomain", "shareProcessNamespace", "os", "schedulingGates", "resourceClaims",
		"setHostnameAsFQDN",
		// containers
		"image", "imagePullPolicy", "command", "args", "workingDir", "ports", "containerPort",
		"hostPort", "protocol", "hostIP", "env", "envFrom", "value", "valueFrom", "fieldRef",
		"fieldPath", "secretKeyRef", "configMapKeyRef", "resourceFieldRef", "resource", "divisor",
		"key", "optional", "resources", "limits", "requests", "cpu", "memory", "ephemeral-storage",
		"claims", "volumeMounts", "volumeDevices", "mountPath", "subPath", "readOnly",
		"mountPropagation", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
		"httpGet", "tcpSocket", "exec", "grpc", "path", "port", "scheme", "httpHeaders",
		"initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold",
		"failureThreshold", "terminationMessagePath", "terminationMessagePolicy", "stdin",
		"stdinOnce", "tty", "restartPolicyRules", "resizePolicy", "resourceName",
		// security contexts
		"privileged", "allowPrivilegeEscalation", "readOnlyRootFilesystem", "runAsUser",
		"runAsGroup", "runAsNonRoot", "fsGroup", "fsGroupChangePolicy", "supplementalGroups",
		"supplementalGroupsPolicy", "capabilities", "add", "drop", "seccompProfile", "type",
		"localhostProfile", "seLinuxOptions", "appArmorProfile", "procMount", "sysctls",
		"windowsOptions", "user", "role", "level",
		// volumes
		"emptyDir", "hostPath", "configMap", "secret", "secretName", "projected", "sources",
		"serviceAccountToken", "expirationSeconds", "downwardAPI", "items", "defaultMode",
		"persistentVolumeClaim", "claimName", "ephemeral", "csi", "driver", "medium", "sizeLimit",
		// scheduling
		"nodeAffinity", "podAffinity", "podAntiAffinity",
		"requiredDuringSchedulingIgnoredDuringExecution",
		"preferredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms",
		"matchExpressions", "matchFields", "matchLabels", "operator", "values", "weight",
		"preference", "podAffinityTerm", "labelSelector", "topologyKey", "namespaces",
		"namespaceSelector", "effect", "tolerationSeconds", "maxSkew", "whenUnsatisfiable",
		// status
		"phase", "conditions", "lastProbeTime", "lastTransitionTime", "reason", "message",
		"qosClass", "podIP", "podIPs", "ip", "startTime", "containerStatuses",
	}
	m := make(map[string]*ast.Term, len(names))
	for _, n := range names {
		m[n] = ast.StringTerm(n)
	}
	return m
}()
