// Package mounter does the node's mount work that is not rclone's: bind
// mounts from a staging path to pod targets, unmounts that never hang on a
// dead FUSE mount, and telling a live mount from a dead one.
//
// See the README's architecture section ("Publish") for why a bind goes through a
// private intermediate mount: it gives every target its own propagation
// group, so that a mount later stacked on a target reaches the pod's
// containers, and unmounting one target reaches no other.
package mounter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"
)

// State of a path as a mount point.
type State int

const (
	// NotMounted: nothing is mounted at the path.
	NotMounted State = iota
	// Mounted: a mount answers at the path.
	Mounted
	// Dead: a mount is there but its FUSE daemon is gone (ENOTCONN) or hung.
	Dead
)

func (s State) String() string {
	return [...]string{"not mounted", "mounted", "dead"}[s]
}

// statTimeout bounds a stat of a mount whose daemon may hang.
const statTimeout = 5 * time.Second

// Mounter does bind mounts through a private scratch directory.
type Mounter struct {
	scratch   string
	mountinfo string
	proc      string // the node's /proc, to find other mount namespaces

	mu     sync.Mutex
	probes map[string]*probe // by path
}

// New prepares scratchDir (created 0700 and made a private mount of its own,
// so that nothing bound inside it propagates anywhere).
func New(scratchDir string) (*Mounter, error) {
	m := &Mounter{scratch: scratchDir, mountinfo: "/proc/self/mountinfo", proc: "/proc"}
	if err := os.MkdirAll(scratchDir, 0o700); err != nil {
		return nil, fmt.Errorf("scratch dir: %w", err)
	}
	n, err := m.layers(scratchDir)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		if err := unix.Mount(scratchDir, scratchDir, "", unix.MS_BIND, ""); err != nil {
			return nil, fmt.Errorf("binding scratch dir onto itself: %w", err)
		}
	}
	if err := unix.Mount("", scratchDir, "", unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("making scratch dir private: %w", err)
	}
	return m, nil
}

// Close unmounts the scratch directory's own bind.
func (m *Mounter) Close() error {
	return m.Unmount(m.scratch)
}

// layers counts the mounts stacked at path.
func (m *Mounter) layers(path string) (int, error) {
	infos, err := mount.ParseMountInfo(m.mountinfo)
	if err != nil {
		return 0, fmt.Errorf("reading mountinfo: %w", err)
	}
	path = filepath.Clean(path)
	n := 0
	for _, mi := range infos {
		if mi.MountPoint == path {
			n++
		}
	}
	return n, nil
}

// Check says whether path is mounted, and whether the mount answers within
// statTimeout.
func (m *Mounter) Check(path string) (State, error) {
	st, _, err := m.Probe(context.Background(), path)
	return st, err
}

// Probe says whether path is mounted and answers, and what statfs says of
// it. It waits until ctx ends, or statTimeout when ctx has no deadline; a
// mount that does not answer by then is Dead with ErrNotAnswering.
func (m *Mounter) Probe(ctx context.Context, path string) (State, Usage, error) {
	path = filepath.Clean(path)
	n, err := m.layers(path)
	if err != nil || n == 0 {
		return NotMounted, Usage{}, err
	}
	// statfs, not stat: the kernel answers stat from cached attributes for
	// a while after a FUSE daemon died, but always asks the daemon for statfs.
	st, err := m.statfs(ctx, path)
	switch {
	case err == nil:
		return Mounted, usageOf(&st), nil
	case errors.Is(err, ErrNotAnswering):
		return Dead, Usage{}, err
	case mount.IsCorruptedMnt(err):
		return Dead, Usage{}, nil
	default:
		return Dead, Usage{}, fmt.Errorf("statfs %s: %w", path, err)
	}
}

// ErrNotAnswering: a statfs of the path did not return in time. The mount's
// daemon is hung, or very slow.
var ErrNotAnswering = errors.New("not answering")

// probe is one statfs in flight.
type probe struct {
	done chan struct{}
	st   unix.Statfs_t
	err  error
}

// statfs runs at most one statfs per path at a time: a caller joins the one
// in flight, if any. A hung mount thus holds one goroutine (and its thread,
// blocked in the kernel) until it answers or is unmounted, however many
// callers gave up on it.
func (m *Mounter) statfs(ctx context.Context, path string) (unix.Statfs_t, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, statTimeout)
		defer cancel()
	}
	m.mu.Lock()
	p := m.probes[path]
	if p == nil {
		if m.probes == nil {
			m.probes = map[string]*probe{}
		}
		p = &probe{done: make(chan struct{})}
		m.probes[path] = p
		go func() {
			p.err = unix.Statfs(path, &p.st)
			m.mu.Lock()
			delete(m.probes, path)
			m.mu.Unlock()
			close(p.done)
		}()
	}
	m.mu.Unlock()
	select {
	case <-p.done:
		return p.st, p.err
	case <-ctx.Done():
		return unix.Statfs_t{}, fmt.Errorf("statfs %s: %w (%w)", path, ErrNotAnswering, ctx.Err())
	}
}

