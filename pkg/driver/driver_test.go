package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-rclone/csi-rclone/pkg/uidpool"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/secrets"
)

func TestVolumeLocks(t *testing.T) {
	l := newVolumeLocks()
	if !l.tryAcquire("a") {
		t.Fatal("first acquire failed")
	}
	if l.tryAcquire("a") {
		t.Fatal("second acquire of a held lock succeeded")
	}
	if !l.tryAcquire("b") {
		t.Fatal("another volume's lock is independent")
	}
	l.release("a")
	if !l.tryAcquire("a") {
		t.Fatal("acquire after release failed")
	}
}

func mountCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func TestCreateVolume(t *testing.T) {
	s := newControllerServer(&Driver{opts: Options{DriverName: "test"}})
	ctx := context.Background()
	caps := []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}
	req := func(name string, bytes int64) *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{
			Name: name, VolumeCapabilities: caps,
			CapacityRange: &csi.CapacityRange{RequiredBytes: bytes},
			Parameters:    map[string]string{"remote": "store", "remotePath": "bucket"},
		}
	}
	first, err := s.CreateVolume(ctx, req("pvc-1", 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	if first.Volume.VolumeId != "pvc-1" || first.Volume.CapacityBytes != 1<<30 || first.Volume.VolumeContext["remotePath"] != "bucket" {
		t.Fatalf("volume %v", first.Volume)
	}
	again, err := s.CreateVolume(ctx, req("pvc-1", 1<<30))
	if err != nil || again.Volume.VolumeId != "pvc-1" {
		t.Fatalf("idempotent create: %v, %v", again, err)
	}
	_, err = s.CreateVolume(ctx, req("pvc-1", 2<<30))
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("capacity conflict: %v", err)
	}
	for name, r := range map[string]*csi.CreateVolumeRequest{
		"no name":         {VolumeCapabilities: caps},
		"no capabilities": {Name: "x"},
		"block":           {Name: "x", VolumeCapabilities: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}, AccessMode: caps[0].AccessMode}}},
		"bad provisioner secret": {Name: "x", VolumeCapabilities: caps, Parameters: map[string]string{"remote": "r"},
			Secrets: map[string]string{"configData": "[r]\ntype = local\n"}},
	} {
		if _, err := s.CreateVolume(ctx, r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if _, err := s.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 10, LimitBytes: 5}}); status.Code(err) != codes.OutOfRange {
		t.Errorf("required > limit: %v, want OutOfRange", err)
	}

	if _, err := s.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "pvc-1", VolumeCapabilities: caps}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-1"}); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	_, err = s.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "pvc-1", VolumeCapabilities: caps})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("validate deleted volume: %v", err)
	}
}

func TestStatusFor(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("x: %w", secrets.ErrInvalid), codes.InvalidArgument},
		{&worker.MountError{Kind: worker.ErrPermissionDenied, Message: "403"}, codes.PermissionDenied},
		{&worker.MountError{Kind: worker.ErrNotFound, Message: "no bucket"}, codes.NotFound},
		{&worker.MountError{Kind: worker.ErrUnavailable, Message: "refused"}, codes.Unavailable},
		{fmt.Errorf("%w: 2 files", worker.ErrUploadsPending), codes.Unavailable},
		{fmt.Errorf("%w (1-2)", uidpool.ErrExhausted), codes.ResourceExhausted},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{errors.New("boom"), codes.Internal},
		{status.Error(codes.Aborted, "busy"), codes.Aborted},
	} {
		if got := status.Code(statusFor(tc.err, "op")); got != tc.code {
			t.Errorf("%v: got %v, want %v", tc.err, got, tc.code)
		}
	}
}

func TestSanitizeHidesConfigData(t *testing.T) {
	req := &csi.NodeStageVolumeRequest{
		VolumeId:      "v",
		Secrets:       map[string]string{"configData": "secret-in-secret"},
		VolumeContext: map[string]string{"configData": "secret-in-context", "remote": "store"},
	}
	got := fmt.Sprint(protosanitizer.StripSecrets(sanitize(req)))
	for _, leak := range []string{"secret-in-secret", "secret-in-context"} {
		if strings.Contains(got, leak) {
			t.Errorf("logged request %s holds %q", got, leak)
		}
	}
	if !strings.Contains(got, "store") {
		t.Errorf("logged request %s lost the remote", got)
	}
	if req.VolumeContext["configData"] != "secret-in-context" {
		t.Error("sanitize changed the request itself")
	}
}
