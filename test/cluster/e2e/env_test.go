package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-rclone/csi-rclone/test/cluster"
)

const (
	ns           = "alice"
	busyboxImage = "csi-rclone.test/busybox:1"
	storageClass = "csi-rclone-secret-annotation"
)

// env is the running cluster and what the test made in it.
type env struct {
	t      *testing.T
	c      *cluster.Cluster
	client kubernetes.Interface
}

// waitFor polls cond every 500 ms until it is true or timeout passes.
func (e *env) waitFor(ctx context.Context, what string, timeout time.Duration, cond func() (bool, error)) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		select {
		case <-ctx.Done():
			e.t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	e.t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
}

func (e *env) secret(ctx context.Context, name string, data map[string]string) {
	e.t.Helper()
	_, err := e.client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		StringData: data,
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
}

// pvc makes a claim on the chart's StorageClass, its stage secret named by
// the annotation, as Renku does.
func (e *env) pvc(ctx context.Context, name, secretName string, mode corev1.PersistentVolumeAccessMode) {
	e.t.Helper()
	_, err := e.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{"csi-rclone.dev/secretName": secretName}},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr(storageClass),
			AccessModes:      []corev1.PersistentVolumeAccessMode{mode},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
}

// bound waits for csi-provisioner to create and bind the claim's PV.
func (e *env) bound(ctx context.Context, name string) string {
	e.t.Helper()
	var pv string
	e.waitFor(ctx, "PVC "+name+" bound", 2*time.Minute, func() (bool, error) {
		c, err := e.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pv = c.Spec.VolumeName
		return c.Status.Phase == corev1.ClaimBound, nil
	})
	return pv
}

func ptr[T any](v T) *T { return &v }

// loopScript reads and writes through the mount without end, one line per
// try: "<uptime> ok" or "<uptime> fail <what>". The node's uptime (the
// pods share the kernel) times the interruptions.
func loopScript(dir, name string) string {
	return fmt.Sprintf(`mkdir -p %[1]s 2>/dev/null
# Written once: uploaded while the loop keeps rewriting its own file.
echo "%[2]s hello" > %[1]s/%[2]s-once.txt
i=0
while true; do
  i=$((i+1))
  now=$(cut -d' ' -f1 /proc/uptime)
  if ! { echo "%[2]s $i" > %[1]s/%[2]s.txt; } 2>/tmp/err; then
    echo "$now fail write $(cat /tmp/err)"
  elif ! grep -q "%[2]s $i" %[1]s/%[2]s.txt 2>/tmp/err; then
    echo "$now fail read $(cat /tmp/err)"
  elif ! ls %[1]s >/dev/null 2>/tmp/err; then
    echo "$now fail list $(cat /tmp/err)"
  else
    echo "$now ok"
  fi
  sleep 0.2
done
`, dir, name)
}

type podOpts struct {
	name, claim, subPath string
	readOnly             bool
	script               string
}

// pod is a non-root session pod with an fsGroup that mounts a claim at
// /data with HostToContainer propagation.
func (e *env) pod(ctx context.Context, o podOpts) {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: o.name, Namespace: ns},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(1000)), FSGroup: ptr(int64(1000)), RunAsNonRoot: ptr(true),
			},
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name:            "session",
				Image:           busyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/bin/sh", "-c", o.script},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts: []corev1.VolumeMount{{
					Name: "data", MountPath: "/data", SubPath: o.subPath, ReadOnly: o.readOnly,
					MountPropagation: ptr(corev1.MountPropagationHostToContainer),
				}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: o.claim, ReadOnly: o.readOnly},
			}}},
		},
	}
	if _, err := e.client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) running(ctx context.Context, name string) *corev1.Pod {
	e.t.Helper()
	var pod *corev1.Pod
	e.waitFor(ctx, "pod "+name+" running", 3*time.Minute, func() (bool, error) {
		p, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning, fmt.Errorf("phase %s", p.Status.Phase)
	})
	return pod
}

// logLine is one try of loopScript.
type logLine struct {
	at   float64
	ok   bool
	text string
}

