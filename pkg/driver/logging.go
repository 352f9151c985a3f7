package driver

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/uidpool"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/secrets"
)

// logRPC logs every call with its secrets stripped, and its outcome.
func logRPC(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	klog.V(3).InfoS("call", "method", info.FullMethod, "request", protosanitizer.StripSecrets(sanitize(req)))
	resp, err := handler(ctx, req)
	if err != nil {
		klog.ErrorS(err, "call failed", "method", info.FullMethod, "code", status.Code(err), "duration", time.Since(start))
	} else {
		klog.V(3).InfoS("call done", "method", info.FullMethod, "duration", time.Since(start), "response", protosanitizer.StripSecrets(resp))
	}
	return resp, err
}

// recoverPanic turns a panic in a handler into Internal for that call, so
// that one bad call or record cannot take down the driver and every mount
// of the node with it. The panic and its stack go to the log; the caller
// gets neither, as they may quote a request's values.
func recoverPanic(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			klog.ErrorS(nil, "call panicked", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "%s failed on an internal error; the driver's log has the details", info.FullMethod)
		}
	}()
	return handler(ctx, req)
}

// sanitize hides configData in a volume context or StorageClass parameters:
// it is not a CSI secret field, so protosanitizer leaves it, but it may hold
// credentials when an operator put them there.
func sanitize(req any) any {
	var ctxMap *map[string]string
	msg, ok := req.(proto.Message)
	if !ok {
		return req
	}
	msg = proto.Clone(msg)
	switch r := msg.(type) {
	case *csi.NodeStageVolumeRequest:
		ctxMap = &r.VolumeContext
	case *csi.NodePublishVolumeRequest:
		ctxMap = &r.VolumeContext
	case *csi.CreateVolumeRequest:
		ctxMap = &r.Parameters
	case *csi.ValidateVolumeCapabilitiesRequest:
		ctxMap = &r.VolumeContext
	default:
		return req
	}
	if _, has := (*ctxMap)[secrets.KeyConfigData]; has {
		(*ctxMap)[secrets.KeyConfigData] = protosanitizerStripped
	}
	return msg
}

const protosanitizerStripped = "***stripped***"

// statusFor turns an error from the packages below into a gRPC status.
func statusFor(err error, format string) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, secrets.ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, worker.ErrPermissionDenied), errors.Is(err, secrets.ErrDenied):
		code = codes.PermissionDenied
	case errors.Is(err, worker.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, worker.ErrUnavailable), errors.Is(err, worker.ErrUploadsPending), errors.Is(err, secrets.ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, uidpool.ErrExhausted):
		code = codes.ResourceExhausted
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, userMessage(format, err))
}
