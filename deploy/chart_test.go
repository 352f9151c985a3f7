package deploy_test

import (
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/csi-rclone/csi-rclone/deploy"
	"github.com/csi-rclone/csi-rclone/pkg/driver"
)

const chartDir = "helm/csi-rclone"

// A case is a set of values and what the rendered objects must say.
type chartCase struct {
	name       string
	values     string
	driverName string
	kubeletDir string
	stateDir   string
	cacheDir   string
	// secret service client: "" when none is configured
	endpoint, audience, caKey string
	server                    bool
	// provisionerSecrets: the namespaces in which csi-provisioner may get
	// Secrets; ["*"] for all; nil for none
	provisionerSecrets []string
	// node.sidecars=false: the driver registers and serves /healthz itself
	oneContainer bool
	// node.mounter=pod (the default): the namespace of the mount pods; ""
	// for process
	mountNamespace string
	// flags of the mount pods' resources the plugin must get, if any
	podFlags map[string]string
}

var cases = []chartCase{
	{
		name:           "defaults",
		driverName:     "csi-rclone",
		kubeletDir:     "/var/lib/kubelet",
		stateDir:       "/run/csi-rclone/csi-rclone",
		cacheDir:       "/var/lib/csi-rclone/csi-rclone/cache",
		mountNamespace: "csi-rclone-mounts",
		podFlags:       map[string]string{"mount-pod-cpu-request": "10m", "mount-pod-memory-request": "64Mi", "mount-pod-memory-limit": "2Gi", "mount-pod-max-memory-limit": "8Gi"},
	},
	{
		// Each volume's rclone a child of the node plugin.
		name:       "process",
		values:     "node: {mounter: process}",
		driverName: "csi-rclone",
		kubeletDir: "/var/lib/kubelet",
		stateDir:   "/run/csi-rclone/csi-rclone",
		cacheDir:   "/var/lib/csi-rclone/csi-rclone/cache",
	},
	{
		// k0s, another driver name, the reference secret service with TLS,
		// its CA from a ConfigMap and a token audience of our own.
		name: "k0s-secret-service",
		values: `
driverName: rclone.csi.example.org
kubeletDir: /var/lib/k0s/kubelet/
node:
  metrics: {enabled: true, port: 9191}
tenant:
  allowBackends: [sftp, ftp]
  denyNetworks: [127.0.0.0/8, 10.96.0.0/12]
  limits: {maxCacheSize: 50Gi, defaultCacheSize: 10Gi, maxReadAhead: 1Gi, maxChunkSize: 64Mi, maxBufferSize: 128Mi, maxStreams: 4, maxValueBytes: 8192, maxSecretBytes: 32768}
networkPolicy:
  denyCIDRs: [10.244.0.0/16, 10.96.0.0/12, "fd00:10:96::/112"]
secretService:
  ca: {configMap: secret-service-ca, key: ca.pem}
  token: {audience: rclone-decrypt, expirationSeconds: 600}
  server:
    enabled: true
    tls: {secret: secret-service-tls}
    allowedNamespaces: [alice, bob]
    privateKey: {previousKeys: [private-2025.pem]}
storageClasses:
  - name: rclone-static-remote
    parameters:
      remote: store
      csi.storage.k8s.io/node-stage-secret-name: rclone-store
      csi.storage.k8s.io/node-stage-secret-namespace: storage
`,
		driverName:     "rclone.csi.example.org",
		kubeletDir:     "/var/lib/k0s/kubelet",
		stateDir:       "/run/csi-rclone/rclone.csi.example.org",
		cacheDir:       "/var/lib/csi-rclone/rclone.csi.example.org/cache",
		endpoint:       "grpcs://csi-rclone-secret-service.kube-system.svc:8443",
		audience:       "rclone-decrypt",
		caKey:          "ca.pem",
		server:         true,
		mountNamespace: "csi-rclone-mounts",
	},
	{
		// MicroK8s, an external secret service whose CA is in a Secret,
		// own state and cache dirs.
		name: "microk8s-external-secret-service",
		values: `
kubeletDir: /var/snap/microk8s/common/var/lib/kubelet
node:
  stateDir: /run/rclone-state
  cacheDir: /srv/rclone-cache
secretService:
  endpoint: https://decrypt.example.org
  ca: {secret: decrypt-ca}
`,
		driverName:     "csi-rclone",
		kubeletDir:     "/var/snap/microk8s/common/var/lib/kubelet",
		stateDir:       "/run/rclone-state",
		cacheDir:       "/srv/rclone-cache",
		endpoint:       "https://decrypt.example.org",
		audience:       "csi-rclone-secret-service",
		caKey:          "ca.crt",
		mountNamespace: "csi-rclone-mounts",
	},
	{
		// A directory per PVC with the provisioner secret in the PVC's
		// namespace: csi-provisioner gets Secrets in every namespace.
		name:               "provisioner-secrets-cluster",
		values:             readFile("examples/platform/values.yml"),
		driverName:         "csi-rclone",
		kubeletDir:         "/var/lib/kubelet",
		stateDir:           "/run/csi-rclone/csi-rclone",
		cacheDir:           "/var/lib/csi-rclone/csi-rclone/cache",
		provisionerSecrets: []string{"*"},
		mountNamespace:     "csi-rclone-mounts",
	},
	{
		// ... or in the listed namespaces only.
		name: "provisioner-secrets-namespaces",
		values: `
controller:
  provisionerSecrets: {enabled: true, namespaces: [storage, team-a]}
storageClasses:
  - name: rclone-dirs
    parameters:
      remotePath: bucket/homes
      subdirTemplate: "${pvc.namespace}/${pvc.name}"
      onDelete: archive
      csi.storage.k8s.io/provisioner-secret-name: rclone-provisioner
      csi.storage.k8s.io/provisioner-secret-namespace: storage
      csi.storage.k8s.io/node-stage-secret-name: rclone-provisioner
      csi.storage.k8s.io/node-stage-secret-namespace: storage
`,
		driverName:         "csi-rclone",
		kubeletDir:         "/var/lib/kubelet",
		stateDir:           "/run/csi-rclone/csi-rclone",
		cacheDir:           "/var/lib/csi-rclone/csi-rclone/cache",
		provisionerSecrets: []string{"storage", "team-a"},
		mountNamespace:     "csi-rclone-mounts",
	},
	{
		// No sidecar images to be had (test/cluster): one container.
		name: "one-container",
		values: `
driverName: rclone.csi.example.org
node: {sidecars: false, healthPort: 9900}
controller: {sidecars: false}
`,
		driverName:     "rclone.csi.example.org",
		kubeletDir:     "/var/lib/kubelet",
		stateDir:       "/run/csi-rclone/rclone.csi.example.org",
		cacheDir:       "/var/lib/csi-rclone/rclone.csi.example.org/cache",
		oneContainer:   true,
		mountNamespace: "csi-rclone-mounts",
	},
	{
		// Each volume's rclone in a mount pod of its own.
		name: "mount-pods",
		values: `
node:
  mounter: pod
  mountPods:
    resources: {requests: {cpu: 20m, memory: 32Mi}, limits: {cpu: "2", memory: 1Gi}}
    cacheSize: 8Gi
tenant:
  limits: {maxMountPodMemory: 16Gi, maxMountPodCPU: "4"}
`,
		driverName:     "csi-rclone",
		kubeletDir:     "/var/lib/kubelet",
		stateDir:       "/run/csi-rclone/csi-rclone",
		cacheDir:       "/var/lib/csi-rclone/csi-rclone/cache",
		mountNamespace: "csi-rclone-mounts",
		podFlags: map[string]string{"mount-pod-cpu-request": "20m", "mount-pod-cpu-limit": "2", "mount-pod-memory-request": "32Mi",
			"mount-pod-memory-limit": "1Gi", "mount-pod-cache-size": "8Gi", "mount-pod-max-memory-limit": "16Gi", "mount-pod-max-cpu-limit": "4"},
	},
}

