package driver_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csi-rclone/csi-rclone/pkg/driver"
	"github.com/csi-rclone/csi-rclone/pkg/uidpool"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/test/harness"
	"github.com/csi-rclone/csi-rclone/test/procfs"
)

const firstUID = 2_100_000_000

// twoUIDs: a range of two, to run out of.
var twoUIDs = uidpool.Range{First: firstUID, Last: firstUID + 1}

func workerUID(t *testing.T, e *harness.Env, volumeID string) int {
	t.Helper()
	uid, _ := strconv.Atoi(strings.Fields(procfs.Status(t, workerPID(t, e, volumeID))["Uid"])[0])
	return uid
}

// recordPath is where the driver keeps a volume's record (pkg/state).
func recordPath(stateDir, volumeID string) string {
	sum := sha256.Sum256([]byte(volumeID))
	return filepath.Join(stateDir, "volumes", hex.EncodeToString(sum[:16])+".json")
}

// Each volume gets the lowest free uid; a full range answers
// ResourceExhausted and leaves nothing; an unstage frees its uid.
func TestWorkerUIDAllocation(t *testing.T) {
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	e, err := harness.Start(context.Background(), t.TempDir(), func(o *driver.Options) { o.WorkerUIDs = twoUIDs })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	for _, b := range []string{"one", "two", "three"} {
		if err := e.S3.MakeBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	one, two, three := newVol(t, e, "vol-one", "one"), newVol(t, e, "vol-two", "two"), newVol(t, e, "vol-three", "three")
	one.mustStage()
	two.mustStage()
	if a, b := workerUID(t, e, one.id), workerUID(t, e, two.id); a != firstUID || b != firstUID+1 {
		t.Fatalf("worker uids %d, %d; want %d, %d", a, b, firstUID, firstUID+1)
	}

	err = three.stage()
	wantCode(t, err, codes.ResourceExhausted)
	if n := workers(t, three.e, three.id); n != 0 {
		t.Errorf("%d workers left by the refused stage", n)
	}
	if _, err := os.Stat(recordPath(filepath.Join(e.Dir, "state"), three.id)); !os.IsNotExist(err) {
		t.Errorf("record left by the refused stage: %v", err)
	}

	// A retry of a staged volume keeps its uid and needs no new one.
	if err := two.stage(); err != nil {
		t.Fatalf("stage retry with a full range: %v", err)
	}
	if err := one.unstage(); err != nil {
		t.Fatal(err)
	}
	three.mustStage()
	if got := workerUID(t, e, three.id); got != firstUID {
		t.Fatalf("after the unstage of vol-one, vol-three runs as %d, want the freed %d", got, firstUID)
	}
}

// A restarted driver mounts each volume again as the uid its record names;
// a record written before workers had a uid each gets the lowest free one,
// and keeps it from then on.
func TestRecoveryKeepsWorkerUID(t *testing.T) {
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	e, err := harness.Start(context.Background(), t.TempDir(), func(o *driver.Options) { o.WorkerUIDs = twoUIDs })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	for _, b := range []string{"kept", "old"} {
		if err := e.S3.MakeBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	old, kept := newVol(t, e, "vol-old", "old"), newVol(t, e, "vol-kept", "kept")
	for _, v := range []*vol{old, kept} {
		if err := os.MkdirAll(v.staging, 0o750); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
			VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: v.cap, Secrets: v.secret,
		}); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := workerUID(t, e, old.id), workerUID(t, e, kept.id); a != firstUID || b != firstUID+1 {
		t.Fatalf("worker uids %d, %d; want %d, %d", a, b, firstUID, firstUID+1)
	}
	if err := os.WriteFile(filepath.Join(kept.staging, "f.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The driver dies with its workers. vol-old's record loses its uid, as
	// records written before this driver had none, and vol-kept's now names
	// the lower uid: it must get it back, vol-old the other.
	e.Driver.Shutdown()
	stateDir := filepath.Join(e.Dir, "state")
	editRecord(t, recordPath(stateDir, old.id), func(r map[string]any) { delete(r, "workerUID") })
	editRecord(t, recordPath(stateDir, kept.id), func(r map[string]any) { r["workerUID"] = firstUID })

	socket := filepath.Join(e.Dir, "csi-2.sock")
	d, err := driver.New(driver.Options{
		NodeID: "test-node", Endpoint: "unix://" + socket, Mode: driver.ModeNode,
		StateDir: stateDir, CacheDir: filepath.Join(e.Dir, "cache"), MountTimeout: 30 * time.Second,
		DefaultUID: 1000, DefaultGID: 1000,
		Worker: worker.Options{Binary: filepath.Join(e.Dir, "csi-rclone-worker")}, WorkerUIDs: twoUIDs,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; d.Shutdown() })
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	eventuallyWithin(t, 30*time.Second, "the restarted driver is ready", func() error {
		r, err := csi.NewIdentityClient(conn).Probe(context.Background(), &csi.ProbeRequest{})
		if err == nil && !r.GetReady().GetValue() {
			err = os.ErrDeadlineExceeded
		}
		return err
	})

	if a, b := workerUID(t, e, kept.id), workerUID(t, e, old.id); a != firstUID || b != firstUID+1 {
		t.Fatalf("after recovery: vol-kept runs as %d, vol-old as %d; want %d, %d", a, b, firstUID, firstUID+1)
	}
	if got := readRecord(t, recordPath(stateDir, old.id))["workerUID"]; got != float64(firstUID+1) {
		t.Errorf("vol-old's record names uid %v, want %d", got, firstUID+1)
	}
	if got, err := os.ReadFile(filepath.Join(kept.staging, "f.txt")); err != nil || string(got) != "kept" {
		t.Errorf("vol-kept after recovery: %q, %v", got, err)
	}
	// The cache dirs changed hands with the uids: each is its worker's.
	for _, v := range []*vol{kept, old} {
		sum := sha256.Sum256([]byte(v.id))
		fi, err := os.Stat(filepath.Join(e.Dir, "cache", hex.EncodeToString(sum[:16])))
		if err != nil {
			t.Fatal(err)
		}
		if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid != workerUID(t, e, v.id) {
			t.Errorf("%s's cache dir belongs to %d", v.id, uid)
		}
	}
}

func readRecord(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := map[string]any{}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func editRecord(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	r := readRecord(t, path)
	edit(r)
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}
