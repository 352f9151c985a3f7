package bench

import (
	"errors"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/csi-rclone/csi-rclone/test/bench/benchkit"
)

// settle is how long processes idle before their memory is read.
const settle = 2 * time.Second

type target struct {
	path   string
	bucket string
	vol    int
}

// stageAndPublish stages volumes 0..n-1 and publishes each to t pods, and
// checks that every target reads; it returns the targets and the stage
// latencies.
func (e *env) stageAndPublish(b *testing.B, n, t int) ([]target, []time.Duration) {
	b.Helper()
	var targets []target
	var staged []time.Duration
	for i := 0; i < n; i++ {
		v := e.volume(i)
		staged = append(staged, e.stage(b, v))
		for j := 0; j < t; j++ {
			path, _ := e.publish(b, v, podName(i, j))
			targets = append(targets, target{path: path, bucket: bucket(i), vol: i})
		}
	}
	untilAll(b, time.Now(), len(targets), func(i int) error { return readsSeed(targets[i].path, targets[i].bucket) })
	return targets, staged
}

func reportMemory(b *testing.B, m benchkit.Memory) {
	b.ReportMetric(benchkit.MiB(m.PSS), "PSS-MiB")
	b.ReportMetric(benchkit.MiB(m.RSS), "RSS-MiB")
	b.ReportMetric(float64(m.Procs), "procs")
}

// BenchmarkMemory: resident memory of the node plugin and its workers with
// -bench.volumes volumes published to -bench.targets pods each, every
// target read once, then idle; against one plain `rclone mount` per pod
// and volume. PSS splits the pages that processes share (the binary's
// code) between them, so sums of PSS add up to what the node gives; RSS
// counts shared pages in every process.
func BenchmarkMemory(b *testing.B) {
	n, t := *flagVolumes, *flagTargets
	e := newEnv(b, "memory", seedBuckets(n))

	b.Run("csi-rclone", func(b *testing.B) {
		e.startDriver(b)
		defer e.stopDriver()
		time.Sleep(settle)
		alone := benchkit.MemoryOf([]int{e.driver.cmd.Process.Pid})
		e.stageAndPublish(b, n, t)
		time.Sleep(settle)
		pids := e.driverPIDs()
		if len(pids) != n+1 {
			b.Fatalf("%d processes, want the driver and %d workers", len(pids), n)
		}
		m := benchkit.MemoryOf(pids)
		reportMemory(b, m)
		b.ReportMetric(benchkit.MiB(alone.PSS), "driver-alone-PSS-MiB")
		b.ReportMetric(benchkit.MiB(m.PSS-alone.PSS)/float64(n), "per-volume-PSS-MiB")
		b.ReportMetric(benchkit.MiB(m.RSS-alone.RSS)/float64(n), "per-volume-RSS-MiB")
	})

	b.Run("rclone-mount", func(b *testing.B) {
		defer e.unmountAll()
		var mounts []*rcloneMount
		for i := 0; i < n; i++ {
			for j := 0; j < t; j++ {
				m, _ := e.rcloneMount(b, bucket(i), filepath.Join(e.dir, "plain", podName(i, j)), "mount")
				mounts = append(mounts, m)
			}
		}
		untilAll(b, time.Now(), len(mounts), func(k int) error { return readsSeed(mounts[k].path, bucket(k/t)) })
		time.Sleep(settle)
		var pids []int
		for _, m := range mounts {
			pids = append(pids, m.pid)
		}
		m := benchkit.MemoryOf(pids)
		if m.Procs != n*t {
			b.Fatalf("%d rclone processes alive, want %d", m.Procs, n*t)
		}
		reportMemory(b, m)
		b.ReportMetric(benchkit.MiB(m.PSS)/float64(n*t), "per-mount-PSS-MiB")
		b.ReportMetric(benchkit.MiB(m.RSS)/float64(n*t), "per-mount-RSS-MiB")
		b.ReportMetric(benchkit.MiB(m.PSS)/float64(n), "per-volume-PSS-MiB")
	})
}

