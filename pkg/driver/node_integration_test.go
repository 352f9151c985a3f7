package driver_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rclone/rclone/fs/config/obscure"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-rclone/csi-rclone/pkg/driver"
	"github.com/csi-rclone/csi-rclone/pkg/mounter"
	"github.com/csi-rclone/csi-rclone/pkg/provision"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/test/harness"
	"github.com/csi-rclone/csi-rclone/test/procfs"
)

// TestMain lets this test binary serve as the driver's mount worker and
// provisioning child.
func TestMain(m *testing.M) {
	if worker.IsWorkerInvocation(os.Args) {
		worker.Main()
	}
	if os.Getenv(probeEnv) != "" {
		probeMain()
	}
	if provision.IsInvocation(os.Args) {
		provision.Main()
	}
	if mounter.IsReplaceInvocation(os.Args) {
		mounter.ReplaceMain()
	}
	os.Exit(m.Run())
}

const (
	rwo = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	rox = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
)

func startEnv(t *testing.T) *harness.Env {
	t.Helper()
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	e, err := harness.Start(context.Background(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

type vol struct {
	t       *testing.T
	e       *harness.Env
	id      string
	staging string
	secret  map[string]string
	context map[string]string
	cap     *csi.VolumeCapability
}

func newVol(t *testing.T, e *harness.Env, id, bucketPath string) *vol {
	return &vol{
		t: t, e: e, id: id,
		staging: filepath.Join(e.Dir, "plugins", id, "globalmount"),
		secret:  e.Secret(bucketPath),
		cap:     harness.MountCapability(rwo),
	}
}

func (v *vol) stage() error {
	if err := os.MkdirAll(v.staging, 0o750); err != nil {
		v.t.Fatal(err)
	}
	_, err := v.e.Node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: v.cap,
		Secrets: v.secret, VolumeContext: v.context,
	})
	return err
}

func (v *vol) mustStage() {
	v.t.Helper()
	if err := v.stage(); err != nil {
		v.t.Fatalf("stage %s: %v", v.id, err)
	}
	v.t.Cleanup(func() { v.unstage() })
}

func (v *vol) unstage() error {
	_, err := v.e.Node.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging})
	return err
}

func (v *vol) publish(pod string, readOnly bool) (string, error) {
	target := filepath.Join(v.e.Dir, "pods", pod, "volumes", v.id, "mount")
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		v.t.Fatal(err)
	}
	_, err := v.e.Node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: v.id, StagingTargetPath: v.staging, TargetPath: target,
		VolumeCapability: v.cap, Readonly: readOnly,
	})
	return target, err
}

func (v *vol) mustPublish(pod string, readOnly bool) string {
	v.t.Helper()
	target, err := v.publish(pod, readOnly)
	if err != nil {
		v.t.Fatalf("publish %s to %s: %v", v.id, pod, err)
	}
	v.t.Cleanup(func() { v.unpublish(target) })
	return target
}

func (v *vol) unpublish(target string) error {
	_, err := v.e.Node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: target})
	return err
}

// workers counts live worker processes of a volume of e.
func workers(t *testing.T, e *harness.Env, volumeID string) int {
	t.Helper()
	return len(e.WorkerPIDs(volumeID))
}

// secretWith is a copy of secret with the keys and values of kv set.
func secretWith(secret map[string]string, kv ...string) map[string]string {
	s := maps.Clone(secret)
	for i := 0; i+1 < len(kv); i += 2 {
		s[kv[i]] = kv[i+1]
	}
	return s
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
}

// eventually retries f until it succeeds or 10 s pass: uploads and
// directory caches settle asynchronously.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	eventuallyWithin(t, 10*time.Second, what, f)
}

