package driver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-rclone/csi-rclone/pkg/mounter"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
)

// The node RPCs' edge cases, over fakes (node_fake_test.go): they need
// neither root nor FUSE. The integration tests run the same RPCs for real.

const fakeConfig = "[store]\ntype = s3\nprovider = Other\naccess_key_id = AK\nsecret_access_key = SK\nendpoint = http://127.0.0.1:9000\n"

func fakeSecret() map[string]string {
	return map[string]string{"remote": "store", "remotePath": "bucket", "configData": fakeConfig}
}

func capability(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

const (
	rwo = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	rox = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
)

func (f *fakeNode) stagingPath(id string) string {
	return filepath.Join(f.dir, "plugins", id, "globalmount")
}
func (f *fakeNode) targetPath(pod, id string) string {
	return filepath.Join(f.dir, "pods", pod, "volumes", id, "mount")
}

func (f *fakeNode) stage(ctx context.Context, id string, mode csi.VolumeCapability_AccessMode_Mode) error {
	_, err := f.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: f.stagingPath(id), VolumeCapability: capability(mode), Secrets: fakeSecret(),
	})
	return err
}

func (f *fakeNode) publish(ctx context.Context, id, pod string, readOnly bool) error {
	_, err := f.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: f.stagingPath(id), TargetPath: f.targetPath(pod, id),
		VolumeCapability: capability(rwo), Readonly: readOnly,
	})
	return err
}

func (f *fakeNode) unpublish(ctx context.Context, id, pod string) error {
	_, err := f.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: f.targetPath(pod, id)})
	return err
}

func (f *fakeNode) unstage(ctx context.Context, id string) error {
	_, err := f.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: f.stagingPath(id)})
	return err
}

