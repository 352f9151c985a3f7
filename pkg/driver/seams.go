package driver

import (
	"context"
	"os"
	"time"

	"github.com/csi-rclone/csi-rclone/pkg/mounter"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
)

// The node server's two ways into the kernel, each with a real
// implementation and a fake (node_fake_test.go), so that tables of RPC edge
// cases run without root or FUSE. The integration tests use the real ones.

// mountTable is what the node server does with mounts: *mounter.Mounter.
type mountTable interface {
	Check(path string) (mounter.State, error)
	Probe(ctx context.Context, path string) (mounter.State, mounter.Usage, error)
	WaitMounted(ctx context.Context, path string) error
	Bind(source, target string, readOnly bool) error
	BindSubdir(source, rel, target string, readOnly bool) error
	IsReadOnly(path string) (bool, error)
	Unmount(path string) error
	UnmountAndRemove(path string) error
	SubpathBinds(target string) ([]mounter.SubpathBind, error)
	ReplaceSubpathBind(ctx context.Context, b mounter.SubpathBind, source string) (int, error)
	ReplaceCopies(ctx context.Context, c mounter.StaleCopies) (int, error)
}

// mountWorker is one volume's running worker: *worker.Process, or a
// mount pod's (see Mounter).
type mountWorker interface {
	Pid() int
	Done() <-chan struct{}
	Drain(ctx context.Context, d time.Duration) error
	Wait(d time.Duration) (worker.Exit, bool)
	Kill()
	// Detach lets go of the worker as the driver shuts down: a child dies
	// with it, a mount pod goes on serving.
	Detach()
}

// workerStarter starts a volume's worker (and with it, its FUSE mount).
type workerStarter func(ctx context.Context, opts worker.Options, spec worker.Spec) (mountWorker, error)

// startProcess is the real workerStarter. It returns a nil interface, not
// a nil *Process, on failure.
func startProcess(ctx context.Context, opts worker.Options, spec worker.Spec) (mountWorker, error) {
	p, err := worker.Start(ctx, opts, spec)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// chowner gives a path to a worker's uid; os.Lchown, a no-op in the fakes'
// tests, which run as any user.
type chowner func(path string, uid, gid int) error

var (
	_ mountTable  = (*mounter.Mounter)(nil)
	_ mountWorker = (*worker.Process)(nil)
	_ chowner     = os.Lchown
)
