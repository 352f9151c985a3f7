package mounter

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"
)

// TestMain lets this test binary serve as ReplaceForeign's helper.
func TestMain(m *testing.M) {
	if IsReplaceInvocation(os.Args) {
		ReplaceMain()
	}
	os.Exit(m.Run())
}

func mi(id, parent int, dev, root, point string, opts ...string) mount.MountInfo {
	var major, minor int
	fmt.Sscanf(dev, "%d:%d", &major, &minor)
	return mount.MountInfo{ID: id, ParentID: parent, Major: major, Minor: minor, Root: root, MountPoint: point, MountOptions: opts}
}

func TestUncovered(t *testing.T) {
	vol := map[string]bool{"0:40": true, "0:43": true}
	base := []mount.MountInfo{mi(1, 1, "254:0", "/", "/"), mi(2, 1, "254:0", "/var/lib/kubelet", "/var/lib/kubelet")}
	tests := []struct {
		name   string
		mounts []mount.MountInfo
		root   string
		want   []ForeignMount // PID and Namespace left out
	}{
		{
			name:   "a container's subPath mount with a propagated repair on it, both dead",
			mounts: []mount.MountInfo{mi(10, 1, "0:40", "/sub", "/data"), mi(11, 10, "0:43", "/sub//deleted", "/data", "ro", "nosuid")},
			root:   "/sub",
			want:   []ForeignMount{{Layers: []int{11, 10}, Base: 1, MountPoint: "/data", Root: "/sub", ReadOnly: true, Flags: unix.MOUNT_ATTR_NOSUID}},
		},
		{
			name:   "already repaired: a live mount of another device on top",
			mounts: []mount.MountInfo{mi(10, 1, "0:40", "/sub", "/data"), mi(11, 10, "0:45", "/sub", "/data")},
			root:   "/sub",
		},
		{
			name: "inside a whole-volume mount that a repair covered",
			mounts: []mount.MountInfo{mi(10, 1, "0:40", "/", "/data"), mi(11, 10, "0:40", "/sub", "/data/sub"),
				mi(12, 10, "0:45", "/", "/data")},
			root: "/sub",
		},
		{
			name:   "another subdirectory, another filesystem",
			mounts: []mount.MountInfo{mi(10, 1, "0:40", "/other", "/data"), mi(11, 1, "0:41", "/sub", "/data2")},
			root:   "/sub",
		},
		{
			name:   "a file, dropped, on a kubelet dir",
			mounts: []mount.MountInfo{mi(10, 2, "0:43", "/config.yaml//deleted", "/var/lib/kubelet/pods/u/volume-subpaths/pv/c/0")},
			root:   "/config.yaml",
			want:   []ForeignMount{{Layers: []int{10}, Base: 2, MountPoint: "/var/lib/kubelet/pods/u/volume-subpaths/pv/c/0", Root: "/config.yaml"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := uncovered(append(slices.Clone(base), tt.mounts...), vol, tt.root)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestReplaceForeign replaces, inside another process's mount namespace,
// a mount of one filesystem with a subdirectory of another, as recovery does
// for a container's subPath mount of a dead FUSE mount.
func TestReplaceForeign(t *testing.T) {
	m, root, staging := setup(t)
	must(t, os.MkdirAll(filepath.Join(staging, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(staging, "sub", "f"), []byte("old"), 0o644))
	fresh := filepath.Join(root, "fresh")
	must(t, os.MkdirAll(fresh, 0o750))
	must(t, unix.Mount("tmpfs", fresh, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { _ = unix.Unmount(fresh, unix.MNT_DETACH) })
	must(t, os.MkdirAll(filepath.Join(fresh, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(fresh, "sub", "f"), []byte("new"), 0o644))

	// The "container": its own mount namespace, the subdirectory mounted
	// read-only at ctr, as runc would mount a subPath bind.
	ctr := filepath.Join(root, "ctr")
	must(t, os.MkdirAll(ctr, 0o755))
	// A PID namespace and /proc of its own, as a container has: this
	// process is not in it.
	pid := startNamespaced(t, []string{"--mount", "--propagation", "slave", "--pid", "--fork", "--mount-proc"},
		`mount --bind "$1" "$2" && mount -o remount,bind,ro,nosuid "$2"`, filepath.Join(staging, "sub"), ctr)
	enter := func(args ...string) (string, error) {
		b, err := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(pid), "-m", "--"}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(b)), err
	}

	var st unix.Stat_t
	must(t, unix.Stat(staging, &st))
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	found, err := ForeignMounts("/proc", map[string]bool{dev: true}, "/sub")
	must(t, err)
	var fm *ForeignMount
	for i := range found {
		if slices.Contains(found[i].PIDs, pid) && found[i].MountPoint == ctr {
			fm = &found[i]
		}
	}
	if fm == nil {
		t.Fatalf("the container's mount is not among %+v", found)
	}
	if !fm.ReadOnly || fm.Flags&unix.MOUNT_ATTR_NOSUID == 0 {
		t.Errorf("flags not seen: %+v", fm)
	}
	for _, f := range found {
		if f.Namespace == fm.Namespace && f.MountPoint == filepath.Join(staging, "sub") {
			t.Errorf("the namespace's copy of the staging mount is not a bind of its subdirectory: %+v", f)
		}
	}

	// A mount that is no longer the one found is left alone.
	stale := *fm
	stale.Layers = []int{fm.Layers[0] + 1000}
	from, err := openBeneath(fresh, "sub")
	must(t, err)
	defer unix.Close(from)
	devices := map[string]bool{dev: true}
	if err := ReplaceForeign(context.Background(), "/proc", stale, devices, from); err == nil {
		t.Error("replaced a mount by a stale ID")
	}
	if err := ReplaceForeign(context.Background(), "/proc", *fm, map[string]bool{"1:2": true}, from); err == nil {
		t.Error("replaced a mount of another device")
	}
	// The process found may have exited, or be another namespace's by now:
	// the helper enters by the next one; with none left it refuses.
	gone := exec.Command("true")
	must(t, gone.Run())
	none := *fm
	none.PIDs = []int{gone.Process.Pid}
	if err := ReplaceForeign(context.Background(), "/proc", none, devices, from); err == nil {
		t.Error("replaced through a process that is gone")
	}
	fm.PIDs = append([]int{gone.Process.Pid, os.Getpid()}, fm.PIDs...)
	must(t, ReplaceForeign(context.Background(), "/proc", *fm, devices, from))
	if got, err := enter("cat", filepath.Join(ctr, "f")); err != nil || got != "new" {
		t.Fatalf("container reads %q %v after the replacement", got, err)
	}
	if _, err := enter("sh", "-c", `echo x > "$1"`, "sh", filepath.Join(ctr, "g")); err == nil {
		t.Error("the replacement is writable; the mount it replaced was read-only")
	}
	// Nothing changed in this namespace, and the new mount does not send
	// what is mounted on it back here.
	if got, _ := os.ReadFile(filepath.Join(staging, "sub", "f")); string(got) != "old" {
		t.Errorf("staging reads %q", got)
	}
	if n, _ := m.layers(ctr); n != 0 {
		info, _ := os.ReadFile("/proc/self/mountinfo")
		t.Errorf("%d mounts at %s in this namespace:\n%s", n, ctr, info)
	}
	info, err := enter("cat", "/proc/1/mountinfo") // the container's /proc
	must(t, err)
	for _, l := range strings.Split(info, "\n") {
		if strings.Contains(l, " "+ctr+" ") && !strings.Contains(l, "master:") {
			t.Errorf("the replacement is not a slave: %s", l)
		}
	}
}

// TestForeignMountsSkipsUserNamespaces: a mount namespace that a tenant's
// user namespace owns holds mounts the tenant made; a clone would drop the
// kernel's locks on them (a read-only flag the tenant may not clear).
func TestForeignMountsSkipsUserNamespaces(t *testing.T) {
	_, root, staging := setup(t)
	must(t, os.MkdirAll(filepath.Join(staging, "sub"), 0o755))
	ctr := filepath.Join(root, "tenant")
	must(t, os.MkdirAll(ctr, 0o755))
	pid := startNamespaced(t, []string{"--user", "--map-root-user", "--mount"}, `mount --bind "$1" "$2"`, filepath.Join(staging, "sub"), ctr)
	var st unix.Stat_t
	must(t, unix.Stat(staging, &st))
	found, err := ForeignMounts("/proc", map[string]bool{fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)): true}, "/sub")
	must(t, err)
	for _, fm := range found {
		if slices.Contains(fm.PIDs, pid) {
			t.Errorf("found the tenant's own mount in its user namespace: %+v", fm)
		}
	}
}

// startNamespaced runs script (with args as $1...) in namespaces unshare
// makes with flags, and then sleeps there until the test ends; it returns
// once script has run, with the pid of a process in the new mount namespace.
func startNamespaced(t *testing.T, flags []string, script string, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	argv := append(append(flags, "sh", "-c", script+` && echo ready && exec sleep 600`, "sh"), args...)
	cmd := exec.CommandContext(ctx, "unshare", argv...)
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	buf := make([]byte, 6)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("unshare %v: %q %v", flags, buf, err)
	}
	return cmd.Process.Pid
}