// probesInFlight counts the statfs calls that have not returned yet.
func (m *Mounter) probesInFlight() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.probes)
}

// WaitMounted polls until path is a live mount, or ctx ends.
func (m *Mounter) WaitMounted(ctx context.Context, path string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, _, err := m.Probe(ctx, path)
		if st == Mounted {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is %s (%v): %w", path, st, err, ctx.Err())
		case <-tick.C:
		}
	}
}

// Bind mounts source onto target, read-only if asked, through a private
// intermediate so that target gets a propagation group of its own. A new
// bind is stacked on top of whatever target holds (a dead bind, when
// repairing): that is what reaches containers that hold an rslave copy.
func (m *Mounter) Bind(source, target string, readOnly bool) error {
	return m.bind(source, target, readOnly, true)
}

// bind is Bind of a directory, or of a file when dir is false (a subPath may
// name one): the intermediate must be of the same kind.
func (m *Mounter) bind(source, target string, readOnly, dir bool) (err error) {
	tmp, err := m.scratchEntry(dir)
	if err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	defer os.Remove(tmp)
	if err := unix.Mount(source, tmp, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", source, err)
	}
	defer func() {
		if uerr := unix.Unmount(tmp, unix.MNT_DETACH); uerr != nil && err == nil {
			err = fmt.Errorf("unmount scratch bind: %w", uerr)
		}
	}()
	if err := unix.Mount("", tmp, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make private: %w", err)
	}
	if readOnly {
		// The read-only flag is copied by the bind below and by every
		// propagated copy of it; a remount of target afterwards would not be.
		if err := unix.Mount("", tmp, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("remount read-only: %w", err)
		}
	}
	if err := unix.Mount(tmp, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind onto %s: %w", target, err)
	}
	return nil
}

// IsReadOnly reports whether the top mount at path is read-only.
func (m *Mounter) IsReadOnly(path string) (bool, error) {
	infos, err := mount.ParseMountInfo(m.mountinfo)
	if err != nil {
		return false, err
	}
	path = filepath.Clean(path)
	ro, found := false, false
	for _, mi := range infos { // later lines are mounted later: the last wins
		if mi.MountPoint == path {
			found = true
			ro = false
			for _, o := range mi.MountOptions {
				if o == "ro" {
					ro = true
				}
			}
		}
	}
	if !found {
		return false, fmt.Errorf("%s is not mounted", path)
	}
	return ro, nil
}

// Unmount removes every mount stacked at path, dead or alive, without
// touching the filesystem behind it (no stat, so a hung daemon cannot block
// it). It is a no-op where nothing is mounted.
func (m *Mounter) Unmount(path string) error {
	for i := 0; ; i++ {
		n, err := m.layers(path)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if i > n+8 {
			return fmt.Errorf("unmount %s: %d mount(s) still there", path, n)
		}
		err = unix.Unmount(path, unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EBUSY) {
			// Busy only through an open file in this namespace; the
			// filesystem stays reachable to whoever holds it open.
			err = unix.Unmount(path, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
}

// UnmountAndRemove unmounts path and removes the directory. A missing path
// is success.
func (m *Mounter) UnmountAndRemove(path string) error {
	if err := m.Unmount(path); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// Usage is what statfs says of a mount.
type Usage struct {
	TotalBytes, AvailableBytes, UsedBytes int64
	TotalInodes, FreeInodes, UsedInodes   int64
}

// Statfs reads the usage of the filesystem at path, bounded as Probe is.
func (m *Mounter) Statfs(ctx context.Context, path string) (Usage, error) {
	st, err := m.statfs(ctx, filepath.Clean(path))
	if err != nil {
		return Usage{}, err
	}
	return usageOf(&st), nil
}

func usageOf(st *unix.Statfs_t) Usage {
	bs := int64(st.Bsize)
	u := Usage{
		TotalBytes:     int64(st.Blocks) * bs,
		AvailableBytes: int64(st.Bavail) * bs,
		UsedBytes:      int64(st.Blocks-st.Bfree) * bs,
		TotalInodes:    int64(st.Files),
		FreeInodes:     int64(st.Ffree),
	}
	u.UsedInodes = u.TotalInodes - u.FreeInodes
	return u
}
