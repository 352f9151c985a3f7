package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-rclone/csi-rclone/test/bench/benchkit"
)

// ioBuf is the buffer size of sequential reads and writes, as dd bs=1M.
const ioBuf = 1 << 20

// ioTimeout bounds each read or write phase, uploadTimeout the wait for a
// written file to reach the bucket.
const (
	ioTimeout     = 10 * time.Minute
	uploadTimeout = 10 * time.Minute
)

// within runs f in a goroutine and fails the benchmark if it has not
// returned within d. A hung FUSE call cannot be cancelled; it returns when
// the clean-up kills the mount's process.
func within(b *testing.B, d time.Duration, what string, f func() error) {
	b.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			b.Fatalf("%s: %v", what, err)
		}
	case <-time.After(d):
		b.Fatalf("%s: not done within %s", what, d)
	}
}

// pattern is random data that writes repeat; 4 MiB, so that nothing on
// the way can deduplicate it cheaply.
var pattern = func() []byte {
	p := make([]byte, 4<<20)
	r := rand.NewChaCha8([32]byte{'c', 's', 'i'})
	_, _ = r.Read(p)
	return p
}()

// patternReader gives size bytes of pattern.
type patternReader struct{ off, size int64 }

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	n := copy(p, pattern[r.off%int64(len(pattern)):])
	n = int(min(int64(n), r.size-r.off))
	r.off += int64(n)
	return n, nil
}

