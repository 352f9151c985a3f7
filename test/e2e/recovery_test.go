// Package e2e runs the csi-rclone binary as a separate process, plays the
// kubelet with the real Kubernetes path layout and the container runtime with
// mount namespaces, and checks that mounts come back after the driver or a
// worker is killed, with no call from the kubelet.
package e2e

import (
	"bytes"
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
	"github.com/csi-rclone/csi-rclone/test/harness"
	"github.com/csi-rclone/csi-rclone/test/kubelet"
	"github.com/csi-rclone/csi-rclone/test/s3server"
	"github.com/csi-rclone/csi-rclone/test/testpki"
)

const (
	driverName = "csi-rclone.e2e"
	// The second key pair of the S3 server; it reaches the driver only
	// encrypted, so its plaintext must appear nowhere on disk.
	privateKeyID     = "e2e-private-key"
	privateSecretKey = "e2e-private-secret-8c1f0d"
	// recoveryBound is how long a container may wait for its data.
	recoveryBound = 10 * time.Second
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "csi-rclone-e2e-bin-")
	if err != nil {
		panic(err)
	}
	// The mount workers run this binary unprivileged: it must be reachable.
	if err := os.Chmod(dir, 0o755); err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "csi-rclone")
	build := exec.Command("go", "build", "-o", binary, "github.com/csi-rclone/csi-rclone/cmd/csi-rclone")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building csi-rclone:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