func readFile(name string) string {
	b, err := os.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func render(t *testing.T, values string) map[string]string {
	t.Helper()
	files, err := deploy.Render(chartDir, []byte(values), deploy.ReleaseNamespace)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestChart(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := decodeFiles(t, render(t, c.values))
			checkDriverName(t, o, c)
			checkNode(t, o, c)
			checkController(t, o, c)
			checkPropagation(t, o)
			checkRBAC(t, o, c)
			checkResources(t, o)
			checkImages(t, o)
			checkSecretService(t, o, c)
			checkTenant(t, o, c)
			checkMountPods(t, o, c)
		})
	}
}

// The driver name is the same in the CSIDriver, the StorageClasses, the
// plugins' flags and the kubelet registration path.
func checkDriverName(t *testing.T, o *objects, c chartCase) {
	if len(o.csiDrivers) != 1 {
		t.Fatalf("%d CSIDrivers, want 1", len(o.csiDrivers))
	}
	d := o.csiDrivers[0]
	if d.Name != c.driverName {
		t.Errorf("CSIDriver %q, want %q", d.Name, c.driverName)
	}
	if d.Spec.AttachRequired == nil || *d.Spec.AttachRequired ||
		d.Spec.PodInfoOnMount == nil || *d.Spec.PodInfoOnMount ||
		d.Spec.FSGroupPolicy == nil || *d.Spec.FSGroupPolicy != storagev1.FileFSGroupPolicy ||
		!slices.Equal(d.Spec.VolumeLifecycleModes, []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}) {
		t.Errorf("CSIDriver spec %+v", d.Spec)
	}
	if len(o.storageClasses) == 0 {
		t.Error("no StorageClass")
	}
	for _, sc := range o.storageClasses {
		if sc.Provisioner != c.driverName {
			t.Errorf("StorageClass %s: provisioner %q, want %q", sc.Name, sc.Provisioner, c.driverName)
		}
		for k := range sc.Parameters {
			if (strings.HasPrefix(k, "csi.storage.k8s.io/provisioner-secret") && c.provisionerSecrets == nil) || strings.HasPrefix(k, "csi.storage.k8s.io/controller-") {
				t.Errorf("StorageClass %s: %s needs csi-provisioner to read Secrets", sc.Name, k)
			}
		}
	}
	for name, spec := range o.podSpecs() {
		if p := container(spec, "csi-rclone"); p != nil {
			if v, _ := flag(p.Args, "driver-name"); v != c.driverName {
				t.Errorf("%s: --driver-name=%q, want %q", name, v, c.driverName)
			}
		}
	}
	reg := container(nodeSpec(t, o), "node-driver-registrar")
	if c.oneContainer {
		reg = container(nodeSpec(t, o), "csi-rclone")
	}
	want := path.Join(c.kubeletDir, "plugins", c.driverName, "csi.sock")
	if v, _ := flag(reg.Args, "kubelet-registration-path"); v != want {
		t.Errorf("--kubelet-registration-path=%q, want %q", v, want)
	}
}

