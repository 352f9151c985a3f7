package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/secrets"
	"github.com/csi-rclone/csi-rclone/test/harness"
	"github.com/csi-rclone/csi-rclone/test/procfs"
	"github.com/csi-rclone/csi-rclone/test/s3server"
)

// pluginEnv makes this test binary a stand-in for the node plugin: it
// mounts and hands the device to a mount worker, then waits to be killed.
const pluginEnv = "CSI_RCLONE_TEST_PLUGIN"

func TestMain(m *testing.M) {
	if worker.IsWorkerInvocation(os.Args) {
		worker.Main()
	}
	if os.Getenv(pluginEnv) != "" {
		pluginMain()
	}
	os.Exit(m.Run())
}

// pluginJob is what the test tells the plugin stand-in on its stdin.
type pluginJob struct {
	Socket string
	UID    int
	Spec   worker.Spec
}

func pluginMain() {
	var job pluginJob
	in := bufio.NewReader(os.Stdin)
	if err := json.NewDecoder(in).Decode(&job); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := worker.StartOn(ctx, job.Socket, worker.Options{UID: job.UID, GID: job.UID}, job.Spec); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, in) // until the test kills it
	os.Exit(0)
}

// mountPod is a mount worker as a mount pod runs it: its own uid, no
// capability, no parent that it dies with, a socket and a cache dir.
type mountPod struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan error
}

func startMountPod(t *testing.T, bin, socket, cacheDir string, uid int) *mountPod {
	t.Helper()
	p := &mountPod{done: make(chan error, 1)}
	p.cmd = exec.Command(bin, worker.Arg, "--volume-id", "v", "--cache-dir", cacheDir, "--socket", socket)
	p.cmd.Env = []string{"HOME=" + cacheDir, "TMPDIR=" + cacheDir}
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("mount worker's log:\n%s", p.stderr.String())
		}
	})
	return p
}

// startPlugin runs the plugin stand-in in a process of its own, and returns
// it once the worker has mounted.
func startPlugin(t *testing.T, job pluginJob) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), pluginEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = stdin.Close() })
	if err := json.NewEncoder(stdin).Encode(job); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("plugin stand-in: %q %v", line, err)
	}
	return cmd
}