func eventuallyWithin(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestStagePublishTwoTargetsShareOneMount(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("data"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.S3.Object("data", "hello.txt"), []byte("hello from s3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v := newVol(t, e, "vol-share", "data")
	v.mustStage()
	// Staging twice is a retry, not a second mount.
	if err := v.stage(); err != nil {
		t.Fatalf("second stage: %v", err)
	}
	if n := workers(t, v.e, v.id); n != 1 {
		t.Fatalf("%d workers, want 1", n)
	}
	a := v.mustPublish("pod-a", false)
	b := v.mustPublish("pod-b", false)
	if _, err := v.publish("pod-b", false); err != nil {
		t.Fatalf("second publish of the same target: %v", err)
	}

	got, err := os.ReadFile(filepath.Join(b, "hello.txt"))
	if err != nil || string(got) != "hello from s3\n" {
		t.Fatalf("read through b: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(a, "new.txt"), []byte("written by a"), 0o644); err != nil {
		t.Fatalf("write through a: %v", err)
	}
	got, err = os.ReadFile(filepath.Join(b, "new.txt"))
	if err != nil || string(got) != "written by a" {
		t.Fatalf("read through b of a's write: %q, %v", got, err)
	}

	// Unpublishing a must not disturb b.
	if err := v.unpublish(a); err != nil {
		t.Fatal(err)
	}
	if err := v.unpublish(a); err != nil {
		t.Fatalf("second unpublish: %v", err)
	}
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target a still there: %v", err)
	}
	if _, err := os.ReadFile(filepath.Join(b, "hello.txt")); err != nil {
		t.Fatalf("b broken by unpublishing a: %v", err)
	}
	if err := v.unpublish(b); err != nil {
		t.Fatal(err)
	}

	// Unstage waits for the upload: the object is in the bucket after it.
	if err := v.unstage(); err != nil {
		t.Fatalf("unstage: %v", err)
	}
	got, err = os.ReadFile(e.S3.Object("data", "new.txt"))
	if err != nil || string(got) != "written by a" {
		t.Fatalf("object in bucket: %q, %v", got, err)
	}
	if procfs.Mounted(t, v.staging) {
		t.Fatal("staging path still mounted")
	}
	if n := workers(t, v.e, v.id); n != 0 {
		t.Fatalf("%d workers left", n)
	}
	if left, _ := os.ReadDir(filepath.Join(e.Dir, "cache")); len(left) != 0 {
		t.Fatalf("cache dirs left: %v", left)
	}
	if err := v.unstage(); err != nil {
		t.Fatalf("second unstage: %v", err)
	}
}

func TestReadOnly(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("ro"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.S3.Object("ro", "f.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("reader-only access mode", func(t *testing.T) {
		v := newVol(t, e, "vol-rox", "ro")
		v.cap = harness.MountCapability(rox)
		v.mustStage()
		target := v.mustPublish("pod-ro", false)
		if _, err := os.ReadFile(filepath.Join(target, "f.txt")); err != nil {
			t.Fatalf("read: %v", err)
		}
		for _, dir := range []string{target, v.staging} {
			err := os.WriteFile(filepath.Join(dir, "w.txt"), []byte("no"), 0o644)
			if !errors.Is(err, syscall.EROFS) {
				t.Fatalf("write to %s: %v, want EROFS", dir, err)
			}
		}
	})

	t.Run("read-only publish of a writable volume", func(t *testing.T) {
		v := newVol(t, e, "vol-rw", "ro")
		v.mustStage()
		ro := v.mustPublish("pod-ro", true)
		rw := v.mustPublish("pod-rw", false)
		if err := os.WriteFile(filepath.Join(ro, "w.txt"), []byte("no"), 0o644); !errors.Is(err, syscall.EROFS) {
			t.Fatalf("write through read-only target: %v, want EROFS", err)
		}
		if err := os.WriteFile(filepath.Join(rw, "w.txt"), []byte("yes"), 0o644); err != nil {
			t.Fatalf("write through writable target: %v", err)
		}
		// Publishing the read-only target again as writable conflicts.
		_, err := v.publish("pod-ro", false)
		wantCode(t, err, codes.AlreadyExists)
	})
}

func TestOwnership(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("own"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.S3.Object("own", "f.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		vfsOpt     string
		mountGroup string
		uid, gid   uint32
	}{
		{name: "default", uid: 1000, gid: 1000},
		{name: "vfsOpt", vfsOpt: `{"uid": 2000, "gid": "3000"}`, uid: 2000, gid: 3000},
		{name: "volume mount group", mountGroup: "4000", uid: 1000, gid: 4000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, e, "vol-own-"+strings.ReplaceAll(tc.name, " ", "-"), "own")
			if tc.vfsOpt != "" {
				v.secret["vfsOpt"] = tc.vfsOpt
			}
			v.cap.GetMount().VolumeMountGroup = tc.mountGroup
			v.mustStage()
			target := v.mustPublish("pod", false)
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(target, "f.txt"), &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != tc.uid || st.Gid != tc.gid {
				t.Fatalf("owner %d:%d, want %d:%d", st.Uid, st.Gid, tc.uid, tc.gid)
			}
			if st.Mode&0o020 == 0 {
				t.Fatalf("mode %o: group cannot write", st.Mode)
			}
		})
	}
}

func TestCryptOverS3(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("enc"); err != nil {
		t.Fatal(err)
	}
	v := newVol(t, e, "vol-crypt", "")
	v.secret["configData"] = e.S3.RcloneConfig("s3") + fmt.Sprintf(
		"\n[secret]\ntype = crypt\nremote = s3:enc/vault\npassword = %s\n", obscure.MustObscure("crypt-password-for-test"))
	v.secret["remote"] = "secret"
	v.mustStage()
	target := v.mustPublish("pod", false)
	if err := os.WriteFile(filepath.Join(target, "plain.txt"), []byte("attack at dawn"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := v.unpublish(target); err != nil {
		t.Fatal(err)
	}
	if err := v.unstage(); err != nil {
		t.Fatal(err)
	}
	objects, err := os.ReadDir(filepath.Join(e.S3.Dir, "enc", "vault"))
	if err != nil || len(objects) != 1 {
		t.Fatalf("bucket holds %v, %v; want one object", objects, err)
	}
	raw, _ := os.ReadFile(filepath.Join(e.S3.Dir, "enc", "vault", objects[0].Name()))
	if objects[0].Name() == "plain.txt" || strings.Contains(string(raw), "attack at dawn") {
		t.Fatal("the object in the bucket is not encrypted")
	}

	// Mounted again, the file reads back in clear.
	v.mustStage()
	target = v.mustPublish("pod", false)
	got, err := os.ReadFile(filepath.Join(target, "plain.txt"))
	if err != nil || string(got) != "attack at dawn" {
		t.Fatalf("read back: %q, %v", got, err)
	}
}

func TestStageFailuresLeaveNothing(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("exists"); err != nil {
		t.Fatal(err)
	}
	good := e.Secret("exists")
	with := func(kv ...string) map[string]string { return secretWith(good, kv...) }
	for _, tc := range []struct {
		name   string
		secret map[string]string
		code   codes.Code
		msg    string
	}{
		{"malformed config", with("configData", "[store\ntype = s3"), codes.InvalidArgument, "configData"},
		{"section injection through an option", with("vfsOpt", `{"uid": "1\n[evil]\ntype = local"}`), codes.InvalidArgument, "line break"},
		{"local backend", with("configData", "[store]\ntype = local\n"), codes.InvalidArgument, "not allowed"},
		{"command option", with("configData", good["configData"]+"md5sum_command = touch /tmp/pwned\n"), codes.InvalidArgument, "md5sum_command"},
		{"connection string in remote", with("remote", "store,env_auth=true"), codes.InvalidArgument, "remote name"},
		{"path leaves its base", with("remotePath", "exists/../../etc"), codes.InvalidArgument, "leaves its base"},
		{"wrong secret key", with("configData", strings.Replace(good["configData"], harness.SecretAccessKey, "wrong-secret", 1)), codes.PermissionDenied, "403"},
		{"missing bucket", with("remotePath", "no-such-bucket"), codes.NotFound, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, e, "vol-bad-"+strings.ReplaceAll(tc.name, " ", "-"), "")
			v.secret = tc.secret
			err := v.stage()
			wantCode(t, err, tc.code)
			if !strings.Contains(strings.ToLower(status.Convert(err).Message()), strings.ToLower(tc.msg)) {
				t.Errorf("message %q does not say %q", status.Convert(err).Message(), tc.msg)
			}
			if strings.Contains(err.Error(), harness.SecretAccessKey) {
				t.Errorf("error quotes the secret key: %v", err)
			}
			if procfs.Mounted(t, v.staging) {
				t.Error("staging path mounted after a failed stage")
			}
			if n := workers(t, v.e, v.id); n != 0 {
				t.Errorf("%d workers left", n)
			}
			if left, _ := os.ReadDir(filepath.Join(e.Dir, "cache")); len(left) != 0 {
				t.Errorf("cache dirs left: %v", left)
			}
		})
	}
}

func TestPublishNeedsStage(t *testing.T) {
	e := startEnv(t)
	v := newVol(t, e, "vol-unstaged", "x")
	_, err := v.publish("pod", false)
	wantCode(t, err, codes.FailedPrecondition)
}

func TestVolumeStatsAndHealth(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("stats"); err != nil {
		t.Fatal(err)
	}
	v := newVol(t, e, "vol-stats", "stats")
	v.mustStage()
	target := v.mustPublish("pod", false)
	ctx := context.Background()
	stats, err := e.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: v.id, VolumePath: target})
	if err != nil || len(stats.GetUsage()) != 2 {
		t.Fatalf("stats: %v, %v", stats, err)
	}
	// Aborted while the driver mounts the volume again: it holds the lock.
	health := func() (*csi.VolumeHealth, error) {
		r, err := e.Node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: v.id, VolumePublishPath: target})
		if err != nil && status.Code(err) != codes.Aborted {
			t.Fatal(err)
		}
		return r.GetVolumeHealth(), err
	}
	if h, err := health(); err != nil || len(h.GetHealthStatuses()) != 0 {
		t.Fatalf("healthy mount reported %v, %v", h, err)
	}
	if err := os.WriteFile(filepath.Join(target, "before.txt"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The storage goes away and the worker dies: the volume cannot be
	// mounted again, and says so.
	if err := e.S3.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	killWorkers(t, v.e, v.id)
	eventuallyWithin(t, 20*time.Second, "health while the storage is down", func() error {
		h, err := health()
		if err != nil {
			return err
		}
		if len(h.GetHealthStatuses()) != 1 || h.GetHealthStatuses()[0].GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE ||
			!strings.Contains(h.GetHealthStatuses()[0].GetMessage(), "mounting again failed") {
			return fmt.Errorf("health %v", h)
		}
		return nil
	})
	eventually(t, "stats while the storage is down", func() error {
		_, err := e.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: v.id, VolumePath: target})
		if status.Code(err) != codes.Unavailable {
			return fmt.Errorf("got %v, want Unavailable", err)
		}
		return nil
	})

	// The storage comes back: the driver retries with backoff, the target
	// is repaired, the file written before is there, uploaded.
	if err := e.S3.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, 30*time.Second, "recovery after the storage came back", func() error {
		got, err := os.ReadFile(filepath.Join(target, "before.txt"))
		if err != nil || string(got) != "before" {
			return fmt.Errorf("%q, %v", got, err)
		}
		if h, err := health(); err != nil || len(h.GetHealthStatuses()) != 0 {
			return fmt.Errorf("health %v, %v", h, err)
		}
		return nil
	})
	eventuallyWithin(t, 20*time.Second, "upload of the file written before the crash", func() error {
		_, err := os.Stat(e.S3.Object("stats", "before.txt"))
		return err
	})

	if err := v.unpublish(target); err != nil {
		t.Fatal(err)
	}
	if err := v.unstage(); err != nil {
		t.Fatal(err)
	}
	_, err = e.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: v.id, VolumePath: target})
	wantCode(t, err, codes.NotFound)
}

