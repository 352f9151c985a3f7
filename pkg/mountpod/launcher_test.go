package mountpod

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/secrets"
)

const (
	testNode = "node-a"
	testUID  = 2000000007
)

func newTestLauncher(t *testing.T, objs ...*corev1.Pod) (*Launcher, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset()
	for _, o := range objs {
		if _, err := client.CoreV1().Pods(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := New(Options{
		Client: client, Namespace: "csi-rclone-mounts", NodeName: testNode, DriverName: "csi-rclone",
		Version: "v1.2.3", Image: "example.org/csi-rclone:v1.2.3", KubeletDir: t.TempDir(),
		Resources: Resources{
			CPURequest: resource.MustParse("50m"), CPULimit: resource.MustParse("1"),
			MemoryRequest: resource.MustParse("64Mi"), MemoryLimit: resource.MustParse("1Gi"),
			CacheSize: resource.MustParse("5Gi"),
		},
		Max: Resources{MemoryLimit: resource.MustParse("4Gi"), CPULimit: resource.MustParse("2")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return l, client
}

// Start makes the volume's pod before it mounts; the mount fails here (no
// mount point), which leaves the pod to look at. Nothing of the spec's
// config is in the pod: not in its spec, env, args, labels or annotations.
func TestPodHasNoCredential(t *testing.T) {
	l, client := newTestLauncher(t)
	const key, token = "s3cr3t-access-key-9f8e7d", "override-token-abcdef"
	spec := worker.Spec{
		VolumeID: "pvc-1", MountPoint: "/nonexistent/mount/point", CacheDir: "/var/lib/csi-rclone/cache/x",
		Volume: secrets.Volume{
			Config: secrets.Config{"s3": {"type": "s3", "access_key_id": "AKIDEXAMPLE123", "secret_access_key": key, "session_token": token}},
			Remote: "s3", Path: "bucket",
			Secrets:  []string{token},
			MountOpt: map[string]string{"allow_other": "true"},
		},
	}
	_, err := l.Start(context.Background(), worker.Options{UID: testUID, GID: testUID}, spec)
	if err == nil {
		t.Fatal("start without a mount point succeeded")
	}
	for _, v := range []string{key, token, "AKIDEXAMPLE123"} {
		if strings.Contains(err.Error(), v) {
			t.Fatalf("the error has a credential: %v", err)
		}
	}
	var created []runtime.Object
	for _, a := range client.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok {
			created = append(created, c.GetObject())
		}
	}
	if len(created) != 1 {
		t.Fatalf("%d objects created, want the mount pod", len(created))
	}
	raw, err := json.Marshal(created)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{key, token, "AKIDEXAMPLE123"} {
		if strings.Contains(string(raw), v) {
			t.Fatalf("the mount pod has a credential %q: %s", v, raw)
		}
	}
	// A failed stage leaves no pod of its own.
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		list, err := client.CoreV1().Pods("csi-rclone-mounts").List(context.Background(), metav1.ListOptions{})
		if err == nil && len(list.Items) == 0 {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the failed stage's pod is still there: %v %v", list, err)
		}
	}
}

// The pod passes Pod Security "restricted", as the kube-apiserver's own
// admission evaluates it, and has what the node plugin's admission policy
// asks for.
func TestPodIsRestricted(t *testing.T) {
	l, _ := newTestLauncher(t)
	pod := l.spec("pvc-1", testUID).pod()

	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}
	for _, r := range ev.EvaluatePod(lv, &pod.ObjectMeta, &pod.Spec) {
		if !r.Allowed {
			t.Errorf("restricted: %s: %s", r.ForbiddenReason, r.ForbiddenDetail)
		}
	}

	// The evaluator does refuse: a pod that may escalate is not restricted.
	bad := pod.DeepCopy()
	yes := true
	bad.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = &yes
	refused := false
	for _, r := range ev.EvaluatePod(lv, &bad.ObjectMeta, &bad.Spec) {
		refused = refused || !r.Allowed
	}
	if !refused {
		t.Fatal("the evaluator allowed privilege escalation")
	}

	s, c := pod.Spec, pod.Spec.Containers[0]
	for _, check := range []struct {
		what string
		ok   bool
	}{
		{"on this node", s.NodeName == testNode},
		{"no service account token", s.AutomountServiceAccountToken != nil && !*s.AutomountServiceAccountToken},
		{"not host network, pid or ipc", !s.HostNetwork && !s.HostPID && !s.HostIPC},
		{"the worker's uid", *s.SecurityContext.RunAsUser == testUID && *s.SecurityContext.RunAsGroup == testUID},
		{"read-only root", c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem},
		{"the driver's image", c.Image == "example.org/csi-rclone:v1.2.3"},
		{"the worker command", len(c.Args) > 0 && c.Args[0] == "mount-worker"},
		{"restarts with its cache", s.RestartPolicy == corev1.RestartPolicyAlways},
		{"memory limit", c.Resources.Limits.Memory().String() == "1Gi"},
		{"cpu request", c.Resources.Requests.Cpu().String() == "50m"},
		{"version label", pod.Labels[LabelVersion] == "v1.2.3"},
		{"volume id annotation", pod.Annotations[AnnotationVolumeID] == "pvc-1"},
	} {
		if !check.ok {
			t.Errorf("pod: not %s", check.what)
		}
	}
	for _, v := range s.Volumes {
		if v.EmptyDir == nil {
			t.Errorf("volume %s is not an emptyDir", v.Name)
		}
		if v.Name == cacheVolume && (v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.String() != "5Gi") {
			t.Errorf("cache sizeLimit %v", v.EmptyDir.SizeLimit)
		}
	}
	if t.Failed() {
		out, _ := yaml.Marshal(pod)
		t.Logf("%s", out)
	}
}

func TestEnsure(t *testing.T) {
	other := func(mod func(*corev1.Pod)) *corev1.Pod {
		l, _ := newTestLauncher(t)
		p := l.spec("pvc-1", testUID).pod()
		p.UID = "old"
		mod(p)
		return p
	}
	for _, tc := range []struct {
		name    string
		there   *corev1.Pod
		reused  bool
		created int
	}{
		{"none: made", nil, false, 1},
		{"there: used as it is", other(func(*corev1.Pod) {}), true, 0},
		{"another uid: replaced", other(func(p *corev1.Pod) { u := int64(1); p.Spec.SecurityContext.RunAsUser = &u }), false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l *Launcher
			var client *fake.Clientset
			if tc.there != nil {
				l, client = newTestLauncher(t, tc.there)
			} else {
				l, client = newTestLauncher(t)
			}
			pod, created, err := l.ensure(context.Background(), "pvc-1", testUID, l.opts.Resources)
			if err != nil {
				t.Fatal(err)
			}
			if created != (tc.created == 1) {
				t.Fatalf("created %t", created)
			}
			if got := pod.UID == "old"; got != tc.reused {
				t.Fatalf("reused %t, want %t", got, tc.reused)
			}
			if *pod.Spec.SecurityContext.RunAsUser != testUID {
				t.Fatalf("runs as %d", *pod.Spec.SecurityContext.RunAsUser)
			}
			creates := 0
			for _, a := range client.Actions() {
				if a.GetVerb() == "create" && a.GetResource().Resource == "pods" {
					creates++
				}
			}
			if tc.there != nil {
				creates-- // the test's own
			}
			if creates != tc.created {
				t.Fatalf("%d pods created, want %d", creates, tc.created)
			}
		})
	}
}

// Pods finds this node's and this driver's mount pods only; Sweep deletes
// those no volume keeps.
func TestPodsAndSweep(t *testing.T) {
	l0, _ := newTestLauncher(t)
	mine := l0.spec("kept", testUID).pod()
	orphan := l0.spec("orphan", testUID).pod()
	elsewhere := l0.spec("kept", testUID)
	elsewhere.node = "node-b"
	otherDriver := l0.spec("kept2", testUID)
	otherDriver.driver = "another"
	l, client := newTestLauncher(t, mine, orphan, elsewhere.pod(), otherDriver.pod())

	pods, err := l.Pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 2 || pods["kept"] == nil || pods["orphan"] == nil {
		t.Fatalf("pods %v", pods)
	}
	// A stage that began since the start is not swept either.
	staged := l0.spec("staged-now", testUID).pod()
	if _, err := client.CoreV1().Pods(staged.Namespace).Create(context.Background(), staged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.staging["staged-now"] = true
	l.mu.Unlock()
	if pods, err = l.Pods(context.Background()); err != nil || len(pods) != 3 {
		t.Fatalf("pods %v, %v", pods, err)
	}
	l.Sweep(context.Background(), pods, func(id string) bool { return id == "kept" })
	list, _ := client.CoreV1().Pods("csi-rclone-mounts").List(context.Background(), metav1.ListOptions{})
	names := map[string]bool{}
	for _, p := range list.Items {
		names[p.Name] = true
	}
	if names[orphan.Name] || !names[mine.Name] || !names[staged.Name] || len(names) != 4 {
		t.Fatalf("after sweep: %v", names)
	}
	if _, err := l.Adopt(context.Background(), "gone", nil); !errors.Is(err, ErrNoPod) {
		t.Fatalf("adopt without pod: %v", err)
	}
}

func TestCannotRun(t *testing.T) {
	waiting := func(reason string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}}}
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		fail bool
	}{
		{waiting("ContainerCreating"), false},
		{waiting("CrashLoopBackOff"), false}, // it comes back by itself
		{waiting("ErrImagePull"), true},
		{waiting("CreateContainerConfigError"), true},
		{&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, true},
		{&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, false},
	} {
		if got := cannotRun(tc.pod) != ""; got != tc.fail {
			t.Errorf("%+v: cannot run %t, want %t", tc.pod.Status, got, tc.fail)
		}
	}
}

