package registration

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
)

// Prober says whether the driver is ready.
type Prober func(ctx context.Context) (bool, error)

// CSIProber calls the Identity Probe on the driver's CSI endpoint
// ("unix:///path/csi.sock"), as livenessprobe does: a hung or dead gRPC
// server fails the probe, not only a driver that says not ready.
func CSIProber(endpoint string) (Prober, func() error, error) {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("csi endpoint %q: %w", endpoint, err)
	}
	client := csi.NewIdentityClient(conn)
	probe := func(ctx context.Context) (bool, error) {
		resp, err := client.Probe(ctx, &csi.ProbeRequest{})
		if err != nil {
			return false, fmt.Errorf("probe: %w", err)
		}
		// An unset Ready means ready (CSI spec).
		return resp.GetReady() == nil || resp.GetReady().GetValue(), nil
	}
	return probe, conn.Close, nil
}

// HealthHandler answers /healthz with 200 when probe says ready within
// timeout, 500 otherwise.
func HealthHandler(probe Prober, timeout time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		ready, err := probe(ctx)
		switch {
		case err != nil:
			klog.V(4).InfoS("health check failed", "err", err)
			http.Error(w, "probe failed: "+err.Error(), http.StatusInternalServerError)
		case !ready:
			http.Error(w, "driver not ready", http.StatusInternalServerError)
		default:
			_, _ = w.Write([]byte("ok"))
		}
	})
	return mux
}

// ServeHealth serves HealthHandler on addr until ctx ends.
func ServeHealth(ctx context.Context, addr string, probe Prober, timeout time.Duration) error {
	srv := &http.Server{Addr: addr, Handler: HealthHandler(probe, timeout), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	klog.InfoS("serving health", "address", addr)
	select {
	case <-ctx.Done():
		_ = srv.Close()
		return nil
	case err := <-errc:
		return fmt.Errorf("health server: %w", err)
	}
}
