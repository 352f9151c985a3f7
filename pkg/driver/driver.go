// Package driver serves the CSI Identity, Controller and Node services.
//
// The Node service stages a volume by starting one rclone worker process that
// mounts it at the staging path, and publishes it by bind-mounting the
// staging path onto each pod's target. Errors from the packages below are
// turned into gRPC status codes here, at the RPC boundary, and nowhere else.
package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/mounter"
	"github.com/csi-rclone/csi-rclone/pkg/state"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/secrets"
)

// Mode says which CSI services the driver serves.
type Mode string

// The modes.
const (
	ModeNode       Mode = "node"
	ModeController Mode = "controller"
	ModeAll        Mode = "all"
)

func (m Mode) node() bool       { return m == ModeNode || m == ModeAll }
func (m Mode) controller() bool { return m == ModeController || m == ModeAll }

// DefaultDriverName is the name StorageClasses use today.
const DefaultDriverName = "csi-rclone"

// Options configure a Driver.
type Options struct {
	DriverName string
	Version    string
	NodeID     string
	// Endpoint is the CSI socket, "unix:///path/csi.sock".
	Endpoint string
	Mode     Mode
	// StateDir holds the driver's own files on the node (scratch binds).
	StateDir string
	// CacheDir is the root of the per-volume VFS cache directories.
	CacheDir string
	// MountTimeout bounds NodeStageVolume's wait for a mount.
	MountTimeout time.Duration
	// DrainTimeout bounds NodeUnstageVolume's wait for pending uploads.
	DrainTimeout time.Duration
	// Worker says how to start mount workers.
	Worker worker.Options
	// Policy says what tenants may set in stage secrets.
	Policy secrets.Policy
	// Decrypter is the secret service client; nil when none is configured.
	Decrypter secrets.Decrypter
	// DefaultUID and DefaultGID own the files of a mount unless the volume
	// says otherwise.
	DefaultUID, DefaultGID int
	// RecoveryConcurrency bounds how many volumes are mounted again at once
	// when the driver starts.
	RecoveryConcurrency int
	// MetricsAddress serves Prometheus metrics on /metrics; empty: off.
	MetricsAddress string
}

func (o *Options) setDefaults() {
	if o.DriverName == "" {
		o.DriverName = DefaultDriverName
	}
	if o.Mode == "" {
		o.Mode = ModeAll
	}
	if o.MountTimeout == 0 {
		o.MountTimeout = 2 * time.Minute
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 5 * time.Minute
	}
	if o.RecoveryConcurrency <= 0 {
		o.RecoveryConcurrency = 4
	}
}

func (o *Options) validate() error {
	switch o.Mode {
	case ModeNode, ModeController, ModeAll:
	default:
		return fmt.Errorf("unknown mode %q (node, controller or all)", o.Mode)
	}
	if o.Endpoint == "" {
		return errors.New("endpoint is required")
	}
	if o.Mode.node() {
		if o.NodeID == "" {
			return errors.New("node id is required in node mode")
		}
		if o.StateDir == "" || o.CacheDir == "" {
			return errors.New("state dir and cache dir are required in node mode")
		}
	}
	return nil
}

// Driver is a CSI driver instance.
type Driver struct {
	opts    Options
	mounter *mounter.Mounter
	ready   atomic.Bool

	identity   *identityServer
	controller *controllerServer
	node       *nodeServer
}

// New checks opts and prepares the node's directories.
func New(opts Options) (*Driver, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	d := &Driver{opts: opts}
	d.identity = &identityServer{d: d}
	if opts.Mode.controller() {
		d.controller = newControllerServer(d)
	}
	if opts.Mode.node() {
		if err := prepareDirs(&opts); err != nil {
			return nil, err
		}
		m, err := mounter.New(filepath.Join(opts.StateDir, "scratch"))
		if err != nil {
			return nil, err
		}
		store, err := state.New(filepath.Join(opts.StateDir, "volumes"))
		if err != nil {
			return nil, err
		}
		d.mounter = m
		d.node = newNodeServer(d, store)
	}
	return d, nil
}