func TestNodeRPCEdgeCases(t *testing.T) {
	ctx := context.Background()
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		// run does the calls; its error must have code (OK: nil).
		run      func(t *testing.T, f *fakeNode) error
		code     codes.Code
		msg      string
		workers  int  // started in all
		mounts   int  // left in the fake mount table
		recorded bool // the volume "v" still has a record
	}{
		{
			name:    "stage twice is one worker",
			run:     func(t *testing.T, f *fakeNode) error { must(t, f.stage(ctx, "v", rwo)); return f.stage(ctx, "v", rwo) },
			workers: 1, mounts: 2, recorded: true,
		},
		{
			name: "restage with another capability",
			run:  func(t *testing.T, f *fakeNode) error { must(t, f.stage(ctx, "v", rwo)); return f.stage(ctx, "v", rox) },
			code: codes.AlreadyExists, msg: "another capability",
			workers: 1, mounts: 2, recorded: true,
		},
		{
			name: "restage at another staging path",
			run: func(t *testing.T, f *fakeNode) error {
				must(t, f.stage(ctx, "v", rwo))
				_, err := f.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
					VolumeId: "v", StagingTargetPath: f.stagingPath("other"), VolumeCapability: capability(rwo), Secrets: fakeSecret(),
				})
				return err
			},
			code: codes.FailedPrecondition, msg: "already staged",
			workers: 1, mounts: 2, recorded: true,
		},
		{
			name: "stage refused by the storage leaves nothing",
			run: func(t *testing.T, f *fakeNode) error {
				f.startErr = &worker.MountError{Kind: worker.ErrPermissionDenied, Message: "403 AccessDenied"}
				return f.stage(ctx, "v", rwo)
			},
			code: codes.PermissionDenied, msg: "403",
		},
		{
			name: "stage with a refused config starts nothing",
			run: func(t *testing.T, f *fakeNode) error {
				_, err := f.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
					VolumeId: "v", StagingTargetPath: f.stagingPath("v"), VolumeCapability: capability(rwo),
					Secrets: map[string]string{"remote": "store", "configData": fakeConfig + "global.metadata_mapper = sh\n"},
				})
				return err
			},
			code: codes.InvalidArgument, msg: "global.metadata_mapper",
		},
		{
			name: "stage without a capability",
			run: func(t *testing.T, f *fakeNode) error {
				_, err := f.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: f.stagingPath("v"), Secrets: fakeSecret()})
				return err
			},
			code: codes.InvalidArgument,
		},
		{
			name: "stage of a block volume",
			run: func(t *testing.T, f *fakeNode) error {
				_, err := f.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
					VolumeId: "v", StagingTargetPath: f.stagingPath("v"), Secrets: fakeSecret(),
					VolumeCapability: &csi.VolumeCapability{
						AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
						AccessMode: &csi.VolumeCapability_AccessMode{Mode: rwo},
					},
				})
				return err
			},
			code: codes.InvalidArgument,
		},
		{
			name: "publish twice, same setting",
			run: func(t *testing.T, f *fakeNode) error {
				must(t, f.stage(ctx, "v", rwo))
				must(t, f.publish(ctx, "v", "a", false))
				return f.publish(ctx, "v", "a", false)
			},
			workers: 1, mounts: 3, recorded: true,
		},
		{
			name: "publish read-only over a writable target",
			run: func(t *testing.T, f *fakeNode) error {
				must(t, f.stage(ctx, "v", rwo))
				must(t, f.publish(ctx, "v", "a", false))
				return f.publish(ctx, "v", "a", true)
			},
			code: codes.AlreadyExists, msg: "read-only",
			workers: 1, mounts: 3, recorded: true,
		},
		{
			name: "publish of a read-only volume is read-only",
			run: func(t *testing.T, f *fakeNode) error {
				must(t, f.stage(ctx, "v", rox))
				must(t, f.publish(ctx, "v", "a", false))
				if ro, _ := f.mounts.IsReadOnly(f.targetPath("a", "v")); !ro {
					t.Error("target of a ReadOnlyMany volume is writable")
				}
				return nil
			},
			workers: 1, mounts: 3, recorded: true,
		},
		{
			name: "publish of a volume not staged",
			run:  func(t *testing.T, f *fakeNode) error { return f.publish(ctx, "v", "a", false) },
			code: codes.FailedPrecondition, msg: "not staged",
		},
		{
			name: "publish from another staging path",
			run: func(t *testing.T, f *fakeNode) error {
				must(t, f.stage(ctx, "v", rwo))
				_, err := f.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
					VolumeId: "v", StagingTargetPath: f.stagingPath("other"), TargetPath: f.targetPath("a", "v"), VolumeCapability: capability(rwo),
				})
				return err
			},
			code: codes.FailedPrecondition, msg: "staged at",
			workers: 1, mounts: 2, recorded: true,
		},
		{
			name: "publish while the worker's mount is dead",
			run: func(t *testing.T, f *fakeNode) error {
				must(t, f.stage(ctx, "v", rwo))
				f.mounts.set(f.stagingPath("v"), &fakeMount{dead: true})
				return f.publish(ctx, "v", "a", false)
			},
			code: codes.Unavailable,
			// a dead worker is restarted in the background: any count
			workers: -1, mounts: -1, recorded: true,
		},
		{
			name: "unpublish of an unknown target",
			run: func(t *testing.T, f *fakeNode) error {
				must(t, f.stage(ctx, "v", rwo))
				return f.unpublish(ctx, "v", "nobody")
			},
			workers: 1, mounts: 2, recorded: true,
		},
		{
			name: "unpublish of an unknown volume",
			run:  func(t *testing.T, f *fakeNode) error { return f.unpublish(ctx, "v", "a") },
		},
		{
			name: "unpublish keeps the other target",
			run: func(t *testing.T, f *fakeNode) error {
				must(t, f.stage(ctx, "v", rwo))
				must(t, f.publish(ctx, "v", "a", false))
				must(t, f.publish(ctx, "v", "b", false))
				must(t, f.unpublish(ctx, "v", "a"))
				if st, _ := f.mounts.Check(f.targetPath("b", "v")); st.String() != "mounted" {
					t.Errorf("target b is %s after unpublishing a", st)
				}
				return nil
			},
			workers: 1, mounts: 3, recorded: true,
		},
		{
			name: "unstage of an unknown volume",
			run:  func(t *testing.T, f *fakeNode) error { return f.unstage(ctx, "v") },
		},
		{
			name: "unstage with uploads pending keeps the mount",
			run: func(t *testing.T, f *fakeNode) error {
				f.drainErr = worker.ErrUploadsPending
				must(t, f.stage(ctx, "v", rwo))
				return f.unstage(ctx, "v")
			},
			code: codes.Unavailable, msg: "uploads",
			workers: 1, mounts: 2, recorded: true,
		},
		{
			name: "unstage after publish and unpublish leaves nothing",
			run: func(t *testing.T, f *fakeNode) error {
				must(t, f.stage(ctx, "v", rwo))
				must(t, f.publish(ctx, "v", "a", false))
				must(t, f.unpublish(ctx, "v", "a"))
				return f.unstage(ctx, "v")
			},
			workers: 1,
		},
		{
			name: "a call for a volume being recovered waits, then gives up",
			run: func(t *testing.T, f *fakeNode) error {
				must(t, f.stage(ctx, "v", rwo))
				f.get("v").recovered = make(chan struct{}) // as reconcile leaves it until mounted
				short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				return f.publish(short, "v", "a", false)
			},
			code: codes.Unavailable, msg: "being recovered",
			workers: 1, mounts: 2, recorded: true,
		},
		{
			name: "every call on a busy volume is Aborted",
			run: func(t *testing.T, f *fakeNode) error {
				must(t, f.stage(ctx, "v", rwo))
				if !f.locks.tryAcquire("v") {
					t.Fatal("lock held after stage")
				}
				defer f.locks.release("v")
				for name, call := range map[string]func() error{
					"stage":     func() error { return f.stage(ctx, "v", rwo) },
					"publish":   func() error { return f.publish(ctx, "v", "a", false) },
					"unpublish": func() error { return f.unpublish(ctx, "v", "a") },
					"unstage":   func() error { return f.unstage(ctx, "v") },
					"stats": func() error {
						_, err := f.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: f.stagingPath("v")})
						return err
					},
				} {
					if err := call(); status.Code(err) != codes.Aborted {
						t.Errorf("%s of a busy volume: %v, want Aborted", name, err)
					}
				}
				return nil
			},
			workers: 1, mounts: 2, recorded: true,
		},
		{
			name: "stats of a path that is not the volume's",
			run: func(t *testing.T, f *fakeNode) error {
				must(t, f.stage(ctx, "v", rwo))
				_, err := f.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: "/elsewhere"})
				return err
			},
			code: codes.NotFound, msg: "not mounted at",
			workers: 1, mounts: 2, recorded: true,
		},
		{
			name: "health of a dead mount",
			run: func(t *testing.T, f *fakeNode) error {
				must(t, f.stage(ctx, "v", rwo))
				f.mounts.set(f.stagingPath("v"), &fakeMount{dead: true})
				resp, err := f.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "v"})
				if err != nil {
					return err
				}
				if h := resp.GetVolumeHealth().GetHealthStatuses(); len(h) != 1 || h[0].GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE {
					t.Errorf("health %v, want INACCESSIBLE", h)
				}
				return nil
			},
			workers: -1, mounts: -1, recorded: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNode(t)
			err := tc.run(t, f)
			if status.Code(err) != tc.code {
				t.Fatalf("got %v, want code %v", err, tc.code)
			}
			if tc.msg != "" && !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Errorf("message %q does not say %q", status.Convert(err).Message(), tc.msg)
			}
			if tc.workers >= 0 && f.workers() != tc.workers {
				t.Errorf("%d workers started, want %d", f.workers(), tc.workers)
			}
			if tc.mounts >= 0 && f.mounts.count() != tc.mounts {
				t.Errorf("%d mounts left, want %d: %v", f.mounts.count(), tc.mounts, f.mounts.mounts)
			}
			recs, _ := f.store.Load()
			if has := len(recs) > 0; has != tc.recorded {
				t.Errorf("record left: %v, want %v", has, tc.recorded)
			}
			if !tc.recorded {
				if left, _ := os.ReadDir(f.d.opts.CacheDir); len(left) != 0 {
					t.Errorf("cache dirs left: %v", left)
				}
				if _, err := f.uids.Allocate("probe"); err != nil {
					t.Errorf("uids not released: %v", err)
				}
			}
		})
	}
}

