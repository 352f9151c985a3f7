package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/mounter"
	"github.com/csi-rclone/csi-rclone/pkg/state"
	"github.com/csi-rclone/csi-rclone/pkg/uidpool"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/secrets"
)

// stagedVolume is a volume this node plugin has mounted, or must mount
// again. Its record is what a restarted driver recovers it from.
type stagedVolume struct {
	id          string
	stagingPath string
	volDir      string // root:<worker gid> 0710: only root and the worker pass
	mountDir    string // in volDir: where the driver mounts FUSE; staging is a bind of it
	cacheDir    string // 0700, the worker's
	uid         int    // the worker's uid and gid (rec.WorkerUID)
	readOnly    bool
	fingerprint string // of the stage request, to tell a retry from a conflict

	// Guarded by nodeServer.mu.
	rec       *state.Volume // targets included
	proc      mountWorker
	stopping  bool   // an unstage is stopping the worker: do not restart it
	health    string // why the volume is not mounted now; "" when it is
	recovered chan struct{}
	started   time.Time // when the current worker mounted
	failures  int       // deaths and failed mounts in a row, for backoff
	// For the per-volume metrics (volume_metrics.go).
	recoveries, restarts int

	// Guarded by the volume's lock: copies in pods of subPath binds that
	// were replaced, which a replacement could not reach; repairTargets
	// tries them again.
	staleCopies []mounter.StaleCopies
}

type nodeServer struct {
	csi.UnimplementedNodeServer
	d     *Driver
	m     mountTable
	store *state.Store
	locks *volumeLocks
	uids  *uidpool.Pool // a worker uid per volume
	// startWorker and chown are worker.Start and os.Lchown but in tests.
	startWorker workerStarter
	chown       chowner

	mu      sync.Mutex
	volumes map[string]*stagedVolume
}

func newNodeServer(d *Driver, store *state.Store, uids *uidpool.Pool) *nodeServer {
	return &nodeServer{
		d: d, m: d.mounter, store: store, uids: uids, locks: newVolumeLocks(), volumes: map[string]*stagedVolume{},
		startWorker: startProcess, chown: os.Lchown,
	}
}

func (s *nodeServer) get(id string) *stagedVolume {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.volumes[id]
}

func (s *nodeServer) forget(v *stagedVolume) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.volumes[v.id] == v {
		delete(s.volumes, v.id)
	}
}

// stagedAt names the volume staged at path, if any.
func (s *nodeServer) stagedAt(path string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, v := range s.volumes {
		if v.stagingPath == path {
			return id
		}
	}
	return ""
}

// newStagedVolume makes the in-memory volume of a record. The mount point
// is nested in a dir that only the worker's group may pass: the FUSE
// root's own mode, not the mount point's, is what a path lookup sees, so a
// mount point alone would let every uid in.
func (s *nodeServer) newStagedVolume(rec *state.Volume) *stagedVolume {
	volDir := filepath.Join(s.d.opts.StateDir, "mnt", dirName(rec.VolumeID))
	return &stagedVolume{
		id:          rec.VolumeID,
		stagingPath: rec.StagingPath,
		volDir:      volDir,
		mountDir:    filepath.Join(volDir, "mnt"),
		cacheDir:    filepath.Join(s.d.opts.CacheDir, dirName(rec.VolumeID)),
		uid:         rec.WorkerUID,
		readOnly:    readOnlyAccess(csi.VolumeCapability_AccessMode_Mode(rec.AccessMode)),
		fingerprint: fingerprint(rec),
		rec:         rec,
		recovered:   closedChan(),
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// waitRecovered holds a call for a volume that a restarted driver is still
// mounting again, so that it sees the volume as it was.
func (s *nodeServer) waitRecovered(ctx context.Context, id string) error {
	v := s.get(id)
	if v == nil {
		return nil
	}
	select {
	case <-v.recovered:
		return nil
	case <-ctx.Done():
		return status.Errorf(codes.Unavailable, "volume %q is still being recovered", id)
	}
}

// begin waits for recovery of id, then takes its lock.
func (s *nodeServer) begin(ctx context.Context, id string) error {
	if err := s.waitRecovered(ctx, id); err != nil {
		return err
	}
	return s.lock(id)
}

func (s *nodeServer) lock(id string) error {
	if !s.locks.tryAcquire(id) {
		return status.Errorf(codes.Aborted, "an operation on volume %q is in progress", id)
	}
	return nil
}

func (s *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: s.d.opts.NodeID}, nil
}

func (s *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP,
	} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: t},
		}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// NodeStageVolume mounts the volume at the staging path:
//  1. check the request and build the rclone config from secret + context;
//  2. record the volume (phase Staging) for recovery;
//  3. start a worker that mounts it, handing it the config over a pipe, and
//     bind its mount onto the staging path;
//  4. mark the record Staged, and watch the worker.
//
// On failure nothing is left: no worker, mount, record or cache dir.
func (s *nodeServer) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if staging == "" {
		return nil, status.Error(codes.InvalidArgument, "staging target path is required")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if err := s.begin(ctx, id); err != nil {
		return nil, err
	}
	defer s.locks.release(id)

	rec := &state.Volume{
		Phase:       state.Staging,
		VolumeID:    id,
		StagingPath: filepath.Clean(staging),
		AccessMode:  int32(req.GetVolumeCapability().GetAccessMode().GetMode()),
		MountGroup:  req.GetVolumeCapability().GetMount().GetVolumeMountGroup(),
		Secret:      req.GetSecrets(),
		Context:     req.GetVolumeContext(),
		Targets:     map[string]bool{},
	}
	if v := s.get(id); v != nil {
		if v.stagingPath != rec.StagingPath {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %q is already staged at %s", id, v.stagingPath)
		}
		if v.fingerprint != fingerprint(rec) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q is already staged at %s with another capability, context or secret", id, staging)
		}
		if st, _ := s.m.Check(staging); st == mounter.Mounted {
			return &csi.NodeStageVolumeResponse{}, nil
		}
		// The worker died and could not be restarted yet: try now.
		if err := s.restore(ctx, v); err != nil {
			return nil, statusFor(err, "mounting volume again")
		}
		return &csi.NodeStageVolumeResponse{}, nil
	}

	uid, err := s.uids.Allocate(id)
	if err != nil {
		return nil, statusFor(err, "no mount worker uid for the volume")
	}
	staged := false
	defer func() {
		if !staged {
			s.uids.Release(id)
		}
	}()
	rec.WorkerUID = uid
	v := s.newStagedVolume(rec)
	vol, err := s.build(ctx, v)
	if err != nil {
		return nil, statusFor(err, "volume configuration")
	}
	// The record goes before the mount, in phase Staging: a driver that dies
	// before the mount is up finds it on restart and cleans up instead of
	// leaving a half-mounted volume.
	if err := s.store.Save(rec); err != nil {
		return nil, status.Errorf(codes.Internal, "recording volume: %v", err)
	}
	if err := s.mount(ctx, v, vol); err != nil {
		_ = s.store.Delete(id)
		return nil, statusFor(err, "mounting volume")
	}
	rec.Phase = state.Staged
	if err := s.store.Save(rec); err != nil {
		s.stop(v)
		_ = s.store.Delete(id)
		return nil, status.Errorf(codes.Internal, "recording volume: %v", err)
	}
	s.mu.Lock()
	s.volumes[id] = v
	v.started = time.Now()
	s.mu.Unlock()
	staged = true
	s.watch(v, v.proc)
	klog.InfoS("volume staged", "volumeID", id, "stagingPath", staging, "readOnly", v.readOnly, "workerPID", v.proc.Pid(), "workerUID", v.uid)
	return &csi.NodeStageVolumeResponse{}, nil
}

// build makes the rclone config from the record, decrypting through the
// secret service: at stage, and again at every recovery.
func (s *nodeServer) build(ctx context.Context, v *stagedVolume) (*secrets.Volume, error) {
	vol, err := secrets.Build(ctx, secrets.Source{Secret: v.rec.Secret, VolumeContext: v.rec.Context, VolumeID: v.id},
		&s.d.opts.Policy, s.d.opts.Decrypter)
	if err != nil {
		return nil, err
	}
	return vol, s.applyOptions(vol, v.readOnly, v.rec.MountGroup, sizeOf(v.id, v.rec.Secret, v.rec.Context))
}