// Run serves until ctx ends, then stops the gRPC server. Workers keep their
// mounts until this process exits.
func (d *Driver) Run(ctx context.Context) error {
	lis, err := listen(d.opts.Endpoint)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(logRPC))
	csi.RegisterIdentityServer(srv, d.identity)
	if d.controller != nil {
		csi.RegisterControllerServer(srv, d.controller)
	}
	if d.node != nil {
		csi.RegisterNodeServer(srv, d.node)
	}
	klog.InfoS("serving CSI", "driver", d.opts.DriverName, "version", d.opts.Version, "mode", d.opts.Mode, "endpoint", d.opts.Endpoint, "node", d.opts.NodeID)

	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(lis) }()
	if d.opts.MetricsAddress != "" {
		ms := &http.Server{Addr: d.opts.MetricsAddress, Handler: promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- ms.ListenAndServe() }()
		defer ms.Close()
	}
	// Identity answers at once, saying not ready; node calls for a volume
	// wait until it is mounted again.
	if d.node != nil {
		start := time.Now()
		d.node.reconcile(ctx)
		klog.InfoS("recovery done", "duration", time.Since(start))
	}
	d.ready.Store(true)
	select {
	case <-ctx.Done():
		srv.GracefulStop()
		return nil
	case err := <-errc:
		return err
	}
}

// Shutdown stops every worker without unmounting: used by tests and by a
// process that is going away. Files not yet uploaded stay in the cache.
func (d *Driver) Shutdown() {
	if d.node != nil {
		d.node.killAll()
		if err := d.mounter.Close(); err != nil {
			klog.ErrorS(err, "releasing scratch dir")
		}
	}
}

func listen(endpoint string) (net.Listener, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "unix" {
		return nil, fmt.Errorf("endpoint %q: want unix:///path", endpoint)
	}
	path := u.Path
	if u.Host != "" {
		path = filepath.Join(u.Host, path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing stale socket: %w", err)
	}
	return net.Listen("unix", path)
}

// prepareDirs makes the node's directories. The state dir, its "mnt" and the
// cache root are traversable (0711, not listable) so that a worker that does
// not run as root reaches its own mount point and cache dir; records and
// scratch stay 0700.
func prepareDirs(o *Options) error {
	mnt := filepath.Join(o.StateDir, "mnt")
	for _, dir := range []string{mnt, o.CacheDir} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return err
		}
	}
	for _, dir := range []string{o.StateDir, mnt, o.CacheDir} {
		if err := os.Chmod(dir, 0o711); err != nil {
			return err
		}
	}
	if o.Worker.UID == 0 {
		return nil
	}
	// What an unprivileged worker needs, checked now rather than at the
	// first mount.
	if !fuseAllowsOther("/etc/fuse.conf") {
		return fmt.Errorf("mount workers run as uid %d, which needs user_allow_other in /etc/fuse.conf (or --worker-uid=0)", o.Worker.UID)
	}
	if fi, err := os.Stat("/dev/fuse"); err != nil || fi.Mode().Perm()&0o006 != 0o006 {
		return fmt.Errorf("mount workers run as uid %d, which needs /dev/fuse readable and writable by all (mode 0666, as distributions set it), or --worker-uid=0", o.Worker.UID)
	}
	for _, leaf := range []string{mnt, o.CacheDir} {
		for dir := leaf; ; dir = filepath.Dir(dir) {
			fi, err := os.Stat(dir)
			if err != nil {
				return err
			}
			if fi.Mode().Perm()&0o001 == 0 {
				return fmt.Errorf("mount workers run as uid %d and cannot reach %s: make it traversable (chmod o+x) or use --worker-uid=0", o.Worker.UID, dir)
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
	}
	return nil
}

// fuseAllowsOther reports whether fuse.conf lets users mount with allow_other.
func fuseAllowsOther(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "user_allow_other" {
			return true
		}
	}
	return false
}
