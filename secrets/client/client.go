// Package client talks to the secret service: it sends the ciphertexts of a
// stage secret and gets their plaintexts back, authenticated with a
// short-lived JWT. The transport follows the endpoint's scheme:
//
//	grpcs://host:port   gRPC over TLS
//	grpc://host:port    gRPC without TLS (loopback and tests only)
//	unix:///path        gRPC on a unix socket
//	https://host[/base] HTTP/JSON over TLS: POST <base>/v1/decrypt
//	http://host[/base]  HTTP/JSON without TLS
//
// Each attempt has a deadline; Unavailable is retried with backoff.
package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	pb "github.com/csi-rclone/csi-rclone/proto/secretservice/v1"
	"github.com/csi-rclone/csi-rclone/secrets"
)

// Options configure a Client.
type Options struct {
	// Endpoint is the secret service's address, its scheme picks the transport.
	Endpoint string
	// CAFile verifies the service's TLS certificate; empty uses the system roots.
	CAFile string
	// Token gives the JWT sent with each call.
	Token TokenSource
	// Timeout bounds one attempt (default 10s).
	Timeout time.Duration
	// Attempts is how often an Unavailable call is tried (default 5).
	Attempts int
	// Backoff is the wait before the second attempt, doubled after each
	// (default 200ms).
	Backoff time.Duration
}

// maxBackoff caps the wait between attempts.
const maxBackoff = 5 * time.Second

// transport makes one Decrypt call and answers gRPC status errors.
type transport interface {
	decrypt(ctx context.Context, token string, req *pb.DecryptRequest) (*pb.DecryptResponse, error)
	close() error
}

// Client is a secrets.Decrypter.
type Client struct {
	opts Options
	t    transport
}

// New makes a client; it does not connect yet.
func New(opts Options) (*Client, error) {
	if opts.Token == nil {
		return nil, errors.New("secret service: a token source is required")
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Attempts == 0 {
		opts.Attempts = 5
	}
	if opts.Backoff == 0 {
		opts.Backoff = 200 * time.Millisecond
	}
	u, err := url.Parse(opts.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("secret service endpoint: %w", err)
	}
	var tlsConf *tls.Config
	if u.Scheme == "grpcs" || u.Scheme == "https" {
		if tlsConf, err = tlsConfig(opts.CAFile); err != nil {
			return nil, err
		}
	}
	var t transport
	switch u.Scheme {
	case "grpc", "grpcs":
		t, err = newGRPC(u.Host, tlsConf)
	case "unix":
		t, err = newGRPC("unix://"+u.Path, nil)
	case "http", "https":
		t = newHTTP(strings.TrimSuffix(opts.Endpoint, "/")+"/v1/decrypt", tlsConf)
	default:
		return nil, fmt.Errorf("secret service endpoint %q: scheme must be grpcs, grpc, unix, https or http", opts.Endpoint)
	}
	if err != nil {
		return nil, err
	}
	return &Client{opts: opts, t: t}, nil
}

func tlsConfig(caFile string) (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return conf, nil
	}
	pemData, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("secret service CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, fmt.Errorf("secret service CA %s: no certificate", caFile)
	}
	conf.RootCAs = pool
	return conf, nil
}

// Close releases the connection.
func (c *Client) Close() error { return c.t.close() }

// Decrypt implements secrets.Decrypter.
func (c *Client) Decrypt(ctx context.Context, req secrets.DecryptRequest) (map[string]string, error) {
	in := &pb.DecryptRequest{
		VolumeId: req.VolumeID, PvcNamespace: req.PVCNamespace, PvcName: req.PVCName, Ciphertexts: req.Ciphertexts,
		Contexts: make(map[string]*pb.UseContext, len(req.Contexts)),
	}
	for id, c := range req.Contexts {
		in.Contexts[id] = &pb.UseContext{Option: c.Option, Host: c.Host}
	}
	wait := c.opts.Backoff
	var err error
	for attempt := 1; ; attempt++ {
		var resp *pb.DecryptResponse
		resp, err = c.once(ctx, in)
		if err == nil {
			return resp.GetPlaintexts(), nil
		}
		if status.Code(err) != codes.Unavailable || attempt >= c.opts.Attempts {
			break
		}
		klog.V(2).InfoS("secret service unavailable, retrying", "attempt", attempt, "wait", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v", secrets.ErrUnavailable, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, maxBackoff)
	}
	return nil, classify(err)
}

func (c *Client) once(ctx context.Context, req *pb.DecryptRequest) (*pb.DecryptResponse, error) {
	token, err := c.opts.Token.Token(ctx)
	if err != nil {
		// The projected token may not be written yet: a retry may help.
		return nil, status.Errorf(codes.Unavailable, "getting a token: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	resp, err := c.t.decrypt(ctx, token, req)
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
		return nil, status.Errorf(codes.Unavailable, "no answer in %s", c.opts.Timeout)
	}
	return resp, err
}

// classify wraps a final status error with the secrets error kind that the
// driver turns into its own gRPC code.
func classify(err error) error {
	st := status.Convert(err)
	var kind error
	switch st.Code() {
	case codes.InvalidArgument:
		kind = secrets.ErrInvalid
	case codes.Unauthenticated, codes.PermissionDenied:
		kind = secrets.ErrDenied
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
		kind = secrets.ErrUnavailable
	default:
		return fmt.Errorf("secret service: %s: %s", st.Code(), st.Message())
	}
	return fmt.Errorf("%w: %s: %s", kind, st.Code(), st.Message())
}
