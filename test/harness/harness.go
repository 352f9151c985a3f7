// Package harness runs the real driver in-process on a unix socket, next to
// a real S3 server on loopback, for the integration tests, csi-sanity and the
// demo. Mounts are real: it needs root and /dev/fuse.
package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	mount "k8s.io/mount-utils"

	"github.com/csi-rclone/csi-rclone/pkg/driver"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/test/s3server"
)

// Test credentials of the loopback S3 server.
const (
	AccessKeyID     = "csi-rclone-test-key"
	SecretAccessKey = "csi-rclone-test-secret-3f9a1c"
	RemoteName      = "store"
)

// Env is a running driver and S3 server.
type Env struct {
	Dir        string
	Endpoint   string // unix socket URL
	SocketPath string
	S3         *s3server.Server
	Driver     *driver.Driver
	Conn       *grpc.ClientConn
	Identity   csi.IdentityClient
	Controller csi.ControllerClient
	Node       csi.NodeClient
	cancel     context.CancelFunc
	done       chan error
}

// Supported says why real mounts cannot run here, or "" when they can.
func Supported() string {
	if os.Geteuid() != 0 {
		return "needs root for FUSE and bind mounts"
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return "needs /dev/fuse"
	}
	return ""
}

// WorkerUIDs are the uids the mount workers run as, one per volume, as in
// production.
var WorkerUIDs = driver.DefaultWorkerUIDs

// Traversable creates dir and lets the unprivileged worker reach it: it
// adds o+x to dir and to each of its ancestors below the temp dir that
// lacks it (t.TempDir makes them 0700).
func Traversable(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	top := filepath.Clean(os.TempDir())
	for d := filepath.Clean(dir); strings.HasPrefix(d, top+"/"); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
			return err
		}
	}
	return nil
}

// WorkerBinary puts this (test) binary where the unprivileged worker can
// run it, in dir: a hard link, or a copy across filesystems.
func WorkerBinary(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "csi-rclone-worker")
	if err := os.Link(self, dst); err == nil {
		return dst, os.Chmod(dst, 0o755)
	}
	in, err := os.Open(self)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return "", err
	}
	return dst, out.Close()
}

// WorkerMemoryLimit is the workers' data segment limit in tests: the
// driver's default.
const WorkerMemoryLimit = 2 << 30

// WorkerPIDs lists the live (not zombie) worker processes of a volume that
// this Env's driver started: matched by the worker binary's path too, since
// other test runs on the machine use the same volume ids.
func (e *Env) WorkerPIDs(volumeID string) []int {
	bin := filepath.Join(e.Dir, "csi-rclone-worker")
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) < 4 || args[0] != bin || args[1] != worker.Arg || args[3] != volumeID {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat")); err != nil || strings.Contains(string(stat), ") Z ") {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// Start starts an S3 server and the driver (node and controller) under dir.
// tweak, if not nil, may change the driver options.
func Start(ctx context.Context, dir string, tweak func(*driver.Options)) (*Env, error) {
	if err := Traversable(dir); err != nil {
		return nil, err
	}
	bin, err := WorkerBinary(dir)
	if err != nil {
		return nil, err
	}
	s3, err := s3server.Start(ctx, filepath.Join(dir, "s3"), AccessKeyID, SecretAccessKey)
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: dir, S3: s3, SocketPath: filepath.Join(dir, "csi.sock")}
	e.Endpoint = "unix://" + e.SocketPath
	opts := driver.Options{
		DriverName:   "csi-rclone",
		Version:      "test",
		NodeID:       "test-node",
		Endpoint:     e.Endpoint,
		Mode:         driver.ModeAll,
		StateDir:     filepath.Join(dir, "state"),
		CacheDir:     filepath.Join(dir, "cache"),
		MountTimeout: 30 * time.Second,
		DrainTimeout: 30 * time.Second,
		DefaultUID:   1000,
		DefaultGID:   1000,
		Worker:       worker.Options{Binary: bin, MemoryLimit: WorkerMemoryLimit},
		WorkerUIDs:   WorkerUIDs,
	}
	if tweak != nil {
		tweak(&opts)
	}
	d, err := driver.New(opts)
	if err != nil {
		_ = s3.Stop(ctx)
		return nil, err
	}
	e.Driver = d
	runCtx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan error, 1)
	go func() { e.done <- d.Run(runCtx) }()

	conn, err := grpc.NewClient(e.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.Close()
		return nil, err
	}
	e.Conn = conn
	e.Identity = csi.NewIdentityClient(conn)
	e.Controller = csi.NewControllerClient(conn)
	e.Node = csi.NewNodeClient(conn)
	if err := e.waitReady(ctx); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Env) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		r, err := e.Identity.Probe(ctx, &csi.ProbeRequest{})
		if err == nil && r.GetReady().GetValue() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("driver not ready: %v", errors.Join(err, ctx.Err()))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Close stops the driver (killing its workers) and the S3 server.
func (e *Env) Close() {
	if e.Conn != nil {
		_ = e.Conn.Close()
	}
	if e.cancel != nil {
		e.cancel()
		<-e.done
	}
	if e.Driver != nil {
		e.Driver.Shutdown()
	}
	if e.S3 != nil {
		_ = e.S3.Stop(context.Background())
	}
	UnmountAll(e.Dir)
}

// UnmountAll detaches every mount below dir, deepest first, so that a test
// that failed half-way leaves nothing mounted.
func UnmountAll(dir string) {
	infos, err := mount.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, mi := range infos {
		if strings.HasPrefix(mi.MountPoint, dir+"/") {
			points = append(points, mi.MountPoint)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		_ = unix.Unmount(p, unix.MNT_DETACH)
	}
}

// Secret is a node-stage secret for a bucket of the S3 server.
func (e *Env) Secret(bucketPath string) map[string]string {
	return map[string]string{
		"remote":     RemoteName,
		"remotePath": bucketPath,
		"configData": e.S3.RcloneConfig(RemoteName),
	}
}

// MountCapability is a filesystem capability with the given access mode.
func MountCapability(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}
