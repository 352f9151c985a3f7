package driver

import (
	"context"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-rclone/csi-rclone/secrets"
)

// controllerServer provisions nothing on the storage: a volume is a view of
// a remote described by its parameters and secret. CreateVolume records the
// name and capacity so that a repeated call is idempotent and a conflicting
// one is refused; it never deletes or creates data.
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

func (s *controllerServer) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
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
	// A provisioner secret, when the StorageClass names one, is checked now so
	// that a bad config fails the PVC rather than the pod.
	if _, has := req.GetSecrets()[secrets.KeyConfigData]; has {
		if err := secrets.Check(req.GetSecrets(), req.GetParameters(), &s.d.opts.Policy); err != nil {
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
	v := &csi.Volume{VolumeId: name, CapacityBytes: capacity, VolumeContext: req.GetParameters()}
	s.volumes[name] = v
	return &csi.CreateVolumeResponse{Volume: v}, nil
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

func (s *controllerServer) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if !s.locks.tryAcquire(id) {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %q is in progress", id)
	}
	defer s.locks.release(id)
	s.mu.Lock()
	delete(s.volumes, id)
	s.mu.Unlock()
	return &csi.DeleteVolumeResponse{}, nil
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
