package bench

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/csi-rclone/csi-rclone/test/bench/benchkit"
)

var flagScale = flag.String("bench.scale", "1,10,50,100", "volume counts of BenchmarkScale, comma-separated")

func scaleCounts(b *testing.B) []int {
	var out []int
	for _, f := range strings.Split(*flagScale, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("-bench.scale %q: want positive counts", *flagScale)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkScale: for each count N of -bench.scale, a fresh node plugin
// stages N volumes one after the other (each its own bucket and worker)
// and publishes each to one pod; then, idle:
//
//	p50-ms, p95-ms       NodeStageVolume latency over the N stages
//	per-volume-PSS-MiB   (PSS of the driver and its N workers − the driver
//	                     alone before any stage) / N
//	recovery-s           after kill -9 of the driver and every worker, from
//	                     the driver's start until every one of the N
//	                     targets reads its seed file again
func BenchmarkScale(b *testing.B) {
	counts := scaleCounts(b)
	e := newEnv(b, "scale", seedBuckets(slices.Max(counts)))
	for _, n := range counts {
		b.Run(fmt.Sprintf("volumes=%d", n), func(b *testing.B) {
			e.startDriver(b)
			defer e.forgetVolumes(b)
			defer e.stopDriver()
			time.Sleep(settle)
			alone := benchkit.MemoryOf([]int{e.driver.cmd.Process.Pid})
			targets, staged := e.stageAndPublish(b, n, 1)
			time.Sleep(settle)
			pids := e.driverPIDs()
			if len(pids) != n+1 {
				b.Fatalf("%d processes, want the driver and %d workers", len(pids), n)
			}
			m := benchkit.MemoryOf(pids)

			e.driver.kill9()
			e.driver = nil
			killAndWait(e.workerPIDs())
			readAll := func(i int) error { return readsSeed(targets[i].path, targets[i].bucket) }
			start := time.Now()
			var took []time.Duration
			var pollErr error
			polled := make(chan struct{})
			go func() {
				defer close(polled)
				took, pollErr = pollAll(start, len(targets), readAll)
			}()
			e.startDriver(b)
			<-polled
			if pollErr != nil {
				b.Fatal(pollErr)
			}
			recovered := slices.Max(took)

			b.ReportMetric(float64(benchkit.Mean(staged).Nanoseconds()), "ns/op")
			b.ReportMetric(benchkit.Ms(benchkit.Percentile(staged, 0.50)), "p50-ms")
			b.ReportMetric(benchkit.Ms(benchkit.Percentile(staged, 0.95)), "p95-ms")
			b.ReportMetric(benchkit.MiB(m.PSS-alone.PSS)/float64(n), "per-volume-PSS-MiB")
			b.ReportMetric(benchkit.MiB(m.PSS), "PSS-MiB")
			b.ReportMetric(recovered.Seconds(), "recovery-s")
			b.ReportMetric(float64(n), "volumes")
		})
	}
}
