// Package kubelet is a small stand-in for the kubelet's side of CSI: it lays
// out staging and target paths exactly as the kubelet does and calls the
// node plugin's stage/publish RPCs over its socket. The demo and the
// end-to-end tests use it.
package kubelet

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
)

// Kubelet plays the kubelet for one driver.
type Kubelet struct {
	// Root is the kubelet's root dir (/var/lib/kubelet on a node).
	Root       string
	DriverName string
	Node       csi.NodeClient
}

// Volume is what the kubelet knows of a PV.
type Volume struct {
	PV         string // the PersistentVolume's name
	Handle     string // its CSI volume handle
	Capability *csi.VolumeCapability
	Context    map[string]string
	Secret     map[string]string // the node-stage secret, as the kubelet reads it
}

// MakeRootShared makes Root an rshared mount, as the kubelet does, so that
// mounts below it propagate to the containers that hold a copy.
func (k *Kubelet) MakeRootShared() error {
	if err := os.MkdirAll(k.Root, 0o750); err != nil {
		return err
	}
	if err := unix.Mount(k.Root, k.Root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind kubelet root: %w", err)
	}
	return unix.Mount("", k.Root, "", unix.MS_SHARED|unix.MS_REC, "")
}

// ReleaseRoot undoes MakeRootShared.
func (k *Kubelet) ReleaseRoot() error {
	return unix.Unmount(k.Root, unix.MNT_DETACH)
}

// StagingPath is plugins/kubernetes.io/csi/<driver>/<sha256(pv)>/globalmount.
func (k *Kubelet) StagingPath(v Volume) string {
	sum := sha256.Sum256([]byte(v.PV))
	return filepath.Join(k.Root, "plugins", "kubernetes.io", "csi", k.DriverName, fmt.Sprintf("%x", sum), "globalmount")
}

// TargetPath is pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount.
func (k *Kubelet) TargetPath(v Volume, podUID string) string {
	return filepath.Join(k.Root, "pods", podUID, "volumes", "kubernetes.io~csi", v.PV, "mount")
}

// Stage creates the staging dir and calls NodeStageVolume.
func (k *Kubelet) Stage(ctx context.Context, v Volume) error {
	staging := k.StagingPath(v)
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return err
	}
	_, err := k.Node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: v.Handle, StagingTargetPath: staging, VolumeCapability: v.Capability,
		Secrets: v.Secret, VolumeContext: v.Context,
	})
	return err
}

// Publish creates the target's parent and calls NodePublishVolume.
func (k *Kubelet) Publish(ctx context.Context, v Volume, podUID string, readOnly bool) (string, error) {
	target := k.TargetPath(v, podUID)
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return "", err
	}
	_, err := k.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: v.Handle, StagingTargetPath: k.StagingPath(v), TargetPath: target,
		VolumeCapability: v.Capability, Readonly: readOnly, VolumeContext: v.Context,
	})
	return target, err
}

// Unpublish calls NodeUnpublishVolume and removes the pod's volume dir.
func (k *Kubelet) Unpublish(ctx context.Context, v Volume, podUID string) error {
	target := k.TargetPath(v, podUID)
	if _, err := k.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.Handle, TargetPath: target}); err != nil {
		return err
	}
	return removeEmpty(filepath.Dir(target), filepath.Join(k.Root, "pods"))
}

// Unstage calls NodeUnstageVolume and removes the staging dir, as the
// kubelet does.
func (k *Kubelet) Unstage(ctx context.Context, v Volume) error {
	staging := k.StagingPath(v)
	if _, err := k.Node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.Handle, StagingTargetPath: staging}); err != nil {
		return err
	}
	return removeEmpty(staging, filepath.Join(k.Root, "plugins"))
}

// removeEmpty removes dir and its empty parents up to (not including) stop.
func removeEmpty(dir, stop string) error {
	for dir != stop && len(dir) > len(stop) {
		if err := os.Remove(dir); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				dir = filepath.Dir(dir)
				continue
			}
			var errno unix.Errno
			if errors.As(err, &errno) && errno == unix.ENOTEMPTY {
				return nil
			}
			return err
		}
		dir = filepath.Dir(dir)
	}
	return nil
}