// start builds the config and mounts it.
func (s *nodeServer) start(ctx context.Context, v *stagedVolume) error {
	vol, err := s.build(ctx, v)
	if err != nil {
		return err
	}
	return s.mount(ctx, v, vol)
}

// stop kills a worker and removes its mount, for a stage that failed late.
func (s *nodeServer) stop(v *stagedVolume) {
	s.kill(v)
	_ = s.unmountVolume(v)
}

// kill ends v's worker at once, and keeps it from being started again.
func (s *nodeServer) kill(v *stagedVolume) {
	s.mu.Lock()
	v.stopping = true
	proc := v.proc
	s.mu.Unlock()
	if proc != nil {
		proc.Kill()
	}
}

// mount starts the worker for v and waits for a live mount, cleaning up on
// failure.
func (s *nodeServer) mount(ctx context.Context, v *stagedVolume, vol *secrets.Volume) (err error) {
	if v.uid == 0 { // recovered, and no uid was free then
		uid, err := s.uids.Allocate(v.id)
		if err != nil {
			return err
		}
		s.mu.Lock()
		v.uid, v.rec.WorkerUID = uid, uid
		err = s.store.Save(v.rec)
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("recording the worker uid: %w", err)
		}
	}
	uid, gid := v.uid, v.uid // a group of its own
	// Dead mounts left by a worker that died stay in the way of a new one.
	if err := s.unmountVolume(v); err != nil {
		return err
	}
	if err := os.MkdirAll(v.stagingPath, 0o750); err != nil {
		return fmt.Errorf("staging path: %w", err)
	}
	// The volume's dir lets its worker's group through and nobody else;
	// it is root's, so that no worker can swap the mount point for a
	// symlink that the driver would then mount over.
	if err := s.ownDir(v.volDir, 0, gid, 0o710); err != nil {
		return fmt.Errorf("mount dir: %w", err)
	}
	if err := s.ownDir(v.mountDir, 0, 0, 0o700); err != nil {
		return fmt.Errorf("mount dir: %w", err)
	}
	newCache := false
	if _, err := os.Stat(v.cacheDir); errors.Is(err, os.ErrNotExist) {
		newCache = true
	}
	if err := s.ownDir(v.cacheDir, uid, gid, 0o700); err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	defer func() {
		if err != nil && newCache {
			_ = os.RemoveAll(v.cacheDir)
		}
	}()
	// Records from before workers had a uid each, or a changed range,
	// leave the cache to another uid: it becomes this one's.
	if err := s.chownTree(v.cacheDir, uid, gid); err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}

	ctx, cancel := context.WithTimeout(ctx, s.d.opts.MountTimeout)
	defer cancel()
	wopts := s.d.opts.Worker
	wopts.UID, wopts.GID = uid, gid
	wopts.PodResources = podResources(v.rec.Context)
	proc, err := s.startWorker(ctx, wopts, worker.Spec{
		VolumeID: v.id, MountPoint: v.mountDir, CacheDir: v.cacheDir, Volume: *vol,
	})
	if err != nil {
		_ = s.unmountVolume(v)
		return err
	}
	if err := s.m.WaitMounted(ctx, v.mountDir); err == nil {
		err = s.m.Bind(v.mountDir, v.stagingPath, false)
	}
	if err != nil {
		proc.Kill()
		_ = s.unmountVolume(v)
		return fmt.Errorf("%w: %w", worker.ErrMount, err)
	}
	s.mu.Lock()
	v.proc, v.health = proc, ""
	s.mu.Unlock()
	return nil
}

