package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csi-rclone/csi-rclone/test/bench/benchkit"
	"github.com/csi-rclone/csi-rclone/test/harness"
	"github.com/csi-rclone/csi-rclone/test/kubelet"
	"github.com/csi-rclone/csi-rclone/test/s3server"
)

const (
	driverName = "csi-rclone.bench"
	remoteName = "store"
	// callTimeout bounds every CSI call and every wait of the benchmarks.
	callTimeout = 2 * time.Minute
)

// env is one benchmark's world: an S3 server on loopback seeded before it
// starts (its listings are cached), the csi-rclone node plugin as a process
// of its own with a kubelet stand-in, and plain rclone mounts.
type env struct {
	b        *testing.B // the benchmark that made it
	dir      string
	s3       *s3server.Server
	endpoint string // what every S3 client dials: the server, or the latency proxy before it
	stopNet  func()
	csiBin   string
	rclone   string
	conf     string // rclone config file for the S3 server
	socket   string
	stateDir string
	cacheDir string
	kubelet  *kubelet.Kubelet
	driver   *driverProc
	starts   int
	mounts   []*rcloneMount
}

// newEnv makes the benchmark's dir, seeds the buckets with seed (which gets
// the S3 server's directory) and starts the S3 server. Everything it starts
// is stopped, and the dir removed, when the benchmark ends.
func newEnv(b *testing.B, name string, seed func(s3dir string) error) *env {
	b.Helper()
	csiBin, rclone := binaries(b)
	dir := filepath.Join(root(b), name)
	if err := os.RemoveAll(dir); err != nil {
		b.Fatal(err)
	}
	if err := harness.Traversable(dir); err != nil {
		b.Fatal(err)
	}
	e := &env{b: b, dir: dir, csiBin: csiBin, rclone: rclone,
		socket:   filepath.Join(dir, "plugin", "csi.sock"),
		stateDir: filepath.Join(dir, "run"),
		cacheDir: filepath.Join(dir, "cache"),
	}
	b.Cleanup(e.close)
	s3dir := filepath.Join(dir, "s3")
	if err := os.MkdirAll(s3dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if seed != nil {
		if err := seed(s3dir); err != nil {
			b.Fatal(err)
		}
	}
	s3, err := s3server.Start(context.Background(), s3dir, harness.AccessKeyID, harness.SecretAccessKey)
	if err != nil {
		b.Fatal(err)
	}
	e.s3, e.endpoint = s3, s3.Endpoint
	if p := profile(b); p.rtt > 0 {
		addr, stop, err := latencyProxy(strings.TrimPrefix(s3.Endpoint, "http://"), p)
		if err != nil {
			b.Fatal(err)
		}
		e.endpoint, e.stopNet = "http://"+addr, stop
	}
	e.conf = filepath.Join(dir, "rclone.conf")
	if err := os.WriteFile(e.conf, []byte(e.rcloneConfig()), 0o600); err != nil {
		b.Fatal(err)
	}
	return e
}

// close stops everything of this env: driver, workers, rclone mounts, S3.
func (e *env) close() {
	if e.driver != nil {
		e.driver.kill9()
		e.driver = nil
	}
	benchkit.KillBelow(filepath.Dir(e.csiBin)) // workers and rclone daemons
	if e.stopNet != nil {
		e.stopNet()
	}
	if e.s3 != nil {
		_ = e.s3.Stop(context.Background())
	}
	if n := benchkit.UnmountBelow(e.dir); n > 0 {
		e.b.Errorf("%d mounts left below %s", n, e.dir)
		return
	}
	if *flagLogs != "" {
		keepLogs(e.dir, filepath.Join(*flagLogs, filepath.Base(e.dir)))
	}
	_ = os.RemoveAll(e.dir)
}

// seedBuckets makes buckets vol-00 ... with a seed.txt each.
func seedBuckets(n int) func(string) error {
	return func(s3dir string) error {
		for i := 0; i < n; i++ {
			b := bucket(i)
			if err := os.MkdirAll(filepath.Join(s3dir, b), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(s3dir, b, "seed.txt"), []byte(seedOf(b)), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
}

// rcloneConfig is the config section of remoteName: the S3 server through
// this env's network.
func (e *env) rcloneConfig() string {
	return s3server.RcloneConfig(remoteName, e.endpoint, e.s3.AccessKeyID, e.s3.SecretAccessKey)
}

func bucket(i int) string    { return fmt.Sprintf("vol-%02d", i) }
func seedOf(b string) string { return "seed of " + b }

// ---- the node plugin ----

type driverProc struct {
	cmd      *exec.Cmd
	conn     *grpc.ClientConn
	node     csi.NodeClient
	identity csi.IdentityClient
	done     chan struct{}
}

// startDriver starts the node plugin, as in production (workers as uids of
// their own, state on a tmpfs), and returns once it reports ready: after it
// has mounted again every volume it has a record of.
func (e *env) startDriver(b *testing.B) time.Duration {
	b.Helper()
	if e.kubelet == nil {
		e.kubelet = &kubelet.Kubelet{Root: filepath.Join(e.dir, "kubelet"), DriverName: driverName}
		if err := e.kubelet.MakeRootShared(); err != nil {
			b.Fatal(err)
		}
		if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
			b.Fatal(err)
		}
		if err := unix.Mount("tmpfs", e.stateDir, "tmpfs", 0, "mode=0711,size=16m"); err != nil {
			b.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(e.dir, "tmp"), 0o700); err != nil {
			b.Fatal(err)
		}
	}
	e.starts++
	logFile, err := os.Create(filepath.Join(e.dir, fmt.Sprintf("driver-%d.log", e.starts)))
	if err != nil {
		b.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(e.csiBin, "--mode=node", "--nodeid=bench-node", "--driver-name="+driverName,
		"--endpoint=unix://"+e.socket, "--state-dir="+e.stateDir, "--cache-dir="+e.cacheDir)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + filepath.Join(e.dir, "tmp")}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	d := &driverProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.done) }()
	e.driver = d
	// Retry the connection every few ms, not after gRPC's default 1s
	// backoff, so that the time to ready is the driver's, not the client's.
	conn, err := grpc.NewClient("unix://"+e.socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.2, MaxDelay: 20 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		b.Fatal(err)
	}
	d.conn, d.node, d.identity = conn, csi.NewNodeClient(conn), csi.NewIdentityClient(conn)
	e.kubelet.Node = d.node
	deadline := time.Now().Add(callTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := d.identity.Probe(ctx, &csi.ProbeRequest{})
		cancel()
		if err == nil && r.GetReady().GetValue() {
			return time.Since(start)
		}
		select {
		case <-d.done:
			b.Fatalf("driver exited: %v; see %s", cmd.ProcessState, logFile.Name())
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("driver not ready within %s: %v", callTimeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (d *driverProc) kill9() {
	_ = d.conn.Close()
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// workerPIDs lists the live mount workers of this env's binary by volume id.
func (e *env) workerPIDs() map[string][]int {
	out := map[string][]int{}
	for _, pid := range benchkit.AllPIDs() {
		args := benchkit.Cmdline(pid)
		if len(args) >= 4 && args[0] == e.csiBin && args[1] == "mount-worker" && !benchkit.Zombie(pid) {
			out[args[3]] = append(out[args[3]], pid)
		}
	}
	return out
}

// allWorkerPIDs are the workers of every volume.
func (e *env) allWorkerPIDs() []int {
	var pids []int
	for _, ps := range e.workerPIDs() {
		pids = append(pids, ps...)
	}
	return pids
}

// driverPIDs is the driver and its workers.
func (e *env) driverPIDs() []int {
	return append([]int{e.driver.cmd.Process.Pid}, e.allWorkerPIDs()...)
}

// volume is a PV of bucket i.
func (e *env) volume(i int) kubelet.Volume {
	return e.volumeOf(fmt.Sprintf("pv-%02d", i), fmt.Sprintf("vol-%02d", i), bucket(i))
}

func (e *env) volumeOf(pv, handle, remotePath string) kubelet.Volume {
	v := kubelet.Volume{PV: pv, Handle: handle,
		Capability: harness.MountCapability(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER),
		Secret:     map[string]string{"remote": remoteName, "remotePath": remotePath, "configData": e.rcloneConfig()},
	}
	// A set of -bench.vfs-opt in interleaved variants: vfsOpt, or
	// vfsOpt|mountOpt.
	opt, mnt := tryingVFS, *flagMountOpt
	if opt == "" && !strings.Contains(*flagVFSOpt, ";") {
		opt = *flagVFSOpt
	}
	if vfs, m, ok := strings.Cut(opt, "|"); ok {
		opt, mnt = vfs, m
	}
	if opt != "" {
		v.Secret["vfsOpt"] = opt
	}
	if mnt != "" {
		v.Secret["mountOpt"] = mnt
	}
	return v
}

// stage calls NodeStageVolume as the kubelet does and times the call alone.
func (e *env) stage(b *testing.B, v kubelet.Volume) time.Duration {
	b.Helper()
	staging := e.kubelet.StagingPath(v)
	if err := os.MkdirAll(staging, 0o750); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	start := time.Now()
	_, err := e.driver.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: v.Handle, StagingTargetPath: staging, VolumeCapability: v.Capability,
		Secrets: v.Secret, VolumeContext: v.Context,
	})
	took := time.Since(start)
	if err != nil {
		b.Fatalf("NodeStageVolume %s: %v", v.Handle, err)
	}
	return took
}

// publish calls NodePublishVolume for a pod and times the call alone.
func (e *env) publish(b *testing.B, v kubelet.Volume, pod string) (string, time.Duration) {
	b.Helper()
	target := e.kubelet.TargetPath(v, pod)
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	start := time.Now()
	_, err := e.driver.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: v.Handle, StagingTargetPath: e.kubelet.StagingPath(v), TargetPath: target,
		VolumeCapability: v.Capability, VolumeContext: v.Context,
	})
	took := time.Since(start)
	if err != nil {
		b.Fatalf("NodePublishVolume %s to %s: %v", v.Handle, pod, err)
	}
	return target, took
}

func podName(vol, j int) string { return fmt.Sprintf("pod-%02d-%d", vol, j) }

// ---- plain rclone mounts ----

type rcloneMount struct {
	path string
	pid  int // the daemon
}

// rcloneMount runs `rclone mount --daemon` of remotePath at mountpoint with
// rclone's defaults but for what any shared mount needs (the cache mode
// that lets programs write, uid, gid, umask, allow-other) and extra flags,
// and times it until the mount is in /proc/self/mountinfo and answers a
// stat.
func (e *env) rcloneMount(b *testing.B, remotePath, mountpoint, cmdName string, extra ...string) (*rcloneMount, time.Duration) {
	b.Helper()
	if err := os.MkdirAll(mountpoint, 0o755); err != nil {
		b.Fatal(err)
	}
	n := len(e.mounts)
	cache := filepath.Join(e.dir, "rclone-cache", fmt.Sprint(n))
	logFile := filepath.Join(e.dir, "rclone-logs", fmt.Sprintf("%d.log", n))
	if err := os.MkdirAll(filepath.Dir(logFile), 0o755); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(e.rclone, "--config", e.conf, cmdName, remoteName+":"+remotePath, mountpoint,
		"--daemon", "--vfs-cache-mode", "writes", "--uid", "1000", "--gid", "1000", "--umask", "0002",
		"--allow-other", "--cache-dir", cache, "--log-file", logFile)
	cmd.Args = append(cmd.Args, extra...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + e.dir}, tryingEnv()...)
	// A file, not a pipe: the daemon inherits it, and cmd.Wait would wait
	// for a pipe until the daemon exits.
	out, err := os.Create(logFile + ".out")
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var took time.Duration
	deadline := time.Now().Add(callTimeout)
	var exitErr error
	parentGone := false
	for {
		if benchkit.IsMountPoint(mountpoint) {
			if _, err := statWithin(mountpoint, 5*time.Second); err == nil {
				took = time.Since(start)
				break
			}
		}
		if !parentGone {
			select {
			case exitErr = <-exited:
				parentGone = true
				if exitErr != nil {
					log, _ := os.ReadFile(logFile)
					msg, _ := os.ReadFile(out.Name())
					b.Fatalf("rclone %s --daemon: %v: %s %s", cmdName, exitErr, msg, log)
				}
			default:
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("rclone %s of %s not ready within %s", cmdName, remotePath, callTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	if !parentGone {
		select {
		case exitErr = <-exited:
		case <-time.After(callTimeout):
			b.Fatal("rclone --daemon parent did not exit")
		}
		if exitErr != nil {
			msg, _ := os.ReadFile(out.Name())
			b.Fatalf("rclone %s --daemon: %v: %s", cmdName, exitErr, msg)
		}
	}
	m := &rcloneMount{path: mountpoint}
	for _, pid := range benchkit.PIDsBelow(filepath.Dir(e.rclone)) {
		if contains(benchkit.Cmdline(pid), mountpoint) {
			m.pid = pid
		}
	}
	if m.pid == 0 {
		b.Fatalf("no rclone daemon for %s", mountpoint)
	}
	e.mounts = append(e.mounts, m)
	return m, took
}

// unmount ends a plain rclone mount: the daemon exits when its FUSE session
// ends; it is killed if it has not after 10s.
func (m *rcloneMount) unmount() {
	_ = unix.Unmount(m.path, 0)
	for i := 0; i < 200 && !benchkit.Zombie(m.pid); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(m.pid, syscall.SIGKILL)
	_ = unix.Unmount(m.path, unix.MNT_DETACH)
}

func (e *env) unmountAll() {
	for _, m := range e.mounts {
		m.unmount()
	}
	e.mounts = nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ---- bounded file access through mounts that may be dead or hung ----

var errTimeout = errors.New("timed out (the mount hangs)")

// statWithin stats path, giving up after d (a hung FUSE call cannot be
// cancelled; its goroutine ends when the mount is torn down).
func statWithin(path string, d time.Duration) (os.FileInfo, error) {
	type res struct {
		fi  os.FileInfo
		err error
	}
	ch := make(chan res, 1)
	go func() { fi, err := os.Stat(path); ch <- res{fi, err} }()
	select {
	case r := <-ch:
		return r.fi, r.err
	case <-time.After(d):
		return nil, errTimeout
	}
}

// readWithin reads a file, giving up after d.
func readWithin(path string, d time.Duration) ([]byte, error) {
	type res struct {
		data []byte
		err  error
	}
	ch := make(chan res, 1)
	go func() { data, err := os.ReadFile(path); ch <- res{data, err} }()
	select {
	case r := <-ch:
		return r.data, r.err
	case <-time.After(d):
		return nil, errTimeout
	}
}

// readsSeed reports whether path/seed.txt holds the seed of bucket.
func readsSeed(dir, bucket string) error {
	data, err := readWithin(filepath.Join(dir, "seed.txt"), 2*time.Second)
	if err != nil {
		return err
	}
	if string(data) != seedOf(bucket) {
		return fmt.Errorf("%s/seed.txt holds %q", dir, data)
	}
	return nil
}

// untilAll polls check(i) for every i in [0,n) concurrently until each has
// succeeded once, and returns when each first did (since start); it fails
// the benchmark after callTimeout.
func untilAll(b *testing.B, start time.Time, n int, check func(i int) error) []time.Duration {
	b.Helper()
	took, err := pollAll(start, n, check)
	if err != nil {
		b.Fatal(err)
	}
	return took
}

// pollAll is untilAll for any goroutine: it returns the error.
func pollAll(start time.Time, n int, check func(i int) error) ([]time.Duration, error) {
	took := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	deadline := start.Add(callTimeout)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				err := check(i)
				if err == nil {
					took[i] = time.Since(start)
					return
				}
				if time.Now().After(deadline) {
					errs[i] = err
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("not within %s: %w", callTimeout, err)
	}
	return took, nil
}

// countingWriter counts what it is given and drops it.
type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

var _ io.Writer = (*countingWriter)(nil)

// keepLogs copies the *.log files below dir (mounts are gone) into dst.
func keepLogs(dir, dst string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".log") {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		out := filepath.Join(dst, rel)
		if data, err := os.ReadFile(p); err == nil && os.MkdirAll(filepath.Dir(out), 0o755) == nil {
			_ = os.WriteFile(out, data, 0o644)
		}
		return nil
	})
}
