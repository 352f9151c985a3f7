package mounter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

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
//
// The work in a namespace runs in a short-lived child process of the same
// binary (ReplaceArg), never in a thread of the driver: a thread that entered
// another namespace must end, and a thread that ends sends its children
// their parent-death signal (the mount workers); and a path in a tenant's
// container can lead into a FUSE server of the tenant's that never answers,
// where only a process the driver can kill at a deadline is safe.

// ForeignMount is a mount in another mount namespace, as the processes of
// that namespace see it.
type ForeignMount struct {
	// PIDs are processes of the namespace that see the mount, lowest
	// first (a container's first process lives longest): the helper enters
	// by the first of them still there, as any may exit meanwhile.
	PIDs      []int
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
// caller's that the node's own user namespace owns, the mounts that show
// root of a filesystem with one of devices ("major:minor") and that nothing
// covers. procDir is /proc, which must be the node's (hostPID) for other
// pods' containers to be seen. Processes that exit meanwhile are skipped.
//
// A namespace that a user namespace of a tenant owns is left out: the
// tenant made those mounts itself, and the kernel's locks on them (a
// read-only flag it may not clear) would not carry over to a clone.
func ForeignMounts(procDir string, devices map[string]bool, root string) ([]ForeignMount, error) {
	self, err := nsInode(filepath.Join(procDir, "self"), "mnt")
	if err != nil {
		return nil, err
	}
	nodeUserNS, err := nsInode(filepath.Join(procDir, "self"), "user")
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return nil, err
	}
	eligible := map[uint64]bool{self: false}
	type view struct{ ns, rootDev, rootIno uint64 }
	seenView := map[view][]int{} // the view's mounts, by index in out
	type mountKey struct {
		ns uint64
		id int
	}
	seenMount := map[mountKey]bool{}
	var out []ForeignMount
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		dir := filepath.Join(procDir, e.Name())
		ns, err := nsInode(dir, "mnt")
		if err != nil {
			continue
		}
		ok, known := eligible[ns]
		if !known {
			ok = ownedBy(filepath.Join(dir, "ns", "mnt"), nodeUserNS)
			eligible[ns] = ok
		}
		if !ok {
			continue
		}
		// Processes of one namespace see the same table, unless one is
		// chrooted (it sees only what is under its root): one read per
		// root.
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, "root"), &st); err != nil {
			continue
		}
		v := view{ns, st.Dev, st.Ino}
		if mounts, seen := seenView[v]; seen {
			for _, i := range mounts {
				out[i].PIDs = append(out[i].PIDs, pid)
			}
			continue
		}
		infos, err := mount.ParseMountInfo(filepath.Join(dir, "mountinfo"))
		if err != nil {
			continue // exited, or a kernel thread
		}
		var mounts []int
		for _, fm := range uncovered(infos, devices, root) {
			k := mountKey{ns, fm.Layers[0]}
			if seenMount[k] {
				continue
			}
			seenMount[k] = true
			fm.PIDs, fm.Namespace = []int{pid}, ns
			mounts = append(mounts, len(out))
			out = append(out, fm)
		}
		seenView[v] = mounts
	}
	for i := range out {
		slices.Sort(out[i].PIDs) // /proc lists them as names, not numbers
		out[i].PIDs = out[i].PIDs[:min(len(out[i].PIDs), maxEntryPIDs)]
	}
	return out, nil
}

// maxEntryPIDs bounds the processes a helper may try to enter a namespace
// by: a container of thousands keeps its spec small.
const maxEntryPIDs = 16

// ownedBy says whether the namespace at nsPath belongs to the user
// namespace whose inode is userNS.
func ownedBy(nsPath string, userNS uint64) bool {
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	owner, err := unix.IoctlRetInt(fd, unix.NS_GET_USERNS)
	if err != nil {
		return false
	}
	defer unix.Close(owner)
	var st unix.Stat_t
	return unix.Fstat(owner, &st) == nil && st.Ino == userNS
}