type env struct {
	dir, socket, stateDir, cacheDir, tmpDir string
	signingKey, secretAddr                  string
	s3                                      *s3server.Server
	secretKey                               *rsa.PrivateKey
	kubelet                                 *kubelet.Kubelet
	driver                                  *driverProc
	starts                                  int
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	for _, tool := range []string{"unshare", "nsenter", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (util-linux)", tool)
		}
	}
	dir := t.TempDir()
	if err := harness.Traversable(dir); err != nil {
		t.Fatal(err)
	}
	e := &env{
		dir:      dir,
		socket:   filepath.Join(dir, "plugin", "csi.sock"),
		stateDir: filepath.Join(dir, "run"),
		cacheDir: filepath.Join(dir, "cache"),
		tmpDir:   filepath.Join(dir, "tmp"),
	}
	if err := os.MkdirAll(e.tmpDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// The state dir is memory-backed on a node: a tmpfs here too.
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", e.stateDir, "tmpfs", 0, "mode=0711,size=16m"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s3, err := s3server.Start(ctx, filepath.Join(dir, "s3"), harness.AccessKeyID, harness.SecretAccessKey, privateKeyID, privateSecretKey)
	if err != nil {
		t.Fatal(err)
	}
	e.s3 = s3
	e.signingKey = filepath.Join(dir, "jwt-signing-key.pem")
	ss, serviceKey := newSecretService(t, ecKeyPEM(t, e.signingKey))
	e.secretAddr, e.secretKey = ss.Addr, serviceKey
	e.kubelet = &kubelet.Kubelet{Root: filepath.Join(dir, "kubelet"), DriverName: driverName}
	if err := e.kubelet.MakeRootShared(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "driver-*.log"))
			for _, l := range logs {
				data, _ := os.ReadFile(l)
				t.Logf("==== %s\n%s", filepath.Base(l), data)
			}
		}
		if e.driver != nil {
			e.driver.kill9()
		}
		killWorkers()
		_ = s3.Stop(ctx)
		harness.UnmountAll(dir)
		_ = unix.Unmount(e.stateDir, unix.MNT_DETACH)
		_ = e.kubelet.ReleaseRoot()
	})
	for _, b := range []string{"shared", "private", "late"} {
		if err := s3.MakeBucket(b); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(s3.Object(b, "seed.txt"), []byte("seed of "+b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// What a container that mounts subPath "sub" of the shared bucket sees.
	if err := os.MkdirAll(s3.Object("shared", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s3.Object("shared", "sub/seed.txt"), []byte("seed of shared/sub"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s3.Object("shared", "config.yaml"), []byte("config of shared"), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

func rwx() *csi.VolumeCapability {
	return harness.MountCapability(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
}

func TestRecovery(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()

	host, err := envelope.NormalizeHost(e.s3.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	encrypted := testpki.Seal(t, &e.secretKey.PublicKey,
		envelope.Context{Namespace: "alice", Option: "secret_access_key", Host: host}, privateSecretKey)
	shared := kubelet.Volume{PV: "pv-shared", Handle: "shared-vol", Capability: rwx(),
		Secret: map[string]string{"remote": "s3", "remotePath": "shared", "configData": e.s3.RcloneConfig("s3")}}
	private := kubelet.Volume{PV: "pv-private", Handle: "private-vol", Capability: rwx(),
		Secret: map[string]string{
			"remote": "s3", "remotePath": "private",
			"configData":        s3server.RcloneConfig("s3", e.s3.Endpoint, privateKeyID, "<sensitive>"),
			"secret_access_key": encrypted,
		},
		Context: map[string]string{"csi.storage.k8s.io/pvc/namespace": "alice", "csi.storage.k8s.io/pvc/name": "private-data"}}

	e.startDriver(t)
	for _, v := range []kubelet.Volume{shared, private} {
		if err := e.kubelet.Stage(ctx, v); err != nil {
			t.Fatalf("stage %s: %v", v.PV, err)
		}
	}
	targets := map[string]string{}
	for pod, v := range map[string]kubelet.Volume{"pod-a": shared, "pod-b": shared, "pod-c": private, "pod-d": shared} {
		target, err := e.kubelet.Publish(ctx, v, pod, false)
		if err != nil {
			t.Fatalf("publish %s to %s: %v", v.PV, pod, err)
		}
		targets[pod] = target
	}
	a := startContainer(t, e, "a", targets["pod-a"])
	b := startContainer(t, e, "b", targets["pod-b"])
	c := startContainer(t, e, "c", targets["pod-c"])
	// Pod d's containers use the shared volume: d mounts its subPath "sub",
	// which the kubelet binds apart from the target, and e the whole volume.
	subMount, err := e.kubelet.BindSubPath(shared, "pod-d", "app", 0, "sub")
	if err != nil {
		t.Fatalf("subPath bind: %v", err)
	}
	d := startContainer(t, e, "d", subMount)
	// A sidecar mounts the same subPath: its bind is a peer of d's.
	sideMount, err := e.kubelet.BindSubPath(shared, "pod-d", "sidecar", 0, "sub")
	if err != nil {
		t.Fatalf("subPath bind: %v", err)
	}
	side := startContainer(t, e, "g", sideMount)
	ctrE := startContainer(t, e, "e", targets["pod-d"])
	// And a third container mounts one file, read-only, as configs often
	// are; and a fourth one file inside d's subPath, which recovery must
	// replace rather than stack on (see mounter.SubpathBind.Within) so that
	// the kubelet can still clean up.
	fileMount, err := e.kubelet.BindSubPath(shared, "pod-d", "config", 0, "config.yaml")
	if err != nil {
		t.Fatalf("subPath bind of a file: %v", err)
	}
	withinMount, err := e.kubelet.BindSubPath(shared, "pod-d", "config", 1, "sub/seed.txt")
	if err != nil {
		t.Fatalf("subPath bind of a file inside another subPath: %v", err)
	}
	f := startContainer(t, e, "f", fileMount)
	if out, err := f.run("mount", "-o", "remount,bind,ro", f.dir); err != nil {
		t.Fatalf("read-only file mount: %v %s", err, out)
	}
	h := startContainer(t, e, "h", withinMount)
	fileReads := func(t *testing.T) {
		t.Helper()
		for ctr, want := range map[*container]string{f: "config of shared", h: "seed of shared/sub"} {
			eventually(t, recoveryBound, "container "+ctr.name+" reads its file", func() error {
				if got, err := ctr.read(""); err != nil || got != want {
					return fmt.Errorf("read %q: %v", got, err)
				}
				return nil
			})
		}
	}
	// Where each container's files are: a bucket, or a directory in one.
	bucketOf := map[*container]string{a: "shared", b: "shared", c: "private", d: "shared/sub", ctrE: "shared", side: "shared/sub"}
	for ctr, bucket := range bucketOf {
		if got, err := ctr.read("seed.txt"); err != nil || got != "seed of "+bucket {
			t.Fatalf("container %s before any crash: %q %v", ctr.name, got, err)
		}
	}
	checkProcessHygiene(t, e)
	checkFileHygiene(t, e)

	// worksAgain waits until every container reads its seed and writes a
	// file, and reports how long each volume took.
	worksAgain := func(t *testing.T, since time.Time, tag string, ctrs ...*container) {
		t.Helper()
		for _, ctr := range ctrs {
			eventually(t, recoveryBound, "container "+ctr.name+" reads and writes again", func() error {
				if got, err := ctr.read("seed.txt"); err != nil || got != "seed of "+bucketOf[ctr] {
					return fmt.Errorf("read %q: %v", got, err)
				}
				return ctr.write(tag+"-"+ctr.name+".txt", "written by "+ctr.name)
			})
			t.Logf("recovery: container %s (bucket %s) reads and writes %s after the crash", ctr.name, bucketOf[ctr], time.Since(since).Round(time.Millisecond))
		}
		for _, ctr := range ctrs {
			key := tag + "-" + ctr.name + ".txt"
			eventually(t, 30*time.Second, key+" reaches the bucket", func() error {
				got, err := os.ReadFile(e.s3.Object(bucketOf[ctr], key))
				if err != nil || string(got) != "written by "+ctr.name {
					return fmt.Errorf("%q %v", got, err)
				}
				return nil
			})
		}
	}

	t.Run("driver and all workers killed", func(t *testing.T) {
		uidsBefore := workerUIDs(t)
		e.driver.kill9()
		killWorkers()
		eventually(t, 5*time.Second, "the mounts are dead", func() error {
			for _, ctr := range []*container{a, d} {
				if _, err := ctr.read("seed.txt"); err == nil {
					return fmt.Errorf("container %s still reads", ctr.name)
				}
			}
			return nil
		})
		crash := time.Now()
		e.startDriver(t)
		t.Logf("recovery: driver ready %s after start", time.Since(e.driver.started).Round(time.Millisecond))
		worksAgain(t, crash, "after-driver-restart", a, b, c, d, ctrE, side)
		fileReads(t)
		// The cache dir belongs to the volume's uid: recovery keeps it.
		if after := workerUIDs(t); !maps.Equal(after, uidsBefore) {
			t.Errorf("worker uids %v after the restart, %v before", after, uidsBefore)
		}
	})

	t.Run("subPath binds whose directory entries the kernel dropped", func(t *testing.T) {
		e.driver.kill9()
		killWorkers()
		// Container e, which mounts the whole volume, looks the subPaths
		// up through the dead mount: once their entries' timeout has
		// passed, the kernel asks the dead daemon, fails, and drops them,
		// and mount(2) refuses to stack a repair on the binds that show
		// them. That is what a real session pod's reader does.
		dropped := map[*container]string{d: "/sub//deleted", side: "/sub//deleted", f: "/config.yaml//deleted"}
		crash := time.Now()
		started := false
		defer func() {
			if !started { // the rest of the test needs a driver
				e.startDriver(t)
			}
		}()
		eventually(t, 10*time.Second, "the kernel drops the subPaths' dentries", func() error {
			_, _ = ctrE.run("stat", filepath.Join(ctrE.dir, "sub"), filepath.Join(ctrE.dir, "config.yaml"), filepath.Join(ctrE.dir, "sub", "seed.txt"))
			for ctr, root := range dropped {
				info, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", ctr.cmd.Process.Pid))
				if err != nil {
					return err
				}
				if !strings.Contains(string(info), " "+root+" "+ctr.dir+" ") {
					return fmt.Errorf("container %s: no mount of %s at %s yet", ctr.name, root, ctr.dir)
				}
			}
			return nil
		})
		e.startDriver(t)
		started = true
		worksAgain(t, crash, "after-dentries-dropped", a, d, ctrE, side)
		fileReads(t)
	})

	t.Run("one worker killed", func(t *testing.T) {
		killWorkers(shared.Handle)
		crash := time.Now()
		worksAgain(t, crash, "after-worker-kill", a, b, d, ctrE, side)
		fileReads(t)
		if got, err := c.read("seed.txt"); err != nil || got != "seed of private" {
			t.Fatalf("container c, on another volume: %q %v", got, err)
		}
	})

	t.Run("a write not yet uploaded survives a crash", func(t *testing.T) {
		if err := a.write("precious.txt", "not lost"); err != nil {
			t.Fatal(err)
		}
		killWorkers(shared.Handle) // before the write-back delay has passed
		if _, err := os.Stat(e.s3.Object("shared", "precious.txt")); err == nil {
			t.Log("the file was uploaded before the kill; the test proves less")
		}
		eventually(t, 30*time.Second, "precious.txt reaches the bucket", func() error {
			got, err := os.ReadFile(e.s3.Object("shared", "precious.txt"))
			if err != nil || string(got) != "not lost" {
				return fmt.Errorf("%q %v", got, err)
			}
			return nil
		})
		eventually(t, recoveryBound, "container b reads precious.txt", func() error {
			got, err := b.read("precious.txt")
			if err != nil || got != "not lost" {
				return fmt.Errorf("%q %v", got, err)
			}
			return nil
		})
		// A third layer on the subPath bind: only the top one counts.
		worksAgain(t, time.Now(), "after-second-worker-kill", d, ctrE, side)
		fileReads(t)
	})

	t.Run("driver restarted during NodeStageVolume", func(t *testing.T) {
		g := newGate(t, strings.TrimPrefix(e.s3.Endpoint, "http://"))
		late := kubelet.Volume{PV: "pv-late", Handle: "late-vol", Capability: rwx(),
			Secret: map[string]string{"remote": "s3", "remotePath": "late", "configData": e.s3.RcloneConfig("s3")}}
		late.Secret["configData"] = strings.Replace(late.Secret["configData"], e.s3.Endpoint, g.endpoint(), 1)
		g.setBlocked(true)
		errc := make(chan error, 1)
		go func() { errc <- e.kubelet.Stage(ctx, late) }()
		eventually(t, 10*time.Second, "the stage is in flight", func() error {
			if len(workerPIDs()[late.Handle]) == 0 {
				return fmt.Errorf("no worker for %s yet", late.Handle)
			}
			return nil
		})
		e.driver.kill9()
		killWorkers()
		if err := <-errc; err == nil {
			t.Fatal("the interrupted stage succeeded")
		}
		e.startDriver(t)
		g.setBlocked(false)
		staging := e.kubelet.StagingPath(late)
		if n := mountsAt(t, staging); n != 0 {
			t.Fatalf("%d mounts at the staging path of the interrupted stage", n)
		}
		if len(workerPIDs()[late.Handle]) != 0 {
			t.Fatal("a worker runs for the interrupted stage")
		}
		if n := records(t, e); n != 2 {
			t.Fatalf("%d volume records, want 2 (the interrupted stage must leave none)", n)
		}
		if err := e.kubelet.Stage(ctx, late); err != nil {
			t.Fatalf("retried stage: %v", err)
		}
		if err := e.kubelet.Unstage(ctx, late); err != nil {
			t.Fatalf("unstage: %v", err)
		}
		worksAgain(t, time.Now(), "after-interrupted-stage", a, b, c, d, ctrE, side)
		fileReads(t)
	})

	t.Run("unpublishing one pod leaves the other working", func(t *testing.T) {
		b.stop()
		if err := e.kubelet.Unpublish(ctx, shared, "pod-b"); err != nil {
			t.Fatal(err)
		}
		if err := a.write("after-unpublish-b.txt", "a still works"); err != nil {
			t.Fatal(err)
		}
		if got, err := a.read("seed.txt"); err != nil || got != "seed of shared" {
			t.Fatalf("container a: %q %v", got, err)
		}
	})

	t.Run("unpublishing a pod with a subPath leaves the others working", func(t *testing.T) {
		for _, ctr := range []*container{d, ctrE, f, side, h} {
			ctr.stop()
		}
		if err := e.kubelet.Unpublish(ctx, shared, "pod-d"); err != nil {
			t.Fatal(err)
		}
		if n := mountsBelow(t, filepath.Join(e.kubelet.Root, "pods", "pod-d")); n != 0 {
			t.Fatalf("%d mounts left in pod-d", n)
		}
		if _, err := os.Stat(filepath.Join(e.kubelet.Root, "pods", "pod-d")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("pod-d's dir left: %v", err)
		}
		if got, err := a.read("sub/seed.txt"); err != nil || got != "seed of shared/sub" {
			t.Fatalf("container a: %q %v", got, err)
		}
	})

	t.Run("unstage leaves nothing", func(t *testing.T) {
		a.stop()
		c.stop()
		for pod, v := range map[string]kubelet.Volume{"pod-a": shared, "pod-c": private} {
			if err := e.kubelet.Unpublish(ctx, v, pod); err != nil {
				t.Fatal(err)
			}
		}
		for _, v := range []kubelet.Volume{shared, private} {
			if err := e.kubelet.Unstage(ctx, v); err != nil {
				t.Fatalf("unstage %s: %v", v.PV, err)
			}
		}
		if got, err := os.ReadFile(e.s3.Object("shared", "after-unpublish-b.txt")); err != nil || string(got) != "a still works" {
			t.Fatalf("last write: %q %v", got, err)
		}
		if n := mountsBelow(t, e.kubelet.Root); n != 0 {
			t.Fatalf("%d mounts left below the kubelet root", n)
		}
		if w := workerPIDs(); len(w) != 0 {
			t.Fatalf("workers left: %v", w)
		}
		if n := records(t, e); n != 0 {
			t.Fatalf("%d records left", n)
		}
		if left, _ := os.ReadDir(e.cacheDir); len(left) != 0 {
			t.Fatalf("cache dirs left: %v", left)
		}
	})

	t.Run("no credential leaks", func(t *testing.T) {
		checkFileHygiene(t, e)
	})
}

func mountsAt(t *testing.T, path string) int {
	t.Helper()
	n := 0
	for _, mp := range mountPoints(t) {
		if mp == path {
			n++
		}
	}
	return n
}

func mountsBelow(t *testing.T, root string) int {
	t.Helper()
	n := 0
	for _, mp := range mountPoints(t) {
		if strings.HasPrefix(mp, root+"/") {
			n++
		}
	}
	return n
}

func mountPoints(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			out = append(out, f[4])
		}
	}
	return out
}

func records(t *testing.T, e *env) int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(e.stateDir, "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, en := range entries {
		if strings.HasSuffix(en.Name(), ".json") {
			n++
		}
	}
	return n
}

// checkProcessHygiene: no credential on the command line or in the
// environment of the driver or of any worker.
// workerUIDs maps each volume with a live worker to the worker's real,
// effective, saved and filesystem uid, which must all be the same.
func workerUIDs(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for id, pids := range workerPIDs() {
		for _, pid := range pids {
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				t.Fatal(err)
			}
			var r, e, s, f int
			i := strings.Index(string(st), "\nUid:")
			if _, err := fmt.Sscan(string(st)[i+len("\nUid:"):], &r, &e, &s, &f); i < 0 || err != nil || r != e || r != s || r != f {
				t.Fatalf("worker %d: uids %d %d %d %d: %v", pid, r, e, s, f, err)
			}
			out[id] = r
		}
	}
	return out
}

func checkProcessHygiene(t *testing.T, e *env) {
	t.Helper()
	pids := []int{e.driver.cmd.Process.Pid}
	for _, ps := range workerPIDs() {
		pids = append(pids, ps...)
	}
	// The workers run the tenant's rclone config: never as root, and each
	// volume's as a uid of its own from the range.
	owner := map[int]string{}
	for id, uid := range workerUIDs(t) {
		if !harness.WorkerUIDs.Contains(uid) {
			t.Errorf("the worker of %s runs as uid %d, outside %s", id, uid, harness.WorkerUIDs)
		}
		if other, dup := owner[uid]; dup {
			t.Errorf("the workers of %s and %s share uid %d", id, other, uid)
		}
		owner[uid] = id
	}
	if len(pids) < 3 {
		t.Fatalf("expected the driver and two workers, got pids %v", pids)
	}
	for _, pid := range pids {
		for _, f := range []string{"cmdline", "environ"} {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
			if err != nil {
				t.Fatal(err)
			}
			for _, secret := range []string{harness.SecretAccessKey, privateSecretKey} {
				if bytes.Contains(data, []byte(secret)) {
					t.Errorf("/proc/%d/%s holds a credential", pid, f)
				}
			}
		}
	}
}

// checkFileHygiene: no credential in any driver log, nor in any file of the
// cache or temp dirs. The state dir holds the one exception SECURITY.md
// declares: a volume record keeps the stage secret as it arrived, so a
// credential that arrived in clear is in its record (0600, on a tmpfs)
// while the volume is staged; one that arrived encrypted stays encrypted.
func checkFileHygiene(t *testing.T, e *env) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(e.dir, "driver-*.log"))
	if len(logs) == 0 {
		t.Fatal("no driver logs")
	}
	everywhere := []string{harness.SecretAccessKey, privateSecretKey}
	scanned := 0
	check := func(f string, secrets []string) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		scanned++
		for _, secret := range secrets {
			if bytes.Contains(data, []byte(secret)) {
				t.Errorf("%s holds a credential", f)
			}
		}
	}
	for _, l := range logs {
		check(l, everywhere)
	}
	walk := func(dir string, secrets []string) {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && p == filepath.Join(e.stateDir, "mnt") {
				return fs.SkipDir // the mounted volumes themselves
			}
			if err == nil && d.Type().IsRegular() {
				check(p, secrets)
				if fi, _ := d.Info(); dir == e.stateDir && fi.Mode().Perm()&0o077 != 0 {
					t.Errorf("%s is readable by others: %v", p, fi.Mode())
				}
			}
			return nil
		})
	}
	walk(e.cacheDir, everywhere)
	walk(e.tmpDir, everywhere)
	walk(e.stateDir, []string{privateSecretKey})
	t.Logf("scanned %d files (%d driver logs) for credentials", scanned, len(logs))
}