func nodeSpec(t *testing.T, o *objects) *corev1.PodSpec {
	t.Helper()
	if len(o.daemonSets) != 1 {
		t.Fatalf("%d DaemonSets, want 1", len(o.daemonSets))
	}
	return &o.daemonSets[0].Spec.Template.Spec
}

func checkNode(t *testing.T, o *objects, c chartCase) {
	ds := o.daemonSets[0]
	spec := nodeSpec(t, o)
	p := container(spec, "csi-rclone")
	if p == nil {
		t.Fatal("no csi-rclone container in the node DaemonSet")
	}
	for _, a := range []string{"--mode=node", "--nodeid=$(NODE_NAME)", "--endpoint=unix:///csi/csi.sock"} {
		if !slices.Contains(p.Args, a) {
			t.Errorf("node plugin: no %s in %q", a, p.Args)
		}
	}
	if v, ok := flag(p.Args, "worker-uid-range"); !ok || v != driver.DefaultWorkerUIDs.String() {
		t.Errorf("node plugin: --worker-uid-range=%q, want the driver's default %s", v, driver.DefaultWorkerUIDs)
	}
	if p.SecurityContext == nil || p.SecurityContext.Privileged == nil || !*p.SecurityContext.Privileged {
		t.Error("node plugin not privileged")
	}
	// Recovery of a subPath mount may have to enter the pod's mount
	// namespace, found through the node's /proc.
	if !spec.HostPID {
		t.Error("node plugin without hostPID: recovery cannot reach pods' subPath mounts")
	}

	// Every host path the plugin mounts, but its socket dir, is at the same
	// path inside: the kubelet dir, the state and cache dirs, /dev/fuse.
	hostPaths := map[string]string{} // mountPath -> host path
	for _, m := range p.VolumeMounts {
		v := volume(spec, m.Name)
		if v == nil {
			t.Fatalf("node plugin mounts unknown volume %s", m.Name)
		}
		if v.HostPath == nil {
			continue
		}
		hostPaths[m.MountPath] = v.HostPath.Path
		if m.MountPath == "/csi" {
			if want := path.Join(c.kubeletDir, "plugins", c.driverName); v.HostPath.Path != want {
				t.Errorf("plugin socket dir %s, want %s", v.HostPath.Path, want)
			}
			continue
		}
		if c.oneContainer && m.MountPath == "/registration" {
			if want := path.Join(c.kubeletDir, "plugins_registry"); v.HostPath.Path != want {
				t.Errorf("registration dir %s, want %s", v.HostPath.Path, want)
			}
			if d, _ := flag(p.Args, "registration-dir"); d != m.MountPath {
				t.Errorf("--registration-dir=%q, mounted at %s", d, m.MountPath)
			}
			continue
		}
		if v.HostPath.Path != m.MountPath {
			t.Errorf("volume %s: host path %s mounted at %s", m.Name, v.HostPath.Path, m.MountPath)
		}
	}
	if hostPaths[c.kubeletDir] != c.kubeletDir {
		t.Errorf("kubelet dir %s not mounted at the same path: %v", c.kubeletDir, hostPaths)
	}
	for f, want := range map[string]string{"state-dir": c.stateDir, "cache-dir": c.cacheDir} {
		if v, _ := flag(p.Args, f); v != want || hostPaths[want] != want {
			t.Errorf("--%s=%q, want %q from the host path of the same name (%v)", f, v, want, hostPaths)
		}
	}
	if !strings.HasPrefix(c.stateDir, "/run/") {
		t.Errorf("state dir %s is not on the host's tmpfs /run", c.stateDir)
	}
	if hostPaths["/dev/fuse"] != "/dev/fuse" {
		t.Error("/dev/fuse not mounted")
	}

	// The liveness probe goes to the livenessprobe sidecar's port, or to
	// the driver's own health endpoint.
	var endpoint string
	if c.oneContainer {
		for _, name := range []string{"node-driver-registrar", "liveness-probe"} {
			if container(spec, name) != nil {
				t.Errorf("sidecar %s with node.sidecars=false", name)
			}
		}
		if len(spec.Containers) != 1 {
			t.Errorf("%d containers, want 1", len(spec.Containers))
		}
		endpoint, _ = flag(p.Args, "health-address")
	} else {
		endpoint, _ = flag(container(spec, "liveness-probe").Args, "http-endpoint")
		if _, ok := flag(p.Args, "health-address"); ok {
			t.Error("driver serves /healthz beside the livenessprobe sidecar")
		}
	}
	port := strings.TrimPrefix(endpoint, ":")
	if p.LivenessProbe == nil || p.LivenessProbe.HTTPGet == nil || p.StartupProbe == nil {
		t.Fatal("node plugin: no liveness or startup probe")
	}
	if named := p.LivenessProbe.HTTPGet.Port.StrVal; !slices.ContainsFunc(p.Ports, func(cp corev1.ContainerPort) bool {
		return cp.Name == named && port == strconv.Itoa(int(cp.ContainerPort))
	}) {
		t.Errorf("liveness probe port %q is not the sidecar's --http-endpoint=%s", named, endpoint)
	}

	if c.mountNamespace == "" && (spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken) {
		t.Error("node pod mounts an API token; it needs none")
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("node priority class %q", spec.PriorityClassName)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Key == "" && tol.Operator == corev1.TolerationOpExists
	}) {
		t.Errorf("node tolerations %+v do not tolerate everything", spec.Tolerations)
	}
	u := ds.Spec.UpdateStrategy
	if u.Type != "RollingUpdate" || u.RollingUpdate == nil || u.RollingUpdate.MaxUnavailable == nil || u.RollingUpdate.MaxUnavailable.IntValue() != 1 {
		t.Errorf("update strategy %+v", u)
	}
	// The node plugin's ServiceAccount is bound to nothing.
	sa := spec.ServiceAccountName
	for _, b := range o.clusterBindings {
		checkNotBound(t, "ClusterRoleBinding "+b.Name, b.Subjects, sa)
	}
	for _, b := range o.bindings {
		if c.mountNamespace != "" && b.Namespace == c.mountNamespace && b.RoleRef.Name == "csi-rclone-mount-pods" {
			continue // checkMountPods
		}
		checkNotBound(t, "RoleBinding "+b.Name, b.Subjects, sa)
	}
}

