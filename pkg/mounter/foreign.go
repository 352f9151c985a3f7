package mounter

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"
)

// A dead subPath bind whose root dentry the kernel dropped cannot be
// repaired from outside: mount(2) refuses to stack on it (ENOENT), and the
// container's own copy of it has the same dropped root. What works is to go
// where the container sees it: enter the container's mount namespace,
// detach the dead mount there, and put in its place a clone of a fresh bind
// of the same subdirectory, mounted on the container's own directory rather
// than on the dead FUSE dentry. This needs the node's PID namespace (the
// chart runs the node plugin with hostPID) to find the containers.

// ForeignMount is a mount in another mount namespace, as the processes of
// that namespace see it.
type ForeignMount struct {
	PID       int    // a process of the namespace
	Namespace uint64 // the namespace's inode number
	// Layers are the IDs of the volume's mounts stacked at MountPoint, top
	// first (a repair that propagated there stacked one on another), and
	// Base the ID of the mount they are on: the container's own.
	Layers     []int
	Base       int
	MountPoint string // from the process's root
	Root       string // from its filesystem's root, without "//deleted"
	ReadOnly   bool
	Flags      uint64 // MOUNT_ATTR_NOSUID, _NODEV, _NOEXEC as the mount had them
}

// ForeignMounts lists, in every mount namespace of the node but the
// caller's, the mounts that show root of a filesystem with one of devices
// ("major:minor") and that nothing covers. procDir is /proc, which must be
// the node's (hostPID) for other pods' containers to be seen. Processes
// that exit meanwhile are skipped.
func ForeignMounts(procDir string, devices map[string]bool, root string) ([]ForeignMount, error) {
	self, err := nsInode(filepath.Join(procDir, "self"))
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return nil, err
	}
	seen := map[uint64]bool{self: true}
	var out []ForeignMount
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		dir := filepath.Join(procDir, e.Name())
		ns, err := nsInode(dir)
		if err != nil || seen[ns] {
			continue
		}
		infos, err := mount.ParseMountInfo(filepath.Join(dir, "mountinfo"))
		if err != nil {
			continue // exited, or a kernel thread
		}
		seen[ns] = true
		for _, fm := range uncovered(infos, devices, root) {
			fm.PID, fm.Namespace = pid, ns
			out = append(out, fm)
		}
	}
	return out, nil
}

// uncovered picks from a namespace's mount table the mounts of one of
// devices showing root (dropped or not) that a process there reaches by
// path: nothing is mounted on them at their mount point, and no mount on
// any mount below them hides the way there. The others are hidden under a
// repair that propagated there. Each comes with the layers of devices'
// mounts it is stacked on at the same point.
func uncovered(infos []mount.MountInfo, devices map[string]bool, root string) []ForeignMount {
	byID := map[int]mount.MountInfo{}
	children := map[int][]mount.MountInfo{}
	for _, mi := range infos {
		byID[mi.ID] = mi
		if mi.ParentID != mi.ID {
			children[mi.ParentID] = append(children[mi.ParentID], mi)
		}
	}
	// hides: another mount on parent at cur's mount point or above it. It
	// must have come after cur (cur would be on it otherwise).
	hides := func(parent int, cur mount.MountInfo) bool {
		for _, q := range children[parent] {
			if q.ID != cur.ID && (q.MountPoint == cur.MountPoint || below(cur.MountPoint, q.MountPoint)) {
				return true
			}
		}
		return false
	}
	visible := func(mi mount.MountInfo) bool {
		for _, q := range children[mi.ID] {
			if q.MountPoint == mi.MountPoint {
				return false
			}
		}
		for range len(infos) { // bounds a looped table
			p, ok := byID[mi.ParentID]
			if !ok || p.ID == mi.ID {
				return true
			}
			if hides(p.ID, mi) {
				return false
			}
			mi = p
		}
		return false
	}
	var out []ForeignMount
	for _, mi := range infos {
		r := strings.TrimSuffix(Unescape(mi.Root), "//deleted")
		if !devices[device(mi)] || r != root || !visible(mi) {
			continue
		}
		fm := ForeignMount{MountPoint: Unescape(mi.MountPoint), Root: root,
			ReadOnly: hasOption(mi.MountOptions, "ro"), Flags: attrFlags(mi.MountOptions)}
		for cur := mi; len(fm.Layers) < len(infos); {
			fm.Layers = append(fm.Layers, cur.ID)
			fm.Base = cur.ParentID
			p, ok := byID[cur.ParentID]
			if !ok || p.ID == cur.ID || p.MountPoint != cur.MountPoint || !devices[device(p)] {
				break
			}
			cur = p
		}
		out = append(out, fm)
	}
	return out
}