// unmountVolume removes the staging bind and the worker's own mount,
// dead or alive, staging first: while a bind of it is left, unmounting the
// FUSE mount would not end the session.
func (s *nodeServer) unmountVolume(v *stagedVolume) error {
	if err := s.m.Unmount(v.stagingPath); err != nil {
		return err
	}
	if err := s.m.Unmount(v.mountDir); err != nil {
		return err
	}
	// Drivers before per-volume dirs mounted at volDir itself.
	return s.m.Unmount(v.volDir)
}

// ownDir makes dir (not its parents) a directory of uid:gid with mode perm.
// It follows no symlink: a symlink there fails the mount.
func (s *nodeServer) ownDir(dir string, uid, gid int, perm os.FileMode) error {
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if err := s.chown(dir, uid, gid); err != nil {
		return err
	}
	return os.Chmod(dir, perm)
}

// releaseVolume frees what v held on the node after an unstage: its
// per-volume dir (the mount point's parent) and its worker uid.
func (s *nodeServer) releaseVolume(v *stagedVolume) {
	if err := os.Remove(v.volDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "removing the volume's dir", "volumeID", v.id)
	}
	s.uids.Release(v.id)
}

// assignUIDs gives recovered volumes their worker uids before any of them
// mounts: first each the uid its record names, then, to records without
// one (or whose uid is outside the range now), the lowest free ones. The
// caller holds s.mu.
func (s *nodeServer) assignUIDs(vols []*stagedVolume) {
	var without []*stagedVolume
	for _, v := range vols {
		if v.uid == 0 {
			without = append(without, v)
			continue
		}
		if err := s.uids.Reserve(v.id, v.uid); err != nil {
			klog.ErrorS(err, "the volume's recorded worker uid cannot be kept; it gets another", "volumeID", v.id)
			without = append(without, v)
		}
	}
	for _, v := range without {
		uid, err := s.uids.Allocate(v.id)
		if err != nil {
			// Its mount fails, and says why, until a uid is free.
			klog.ErrorS(err, "no worker uid for a recovered volume", "volumeID", v.id)
			continue
		}
		v.uid, v.rec.WorkerUID = uid, uid
		if err := s.store.Save(v.rec); err != nil {
			klog.ErrorS(err, "recording the volume's worker uid", "volumeID", v.id)
		}
	}
}

// chownTree gives a worker that does not run as root its cache dir.
func (s *nodeServer) chownTree(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return s.chown(p, uid, gid)
	})
}

// applyOptions lays the driver's defaults under the tenant's options and the
// request's demands (read-only access mode, volume mount group) over them.
// A known capacity is the filesystem's size in statfs (see volumeSize).
func (s *nodeServer) applyOptions(vol *secrets.Volume, readOnly bool, mountGroup string, size volumeSize) error {
	vfs := s.fitDefaults(secrets.KeyVFSOpt, DefaultVFSOptions)
	vfs["uid"], vfs["gid"] = strconv.Itoa(s.d.opts.DefaultUID), strconv.Itoa(s.d.opts.DefaultGID)
	sizeOpts, err := size.vfsDefaults()
	if err != nil {
		return err
	}
	maps.Copy(vfs, sizeOpts)
	maps.Copy(vfs, vol.VFSOpt)
	if readOnly {
		vfs["read_only"] = "true"
	}
	if mountGroup != "" {
		if _, err := strconv.ParseUint(mountGroup, 10, 32); err != nil {
			return fmt.Errorf("%w: volume mount group %q is not a numeric gid", secrets.ErrInvalid, mountGroup)
		}
		vfs["gid"] = mountGroup
	}
	mnt := s.fitDefaults(secrets.KeyMountOpt, DefaultMountOptions)
	maps.Copy(mnt, vol.MountOpt)
	// Pods, and the driver itself, are other users than the worker.
	mnt["allow_other"] = "true"
	vol.VFSOpt, vol.MountOpt = vfs, mnt
	return nil
}

// fitDefaults is a copy of the driver's defaults, each lowered to the
// operator's limit where that is lower (a tenant's own value above a limit
// is refused, but the defaults are the driver's, not the tenant's).
func (s *nodeServer) fitDefaults(key string, defaults map[string]string) map[string]string {
	out := make(map[string]string, len(defaults))
	for k, v := range defaults {
		out[k] = s.d.opts.Policy.FitDefault(key, k, v)
	}
	return out
}

