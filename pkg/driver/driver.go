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
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/mounter"
	"github.com/csi-rclone/csi-rclone/pkg/state"
	"github.com/csi-rclone/csi-rclone/pkg/uidpool"
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

// DefaultDrainTimeout stays under the 2 minutes the kubelet gives a CSI
// call, so that a slow drain answers Unavailable (and the kubelet retries)
// before the kubelet gives up on the call.
const DefaultDrainTimeout = 90 * time.Second

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
	// DrainTimeout bounds NodeUnstageVolume's wait for pending uploads; the
	// call's own deadline, less a margin, bounds it too. After it the call
	// answers Unavailable and the uploads go on.
	DrainTimeout time.Duration
	// Worker says how to start mount workers; their uids come from
	// WorkerUIDs.
	Worker worker.Options
	// WorkerUIDs are set aside for mount workers, one uid (and a gid of the
	// same number) per staged volume: no user or pod may run as them.
	WorkerUIDs uidpool.Range
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
	// ProbeTimeout bounds NodeGetVolumeStats and NodeGetVolumeHealth: a
	// mount that does not answer statfs by then is reported not answering.
	ProbeTimeout time.Duration
	// Events, when set, records Kubernetes Events on the pods of a volume
	// that is being mounted again (events.go); nil: none.
	Events EventRecorder
	// Mounter runs the mount workers in mount pods; nil: as children of
	// this process (Worker says how).
	Mounter Mounter
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
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.RecoveryConcurrency <= 0 {
		o.RecoveryConcurrency = 4
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 5 * time.Second
	}
	if o.WorkerUIDs == (uidpool.Range{}) {
		o.WorkerUIDs = DefaultWorkerUIDs
	}
}

// DefaultWorkerUIDs is far above the uids that distributions give users
// (1000 on), that /etc/subuid hands out (100000 on) and that OpenShift
// gives namespaces (1000000000 + 10000 per namespace), and below 2^31 for
// tools that read uids as signed numbers.
var DefaultWorkerUIDs = uidpool.Range{First: 2_000_000_000, Last: 2_000_065_535}

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
		if err := o.WorkerUIDs.Validate(); err != nil {
			return fmt.Errorf("worker uids: %w", err)
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

	// tasks are the background goroutines; their context is the driver's,
	// cancelled by Shutdown.
	tasks    *tasks
	srvMu    sync.Mutex
	srv      *grpc.Server // while Run serves
	closed   bool         // Shutdown has begun: Run serves no more
	shutdown sync.Once
}

// New checks opts and prepares the node's directories.
func New(opts Options) (*Driver, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	d := &Driver{opts: opts, tasks: newTasks()}
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
		uids, err := uidpool.New(opts.WorkerUIDs)
		if err != nil {
			return nil, err
		}
		d.mounter = m
		d.node = newNodeServer(d, store, uids)
		if opts.Mounter != nil {
			d.node.startWorker = opts.Mounter.Start
		}
	}
	return d, nil
}

// stopGrace is how long calls in progress may take to finish when Run's
// context ends, before they are cancelled.
const stopGrace = 10 * time.Second

// Run serves until ctx ends or Shutdown, then stops the gRPC server. The
// recorded volumes are registered as recovering before the first call is
// served, so that a call for one waits until it is mounted again; the driver
// reports ready once every volume had its first attempt. Workers keep their
// mounts until Shutdown or until this process exits.
func (d *Driver) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(d.tasks.ctx, cancel) // Shutdown ends Run too
	defer stop()

	lis, err := listen(d.opts.Endpoint)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(logRPC, recoverPanic), grpc.WaitForHandlers(true))
	csi.RegisterIdentityServer(srv, d.identity)
	if d.controller != nil {
		csi.RegisterControllerServer(srv, d.controller)
	}
	if d.node != nil {
		csi.RegisterNodeServer(srv, d.node)
	}
	if !d.setServer(srv) {
		lis.Close()
		return errShutdown
	}
	var vols []*stagedVolume
	if d.node != nil {
		vols = d.node.load()
	}
	klog.InfoS("serving CSI", "driver", d.opts.DriverName, "version", d.opts.Version, "mode", d.opts.Mode, "endpoint", d.opts.Endpoint, "node", d.opts.NodeID, "recovering", len(vols))

	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(lis) }()
	if d.opts.MetricsAddress != "" {
		ms := &http.Server{Addr: d.opts.MetricsAddress, Handler: d.metricsHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- ms.ListenAndServe() }()
		defer ms.Close()
	}
	// Identity answers at once, saying not ready; node calls for a volume
	// wait until it is mounted again.
	if d.node == nil {
		d.ready.Store(true)
	} else if !d.tasks.Go("recovery", func(ctx context.Context) {
		start := time.Now()
		d.node.recoverAll(ctx, vols)
		klog.InfoS("recovery done", "duration", time.Since(start))
		d.ready.Store(ctx.Err() == nil)
	}) {
		d.node.abandon(vols)
	}
	select {
	case <-ctx.Done():
		stopServer(srv)
		return nil
	case err := <-errc:
		stopServer(srv)
		return err
	}
}

func (d *Driver) setServer(srv *grpc.Server) bool {
	d.srvMu.Lock()
	defer d.srvMu.Unlock()
	if d.closed {
		return false
	}
	d.srv = srv
	return true
}

// stopServer lets the calls in progress finish for up to stopGrace, then
// cancels them. It returns when every handler has returned.
func stopServer(srv *grpc.Server) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	timer := time.NewTimer(stopGrace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		srv.Stop()
		<-done
	}
}

// Shutdown stops every worker without unmounting: used by tests and by a
// process that is going away. Files not yet uploaded stay in the cache, and
// the records stay for the next driver to recover from. In order: no new
// call or background task starts; the calls in progress are cancelled and
// waited for, then the background tasks (recovery, supervision); then the
// workers are killed. Nothing is left that could start a worker after that.
func (d *Driver) Shutdown() {
	d.shutdown.Do(func() {
		d.srvMu.Lock()
		d.closed = true
		srv := d.srv
		d.srvMu.Unlock()
		d.tasks.Cancel()
		if srv != nil {
			srv.Stop() // cancels the calls in progress and waits for them
		}
		d.tasks.Wait()
		if d.node != nil {
			d.node.killAll()
			if err := d.mounter.Close(); err != nil {
				klog.ErrorS(err, "releasing scratch dir")
			}
		}
	})
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

// prepareDirs makes the node's directories. The state dir and its "mnt"
// are traversable (0711, not listable), records and scratch binds stay
// 0700; each volume's mount point is in a dir only its worker's group may
// pass (root's, 0710), which keeps every other uid out. The cache root is 0711 too, so that each
// worker reaches its own cache dir, 0700 and its uid's.
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
	// What an unprivileged worker needs, said now rather than at the first
	// mount, which fails without it.
	for dir := o.CacheDir; ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			klog.ErrorS(nil, "mount workers run as uids of their own and cannot reach their cache dirs: make the dir traversable (chmod o+x), or every mount fails", "cacheDir", o.CacheDir, "dir", dir)
			break
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	return nil
}
