package provision

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"time"

	"github.com/rclone/rclone/fs"
	"github.com/rclone/rclone/fs/config"
	"github.com/rclone/rclone/fs/operations"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/sandbox"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/secrets"
)

// Arg is the first argument that makes the csi-rclone binary a provisioning
// child.
const Arg = "provision-worker"

// IsInvocation reports whether args (os.Args) start a provisioning child.
func IsInvocation(args []string) bool { return len(args) > 1 && args[1] == Arg }

// Operations a child performs on Dir, relative to the volume's path.
const (
	OpMkdir   = "mkdir"
	OpPurge   = "purge"
	OpArchive = "archive"
)

// Request is the one JSON line a child reads on stdin.
type Request struct {
	Op string `json:"op"`
	// Volume is the remote, with Path the base that holds Dir.
	Volume secrets.Volume `json:"volume"`
	Dir    string         `json:"dir"`
	// To is the new name of Dir for OpArchive, relative to the base too.
	To string `json:"to,omitempty"`
}

// String keeps the config (credentials) out of any log line.
func (r Request) String() string {
	return fmt.Sprintf("{op:%s remote:%s dir:%s to:%s}", r.Op, r.Volume.FsString(), r.Dir, r.To)
}

// answer is the one JSON line a child writes on stdout.
type answer struct {
	OK      bool   `json:"ok"`
	Kind    string `json:"kind,omitempty"`
	Message string `json:"message,omitempty"`
}

// Main runs a child in this process and exits. The csi-rclone binary calls
// it when its first argument is Arg; test binaries call it from TestMain.
//
// Before it reads the request, the child confines itself as a mount worker
// does (pkg/sandbox): its scratch dir is the one place it may write.
func Main() {
	fl := flag.NewFlagSet(Arg, flag.ContinueOnError)
	scratch := fl.String("scratch-dir", "", "the one dir the child may write")
	memoryLimit := fl.Int64("memory-limit", 0, "data segment limit in bytes (RLIMIT_DATA); 0: none")
	if err := fl.Parse(os.Args[2:]); err != nil || *scratch == "" {
		fmt.Fprintln(os.Stderr, "provision-worker: this command is started by the driver")
		os.Exit(2)
	}
	// The answer goes to the real stdout; anything rclone prints goes to stderr.
	out := os.Stdout
	os.Stdout = os.Stderr
	fail := func(err error) {
		_ = json.NewEncoder(out).Encode(answer{Kind: worker.KindOf(err), Message: "provision-worker: " + err.Error()})
		os.Exit(1)
	}
	// The sandbox lets the cgo resolver read no NSS modules.
	net.DefaultResolver.PreferGo = true
	if *memoryLimit > 0 {
		lim := uint64(*memoryLimit)
		if err := unix.Setrlimit(unix.RLIMIT_DATA, &unix.Rlimit{Cur: lim, Max: lim}); err != nil {
			fail(fmt.Errorf("limiting memory: %w", err))
		}
	}
	res, err := sandbox.Confine(sandbox.Options{CacheDir: *scratch})
	if err != nil {
		fail(err)
	}
	klog.InfoS("provision-worker confined", "uid", os.Getuid(), "landlockABI", res.LandlockABI, "boundingSetDropped", res.BoundingSetDropped)
	klog.Flush()
	if err := config.SetCacheDir(*scratch); err != nil {
		fail(err)
	}
	ans := serve(context.Background(), os.Stdin)
	_ = json.NewEncoder(out).Encode(ans)
	if !ans.OK {
		os.Exit(1)
	}
	os.Exit(0)
}

func serve(ctx context.Context, in io.Reader) answer {
	var req Request
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		return answer{Kind: worker.KindOf(secrets.ErrInvalid), Message: "provision-worker: cannot read its request"}
	}
	if err := do(ctx, &req); err != nil {
		return answer{Kind: worker.KindOf(err), Message: req.Volume.Redact(err.Error())}
	}
	return answer{OK: true}
}

// do performs the request; every operation is idempotent: a directory made
// already, or gone already, is success.
func do(ctx context.Context, req *Request) error {
	if err := fs.GlobalOptionsInit(); err != nil {
		return fmt.Errorf("rclone options: %w", err)
	}
	// In-memory config: no file is read or written.
	if err := config.SetConfigPath(""); err != nil {
		return err
	}
	data := config.LoadedData()
	for name, section := range req.Volume.Config {
		for k, v := range section {
			data.SetValue(name, k, v)
		}
	}
	if _, err := checkSubdir(req.Dir); err != nil {
		return err
	}
	f, err := fs.NewFs(ctx, req.Volume.FsString())
	if errors.Is(err, fs.ErrorIsFile) {
		return fmt.Errorf("%w: %s is a file, not a directory", secrets.ErrInvalid, req.Volume.Path)
	}
	if err != nil {
		return worker.Classify(fmt.Errorf("opening %s: %w", req.Volume.FsString(), err))
	}
	switch req.Op {
	case OpMkdir:
		err = operations.Mkdir(ctx, f, req.Dir)
	case OpPurge:
		err = operations.Purge(ctx, f, req.Dir)
	case OpArchive:
		if _, err := checkSubdir(req.To); err != nil {
			return err
		}
		err = operations.DirMove(ctx, f, req.Dir, req.To)
	default:
		return fmt.Errorf("%w: unknown operation %q", secrets.ErrInvalid, req.Op)
	}
	if req.Op != OpMkdir && errors.Is(err, fs.ErrorDirNotFound) {
		return nil // deleted or archived by an earlier call
	}
	if err != nil {
		return worker.Classify(fmt.Errorf("%s %s: %w", req.Op, path.Join(req.Volume.FsString(), req.Dir), err))
	}
	return nil
}

// ArchiveName is the name Archive gives dir at t.
func ArchiveName(dir string, t time.Time) string {
	return dir + ".archived-" + t.UTC().Format("20060102T150405Z")
}
