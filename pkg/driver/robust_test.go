package driver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-rclone/csi-rclone/pkg/state"
	"github.com/csi-rclone/csi-rclone/test/hungfs"
)

// A panic in one handler fails that call with Internal, through logRPC as
// the server chains them, and quotes nothing of the panic to the caller.
func TestRecoverPanic(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Node/NodePublishVolume"}
	panicking := func(context.Context, any) (any, error) {
		var m map[string]bool
		m["secret-value"] = true // assignment to entry in nil map
		return nil, nil
	}
	resp, err := logRPC(context.Background(), &csi.NodePublishVolumeRequest{}, info, func(ctx context.Context, req any) (any, error) {
		return recoverPanic(ctx, req, info, panicking)
	})
	if resp != nil || status.Code(err) != codes.Internal {
		t.Fatalf("got %v, %v; want Internal", resp, err)
	}
	if strings.Contains(err.Error(), "nil map") || strings.Contains(err.Error(), "secret-value") {
		t.Errorf("the caller got the panic: %v", err)
	}
	ok := func(context.Context, any) (any, error) { return "fine", nil }
	if resp, err := recoverPanic(context.Background(), nil, info, ok); resp != "fine" || err != nil {
		t.Fatalf("a call that does not panic: %v, %v", resp, err)
	}
}

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if !sleep(ctx, 0) || !sleep(ctx, time.Millisecond) {
		t.Fatal("sleep with a live context reported it ended")
	}
	cancel()
	if sleep(ctx, time.Hour) || sleep(ctx, 0) {
		t.Fatal("sleep with an ended context reported it live")
	}
}

// Shutdown cancels every task, waits for it, and refuses new ones.
func TestTasks(t *testing.T) {
	ts := newTasks()
	ended := make(chan struct{})
	if !ts.Go("wait", func(ctx context.Context) {
		<-ctx.Done()
		close(ended)
	}) {
		t.Fatal("a task was refused before Cancel")
	}
	if !ts.Go("panic", func(context.Context) { panic("boom") }) {
		t.Fatal("a task was refused before Cancel")
	}
	ts.Cancel()
	ts.Wait()
	select {
	case <-ended:
	default:
		t.Fatal("Wait returned before the task ended")
	}
	if ts.Go("late", func(context.Context) { t.Error("a task ran after Cancel") }) {
		t.Fatal("a task was accepted after Cancel")
	}
	ts.Wait()
}

// NodeGetVolumeStats and NodeGetVolumeHealth of a hung mount answer
// Unavailable "not answering" within ProbeTimeout, probe it once however
// often they are called, and answer Aborted while the volume is busy.
func TestStatsAndHealthOfHungMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for mounts")
	}
	dir := t.TempDir()
	d, err := New(Options{Mode: ModeNode, NodeID: "n", Endpoint: "unix://" + filepath.Join(dir, "csi.sock"),
		StateDir: filepath.Join(dir, "state"), CacheDir: filepath.Join(dir, "cache"), ProbeTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Shutdown)
	staging := filepath.Join(dir, "staging")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := hungfs.Mount(staging)
	if err != nil {
		t.Skipf("cannot mount a FUSE filesystem here: %v", err)
	}
	t.Cleanup(h.Close)
	s := d.node
	v := s.newStagedVolume(&state.Volume{Phase: state.Staged, VolumeID: "v", StagingPath: staging, Targets: map[string]bool{}})
	s.volumes[v.id] = v

	ctx := context.Background()
	stats := func() error {
		_, err := s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: staging})
		return err
	}
	health := func() (*csi.NodeGetVolumeHealthResponse, error) {
		return s.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "v"})
	}
	for i := 0; i < 3; i++ {
		err := stats()
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not answering") {
			t.Fatalf("stats %d of a hung mount: %v; want Unavailable, not answering", i, err)
		}
		_, err = health()
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not answering") {
			t.Fatalf("health %d of a hung mount: %v; want Unavailable, not answering", i, err)
		}
	}
	if n := h.StatfsCalls(); n != 1 {
		t.Fatalf("the hung mount got %d statfs calls, want 1", n)
	}

	if !s.locks.tryAcquire("v") {
		t.Fatal("the volume lock was left held")
	}
	if err := stats(); status.Code(err) != codes.Aborted {
		t.Errorf("stats of a busy volume: %v, want Aborted", err)
	}
	if _, err := health(); status.Code(err) != codes.Aborted {
		t.Errorf("health of a busy volume: %v, want Aborted", err)
	}
	s.locks.release("v")

	h.Release()
	if err := stats(); err != nil {
		t.Fatalf("stats once the mount answers: %v", err)
	}
	if r, err := health(); err != nil || len(r.GetVolumeHealth().GetHealthStatuses()) != 0 {
		t.Fatalf("health once the mount answers: %v, %v", r, err)
	}
}
