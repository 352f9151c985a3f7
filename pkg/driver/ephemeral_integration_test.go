package driver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csi-rclone/csi-rclone/test/harness"
	"github.com/csi-rclone/csi-rclone/test/procfs"
)

// inline is a CSI ephemeral inline volume as the kubelet publishes it: no
// stage, no staging path, the pod's volumeAttributes with the pod's info
// (podInfoOnMount), the nodePublishSecretRef's data as the secrets.
type inline struct {
	t      *testing.T
	e      *harness.Env
	id     string
	uid    string
	target string
	attrs  map[string]string
	secret map[string]string
}

func newInline(t *testing.T, e *harness.Env, n int, bucket string) *inline {
	uid := fmt.Sprintf("0f1e2d3c-aaaa-bbbb-cccc-%012d", n)
	return &inline{
		t: t, e: e, id: fmt.Sprintf("csi-%064x", n), uid: uid,
		target: filepath.Join(e.Dir, "pods", uid, "volumes", "kubernetes.io~csi", "data", "mount"),
		attrs: map[string]string{
			"csi.storage.k8s.io/ephemeral":     "true",
			"csi.storage.k8s.io/pod.name":      "web-0",
			"csi.storage.k8s.io/pod.namespace": "team-a",
			"csi.storage.k8s.io/pod.uid":       uid,
		},
		secret: e.Secret(bucket),
	}
}

func (in *inline) publish(readOnly bool) error {
	if err := os.MkdirAll(filepath.Dir(in.target), 0o750); err != nil {
		in.t.Fatal(err)
	}
	_, err := in.e.Node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: in.id, TargetPath: in.target, VolumeCapability: harness.MountCapability(rwo),
		Readonly: readOnly, Secrets: in.secret, VolumeContext: in.attrs,
	})
	return err
}

func (in *inline) unpublish() error {
	_, err := in.e.Node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: in.id, TargetPath: in.target})
	return err
}

// nothingLeft checks that no mount, worker, record or cache of the inline
// volume is left on the node.
func (in *inline) nothingLeft() {
	in.t.Helper()
	if procfs.Mounted(in.t, in.target) {
		in.t.Error("target still mounted")
	}
	if n := workers(in.t, in.e, in.id); n != 0 {
		in.t.Errorf("%d workers left", n)
	}
	for _, dir := range []string{"cache", filepath.Join("state", "volumes"), filepath.Join("state", "ephemeral")} {
		if left, _ := os.ReadDir(filepath.Join(in.e.Dir, dir)); len(left) != 0 {
			in.t.Errorf("%s left: %v", dir, left)
		}
	}
}

