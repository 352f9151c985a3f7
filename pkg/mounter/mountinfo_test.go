package mounter

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Mount tables as /proc/self/mountinfo shows them on a node: the kubelet
// root (rshared), a worker's FUSE mount (device 0:50, later 0:61, 0:72),
// the staging bind, the pod's target, and the kubelet's subPath binds.
const (
	kubeletRoot = "63 43 254:0 /var/lib/kubelet /var/lib/kubelet rw,relatime shared:1 - ext4 /dev/vda rw\n"
	staged50    = "65 63 0:50 / /run/csi-rclone/mnt/abc rw,nosuid,nodev,relatime shared:2 - fuse.rclone s3:shared rw,user_id=0,group_id=0,allow_other\n" +
		"67 63 0:50 / /var/lib/kubelet/plugins/kubernetes.io/csi/rclone/0f/globalmount rw,nosuid,nodev,relatime shared:3 - fuse.rclone s3:shared rw\n"
	target50 = "68 63 0:50 / /var/lib/kubelet/pods/uid-a/volumes/kubernetes.io~csi/pv-a/mount rw,nosuid,nodev,relatime shared:4 - fuse.rclone s3:shared rw\n"
	sub50    = "66 63 0:50 /data /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/0 rw,nosuid,nodev,relatime shared:4 - fuse.rclone s3:shared rw\n"
	// After the first repair: a new worker (0:61), a layer on the target,
	// and one on the subPath bind, whose copy propagated onto the target's
	// dead layer at <target>/data.
	staged61 = "69 63 0:61 / /run/csi-rclone/mnt/abc rw,nosuid,nodev,relatime shared:2 - fuse.rclone s3:shared rw\n" +
		"70 63 0:61 / /var/lib/kubelet/plugins/kubernetes.io/csi/rclone/0f/globalmount rw,nosuid,nodev,relatime shared:3 - fuse.rclone s3:shared rw\n"
	target61 = "71 68 0:61 / /var/lib/kubelet/pods/uid-a/volumes/kubernetes.io~csi/pv-a/mount rw,nosuid,nodev,relatime shared:5 - fuse.rclone s3:shared rw\n"
	sub61    = "72 66 0:61 /data /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/0 rw,nosuid,nodev,relatime shared:6 - fuse.rclone s3:shared rw\n" +
		"73 68 0:61 /data /var/lib/kubelet/pods/uid-a/volumes/kubernetes.io~csi/pv-a/mount/data rw,nosuid,nodev,relatime shared:6 - fuse.rclone s3:shared rw\n"
	target72 = "75 71 0:72 / /var/lib/kubelet/pods/uid-a/volumes/kubernetes.io~csi/pv-a/mount rw,nosuid,nodev,relatime shared:7 - fuse.rclone s3:shared rw\n"
)

const targetA = "/var/lib/kubelet/pods/uid-a/volumes/kubernetes.io~csi/pv-a/mount"

