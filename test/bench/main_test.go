// Package bench measures csi-rclone against S3 on loopback, each figure next
// to a baseline measured in the same run: plain `rclone mount`, `rclone cat`,
// a bare bind mount, an in-process call. Only `go test -bench` runs anything
// here; `make bench` runs them all and prints one table (test/bench/report).
// They need root and /dev/fuse, as the integration tests do, and fusermount3
// for the plain rclone mount baselines.
package bench

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/test/bench/benchkit"
	"github.com/csi-rclone/csi-rclone/test/harness"
)

// Sizes. The defaults are those of docs/benchmarks.md; -bench.quick scales
// down every size not set explicitly.
var (
	flagDir      = flag.String("bench.dir", "", "work dir; default a new temp dir. Everything below it is removed at the end")
	flagQuick    = flag.Bool("bench.quick", false, "small sizes for a quick run (4 volumes x 2 targets, 64 MiB file, 1000 objects, ...)")
	flagVolumes  = flag.Int("bench.volumes", 20, "volumes staged (stage latency, memory, recovery)")
	flagTargets  = flag.Int("bench.targets", 5, "targets (pods) per volume")
	flagFileMiB  = flag.Int("bench.file-mib", 1024, "size of the file of the sequential read and write benchmarks, MiB")
	flagObjects  = flag.Int("bench.objects", 10000, "objects in the directory that is listed")
	flagReads    = flag.Int("bench.reads", 1000, "small files read")
	flagStats    = flag.Int("bench.stats", 0, "listed files lstat'ed one after the other (ls -l); 0: all. Each costs an S3 HEAD for its modtime: 10,000 take minutes at 20 ms")
	flagSmallKB  = flag.Int("bench.small-kib", 4, "size of a small file, KiB")
	flagCalls    = flag.Int("bench.calls", 4000, "Decrypt calls per transport")
	flagConc     = flag.Int("bench.concurrency", 8, "concurrent Decrypt callers")
	flagKills    = flag.Int("bench.worker-kills", 5, "workers killed one after the other (recovery)")
	flagRclone   = flag.String("bench.rclone", "", "a built rclone v1.76.0 to use; default: go build github.com/rclone/rclone")
	flagBinary   = flag.String("bench.binary", "", "a built csi-rclone to use; default: go build ./cmd/csi-rclone")
	flagVFSOpt   = flag.String("bench.vfs-opt", "", "the volumes' vfsOpt (JSON), as a tenant would set it: to try a value through the driver; several sets separated by ';' make one variant each (csi-try-0, csi-try-1, ...), interleaved; a set VFS|MOUNT sets mountOpt too")
	flagMountOpt = flag.String("bench.mount-opt", "", "the volumes' mountOpt (JSON)")
	flagLogs     = flag.String("bench.logs", "", "copy the driver's and rclone's logs into this dir before the work dir is removed")
)

var quickSizes = map[string]string{
	"bench.volumes": "4", "bench.targets": "2", "bench.file-mib": "64", "bench.objects": "1000",
	"bench.reads": "100", "bench.calls": "400", "bench.worker-kills": "2",
}

func TestMain(m *testing.M) {
	flag.Parse()
	if *flagQuick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range quickSizes {
			if !set[name] {
				_ = flag.Set(name, v)
			}
		}
	}
	// The secret service logs every call; the benchmark output is for
	// results. (The formatting still costs what it costs in production.)
	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	_ = kfs.Set("logtostderr", "false")
	_ = kfs.Set("alsologtostderr", "false")
	klog.SetOutput(io.Discard)

	// Ctrl-C or a kill by the runner: leave nothing behind.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "bench: %v: cleaning up\n", s)
		cleanupRoot()
		os.Exit(2)
	}()

	code := m.Run()
	cleanupRoot()
	os.Exit(code)
}

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
	rootMu   sync.Mutex
)

// root is the work dir of this run, made on first use.
func root(b *testing.B) string {
	b.Helper()
	if why := harness.Supported(); why != "" {
		b.Skip(why)
	}
	rootOnce.Do(func() {
		dir := *flagDir
		if dir == "" {
			dir, rootErr = os.MkdirTemp("", "csi-rclone-bench-")
		} else {
			rootErr = os.MkdirAll(dir, 0o755)
		}
		if rootErr == nil {
			dir, rootErr = filepath.Abs(dir)
		}
		if rootErr == nil {
			rootErr = harness.Traversable(dir) // workers run as uids of their own
		}
		rootMu.Lock()
		rootDir = dir
		rootMu.Unlock()
	})
	if rootErr != nil {
		b.Fatal(rootErr)
	}
	return rootDir
}

func cleanupRoot() {
	rootMu.Lock()
	dir := rootDir
	rootMu.Unlock()
	if dir == "" {
		return
	}
	if err := benchkit.Cleanup(dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench: cleanup:", err)
	}
}

var (
	binOnce              sync.Once
	csiBinary, rcloneBin string
	binErr               error
)

// binaries builds (or links) csi-rclone and rclone v1.76.0 into the work
// dir's bin: the rclone of the driver's own go.mod, so both run the same
// rclone code.
func binaries(b *testing.B) (csi, rclone string) {
	b.Helper()
	dir := filepath.Join(root(b), benchkit.BinDir)
	binOnce.Do(func() {
		if binErr = harness.Traversable(dir); binErr != nil {
			return
		}
		csiBinary, rcloneBin = filepath.Join(dir, "csi-rclone"), filepath.Join(dir, "rclone")
		if binErr = obtain(csiBinary, *flagBinary, "github.com/csi-rclone/csi-rclone/cmd/csi-rclone"); binErr != nil {
			return
		}
		binErr = obtain(rcloneBin, *flagRclone, "github.com/rclone/rclone")
	})
	if binErr != nil {
		b.Fatal(binErr)
	}
	return csiBinary, rcloneBin
}

func obtain(dst, prebuilt, pkg string) error {
	if prebuilt != "" {
		data, err := os.ReadFile(prebuilt)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o755)
	}
	goBin := os.Getenv("GO") // as make and the runner name it
	if goBin == "" {
		goBin = "go"
	}
	cmd := exec.Command(goBin, "build", "-o", dst, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return os.Chmod(dst, 0o755)
}
