package driver

import (
	"context"
	"fmt"
	"maps"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/provision"
	"github.com/csi-rclone/csi-rclone/pkg/worker"

	"github.com/csi-rclone/csi-rclone/secrets"
)

// controllerServer serves two kinds of volumes. A whole-remote volume is a
// view of a remote described by its parameters and secret: CreateVolume
// records the name and capacity so that a repeated call is idempotent and a
// conflicting one is refused, and touches no data. A directory volume (the
// class sets subdirTemplate) is a directory that CreateVolume makes and
// DeleteVolume treats by the class's onDelete; its state is in its id.
type controllerServer struct {
	csi.UnimplementedControllerServer
	d       *Driver
	locks   *volumeLocks
	mu      sync.Mutex
	volumes map[string]*csi.Volume
}

func newControllerServer(d *Driver) *controllerServer {
	return &controllerServer{d: d, locks: newVolumeLocks(), volumes: map[string]*csi.Volume{}}
}

func (s *controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{
			Type: csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		}},
	}}}, nil
}

func (s *controllerServer) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources (snapshots, clones) are not supported")
	}
	capacity, err := capacityOf(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	params := req.GetParameters()
	if _, ok := params[provision.ParamSubdirTemplate]; ok {
		return s.createDir(ctx, req, capacity)
	}
	// A provisioner secret, when the StorageClass names one, is checked now so
	// that a bad config fails the PVC rather than the pod.
	if _, has := req.GetSecrets()[secrets.KeyConfigData]; has {
		if err := secrets.Check(req.GetSecrets(), params, &s.d.opts.Policy); err != nil {
			return nil, statusFor(err, "checking the provisioner secret")
		}
	}
	if !s.locks.tryAcquire(name) {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %q is in progress", name)
	}
	defer s.locks.release(name)

	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.volumes[name]; ok {
		if v.CapacityBytes != capacity {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with capacity %d, not %d", name, v.CapacityBytes, capacity)
		}
		return &csi.CreateVolumeResponse{Volume: v}, nil
	}
	v := &csi.Volume{VolumeId: name, CapacityBytes: capacity, VolumeContext: withCapacity(params, capacity)}
	s.volumes[name] = v
	return &csi.CreateVolumeResponse{Volume: v}, nil
}

// createDir provisions a directory per volume: it expands the class's
// subdirTemplate, makes the directory under the base path with the
// provisioner secret's config (checked by the controller's tenant policy),
// and returns an id that holds what DeleteVolume needs. Calling it again for
// the same name gives the same id; mkdir of an existing directory succeeds.
func (s *controllerServer) createDir(ctx context.Context, req *csi.CreateVolumeRequest, capacity int64) (*csi.CreateVolumeResponse, error) {
	params := req.GetParameters()
	subdir, err := provision.Expand(params[provision.ParamSubdirTemplate], params)
	if err != nil {
		return nil, statusFor(err, "CreateVolume")
	}
	onDelete, err := provision.ParseOnDelete(params[provision.ParamOnDelete])
	if err != nil {
		return nil, statusFor(err, "CreateVolume")
	}
	if _, ok := req.GetSecrets()[secrets.KeyRemotePathSuffix]; ok {
		// The node would take it over the context's suffix, which holds the
		// directory: the pod would see the base.
		return nil, status.Errorf(codes.InvalidArgument, "with %s, the provisioner secret must not set %s", provision.ParamSubdirTemplate, secrets.KeyRemotePathSuffix)
	}
	pv := &provision.Volume{
		Name:         req.GetName(),
		Subdir:       subdir,
		OnDelete:     onDelete,
		PVCNamespace: params[provision.KeyPVCNamespace],
		PVCName:      params[provision.KeyPVCName],
	}
	if !s.locks.tryAcquire(pv.Name) {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %q is in progress", pv.Name)
	}
	defer s.locks.release(pv.Name)
	// A conflicting repeat is refused as for a whole-remote volume; the
	// memory is only for that: a new instance makes the same id again.
	s.mu.Lock()
	prev, seen := s.volumes[pv.Name]
	s.mu.Unlock()
	if seen && prev.CapacityBytes != capacity {
		return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with capacity %d, not %d", pv.Name, prev.CapacityBytes, capacity)
	}

	vol, err := secrets.Build(ctx, secrets.Source{Secret: req.GetSecrets(), VolumeContext: params, VolumeID: pv.Name},
		&s.d.opts.Policy, s.d.opts.Decrypter)
	if err != nil {
		return nil, statusFor(err, "provisioner secret")
	}
	pv.Remote, pv.Base = vol.Remote, vol.Path
	if err := s.runProvision(ctx, pv.Name, provision.Request{Op: provision.OpMkdir, Volume: *vol, Dir: subdir}); err != nil {
		return nil, statusFor(err, "making the volume's directory")
	}
	volCtx := withCapacity(params, capacity)
	delete(volCtx, provision.ParamSubdirTemplate)
	delete(volCtx, provision.ParamOnDelete)
	volCtx[secrets.KeyRemotePathSuffix] = path.Join(params[secrets.KeyRemotePathSuffix], subdir)
	klog.InfoS("volume directory made", "name", pv.Name, "remote", vol.Remote, "path", pv.Path(), "onDelete", onDelete)
	v := &csi.Volume{VolumeId: pv.ID(), CapacityBytes: capacity, VolumeContext: volCtx}
	s.mu.Lock()
	s.volumes[pv.Name] = v
	s.mu.Unlock()
	return &csi.CreateVolumeResponse{Volume: v}, nil
}

