// Package registration does the two jobs the node plugin's sidecars do where
// their images cannot be had: it registers the driver with the kubelet
// through the plugin-registration socket (node-driver-registrar's job), and
// serves /healthz from the driver's Identity Probe (livenessprobe's job).
package registration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Options describe the driver to the kubelet.
type Options struct {
	// DriverName is the CSI driver's name, as in the CSIDriver object.
	DriverName string
	// KubeletEndpoint is the path of the driver's CSI socket as the kubelet
	// sees it on the host, e.g. /var/lib/kubelet/plugins/csi-rclone/csi.sock.
	KubeletEndpoint string
	// Dir is the kubelet's plugins_registry directory as this process sees
	// it; the socket is Dir/<DriverName>-reg.sock.
	Dir string
	// Versions are the CSI versions the driver supports; default 1.0.0.
	Versions []string
}

// Status is what the kubelet last said about the registration.
type Status struct {
	Notified   bool
	Registered bool
	Error      string
}

// Server answers the kubelet's plugin watcher.
type Server struct {
	registerapi.UnimplementedRegistrationServer
	opts Options

	mu     sync.Mutex
	status Status
}

// New checks opts.
func New(opts Options) (*Server, error) {
	if opts.DriverName == "" || opts.KubeletEndpoint == "" || opts.Dir == "" {
		return nil, errors.New("registration: driver name, kubelet endpoint and registration dir are required")
	}
	if !filepath.IsAbs(opts.KubeletEndpoint) {
		return nil, fmt.Errorf("registration: kubelet endpoint %q: want an absolute path", opts.KubeletEndpoint)
	}
	if len(opts.Versions) == 0 {
		opts.Versions = []string{"1.0.0"}
	}
	return &Server{opts: opts}, nil
}

// SocketPath is where the kubelet finds the registration socket.
func (s *Server) SocketPath() string {
	return filepath.Join(s.opts.Dir, s.opts.DriverName+"-reg.sock")
}

// Status returns the kubelet's last notification.
func (s *Server) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// GetInfo tells the kubelet what plugin this is and where its CSI socket is.
func (s *Server) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	klog.V(2).InfoS("kubelet asked for plugin info", "driver", s.opts.DriverName)
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.opts.DriverName,
		Endpoint:          s.opts.KubeletEndpoint,
		SupportedVersions: s.opts.Versions,
	}, nil
}

// NotifyRegistrationStatus records and logs the kubelet's verdict.
func (s *Server) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	s.mu.Lock()
	s.status = Status{Notified: true, Registered: st.GetPluginRegistered(), Error: st.GetError()}
	s.mu.Unlock()
	if st.GetPluginRegistered() {
		klog.InfoS("registered with the kubelet", "driver", s.opts.DriverName, "endpoint", s.opts.KubeletEndpoint)
	} else {
		klog.ErrorS(errors.New(st.GetError()), "the kubelet refused the registration", "driver", s.opts.DriverName)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Run serves the registration socket until ctx ends, then removes it so that
// the kubelet deregisters the plugin only when this process goes away.
func (s *Server) Run(ctx context.Context) error {
	path := s.SocketPath()
	if err := os.MkdirAll(s.opts.Dir, 0o750); err != nil {
		return fmt.Errorf("registration dir: %w", err)
	}
	// A socket left by a killed predecessor would refuse connections.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale registration socket: %w", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("registration socket: %w", err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, s)
	klog.InfoS("serving plugin registration", "socket", path, "driver", s.opts.DriverName)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case <-ctx.Done():
		srv.Stop()
		<-errc
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing registration socket: %w", err)
		}
		return nil
	case err := <-errc:
		return fmt.Errorf("registration server: %w", err)
	}
}
