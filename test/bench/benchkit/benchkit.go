// Package benchkit holds what the benchmarks (test/bench) and their runner
// (test/bench/report) share: process and mount clean-up below a work dir,
// memory of processes from /proc, percentiles, and the parser of `go test
// -bench` output.
package benchkit

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/csi-rclone/csi-rclone/pkg/mounter"
)

// BinDir is where the benchmarks put the csi-rclone and rclone binaries,
// below the work dir. Every process they start runs one of them, so a
// process whose argv[0] is below the work dir is theirs.
const BinDir = "bin"

// Cleanup kills every process whose executable path (argv[0]) is below dir,
// detaches every mount below dir and, if no mount is left, removes dir. It
// is safe to call more than once, and after a crash of the benchmarks.
func Cleanup(dir string) error {
	dir = filepath.Clean(dir)
	if dir == "/" || dir == "." || dir == "" {
		return fmt.Errorf("refusing to clean up %q", dir)
	}
	KillBelow(dir)
	if n := UnmountBelow(dir); n > 0 {
		return fmt.Errorf("%d mount(s) below %s could not be detached; not removing it", n, dir)
	}
	return os.RemoveAll(dir)
}

// KillBelow sends SIGKILL to every process (but this one) whose argv[0] is
// below dir, and waits up to 5s until they are gone.
func KillBelow(dir string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := PIDsBelow(dir)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PIDsBelow lists the live processes (zombies excluded) whose argv[0] is
// below dir.
func PIDsBelow(dir string) []int {
	prefix := filepath.Clean(dir) + "/"
	var out []int
	for _, pid := range AllPIDs() {
		if pid == os.Getpid() {
			continue
		}
		args := Cmdline(pid)
		if len(args) > 0 && strings.HasPrefix(args[0], prefix) && !Zombie(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// AllPIDs lists the processes in /proc.
func AllPIDs() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// Cmdline is a process's argument vector, nil if it is gone.
func Cmdline(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

// Zombie reports whether a process has exited but not been reaped (or is
// gone).
func Zombie(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || i+2 >= len(data) || data[i+2] == 'Z' || data[i+2] == 'X'
}

// MountPoints lists the mount points of this mount namespace, in order.
func MountPoints() []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			out = append(out, mounter.Unescape(f[4]))
		}
	}
	return out
}

// IsMountPoint reports whether path is a mount point now.
func IsMountPoint(path string) bool {
	return slices.Contains(MountPoints(), filepath.Clean(path))
}

// MountsBelow counts the mounts below dir (stacked ones count each).
func MountsBelow(dir string) int {
	prefix := filepath.Clean(dir) + "/"
	n := 0
	for _, mp := range MountPoints() {
		if strings.HasPrefix(mp, prefix) {
			n++
		}
	}
	return n
}

// UnmountBelow detaches every mount below dir, deepest first, in a few
// rounds (stacked mounts need one round each), and says how many are left.
func UnmountBelow(dir string) int {
	prefix := filepath.Clean(dir) + "/"
	for round := 0; round < 8; round++ {
		var points []string
		for _, mp := range MountPoints() {
			if strings.HasPrefix(mp, prefix) {
				points = append(points, mp)
			}
		}
		if len(points) == 0 {
			return 0
		}
		sort.Sort(sort.Reverse(sort.StringSlice(points)))
		for _, p := range points {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
		}
	}
	return MountsBelow(dir)
}

// Memory is the resident memory of a set of processes, in bytes.
type Memory struct {
	Procs int
	RSS   int64 // sum of VmRSS: shared pages (the binary) count once per process
	PSS   int64 // sum of Pss: shared pages are split between the processes sharing them
}

// MemoryOf sums RSS (/proc/<pid>/status) and PSS (/proc/<pid>/smaps_rollup)
// of pids; processes that are gone are skipped.
func MemoryOf(pids []int) Memory {
	var m Memory
	for _, pid := range pids {
		rss, err1 := procKB(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
		pss, err2 := procKB(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
		if err1 != nil || err2 != nil {
			continue
		}
		m.Procs++
		m.RSS += rss * 1024
		m.PSS += pss * 1024
	}
	return m
}

func procKB(path, key string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == key {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", path, key)
}

// MiB is bytes in MiB.
func MiB(b int64) float64 { return float64(b) / (1 << 20) }

// Percentile is the nearest-rank q-quantile (0 < q <= 1) of d; 0 if empty.
func Percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Mean of d; 0 if empty.
func Mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Results are parsed `go test -bench` lines: benchmark name (without the
// -GOMAXPROCS suffix) → unit → value. A name seen more than once (-count)
// keeps the median of its values, and their range as min-UNIT and max-UNIT.
type Results map[string]map[string]float64

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.+)$`)

// Parse reads benchmark output and keeps the result lines.
func Parse(r io.Reader) (Results, error) {
	all := map[string]map[string][]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		if len(f)%2 != 0 {
			continue
		}
		for i := 0; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			if all[m[1]] == nil {
				all[m[1]] = map[string][]float64{}
			}
			all[m[1]][f[i+1]] = append(all[m[1]][f[i+1]], v)
		}
	}
	out := Results{}
	for name, units := range all {
		out[name] = map[string]float64{}
		for unit, vs := range units {
			slices.Sort(vs)
			out[name][unit] = vs[len(vs)/2]
		}
		// The range of repeated lines, where a line reports none itself.
		for unit, vs := range units {
			_, hasMin := units["min-"+unit]
			if len(vs) > 1 && !hasMin && !strings.HasPrefix(unit, "min-") && !strings.HasPrefix(unit, "max-") {
				out[name]["min-"+unit], out[name]["max-"+unit] = vs[0], vs[len(vs)-1]
			}
		}
	}
	return out, sc.Err()
}

// Get returns the value of a benchmark's unit and whether it was measured.
func (r Results) Get(name, unit string) (float64, bool) {
	v, ok := r[name][unit]
	return v, ok
}
