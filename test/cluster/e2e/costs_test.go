package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-rclone/csi-rclone/test/s3server"
)

// costVolumes is how many idle volumes the costs are measured on.
const costVolumes = 6

// measureCosts stages costVolumes volumes one after another, each used by
// an idle pod, and logs NodeStageVolume's p50 and p95 (from the plugin's
// own "call done" lines: the kubelet's overhead is not in them) and the
// memory each idle volume costs the node: its worker's RSS, and in pod mode
// also its mount pod's pause process and containerd shim. It measures; it
// asserts nothing but that the volumes work.
func measureCosts(ctx context.Context, t *testing.T, e *env, s3 *s3server.Server, sealed string) {
	var names []string
	for i := range costVolumes {
		name := fmt.Sprintf("cost-%d", i)
		names = append(names, name)
		e.secret(ctx, name, map[string]string{
			"remote": "store", "remotePath": bucket,
			"configData": s3server.RcloneConfig("store", s3.Endpoint, accessKey, sealed),
		})
		e.pvc(ctx, name, name, corev1.ReadWriteMany)
		e.bound(ctx, name)
		e.pod(ctx, podOpts{name: name, claim: name, script: "sleep 3600"})
		e.running(ctx, name)
	}
	time.Sleep(3 * time.Second) // idle: past the first listing
	var handles []string
	for _, n := range names {
		c, err := e.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, volumeHandle(ctx, e, c.Spec.VolumeName))
	}
	stages := stageDurations(ctx, t, e)
	if len(stages) >= costVolumes {
		stages = stages[len(stages)-costVolumes:]
		slices.Sort(stages)
		t.Logf("COST %s: NodeStageVolume over %d volumes: p50 %s, p95 %s (max)", mounterMode(), len(stages),
			stages[len(stages)/2].Round(time.Millisecond), stages[len(stages)-1].Round(time.Millisecond))
	} else {
		t.Logf("COST %s: only %d NodeStageVolume durations in the plugin's log", mounterMode(), len(stages))
	}
	var total int64
	for _, h := range handles {
		total += volumeRSS(t, e, ctx, h)
	}
	t.Logf("COST %s: memory per idle volume: %.1f MiB RSS (mean of %d)", mounterMode(), float64(total)/float64(len(handles))/(1<<20), len(handles))
	for _, n := range names {
		e.deletePod(ctx, n)
		deletePVC(ctx, e, n)
	}
}

// stageDurations are the durations of the NodeStageVolume calls the node
// plugin logged, in order.
func stageDurations(ctx context.Context, t *testing.T, e *env) []time.Duration {
	p := nodePluginPod(ctx, e)
	if p == nil {
		t.Fatal("no node plugin pod")
	}
	data, err := e.client.CoreV1().Pods(releaseNS).GetLogs(p.Name, &corev1.PodLogOptions{Container: "csi-rclone"}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Duration
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"call done"`) || !strings.Contains(line, "NodeStageVolume") {
			continue
		}
		_, rest, ok := strings.Cut(line, `duration="`)
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, `"`)
		if d, err := time.ParseDuration(v); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// volumeRSS is the resident memory of a volume's worker, plus, for a mount
// pod, its pause process and its containerd shim.
func volumeRSS(t *testing.T, e *env, ctx context.Context, handle string) int64 {
	var rss int64
	for _, pid := range workers() {
		cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		if strings.Contains(string(cmdline), "\x00--volume-id\x00"+handle+"\x00") {
			rss += rssOf(pid)
		}
	}
	if mounterMode() != "pod" {
		return rss
	}
	mp, ok := mountPods(ctx, e)[handle]
	if !ok {
		t.Errorf("no mount pod for %s", handle)
		return rss
	}
	// The pod's cgroups (cgroupfs driver): .../pod<uid>/<container id>.
	marker := "pod" + string(mp.UID) + "/"
	ids := map[string]bool{}
	entries, _ := os.ReadDir("/proc")
	for _, en := range entries {
		if _, err := strconv.Atoi(en.Name()); err != nil {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", en.Name(), "cgroup"))
		for _, line := range strings.Split(string(cg), "\n") {
			if i := strings.Index(line, marker); i >= 0 {
				ids[filepath.Base(strings.TrimSpace(line[i+len(marker):]))] = true
				if !slices.Contains(workers(), en.Name()) {
					rss += rssOf(en.Name()) // the pause process
				}
				break
			}
		}
	}
	for _, en := range entries {
		cmdline, _ := os.ReadFile(filepath.Join("/proc", en.Name(), "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-id" && i+1 < len(args) && ids[args[i+1]] {
				rss += rssOf(en.Name())
			}
		}
	}
	return rss
}

func rssOf(pid string) int64 {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
