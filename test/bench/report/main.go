// Command report runs the csi-rclone benchmarks (test/bench) and prints one
// markdown table of their results, each figure next to its baseline from
// the same run. It is what `make bench` runs:
//
//	go run ./test/bench/report            # the sizes of docs/benchmarks.md
//	go run ./test/bench/report -quick     # small sizes, a minute or two
//	go run ./test/bench/report -in out.txt  # the table of a saved run
//
// The raw `go test -bench` output streams through as it comes (it is
// benchstat's input; -o keeps a copy). Whatever happens to the benchmarks,
// every process and mount below their work dir is removed afterwards.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/csi-rclone/csi-rclone/test/bench/benchkit"
)

const pkg = "github.com/csi-rclone/csi-rclone/test/bench"

// sizes are the benchmark sizes; they go to the benchmarks as -bench.* flags
// and into the table's labels.
type sizes struct {
	volumes, targets, fileMiB, objects, reads, smallKiB, calls, conc, kills int
	rounds, stats                                                           int
	profile                                                                 string // the network: loopback, wan20, wan80
	scale                                                                   string // BenchmarkScale's volume counts
}

var full = sizes{volumes: 20, targets: 5, fileMiB: 1024, objects: 10000, reads: 1000, smallKiB: 4, calls: 4000, conc: 8, kills: 5, rounds: 5}
var quick = sizes{volumes: 4, targets: 2, fileMiB: 64, objects: 1000, reads: 100, smallKiB: 4, calls: 400, conc: 8, kills: 2, rounds: 2}

func main() {
	var (
		quickRun = flag.Bool("quick", false, "small sizes for a quick run")
		bench    = flag.String("bench", ".", "which benchmarks (go test -bench regexp)")
		in       = flag.String("in", "", "print the table of this saved output instead of running")
		out      = flag.String("o", "", "also write the raw benchmark output to this file")
		timeout  = flag.Duration("timeout", 45*time.Minute, "go test -timeout")
		count    = flag.Int("count", 1, "go test -count: runs of each benchmark (the table shows the median)")
		plotPNG  = flag.String("plot", "", "draw BenchmarkScale's results into this PNG")
		s        sizes
	)
	flag.IntVar(&s.volumes, "volumes", 0, "volumes (default 20; -quick 4)")
	flag.IntVar(&s.targets, "targets", 0, "targets per volume (default 5; -quick 2)")
	flag.IntVar(&s.fileMiB, "file-mib", 0, "size of the sequential file, MiB (default 1024; -quick 64)")
	flag.IntVar(&s.objects, "objects", 0, "objects listed (default 10000; -quick 1000)")
	flag.IntVar(&s.reads, "reads", 0, "small files read (default 1000; -quick 100)")
	flag.IntVar(&s.smallKiB, "small-kib", 0, "size of a small file, KiB (default 4)")
	flag.IntVar(&s.calls, "calls", 0, "Decrypt calls with many callers (default 4000; -quick 400)")
	flag.IntVar(&s.conc, "concurrency", 0, "concurrent Decrypt callers (default 8)")
	flag.IntVar(&s.kills, "worker-kills", 0, "workers killed one by one (default 5; -quick 2)")
	flag.IntVar(&s.stats, "stats", 0, "listed files lstat'ed (ls -l), 0: all; each is an S3 HEAD, so use ~200 on the WAN profiles")
	flag.IntVar(&s.rounds, "rounds", 0, "interleaved rounds of the I/O benchmarks (default 5; -quick 2)")
	flag.StringVar(&s.scale, "scale", "1,10,50,100", "volume counts of BenchmarkScale")
	flag.StringVar(&s.profile, "profile", "loopback", "the network to S3: loopback, wan20 or wan80 (20/80 ms round trip, 1 Gbit/s per connection)")
	flag.Parse()
	def := full
	if *quickRun {
		def = quick
	}
	s = s.or(def)

	if *in != "" {
		data, err := os.ReadFile(*in)
		if err != nil {
			fatal(err)
		}
		res, err := benchkit.Parse(bytes.NewReader(data))
		if err != nil {
			fatal(err)
		}
		fmt.Println()
		printTable(os.Stdout, res, s)
		printCPU(os.Stdout, res, s)
		finish(res, *plotPNG)
		return
	}

	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	dir, err := os.MkdirTemp("", "csi-rclone-bench-")
	if err != nil {
		fatal(err)
	}
	args := []string{"test", "-run", "^$", "-bench", *bench, "-benchtime", "1x", "-count", fmt.Sprint(*count),
		"-timeout", timeout.String(), pkg, "-args", "-bench.dir=" + dir}
	args = append(args, s.flags()...)
	header := machine(goBin) + fmt.Sprintf("- network to S3: %s; %d interleaved rounds of the I/O benchmarks\n", s.profile, s.rounds)
	fmt.Print(header)
	fmt.Printf("running: %s %s\n\n", goBin, strings.Join(args, " "))

	// A reader of this output that goes away (| head) must not stop the
	// run before its clean-up: writes to a closed stdout are dropped.
	signal.Ignore(syscall.SIGPIPE)
	var raw bytes.Buffer
	sinks := []io.Writer{lenient{os.Stdout}, &raw}
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fatal(err)
		}
		defer f.Close()
		sinks = append(sinks, f)
	}
	cmd := exec.Command(goBin, args...)
	w := io.MultiWriter(sinks...)
	cmd.Stdout, cmd.Stderr = w, w
	// Ctrl-C reaches the benchmarks too (same process group); they clean up
	// and exit, and so does this, after a last sweep.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	start := time.Now()
	runErr := cmd.Run()
	signal.Stop(sig)
	took := time.Since(start)

	if err := benchkit.Cleanup(dir); err != nil {
		fmt.Fprintln(os.Stderr, "report: cleanup:", err)
	}
	res, _ := benchkit.Parse(bytes.NewReader(raw.Bytes()))
	fmt.Printf("\n## Results\n\n")
	fmt.Print(header)
	fmt.Printf("- load average after: %s\n- wall time: %s\n- runner flags (make bench BENCHFLAGS=...): %s\n\n", loadavg(), took.Round(time.Second), argsNote())
	printTable(os.Stdout, res, s)
	printCPU(os.Stdout, res, s)
	finish(res, *plotPNG)
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "report: the benchmarks failed:", runErr)
		os.Exit(1)
	}
}

