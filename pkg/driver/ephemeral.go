package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/secrets"
)

// CSI ephemeral inline volumes: a pod's own csi: volume, with
// volumeAttributes and a nodePublishSecretRef, and no PVC. The kubelet calls
// NodePublishVolume only (no stage, no staging path), and NodeUnpublishVolume
// when the pod goes. The driver stages the volume itself, at a staging path
// of its own, with the publish secret as the stage secret: the worker, the
// record, recovery and the tenant policy are those of a staged volume. The
// last unpublish unstages it (drain included).

// keyEphemeral is what the kubelet sets (with podInfoOnMount) on the
// NodePublishVolume of an inline volume.
const keyEphemeral = "csi.storage.k8s.io/ephemeral"

// kubeletKeys are the volume context keys the kubelet sets over whatever
// the pod's volumeAttributes say: the only csi.storage.k8s.io/ keys of an
// inline volume that the driver believes.
var kubeletKeys = map[string]bool{
	keyPodNamespace: true, keyPodName: true, keyPodUID: true, keyEphemeral: true,
	"csi.storage.k8s.io/serviceAccount.name": true,
}

// isEphemeral says whether a publish is of an inline volume.
func isEphemeral(req *csi.NodePublishVolumeRequest) bool {
	return req.GetStagingTargetPath() == "" && req.GetVolumeContext()[keyEphemeral] == "true"
}

// ephemeralContext is the volume context an inline volume is staged with.
// The pod's author wrote the volumeAttributes: keys that are the
// provisioner's or the kubelet's to set (csi.storage.k8s.io/pvc/namespace,
// which binds encrypted values to a namespace, among them) are dropped, and
// the PVC namespace is the pod's, so that an encrypted value decrypts only
// for pods of the namespace it was sealed for.
func ephemeralContext(volumeContext map[string]string) map[string]string {
	out := make(map[string]string, len(volumeContext))
	for k, v := range volumeContext {
		if strings.HasPrefix(k, "csi.storage.k8s.io/") && !kubeletKeys[k] {
			continue
		}
		out[k] = v
	}
	out[secrets.KeyPVCNamespace] = volumeContext[keyPodNamespace]
	return out
}

// ephemeralStagingPath is where the driver stages an inline volume: in its
// state dir, since the kubelet gives none.
func (s *nodeServer) ephemeralStagingPath(id string) string {
	return filepath.Join(s.d.opts.StateDir, "ephemeral", dirName(id))
}

// publishEphemeral stages an inline volume, then publishes it. A publish
// that fails unstages what this call staged: the kubelet does not unpublish
// a volume whose publish failed.
func (s *nodeServer) publishEphemeral(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id := req.GetVolumeId()
	capability := proto.Clone(req.GetVolumeCapability()).(*csi.VolumeCapability)
	if req.GetReadonly() && capability.GetAccessMode() != nil {
		// A read-only inline volume mounts read-only.
		capability.AccessMode.Mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	}
	staging := s.ephemeralStagingPath(id)
	wasStaged := s.get(id) != nil
	if _, err := s.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, VolumeCapability: capability,
		Secrets: req.GetSecrets(), VolumeContext: ephemeralContext(req.GetVolumeContext()),
	}); err != nil {
		return nil, err
	}
	pub := proto.Clone(req).(*csi.NodePublishVolumeRequest)
	pub.StagingTargetPath = staging
	resp, err := s.publish(ctx, pub)
	if err != nil && !wasStaged {
		if uerr := s.unstageEphemeral(ctx, id); uerr != nil {
			klog.ErrorS(uerr, "unstaging an inline volume whose publish failed", "volumeID", id)
		}
	}
	return resp, err
}

// unstageEphemeral unstages an inline volume that has no target left; any
// other volume it leaves alone.
func (s *nodeServer) unstageEphemeral(ctx context.Context, id string) error {
	v := s.get(id)
	if v == nil {
		return nil
	}
	s.mu.Lock()
	inline := v.rec.Context[keyEphemeral] == "true"
	targets := len(v.rec.Targets)
	s.mu.Unlock()
	if !inline || targets > 0 {
		return nil
	}
	if _, err := s.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: v.stagingPath}); err != nil {
		return err
	}
	if err := os.Remove(v.stagingPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "removing an inline volume's staging dir", "volumeID", id)
	}
	return nil
}

// NodePublishVolume publishes a staged volume (publish), or stages and
// publishes an inline one.
func (s *nodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if isEphemeral(req) {
		if req.GetVolumeId() == "" {
			return s.publish(ctx, req) // which says what is missing
		}
		return s.publishEphemeral(ctx, req)
	}
	return s.publish(ctx, req)
}

// NodeUnpublishVolume unpublishes a target (unpublish), and unstages an
// inline volume whose last target it was. When the unstage cannot finish
// (uploads pending), the call fails and the kubelet's retry finds the
// target gone and unstages again.
func (s *nodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	resp, err := s.unpublish(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := s.unstageEphemeral(ctx, req.GetVolumeId()); err != nil {
		return nil, err
	}
	return resp, nil
}