// The node plugin mounts FUSE and hands the device and the spec to a worker
// in another process over its socket; the plugin is killed with files open
// in the mount and a new one attaches: no read or write fails, and the new
// plugin drains, unmounts and gets the worker's exit report.
func TestMountPodSurvivesPluginAndIsAdopted(t *testing.T) {
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	ctx := context.Background()
	base := t.TempDir()
	if err := harness.Traversable(base); err != nil {
		t.Fatal(err)
	}
	const key = "mount-pod-secret-key-0123456789"
	s3, err := s3server.Start(ctx, filepath.Join(base, "s3"), "mountpodkey", key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s3.Stop(ctx) })
	if err := s3.MakeBucket("b"); err != nil {
		t.Fatal(err)
	}
	held := bytes.Repeat([]byte("held open across the plugin's death\n"), 1000)
	if err := os.WriteFile(s3.Object("b", "held.txt"), held, 0o644); err != nil {
		t.Fatal(err)
	}

	uid := harness.WorkerUIDs.Last - 11 // no driver of the tests' hands this one out
	sockDir, cacheDir := filepath.Join(base, "sock"), filepath.Join(base, "cache")
	volDir := filepath.Join(base, "vol")
	mnt := filepath.Join(volDir, "mnt")
	for _, d := range []struct {
		path     string
		uid, gid int
		mode     os.FileMode
	}{{sockDir, uid, uid, 0o700}, {cacheDir, uid, uid, 0o700}, {volDir, 0, uid, 0o710}, {mnt, 0, 0, 0o700}} {
		if err := os.Mkdir(d.path, d.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d.path, d.uid, d.gid); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := harness.WorkerBinary(base)
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(sockDir, "worker.sock")
	pod := startMountPod(t, bin, socket, cacheDir, uid)

	// A fresh worker has nothing to attach to.
	attachCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := worker.Attach(attachCtx, socket, "v"); !errors.Is(err, worker.ErrNotStarted) {
		t.Fatalf("attach to a fresh worker: %v, want ErrNotStarted", err)
	}

	spec := worker.Spec{VolumeID: "v", MountPoint: mnt, Volume: secrets.Volume{
		Config: secrets.Config{"s3": {"type": "s3", "provider": "Other", "access_key_id": "mountpodkey", "secret_access_key": key,
			"endpoint": s3.Endpoint, "force_path_style": "true"}},
		Remote: "s3", Path: "b",
		VFSOpt:   map[string]string{"vfs_cache_mode": "writes", "uid": "0", "gid": "0"},
		MountOpt: map[string]string{"allow_other": "true"},
	}}
	plugin := startPlugin(t, pluginJob{Socket: socket, UID: uid, Spec: spec})
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })

	if err := os.WriteFile(filepath.Join(mnt, "before.txt"), []byte("written through the first plugin's mount\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(filepath.Join(mnt, "held.txt"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.Create(filepath.Join(mnt, "written.txt"))
	if err != nil {
		t.Fatal(err)
	}

	// Read the held file and append to the written one until told to stop.
	var ops, failures atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var written bytes.Buffer
	go func() {
		defer wg.Done()
		buf := make([]byte, len(held))
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			n, err := r.ReadAt(buf, 0)
			if err == nil && !bytes.Equal(buf[:n], held) {
				err = fmt.Errorf("read %d bytes that differ", n)
			}
			if err == nil {
				line := fmt.Sprintf("line %d\n", i)
				if _, err = w.WriteString(line); err == nil {
					written.WriteString(line)
				}
			}
			ops.Add(1)
			if err != nil {
				failures.Add(1)
				firstFailure.CompareAndSwap(nil, err)
			}
		}
	}()
	waitOps := func(n int64) {
		for start := ops.Load(); ops.Load() < start+n; {
			time.Sleep(time.Millisecond)
		}
	}
	waitOps(20)

	// The plugin dies; the mount goes on.
	if err := plugin.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = plugin.Wait()
	waitOps(50)

	// A plugin that asks for another volume is told which one this is.
	if _, err := worker.Attach(attachCtx, socket, "other"); err == nil || !strings.Contains(err.Error(), `"v"`) {
		t.Fatalf("attach for another volume: %v", err)
	}
	// The restarted plugin attaches.
	conn, err := worker.Attach(attachCtx, socket, "v")
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	// A second start on a worker that serves is refused, and its mount undone.
	other := filepath.Join(base, "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(other, unix.MNT_DETACH) }) // if the check below fails
	otherSpec := spec
	otherSpec.MountPoint = other
	if _, err := worker.StartOn(attachCtx, socket, worker.Options{UID: uid, GID: uid}, otherSpec); err == nil || !strings.Contains(err.Error(), "attach") {
		t.Fatalf("start on a serving worker: %v", err)
	}
	if procfs.Mounted(t, other) {
		t.Fatal("a refused start left its mount")
	}
	// The refused start took nothing over: the attached plugin still commands.
	waitOps(20)
	close(stop)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d operations failed across the plugin's death; first: %v", n, ops.Load(), firstFailure.Load())
	}
	t.Logf("%d reads and writes, none failed", ops.Load())
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	drainCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := conn.Drain(drainCtx, 30*time.Second); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	exit, ok := conn.Wait(10 * time.Second)
	if !ok || exit.NotUploaded != 0 {
		t.Fatalf("exit report %+v %t, want none left", exit, ok)
	}
	select {
	case err := <-pod.done:
		pod.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("mount worker: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the mount worker did not exit after the unmount")
	}
	got, err := os.ReadFile(s3.Object("b", "written.txt"))
	if err != nil || !bytes.Equal(got, written.Bytes()) {
		t.Fatalf("uploaded written.txt: %d bytes, %v; want %d", len(got), err, written.Len())
	}
	if _, err := os.Stat(s3.Object("b", "before.txt")); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(pod.stderr.String(), key) {
		t.Fatal("the mount worker's log has the secret key")
	}
}
