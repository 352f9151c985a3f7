package worker

import (
	"sync/atomic"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rclone/rclone/cmd/mount2"
	"github.com/rclone/rclone/cmd/mountlib"
	"github.com/rclone/rclone/vfs"
	"github.com/rclone/rclone/vfs/vfscommon"
)

// fuseServer serves a volume's FUSE device the way rclone's mount2 does
// (its node tree, go-fuse underneath), with the go-fuse server in the
// worker's hands rather than inside rclone's mount function: rclone's VFS
// keeps no count of open handles, and the kernel's requests do. Between the
// kernel and rclone's nodes sits handleFS, which counts the files open on
// the mount and bounds the free space statfs shows.
type fuseServer struct {
	open     atomic.Int64 // files the kernel holds open: OPEN/CREATE minus RELEASE
	cacheDir string       // the volume's VFS cache dir
}

// OpenFiles is the number of file handles the kernel holds on the mount: one
// per open(2) of a file by any process on the node, until its last close.
func (s *fuseServer) OpenFiles() int { return int(s.open.Load()) }

// mountFn is a mountlib.MountFn. Apart from the wrapper it sets go-fuse up
// as rclone's mount2 does (v1.76): the options below are mount2's own, each
// with its reason, so that a volume behaves the same as a plain
// `rclone mount2`.
func (s *fuseServer) mountFn(v *vfs.VFS, mountpoint string, opt *mountlib.Options) (<-chan error, func() error, string, error) {
	if err := mountlib.CheckOverlap(v.Fs(), mountpoint); err != nil {
		return nil, nil, "", err
	}
	if err := mountlib.CheckAllowNonEmpty(mountpoint, opt); err != nil {
		return nil, nil, "", err
	}
	root, err := mount2.NewFS(v, opt).Root()
	if err != nil {
		return nil, nil, "", err
	}
	opts := fusefs.Options{
		MountOptions: goFuseOptions(v, opt),
		EntryTimeout: (*time.Duration)(&opt.AttrTimeout),
		AttrTimeout:  (*time.Duration)(&opt.AttrTimeout),
		UID:          v.Opt.UID,
		GID:          v.Opt.GID,
	}
	raw := &handleFS{RawFileSystem: fusefs.NewNodeFS(root, &opts), open: &s.open}
	room := newCacheRoom(v, s.cacheDir)
	if room != nil {
		raw.cacheFree = room.get
	}
	server, err := fuse.NewServer(raw, mountpoint, &opts.MountOptions)
	if err != nil {
		return nil, nil, "", err
	}
	errs := make(chan error, 1)
	served := make(chan struct{})
	if room != nil {
		go room.run(served)
	}
	go func() {
		server.Serve()
		close(served)
		errs <- nil
	}()
	if err := server.WaitMount(); err != nil {
		return nil, nil, "", err
	}
	return errs, server.Unmount, mountpoint, nil
}

// goFuseOptions are the go-fuse options of rclone's mount2. The -o options
// matter only where go-fuse mounts by itself; a worker's device comes
// mounted by the driver (mountFUSE), with the same options.
func goFuseOptions(v *vfs.VFS, opt *mountlib.Options) fuse.MountOptions {
	o := fuse.MountOptions{
		AllowOther:   opt.AllowOther,
		FsName:       opt.DeviceName,
		Name:         "rclone", // the mount's type: fuse.rclone
		Debug:        opt.DebugFUSE,
		MaxReadAhead: int(opt.MaxReadAhead),
		// Linux 4.20+ takes requests of up to 1 MiB; go-fuse sets max_read
		// to the same (see maxRead).
		MaxWrite: maxRead,
		// rclone's nodes have no xattrs, and READDIRPLUS would stat every
		// entry of a listing of an object store.
		DisableXAttrs:      true,
		DisableReadDirPlus: true,
		IDMappedMount:      opt.AllowIDMap,
	}
	if opt.AllowOther {
		o.Options = append(o.Options, "allow_other")
	}
	if opt.AllowRoot {
		o.Options = append(o.Options, "allow_root")
	}
	if opt.DefaultPermissions {
		o.Options = append(o.Options, "default_permissions")
	}
	if v.Opt.ReadOnly {
		o.Options = append(o.Options, "ro")
	}
	return o
}

// cacheRoom is what the VFS cache can still take for a volume that has a
// size (vfs_disk_space_total_size) on a backend that cannot say its free
// space (no About, no vfs_used_is_size walk), where rclone reports free =
// total whatever the cache holds: the cache limit minus what the cache holds
// not uploaded yet (rclone evicts the rest when it needs room). It is
// sampled off the FUSE path: a statfs must not wait on the cache's locks,
// which rclone holds across listings and evictions, for statfs is how the
// driver tells a live mount from a dead one.
type cacheRoom struct {
	limit int64
	dir   string
	every time.Duration
	free  atomic.Int64 // -1 until the first sample
}

// roomSample bounds how stale the figure gets: what a pod just wrote shows
// within it.
const roomSample = 10 * time.Second

// newCacheRoom is nil where rclone's own figure stands.
func newCacheRoom(v *vfs.VFS, cacheDir string) *cacheRoom {
	o := v.Opt
	if cacheDir == "" || v.Fs().Features().About != nil || o.UsedIsSize || o.DiskSpaceTotalSize < 0 ||
		o.CacheMode == vfscommon.CacheModeOff || o.CacheMaxSize <= 0 {
		return nil
	}
	r := &cacheRoom{limit: int64(o.CacheMaxSize), dir: cacheDir, every: min(roomSample, max(time.Second, time.Duration(o.CachePollInterval)))}
	r.free.Store(-1)
	return r
}

// run samples until done is closed.
func (r *cacheRoom) run(done <-chan struct{}) {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		if n, err := notUploadedBytes(r.dir); err == nil {
			r.free.Store(max(0, r.limit-n))
		}
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

// get is the last sample, if there is one.
func (r *cacheRoom) get() (int64, bool) {
	f := r.free.Load()
	return f, f >= 0
}

// handleFS is go-fuse's raw file system around rclone's nodes, counting the
// kernel's open file handles and bounding statfs's free space.
type handleFS struct {
	fuse.RawFileSystem
	open *atomic.Int64
	// cacheFree, when set, says how much more the VFS cache can take: the
	// free space of a volume whose backend cannot say its own (cacheRoom).
	cacheFree func() (int64, bool)
}

func (h *handleFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := h.RawFileSystem.Open(cancel, in, out)
	if st.Ok() {
		h.open.Add(1)
	}
	return st
}

func (h *handleFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	st := h.RawFileSystem.Create(cancel, in, name, out)
	if st.Ok() {
		h.open.Add(1)
	}
	return st
}

// Release comes once per successful OPEN or CREATE, when the last file
// descriptor (or mapping) of that open is gone.
func (h *handleFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	defer h.open.Add(-1) // go-fuse recovers a panicking handler
	h.RawFileSystem.Release(cancel, in)
}

func (h *handleFS) StatFs(cancel <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	st := h.RawFileSystem.StatFs(cancel, in, out)
	if !st.Ok() || h.cacheFree == nil {
		return st
	}
	free, ok := h.cacheFree()
	if !ok || out.Bsize == 0 {
		return st
	}
	if blocks := uint64(free) / uint64(out.Bsize); blocks < out.Bfree {
		out.Bfree, out.Bavail = blocks, blocks
	}
	return st
}

// String names the file system in go-fuse's debug output.
func (h *handleFS) String() string { return "csi-rclone(" + h.RawFileSystem.String() + ")" }
