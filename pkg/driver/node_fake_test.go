package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/csi-rclone/csi-rclone/pkg/mounter"
	"github.com/csi-rclone/csi-rclone/pkg/state"
	"github.com/csi-rclone/csi-rclone/pkg/uidpool"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
)

// fakeMounts is a mount table in memory: what is mounted where, read-only
// or not, dead or alive. It touches no kernel mount.
type fakeMounts struct {
	mu     sync.Mutex
	mounts map[string]*fakeMount
	// subpaths are the subPath binds each target has; replaceFails the
	// ReplaceSubpathBind calls that fail before they succeed; replaces
	// counts the calls.
	subpaths     map[string][]mounter.SubpathBind
	replaceFails int
	replaces     int
	// copiesFail: the first replacements of a bind's copies in pods that
	// fail (the bind itself is replaced); copies counts the retries.
	copiesFail int
	copies     int
}

type fakeMount struct {
	source   string
	readOnly bool
	dead     bool
}

func newFakeMounts() *fakeMounts { return &fakeMounts{mounts: map[string]*fakeMount{}} }

func (f *fakeMounts) set(path string, m *fakeMount) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mounts[filepath.Clean(path)] = m
}

func (f *fakeMounts) get(path string) (*fakeMount, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.mounts[filepath.Clean(path)]
	return m, ok
}

func (f *fakeMounts) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.mounts)
}

func (f *fakeMounts) Check(path string) (mounter.State, error) {
	m, ok := f.get(path)
	switch {
	case !ok:
		return mounter.NotMounted, nil
	case m.dead:
		return mounter.Dead, errors.New("transport endpoint is not connected")
	}
	return mounter.Mounted, nil
}

func (f *fakeMounts) Probe(_ context.Context, path string) (mounter.State, mounter.Usage, error) {
	st, err := f.Check(path)
	return st, mounter.Usage{TotalBytes: 1 << 30, AvailableBytes: 1 << 29, UsedBytes: 1 << 29}, err
}

func (f *fakeMounts) WaitMounted(_ context.Context, path string) error {
	if st, _ := f.Check(path); st != mounter.Mounted {
		return fmt.Errorf("%s is %s", path, st)
	}
	return nil
}

func (f *fakeMounts) Bind(source, target string, readOnly bool) error {
	f.set(target, &fakeMount{source: source, readOnly: readOnly})
	return nil
}

func (f *fakeMounts) BindSubdir(source, rel, target string, readOnly bool) error {
	return f.Bind(filepath.Join(source, rel), target, readOnly)
}

func (f *fakeMounts) IsReadOnly(path string) (bool, error) {
	m, ok := f.get(path)
	if !ok {
		return false, fmt.Errorf("%s is not mounted", path)
	}
	return m.readOnly, nil
}

func (f *fakeMounts) Unmount(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.mounts, filepath.Clean(path))
	return nil
}

func (f *fakeMounts) UnmountAndRemove(path string) error {
	_ = f.Unmount(path)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (f *fakeMounts) SubpathBinds(target string) ([]mounter.SubpathBind, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.subpaths[filepath.Clean(target)], nil
}

func (f *fakeMounts) ReplaceSubpathBind(_ context.Context, b mounter.SubpathBind, source string) (int, error) {
	f.mu.Lock()
	f.replaces++
	fail := f.replaces <= f.replaceFails
	f.mu.Unlock()
	if fail {
		return 0, errors.New("helper timed out")
	}
	if err := f.Bind(filepath.Join(source, b.Root), b.Path, b.ReadOnly); err != nil {
		return 0, err
	}
	c := mounter.StaleCopies{Path: b.Path, Root: b.Root}
	if _, err := f.ReplaceCopies(context.Background(), c); err != nil {
		return 0, &mounter.CopiesLeftError{Copies: c, Err: err}
	}
	return 1, nil
}

func (f *fakeMounts) ReplaceCopies(_ context.Context, c mounter.StaleCopies) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.copies++
	if f.copies <= f.copiesFail {
		return 0, errors.New("process gone")
	}
	return 1, nil
}

func (f *fakeMounts) replaceCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.replaces
}

// fakeWorker is a worker that "serves" its mount point in fakeMounts.
type fakeWorker struct {
	pid      int
	done     chan struct{}
	once     sync.Once
	drainErr error
	exit     worker.Exit
}

func (w *fakeWorker) Pid() int              { return w.pid }
func (w *fakeWorker) Done() <-chan struct{} { return w.done }
func (w *fakeWorker) Kill()                 { w.once.Do(func() { close(w.done) }) }
func (w *fakeWorker) Detach()               { w.Kill() }

func (w *fakeWorker) Drain(context.Context, time.Duration) error { return w.drainErr }

func (w *fakeWorker) Wait(time.Duration) (worker.Exit, bool) {
	w.Kill()
	return w.exit, true
}

// fakeNode is a node server over fakes: no root, no FUSE, no process.
type fakeNode struct {
	*nodeServer
	mounts *fakeMounts
	dir    string

	mu       sync.Mutex
	started  []*fakeWorker
	startErr error // the next starts fail with it
	drainErr error // workers started from now on answer drains with it
}

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	dir := t.TempDir()
	opts := Options{
		Mode: ModeNode, NodeID: "n", Endpoint: "unix://" + filepath.Join(dir, "csi.sock"),
		StateDir: filepath.Join(dir, "state"), CacheDir: filepath.Join(dir, "cache"),
		MountTimeout: 5 * time.Second, DrainTimeout: time.Second,
	}
	opts.setDefaults()
	for _, d := range []string{filepath.Join(opts.StateDir, "mnt"), opts.CacheDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	store, err := state.New(filepath.Join(opts.StateDir, "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	uids, err := uidpool.New(uidpool.Range{First: 5000, Last: 5009})
	if err != nil {
		t.Fatal(err)
	}
	d := &Driver{opts: opts, tasks: newTasks()}
	f := &fakeNode{mounts: newFakeMounts(), dir: dir}
	s := newNodeServer(d, store, uids)
	s.m = f.mounts
	s.chown = func(string, int, int) error { return nil }
	s.startWorker = f.start
	f.nodeServer = s
	d.node = s
	t.Cleanup(func() {
		d.tasks.Cancel()
		d.tasks.Wait()
		s.killAll()
	})
	return f
}

func (f *fakeNode) start(_ context.Context, _ worker.Options, spec worker.Spec) (mountWorker, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return nil, f.startErr
	}
	w := &fakeWorker{pid: 10000 + len(f.started), done: make(chan struct{}), drainErr: f.drainErr}
	f.started = append(f.started, w)
	f.mounts.set(spec.MountPoint, &fakeMount{source: "rclone"})
	return w, nil
}

func (f *fakeNode) workers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.started)
}