// NodeUnstageVolume drains the volume, unmounts it and stops the worker:
//  1. drain: wait until the worker has no file open (a RELEASE the kernel
//     has not sent yet counts), none dirty and no upload queued or running.
//     If that takes longer than the drain timeout (or the call's deadline),
//     answer Unavailable and leave the mount as it is; the worker goes on
//     uploading, and the kubelet's retry waits for the same drain;
//  2. unmount, and wait for the worker to exit;
//  3. remove the cache dir only when the worker reported, as it exited, that
//     it left no file there not uploaded (or, for a worker that is gone,
//     when none is found there): otherwise it stays, and the next stage of
//     the volume uploads what is in it;
//  4. forget the volume.
//
// Unknown volumes and dead mounts succeed: there is nothing to keep.
func (s *nodeServer) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if staging == "" {
		return nil, status.Error(codes.InvalidArgument, "staging target path is required")
	}
	if err := s.begin(ctx, id); err != nil {
		return nil, err
	}
	defer s.locks.release(id)

	if v := s.get(id); v != nil {
		s.mu.Lock()
		v.stopping = true
		proc := v.proc
		s.mu.Unlock()
		if proc != nil {
			if err := proc.Drain(ctx, s.d.opts.DrainTimeout); err != nil && !errors.Is(err, worker.ErrMount) {
				s.mu.Lock()
				v.stopping = false
				s.mu.Unlock()
				// The mount stays up with the files that are not uploaded yet.
				return nil, statusFor(err, "unstaging volume")
			}
		}
		if err := s.unmountVolume(v); err != nil {
			return nil, status.Errorf(codes.Internal, "unmounting: %v", err)
		}
		left := -1 // unknown
		if proc != nil {
			if exit, ok := proc.Wait(10 * time.Second); ok { // the FUSE session has ended: it exits
				left = exit.NotUploaded
			}
		}
		if left < 0 { // no report: the worker died or was killed
			if n, err := worker.NotUploaded(v.cacheDir); err == nil {
				left = n
			} else {
				klog.ErrorS(err, "reading the cache dir", "volumeID", id)
			}
		}
		if err := os.Remove(v.mountDir); err != nil && !errors.Is(err, os.ErrNotExist) {
			klog.ErrorS(err, "removing mount dir", "volumeID", id)
		}
		if left == 0 {
			if err := os.RemoveAll(v.cacheDir); err != nil {
				klog.ErrorS(err, "removing cache dir", "volumeID", id)
			}
		} else {
			klog.InfoS("keeping the cache dir: it holds files not uploaded, which the next stage of the volume uploads", "volumeID", id, "cacheDir", v.cacheDir, "files", left)
		}
		if err := s.store.Delete(id); err != nil {
			return nil, status.Errorf(codes.Internal, "removing the volume's record: %v", err)
		}
		s.forget(v)
		s.releaseVolume(v)
	} else if owner := s.stagedAt(filepath.Clean(staging)); owner != "" {
		// Not this volume's mount: leave it to its own volume.
		klog.InfoS("unstage of an unknown volume at another volume's staging path; nothing to do", "volumeID", id, "owner", owner)
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	if err := s.m.Unmount(staging); err != nil {
		return nil, status.Errorf(codes.Internal, "unmounting %s: %v", staging, err)
	}
	klog.InfoS("volume unstaged", "volumeID", id, "stagingPath", staging)
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// publish bind-mounts the staging path onto the target (NodePublishVolume
// of a staged volume; see ephemeral.go). It never starts rclone. A dead bind
// left at the target is repaired by stacking a fresh one on top, which
// reaches containers holding a copy of the target.
func (s *nodeServer) publish(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, staging, target := req.GetVolumeId(), req.GetStagingTargetPath(), req.GetTargetPath()
	switch {
	case id == "":
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	case staging == "":
		return nil, status.Error(codes.InvalidArgument, "staging target path is required")
	case target == "":
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if err := s.begin(ctx, id); err != nil {
		return nil, err
	}
	defer s.locks.release(id)

	v := s.get(id)
	if v == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is not staged on this node", id)
	}
	if v.stagingPath != filepath.Clean(staging) {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is staged at %s, not %s", id, v.stagingPath, staging)
	}
	// A staging path that is not mounted (its recovery failed) would bind
	// the node's own directory, and the pod would write to the node's disk.
	if st, _ := s.m.Check(v.stagingPath); st != mounter.Mounted {
		s.mu.Lock()
		why := v.health
		s.mu.Unlock()
		return nil, status.Errorf(codes.Unavailable, "volume %q is %s at %s: %s", id, st, v.stagingPath, why)
	}
	readOnly := req.GetReadonly() || readOnlyMode(req.GetVolumeCapability()) || v.readOnly
	target = filepath.Clean(target)

	st, err := s.m.Check(target)
	if st == mounter.Mounted {
		ro, rerr := s.m.IsReadOnly(target)
		if rerr == nil && ro == readOnly {
			s.recordPod(v, target, req.GetVolumeContext())
			if err := s.setTarget(v, target, readOnly, true); err != nil {
				return nil, err
			}
			return &csi.NodePublishVolumeResponse{}, nil
		}
		return nil, status.Errorf(codes.AlreadyExists, "target %s is already mounted with another read-only setting", target)
	}
	if err != nil && st != mounter.Dead {
		return nil, status.Errorf(codes.Internal, "checking target: %v", err)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "creating target: %v", err)
	}
	if err := s.m.Bind(v.stagingPath, target, readOnly); err != nil {
		return nil, status.Errorf(codes.Internal, "publishing: %v", err)
	}
	s.recordPod(v, target, req.GetVolumeContext())
	if err := s.setTarget(v, target, readOnly, true); err != nil {
		_ = s.m.UnmountAndRemove(target)
		return nil, err
	}
	klog.InfoS("volume published", "volumeID", id, "targetPath", target, "readOnly", readOnly)
	return &csi.NodePublishVolumeResponse{}, nil
}

