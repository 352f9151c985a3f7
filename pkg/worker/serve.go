package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rclone/rclone/cmd/mountlib"
	"github.com/rclone/rclone/fs"
	"github.com/rclone/rclone/fs/config"
	"github.com/rclone/rclone/fs/rc"
	"github.com/rclone/rclone/vfs/vfscache/writeback"
	"github.com/rclone/rclone/vfs/vfscommon"

	_ "github.com/rclone/rclone/backend/all" // every backend: platforms offer them all
	_ "github.com/rclone/rclone/cmd/mount2"  // the pure-Go FUSE mount method
)

// Serve is the worker's main: it reads the Spec from in, mounts, reports on
// out, then obeys commands until told to stop or until in reaches EOF.
func Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	send := func(ev event) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(ev)
	}

	dec := json.NewDecoder(bufio.NewReader(in))
	var spec Spec
	if err := dec.Decode(&spec); err != nil {
		send(event{Type: "error", Kind: "invalid", Message: "worker: cannot read its spec"})
		return fmt.Errorf("reading spec: %w", err)
	}

	mnt, err := mount(ctx, &spec)
	if err != nil {
		msg := spec.Volume.Redact(err.Error())
		send(event{Type: "error", Kind: kindOf(err), Message: msg})
		return errors.New(msg)
	}
	spec.Volume.Config, spec.Volume.Secrets = nil, nil // in rclone's memory now; drop our copy
	uploadLeftovers(mnt)
	send(event{Type: "ready"})
	fs.Logf(nil, "worker: volume %s mounted at %s", spec.VolumeID, spec.MountPoint)

	cmds := make(chan command)
	go func() {
		defer close(cmds)
		for {
			var c command
			if err := dec.Decode(&c); err != nil {
				return
			}
			cmds <- c
		}
	}()

	drained := false
	for {
		select {
		case err := <-mnt.ErrChan:
			mnt.VFS.Shutdown()
			if drained {
				return nil // the driver unmounted it after a drain: done
			}
			return fmt.Errorf("mount ended: %v", err)
		case c, ok := <-cmds:
			if !ok {
				// The parent is gone. Leave at once: files not yet uploaded
				// stay in the volume's cache dir and go up after recovery.
				return errors.New("parent gone")
			}
			if c.Op != "drain" {
				continue
			}
			if pending := drain(mnt, time.Duration(c.DrainSeconds)*time.Second); pending > 0 {
				send(event{Type: "pending", Pending: pending})
				continue
			}
			drained = true
			send(event{Type: "drained"})
		}
	}
}

// mount sets rclone up from the spec and mounts it. It returns when the kernel
// has the mount.
func mount(ctx context.Context, spec *Spec) (*mountlib.MountPoint, error) {
	if err := fs.GlobalOptionsInit(); err != nil {
		return nil, fmt.Errorf("rclone options: %w", err)
	}
	// In-memory config: no file is read or written.
	if err := config.SetConfigPath(""); err != nil {
		return nil, err
	}
	if err := config.SetCacheDir(spec.CacheDir); err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	if n, err := repairCacheMetadata(spec.CacheDir, time.Now()); err != nil {
		fs.Errorf(nil, "worker: checking the VFS cache: %v", err)
	} else if n > 0 {
		fs.Logf(nil, "worker: %d file(s) whose cache metadata a killed worker cut short will be uploaded", n)
	}
	data := config.LoadedData()
	for name, section := range spec.Volume.Config {
		for k, v := range section {
			data.SetValue(name, k, v)
		}
	}

	mountOpt, vfsOpt, err := rcloneOptions(&spec.Volume, mountlib.Opt, vfscommon.Opt)
	if err != nil {
		return nil, err
	}
	if isInheritedFUSE(spec.MountPoint) {
		// The driver mounted it a moment ago. rclone's emptiness check
		// would open /dev/fd/N, that is /dev/fuse again, as a directory.
		mountOpt.AllowNonEmpty = true
	}

	f, err := fs.NewFs(ctx, spec.Volume.FsString())
	if errors.Is(err, fs.ErrorIsFile) {
		return nil, fmt.Errorf("%w: remotePath %q is a file, not a directory", ErrInvalid, spec.Volume.Path)
	}
	if err != nil {
		return nil, classify(fmt.Errorf("opening %s: %w", spec.Volume.FsString(), err))
	}
	if err := probe(ctx, f); err != nil {
		return nil, classify(fmt.Errorf("listing %s: %w", spec.Volume.FsString(), err))
	}

	_, mountFn := mountlib.ResolveMountMethod("mount2")
	if mountFn == nil {
		return nil, errors.New("rclone mount2 method not compiled in")
	}
	mnt := mountlib.NewMountPoint(mountFn, spec.MountPoint, f, &mountOpt, &vfsOpt)
	if _, err := mnt.Mount(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMount, err)
	}
	return mnt, nil
}

