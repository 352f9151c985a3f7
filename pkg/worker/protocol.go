// Package worker runs one rclone mount per staged volume in a process of its
// own: the csi-rclone binary started again with the "mount-worker" argument.
//
// The parent hands the worker its Spec, credentials included, as the first
// JSON line on the worker's stdin; nothing secret is ever on the command line,
// in the environment or in a file. The worker answers with events on file
// descriptor 3. Later lines on stdin are commands, each with an id that its
// answer echoes, so that the parent can drop the late answer to a command it
// gave up on. "drain" waits until no file is open, none is dirty and no
// upload is queued; the parent then unmounts, and the worker exits when the
// kernel ends the FUSE session, with a last "exit" event that says how many
// files it leaves in the cache not uploaded. "stats" answers at once with
// the volume's numbers (bytes to and from the remote, cache, uploads) for
// the driver's metrics. When stdin reaches EOF the parent is gone, and the
// worker exits at once: the mount goes dead and the driver, when it comes
// back, mounts the volume again.
package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"golang.org/x/sys/unix"
	"net"
	"os"

	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/sandbox"
	"github.com/csi-rclone/csi-rclone/secrets"
)

// Arg is the first argument that makes the csi-rclone binary a worker.
const Arg = "mount-worker"

// Spec is what a worker needs to mount one volume.
type Spec struct {
	VolumeID   string         `json:"volumeID"`
	MountPoint string         `json:"mountPoint"`
	CacheDir   string         `json:"cacheDir"`
	Volume     secrets.Volume `json:"volume"`
}

// String keeps the config (credentials) out of any log line.
func (s Spec) String() string {
	return fmt.Sprintf("{volume:%s mountPoint:%s remote:%s}", s.VolumeID, s.MountPoint, s.Volume.Remote)
}

// command is a parent → worker line after the Spec.
type command struct {
	ID uint64 `json:"id"`
	Op string `json:"op"` // opDrain, opStats or opExit
	// TimeoutMS bounds how long the worker waits before it answers; a drain
	// goes on after it has answered "pending".
	TimeoutMS int64 `json:"timeoutMs,omitempty"`
}

// Commands.
const (
	opDrain = "drain"
	opStats = "stats" // answered with evStats at once
	opExit  = "exit"  // leave at once, unanswered (a mount pod's worker)
)

// Event types.
const (
	evReady   = "ready"   // mounted (no id)
	evError   = "error"   // the mount failed (no id), or a command did
	evPending = "pending" // a drain's timeout passed with work left
	evDrained = "drained" // nothing open, dirty or queued: safe to unmount
	evExit    = "exit"    // the worker's last word (no id)
	evStats   = "stats"   // the answer to opStats
)

// event is a worker → parent line.
type event struct {
	// ID is the command this event answers; 0 for events no command asked
	// for (ready, error at start, exit).
	ID   uint64 `json:"id,omitempty"`
	Type string `json:"type"`
	// VolumeID is the volume a mount pod's worker serves, in the ready
	// event that answers an attach.
	VolumeID string `json:"volumeID,omitempty"`
	Kind     string `json:"kind,omitempty"`
	Message  string `json:"message,omitempty"`
	Work     Work   `json:"work"`
	Stats    *Stats `json:"stats,omitempty"`
}

// Work is what keeps a volume from being drained.
type Work struct {
	Busy    bool `json:"busy,omitempty"`    // a file is open (or its RELEASE not yet handled)
	Dirty   int  `json:"dirty,omitempty"`   // files in the cache not yet uploaded
	Uploads int  `json:"uploads,omitempty"` // uploads queued or running
}

// Done says whether nothing is left to do.
func (w Work) Done() bool { return !w.Busy && w.Dirty == 0 && w.Uploads == 0 }

func (w Work) String() string {
	return fmt.Sprintf("%d file(s) not yet uploaded, %d upload(s) queued or running, files open: %t", w.Dirty, w.Uploads, w.Busy)
}

// Error kinds a worker reports; the driver turns them into gRPC codes.
var (
	ErrInvalid          = secrets.ErrInvalid
	ErrPermissionDenied = errors.New("permission denied by the storage")
	ErrNotFound         = errors.New("not found on the storage")
	ErrUnavailable      = errors.New("storage unavailable")
	ErrUploadsPending   = errors.New("uploads still pending")
	ErrMount            = errors.New("mount failed")
)