// An inline volume mounts at NodePublishVolume with one worker of its own,
// survives its worker's death like a staged volume, and is drained (its
// writes uploaded) and gone at NodeUnpublishVolume.
func TestInlineVolumeLifecycle(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("inline"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.S3.Object("inline", "seed.txt"), []byte("seed"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := newInline(t, e, 1, "inline")
	// The pod's author may not claim another namespace for the secret
	// service: the pod's own is used.
	in.attrs["csi.storage.k8s.io/pvc/namespace"] = "other-team"
	if err := in.publish(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.unpublish() })
	// Repeated, as the kubelet may: the same mount.
	if err := in.publish(false); err != nil {
		t.Fatalf("second publish: %v", err)
	}
	if n := workers(t, e, in.id); n != 1 {
		t.Fatalf("%d workers, want 1", n)
	}
	if got, err := os.ReadFile(filepath.Join(in.target, "seed.txt")); err != nil || string(got) != "seed" {
		t.Fatalf("seed.txt: %q, %v", got, err)
	}
	recs, _ := os.ReadDir(filepath.Join(e.Dir, "state", "volumes"))
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	rec, err := os.ReadFile(filepath.Join(e.Dir, "state", "volumes", recs[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(rec), "other-team") || !strings.Contains(string(rec), `"csi.storage.k8s.io/pvc/namespace":"team-a"`) {
		t.Errorf("record's context does not bind the pod's namespace: %s", rec)
	}

	if err := os.WriteFile(filepath.Join(in.target, "one.txt"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	killWorkers(t, e, in.id)
	eventually(t, "the target after the worker died", func() error {
		got, err := os.ReadFile(filepath.Join(in.target, "one.txt"))
		if err != nil || string(got) != "1" {
			return fmt.Errorf("%q, %v", got, err)
		}
		return nil
	})
	if err := os.WriteFile(filepath.Join(in.target, "two.txt"), []byte("2"), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := in.unpublish(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"one.txt": "1", "two.txt": "2"} {
		if got, err := os.ReadFile(e.S3.Object("inline", name)); err != nil || string(got) != want {
			t.Errorf("%s on the storage after unpublish: %q, %v", name, got, err)
		}
	}
	in.nothingLeft()
	// Again, as the kubelet retries: nothing to do.
	if err := in.unpublish(); err != nil {
		t.Fatalf("second unpublish: %v", err)
	}
}

// A read-only inline volume mounts read-only; two inline volumes of two
// pods have a worker each.
func TestInlineVolumeReadOnlyAndApart(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("inline-ro"); err != nil {
		t.Fatal(err)
	}
	a, b := newInline(t, e, 2, "inline-ro"), newInline(t, e, 3, "inline-ro")
	if err := a.publish(true); err != nil {
		t.Fatal(err)
	}
	if err := b.publish(false); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.target, "x"), nil, 0o644); err == nil {
		t.Error("a read-only inline volume is writable")
	}
	if err := os.WriteFile(filepath.Join(b.target, "x"), nil, 0o644); err != nil {
		t.Errorf("writing to the other pod's volume: %v", err)
	}
	if na, nb := workers(t, e, a.id), workers(t, e, b.id); na != 1 || nb != 1 {
		t.Errorf("workers %d and %d, want one each", na, nb)
	}
	for _, in := range []*inline{a, b} {
		if err := in.unpublish(); err != nil {
			t.Fatal(err)
		}
	}
	a.nothingLeft()
}

// The tenant policy applies to an inline volume's publish secret as to a
// stage secret: refused, it starts nothing and leaves nothing.
func TestInlineVolumePolicy(t *testing.T) {
	e := startEnv(t)
	in := newInline(t, e, 4, "")
	in.secret = secretWith(in.secret, "configData", in.secret["configData"]+"global.http_proxy = http://evil:3128\n")
	err := in.publish(false)
	wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(err.Error(), "global.http_proxy") {
		t.Errorf("message %v does not say why", err)
	}
	in.nothingLeft()
	// No secret at all is refused too.
	in.secret = nil
	wantCode(t, in.publish(false), codes.InvalidArgument)
	in.nothingLeft()
}

// A restarted driver mounts an inline volume again from its record and
// repairs the pod's target, and its unpublish then unstages it.
func TestInlineVolumeRecovery(t *testing.T) {
	e, opts := startRestartableEnv(t)
	if err := e.S3.MakeBucket("inline-rec"); err != nil {
		t.Fatal(err)
	}
	in := newInline(t, e, 5, "inline-rec")
	if err := in.publish(false); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in.target, "kept.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.Driver.Shutdown() // workers killed, records kept

	runDriver(t, e, opts)
	waitReady(t, e)
	if got, err := os.ReadFile(filepath.Join(in.target, "kept.txt")); err != nil || string(got) != "kept" {
		t.Fatalf("the pod's target after the restart: %q, %v", got, err)
	}
	if err := in.unpublish(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(e.S3.Object("inline-rec", "kept.txt")); err != nil || string(got) != "kept" {
		t.Errorf("kept.txt on the storage: %q, %v", got, err)
	}
	in.nothingLeft()
}