// setTarget adds (or removes) a target in the volume's record.
func (s *nodeServer) setTarget(v *stagedVolume, target string, readOnly, add bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ro, has := v.rec.Targets[target]; add == has && (!add || ro == readOnly) {
		return nil
	}
	if v.rec.Targets == nil { // state.Load never gives one; a record built elsewhere might
		v.rec.Targets = map[string]bool{}
	}
	if add {
		v.rec.Targets[target] = readOnly
	} else {
		delete(v.rec.Targets, target)
		delete(v.rec.Pods, target)
	}
	if err := s.store.Save(v.rec); err != nil {
		return status.Errorf(codes.Internal, "recording target: %v", err)
	}
	return nil
}

// unpublish unmounts every layer at the target and removes it
// (NodeUnpublishVolume; see ephemeral.go). It never stats through the
// mount, so a dead or hung one cannot block it.
func (s *nodeServer) unpublish(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	}
	if err := s.begin(ctx, id); err != nil {
		return nil, err
	}
	defer s.locks.release(id)
	target = filepath.Clean(target)
	if err := s.m.UnmountAndRemove(target); err != nil {
		return nil, status.Errorf(codes.Internal, "unpublishing: %v", err)
	}
	if v := s.get(id); v != nil {
		if err := s.setTarget(v, target, false, false); err != nil {
			return nil, err
		}
	}
	klog.InfoS("volume unpublished", "volumeID", id, "targetPath", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// volumeAt finds the staged volume id and checks that path is its staging
// path or one of its targets.
func (s *nodeServer) volumeAt(id, path string) (*stagedVolume, error) {
	v := s.get(id)
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "volume %q is not staged on this node", id)
	}
	s.mu.Lock()
	_, isTarget := v.rec.Targets[path]
	s.mu.Unlock()
	if path != v.stagingPath && !isTarget {
		return nil, status.Errorf(codes.NotFound, "volume %q is not mounted at %s", id, path)
	}
	return v, nil
}

