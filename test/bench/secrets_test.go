package bench

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/csi-rclone/csi-rclone/test/testpki"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
	"github.com/csi-rclone/csi-rclone/pkg/secretservice"
	pb "github.com/csi-rclone/csi-rclone/proto/secretservice/v1"
	"github.com/csi-rclone/csi-rclone/secrets"
	"github.com/csi-rclone/csi-rclone/secrets/client"
	"github.com/csi-rclone/csi-rclone/test/bench/benchkit"
)

const (
	ssIssuer   = "csi-rclone-bench"
	ssAudience = "bench-secret-service"
)

// BenchmarkSecretService: Decrypt of a stage secret with one encrypted
// value (RSA-2048 envelope), -bench.calls calls by -bench.concurrency
// callers, with the driver's client (a fresh ES256 token per call) against
// the reference secret service on loopback over gRPC and over HTTP/JSON;
// against the same work in process (sign a token, verify it, decrypt) with
// no transport. Client and server share the machine's cores.
func BenchmarkSecretService(b *testing.B) {
	dir := filepath.Join(root(b), "secrets")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	rsaKey, ecKey := testpki.RSAKey(b), testpki.ECKey(b)
	keyFile := testpki.WritePrivateKey(b, dir, "signing-key.pem", ecKey)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	verifier, err := secretservice.NewJWTVerifier(ctx, secretservice.JWTOptions{
		PublicKeys: []crypto.PublicKey{&ecKey.PublicKey}, Issuer: ssIssuer, Audience: ssAudience,
	})
	if err != nil {
		b.Fatal(err)
	}
	srv := secretservice.New(secretservice.Options{PrivateKey: rsaKey, Verifier: verifier, AllowedNamespaces: []string{"alice"}})

	grpcLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(grpcLis) }()
	defer g.Stop()

	httpLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: srv.HTTPHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(httpLis) }()
	defer hs.Close()

	ct, err := envelope.Seal(&rsaKey.PublicKey, envelope.Context{Namespace: "alice", Option: "secret_access_key", Host: "127.0.0.1"},
		[]byte("csi-rclone-bench-secret-access-key"))
	if err != nil {
		b.Fatal(err)
	}
	req := secrets.DecryptRequest{VolumeID: "bench-vol", PVCNamespace: "alice", PVCName: "data",
		Ciphertexts: map[string]string{"secret_access_key": ct},
		Contexts:    map[string]secrets.UseContext{"secret_access_key": {Option: "secret_access_key", Host: "127.0.0.1"}}}
	token, err := client.NewSignedToken(keyFile, ssIssuer, "node:bench-node", ssAudience, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}

	for _, tr := range []struct{ name, endpoint string }{
		{"grpc", "grpc://" + grpcLis.Addr().String()},
		{"http", "http://" + httpLis.Addr().String()},
	} {
		b.Run(tr.name, func(b *testing.B) {
			c, err := client.New(client.Options{Endpoint: tr.endpoint, Token: token, Timeout: 10 * time.Second, Attempts: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			callers(b, func(ctx context.Context) error {
				out, err := c.Decrypt(ctx, req)
				if err == nil && out["secret_access_key"] == "" {
					err = errors.New("no plaintext")
				}
				return err
			})
		})
	}

	b.Run("in-process", func(b *testing.B) {
		in := &pb.DecryptRequest{VolumeId: req.VolumeID, PvcNamespace: req.PVCNamespace, PvcName: req.PVCName, Ciphertexts: req.Ciphertexts,
			Contexts: map[string]*pb.UseContext{"secret_access_key": {Option: "secret_access_key", Host: "127.0.0.1"}}}
		inProcess(b, func(ctx context.Context) error {
			tok, err := token.Token(ctx)
			if err != nil {
				return err
			}
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+tok))
			out, err := srv.Decrypt(ctx, in)
			if err == nil && out.GetPlaintexts()["secret_access_key"] == "" {
				err = errors.New("no plaintext")
			}
			return err
		})
	})
}

// callers runs call by one caller (the latency of a call alone) and by
// -bench.concurrency callers (throughput, and latency under load).
func callers(b *testing.B, call func(context.Context) error) {
	b.Run("callers=1", func(b *testing.B) { hammer(b, call, max(1, *flagCalls/4), 1) })
	if c := max(1, *flagConc); c > 1 {
		b.Run(fmt.Sprintf("callers=%d", c), func(b *testing.B) { hammer(b, call, *flagCalls, c) })
	}
}

// inProcess runs call by one caller and by one caller per core: the
// ceiling of the machine. (More callers than cores would only measure how
// Go time-slices goroutines that never block.)
func inProcess(b *testing.B, call func(context.Context) error) {
	b.Run("callers=1", func(b *testing.B) { hammer(b, call, max(1, *flagCalls/4), 1) })
	b.Run("callers=ncpu", func(b *testing.B) { hammer(b, call, *flagCalls, runtime.GOMAXPROCS(0)) })
}

// hammer makes calls calls of call from conc goroutines after a short
// warm-up, and reports calls/s, p50 and p99.
func hammer(b *testing.B, call func(context.Context) error, calls, conc int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := 0; i < 2*conc; i++ {
		if err := call(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	lat := make([][]time.Duration, conc)
	errs := make([]error, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(calls) && ctx.Err() == nil {
				t0 := time.Now()
				if err := call(ctx); err != nil {
					errs[w] = err
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) != calls {
		b.Fatalf("%d calls made of %d (%v)", len(all), calls, ctx.Err())
	}
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(calls), "ns/op")
	b.ReportMetric(float64(calls)/elapsed.Seconds(), "calls/s")
	b.ReportMetric(float64(conc), "callers")
	b.ReportMetric(benchkit.Ms(benchkit.Percentile(all, 0.50)), "p50-ms")
	b.ReportMetric(benchkit.Ms(benchkit.Percentile(all, 0.99)), "p99-ms")
}
