package driver

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-rclone/csi-rclone/pkg/uidpool"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
)

// fakeMounter hands the restarted driver the workers that "outlived" it.
type fakeMounter struct {
	f     *fakeNode
	alive map[string]*fakeWorker
	asked []string
}

func (m *fakeMounter) Start(ctx context.Context, opts worker.Options, spec worker.Spec) (MountWorker, error) {
	return m.f.start(ctx, opts, spec)
}

func (m *fakeMounter) Recover(_ context.Context, ids []string) map[string]MountWorker {
	m.asked = ids
	out := map[string]MountWorker{}
	for id, w := range m.alive {
		out[id] = w
	}
	return out
}

// restarted is f's node after a restart of the driver with mount pods: the
// same records and mounts, a new server.
func restarted(t *testing.T, f *fakeNode, m *fakeMounter) *nodeServer {
	t.Helper()
	f.d.tasks.Cancel()
	f.d.tasks.Wait()
	opts := f.d.opts
	opts.Mounter = m
	d := &Driver{opts: opts, tasks: newTasks()}
	uids, err := uidpool.New(uidpool.Range{First: 5000, Last: 5009})
	if err != nil {
		t.Fatal(err)
	}
	s := newNodeServer(d, f.store, uids)
	s.m = f.mounts
	s.chown = func(string, int, int) error { return nil }
	s.startWorker = m.Start
	d.node = s
	t.Cleanup(func() {
		d.tasks.Cancel()
		d.tasks.Wait()
		s.killAll()
	})
	return s
}

// After a restart, a volume whose mount pod lives and whose mount is alive
// is adopted (no new worker, no new mount); one without a pod, or whose
// mount is dead, is mounted again, and the live worker of a dead mount is
// ended first.
func TestAdoptOrRestore(t *testing.T) {
	ctx := context.Background()
	f := newFakeNode(t)
	for _, id := range []string{"adopted", "no-pod", "dead-mount"} {
		if err := f.stage(ctx, id, rwo); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.publish(ctx, "adopted", "pod1", false); err != nil {
		t.Fatal(err)
	}
	f.mounts.set(f.stagingPath("dead-mount"), &fakeMount{source: "rclone", dead: true})
	before := f.workers()

	live, deadMounts := &fakeWorker{pid: 1, done: make(chan struct{})}, &fakeWorker{pid: 2, done: make(chan struct{})}
	m := &fakeMounter{f: f, alive: map[string]*fakeWorker{"adopted": live, "dead-mount": deadMounts}}
	s := restarted(t, f, m)
	s.recoverAll(ctx, s.load())

	if len(m.asked) != 3 {
		t.Fatalf("Recover was asked for %v", m.asked)
	}
	if got := f.workers() - before; got != 2 {
		t.Fatalf("%d workers started, want 2 (no-pod, dead-mount)", got)
	}
	if v := s.get("adopted"); v == nil || v.proc != MountWorker(live) {
		t.Fatal("the live mount pod was not adopted")
	}
	select {
	case <-live.done:
		t.Fatal("the adopted worker was ended")
	default:
	}
	select {
	case <-deadMounts.done:
	default:
		t.Fatal("the worker of a dead mount was not ended")
	}
	for _, id := range []string{"no-pod", "dead-mount"} {
		if st, _ := f.mounts.Check(f.stagingPath(id)); st.String() != "mounted" {
			t.Fatalf("%s is %s after recovery", id, st)
		}
	}
	if st, _ := f.mounts.Check(f.targetPath("pod1", "adopted")); st.String() != "mounted" {
		t.Fatalf("the adopted volume's target is %s", st)
	}
}

func TestPodResources(t *testing.T) {
	got := podResources(map[string]string{"remote": "store", "mountPodMemoryLimit": "4Gi", "mountPodCPULimit": "2", "capacity": "1Gi"})
	if len(got) != 2 || got["mountPodMemoryLimit"] != "4Gi" || got["mountPodCPULimit"] != "2" {
		t.Fatalf("podResources: %v", got)
	}
}

// A tenant's stage secret cannot ask for its mount pod's resources.
func TestPodResourcesNotFromTheSecret(t *testing.T) {
	f := newFakeNode(t)
	secret := fakeSecret()
	secret["mountPodMemoryLimit"] = "64Gi"
	_, err := f.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: "v", StagingTargetPath: f.stagingPath("v"), VolumeCapability: capability(rwo), Secrets: secret,
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("stage with mountPodMemoryLimit in the secret: %v, want InvalidArgument", err)
	}
}
