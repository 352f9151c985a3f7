package harness

import (
	"net"

	"google.golang.org/grpc"

	"github.com/csi-rclone/csi-rclone/pkg/secretservice"
)

// SecretService runs the reference secret service over gRPC on a loopback
// port that it keeps across Stop and Start, as an outage would.
type SecretService struct {
	Server *secretservice.Server
	// Addr is host:port; set after the first Start.
	Addr string
	g    *grpc.Server
}

// StartSecretService serves srv on a free loopback port.
func StartSecretService(srv *secretservice.Server) (*SecretService, error) {
	s := &SecretService{Server: srv, Addr: "127.0.0.1:0"}
	return s, s.Start()
}

// Start serves again on the same address.
func (s *SecretService) Start() error {
	lis, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	s.Addr = lis.Addr().String()
	s.g = grpc.NewServer()
	s.Server.Register(s.g)
	go func() { _ = s.g.Serve(lis) }()
	return nil
}

// Stop stops serving; a no-op when stopped.
func (s *SecretService) Stop() {
	if s.g != nil {
		s.g.Stop()
		s.g = nil
	}
}