// TestSubpathRepairIsRetried: a subPath bind whose replacement fails after
// a worker's death (a pod's namespace not entered in time) is tried again
// until it works, while the same worker serves the volume.
func TestSubpathRepairIsRetried(t *testing.T) {
	f, bind := deadSubpathPod(t, func(m *fakeMounts) { m.replaceFails = 1 })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if st, _ := f.mounts.Check(bind.Path); st == mounter.Mounted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the subPath bind is not repaired after %d tries", f.mounts.replaceCalls())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := f.mounts.replaceCalls(); n != 2 {
		t.Errorf("%d replacements, want 2 (one failed, one retried)", n)
	}
	if n := f.workers(); n != 2 {
		t.Errorf("%d workers started, want 2: a retry must not mount again", n)
	}
}

// A replaced subPath bind whose copy in a pod could not be replaced (the
// process entered by was gone) is tried again, though the bind at its own
// path is alive by then; a retry does not replace the bind again.
func TestStaleSubpathCopiesAreRetried(t *testing.T) {
	f, _ := deadSubpathPod(t, func(m *fakeMounts) { m.copiesFail = 2 })
	deadline := time.Now().Add(20 * time.Second)
	for {
		f.mounts.mu.Lock()
		copies := f.mounts.copies
		f.mounts.mu.Unlock()
		if copies >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the copies were tried %d times, want 3 (two failed, one retried)", copies)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := f.mounts.replaceCalls(); n != 1 {
		t.Errorf("the bind was replaced %d times, want once", n)
	}
	for !f.nodeServer.locks.tryAcquire("vol") {
		time.Sleep(10 * time.Millisecond)
	}
	defer f.nodeServer.locks.release("vol")
	f.nodeServer.mu.Lock()
	v := f.nodeServer.volumes["vol"]
	f.nodeServer.mu.Unlock()
	if len(v.staleCopies) != 0 {
		t.Errorf("copies still pending after a retry that succeeded: %+v", v.staleCopies)
	}
}

