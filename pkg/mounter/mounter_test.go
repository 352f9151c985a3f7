package mounter

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// setup makes an rshared "kubelet root" holding a tmpfs "staging" mount, and
// a Mounter whose scratch dir lives inside the shared root: the scratch dir
// must stay private even there.
func setup(t *testing.T) (m *Mounter, root, staging string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for mounts")
	}
	root = t.TempDir()
	must(t, unix.Mount(root, root, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	must(t, unix.Mount("", root, "", unix.MS_SHARED|unix.MS_REC, ""))
	staging = filepath.Join(root, "staging")
	must(t, os.MkdirAll(staging, 0o750))
	must(t, unix.Mount("tmpfs", staging, "tmpfs", 0, "size=1m"))
	must(t, os.WriteFile(filepath.Join(staging, "f"), []byte("data"), 0o644))
	m, err := New(filepath.Join(root, "scratch"))
	must(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m, root, staging
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func target(t *testing.T, root, name string) string {
	p := filepath.Join(root, "pods", name)
	must(t, os.MkdirAll(p, 0o750))
	return p
}

func TestBindTargetsAreIndependent(t *testing.T) {
	m, root, staging := setup(t)
	a, b := target(t, root, "a"), target(t, root, "b")
	must(t, m.Bind(staging, a, false))
	must(t, m.Bind(staging, b, false))
	for _, p := range []string{a, b} {
		if st, err := m.Check(p); st != Mounted {
			t.Fatalf("%s: %v %v", p, st, err)
		}
	}
	must(t, m.UnmountAndRemove(a))
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target a not removed: %v", err)
	}
	for _, p := range []string{b, staging} {
		if got, err := os.ReadFile(filepath.Join(p, "f")); err != nil || string(got) != "data" {
			t.Fatalf("%s broken by unmounting a: %q %v", p, got, err)
		}
	}
	// Nothing went through the scratch dir to anyone.
	if entries, _ := os.ReadDir(filepath.Join(root, "scratch")); len(entries) != 0 {
		t.Fatalf("scratch dir not empty: %v", entries)
	}
	must(t, m.UnmountAndRemove(b))
	must(t, m.UnmountAndRemove(b)) // idempotent
}

func TestBindReadOnly(t *testing.T) {
	m, root, staging := setup(t)
	ro := target(t, root, "ro")
	must(t, m.Bind(staging, ro, true))
	t.Cleanup(func() { _ = m.Unmount(ro) })
	if err := os.WriteFile(filepath.Join(ro, "g"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write: %v, want EROFS", err)
	}
	if isRO, err := m.IsReadOnly(ro); err != nil || !isRO {
		t.Fatalf("IsReadOnly: %v %v", isRO, err)
	}
	if err := os.WriteFile(filepath.Join(staging, "g"), nil, 0o644); err != nil {
		t.Fatalf("staging must stay writable: %v", err)
	}
}

func TestUnmountRemovesStackedLayers(t *testing.T) {
	m, root, staging := setup(t)
	tgt := target(t, root, "stacked")
	must(t, m.Bind(staging, tgt, false))
	must(t, m.Bind(staging, tgt, false)) // a repair stacks a second bind
	if n, _ := m.layers(tgt); n != 2 {
		t.Fatalf("%d layers, want 2", n)
	}
	must(t, m.Unmount(tgt))
	if st, _ := m.Check(tgt); st != NotMounted {
		t.Fatalf("after unmount: %v", st)
	}
}

// A bind made in the host namespace reaches a container that holds an
// rslave copy of the pods dir, as a HostToContainer pod does.
func TestBindReachesSlaveNamespace(t *testing.T) {
	m, root, staging := setup(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare")
	}
	tgt := target(t, root, "p")
	must(t, m.Bind(staging, tgt, false))
	t.Cleanup(func() { _ = m.Unmount(tgt) })
	out, err := exec.Command("unshare", "-m", "--propagation", "slave", "cat", filepath.Join(tgt, "f")).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "data" {
		t.Fatalf("read in a new namespace: %q %v", out, err)
	}
}
