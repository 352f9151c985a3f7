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
	"strconv"

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

// SubpathMount is pods/<uid>/volume-subpaths/<pv>/<container>/<index>,
// where the kubelet binds a volumeMount's subPath for the runtime to mount.
func (k *Kubelet) SubpathMount(v Volume, podUID, container string, index int) string {
	return filepath.Join(k.Root, "pods", podUID, "volume-subpaths", v.PV, container, strconv.Itoa(index))
}

// BindSubPath does what the kubelet does for volumeMounts[index] of a
// container with a subPath: create the subPath directory in the published
// volume if it is missing, open it without following symlinks, and bind
// that open file, by its /proc fd link, plainly onto SubpathMount, which it
// returns for the runtime to mount into the container.
func (k *Kubelet) BindSubPath(v Volume, podUID, container string, index int, subPath string) (string, error) {
	target := k.TargetPath(v, podUID)
	root, err := unix.Open(target, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open volume: %w", err)
	}
	defer unix.Close(root)
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS}
	fd, err := unix.Openat2(root, subPath, how)
	if errors.Is(err, unix.ENOENT) {
		if err := os.MkdirAll(filepath.Join(target, subPath), 0o750); err != nil {
			return "", fmt.Errorf("create subPath: %w", err)
		}
		fd, err = unix.Openat2(root, subPath, how)
	}
	if err != nil {
		return "", fmt.Errorf("open subPath: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	mp := k.SubpathMount(v, podUID, container, index)
	if err := os.MkdirAll(filepath.Dir(mp), 0o750); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = os.Mkdir(mp, 0o750)
	} else {
		err = os.WriteFile(mp, nil, 0o640)
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := unix.Mount(fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd), mp, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("bind subPath: %w", err)
	}
	return mp, nil
}

// CleanSubPaths unmounts and removes every subPath bind of the volume in the
// pod, as the kubelet does before it unpublishes the volume. The kubelet
// unmounts one layer per attempt and tries again until none is left; this
// loops at once.
func (k *Kubelet) CleanSubPaths(v Volume, podUID string) error {
	dir := filepath.Join(k.Root, "pods", podUID, "volume-subpaths", v.PV)
	containers, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, c := range containers {
		cdir := filepath.Join(dir, c.Name())
		mounts, err := os.ReadDir(cdir)
		if err != nil {
			return err
		}
		for _, m := range mounts {
			p := filepath.Join(cdir, m.Name())
			for i := 0; ; i++ {
				err := unix.Unmount(p, unix.UMOUNT_NOFOLLOW)
				if errors.Is(err, unix.EINVAL) {
					break // not a mount point any more
				}
				if err != nil || i > 100 {
					return fmt.Errorf("unmount %s: %v", p, err)
				}
			}
			if err := os.Remove(p); err != nil {
				return err
			}
		}
		if err := os.Remove(cdir); err != nil {
			return err
		}
	}
	if err := os.Remove(dir); err != nil {
		return err
	}
	return removeEmpty(filepath.Dir(dir), filepath.Join(k.Root, "pods", podUID))
}

// Unpublish cleans the pod's subPath binds of the volume, calls
// NodeUnpublishVolume and removes the pod's volume dir.
func (k *Kubelet) Unpublish(ctx context.Context, v Volume, podUID string) error {
	if err := k.CleanSubPaths(v, podUID); err != nil {
		return fmt.Errorf("cleaning subPaths: %w", err)
	}
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