// BenchmarkRecovery: the node plugin as a process of its own with
// -bench.volumes volumes published to -bench.targets pods each.
//
//	first-setup     the kubelet's first NodeStageVolume and NodePublishVolume
//	                calls for all of them, one after the other, until every
//	                target reads: the reference for a restart.
//	driver-restart  kill -9 of the driver and every worker; the time from
//	                starting the driver again until every target reads its
//	                seed again, with no call from the kubelet.
//	worker-death    kill -9 of one worker (-bench.worker-kills times, a
//	                different volume each); the time until each of its
//	                targets reads again.
//
// Targets are read in the driver's mount namespace (the host's); the e2e
// test checks that containers holding a copy see the repair too.
func BenchmarkRecovery(b *testing.B) {
	n, t := *flagVolumes, *flagTargets
	e := newEnv(b, "recovery", seedBuckets(n))
	e.startDriver(b)
	defer e.stopDriver()
	var targets []target

	b.Run("first-setup", func(b *testing.B) {
		start := time.Now()
		var staged []time.Duration
		targets, staged = e.stageAndPublish(b, n, t)
		took := time.Since(start)
		b.ReportMetric(float64(took.Nanoseconds()), "ns/op")
		b.ReportMetric(took.Seconds(), "total-s")
		b.ReportMetric(benchkit.Ms(benchkit.Percentile(staged, 0.5)), "stage-p50-ms")
	})
	if len(targets) != n*t {
		b.Fatal("the first setup failed")
	}
	readAll := func(i int) error { return readsSeed(targets[i].path, targets[i].bucket) }

	b.Run("driver-restart", func(b *testing.B) {
		e.driver.kill9()
		e.driver = nil
		killAndWait(e.workerPIDs())
		// Every target is dead now.
		untilAll(b, time.Now(), len(targets), func(i int) error {
			if readAll(i) == nil {
				return errors.New("still reads")
			}
			return nil
		})
		// The targets are polled from the moment the driver starts: they
		// come back without any call, so its readiness is no condition.
		start := time.Now()
		var took []time.Duration
		var pollErr error
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			took, pollErr = pollAll(start, len(targets), readAll)
		}()
		ready := e.startDriver(b)
		<-polled
		if pollErr != nil {
			b.Fatal(pollErr)
		}
		all := slices.Max(took)
		b.ReportMetric(float64(all.Nanoseconds()), "ns/op")
		b.ReportMetric(all.Seconds(), "total-s")
		b.ReportMetric(ready.Seconds(), "ready-s")
		b.ReportMetric(benchkit.Ms(benchkit.Percentile(took, 0.5)), "target-p50-ms")
	})

	b.Run("worker-death", func(b *testing.B) {
		var took []time.Duration
		for k := 0; k < min(*flagKills, n); k++ {
			pids := e.workerPIDs()[e.volume(k).Handle]
			if len(pids) != 1 {
				b.Fatalf("volume %d has workers %v", k, pids)
			}
			var mine []target
			for _, tg := range targets {
				if tg.vol == k {
					mine = append(mine, tg)
				}
			}
			start := time.Now()
			killAndWait(map[string][]int{"": pids})
			d := untilAll(b, start, len(mine), func(i int) error { return readsSeed(mine[i].path, mine[i].bucket) })
			took = append(took, slices.Max(d))
		}
		reportLatencies(b, took)
		b.ReportMetric(benchkit.Ms(slices.Max(took)), "max-ms")
	})
}

// killAndWait sends SIGKILL to the processes and waits (up to 10s) until
// each has exited, when the kernel has ended its FUSE session.
func killAndWait(pids map[string][]int) {
	var all []int
	for _, ps := range pids {
		all = append(all, ps...)
	}
	for _, pid := range all {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range all {
		for !benchkit.Zombie(pid) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}