func checkNotBound(t *testing.T, name string, subjects []rbacv1.Subject, sa string) {
	for _, s := range subjects {
		if s.Kind == "ServiceAccount" && s.Name == sa {
			t.Errorf("%s grants the node plugin's ServiceAccount %s API access", name, sa)
		}
	}
}

func checkController(t *testing.T, o *objects, c chartCase) {
	var spec *corev1.PodSpec
	for _, d := range o.deployments {
		if strings.HasSuffix(d.Name, "-controller") {
			spec = &d.Spec.Template.Spec
		}
	}
	if spec == nil {
		t.Fatal("no controller Deployment")
	}
	prov := container(spec, "csi-provisioner")
	for _, a := range []string{"--extra-create-metadata", "--leader-election", "--csi-address=/csi/csi.sock"} {
		if prov == nil || !slices.Contains(prov.Args, a) {
			t.Errorf("csi-provisioner: no %s", a)
		}
	}
	p := container(spec, "csi-rclone")
	if p == nil || !slices.Contains(p.Args, "--mode=controller") || !slices.Contains(p.Args, "--endpoint=unix:///csi/csi.sock") {
		t.Errorf("controller plugin args %v", p)
	}
	if p.LivenessProbe == nil || p.LivenessProbe.HTTPGet == nil {
		t.Fatal("controller plugin has no liveness probe")
	}
	// The probe's port is served by the livenessprobe sidecar, or by the
	// driver itself.
	var endpoint string
	if c.oneContainer {
		if container(spec, "liveness-probe") != nil {
			t.Error("liveness-probe sidecar with controller.sidecars=false")
		}
		endpoint, _ = flag(p.Args, "health-address")
	} else {
		endpoint, _ = flag(container(spec, "liveness-probe").Args, "http-endpoint")
	}
	named := p.LivenessProbe.HTTPGet.Port.StrVal
	if !slices.ContainsFunc(p.Ports, func(cp corev1.ContainerPort) bool {
		return cp.Name == named && ":"+strconv.Itoa(int(cp.ContainerPort)) == endpoint
	}) {
		t.Errorf("controller liveness probe port %q is not the health endpoint %q", named, endpoint)
	}
}

