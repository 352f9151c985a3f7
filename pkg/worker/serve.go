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
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/rclone/rclone/cmd/mountlib"
	"github.com/rclone/rclone/fs"
	"github.com/rclone/rclone/fs/config"
	"github.com/rclone/rclone/fs/rc"
	"github.com/rclone/rclone/vfs"
	"github.com/rclone/rclone/vfs/vfscache/writeback"
	"github.com/rclone/rclone/vfs/vfscommon"

	_ "github.com/rclone/rclone/backend/all" // every backend: platforms offer them all
)

// Serve is the worker's main on pipes: it reads the Spec from in, mounts,
// reports on out, then obeys commands until told to stop or until in
// reaches EOF.
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
		send(event{Type: evError, Kind: "invalid", Message: "worker: cannot read its spec"})
		return fmt.Errorf("reading spec: %w", err)
	}

	mnt, err := mountAndReport(ctx, &spec, send)
	if err != nil {
		return err
	}
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
	return obey(ctx, &spec, mnt, cmds, send)
}

// mountAndReport mounts spec and says so, or why not, with send.
func mountAndReport(ctx context.Context, spec *Spec, send func(event)) (*mounted, error) {
	mnt, err := mount(ctx, spec)
	if err != nil {
		msg := spec.Volume.Redact(err.Error())
		send(event{Type: evError, Kind: kindOf(err), Message: msg})
		return nil, errors.New(msg)
	}
	spec.Volume.Config, spec.Volume.Secrets = nil, nil // in rclone's memory now; drop our copy
	finishLeftovers(mnt.MountPoint)
	send(event{Type: evReady})
	fs.Logf(nil, "worker: volume %s mounted at %s", spec.VolumeID, spec.MountPoint)
	return mnt, nil
}

// errTold is the end of a worker that its parent told to exit at once.
var errTold = errors.New("told to exit")

// obey runs the commands of the parent until the mount ends or the parent is
// gone (cmds is closed). Each command is answered on its own goroutine, with
// its id, so that a long drain does not hold up the next command.
func obey(ctx context.Context, spec *Spec, mnt *mounted, cmds <-chan command, send func(event)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	drains := &drainer{work: func() Work { return vfsWork(mnt.VFS) }, expedite: expedite, poll: drainPoll}
	counts := newTally()
	go counts.run(ctx)
	var gather singleflight.Group
	var drained atomic.Bool
	for {
		select {
		case err := <-mnt.ErrChan:
			cancel()
			mnt.VFS.Shutdown()
			send(exitReport(spec.CacheDir))
			if drained.Load() {
				return nil // the driver unmounted it after a drain: done
			}
			return fmt.Errorf("mount ended: %v", err)
		case c, ok := <-cmds:
			if !ok {
				// The parent is gone. Leave at once: files not yet uploaded
				// stay in the volume's cache dir and go up after recovery.
				return errors.New("parent gone")
			}
			switch c.Op {
			case opStats:
				// Stats asked for while a gathering runs share its result:
				// on a hung VFS, scrapes do not pile up gatherings.
				go func() {
					st, _, _ := gather.Do("stats", func() (any, error) {
						return volumeStats(mnt.VFS, counts, spec.CacheDir, mnt.fuse.OpenFiles()), nil
					})
					stats := st.(Stats)
					send(event{ID: c.ID, Type: evStats, Stats: &stats})
				}()
			case opDrain:
				go func() {
					if drains.wait(ctx, time.Duration(c.TimeoutMS)*time.Millisecond) {
						drained.Store(true)
						send(event{ID: c.ID, Type: evDrained})
						return
					}
					w := vfsWork(mnt.VFS)
					w.Dirty, _ = NotUploaded(spec.CacheDir)
					send(event{ID: c.ID, Type: evPending, Work: w})
				}()
			case opExit:
				// The parent found the mount dead, or wants a new one: files
				// not yet uploaded stay in the cache dir, as after a crash.
				return errTold
			default:
				send(event{ID: c.ID, Type: evError, Kind: "invalid", Message: fmt.Sprintf("unknown command %q", c.Op)})
			}
		}
	}
}

// exitReport is the worker's last event: how many files it leaves in the
// cache dir not uploaded. The parent removes the cache dir only when none.
func exitReport(cacheDir string) event {
	n, err := NotUploaded(cacheDir)
	if err != nil {
		return event{Type: evExit, Message: "cannot read the cache: " + err.Error(), Work: Work{Dirty: -1}}
	}
	return event{Type: evExit, Work: Work{Dirty: n}}
}

// mounted is a worker's mount: rclone's mount point, and the FUSE server
// under it.
type mounted struct {
	*mountlib.MountPoint
	fuse *fuseServer
}

