// Package hungfs mounts, for tests, a FUSE filesystem served in-process whose
// statfs does not answer until released: a hung mount, as a stuck rclone
// leaves one. It needs root and /dev/fuse.
package hungfs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FS is a mounted hung filesystem.
type FS struct {
	Dir     string
	server  *fuse.Server
	release chan struct{}
	once    sync.Once
	statfs  atomic.Int64
}

type root struct {
	fs.Inode
	fs *FS
}

var _ fs.NodeStatfser = (*root)(nil)

func (r *root) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	r.fs.statfs.Add(1)
	select {
	case <-r.fs.release:
		return 0
	case <-ctx.Done(): // the kernel interrupted the call
		return syscall.EINTR
	}
}

// Mount mounts a hung filesystem at dir (an existing directory).
func Mount(dir string) (*FS, error) {
	h := &FS{Dir: dir, release: make(chan struct{})}
	srv, err := fs.Mount(dir, &root{fs: h}, &fs.Options{MountOptions: fuse.MountOptions{
		DirectMount: true, FsName: "hungfs", Name: "hungfs", AllowOther: true,
	}})
	if err != nil {
		return nil, err
	}
	h.server = srv
	return h, nil
}

// StatfsCalls counts the statfs requests the kernel sent.
func (h *FS) StatfsCalls() int64 { return h.statfs.Load() }

// Release lets every statfs, pending and later, answer.
func (h *FS) Release() { h.once.Do(func() { close(h.release) }) }

// Close releases pending calls and unmounts.
func (h *FS) Close() {
	h.Release()
	if err := h.server.Unmount(); err != nil {
		_ = unix.Unmount(h.Dir, unix.MNT_DETACH)
	}
}
