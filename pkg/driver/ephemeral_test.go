package driver

import (
	"context"
	"maps"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestEphemeralContext(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in, want map[string]string
	}{
		{"the pod's namespace binds encrypted values",
			map[string]string{keyEphemeral: "true", keyPodNamespace: "team", keyPodName: "p", "remotePath": "b/x"},
			map[string]string{keyEphemeral: "true", keyPodNamespace: "team", keyPodName: "p", "remotePath": "b/x", "csi.storage.k8s.io/pvc/namespace": "team"}},
		{"the author's provisioner keys are dropped",
			map[string]string{keyEphemeral: "true", keyPodNamespace: "team", "csi.storage.k8s.io/pvc/namespace": "other", "csi.storage.k8s.io/pvc/name": "theirs", "csi.storage.k8s.io/pv/name": "pv", "csi.storage.k8s.io/serviceAccount.tokens": "{}"},
			map[string]string{keyEphemeral: "true", keyPodNamespace: "team", "csi.storage.k8s.io/pvc/namespace": "team"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ephemeralContext(tc.in); !maps.Equal(got, tc.want) {
				t.Errorf("ephemeralContext = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEphemeralPublish(t *testing.T) {
	f := newFakeNode(t)
	ctx := context.Background()
	const id = "csi-0123"
	target := f.targetPath("0f1e2d3c-aaaa-bbbb-cccc-123456789abc", id)
	req := func(readOnly bool) *csi.NodePublishVolumeRequest {
		return &csi.NodePublishVolumeRequest{
			VolumeId: id, TargetPath: target, VolumeCapability: capability(rwo), Readonly: readOnly, Secrets: fakeSecret(),
			VolumeContext: map[string]string{keyEphemeral: "true", keyPodNamespace: "team", keyPodName: "web-0"},
		}
	}
	if _, err := f.NodePublishVolume(ctx, req(false)); err != nil {
		t.Fatal(err)
	}
	v := f.get(id)
	if v == nil || v.stagingPath != f.ephemeralStagingPath(id) {
		t.Fatalf("staged at %v", v)
	}
	if m, ok := f.mounts.get(target); !ok || m.source != v.stagingPath {
		t.Fatalf("target %+v", m)
	}
	if _, err := f.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if f.get(id) != nil || f.mounts.count() != 0 {
		t.Fatalf("after unpublish: staged %v, %d mounts", f.get(id) != nil, f.mounts.count())
	}

	// A publish that fails after the stage leaves no stage behind: the
	// kubelet does not unpublish it.
	f.mounts.set(target, &fakeMount{source: "elsewhere", readOnly: true})
	_, err := f.NodePublishVolume(ctx, req(false))
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("publish over another mount: %v", err)
	}
	if f.get(id) != nil {
		t.Error("the failed publish left its stage")
	}
	_ = f.mounts.Unmount(target)

	// A drain that cannot finish fails the unpublish; the retry unstages.
	if _, err := f.NodePublishVolume(ctx, req(true)); err != nil {
		t.Fatal(err)
	}
	if !f.get(id).readOnly {
		t.Error("a read-only inline volume staged writable")
	}
	f.mu.Lock()
	w := f.started[len(f.started)-1]
	f.mu.Unlock()
	w.drainErr = status.Error(codes.Unavailable, "uploads pending") // not ErrMount: the unstage fails
	unpub := &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}
	if _, err := f.NodeUnpublishVolume(ctx, unpub); status.Code(err) != codes.Unavailable {
		t.Fatalf("unpublish with uploads pending: %v", err)
	}
	w.drainErr = nil
	if _, err := f.NodeUnpublishVolume(ctx, unpub); err != nil || f.get(id) != nil {
		t.Fatalf("retried unpublish: %v, staged %v", err, f.get(id) != nil)
	}
}