// A worker killed with -9 is started again, and its targets repaired, by
// the driver itself.
func TestWorkerDeathIsRepaired(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("sup"); err != nil {
		t.Fatal(err)
	}
	v := newVol(t, e, "vol-sup", "sup")
	v.mustStage()
	a := v.mustPublish("pod-a", false)
	b := v.mustPublish("pod-b", true)
	if err := os.WriteFile(filepath.Join(a, "one.txt"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		killWorkers(t, v.e, v.id)
		start := time.Now()
		eventuallyWithin(t, 10*time.Second, "targets readable again", func() error {
			for _, target := range []string{a, b} {
				if got, err := os.ReadFile(filepath.Join(target, "one.txt")); err != nil || string(got) != "1" {
					return fmt.Errorf("%s: %q %v", target, got, err)
				}
			}
			return nil
		})
		t.Logf("round %d: targets readable %s after the kill", round, time.Since(start).Round(time.Millisecond))
	}
	if n := workers(t, v.e, v.id); n != 1 {
		t.Fatalf("%d workers, want 1", n)
	}
	if err := os.WriteFile(filepath.Join(b, "ro.txt"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("repaired read-only target is writable: %v", err)
	}
	if err := os.WriteFile(filepath.Join(a, "two.txt"), []byte("2"), 0o644); err != nil {
		t.Fatalf("write after repair: %v", err)
	}
}

func killWorkers(t *testing.T, e *harness.Env, volumeID string) {
	t.Helper()
	for _, pid := range e.WorkerPIDs(volumeID) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func TestUnstageKeepsDataItCannotUpload(t *testing.T) {
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	e, err := harness.Start(context.Background(), t.TempDir(), func(o *driver.Options) { o.DrainTimeout = 2 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if err := e.S3.MakeBucket("drain"); err != nil {
		t.Fatal(err)
	}
	v := newVol(t, e, "vol-drain", "drain")
	v.mustStage()
	target := v.mustPublish("pod", false)
	if err := os.WriteFile(filepath.Join(target, "report.txt"), []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := v.unpublish(target); err != nil {
		t.Fatal(err)
	}
	// The storage goes away before the file is uploaded.
	if err := e.S3.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	err = v.unstage()
	wantCode(t, err, codes.Unavailable)
	if !strings.Contains(err.Error(), "not yet uploaded") {
		t.Fatalf("message does not say why: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(v.staging, "report.txt")); err != nil || string(got) != "precious" {
		t.Fatalf("after the failed unstage the mount must still serve the file: %q, %v", got, err)
	}

	// Once the storage is back, unstage uploads and succeeds.
	if err := e.S3.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "unstage after the storage recovered", v.unstage)
	if got, err := os.ReadFile(e.S3.Object("drain", "report.txt")); err != nil || string(got) != "precious" {
		t.Fatalf("object: %q, %v", got, err)
	}
}