func writeFileOf(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(f, &patternReader{size: size}, make([]byte, ioBuf)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func mbps(bytes int64, d time.Duration) float64 { return float64(bytes) / 1e6 / d.Seconds() }

// reportThroughput reports MB/s (10^6 bytes/s, as Go's own MB/s) and the
// time as ns/op.
func reportThroughput(b *testing.B, bytes int64, d time.Duration) {
	b.ReportMetric(float64(d.Nanoseconds()), "ns/op")
	b.ReportMetric(mbps(bytes, d), "MB/s")
}

// readThrough reads a file sequentially with 1 MiB reads and times it from
// open to close.
func readThrough(b *testing.B, path string, want int64) time.Duration {
	b.Helper()
	var took time.Duration
	within(b, ioTimeout, "reading "+path, func() error {
		start := time.Now()
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		var c countingWriter
		_, err = io.CopyBuffer(&c, f, make([]byte, ioBuf))
		f.Close()
		took = time.Since(start)
		if err == nil && c.n != want {
			err = fmt.Errorf("read %d bytes, want %d", c.n, want)
		}
		return err
	})
	return took
}

// rcloneCmd is an rclone command on this env's S3 server; it is killed
// after ioTimeout.
func (e *env) rcloneCmd(args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	e.b.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, e.rclone, append([]string{"--config", e.conf}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + e.dir}
	return cmd
}

// publishOne stages a volume of remotePath (a volume of its own for each
// round r) and publishes it to one pod.
func (e *env) publishOne(b *testing.B, remotePath string, r int) string {
	b.Helper()
	id := fmt.Sprintf("%s-%d", remotePath, r)
	v := e.volumeOf("pv-"+id, id, remotePath)
	e.stage(b, v)
	target, _ := e.publish(b, v, "pod-"+id)
	return target
}

// BenchmarkSeqRead: read a -bench.file-mib file (1 GiB) sequentially with
// 1 MiB reads through a published target; through plain `rclone mount2`
// (the FUSE library of the workers) with the driver's options and with
// rclone's defaults; with `rclone cat` (one stream from S3) and `rclone
// copy --multi-thread-streams 8` to a local dir (the backend's parallel
// limit). -bench.rounds rounds, each variant once a round on a cold mount;
// the server's file is in the page cache for all.
func BenchmarkSeqRead(b *testing.B) {
	size := int64(*flagFileMiB) << 20
	e := newEnv(b, "seqread", func(s3dir string) error {
		if err := os.MkdirAll(filepath.Join(s3dir, "big"), 0o755); err != nil {
			return err
		}
		return writeFileOf(filepath.Join(s3dir, "big", "big.bin"), size)
	})

	// The server hashes an object (its ETag) at its first GET, reading it
	// whole, and keeps the hash: a one-byte GET first, so that no variant
	// pays for it.
	warm := e.rcloneCmd("cat", "--count", "1", remoteName+":big/big.bin")
	if out, err := warm.CombinedOutput(); err != nil {
		b.Fatalf("rclone cat --count 1: %v: %s", err, out)
	}
	// Each variant's read, timed, with where the CPU went meanwhile.
	read := func(b *testing.B, label string, r int, pids []int, path string) sample {
		var took time.Duration
		return withCPU(b, label, r, pids, func() sample { return sample{"MB/s": mbps(size, took), "s": took.Seconds()} },
			func() benchkit.ProcCPU { took = readThrough(b, path, size); return benchkit.ProcCPU{} })
	}
	run := func(b *testing.B, label string, r int, cmd *exec.Cmd, check func(time.Duration)) sample {
		var took time.Duration
		return withCPU(b, label, r, nil, func() sample { return sample{"MB/s": mbps(size, took), "s": took.Seconds()} },
			func() benchkit.ProcCPU {
				start := time.Now()
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
				took = time.Since(start)
				check(took)
				return cpuOfRun(cmd)
			})
	}

	interleave(b, []variant{
		{"csi-rclone", func(b *testing.B, r int) sample {
			e.startDriver(b)
			defer e.forgetVolumes(b)
			defer e.stopDriver()
			target := e.publishOne(b, "big", r)
			return read(b, "csi-rclone", r, e.allWorkerPIDs(), filepath.Join(target, "big.bin"))
		}},
		{"rclone-mount2-same", func(b *testing.B, r int) sample {
			defer e.unmountAll()
			m, _ := e.rcloneMount(b, "big", filepath.Join(e.dir, "plain-same"), "mount2", driverFlags()...)
			return read(b, "rclone-mount2-same", r, []int{m.pid}, filepath.Join(m.path, "big.bin"))
		}},
		{"rclone-mount2", func(b *testing.B, r int) sample {
			defer e.unmountAll()
			m, _ := e.rcloneMount(b, "big", filepath.Join(e.dir, "plain"), "mount2")
			return read(b, "rclone-mount2", r, []int{m.pid}, filepath.Join(m.path, "big.bin"))
		}},
		{"rclone-cat", func(b *testing.B, r int) sample {
			// Straight into /dev/null: no copy through this process, which
			// serves S3 too. rclone cat fails on a short read.
			devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer devNull.Close()
			cmd := e.rcloneCmd("cat", remoteName+":big/big.bin")
			cmd.Stdout, cmd.Stderr = devNull, os.Stderr
			return run(b, "rclone-cat", r, cmd, func(time.Duration) {})
		}},
		{"rclone-copy-mt8", func(b *testing.B, r int) sample {
			dst := filepath.Join(e.dir, "copy-dst")
			defer os.RemoveAll(dst)
			// Every file above 1 MiB in 8 streams; no hash of the copy
			// afterwards, which no mount computes either.
			cmd := e.rcloneCmd("copy", "--multi-thread-streams", "8", "--multi-thread-cutoff", "1M",
				"--ignore-checksum", remoteName+":big/big.bin", dst)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			return run(b, "rclone-copy-mt8", r, cmd, func(time.Duration) {
				if fi, err := os.Stat(filepath.Join(dst, "big.bin")); err != nil || fi.Size() != size {
					b.Fatalf("rclone copy: %v %v", fi, err)
				}
			})
		}},
	})
}

// BenchmarkSeqWrite: write a -bench.file-mib file sequentially with 1 MiB
// writes through a published target and through a plain `rclone mount2`
// with the driver's options and with rclone's defaults, timed until close
// returns (MB/s: the VFS cache takes it; rclone uploads after its
// write-back delay, 5s by default) and until the object is complete in the
// bucket (synced-MB/s); against `rclone rcat` into the bucket.
// -bench.rounds rounds, interleaved.
func BenchmarkSeqWrite(b *testing.B) {
	size := int64(*flagFileMiB) << 20
	e := newEnv(b, "seqwrite", func(s3dir string) error {
		return os.MkdirAll(filepath.Join(s3dir, "big"), 0o755)
	})
	object := func(name string) string { return e.s3.Object("big", name) }

	writeAndSync := func(b *testing.B, label string, r int, pids []int, dir, name string) sample {
		path := filepath.Join(dir, name)
		// The last round's data (cache file, object) may still be going to
		// disk: each variant starts with none in flight.
		unix.Sync()
		var start time.Time
		var closed time.Duration
		cpu := withCPU(b, label, r, pids, func() sample { return sample{} }, func() benchkit.ProcCPU {
			start = time.Now()
			within(b, ioTimeout, "writing "+path, func() error { return writeFileOf(path, size) })
			closed = time.Since(start)
			return benchkit.ProcCPU{}
		})
		deadline := time.Now().Add(uploadTimeout)
		for {
			if fi, err := os.Stat(object(name)); err == nil && fi.Size() == size {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s did not reach the bucket within %s", name, uploadTimeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
		synced := time.Since(start)
		// Delete it through the mount, as a user would, and make sure.
		within(b, ioTimeout, "removing "+path, func() error { return os.Remove(path) })
		_ = os.Remove(object(name))
		cpu["MB/s"], cpu["s"], cpu["synced-MB/s"], cpu["synced-s"] = mbps(size, closed), closed.Seconds(), mbps(size, synced), synced.Seconds()
		return cpu
	}

	interleave(b, []variant{
		{"csi-rclone", func(b *testing.B, r int) sample {
			e.startDriver(b)
			defer e.forgetVolumes(b)
			defer e.stopDriver()
			target := e.publishOne(b, "big", r)
			return writeAndSync(b, "csi-rclone", r, e.allWorkerPIDs(), target, "written-by-csi-rclone.bin")
		}},
		{"rclone-mount2-same", func(b *testing.B, r int) sample {
			defer e.unmountAll()
			m, _ := e.rcloneMount(b, "big", filepath.Join(e.dir, "plain-same"), "mount2", driverFlags()...)
			return writeAndSync(b, "rclone-mount2-same", r, []int{m.pid}, m.path, "written-by-rclone-mount2-same.bin")
		}},
		{"rclone-mount2", func(b *testing.B, r int) sample {
			defer e.unmountAll()
			m, _ := e.rcloneMount(b, "big", filepath.Join(e.dir, "plain"), "mount2")
			return writeAndSync(b, "rclone-mount2", r, []int{m.pid}, m.path, "written-by-rclone-mount2.bin")
		}},
		{"rclone-rcat", func(b *testing.B, r int) sample {
			cmd := e.rcloneCmd("rcat", remoteName+":big/rcat.bin")
			cmd.Stdin = &patternReader{size: size}
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			start := time.Now()
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
			took := time.Since(start)
			if fi, err := os.Stat(object("rcat.bin")); err != nil || fi.Size() != size {
				b.Fatalf("rcat.bin in the bucket: %v %v", fi, err)
			}
			_ = os.Remove(object("rcat.bin"))
			return sample{"MB/s": mbps(size, took), "s": took.Seconds()}
		}},
	})
}

// BenchmarkSmallFiles: list a directory of -bench.objects objects (ls:
// readdir; ls -l: readdir, then lstat of each, or of the first
// -bench.stats: stat-ms is the mean of one), then read -bench.reads of
// its files of -bench.small-kib KiB one after the other, through a
// published target and through a plain `rclone mount2` (rclone's defaults,
// and the driver's options), each cold. The objects are created in the S3
// server's directory before it starts. -bench.rounds rounds, interleaved.
func BenchmarkSmallFiles(b *testing.B) {
	n, k, sz := *flagObjects, min(*flagReads, *flagObjects), *flagSmallKB<<10
	stats := n
	if *flagStats > 0 {
		stats = min(*flagStats, n)
	}
	if sz <= 0 || sz > len(pattern)/2 || n <= 0 || k <= 0 {
		b.Fatalf("-bench.small-kib must be in (0, %d], -bench.objects and -bench.reads above 0", len(pattern)/2>>10)
	}
	e := newEnv(b, "small", func(s3dir string) error {
		dir := filepath.Join(s3dir, "small", "d")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			off := i * sz % (len(pattern) - sz)
			data := pattern[off : off+sz]
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f-%05d.bin", i)), data, 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	// The server lists its directory once for all: a first listing through
	// S3 that neither mount pays for.
	lsf := e.rcloneCmd("lsf", remoteName+":small/d")
	if out, err := lsf.Output(); err != nil {
		b.Fatalf("rclone lsf: %v", err)
	} else if lines := len(splitLines(string(out))); lines != n {
		b.Fatalf("rclone lsf lists %d objects, want %d", lines, n)
	}

	measure := func(b *testing.B, mnt string) sample {
		dir := filepath.Join(mnt, "d")
		var list, stat, all time.Duration
		var took []time.Duration
		within(b, ioTimeout, "small files through "+mnt, func() error {
			start := time.Now()
			entries, err := os.ReadDir(dir)
			list = time.Since(start)
			if err != nil || len(entries) != n {
				return fmt.Errorf("readdir: %d entries, %v", len(entries), err)
			}
			start = time.Now()
			for _, en := range entries[:stats] {
				if _, err := os.Lstat(filepath.Join(dir, en.Name())); err != nil {
					return err
				}
			}
			stat = time.Since(start)
			start = time.Now()
			for i := 0; i < k; i++ {
				t0 := time.Now()
				data, err := os.ReadFile(filepath.Join(dir, entries[i*n/k].Name()))
				took = append(took, time.Since(t0))
				if err != nil || len(data) != sz {
					return fmt.Errorf("read: %d bytes, %v", len(data), err)
				}
			}
			all = time.Since(start)
			return nil
		})
		out := sample{
			"ls-ms":   benchkit.Ms(list),
			"stat-ms": benchkit.Ms(stat) / float64(stats),
			"files/s": float64(k) / all.Seconds(),
			"p50-ms":  benchkit.Ms(benchkit.Percentile(took, 0.50)),
			"p95-ms":  benchkit.Ms(benchkit.Percentile(took, 0.95)),
		}
		if stats == n {
			out["ls-l-ms"] = benchkit.Ms(list + stat)
		}
		return out
	}

	interleave(b, []variant{
		{"csi-rclone", func(b *testing.B, r int) sample {
			e.startDriver(b)
			defer e.forgetVolumes(b)
			defer e.stopDriver()
			return measure(b, e.publishOne(b, "small", r))
		}},
		{"rclone-mount2-same", func(b *testing.B, r int) sample {
			defer e.unmountAll()
			m, _ := e.rcloneMount(b, "small", filepath.Join(e.dir, "plain-same"), "mount2", driverFlags()...)
			return measure(b, m.path)
		}},
		{"rclone-mount2", func(b *testing.B, r int) sample {
			defer e.unmountAll()
			m, _ := e.rcloneMount(b, "small", filepath.Join(e.dir, "plain"), "mount2")
			return measure(b, m.path)
		}},
	})
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
