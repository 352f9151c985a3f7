package bench

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/csi-rclone/csi-rclone/test/bench/benchkit"
)

var flagPerf = flag.String("bench.perf", "",
	"dir: record `perf record -a -g` of the whole machine while each sequential read runs, one file per variant and round (perf's own CPU is then in the figures)")

// withCPU runs f, the timed part of a variant whose mount is served by the
// processes mountPIDs (none for rclone cat and copy: f returns the CPU of
// the process it ran), and adds to s where the CPU went meanwhile, in
// seconds: mount-cpu-s (the worker or rclone), bench-cpu-s (this process:
// the S3 server, the latency proxy and the reader), other-cpu-s (the rest
// of the machine: the driver, other people's work, kernel threads), and
// the machine's busy-% (100: every core busy), sys-%, softirq-% and idle-%.
func withCPU(b *testing.B, label string, r int, mountPIDs []int, s func() sample, f func() benchkit.ProcCPU) sample {
	b.Helper()
	stopPerf := startPerf(b, label, r)
	m0, err := benchkit.Machine()
	if err != nil {
		b.Fatal(err)
	}
	self0, mount0 := benchkit.SelfCPU(), benchkit.CPUOf(mountPIDs...)
	start := time.Now()
	child := f()
	wall := time.Since(start)
	mount := benchkit.CPUOf(mountPIDs...).Sub(mount0)
	self := benchkit.SelfCPU().Sub(self0)
	m1, _ := benchkit.Machine()
	stopPerf()
	mount.User += child.User
	mount.System += child.System
	mach := m1.Sub(m0)
	all := wall.Seconds() * float64(runtime.NumCPU()) / 100 // seconds per per cent of the machine
	out := s()
	out["mount-cpu-s"] = mount.Total().Seconds()
	out["mount-sys-s"] = mount.System.Seconds()
	out["bench-cpu-s"] = self.Total().Seconds()
	out["other-cpu-s"] = (mach.Busy() - mount.Total() - self.Total()).Seconds()
	out["busy-%"] = mach.Busy().Seconds() / all
	out["sys-%"] = mach.System.Seconds() / all
	out["softirq-%"] = mach.SoftIRQ.Seconds() / all
	out["idle-%"] = mach.Idle.Seconds() / all
	return out
}

// perfRuns numbers the perf files, which try-N variants would share.
var perfRuns int

// startPerf starts a system-wide perf record if -bench.perf is set; the
// function it returns stops it and waits until its file is written.
func startPerf(b *testing.B, label string, r int) func() {
	if *flagPerf == "" {
		return func() {}
	}
	if err := os.MkdirAll(*flagPerf, 0o755); err != nil {
		b.Fatal(err)
	}
	perfRuns++
	out := filepath.Join(*flagPerf, fmt.Sprintf("%02d-%s-%d.data", perfRuns, label, r))
	cmd := exec.Command("perf", "record", "-a", "-g", "-F", "499", "-o", out)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("perf: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // perf has its events open
	return func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
	}
}

// cpuOfRun is the CPU a finished command used.
func cpuOfRun(cmd *exec.Cmd) benchkit.ProcCPU {
	if cmd.ProcessState == nil {
		return benchkit.ProcCPU{}
	}
	return benchkit.ProcCPU{User: cmd.ProcessState.UserTime(), System: cmd.ProcessState.SystemTime()}
}