// finish prints BenchmarkScale's table and, if asked, draws it.
func finish(res benchkit.Results, plotPNG string) {
	pts := scalePoints(res)
	printScale(os.Stdout, res, pts)
	if plotPNG != "" {
		if err := plotScale(plotPNG, pts); err != nil {
			fatal(fmt.Errorf("plot: %w", err))
		}
		fmt.Printf("\n%s: BenchmarkScale plotted\n", plotPNG)
	}
}

// lenient drops its writer's errors.
type lenient struct{ w io.Writer }

func (l lenient) Write(p []byte) (int, error) {
	_, _ = l.w.Write(p)
	return len(p), nil
}

func (s sizes) or(d sizes) sizes {
	pick := func(v, d int) int {
		if v > 0 {
			return v
		}
		return d
	}
	return sizes{pick(s.volumes, d.volumes), pick(s.targets, d.targets), pick(s.fileMiB, d.fileMiB),
		pick(s.objects, d.objects), pick(s.reads, d.reads), pick(s.smallKiB, d.smallKiB),
		pick(s.calls, d.calls), pick(s.conc, d.conc), pick(s.kills, d.kills), pick(s.rounds, d.rounds), s.stats, s.profile, s.scale}
}

func (s sizes) flags() []string {
	return []string{
		fmt.Sprintf("-bench.volumes=%d", s.volumes), fmt.Sprintf("-bench.targets=%d", s.targets),
		fmt.Sprintf("-bench.file-mib=%d", s.fileMiB), fmt.Sprintf("-bench.objects=%d", s.objects),
		fmt.Sprintf("-bench.reads=%d", s.reads), fmt.Sprintf("-bench.small-kib=%d", s.smallKiB),
		fmt.Sprintf("-bench.calls=%d", s.calls), fmt.Sprintf("-bench.concurrency=%d", s.conc),
		fmt.Sprintf("-bench.worker-kills=%d", s.kills), fmt.Sprintf("-bench.rounds=%d", s.rounds), fmt.Sprintf("-bench.stats=%d", s.stats),
		"-bench.profile=" + s.profile, "-bench.scale=" + s.scale,
	}
}

// machine describes this machine, one fact a line.
func machine(goBin string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- date: %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "- nproc: %d (%s)\n", runtime.NumCPU(), cpuModel())
	fmt.Fprintf(&b, "- memory: %s\n", memTotal())
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	fmt.Fprintf(&b, "- kernel: %s\n", strings.TrimSpace(string(kernel)))
	gv, err := exec.Command(goBin, "version").Output()
	if err != nil {
		gv = []byte(runtime.Version())
	}
	fmt.Fprintf(&b, "- go: %s\n", strings.TrimSpace(string(gv)))
	fmt.Fprintf(&b, "- load average before: %s\n", loadavg())
	return b.String()
}

func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	data, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			var kb float64
			fmt.Sscan(f[1], &kb)
			return fmt.Sprintf("%.1f GiB", kb/(1<<20))
		}
	}
	return "unknown"
}

func loadavg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// argsNote names the flags this run was given.
func argsNote() string {
	if len(os.Args) < 2 {
		return "none"
	}
	return "`" + strings.Join(os.Args[1:], " ") + "`"
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "report:", err)
	os.Exit(1)
}
