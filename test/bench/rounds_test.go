package bench

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/csi-rclone/csi-rclone/pkg/driver"
)

var (
	flagRounds = flag.Int("bench.rounds", 5, "rounds of the I/O benchmarks: each variant once a round, in a rotated order; they report the median and the range")
	flagOnly   = flag.String("bench.variants", "", "regexp: run only the I/O variants it matches (rclone-cat, csi-rclone, ...)")
	flagTry    = flag.String("bench.try", "", "rclone flags (space-separated; env:NAME=VALUE sets an environment variable) for the rclone-mount2-same variant on top of the driver's options, to try a default before making it one; several sets separated by ';' make one variant each (try-0, try-1, ...), interleaved")
)

// trying is the -bench.try set of the variant that runs now, tryingVFS
// the -bench.vfs-opt set.
var trying, tryingVFS string

// sample is one measurement of a variant: values by unit.
type sample map[string]float64

// variant is one way of doing a benchmark's work; run does it once, in
// round r, from a cold start.
type variant struct {
	name string
	run  func(b *testing.B, r int) sample
}

// interleave runs every variant once a round for -bench.rounds rounds,
// each round in an order rotated by one, so that a slow spell of the
// shared machine spreads over all variants instead of falling on one.
// Then each variant reports, as a sub-benchmark, the median of each unit
// and its range (min-UNIT, max-UNIT) and, as ns/op, the median of "s".
func interleave(b *testing.B, vs []variant) {
	b.Helper()
	if *flagOnly != "" {
		re, err := regexp.Compile(*flagOnly)
		if err != nil {
			b.Fatal(err)
		}
		vs = slices.DeleteFunc(slices.Clone(vs), func(v variant) bool { return !re.MatchString(v.name) })
	}
	vs = expandTries(vs, *flagTry, "rclone-mount2-same", "try-", &trying)
	vs = expandTries(vs, *flagVFSOpt, "csi-rclone", "csi-try-", &tryingVFS)
	got := make([][]sample, len(vs))
	for r := 0; r < *flagRounds; r++ {
		for k := range vs {
			i := (k + r) % len(vs)
			got[i] = append(got[i], vs[i].run(b, r))
		}
	}
	for i, v := range vs {
		b.Run(v.name, func(b *testing.B) { reportSamples(b, got[i]) })
	}
}

func reportSamples(b *testing.B, ss []sample) {
	if len(ss) == 0 {
		return
	}
	units := slices.Sorted(maps.Keys(ss[0]))
	for _, u := range units {
		var vals []float64
		for _, s := range ss {
			vals = append(vals, s[u])
		}
		sort.Float64s(vals)
		med := median(vals)
		if u == "s" {
			b.ReportMetric(med*1e9, "ns/op")
		}
		b.ReportMetric(med, u)
		if len(vals) > 1 {
			b.ReportMetric(vals[0], "min-"+u)
			b.ReportMetric(vals[len(vals)-1], "max-"+u)
		}
	}
	if _, ok := ss[0]["s"]; !ok {
		b.ReportMetric(0, "ns/op")
	}
	b.ReportMetric(float64(len(ss)), "runs")
}

// median of sorted values.
func median(v []float64) float64 {
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// driverFlags are the driver's default VFS and mount options as rclone
// mount flags, for a plain mount "with the same options". uid, gid, umask
// and the cache mode are set by rcloneMount already.
func driverFlags() []string {
	var out []string
	for _, m := range []map[string]string{driver.DefaultVFSOptions, driver.DefaultMountOptions} {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			out = append(out, "--"+strings.ReplaceAll(k, "_", "-")+"="+m[k])
		}
	}
	for _, f := range strings.Fields(trying) {
		if !strings.HasPrefix(f, tryEnv) {
			out = append(out, f)
		}
	}
	return out
}

// tryEnv marks a -bench.try word that is an environment variable of the
// rclone process, not a flag: env:GOGC=200.
const tryEnv = "env:"

// tryingEnv is the environment of the -bench.try set that runs now.
func tryingEnv() []string {
	var out []string
	for _, f := range strings.Fields(trying) {
		if v, ok := strings.CutPrefix(f, tryEnv); ok {
			out = append(out, v)
		}
	}
	return out
}

// forgetVolumes removes the driver's records of its volumes (after
// stopDriver), so that its next start in the same env begins empty.
func (e *env) forgetVolumes(b *testing.B) {
	entries, err := os.ReadDir(e.stateDir)
	if err != nil {
		b.Fatal(err)
	}
	for _, en := range entries {
		if err := os.RemoveAll(filepath.Join(e.stateDir, en.Name())); err != nil {
			b.Fatal(err)
		}
	}
}

// expandTries puts, for a flag value of several ";"-separated sets, one
// variant per set (prefix0, prefix1, ...) in place of the variant named
// base, each running it with *setting = its set; one set is just set.
func expandTries(vs []variant, flag, base, prefix string, setting *string) []variant {
	sets := strings.Split(flag, ";")
	if len(sets) < 2 {
		*setting = flag
		return vs
	}
	i := slices.IndexFunc(vs, func(v variant) bool { return v.name == base })
	if i < 0 {
		return vs
	}
	run := vs[i].run
	for k, set := range sets {
		vs = append(vs, variant{fmt.Sprintf("%s%d", prefix, k), func(b *testing.B, r int) sample {
			*setting = set
			defer func() { *setting = "" }()
			return run(b, r)
		}})
	}
	return slices.Delete(vs, i, i+1)
}