var errProbeDone = errors.New("probe done")

// probeTimeout bounds the first listing. Backends retry on their own (the
// S3 SDK backs off for a minute when the endpoint refuses connections).
const probeTimeout = 15 * time.Second

// probe reads the first page of the root so that bad credentials and missing
// buckets fail the stage instead of the first ls in a pod.
func probe(ctx context.Context, f fs.Fs) error {
	// Fail fast: the caller retries, and a pod waits for the answer.
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if listP := f.Features().ListP; listP != nil {
		err := listP(ctx, "", func(fs.DirEntries) error { return errProbeDone })
		if errors.Is(err, errProbeDone) {
			return nil
		}
		return err
	}
	_, err := f.List(ctx, "")
	return err
}

// drain waits up to timeout until the VFS cache has uploaded every file, and
// returns how many are still pending.
func drain(mnt *mountlib.MountPoint, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		expedite()
		pending := pendingUploads(mnt)
		if pending == 0 || time.Now().After(deadline) {
			return pending
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// leftoverWait bounds how long a mount waits for the uploads a dead worker
// left behind before it reports ready.
const leftoverWait = 5 * time.Second

// uploadLeftovers uploads the files that a worker which died left in the
// cache: rclone queues them again on mount, but a directory listing made
// while they upload misses them and stays cached for dir_cache_time. So they
// go up at once, and the listings are dropped when they are up: within
// leftoverWait before the mount reports ready, or later in the background.
func uploadLeftovers(mnt *mountlib.MountPoint) {
	if pendingUploads(mnt) == 0 {
		return
	}
	if drain(mnt, leftoverWait) == 0 {
		mnt.VFS.FlushDirCache()
		return
	}
	go func() {
		for drain(mnt, time.Hour) > 0 {
		}
		mnt.VFS.FlushDirCache()
	}()
}

// expedite makes every queued upload due now, instead of after the VFS
// write-back delay, through rclone's own vfs/queue calls. This worker has one
// VFS, so the calls need not name it.
func expedite() {
	ctx := context.Background()
	out, err := rc.Calls.Get("vfs/queue").Fn(ctx, rc.Params{})
	if err != nil || out == nil {
		return
	}
	items, _ := out["queue"].([]writeback.QueueInfo)
	for _, it := range items {
		if !it.Uploading {
			_, _ = rc.Calls.Get("vfs/queue-set-expiry").Fn(ctx, rc.Params{"id": int64(it.ID), "expiry": -1e9})
		}
	}
}

func pendingUploads(mnt *mountlib.MountPoint) int {
	cache, ok := mnt.VFS.Stats()["diskCache"].(rc.Params)
	if !ok {
		return 0 // no cache (vfs_cache_mode off): writes are synchronous
	}
	n := 0
	for _, k := range []string{"uploadsInProgress", "uploadsQueued"} {
		if v, ok := cache[k].(int); ok {
			n += v
		}
	}
	return n
}

// classify wraps err with the kind the driver maps to a gRPC code.
func classify(err error) error {
	var coder interface{ ErrorCode() string }
	if errors.As(err, &coder) {
		switch coder.ErrorCode() {
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden", "AuthorizationHeaderMalformed", "InvalidToken", "ExpiredToken":
			return fmt.Errorf("%w: %w", ErrPermissionDenied, err)
		case "NoSuchBucket", "NotFound", "NoSuchKey":
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		}
	}
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) {
		switch code := status.HTTPStatusCode(); {
		case code == 401 || code == 403:
			return fmt.Errorf("%w: %w", ErrPermissionDenied, err)
		case code == 404:
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		case code >= 500:
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	switch {
	case errors.Is(err, fs.ErrorDirNotFound), errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, fs.ErrorNotFoundInConfigFile), strings.Contains(err.Error(), "didn't find backend"):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}