// uncovered picks from a namespace's mount table the mounts of one of
// devices showing root (dropped or not) that a process there reaches by
// path: nothing is mounted on them at their mount point, and no mount on
// any mount below them hides the way there. The others are hidden under a
// repair that propagated there. Each comes with the layers of devices'
// mounts it is stacked on at the same point. It takes time linear in the
// table times the depth of paths, whatever a tenant mounted.
func uncovered(infos []mount.MountInfo, devices map[string]bool, root string) []ForeignMount {
	type at struct {
		parent int
		point  string
	}
	byID := make(map[int]mount.MountInfo, len(infos))
	children := make(map[at][]int, len(infos)) // mounts on parent at point
	for _, mi := range infos {
		byID[mi.ID] = mi
		if mi.ParentID != mi.ID {
			k := at{mi.ParentID, mi.MountPoint}
			children[k] = append(children[k], mi.ID)
		}
	}
	// hidden: another mount on parent at cur's mount point or at a
	// directory above it (down to the parent's own mount point). It must
	// have come after cur: cur would be on it otherwise.
	hidden := func(parent mount.MountInfo, cur mount.MountInfo) bool {
		for p := cur.MountPoint; ; p = filepath.Dir(p) {
			for _, id := range children[at{parent.ID, p}] {
				if id != cur.ID {
					return true
				}
			}
			if p == parent.MountPoint || p == "/" || p == "." {
				return false
			}
		}
	}
	visible := func(mi mount.MountInfo) bool {
		if len(children[at{mi.ID, mi.MountPoint}]) > 0 {
			return false
		}
		for range len(infos) { // bounds a looped table
			p, ok := byID[mi.ParentID]
			if !ok || p.ID == mi.ID {
				return true
			}
			if hidden(p, mi) {
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

func nsInode(procPID, kind string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(procPID, "ns", kind), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// ReplaceArg, as the first argument, makes the binary the helper that
// ReplaceForeign starts: see IsReplaceInvocation and ReplaceMain.
const ReplaceArg = "mount-replace"

// IsReplaceInvocation says whether args are a ReplaceForeign helper's.
func IsReplaceInvocation(args []string) bool { return len(args) > 1 && args[1] == ReplaceArg }

// ReplaceTimeout bounds one helper: a path in a container may lead into a
// filesystem that never answers.
const ReplaceTimeout = 10 * time.Second

// replaceSpec is what ReplaceForeign sends its helper on stdin; the fd of
// the mount to clone is the helper's fd 3.
type replaceSpec struct {
	Proc    string
	Mount   ForeignMount
	Devices []string
}

// ReplaceForeign puts in the place of fm, in its namespace, a clone of the
// mount whose root from (an O_PATH fd) is, with fm's read-only and
// nosuid/nodev/noexec flags, as a slave of it: what a container runtime
// makes of a bind. A child process of this binary does it (ReplaceMain),
// killed if it has not finished within ReplaceTimeout or when ctx ends.
// devices are those fm's layers may show: each layer is checked, by mount
// ID, device and root, before it is detached.
func ReplaceForeign(ctx context.Context, procDir string, fm ForeignMount, devices map[string]bool, from int) error {
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	spec := replaceSpec{Proc: procDir, Mount: fm}
	for d := range devices {
		spec.Devices = append(spec.Devices, d)
	}
	in, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	dup, err := unix.FcntlInt(uintptr(from), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(dup), "clone-source")
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, ReplaceTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, ReplaceArg)
	cmd.Stdin = bytes.NewReader(in)
	cmd.ExtraFiles = []*os.File{f}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("no answer within %s: %w", ReplaceTimeout, ctx.Err())
		}
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return errors.New(msg)
		}
		return err
	}
	return nil
}

// ReplaceMain is the helper's main: it reads a replaceSpec on stdin, does
// the replacement and exits 0, or prints why not and exits 1.
func ReplaceMain() {
	var spec replaceSpec
	err := json.NewDecoder(os.Stdin).Decode(&spec)
	if err == nil {
		err = replaceForeign(spec, 3)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// replaceForeign runs in the helper. It ends in fm's namespace; the process
// exits afterwards.
func replaceForeign(spec replaceSpec, from int) error {
	fm := spec.Mount
	if len(fm.Layers) == 0 {
		return errors.New("no layers to replace")
	}
	devices := map[string]bool{}
	for _, d := range spec.Devices {
		devices[d] = true
	}
	clone, err := unix.OpenTree(from, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("clone: %w", err)
	}
	attr := &unix.MountAttr{Attr_set: fm.Flags, Propagation: unix.MS_SLAVE}
	if fm.ReadOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(clone, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("set flags of the clone: %w", err)
	}
	// This /proc, not the namespace's (of another PID namespace, where
	// this process has no entry), names the fds to unmount and the mount
	// table to check.
	proc, err := unix.Open(spec.Proc, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	var root, ns int
	var errs []error
	for _, pid := range fm.PIDs {
		if root, ns, err = enterBy(spec.Proc, proc, pid, fm.Namespace); err == nil {
			break
		}
		errs = append(errs, err)
	}
	if err != nil || len(fm.PIDs) == 0 {
		return fmt.Errorf("no process left to enter mount namespace %d by: %w", fm.Namespace, errors.Join(errs...))
	}

	// setns(CLONE_NEWNS) wants a thread that shares no fs_struct.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare fs: %w", err)
	}
	if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter mount namespace %d: %w", fm.Namespace, err)
	}
	// umount2 and the mount table take paths: relative ones start here.
	if err := unix.Fchdir(proc); err != nil {
		return err
	}
	return replaceHere(root, fm, devices, clone)
}

// enterBy opens the root and the mount namespace of process pid, which
// must still be in namespace ns, one that the node's user namespace owns.
// The fds hold both once the process exits.
func enterBy(procPath string, proc, pid int, ns uint64) (root, nsFD int, err error) {
	// The process's directory pins it: if the pid is reused meanwhile,
	// these opens fail rather than reach another process.
	pdir, err := unix.Openat(proc, strconv.Itoa(pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("process %d: %w", pid, err)
	}
	defer unix.Close(pdir)
	root, err = unix.Openat(pdir, "root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("root of process %d: %w", pid, err)
	}
	nsFD, err = unix.Openat(pdir, "ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(root)
		return -1, -1, fmt.Errorf("mount namespace of process %d: %w", pid, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(nsFD, &st); err != nil || st.Ino != ns {
		unix.Close(root)
		unix.Close(nsFD)
		return -1, -1, fmt.Errorf("process %d left mount namespace %d", pid, ns)
	}
	self, err := nsInode(filepath.Join(procPath, "self"), "user")
	if err != nil || !ownedBy(fmt.Sprintf("%s/%d/ns/mnt", procPath, pid), self) {
		unix.Close(root)
		unix.Close(nsFD)
		return -1, -1, fmt.Errorf("mount namespace %d belongs to another user namespace", ns)
	}
	return root, nsFD, nil
}

// replaceHere runs in fm's namespace, its cwd the helper's /proc; root is
// the process's root.
func replaceHere(root int, fm ForeignMount, devices map[string]bool, clone int) error {
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	rel := strings.TrimLeft(fm.MountPoint, "/")
	if rel == "" {
		return errors.New("not replacing a namespace's root")
	}
	infos, err := mount.ParseMountInfo("thread-self/mountinfo")
	if err != nil {
		return err
	}
	byID := map[int]mount.MountInfo{}
	for _, mi := range infos {
		byID[mi.ID] = mi
	}
	base, ok := byID[fm.Base]
	if !ok {
		return fmt.Errorf("mount %d is gone", fm.Base)
	}
	// A clone on a shared mount would propagate to its peers: the node's,
	// or another pod's.
	if slices.ContainsFunc(base.OptionalFields, func(f string) bool { return strings.HasPrefix(f, "shared:") }) {
		return fmt.Errorf("%s is on a shared mount", fm.MountPoint)
	}
	for _, id := range fm.Layers {
		mi, ok := byID[id]
		if !ok || !devices[device(mi)] || strings.TrimSuffix(Unescape(mi.Root), "//deleted") != fm.Root {
			return fmt.Errorf("mount %d is not a layer of the volume's %s", id, fm.Root)
		}
		if err := detachHere(root, rel, how, id); err != nil {
			return fmt.Errorf("detach %s: %w", fm.MountPoint, err)
		}
	}
	at, err := unix.Openat2(root, rel, how)
	if err != nil {
		return fmt.Errorf("open %s after the detach: %w", fm.MountPoint, err)
	}
	if id, err := mountID(at); err != nil || id != fm.Base {
		return fmt.Errorf("%s is on mount %d after the detach, not %d (%v)", fm.MountPoint, id, fm.Base, err)
	}
	if err := unix.MoveMount(clone, "", at, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount onto %s: %w", fm.MountPoint, err)
	}
	return nil
}

// detachHere detaches the mount at rel beneath root if it is mount id.
// The cwd must be this process's /proc.
func detachHere(root int, rel string, how *unix.OpenHow, id int) error {
	at, err := unix.Openat2(root, rel, how)
	if err != nil {
		return err
	}
	defer unix.Close(at)
	got, err := mountID(at)
	if err != nil {
		return err
	}
	if got != id {
		return fmt.Errorf("it is mount %d now, not %d", got, id)
	}
	// The fd's magic link names the very mount checked.
	return unix.Unmount(fmt.Sprintf("thread-self/fd/%d", at), unix.MNT_DETACH)
}

// mountID reads the mount ID of an open fd from fdinfo (the cwd must be
// this process's /proc): unlike statx, it asks nothing of a dead FUSE
// daemon.
func mountID(fd int) (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("thread-self/fdinfo/%d", fd))
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
func (m *Mounter) ReplaceSubpathBind(ctx context.Context, b SubpathBind, source string) (int, error) {
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
	c := StaleCopies{Path: b.Path, Root: b.Root, Devices: devices}
	n, err := m.ReplaceCopies(ctx, c)
	if err != nil {
		return n, &CopiesLeftError{Copies: c, Err: err}
	}
	return n, nil
}

// StaleCopies are the copies, in pods' mount namespaces, of a subPath bind
// that was replaced at Path: mounts of the volume's Root that show one of
// Devices, the dead ones.
type StaleCopies struct {
	Path, Root string
	Devices    map[string]bool
}

// CopiesLeftError says that ReplaceSubpathBind replaced the bind at its
// path but not each copy of it: Copies, for ReplaceCopies to try again.
// The dead copies no longer match the bind's path, which is alive.
type CopiesLeftError struct {
	Copies StaleCopies
	Err    error
}

func (e *CopiesLeftError) Error() string { return e.Err.Error() }
func (e *CopiesLeftError) Unwrap() error { return e.Err }

// ReplaceCopies replaces every copy c names that is still there by a clone
// of what c.Path is now (ReplaceForeign). It returns how many it replaced;
// an error for one does not stop the others. A path that is gone (the pod
// was deleted) is an os.ErrNotExist.
func (m *Mounter) ReplaceCopies(ctx context.Context, c StaleCopies) (int, error) {
	from, err := unix.Open(c.Path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: c.Path, Err: err}
	}
	defer unix.Close(from)
	found, err := ForeignMounts(m.proc, c.Devices, c.Root)
	if err != nil {
		return 0, fmt.Errorf("looking for copies in other mount namespaces: %w", err)
	}
	var errs []error
	n := 0
	for _, fm := range found {
		if err := ReplaceForeign(ctx, m.proc, fm, c.Devices, from); err != nil {
			errs = append(errs, fmt.Errorf("mount namespace %d: %w", fm.Namespace, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
