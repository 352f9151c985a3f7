// Command csi-rclone is the CSI driver: node plugin, controller, or both, and
// (started again by itself) the per-volume mount worker.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/driver"
	"github.com/csi-rclone/csi-rclone/pkg/mounter"
	"github.com/csi-rclone/csi-rclone/pkg/provision"
	"github.com/csi-rclone/csi-rclone/pkg/uidpool"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if worker.IsWorkerInvocation(os.Args) {
		worker.Main()
	}
	if provision.IsInvocation(os.Args) {
		provision.Main()
	}
	if mounter.IsReplaceInvocation(os.Args) {
		mounter.ReplaceMain()
	}
	if len(os.Args) > 1 && os.Args[1] == "version" {
		fmt.Println(version)
		return
	}
	cmd := run
	if len(os.Args) > 1 && os.Args[1] == "encrypt" {
		cmd = encrypt
		os.Args = os.Args[1:]
	}
	if err := cmd(os.Args[1:]); err != nil {
		klog.ErrorS(err, "csi-rclone failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("csi-rclone", flag.ContinueOnError)
	klog.InitFlags(fl)
	opts := driver.Options{Version: version}
	var mode string
	var ss secretServiceFlags
	var tenant tenantFlags
	var sidecars sidecarFlags
	var mounter mounterFlags
	fl.StringVar(&opts.Endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint")
	fl.StringVar(&opts.NodeID, "nodeid", "", "node id (the Kubernetes node name)")
	fl.StringVar(&opts.DriverName, "driver-name", driver.DefaultDriverName, "CSI driver name; equals the CSIDriver object's name")
	fl.StringVar(&mode, "mode", string(driver.ModeAll), "services to serve: node, controller or all")
	fl.StringVar(&opts.StateDir, "state-dir", "/run/csi-rclone", "driver state on the node; a memory-backed, root-only directory")
	fl.StringVar(&opts.CacheDir, "cache-dir", "/var/lib/csi-rclone/cache", "root of the per-volume rclone VFS caches")
	fl.DurationVar(&opts.MountTimeout, "mount-timeout", 2*time.Minute, "how long NodeStageVolume waits for a mount")
	fl.DurationVar(&opts.DrainTimeout, "drain-timeout", driver.DefaultDrainTimeout, "how long NodeUnstageVolume waits for open files and pending uploads before it answers Unavailable (the uploads go on; the kubelet retries); keep it under the kubelet's 2-minute CSI call timeout")
	fl.StringVar(&opts.MetricsAddress, "metrics-address", "", "serve Prometheus metrics on this address (e.g. :9090); empty: off")
	fl.IntVar(&opts.RecoveryConcurrency, "recovery-concurrency", 4, "how many volumes are mounted again at once after a restart")
	events := fl.Bool("events", false, "record Events (VolumeRecovering, VolumeRecovered) on the pods of a volume that is mounted again, through the in-cluster API; needs create and patch on events, and podInfoOnMount in the CSIDriver")
	opts.WorkerUIDs = driver.DefaultWorkerUIDs
	fl.Func("worker-uid-range", fmt.Sprintf("uids set aside for the mount workers, FIRST-LAST or FIRST+COUNT: each staged volume's worker runs as one of its own (gid the same number); no user or pod may run as them (default %s)", driver.DefaultWorkerUIDs),
		func(s string) (err error) { opts.WorkerUIDs, err = uidpool.ParseRange(s); return err })
	fl.IntVar(&opts.DefaultUID, "default-uid", 1000, "owner of files in a mount unless the volume sets uid")
	fl.IntVar(&opts.DefaultGID, "default-gid", 1000, "group of files in a mount unless the volume sets gid or the pod an fsGroup")
	tenant.register(fl)
	ss.register(fl)
	sidecars.register(fl)
	mounter.register(fl)
	if err := fl.Parse(args); err != nil {
		return err
	}
	dec, err := ss.client(opts.NodeID)
	if err != nil {
		return err
	}
	if dec != nil {
		opts.Decrypter = dec
		defer dec.Close()
	}
	opts.Mode = driver.Mode(mode)
	if opts.Policy, err = tenant.policy(); err != nil {
		return err
	}
	if tenant.workerMemory > 0 {
		opts.Worker.MemoryLimit = int64(tenant.workerMemory)
	}

	if *events {
		rec, stopEvents, err := driver.InClusterEventRecorder(opts.DriverName, opts.NodeID)
		if err != nil {
			return err
		}
		defer stopEvents()
		opts.Events = rec
	}
	if err := mounter.apply(&opts, int64(tenant.limits.DefaultCacheSize)); err != nil {
		return err
	}
	d, err := driver.New(opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, stopSidecars := sidecars.start(ctx, opts.DriverName, opts.Endpoint)
	defer stopSidecars()
	// Workers die with this process; their mounts come back when it starts again.
	defer d.Shutdown()
	return d.Run(ctx)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
