package registration

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// startRegistration runs a Server in a temp dir, as the kubelet's
// plugins_registry, and returns a client connected the way the kubelet
// connects: over the unix socket.
func startRegistration(t *testing.T, opts Options) (*Server, registerapi.RegistrationClient, func()) {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitSocket(t, s.SocketPath())
	conn, err := grpc.NewClient("unix://"+s.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	stop := func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	return s, registerapi.NewRegistrationClient(conn), stop
}

func waitSocket(t *testing.T, path string) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("socket %s never answered", path)
}

func TestGetInfo(t *testing.T) {
	for _, tc := range []struct {
		name     string
		versions []string
		want     []string
	}{
		{"default version", nil, []string{"1.0.0"}},
		{"given versions", []string{"1.0.0", "1.1.0"}, []string{"1.0.0", "1.1.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, c, stop := startRegistration(t, Options{
				DriverName:      "csi-rclone",
				KubeletEndpoint: "/var/lib/kubelet/plugins/csi-rclone/csi.sock",
				Dir:             dir,
				Versions:        tc.versions,
			})
			defer stop()
			info, err := c.GetInfo(context.Background(), &registerapi.InfoRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if info.Type != registerapi.CSIPlugin || info.Name != "csi-rclone" || info.Endpoint != "/var/lib/kubelet/plugins/csi-rclone/csi.sock" {
				t.Errorf("GetInfo = %+v", info)
			}
			if len(info.SupportedVersions) != len(tc.want) {
				t.Fatalf("versions = %v, want %v", info.SupportedVersions, tc.want)
			}
			for i := range tc.want {
				if info.SupportedVersions[i] != tc.want[i] {
					t.Errorf("versions = %v, want %v", info.SupportedVersions, tc.want)
				}
			}
		})
	}
}

func TestNotifyRegistrationStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *registerapi.RegistrationStatus
		want Status
	}{
		{"registered", &registerapi.RegistrationStatus{PluginRegistered: true}, Status{Notified: true, Registered: true}},
		{"refused", &registerapi.RegistrationStatus{Error: "version not supported"}, Status{Notified: true, Error: "version not supported"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c, stop := startRegistration(t, Options{DriverName: "d", KubeletEndpoint: "/k/csi.sock", Dir: t.TempDir()})
			defer stop()
			if s.Status().Notified {
				t.Fatal("notified before the kubelet said anything")
			}
			if _, err := c.NotifyRegistrationStatus(context.Background(), tc.in); err != nil {
				t.Fatal(err)
			}
			if got := s.Status(); got != tc.want {
				t.Errorf("Status = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A socket left behind by a killed plugin is replaced; a stopped server
// removes its socket, so the kubelet deregisters the plugin.
func TestSocketLifecycle(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "d-reg.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("stale socket not left: %v", err)
	}
	s, c, stop := startRegistration(t, Options{DriverName: "d", KubeletEndpoint: "/k/csi.sock", Dir: dir})
	if s.SocketPath() != stale {
		t.Fatalf("socket %s, want %s", s.SocketPath(), stale)
	}
	if _, err := c.GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
	stop()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("socket still there after stop: %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"no name", Options{KubeletEndpoint: "/k/csi.sock", Dir: "/r"}},
		{"no endpoint", Options{DriverName: "d", Dir: "/r"}},
		{"relative endpoint", Options{DriverName: "d", KubeletEndpoint: "csi.sock", Dir: "/r"}},
		{"no dir", Options{DriverName: "d", KubeletEndpoint: "/k/csi.sock"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.opts); err == nil {
				t.Error("New accepted it")
			}
		})
	}
}

type identity struct {
	csi.UnimplementedIdentityServer
	ready atomic.Bool
}

func (i *identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(i.ready.Load())}, nil
}

// The health endpoint asks a real CSI Identity server over its unix socket.
func TestHealthz(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	id := &identity{}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, id)
	go srv.Serve(lis)
	probe, closeProbe, err := CSIProber("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	defer closeProbe()
	h := httptest.NewServer(HealthHandler(probe, 2*time.Second))
	defer h.Close()

	for _, tc := range []struct {
		name  string
		setup func()
		want  int
	}{
		{"not ready", func() { id.ready.Store(false) }, http.StatusInternalServerError},
		{"ready", func() { id.ready.Store(true) }, http.StatusOK},
		{"driver gone", func() { srv.Stop() }, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup()
			resp, err := http.Get(h.URL + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}