func attrFlags(opts []string) uint64 {
	var f uint64
	for o, a := range map[string]uint64{"nosuid": unix.MOUNT_ATTR_NOSUID, "nodev": unix.MOUNT_ATTR_NODEV, "noexec": unix.MOUNT_ATTR_NOEXEC} {
		if hasOption(opts, o) {
			f |= a
		}
	}
	return f
}

func nsInode(procPID string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(procPID, "ns", "mnt"), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// ReplaceForeign puts in the place of fm, in its namespace, a clone of the
// mount whose root from (an O_PATH fd) is, with fm's read-only and
// nosuid/nodev/noexec flags, as a slave of it: what a container runtime
// makes of a bind. fm's path is resolved within the process's root,
// without symlinks, and every layer must still be the one found (by mount
// ID) before it is detached; the clone goes on the mount they were on.
// procDir is as for ForeignMounts.
func ReplaceForeign(procDir string, fm ForeignMount, from int) error {
	clone, err := unix.OpenTree(from, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("clone: %w", err)
	}
	defer unix.Close(clone)
	attr := &unix.MountAttr{Attr_set: fm.Flags, Propagation: unix.MS_SLAVE}
	if fm.ReadOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(clone, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("set flags of the clone: %w", err)
	}

	// This /proc, not the namespace's (of another PID namespace, where
	// this process has no entry), names the fds to unmount and to read
	// the mount ID of.
	proc, err := unix.Open(procDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(proc)
	// The process's directory pins it: if the pid is reused meanwhile,
	// these opens fail rather than reach another process.
	pdir, err := unix.Openat(proc, strconv.Itoa(fm.PID), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("process %d: %w", fm.PID, err)
	}
	defer unix.Close(pdir)
	root, err := unix.Openat(pdir, "root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("root of process %d: %w", fm.PID, err)
	}
	defer unix.Close(root)
	ns, err := unix.Openat(pdir, "ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("mount namespace of process %d: %w", fm.PID, err)
	}
	defer unix.Close(ns)
	var st unix.Stat_t
	if err := unix.Fstat(ns, &st); err != nil || st.Ino != fm.Namespace {
		return fmt.Errorf("process %d left mount namespace %d", fm.PID, fm.Namespace)
	}

	// setns(CLONE_NEWNS) wants a thread that shares no fs_struct; this one
	// unshares its own, and is never given back to the Go scheduler: it
	// ends with the goroutine, locked. It is never the main thread, which
	// would stay (init locks the main goroutine to it).
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				return fmt.Errorf("unshare fs: %w", err)
			}
			if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("enter mount namespace %d: %w", fm.Namespace, err)
			}
			// umount2 takes only a path: relative ones start here.
			if err := unix.Fchdir(proc); err != nil {
				return err
			}
			return replaceHere(proc, root, fm, clone)
		}()
	}()
	return <-errc
}

// init keeps the main goroutine on the main thread, so that no other
// goroutine runs there: ReplaceForeign's thread must be one that can end.
// A main thread moved into another mount namespace would stay there, and
// with it whatever reads /proc/self.
func init() { runtime.LockOSThread() }