func TestSubpathBinds(t *testing.T) {
	sub := func(path, root, dev string, ro bool) SubpathBind {
		return SubpathBind{Path: "/var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/" + path, Root: root, Device: dev, ReadOnly: ro}
	}
	for _, tc := range []struct {
		name      string
		mountinfo string
		target    string
		want      []SubpathBind
	}{
		{
			name:      "worker died, nothing repaired yet",
			mountinfo: kubeletRoot + staged50 + target50 + sub50,
			want:      []SubpathBind{sub("app/0", "/data", "0:50", false)},
		},
		{
			name:      "driver restarted: old mounts gone, target repaired, subPath still on the old device",
			mountinfo: kubeletRoot + target50 + sub50 + staged61 + target61,
			want:      []SubpathBind{sub("app/0", "/data", "0:50", false)},
		},
		{
			name:      "second death: only the top layer of the subPath bind counts",
			mountinfo: kubeletRoot + target50 + sub50 + target61 + sub61 + target72,
			want:      []SubpathBind{sub("app/0", "/data", "0:61", false)},
		},
		{
			name: "layers listed out of mount order",
			mountinfo: kubeletRoot + target61 + target50 +
				"72 66 0:61 /data /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/0 rw shared:6 - fuse.rclone s3:shared rw\n" + sub50,
			want: []SubpathBind{sub("app/0", "/data", "0:61", false)},
		},
		{
			name: "read-only, a file, a name with a space, several containers",
			mountinfo: kubeletRoot + target50 +
				"80 63 0:50 /conf/app.yaml /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/1 ro,nosuid,nodev,relatime shared:4 - fuse.rclone s3:shared rw\n" +
				`81 63 0:50 /my\040dir /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/sidecar/0 rw,relatime shared:4 - fuse.rclone s3:shared rw` + "\n",
			want: []SubpathBind{sub("app/1", "/conf/app.yaml", "0:50", true), sub("sidecar/0", "/my dir", "0:50", false)},
		},
		{
			name: "a subPath inside another one of the pod, and one beside it",
			mountinfo: kubeletRoot + target50 + sub50 +
				"88 63 0:50 /data/conf.yaml /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/1 rw shared:4 - fuse.rclone s3:shared rw\n" +
				"89 63 0:50 /data2 /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/2 rw shared:4 - fuse.rclone s3:shared rw\n" +
				"90 63 0:50 /data /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/sidecar/0 rw shared:4 - fuse.rclone s3:shared rw\n",
			want: []SubpathBind{
				sub("app/0", "/data", "0:50", false),
				{Path: "/var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/1", Root: "/data/conf.yaml", Device: "0:50",
					Within: "/var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/0"},
				sub("app/2", "/data2", "0:50", false),
				sub("sidecar/0", "/data", "0:50", false),
			},
		},
		{
			name: "everything is inside a subPath of the whole volume",
			mountinfo: kubeletRoot + target50 + sub50 +
				"91 63 0:50 / /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/all/0 rw shared:4 - fuse.rclone s3:shared rw\n",
			want: []SubpathBind{
				{Path: "/var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/0", Root: "/data", Device: "0:50",
					Within: "/var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/all/0"},
				sub("all/0", "/", "0:50", false),
			},
		},
		{
			name: "the subPath is the whole volume",
			mountinfo: kubeletRoot + target50 +
				"80 63 0:50 / /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/0 rw shared:4 - fuse.rclone s3:shared rw\n",
			want: []SubpathBind{sub("app/0", "/", "0:50", false)},
		},
		{
			name: "another volume's subPath in the same pod, and another filesystem in this volume's dir",
			mountinfo: kubeletRoot + target50 +
				"82 63 0:90 /x /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-b/app/0 rw shared:9 - fuse.rclone s3:other rw\n" +
				"83 63 0:91 / /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/2 rw shared:10 - tmpfs tmpfs rw\n",
		},
		{
			name: "the same volume's subPath in another pod belongs to that pod's target",
			mountinfo: kubeletRoot + target50 +
				"84 63 0:50 /data /var/lib/kubelet/pods/uid-b/volume-subpaths/pv-a/app/0 rw shared:11 - fuse.rclone s3:shared rw\n",
		},
		{
			name: "not at <container>/<index>",
			mountinfo: kubeletRoot + target50 +
				"85 63 0:50 /data /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app rw shared:4 - fuse.rclone s3:shared rw\n" +
				"86 63 0:50 /data /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/0/deeper rw shared:4 - fuse.rclone s3:shared rw\n",
		},
		{
			// The kernel dropped the dentry after a lookup through the dead
			// mount; the directory is still there on the remote (a real
			// kubelet showed this). It is reported, not repairable.
			name: "a root shown as deleted",
			mountinfo: kubeletRoot + target50 +
				"87 63 0:50 /session//deleted /var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/0 rw shared:4 - fuse.rclone s3:shared rw\n",
			want: []SubpathBind{{Path: "/var/lib/kubelet/pods/uid-a/volume-subpaths/pv-a/app/0", Root: "/session", Device: "0:50", Unlinked: true}},
		},
		{
			name:      "target not published: no device to match",
			mountinfo: kubeletRoot + sub50,
		},
		{
			name:      "a target outside the kubelet's layout",
			mountinfo: kubeletRoot + target50 + sub50,
			target:    "/tmp/csi-sanity/target",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "mountinfo")
			if err := os.WriteFile(file, []byte(tc.mountinfo), 0o600); err != nil {
				t.Fatal(err)
			}
			target := tc.target
			if target == "" {
				target = targetA
			}
			m := &Mounter{mountinfo: file}
			got, err := m.SubpathBinds(target + "/")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:               "/plain",
		`\040`:                 " ",
		`/a\040b`:              "/a b",
		`/tab\011nl\012bs\134`: "/tab\tnl\nbs\\",
		`/short\04`:            `/short\04`,
		`/not\089`:             `/not\089`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// A subPath bind made as the kubelet makes it is found through the target,
// and a new bind of the same subdirectory of a new mount stacked on it
// shows the new mount; the next lookup sees the new layer on top.
func TestBindSubdirRepairsSubpath(t *testing.T) {
	m, root, staging := setup(t)
	must(t, os.MkdirAll(filepath.Join(staging, "dir"), 0o755))
	must(t, os.WriteFile(filepath.Join(staging, "dir", "g"), []byte("old"), 0o644))
	tgt := filepath.Join(root, "pods", "uid", "volumes", "kubernetes.io~csi", "pv", "mount")
	sub := filepath.Join(root, "pods", "uid", "volume-subpaths", "pv", "app", "0")
	must(t, os.MkdirAll(tgt, 0o750))
	must(t, os.MkdirAll(sub, 0o750))
	must(t, m.Bind(staging, tgt, false))
	t.Cleanup(func() { _ = m.Unmount(sub); _ = m.Unmount(tgt) })
	must(t, unix.Mount(filepath.Join(tgt, "dir"), sub, "", unix.MS_BIND, "")) // the kubelet's plain bind

	// A new filesystem takes the old one's place, as a new worker's does.
	staging2 := filepath.Join(root, "staging2")
	must(t, os.MkdirAll(staging2, 0o750))
	must(t, unix.Mount("tmpfs", staging2, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { _ = m.Unmount(staging2) })
	must(t, os.MkdirAll(filepath.Join(staging2, "dir"), 0o755))
	must(t, os.WriteFile(filepath.Join(staging2, "dir", "g"), []byte("new"), 0o644))
	must(t, m.Bind(staging2, tgt, false))

	for round := range 2 {
		binds, err := m.SubpathBinds(tgt)
		must(t, err)
		if len(binds) != 1 || binds[0].Path != sub || binds[0].Root != "/dir" {
			t.Fatalf("round %d: %+v", round, binds)
		}
		must(t, m.BindSubdir(staging2, binds[0].Root, sub, round == 1))
		if got, err := os.ReadFile(filepath.Join(sub, "g")); err != nil || string(got) != "new" {
			t.Fatalf("round %d: %q %v", round, got, err)
		}
	}
	if n, _ := m.layers(sub); n != 3 {
		t.Fatalf("%d layers at the subPath bind, want 3", n)
	}
	if ro, err := m.IsReadOnly(sub); err != nil || !ro {
		t.Fatalf("top layer read-only: %v %v", ro, err)
	}
	if binds, _ := m.SubpathBinds(tgt); len(binds) != 1 || !binds[0].ReadOnly {
		t.Fatalf("after two repairs: %+v", binds)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "scratch")); len(entries) != 0 {
		t.Fatalf("scratch dir not empty: %v", entries)
	}
}

func TestBindSubdirFile(t *testing.T) {
	m, root, staging := setup(t)
	file := filepath.Join(root, "file-target")
	must(t, os.WriteFile(file, nil, 0o640))
	must(t, m.BindSubdir(staging, "/f", file, true))
	t.Cleanup(func() { _ = m.Unmount(file) })
	if got, err := os.ReadFile(file); err != nil || string(got) != "data" {
		t.Fatalf("read: %q %v", got, err)
	}
	if err := os.WriteFile(file, []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write: %v, want EROFS", err)
	}
}

// A name in the volume, which a pod can change, cannot send the bind out of
// the mount.
func TestBindSubdirStaysBeneath(t *testing.T) {
	m, root, staging := setup(t)
	must(t, os.Symlink("/etc", filepath.Join(staging, "link")))
	must(t, os.MkdirAll(filepath.Join(staging, "dir"), 0o755))
	must(t, os.Symlink("/etc", filepath.Join(staging, "dir", "link")))
	tgt := target(t, root, "escape")
	for _, rel := range []string{"/link", "/dir/link", "/dir/link/passwd", "/missing"} {
		if err := m.BindSubdir(staging, rel, tgt, false); err == nil {
			_ = m.Unmount(tgt)
			t.Errorf("%s: bound", rel)
		}
	}
	// ".." cannot climb out either: it stops at the mount's root.
	f := filepath.Join(root, "f-target")
	must(t, os.WriteFile(f, nil, 0o640))
	must(t, m.BindSubdir(staging, "/../../f", f, false))
	t.Cleanup(func() { _ = m.Unmount(f) })
	if got, err := os.ReadFile(f); err != nil || string(got) != "data" {
		t.Fatalf("read: %q %v", got, err)
	}
}