// Bidirectional propagation exactly on the node plugin's kubelet dir mount.
func checkPropagation(t *testing.T, o *objects) {
	n := 0
	for name, spec := range o.podSpecs() {
		for _, ctr := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			for _, m := range ctr.VolumeMounts {
				if m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional {
					continue
				}
				n++
				v := volume(spec, m.Name)
				if !strings.HasPrefix(name, "DaemonSet ") || ctr.Name != "csi-rclone" || v == nil || v.HostPath == nil || v.HostPath.Path != m.MountPath || m.Name != "kubelet-dir" {
					t.Errorf("%s, container %s: Bidirectional mount %s at %s", name, ctr.Name, m.Name, m.MountPath)
				}
			}
		}
	}
	if n != 1 {
		t.Errorf("%d Bidirectional mounts, want 1", n)
	}
}

// No Role or ClusterRole touches Secrets, or anything through a wildcard;
// except, when provisioner secrets are enabled, one rule "get secrets" for
// csi-provisioner's ServiceAccount alone, in the namespaces asked for.
func checkRBAC(t *testing.T, o *objects, c chartCase) {
	var secretRoles []string // namespaces of the rules on Secrets; "*" for a ClusterRole
	check := func(kind, name, namespace string, rules []rbacv1.PolicyRule) {
		for _, r := range rules {
			for _, s := range [][]string{r.Resources, r.Verbs, r.APIGroups} {
				if slices.Contains(s, "*") {
					t.Errorf("%s %s: wildcard in %+v", kind, name, r)
				}
			}
			if slices.ContainsFunc(r.Resources, func(res string) bool { return strings.HasPrefix(res, "secrets") }) {
				if c.provisionerSecrets == nil || name != "csi-rclone-provisioner-secrets" || len(rules) != 1 ||
					!slices.Equal(r.Resources, []string{"secrets"}) || !slices.Equal(r.Verbs, []string{"get"}) || len(r.ResourceNames) != 0 {
					t.Errorf("%s %s: a rule on Secrets: %+v", kind, name, r)
				}
				secretRoles = append(secretRoles, namespace)
			}
			if slices.Contains(r.Resources, "volumeattachments") {
				t.Errorf("%s %s: VolumeAttachments, not needed with attachRequired false", kind, name)
			}
		}
	}
	for _, r := range o.clusterRoles {
		check("ClusterRole", r.Name, "*", r.Rules)
		if r.AggregationRule != nil {
			t.Errorf("ClusterRole %s aggregates", r.Name)
		}
	}
	for _, r := range o.roles {
		check("Role", r.Name, r.Namespace, r.Rules)
	}
	slices.Sort(secretRoles)
	if !slices.Equal(secretRoles, c.provisionerSecrets) {
		t.Errorf("rules on Secrets in %v, want %v", secretRoles, c.provisionerSecrets)
	}
	// The Secrets roles are bound to the controller's ServiceAccount only.
	checkSubjects := func(kind, name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) {
		if ref.Name != "csi-rclone-provisioner-secrets" {
			return
		}
		if len(subjects) != 1 || subjects[0].Kind != "ServiceAccount" || subjects[0].Name != "csi-rclone-controller" {
			t.Errorf("%s %s binds the Secrets role to %+v", kind, name, subjects)
		}
	}
	for _, b := range o.clusterBindings {
		checkSubjects("ClusterRoleBinding", b.Name, b.RoleRef, b.Subjects)
	}
	for _, b := range o.bindings {
		checkSubjects("RoleBinding", b.Name, b.RoleRef, b.Subjects)
	}
}