func (e *env) logs(ctx context.Context, pod string) []logLine {
	e.t.Helper()
	data, err := e.client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		e.t.Fatalf("logs of %s: %v", pod, err)
	}
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		at, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		out = append(out, logLine{at: at, ok: f[1] == "ok", text: sc.Text()})
	}
	return out
}

func uptime() float64 {
	data, _ := os.ReadFile("/proc/uptime")
	v, _ := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	return v
}

// interruption is what a pod saw from since on: the longest time between
// two successful tries and the number of failed ones.
type interruption struct {
	longest   time.Duration
	failed    int
	firstFail string
}

func measure(lines []logLine, since float64) interruption {
	var in interruption
	last := since
	for _, l := range lines {
		if l.at < since {
			continue
		}
		if !l.ok {
			in.failed++
			if in.firstFail == "" {
				in.firstFail = l.text
			}
			continue
		}
		if gap := time.Duration((l.at - last) * float64(time.Second)); gap > in.longest {
			in.longest = gap
		}
		last = l.at
	}
	return in
}

// recovered waits until each pod has had ok tries after at, and reports
// what it saw since since.
func (e *env) recovered(ctx context.Context, what string, since float64, pods ...string) map[string]interruption {
	e.t.Helper()
	at := uptime()
	out := map[string]interruption{}
	for _, p := range pods {
		e.waitFor(ctx, p+" reading and writing after "+what, 3*time.Minute, func() (bool, error) {
			lines := e.logs(ctx, p)
			n := 0
			for _, l := range lines {
				if l.at > at && l.ok {
					n++
				}
			}
			// The last tries all succeed.
			if n >= 3 && lines[len(lines)-1].ok {
				out[p] = measure(lines, since)
				return true, nil
			}
			return false, nil
		})
		in := out[p]
		e.t.Logf("%s: pod %s: longest interruption %s, %d failed operations %s", what, p, in.longest.Round(10*time.Millisecond), in.failed, in.firstFail)
	}
	return out
}

// notRestarted checks that the pods are the same pods, never restarted.
func (e *env) notRestarted(ctx context.Context, uids map[string]string) {
	e.t.Helper()
	e.notRestartedIn(ctx, ns, uids)
}

// notRestartedIn is notRestarted for the pods of namespace.
func (e *env) notRestartedIn(ctx context.Context, namespace string, uids map[string]string) {
	e.t.Helper()
	for name, uid := range uids {
		p, err := e.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		if string(p.UID) != uid {
			e.t.Errorf("pod %s was replaced", name)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				e.t.Errorf("pod %s: container %s restarted %d times", name, cs.Name, cs.RestartCount)
			}
		}
	}
}

func (e *env) deletePod(ctx context.Context, name string) {
	e.t.Helper()
	err := e.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(1))})
	if err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
	e.waitFor(ctx, "pod "+name+" gone", 2*time.Minute, func() (bool, error) {
		_, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}

// nodeMounts lists the rclone FUSE mounts under the cluster's work dir.
func nodeMounts(workDir string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || !strings.HasPrefix(f[4], workDir) {
			continue
		}
		for i, x := range f {
			if x == "-" && i+1 < len(f) && strings.HasPrefix(f[i+1], "fuse") {
				out = append(out, f[4])
			}
		}
	}
	return out
}

// inCluster says whether a process runs in the cluster's containers (the
// kubelet's cgroups): other tests on the machine run the same binary.
func inCluster(pid string) bool {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	return err == nil && strings.Contains(string(data), "/"+cluster.CgroupDir+"/")
}

// workers lists the mount worker processes on the node.
func workers() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, en := range entries {
		if _, err := strconv.Atoi(en.Name()); err != nil || !inCluster(en.Name()) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", en.Name(), "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 1 && filepath.Base(args[0]) == "csi-rclone" && args[1] == "mount-worker" {
			out = append(out, en.Name())
		}
	}
	return out
}

// driverPID is the node plugin's driver process, seen from the host.
func driverPID() int {
	entries, _ := os.ReadDir("/proc")
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil || !inCluster(en.Name()) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", en.Name(), "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) == "csi-rclone" && strings.Contains(string(cmdline), "--mode=node") {
			return pid
		}
	}
	return 0
}
