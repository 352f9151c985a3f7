package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/csi-rclone/csi-rclone/pkg/mountpod"
	"github.com/csi-rclone/csi-rclone/test/cluster"
)

// mountNS is the chart's namespace of the mount pods (release csi-rclone).
const mountNS = "csi-rclone-mounts"

// mounterMode is the node plugin's --mounter for this run: process (the
// default) or pod (CSI_RCLONE_E2E_MOUNTER=pod, make e2e-cluster MOUNTER=pod).
func mounterMode() string {
	if m := os.Getenv("CSI_RCLONE_E2E_MOUNTER"); m != "" {
		return m
	}
	return "process"
}

// heldScript holds one file open for reading and one for writing, and its
// working directory, in the mount for the whole test, and tries each once a
// round, with loopScript's lines. Only mounts that never die (mount pods)
// keep these: a mount made again is another filesystem.
func heldScript() string {
	return `mkdir -p /data/held && cd /data/held || exit 1
if [ ! -f ro.txt ]; then
  i=0; while [ $i -lt 20000 ]; do echo "line $i"; i=$((i+1)); done > ro.txt
fi
exec 3< ro.txt
exec 4>> w.txt
i=0
while true; do
  i=$((i+1))
  now=$(cut -d' ' -f1 /proc/uptime)
  if ! read -r line <&3 2>/tmp/err; then
    echo "$now fail read-held $(cat /tmp/err)"
  elif ! { echo "held $i" >&4; } 2>/tmp/err; then
    echo "$now fail write-held $(cat /tmp/err)"
  elif ! ls . >/dev/null 2>/tmp/err; then
    echo "$now fail cwd $(cat /tmp/err)"
  else
    echo "$now ok"
  fi
  sleep 0.2
done
`
}

// mountPods lists the mount pods, by volume id.
func mountPods(ctx context.Context, e *env) map[string]corev1.Pod {
	e.t.Helper()
	list, err := e.client.CoreV1().Pods(mountNS).List(ctx, metav1.ListOptions{LabelSelector: mountpod.LabelApp + "=" + mountpod.AppName})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out[p.Annotations[mountpod.AnnotationVolumeID]] = p
		}
	}
	return out
}

// runningMountPod waits for volume's mount pod to run, and returns it.
func runningMountPod(ctx context.Context, e *env, volume string, not string) corev1.Pod {
	e.t.Helper()
	var pod corev1.Pod
	e.waitFor(ctx, "the mount pod of "+volume+" running", 3*time.Minute, func() (bool, error) {
		p, ok := mountPods(ctx, e)[volume]
		pod = p
		return ok && string(p.UID) != not && p.Status.Phase == corev1.PodRunning, nil
	})
	return pod
}

// checkMountPods: one pod per staged volume, on the node, passing the
// namespace's Pod Security "restricted" (it was admitted), and no credential
// anywhere in the objects.
func checkMountPods(ctx context.Context, e *env, volumes []string, credentials ...string) {
	e.t.Helper()
	pods := mountPods(ctx, e)
	for _, v := range volumes {
		p, ok := pods[v]
		if !ok {
			e.t.Errorf("no mount pod for volume %s (pods: %d)", v, len(pods))
			continue
		}
		if p.Spec.NodeName != cluster.NodeName || p.Spec.HostNetwork {
			e.t.Errorf("mount pod %s: node %q, hostNetwork %t", p.Name, p.Spec.NodeName, p.Spec.HostNetwork)
		}
		// Its log: the worker's own confinement, and no credential.
		data, err := e.client.CoreV1().Pods(mountNS).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "worker confined") {
				e.t.Logf("mount pod %s: %s", p.Name, line)
			}
		}
		for _, c := range credentials {
			if strings.Contains(string(data), c) {
				e.t.Errorf("mount pod %s's log holds a credential", p.Name)
			}
		}
	}
	raw, err := json.Marshal(pods)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, c := range credentials {
		if strings.Contains(string(raw), c) {
			e.t.Errorf("a mount pod object holds a credential")
		}
	}
}

// policyRefuses shows the node plugin's limits on the real API server: as
// the node plugin's ServiceAccount with its token's node name, a copy of a
// live mount pod is admitted (dry run), and each change outside the rules
// is refused, by the admission policy or by RBAC. image is the chart's
// image now; live may run an older one (it keeps it until its volume is
// unstaged), which no new pod may.
func policyRefuses(ctx context.Context, t *testing.T, c *cluster.Cluster, live corev1.Pod, image string) {
	as := func(node string) kubernetes.Interface {
		cfg := rest.CopyConfig(c.Config)
		cfg.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:" + releaseNS + ":" + release + "-node",
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS, "system:authenticated"},
			Extra:    map[string][]string{"authentication.kubernetes.io/node-name": {node}},
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return client
	}
	base := func() *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "policy-test", Namespace: mountNS, Labels: live.Labels}, Spec: *live.Spec.DeepCopy()}
		p.Spec.Volumes = nil
		p.Spec.Containers[0].VolumeMounts = nil
		p.Spec.Containers[0].Image = image
		return p
	}
	for _, tc := range []struct {
		name   string
		node   string // the caller's node
		change func(*corev1.Pod)
		want   string // "" admitted; else in the refusal
	}{
		{"a mount pod as the plugin makes it", cluster.NodeName, func(*corev1.Pod) {}, ""},
		{"on another node", "another-node", func(*corev1.Pod) {}, "own node"},
		{"another image", cluster.NodeName, func(p *corev1.Pod) { p.Spec.Containers[0].Image = busyboxImage }, "driver's image"},
		{"the driver's image before the upgrade", cluster.NodeName, func(p *corev1.Pod) { p.Spec.Containers[0].Image = live.Spec.Containers[0].Image }, "driver's image"},
		{"a hostPath", cluster.NodeName, func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}, "hostPath"},
		{"a ConfigMap volume (restricted allows it)", cluster.NodeName, func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}}}}}
		}, "emptyDir volumes only"},
		// The ServiceAccount admission adds the token's projected volume.
		{"an API token", cluster.NodeName, func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = ptr(true) }, "token"},
		{"host network", cluster.NodeName, func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "host"},
		{"in another namespace", cluster.NodeName, func(p *corev1.Pod) { p.Namespace = ns }, "forbidden"},
	} {
		p := base()
		tc.change(p)
		_, err := as(tc.node).CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && err == nil:
			t.Errorf("%s: admitted", tc.name)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: refused for another reason: %v", tc.name, err)
		case tc.want != "":
			t.Logf("%s: refused: %v", tc.name, err)
		}
	}
	// Nor may it touch pods outside the mount namespace at all.
	if _, err := as(cluster.NodeName).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the node plugin lists pods of %s: %v", ns, err)
	}
}

// killWorker kills the mount worker of a mount pod, as the OOM killer
// would, and returns its pid.
func killWorker(t *testing.T, volume string) int {
	for _, pid := range workers() {
		cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		if strings.Contains(string(cmdline), "\x00--volume-id\x00"+volume+"\x00") {
			var n int
			fmt.Sscan(pid, &n)
			if err := syscall.Kill(n, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no mount worker of %s", volume)
	return 0
}