// Every container has CPU and memory requests and a memory limit; our own
// Go programs get GOMEMLIMIT from their own memory limit.
func checkResources(t *testing.T, o *objects) {
	for name, spec := range o.podSpecs() {
		for _, ctr := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			req, lim := ctr.Resources.Requests, ctr.Resources.Limits
			if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() {
				t.Errorf("%s, container %s: resources %+v", name, ctr.Name, ctr.Resources)
			}
			if ctr.Name != "csi-rclone" && ctr.Name != "secret-service" {
				continue
			}
			i := slices.IndexFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" })
			if i < 0 {
				t.Errorf("%s, container %s: no GOMEMLIMIT", name, ctr.Name)
				continue
			}
			ref := ctr.Env[i].ValueFrom
			if ref == nil || ref.ResourceFieldRef == nil || ref.ResourceFieldRef.Resource != "limits.memory" || ref.ResourceFieldRef.ContainerName != ctr.Name {
				t.Errorf("%s, container %s: GOMEMLIMIT not from its memory limit: %+v", name, ctr.Name, ctr.Env[i])
			}
		}
	}
}

// Images are pinned: a tag other than latest, or a digest.
func checkImages(t *testing.T, o *objects) {
	for name, spec := range o.podSpecs() {
		for _, ctr := range spec.Containers {
			img := ctr.Image
			if strings.Contains(img, "@sha256:") {
				continue
			}
			i := strings.LastIndex(img, ":")
			if i < 0 || strings.Contains(img[i:], "/") || img[i+1:] == "latest" || img[i+1:] == "" {
				t.Errorf("%s, container %s: image %q is not pinned", name, ctr.Name, img)
			}
		}
	}
}

func checkSecretService(t *testing.T, o *objects, c chartCase) {
	spec := nodeSpec(t, o)
	p := container(spec, "csi-rclone")
	endpoint, _ := flag(p.Args, "secret-service")
	if endpoint != c.endpoint {
		t.Errorf("--secret-service=%q, want %q", endpoint, c.endpoint)
	}
	if c.endpoint == "" {
		if _, ok := flag(p.Args, "secret-service-token-file"); ok || slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Projected != nil }) {
			t.Error("a token for a secret service that is not configured")
		}
	} else {
		// The token file is in a projected ServiceAccount token volume for the audience.
		tokenFile, _ := flag(p.Args, "secret-service-token-file")
		src := mountedSource(t, spec, p, tokenFile)
		if src == nil || src.Projected == nil || len(src.Projected.Sources) != 1 || src.Projected.Sources[0].ServiceAccountToken == nil {
			t.Fatalf("--secret-service-token-file=%s is not a projected token", tokenFile)
		}
		if tok := src.Projected.Sources[0].ServiceAccountToken; tok.Audience != c.audience || path.Base(tokenFile) != tok.Path {
			t.Errorf("token %+v, want audience %q at %s", tok, c.audience, tokenFile)
		}
		// The CA file comes from the ConfigMap or Secret.
		caFile, _ := flag(p.Args, "secret-service-ca")
		src = mountedSource(t, spec, p, caFile)
		var items []corev1.KeyToPath
		switch {
		case src != nil && src.ConfigMap != nil:
			items = src.ConfigMap.Items
		case src != nil && src.Secret != nil:
			items = src.Secret.Items
		}
		if path.Base(caFile) != c.caKey || len(items) != 1 || items[0].Key != c.caKey || items[0].Path != c.caKey {
			t.Errorf("--secret-service-ca=%s: source %+v, want key %s", caFile, src, c.caKey)
		}
	}

	var srv *corev1.PodSpec
	for _, d := range o.deployments {
		if strings.HasSuffix(d.Name, "-secret-service") {
			srv = &d.Spec.Template.Spec
		}
	}
	if (srv != nil) != c.server {
		t.Fatalf("secret service Deployment: %v, want %v", srv != nil, c.server)
	}
	if srv == nil {
		return
	}
	s := container(srv, "secret-service")
	if aud, _ := flag(s.Args, "token-review-audiences"); aud != c.audience || !slices.Contains(s.Args, "--token-review") {
		t.Errorf("secret service: token review audiences %q, want %q", aud, c.audience)
	}
	if subj, _ := flag(s.Args, "allowed-subjects"); subj != "system:serviceaccount:"+deploy.ReleaseNamespace+":"+spec.ServiceAccountName {
		t.Errorf("secret service: --allowed-subjects=%s, want the node plugin's ServiceAccount", subj)
	}
	if _, ok := flag(s.Args, "tls-cert"); ok != strings.HasPrefix(c.endpoint, "grpcs://") {
		t.Errorf("secret service TLS %v, client endpoint %s", ok, c.endpoint)
	}
	for _, f := range []string{"private-key", "previous-private-key", "tls-cert", "tls-key"} {
		if file, ok := flag(s.Args, f); ok {
			if src := mountedSource(t, srv, s, file); src == nil || src.Secret == nil || !slices.ContainsFunc(src.Secret.Items, func(i corev1.KeyToPath) bool { return i.Path == path.Base(file) }) {
				t.Errorf("secret service --%s=%s is not from a Secret volume", f, file)
			}
		}
	}
	if !slices.ContainsFunc(o.clusterRoles, func(r *rbacv1.ClusterRole) bool {
		return slices.ContainsFunc(r.Rules, func(rule rbacv1.PolicyRule) bool {
			return slices.Contains(rule.Resources, "tokenreviews") && slices.Equal(rule.Verbs, []string{"create"})
		})
	}) {
		t.Error("secret service cannot create TokenReviews")
	}
	if len(o.services) != 1 {
		t.Errorf("%d Services, want the secret service's", len(o.services))
	}
}