// mount sets rclone up from the spec and mounts it. It returns when the kernel
// has the mount.
func mount(ctx context.Context, spec *Spec) (*mounted, error) {
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

	uploadLeftovers(ctx, f, &vfsOpt, spec.CacheDir)
	srv := &fuseServer{cacheDir: spec.CacheDir}
	mnt := mountlib.NewMountPoint(srv.mountFn, spec.MountPoint, f, &mountOpt, &vfsOpt)
	if _, err := mnt.Mount(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMount, err)
	}
	return &mounted{MountPoint: mnt, fuse: srv}, nil
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

// drainPoll is how often a drain looks again.
const drainPoll = 50 * time.Millisecond

// drainer runs at most one drain at a time: a drain asked for while one runs
// joins it, and a drain whose caller gave up goes on, so that the retry
// finds it further along instead of starting over.
type drainer struct {
	work     func() Work // what is left; cheap, called every poll
	expedite func()      // makes queued uploads due now
	poll     time.Duration

	mu   sync.Mutex
	idle chan struct{} // closed when the running drain found nothing left; nil when none runs
}

// wait starts a drain, or joins the running one, and waits up to timeout
// for it to find nothing left. It reports whether it did.
func (d *drainer) wait(ctx context.Context, timeout time.Duration) bool {
	idle := d.start(ctx)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	select { // a drain that finished just now counts
	case <-idle:
		return true
	default:
		return false
	}
}

func (d *drainer) start(ctx context.Context) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.idle == nil {
		d.idle = make(chan struct{})
		go d.run(ctx, d.idle)
	}
	return d.idle
}

func (d *drainer) run(ctx context.Context, idle chan struct{}) {
	for {
		d.expedite()
		if d.work().Done() {
			d.mu.Lock()
			d.idle = nil
			d.mu.Unlock()
			close(idle)
			return
		}
		select {
		case <-ctx.Done():
			d.mu.Lock()
			d.idle = nil
			d.mu.Unlock()
			return
		case <-time.After(d.poll):
		}
	}
}

// vfsWork is what keeps v from being drained, without the dirty count (a
// walk of the cache dir). rclone's VFS counts a file as open from OPEN until
// it has handled the RELEASE, which the kernel sends after close(2) has
// returned, and only then queues the upload; Busy also holds while a cached
// file is dirty, uploading included.
func vfsWork(v *vfs.VFS) Work {
	w := Work{Busy: v.Busy()}
	if cache, ok := v.Stats()["diskCache"].(rc.Params); ok {
		for _, k := range []string{"uploadsInProgress", "uploadsQueued"} {
			if n, ok := cache[k].(int); ok {
				w.Uploads += n
			}
		}
	}
	return w
}

// leftoverWait bounds how long a worker waits for the uploads a dead worker
// left before it mounts.
const leftoverWait = 5 * time.Second

// uploadLeftovers uploads the files that a worker which died left in the
// cache dir before the volume is mounted, through a VFS of its own that no
// one else sees. Mounted, rclone would put such a file in the directory tree
// as a "virtual" entry while it uploads and list the directory without it,
// and reads in that window may take the wrong object. Files not up within
// leftoverWait are left for the mount's own VFS (see finishLeftovers).
func uploadLeftovers(ctx context.Context, f fs.Fs, opt *vfscommon.Options, cacheDir string) {
	if opt.CacheMode < vfscommon.CacheModeWrites || opt.ReadOnly {
		return
	}
	if n, err := NotUploaded(cacheDir); err != nil || n == 0 {
		return
	}
	v := vfs.New(ctx, f, opt)
	defer v.Shutdown() // before the mount's VFS: rclone would share a live one
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := &drainer{work: func() Work { return vfsWork(v) }, expedite: expedite, poll: drainPoll}
	start := time.Now()
	if d.wait(ctx, leftoverWait) {
		fs.Logf(nil, "worker: uploaded the files a previous worker left in %s", time.Since(start).Round(time.Millisecond))
		return
	}
	fs.Logf(nil, "worker: files a previous worker left are still uploading after %s; the mount goes on with them", leftoverWait)
}

// finishLeftovers uploads, in the background, the files that uploadLeftovers
// did not get up in time, and then drops the directory listings made while
// they uploaded, which miss them.
func finishLeftovers(mnt *mountlib.MountPoint) {
	if vfsWork(mnt.VFS).Uploads == 0 {
		return
	}
	go func() {
		d := &drainer{work: func() Work { return Work{Uploads: vfsWork(mnt.VFS).Uploads} }, expedite: expedite, poll: drainPoll}
		for !d.wait(context.Background(), time.Hour) {
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