var kinds = map[string]error{
	"invalid":          ErrInvalid,
	"permissionDenied": ErrPermissionDenied,
	"notFound":         ErrNotFound,
	"unavailable":      ErrUnavailable,
	"mount":            ErrMount,
}

func kindOf(err error) string {
	for k, e := range kinds {
		if errors.Is(err, e) {
			return k
		}
	}
	return "mount"
}

// MountError is a worker's failure, its message already free of credentials.
type MountError struct {
	Kind    error
	Message string
}

func (e *MountError) Error() string { return e.Message }
func (e *MountError) Unwrap() error { return e.Kind }

func errorFromEvent(ev event) error {
	kind, ok := kinds[ev.Kind]
	if !ok {
		kind = ErrMount
	}
	return &MountError{Kind: kind, Message: ev.Message}
}

// Main runs a worker in this process, on stdin and file descriptor 3, and
// exits. The csi-rclone binary calls it when its first argument is Arg; test
// binaries call it from TestMain so that tests need no separate build.
//
// Before it reads anything from the driver, the worker confines itself
// (pkg/sandbox): whatever the tenant's config makes rclone do happens inside.
func Main() {
	fl := flag.NewFlagSet(Arg, flag.ContinueOnError)
	volumeID := fl.String("volume-id", "", "the volume, for logs")
	cacheDir := fl.String("cache-dir", "", "the volume's cache dir, the one place the worker may write")
	memoryLimit := fl.Int64("memory-limit", 0, "data segment limit in bytes (RLIMIT_DATA); 0: none")
	socket := fl.String("socket", "", "in a mount pod: the unix socket to wait on for the node plugin; empty: the driver's child, on stdin and fd 3")
	if err := fl.Parse(os.Args[2:]); err != nil || *cacheDir == "" {
		fmt.Fprintln(os.Stderr, "mount-worker: this command is started by the driver")
		os.Exit(2)
	}
	var events *os.File
	var ln *net.UnixListener
	if *socket == "" {
		if events = os.NewFile(3, "events"); events == nil {
			fmt.Fprintln(os.Stderr, "mount-worker: file descriptor 3 is not open; this command is started by the driver")
			os.Exit(2)
		}
	} else {
		// Before the sandbox, which would not let it make the socket.
		var err error
		if ln, err = Listen(*socket); err != nil {
			fmt.Fprintln(os.Stderr, "mount-worker:", err)
			os.Exit(1)
		}
	}
	// The cgo resolver would load NSS modules, which the sandbox does not
	// let it read; Go's own reads resolv.conf and hosts.
	net.DefaultResolver.PreferGo = true
	// The worker lowers its own limit (the driver may not, without
	// CAP_SYS_RESOURCE, for a process of another uid), before anything
	// the tenant wrote runs: that starts with the spec.
	if *memoryLimit > 0 {
		lim := uint64(*memoryLimit)
		if err := unix.Setrlimit(unix.RLIMIT_DATA, &unix.Rlimit{Cur: lim, Max: lim}); err != nil {
			fmt.Fprintln(os.Stderr, "mount-worker: limiting memory:", err)
			os.Exit(1)
		}
	}
	onSpec := func(*Spec) {}
	if ln != nil {
		// A pod's log is read by others than the driver: rclone's lines,
		// which may quote a credential, are redacted here.
		onSpec = redactStderr()
	}
	res, err := sandbox.Confine(sandbox.Options{CacheDir: *cacheDir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mount-worker:", err)
		os.Exit(1)
	}
	klog.InfoS("worker confined", "volumeID", *volumeID, "uid", os.Getuid(), "landlockABI", res.LandlockABI, "boundingSetDropped", res.BoundingSetDropped)
	if res.LandlockABI == 0 {
		klog.InfoS("this kernel has no Landlock: the worker's filesystem access is not restricted", "volumeID", *volumeID)
	}
	klog.Flush()
	if ln != nil {
		err = ServeSocket(context.Background(), ln, *cacheDir, onSpec)
	} else {
		err = Serve(context.Background(), os.Stdin, events)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mount-worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// IsWorkerInvocation reports whether args (os.Args) start a worker.
func IsWorkerInvocation(args []string) bool {
	return len(args) > 1 && args[1] == Arg
}