// NodeGetVolumeStats reports statfs usage of a live mount. A dead one answers
// Unavailable; NodeGetVolumeHealth says why. The whole call is bounded by
// ProbeTimeout: a mount that does not answer by then is "not answering".
func (s *nodeServer) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	id, path := req.GetVolumeId(), filepath.Clean(req.GetVolumePath())
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume path is required")
	}
	ctx, cancel := context.WithTimeout(ctx, s.d.opts.ProbeTimeout)
	defer cancel()
	if err := s.begin(ctx, id); err != nil {
		return nil, err
	}
	defer s.locks.release(id)
	v, err := s.volumeAt(id, path)
	if err != nil {
		return nil, err
	}
	st, u, err := s.m.Probe(ctx, path)
	if errors.Is(err, mounter.ErrNotAnswering) {
		return nil, notAnswering(path)
	}
	if st != mounter.Mounted {
		s.mu.Lock()
		why := v.health
		s.mu.Unlock()
		return nil, status.Errorf(codes.Unavailable, "%s is %s (%v) %s", path, st, err, why)
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: u.TotalBytes, Available: u.AvailableBytes, Used: u.UsedBytes},
		{Unit: csi.VolumeUsage_INODES, Total: u.TotalInodes, Available: u.FreeInodes, Used: u.UsedInodes},
	}}, nil
}

// notAnswering is the answer for a mount whose statfs did not return in
// time: its daemon is hung. The probe stays in flight; a later call waits
// for it rather than starting another.
func notAnswering(path string) error {
	return status.Errorf(codes.Unavailable, "%s is not answering: statfs did not return in time", path)
}

// NodeGetVolumeHealth reports a volume INACCESSIBLE when its mount is dead.
// (CSI 1.13 replaced NodeGetVolumeStats' VolumeCondition with this call.)
// It is bounded as NodeGetVolumeStats is.
func (s *nodeServer) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	ctx, cancel := context.WithTimeout(ctx, s.d.opts.ProbeTimeout)
	defer cancel()
	if err := s.begin(ctx, id); err != nil {
		return nil, err
	}
	defer s.locks.release(id)
	path := req.GetVolumePublishPath()
	if path == "" {
		path = req.GetStagingTargetPath()
	}
	var v *stagedVolume
	var err error
	if path == "" {
		if v = s.get(id); v == nil {
			return nil, status.Errorf(codes.NotFound, "volume %q is not staged on this node", id)
		}
		path = v.stagingPath
	} else if v, err = s.volumeAt(id, filepath.Clean(path)); err != nil {
		return nil, err
	}
	health := &csi.VolumeHealth{VolumeId: id}
	st, _, err := s.m.Probe(ctx, path)
	if errors.Is(err, mounter.ErrNotAnswering) {
		return nil, notAnswering(path)
	}
	if st != mounter.Mounted {
		msg := fmt.Sprintf("%s is %s", path, st)
		if err != nil {
			msg += ": " + err.Error()
		}
		s.mu.Lock()
		if v.health != "" {
			msg += "; " + v.health
		}
		s.mu.Unlock()
		health.HealthStatuses = append(health.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
			Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: "MountNotAvailable", Message: msg,
		})
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: health}, nil
}

// killAll lets go of every worker at once, without unmount or drain: a
// child worker is killed, a mount pod goes on serving (detach).
func (s *nodeServer) killAll() {
	s.mu.Lock()
	vols := slices.Collect(maps.Values(s.volumes))
	s.mu.Unlock()
	for _, v := range vols {
		s.detach(v)
	}
}

// dirName is a fixed-length directory name for a volume id, which may hold
// any character.
func dirName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16])
}

// fingerprint identifies what a stage request asks for, secrets included,
// without keeping them.
func fingerprint(rec *state.Volume) string {
	h := sha256.New()
	write := func(m map[string]string) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(h, "%q=%q;", k, m[k])
		}
		h.Write([]byte{0})
	}
	write(rec.Secret)
	write(rec.Context)
	fmt.Fprintf(h, "%d|%s", rec.AccessMode, rec.MountGroup)
	return hex.EncodeToString(h.Sum(nil))
}
