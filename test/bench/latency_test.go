package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-rclone/csi-rclone/test/bench/benchkit"
)

// reportLatencies reports p50, p95 and (as ns/op) the mean of d.
func reportLatencies(b *testing.B, d []time.Duration) {
	b.ReportMetric(float64(benchkit.Mean(d).Nanoseconds()), "ns/op")
	b.ReportMetric(benchkit.Ms(benchkit.Percentile(d, 0.50)), "p50-ms")
	b.ReportMetric(benchkit.Ms(benchkit.Percentile(d, 0.95)), "p95-ms")
	b.ReportMetric(float64(len(d)), "samples")
}

// stopDriver kills the node plugin and its workers and removes their
// mounts, leaving the kubelet root and the state tmpfs.
func (e *env) stopDriver() {
	if e.driver != nil {
		e.driver.kill9()
		e.driver = nil
	}
	for _, pids := range e.workerPIDs() {
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	if e.kubelet != nil {
		benchkit.UnmountBelow(e.kubelet.Root)
	}
	benchkit.UnmountBelow(e.stateDir)
}

// BenchmarkNodeStageVolume: NodeStageVolume of -bench.volumes volumes, one
// after the other (each its own bucket and worker, the earlier ones staying
// mounted), against `rclone mount --daemon` of the same buckets until the
// mount is in mountinfo and answers a stat. One volume of each is staged
// first and not counted (first-ms): it pays for loading the binary.
func BenchmarkNodeStageVolume(b *testing.B) {
	n := *flagVolumes
	e := newEnv(b, "stage", seedBuckets(n+1))

	b.Run("csi-rclone", func(b *testing.B) {
		e.startDriver(b)
		defer e.stopDriver()
		first := e.stage(b, e.volume(n))
		var took []time.Duration
		for i := 0; i < n; i++ {
			took = append(took, e.stage(b, e.volume(i)))
		}
		reportLatencies(b, took)
		b.ReportMetric(benchkit.Ms(first), "first-ms")
	})

	b.Run("rclone-mount", func(b *testing.B) {
		defer e.unmountAll()
		_, first := e.rcloneMount(b, bucket(n), filepath.Join(e.dir, "plain", bucket(n)), "mount")
		var took []time.Duration
		for i := 0; i < n; i++ {
			_, d := e.rcloneMount(b, bucket(i), filepath.Join(e.dir, "plain", bucket(i)), "mount")
			took = append(took, d)
		}
		reportLatencies(b, took)
		b.ReportMetric(benchkit.Ms(first), "first-ms")
	})
}

// BenchmarkNodePublishVolume: NodePublishVolume of -bench.volumes staged
// volumes to -bench.targets pods each, against the bind mount alone: one
// mount(2) MS_BIND of the same staging paths onto targets in the same
// kubelet pods dir.
func BenchmarkNodePublishVolume(b *testing.B) {
	n, t := *flagVolumes, *flagTargets
	e := newEnv(b, "publish", seedBuckets(n))
	e.startDriver(b)
	defer e.stopDriver()
	for i := 0; i < n; i++ {
		e.stage(b, e.volume(i))
	}
	_, _ = e.publish(b, e.volume(0), "pod-warm-up")

	b.Run("csi-rclone", func(b *testing.B) {
		var took []time.Duration
		for j := 0; j < t; j++ {
			for i := 0; i < n; i++ {
				_, d := e.publish(b, e.volume(i), podName(i, j))
				took = append(took, d)
			}
		}
		reportLatencies(b, took)
	})

	b.Run("bind-mount", func(b *testing.B) {
		var took []time.Duration
		var targets []string
		defer func() {
			for _, target := range targets {
				_ = unix.Unmount(target, unix.MNT_DETACH)
			}
		}()
		for j := 0; j < t; j++ {
			for i := 0; i < n; i++ {
				v := e.volume(i)
				target := e.kubelet.TargetPath(v, "bind-"+podName(i, j))
				if err := os.MkdirAll(target, 0o750); err != nil {
					b.Fatal(err)
				}
				staging := e.kubelet.StagingPath(v)
				start := time.Now()
				err := unix.Mount(staging, target, "", unix.MS_BIND, "")
				took = append(took, time.Since(start))
				if err != nil {
					b.Fatalf("bind %s: %v", target, err)
				}
				targets = append(targets, target)
			}
		}
		// The binds serve the volume, as a published target does.
		if err := readsSeed(targets[0], bucket(0)); err != nil {
			b.Fatal(fmt.Errorf("through a bind: %w", err))
		}
		reportLatencies(b, took)
	})
}
