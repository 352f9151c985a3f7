package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csi-rclone/csi-rclone/pkg/driver"
	"github.com/csi-rclone/csi-rclone/pkg/state"
	"github.com/csi-rclone/csi-rclone/test/harness"
)

// startRestartableEnv is startEnv that also gives the driver's options, to
// start another driver on the same state.
func startRestartableEnv(t *testing.T) (*harness.Env, driver.Options) {
	t.Helper()
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	var opts driver.Options
	e, err := harness.Start(context.Background(), t.TempDir(), func(o *driver.Options) { opts = *o })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, opts
}

var sockets atomic.Int32

// runDriver starts a driver on opts' state and a socket of its own, and
// returns as soon as the socket accepts a connection: recovery may still be
// under way. The env's Node client is switched to it.
func runDriver(t *testing.T, e *harness.Env, opts driver.Options) *driver.Driver {
	t.Helper()
	sock := filepath.Join(e.Dir, fmt.Sprintf("csi-%d.sock", sockets.Add(1)))
	opts.Endpoint = "unix://" + sock
	d, err := driver.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	conn, err := grpc.NewClient(opts.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		cancel()
		<-done
		d.Shutdown()
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new driver's socket never accepted")
		}
		time.Sleep(time.Millisecond)
	}
	e.Node = csi.NewNodeClient(conn)
	e.Identity = csi.NewIdentityClient(conn)
	return d
}

func waitReady(t *testing.T, e *harness.Env) {
	t.Helper()
	eventuallyWithin(t, 60*time.Second, "driver ready", func() error {
		r, err := e.Identity.Probe(context.Background(), &csi.ProbeRequest{})
		if err != nil || !r.GetReady().GetValue() {
			return fmt.Errorf("probe %v, %v", r, err)
		}
		return nil
	})
}

// A NodeStageVolume for a recorded volume, sent as soon as a restarted
// driver's socket accepts, waits for the recovery and mounts once.
func TestStageDuringRecoveryMountsOnce(t *testing.T) {
	e, opts := startRestartableEnv(t)
	if err := e.S3.MakeBucket("window"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.S3.Object("window", "seed.txt"), []byte("seed"), 0o644); err != nil {
		t.Fatal(err)
	}
	v := newVol(t, e, "vol-window", "window")
	if err := v.stage(); err != nil {
		t.Fatal(err)
	}
	target := v.mustPublish("pod", false)
	e.Driver.Shutdown() // workers killed, records kept: what a crashed driver leaves

	runDriver(t, e, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := e.Node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: v.cap, Secrets: v.secret,
	}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("stage during recovery: %v", err)
	}
	waitReady(t, e)
	if n := workers(t, v.e, v.id); n != 1 {
		t.Fatalf("%d workers, want 1", n)
	}
	for _, p := range []string{v.staging, target} {
		if got, err := os.ReadFile(filepath.Join(p, "seed.txt")); err != nil || string(got) != "seed" {
			t.Fatalf("%s after recovery: %q, %v", p, got, err)
		}
	}
	if err := v.unpublish(target); err != nil {
		t.Fatal(err)
	}
	if err := v.unstage(); err != nil {
		t.Fatal(err)
	}
	if n := workers(t, v.e, v.id); n != 0 {
		t.Fatalf("%d workers after unstage, want 0", n)
	}
}

// Shutdown while a restarted driver is mounting volumes again leaves no
// worker process behind: not the one being started, nor a later one.
func TestShutdownDuringRecoveryLeavesNoWorker(t *testing.T) {
	e, opts := startRestartableEnv(t)
	if err := e.S3.MakeBucket("shut"); err != nil {
		t.Fatal(err)
	}
	var vols []*vol
	for i := range 3 {
		v := newVol(t, e, fmt.Sprintf("vol-shut-%d", i), "shut")
		if err := v.stage(); err != nil {
			t.Fatal(err)
		}
		vols = append(vols, v)
	}
	e.Driver.Shutdown()
	for _, v := range vols {
		if n := workers(t, v.e, v.id); n != 0 {
			t.Fatalf("%s: %d workers after Shutdown, want 0", v.id, n)
		}
	}

	opts.RecoveryConcurrency = 1 // one after the other: Shutdown comes mid-way
	d := runDriver(t, e, opts)
	// Look often: the first worker is being started within milliseconds.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		n := 0
		for _, v := range vols {
			n += workers(t, v.e, v.id)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the recovery started no worker")
		}
	}
	d.Shutdown()
	for _, v := range vols {
		if n := workers(t, v.e, v.id); n != 0 {
			t.Errorf("%s: %d workers after a Shutdown during recovery, want 0", v.id, n)
		}
	}
}

