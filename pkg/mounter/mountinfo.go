package mounter

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"
)

// SubpathBind is the top layer of one of the kubelet's subPath binds of a
// volume: the kubelet binds TARGET/<subPath> onto
// <kubelet>/pods/<uid>/volume-subpaths/<pv>/<container>/<index>, and the
// container mounts that path, so a bind stacked on the target never reaches
// it.
type SubpathBind struct {
	Path     string // where the kubelet bound it
	Root     string // the bound subdirectory (or file) of the volume, from its filesystem's root: "/sub"
	ReadOnly bool
	Device   string // major:minor of the filesystem it shows
	// Unlinked: the kernel dropped the dentry this bind shows as its root
	// (mountinfo says "//deleted"). mount(2) refuses to mount on it, so
	// stacking cannot repair it: ReplaceSubpathBind can.
	Unlinked bool
	// Within is the Path of another subPath bind of the pod and volume
	// whose Root holds this one's Root, if any. A bind stacked on this one
	// propagates onto the kubelet's layer of that one, below its mount
	// point; the kubelet, which unmounts without detaching, could then
	// never unmount that one, nor delete the pod.
	Within string
}

// SubpathBinds lists the subPath binds of the volume published at target,
// which must be in the kubelet's layout
// (<kubelet>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount); for any other
// path it finds none. See subpathBinds for how they are told apart.
func (m *Mounter) SubpathBinds(target string) ([]SubpathBind, error) {
	infos, err := mount.ParseMountInfo(m.mountinfo)
	if err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	return subpathBinds(infos, target), nil
}

// subpathBinds picks from a mount table the top layer of every mount
// directly at volume-subpaths/<pv>/<container>/<index> of target's pod whose
// device is one that a layer of target shows. Matching by device, not by path
// alone, leaves alone whatever else is mounted there; and every filesystem
// the subPath was ever bound from is still a layer of target (a repair stacks
// a new layer on a dead one, and the dead one keeps its device number while
// it is mounted), so a subPath bind is found after any number of repairs,
// and after a repair that failed half-way. A root that mountinfo shows as
// "<dir>//deleted" is returned Unlinked, without the suffix: the kernel
// writes it for a dentry it dropped, which for a dead FUSE mount happens as
// soon as anything looks the directory up through it (another pod using the
// same directory), while the directory still exists on the remote.
func subpathBinds(infos []mount.MountInfo, target string) []SubpathBind {
	target = filepath.Clean(target)
	csiDir := filepath.Dir(target) // .../volumes/kubernetes.io~csi/<pv>
	pv := filepath.Base(csiDir)
	volumesDir := filepath.Dir(filepath.Dir(csiDir))
	if filepath.Base(target) != "mount" || filepath.Base(filepath.Dir(csiDir)) != "kubernetes.io~csi" ||
		filepath.Base(volumesDir) != "volumes" || pv == "." || pv == "/" {
		return nil
	}
	subpathDir := filepath.Join(filepath.Dir(volumesDir), "volume-subpaths", pv)

	devices := map[string]bool{}
	for _, mi := range infos {
		if Unescape(mi.MountPoint) == target {
			devices[device(mi)] = true
		}
	}
	// The stacks at every subPath bind, bottom first.
	stacks := map[string][]mount.MountInfo{}
	var order []string
	for _, mi := range infos {
		p := Unescape(mi.MountPoint)
		if filepath.Dir(filepath.Dir(p)) != subpathDir {
			continue
		}
		if _, seen := stacks[p]; !seen {
			order = append(order, p)
		}
		stacks[p] = append(stacks[p], mi)
	}
	var out []SubpathBind
	for _, p := range order {
		top := topLayer(stacks[p])
		root := Unescape(top.Root)
		unlinked := strings.HasSuffix(root, "//deleted")
		root = strings.TrimSuffix(root, "//deleted")
		if !devices[device(top)] {
			continue
		}
		out = append(out, SubpathBind{Path: p, Root: root, ReadOnly: hasOption(top.MountOptions, "ro"), Device: device(top), Unlinked: unlinked})
	}
	for i := range out {
		for _, o := range out {
			if below(out[i].Root, o.Root) {
				out[i].Within = o.Path
				break
			}
		}
	}
	return out
}

// topLayer is the mount of a stack at one path that no other mount of it is
// mounted on; the last one listed if the table is odd.
func topLayer(stack []mount.MountInfo) mount.MountInfo {
	parents := map[int]bool{}
	for _, mi := range stack {
		parents[mi.ParentID] = true
	}
	top := stack[len(stack)-1]
	for _, mi := range stack {
		if !parents[mi.ID] {
			top = mi
		}
	}
	return top
}

// below says whether path is strictly inside dir.
func below(path, dir string) bool {
	return path != dir && strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

func device(mi mount.MountInfo) string {
	return strconv.Itoa(mi.Major) + ":" + strconv.Itoa(mi.Minor)
}

func hasOption(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}

// Unescape undoes the octal escapes (\040 for a space, \011, \012, \134)
// that mountinfo writes in paths; mount-utils keeps them.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			n, _ := strconv.ParseUint(s[i+1:i+4], 8, 8)
			b.WriteByte(byte(n))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// BindSubdir binds rel, a subdirectory or file of the mount at source, onto
// target the way Bind does (private intermediate, stacked on whatever target
// holds, read-only if asked). rel is resolved as openBeneath does.
func (m *Mounter) BindSubdir(source, rel, target string, readOnly bool) error {
	fd, err := openBeneath(source, rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %q beneath %s: %w", rel, source, err)
	}
	// The fd's magic link names exactly what was opened, whatever the path
	// becomes meanwhile.
	return m.bind(fmt.Sprintf("/proc/self/fd/%d", fd), target, readOnly, st.Mode&unix.S_IFMT == unix.S_IFDIR)
}

// scratchEntry makes an empty directory, or file, in the scratch dir to
// mount the intermediate bind on.
func (m *Mounter) scratchEntry(dir bool) (string, error) {
	if dir {
		return os.MkdirTemp(m.scratch, "bind-")
	}
	f, err := os.CreateTemp(m.scratch, "bind-")
	if err != nil {
		return "", err
	}
	return f.Name(), f.Close()
}