// mountedSource is the volume that holds file in ctr.
func mountedSource(t *testing.T, spec *corev1.PodSpec, ctr *corev1.Container, file string) *corev1.VolumeSource {
	t.Helper()
	for _, m := range ctr.VolumeMounts {
		if path.Dir(file) == m.MountPath {
			if v := volume(spec, m.Name); v != nil {
				return &v.VolumeSource
			}
		}
	}
	return nil
}

// The decoder refuses what the API server would: a misspelled field fails.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	node := render(t, "")["node.yaml"]
	if _, err := decode("node.yaml", node); err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(node, "mountPropagation: Bidirectional", "mountPropogation: Bidirectional", 1)
	if broken == node {
		t.Fatal("no mountPropagation in node.yaml")
	}
	_, err := decode("node.yaml", broken)
	if err == nil || !runtime.IsStrictDecodingError(unwrapAll(err)) || !strings.Contains(err.Error(), "mountPropogation") {
		t.Fatalf("a misspelled field decoded: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

func TestChartRefuses(t *testing.T) {
	for name, values := range map[string]string{
		"provisioner secret": `
storageClasses:
  - name: x
    parameters: {csi.storage.k8s.io/provisioner-secret-name: s}`,
		"controller secret even with provisioner secrets": `
controller: {provisionerSecrets: {enabled: true}}
storageClasses:
  - name: x
    parameters: {csi.storage.k8s.io/controller-expand-secret-name: s}`,
		"relative kubelet dir": "kubeletDir: var/lib/kubelet",
		"bad driver name":      "driverName: CSI_rclone",
		"two CA sources":       "secretService: {endpoint: grpcs://x:1, ca: {configMap: a, secret: b}}",
		"unknown mounter":      "node: {mounter: pods}",
	} {
		if _, err := deploy.Render(chartDir, []byte(values), deploy.ReleaseNamespace); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
}

// deploy/kubernetes is the chart rendered with its defaults.
func TestManifestsUpToDate(t *testing.T) {
	want, err := deploy.Manifests(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	got := readDir(t, "kubernetes")
	for name, text := range want {
		if got[name] != text {
			t.Errorf("kubernetes/%s differs from the chart: run make manifests", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("kubernetes/%s is not rendered from the chart: run make manifests", name)
		}
	}
	decodeFiles(t, got)
}

// The node plugin and the controller get the same tenant policy, and the
// node plugin's egress is kept from link-local and the denied CIDRs.
func checkTenant(t *testing.T, o *objects, c chartCase) {
	want := map[string]string{
		"tenant-deny-networks":    "127.0.0.0/8,::1/128",
		"tenant-max-cache-size":   "20Gi",
		"default-cache-size":      "5Gi",
		"tenant-max-streams":      "8",
		"tenant-max-secret-bytes": "65536",
	}
	if c.name == "k0s-secret-service" {
		want = map[string]string{
			"tenant-allow-backends": "sftp,ftp",
			"tenant-deny-networks":  "127.0.0.0/8,10.96.0.0/12",
			"tenant-max-cache-size": "50Gi",
			"default-cache-size":    "10Gi",
			"tenant-max-chunk-size": "64Mi",
			"tenant-max-streams":    "4",
		}
	}
	for name, spec := range o.podSpecs() {
		p := container(spec, "csi-rclone")
		if p == nil || strings.HasPrefix(name, "Pod ") {
			continue
		}
		for f, v := range want {
			if got, _ := flag(p.Args, f); got != v {
				t.Errorf("%s: --%s=%q, want %q", name, f, got, v)
			}
		}
	}
	if len(o.netpols) != 1 {
		t.Fatalf("%d NetworkPolicies, want 1", len(o.netpols))
	}
	np := o.netpols[0]
	ds := o.daemonSets[0]
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("NetworkPolicy selects %s=%s, which the node pods do not have", k, v)
		}
	}
	if len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != "Egress" {
		t.Errorf("NetworkPolicy types %v, want Egress only", np.Spec.PolicyTypes)
	}
	var except []string
	for _, r := range np.Spec.Egress {
		for _, peer := range r.To {
			if peer.IPBlock != nil {
				except = append(except, peer.IPBlock.Except...)
			}
		}
	}
	wantExcept := []string{"169.254.0.0/16", "fe80::/10"}
	if c.name == "k0s-secret-service" {
		wantExcept = append(wantExcept, "10.244.0.0/16", "10.96.0.0/12", "fd00:10:96::/112")
	}
	for _, w := range wantExcept {
		if !slices.Contains(except, w) {
			t.Errorf("NetworkPolicy egress does not except %s: %v", w, except)
		}
	}
}

func TestChartNetworkPolicyOff(t *testing.T) {
	o := decodeFiles(t, render(t, "networkPolicy: {enabled: false}\n"))
	if len(o.netpols) != 0 {
		t.Errorf("%d NetworkPolicies with networkPolicy.enabled=false", len(o.netpols))
	}
}

// With mounter: pod the node plugin makes mount pods, in their namespace
// only (Pod Security restricted), from its own image, and the admission
// policy binds what it may create; with process, none of it is there.
func checkMountPods(t *testing.T, o *objects, c chartCase) {
	spec := nodeSpec(t, o)
	p := container(spec, "csi-rclone")
	mounter, _ := flag(p.Args, "mounter")
	if c.mountNamespace == "" {
		if mounter != "" || len(o.namespaces)+len(o.policies)+len(o.policyBindings) != 0 {
			t.Errorf("mounter=process: --mounter=%q, %d namespaces, %d policies", mounter, len(o.namespaces), len(o.policies))
		}
		return
	}
	if mounter != "pod" {
		t.Errorf("--mounter=%q, want pod", mounter)
	}
	want := map[string]string{"mount-namespace": c.mountNamespace, "mount-image": p.Image, "kubelet-dir": c.kubeletDir}
	maps.Copy(want, c.podFlags)
	for f, want := range want {
		if v, _ := flag(p.Args, f); v != want {
			t.Errorf("--%s=%q, want %q", f, v, want)
		}
	}
	if spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Error("mounter=pod: the node plugin has no API token")
	}
	if len(o.namespaces) != 1 || o.namespaces[0].Name != c.mountNamespace || o.namespaces[0].Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("mount namespace: %+v", o.namespaces)
	}
	// The node plugin's only grant: pods in the mount namespace.
	sa := spec.ServiceAccountName
	var grants []string
	for _, b := range o.bindings {
		for _, s := range b.Subjects {
			if s.Kind != "ServiceAccount" || s.Name != sa {
				continue
			}
			if b.Namespace != c.mountNamespace || b.RoleRef.Kind != "Role" {
				t.Errorf("RoleBinding %s/%s grants the node plugin %s", b.Namespace, b.Name, b.RoleRef.Name)
			}
			for _, r := range o.roles {
				if r.Name == b.RoleRef.Name && r.Namespace == b.Namespace {
					for _, rule := range r.Rules {
						grants = append(grants, strings.Join(rule.APIGroups, ",")+"/"+strings.Join(rule.Resources, ",")+":"+strings.Join(rule.Verbs, ","))
					}
				}
			}
		}
	}
	if !slices.Equal(grants, []string{"/pods:create,get,list,watch,delete"}) {
		t.Errorf("node plugin grants %q", grants)
	}
	if len(o.policies) != 1 || len(o.policyBindings) != 1 {
		t.Fatalf("%d admission policies, %d bindings; want 1 each", len(o.policies), len(o.policyBindings))
	}
	pol, bind := o.policies[0], o.policyBindings[0]
	if bind.Spec.PolicyName != pol.Name || !slices.Equal(bind.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("policy binding %+v", bind.Spec)
	}
	if pol.Spec.FailurePolicy == nil || *pol.Spec.FailurePolicy != admissionv1.Fail {
		t.Error("the admission policy does not fail closed")
	}
	if len(pol.Spec.MatchConditions) != 1 || !strings.Contains(pol.Spec.MatchConditions[0].Expression, `"system:serviceaccount:kube-system:csi-rclone-node"`) {
		t.Errorf("policy match %+v", pol.Spec.MatchConditions)
	}
	var all string
	for _, v := range pol.Spec.Validations {
		all += v.Expression + "\n"
	}
	for _, want := range []string{"authentication.kubernetes.io/node-name", "object.spec.nodeName == variables.node", strconv.Quote(p.Image),
		"has(v.emptyDir)", "automountServiceAccountToken == false", "hostNetwork", "runAsNonRoot", "RuntimeDefault",
		"allowPrivilegeEscalation == false", "readOnlyRootFilesystem", "'ALL' in c.securityContext.capabilities.drop", strconv.Quote(c.mountNamespace)} {
		if !strings.Contains(all+pol.Spec.Variables[0].Expression, want) {
			t.Errorf("the admission policy does not check %s", want)
		}
	}
}
