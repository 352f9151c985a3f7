package mounter

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-rclone/csi-rclone/test/hungfs"
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

// A hung mount costs one statfs in flight however many callers probe it,
// each of them bounded by its context; once it answers, it is Mounted.
func TestProbeOfHungMountDoesNotPileUp(t *testing.T) {
	m, root, _ := setup(t)
	dir := filepath.Join(root, "hung")
	must(t, os.MkdirAll(dir, 0o755))
	h, err := hungfs.Mount(dir)
	if err != nil {
		t.Skipf("cannot mount a FUSE filesystem here: %v", err)
	}
	t.Cleanup(h.Close)

	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		st, _, err := m.Probe(ctx, dir)
		cancel()
		if st != Dead || !errors.Is(err, ErrNotAnswering) {
			t.Fatalf("probe %d of a hung mount: %v, %v; want dead, not answering", i, st, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = m.Statfs(ctx, dir)
	cancel()
	if !errors.Is(err, ErrNotAnswering) {
		t.Fatalf("statfs of a hung mount: %v, want not answering", err)
	}
	if n := m.probesInFlight(); n != 1 {
		t.Fatalf("%d probes in flight, want 1", n)
	}
	if n := h.StatfsCalls(); n != 1 {
		t.Fatalf("the filesystem got %d statfs calls, want 1", n)
	}

	h.Release()
	if st, err := m.Check(dir); st != Mounted {
		t.Fatalf("after release: %v, %v; want mounted", st, err)
	}
	if n := m.probesInFlight(); n != 0 {
		t.Fatalf("%d probes in flight after the mount answered, want 0", n)
	}
}

func TestProbeUsage(t *testing.T) {
	m, root, staging := setup(t)
	st, u, err := m.Probe(context.Background(), staging)
	if st != Mounted || err != nil || u.TotalBytes != 1<<20 || u.UsedInodes < 1 {
		t.Fatalf("probe of a 1 MiB tmpfs: %v %+v %v", st, u, err)
	}
	if st, _, err := m.Probe(context.Background(), filepath.Join(root, "pods")); st != NotMounted || err != nil {
		t.Fatalf("probe of a plain directory: %v %v", st, err)
	}
}