func TestCacheSizeOf(t *testing.T) {
	def := resource.MustParse("3Gi")
	for in, want := range map[string]string{"": "3Gi", "off": "3Gi", "10G": "11Gi", "512M": "1536Mi"} {
		if got := cacheSizeOf(map[string]string{"vfs_cache_max_size": in}, def); got.String() != want {
			t.Errorf("cacheSizeOf(%q) = %s, want %s", in, got.String(), want)
		}
	}
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{"v1.2.3": "v1.2.3", "dev": "dev", "1.0+git/abc": "1.0gitabc", "-x-": "x", strings.Repeat("a", 70): strings.Repeat("a", 63)} {
		if got := labelValue(in); got != want {
			t.Errorf("labelValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// The pods-per-version gauge counts each pod once, from the plugin that
// made or adopted it until it is deleted.
func TestPodsPerVersion(t *testing.T) {
	l, _ := newTestLauncher(t)
	old := l.spec("a", testUID).pod()
	old.UID, old.Labels[LabelVersion] = "u1", "v1.0.0"
	cur := l.spec("b", testUID).pod()
	cur.UID = "u2"
	gauge := func(v string) float64 { return testutil.ToFloat64(metricPods.WithLabelValues(v)) }
	base0, base1 := gauge("v1.0.0"), gauge("v1.2.3")
	l.track(old, true)
	l.track(old, true) // adopted, then started again: still one
	l.track(cur, true)
	if gauge("v1.0.0")-base0 != 1 || gauge("v1.2.3")-base1 != 1 {
		t.Fatalf("gauges %v %v", gauge("v1.0.0")-base0, gauge("v1.2.3")-base1)
	}
	l.track(old, false)
	l.track(old, false)
	if gauge("v1.0.0") != base0 {
		t.Fatalf("after delete: %v", gauge("v1.0.0")-base0)
	}
}

// A volume lowers its pod's resources, or raises them up to the operator's
// maximums.
func TestResourcesFor(t *testing.T) {
	l, _ := newTestLauncher(t)
	for _, tc := range []struct {
		name           string
		asked          map[string]string
		memReq, memLim string
		cpuReq, cpuLim string
		wantErr        bool
	}{
		{"defaults", nil, "64Mi", "1Gi", "50m", "1", false},
		{"lower", map[string]string{KeyMemoryLimit: "256Mi", KeyCPULimit: "500m"}, "64Mi", "256Mi", "50m", "500m", false},
		{"higher, within the maximum", map[string]string{KeyMemoryLimit: "4Gi", KeyMemoryRequest: "1Gi", KeyCPULimit: "2"}, "1Gi", "4Gi", "50m", "2", false},
		{"a request above its limit is lowered", map[string]string{KeyMemoryRequest: "2Gi"}, "1Gi", "1Gi", "50m", "1", false},
		{"above the maximum", map[string]string{KeyMemoryLimit: "8Gi"}, "", "", "", "", true},
		{"cpu above the maximum", map[string]string{KeyCPULimit: "3"}, "", "", "", "", true},
		{"not a quantity", map[string]string{KeyMemoryLimit: "lots"}, "", "", "", "", true},
		{"zero", map[string]string{KeyCPURequest: "0"}, "", "", "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := l.resourcesFor(tc.asked)
			if tc.wantErr {
				if !errors.Is(err, worker.ErrInvalid) {
					t.Fatalf("error %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := []string{res.MemoryRequest.String(), res.MemoryLimit.String(), res.CPURequest.String(), res.CPULimit.String()}
			want := []string{tc.memReq, tc.memLim, tc.cpuReq, tc.cpuLim}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("got %v, want %v", got, want)
			}
		})
	}
}