// Shutdown while the driver mounts a volume again after its worker died
// leaves no worker either.
func TestShutdownDuringRestartLeavesNoWorker(t *testing.T) {
	e, _ := startRestartableEnv(t)
	if err := e.S3.MakeBucket("restart"); err != nil {
		t.Fatal(err)
	}
	v := newVol(t, e, "vol-restart", "restart")
	if err := v.stage(); err != nil {
		t.Fatal(err)
	}
	first := workers(t, v.e, v.id)
	killWorkers(t, v.e, v.id)
	eventually(t, "the worker started again", func() error {
		if workers(t, v.e, v.id) == 0 {
			return fmt.Errorf("no worker yet")
		}
		return nil
	})
	e.Driver.Shutdown()
	if n := workers(t, v.e, v.id); first != 1 || n != 0 {
		t.Fatalf("%d workers at first, %d after a Shutdown during the restart; want 1 and 0", first, n)
	}
}

// A recovered record of any shape a driver may find on disk works: load,
// NodePublishVolume, NodeUnpublishVolume, NodeUnstageVolume, and no panic.
func TestRecoveredRecordShapes(t *testing.T) {
	e, opts := startRestartableEnv(t)
	if err := e.S3.MakeBucket("shapes"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.S3.Object("shapes", "seed.txt"), []byte("seed"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Staged and never published: its record has no targets at all.
	staged := newVol(t, e, "vol-shape-unpublished", "shapes")
	if err := staged.stage(); err != nil {
		t.Fatal(err)
	}
	e.Driver.Shutdown()

	secret, err := json.Marshal(e.Secret("shapes"))
	if err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(e.Dir, "pods", "gone", "mount")
	type shape struct {
		name, record string // record: %[1]s the volume id, %[2]s its staging path, %[3]s the secret
		mounts       bool   // the record holds what it takes to mount
	}
	shapes := []shape{
		{"null maps", `{"version":1,"phase":"staged","volumeID":%[1]q,"stagingPath":%[2]q,"accessMode":1,"secret":%[3]s,"context":null,"targets":null}`, true},
		{"empty maps", `{"version":1,"phase":"staged","volumeID":%[1]q,"stagingPath":%[2]q,"accessMode":1,"secret":%[3]s,"context":{},"targets":{}}`, true},
		{"version 0", `{"volumeID":%[1]q,"stagingPath":%[2]q,"secret":%[3]s,"fieldOfThePast":true}`, true},
		{"gone target", `{"version":1,"phase":"staged","volumeID":%[1]q,"stagingPath":%[2]q,"accessMode":1,"secret":%[3]s,"targets":{` + fmt.Sprintf("%q", gone) + `:false}}`, true},
		{"no secret or context", `{"version":1,"phase":"staged","volumeID":%[1]q,"stagingPath":%[2]q,"accessMode":1}`, false},
	}
	vols := map[string]*vol{"unpublished": staged}
	dir := filepath.Join(opts.StateDir, "volumes")
	for i, sh := range shapes {
		v := newVol(t, e, fmt.Sprintf("vol-shape-%d", i), "shapes")
		body := fmt.Sprintf(sh.record, v.id, v.staging, secret)
		if err := os.WriteFile(filepath.Join(dir, state.FileName(v.id)), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		vols[sh.name] = v
	}
	shapes = append([]shape{{name: "unpublished", mounts: true}}, shapes...)

	runDriver(t, e, opts)
	waitReady(t, e)
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			v := vols[sh.name]
			v.t = t
			target, err := v.publish("pod-"+strings.ReplaceAll(sh.name, " ", "-"), false)
			switch {
			case !sh.mounts:
				// Not mounted, and says why, rather than bind an empty directory.
				wantCode(t, err, codes.Unavailable)
			case err != nil:
				t.Fatalf("publish: %v", err)
			default:
				if got, err := os.ReadFile(filepath.Join(target, "seed.txt")); err != nil || string(got) != "seed" {
					t.Errorf("read through the target: %q, %v", got, err)
				}
			}
			if err := v.unpublish(target); err != nil {
				t.Fatalf("unpublish: %v", err)
			}
			if err := v.unstage(); err != nil {
				t.Fatalf("unstage: %v", err)
			}
			if n := workers(t, v.e, v.id); n != 0 {
				t.Fatalf("%d workers after unstage, want 0", n)
			}
			if _, err := os.Stat(filepath.Join(dir, state.FileName(v.id))); !os.IsNotExist(err) {
				t.Fatalf("record left after unstage: %v", err)
			}
		})
	}
}