// replaceHere runs in fm's namespace, its cwd this process's /proc (proc);
// root is the process's root.
func replaceHere(proc, root int, fm ForeignMount, clone int) error {
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	rel := strings.TrimLeft(fm.MountPoint, "/")
	if rel == "" {
		return errors.New("not replacing a namespace's root")
	}
	for _, id := range fm.Layers {
		if err := detachHere(proc, root, rel, how, id); err != nil {
			return fmt.Errorf("detach %s: %w", fm.MountPoint, err)
		}
	}
	at, err := unix.Openat2(root, rel, how)
	if err != nil {
		return fmt.Errorf("open %s after the detach: %w", fm.MountPoint, err)
	}
	defer unix.Close(at)
	if id, err := mountID(proc, at); err != nil || id != fm.Base {
		return fmt.Errorf("%s is on mount %d after the detach, not %d (%v)", fm.MountPoint, id, fm.Base, err)
	}
	if err := unix.MoveMount(clone, "", at, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount onto %s: %w", fm.MountPoint, err)
	}
	return nil
}

// detachHere detaches the mount at rel beneath root if it is mount id.
// The cwd must be proc.
func detachHere(proc, root int, rel string, how *unix.OpenHow, id int) error {
	at, err := unix.Openat2(root, rel, how)
	if err != nil {
		return err
	}
	defer unix.Close(at)
	got, err := mountID(proc, at)
	if err != nil {
		return err
	}
	if got != id {
		return fmt.Errorf("it is mount %d now, not %d", got, id)
	}
	// The fd's magic link names the very mount checked.
	return unix.Unmount(fmt.Sprintf("thread-self/fd/%d", at), unix.MNT_DETACH)
}

// mountID reads the mount ID of an open fd from fdinfo (in proc, this
// process's /proc): unlike statx, it asks nothing of a dead FUSE daemon.
func mountID(proc, fd int) (int, error) {
	f, err := unix.Openat(proc, fmt.Sprintf("thread-self/fdinfo/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	data, err := io.ReadAll(os.NewFile(uintptr(f), "fdinfo"))
	unix.Close(f)
	if err != nil {
		return 0, err
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("mnt_id:")); ok {
			return strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	return 0, errors.New("no mnt_id in fdinfo")
}

// openBeneath opens rel beneath the mount at source, O_PATH, without
// following symlinks or crossing into other mounts: a pod can write the
// volume, and must not be able to point a bind anywhere else.
func openBeneath(source, rel string) (int, error) {
	dir, err := unix.Open(source, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", source, err)
	}
	defer unix.Close(dir)
	rel = strings.TrimLeft(filepath.Clean("/"+rel), "/")
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(dir, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return -1, fmt.Errorf("open %q beneath %s: %w", rel, source, err)
	}
	return fd, nil
}

// ReplaceSubpathBind repairs b, a dead subPath bind that stacking cannot
// repair (see SubpathBind.Unlinked and Within), from the live mount at
// source: every layer at b.Path is unmounted and a fresh bind of b.Root
// takes their place, for the kubelet (which binds it again into a container
// that restarts); then every copy of b that a container's mount namespace
// shows is replaced there by a slave of that fresh bind (ReplaceForeign),
// as the container runtime made it, so that the next repair stacked on
// b.Path reaches it again. It returns how many it replaced in other
// namespaces; an error for one does not stop the others.
func (m *Mounter) ReplaceSubpathBind(b SubpathBind, source string) (int, error) {
	// Unmounting b.Path's layers also unmounts their copies that
	// propagated into containers, which leaves there a layer older than
	// b's top one: every device of the stack counts.
	infos, err := mount.ParseMountInfo(m.mountinfo)
	if err != nil {
		return 0, fmt.Errorf("reading mountinfo: %w", err)
	}
	devices := map[string]bool{b.Device: true}
	for _, mi := range infos {
		if Unescape(mi.MountPoint) == filepath.Clean(b.Path) {
			devices[device(mi)] = true
		}
	}
	if err := m.Unmount(b.Path); err != nil {
		return 0, err
	}
	if err := m.BindSubdir(source, b.Root, b.Path, b.ReadOnly); err != nil {
		return 0, err
	}
	from, err := unix.Open(b.Path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(from)
	found, err := ForeignMounts(m.proc, devices, b.Root)
	if err != nil {
		return 0, fmt.Errorf("looking for copies in other mount namespaces: %w", err)
	}
	var errs []error
	n := 0
	for _, fm := range found {
		if err := ReplaceForeign(m.proc, fm, from); err != nil {
			errs = append(errs, fmt.Errorf("process %d: %w", fm.PID, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