// withCapacity copies params and records a known capacity in the volume
// context, so that the node shows it as the filesystem's size.
func withCapacity(params map[string]string, capacity int64) map[string]string {
	out := maps.Clone(params)
	if out == nil {
		out = map[string]string{}
	}
	if _, set := out[KeyCapacity]; !set && capacity > 0 {
		out[KeyCapacity] = strconv.FormatInt(capacity, 10)
	}
	return out
}

// runProvision runs req in a provision-worker child. A root controller runs
// it as a worker uid: one of the node's pool, held for the call, when this
// process is the node plugin too; else the range's last (the node takes
// the lowest free ones first).
func (s *controllerServer) runProvision(ctx context.Context, name string, req provision.Request) error {
	uid := s.d.opts.WorkerUIDs.Last
	if s.d.node != nil {
		key := "provision:" + name
		var err error
		if uid, err = s.d.node.uids.Allocate(key); err != nil {
			return fmt.Errorf("%w: %w", worker.ErrUnavailable, err)
		}
		defer s.d.node.uids.Release(key)
	}
	return provision.Run(ctx, provision.Options{
		Binary: s.d.opts.Worker.Binary, UID: uid, GID: uid, MemoryLimit: s.d.opts.Worker.MemoryLimit,
	}, req)
}

// capacityOf picks the capacity reported for a volume. Remotes have no size;
// the requested one is echoed so that Kubernetes shows what was asked.
func capacityOf(r *csi.CapacityRange) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, status.Error(codes.InvalidArgument, "capacity must not be negative")
	}
	if lim > 0 && req > lim {
		return 0, status.Errorf(codes.OutOfRange, "required bytes %d exceed limit %d", req, lim)
	}
	if req > 0 {
		return req, nil
	}
	return lim, nil
}

func (s *controllerServer) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if !s.locks.tryAcquire(id) {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %q is in progress", id)
	}
	defer s.locks.release(id)
	key := id
	if provision.IsProvisionedID(id) {
		pv, err := s.deleteDir(ctx, id, req.GetSecrets())
		if err != nil {
			return nil, err
		}
		key = pv.Name
	}
	s.mu.Lock()
	delete(s.volumes, key)
	s.mu.Unlock()
	return &csi.DeleteVolumeResponse{}, nil
}

// deleteDir applies the onDelete policy the id records: retain does nothing,
// delete purges the directory, archive renames it. A directory gone already
// is success, so a repeated call succeeds.
func (s *controllerServer) deleteDir(ctx context.Context, id string, secret map[string]string) (*provision.Volume, error) {
	pv, err := provision.ParseID(id)
	if err != nil {
		return nil, statusFor(err, "DeleteVolume")
	}
	if pv.OnDelete == provision.Retain {
		klog.InfoS("volume directory retained", "name", pv.Name, "remote", pv.Remote, "path", pv.Path())
		return pv, nil
	}
	volCtx := map[string]string{
		secrets.KeyRemote:         pv.Remote,
		provision.KeyPVCNamespace: pv.PVCNamespace,
		provision.KeyPVCName:      pv.PVCName,
	}
	vol, err := secrets.Build(ctx, secrets.Source{Secret: secret, VolumeContext: volCtx, VolumeID: pv.Name},
		&s.d.opts.Policy, s.d.opts.Decrypter)
	if err != nil {
		return nil, statusFor(err, "provisioner secret")
	}
	// The id names the place: a secret that names another remote or path
	// must not turn the delete elsewhere.
	if _, ok := vol.Config[pv.Remote]; !ok {
		return nil, status.Errorf(codes.InvalidArgument, "the provisioner secret has no section %q that volume %s was made in", pv.Remote, pv.Name)
	}
	vol.Remote, vol.Path = pv.Remote, pv.Base
	req := provision.Request{Op: provision.OpPurge, Volume: *vol, Dir: pv.Subdir}
	if pv.OnDelete == provision.Archive {
		req.Op, req.To = provision.OpArchive, provision.ArchiveName(pv.Subdir, time.Now())
	}
	if err := s.runProvision(ctx, pv.Name, req); err != nil {
		return nil, statusFor(err, "deleting the volume's directory")
	}
	klog.InfoS("volume directory "+map[string]string{provision.OpPurge: "deleted", provision.OpArchive: "archived"}[req.Op],
		"name", pv.Name, "remote", pv.Remote, "path", pv.Path(), "to", req.To)
	return pv, nil
}

func (s *controllerServer) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	s.mu.Lock()
	_, known := s.volumes[id]
	s.mu.Unlock()
	if _, err := provision.ParseID(id); err == nil {
		known = true // its directory's state is in the id, not in memory
	}
	if !known {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", id)
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// checkCapabilities accepts filesystem volumes in every access mode. The fs
// type is ignored: provisioners fill in a default (ext4) that means nothing here.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	for _, c := range caps {
		if err := checkCapability(c); err != nil {
			return err
		}
	}
	return nil
}

func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return status.Error(codes.InvalidArgument, "volume capability is required")
	}
	if c.GetBlock() != nil {
		return status.Error(codes.InvalidArgument, "block volumes are not supported")
	}
	if c.GetMount() == nil {
		return status.Error(codes.InvalidArgument, "access type mount is required")
	}
	if c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN {
		return status.Error(codes.InvalidArgument, "access mode is required")
	}
	return nil
}

// readOnlyMode reports whether the capability's access mode only reads.
func readOnlyMode(c *csi.VolumeCapability) bool { return readOnlyAccess(c.GetAccessMode().GetMode()) }

func readOnlyAccess(m csi.VolumeCapability_AccessMode_Mode) bool {
	switch m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true
	}
	return false
}