// deadSubpathPod stages volume "vol" and publishes it to "pod", whose
// container has a subPath bind that stacking cannot repair (its dentry
// dropped), lets fail set the mounter's failures, and kills the worker:
// the target and the bind are dead, and recovery begins.
func deadSubpathPod(t *testing.T, fail func(*fakeMounts)) (*fakeNode, mounter.SubpathBind) {
	t.Helper()
	f := newFakeNode(t)
	ctx := context.Background()
	if err := f.stage(ctx, "vol", rwo); err != nil {
		t.Fatal(err)
	}
	if err := f.publish(ctx, "vol", "pod", false); err != nil {
		t.Fatal(err)
	}
	target := f.targetPath("pod", "vol")
	bind := mounter.SubpathBind{Path: filepath.Join(f.dir, "pods", "pod", "volume-subpaths", "vol", "app", "0"), Root: "/sub", Unlinked: true}
	f.mounts.mu.Lock()
	f.mounts.subpaths = map[string][]mounter.SubpathBind{target: {bind}}
	fail(f.mounts)
	f.mounts.mu.Unlock()
	f.mounts.set(bind.Path, &fakeMount{dead: true})

	f.mu.Lock()
	w := f.started[len(f.started)-1]
	f.mu.Unlock()
	w.Kill() // the worker dies: its mounts with it
	f.mounts.set(target, &fakeMount{dead: true})
	return f, bind
}
