package main

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
	"github.com/csi-rclone/csi-rclone/pkg/secretservice"
)

// listFlag is a repeatable flag that also takes comma-separated values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

type serveFlags struct {
	privateKey, grpcAddr, httpAddr, tlsCert, tlsKey string
	jwtKeys                                         listFlag
	previousKeys                                    listFlag
	jwksURL, jwksCA, issuer, audience               string
	tokenReview, allowUnbound                       bool
	tokenReviewAudiences                            listFlag
	namespaces, subjects                            listFlag
	shutdownTimeout                                 time.Duration
}

func serve(args []string) error {
	fl := flag.NewFlagSet("serve", flag.ContinueOnError)
	klog.InitFlags(fl)
	var f serveFlags
	fl.StringVar(&f.privateKey, "private-key", "", "the service's RSA private key (PEM); required")
	fl.Var(&f.previousKeys, "previous-private-key", "RSA private keys (PEM) of before a rotation, still accepted for decryption (repeatable, comma list)")
	fl.StringVar(&f.grpcAddr, "grpc-listen", ":8443", "gRPC address; empty: no gRPC")
	fl.StringVar(&f.httpAddr, "http-listen", ":8080", "HTTP/JSON address; empty: no HTTP")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate (PEM) for both transports; read again when it changes")
	fl.StringVar(&f.tlsKey, "tls-key", "", "TLS private key (PEM)")
	fl.Var(&f.jwtKeys, "jwt-public-key", "PEM file(s) of public keys or certificates that verify JWTs (repeatable, comma list)")
	fl.StringVar(&f.jwksURL, "jwks-url", "", "JWK Set URL that verifies JWTs")
	fl.StringVar(&f.jwksCA, "jwks-ca", "", "CA bundle (PEM) that verifies the JWKS server; empty: system roots")
	fl.StringVar(&f.issuer, "jwt-issuer", "", "required JWT issuer (iss)")
	fl.StringVar(&f.audience, "jwt-audience", "", "required JWT audience (aud)")
	fl.BoolVar(&f.tokenReview, "token-review", false, "verify tokens with a Kubernetes TokenReview (in-cluster credentials)")
	fl.Var(&f.tokenReviewAudiences, "token-review-audiences", "audiences the TokenReview requires (comma list)")
	fl.Var(&f.namespaces, "allowed-namespaces", "PVC namespaces callers may decrypt for (comma list); empty: any")
	fl.Var(&f.subjects, "allowed-subjects", "token subjects that may decrypt (comma list); empty: any authenticated caller")
	fl.BoolVar(&f.allowUnbound, "allow-unbound-ciphertexts", false, "also decrypt v1 values, which are not bound to a namespace, option and host (weaker: a copied value decrypts anywhere); only while re-encrypting")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long to finish calls in flight after SIGTERM")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	if f.privateKey == "" {
		return errors.New("--private-key is required")
	}
	if f.grpcAddr == "" && f.httpAddr == "" {
		return errors.New("--grpc-listen and --http-listen are both empty")
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	priv, err := envelope.ReadPrivateKey(f.privateKey)
	if err != nil {
		return err
	}
	var previous []*rsa.PrivateKey
	for _, path := range f.previousKeys {
		k, err := envelope.ReadPrivateKey(path)
		if err != nil {
			return err
		}
		previous = append(previous, k)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	verifier, err := f.verifier(ctx)
	if err != nil {
		return err
	}
	srv := secretservice.New(secretservice.Options{
		PrivateKey: priv, PreviousKeys: previous, Verifier: verifier, AllowedNamespaces: f.namespaces, AllowedSubjects: f.subjects,
		AllowUnbound: f.allowUnbound,
	})
	if f.allowUnbound {
		klog.InfoS("WARNING: --allow-unbound-ciphertexts: v1 values decrypt in any namespace and for any remote; re-encrypt them with a context")
	}

	var tlsConf *tls.Config
	if f.tlsCert != "" {
		r := &certReloader{certFile: f.tlsCert, keyFile: f.tlsKey}
		if _, err := r.get(nil); err != nil {
			return err
		}
		tlsConf = &tls.Config{GetCertificate: r.get, MinVersion: tls.VersionTLS12}
	} else {
		klog.InfoS("WARNING: serving without TLS: tokens and plaintexts cross the network in the clear")
	}

	// Listen on both before serving either, so a bad address fails at once.
	var grpcLis, httpLis net.Listener
	if f.grpcAddr != "" {
		if grpcLis, err = net.Listen("tcp", f.grpcAddr); err != nil {
			return err
		}
	}
	if f.httpAddr != "" {
		if httpLis, err = net.Listen("tcp", f.httpAddr); err != nil {
			return err
		}
	}
	errc := make(chan error, 2)
	var g *grpc.Server
	if grpcLis != nil {
		var opts []grpc.ServerOption
		if tlsConf != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConf)))
		}
		g = grpc.NewServer(opts...)
		srv.Register(g)
		healthpb.RegisterHealthServer(g, health.NewServer())
		go func() { errc <- fmt.Errorf("gRPC: %w", g.Serve(grpcLis)) }()
	}
	var h *http.Server
	if httpLis != nil {
		mux := http.NewServeMux()
		mux.Handle("/v1/", srv.HTTPHandler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		h = &http.Server{
			Handler: mux, TLSConfig: tlsConf,
			ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
		}
		go func() {
			if tlsConf != nil {
				errc <- fmt.Errorf("HTTP: %w", h.ServeTLS(httpLis, "", ""))
			} else {
				errc <- fmt.Errorf("HTTP: %w", h.Serve(httpLis))
			}
		}()
	}
	klog.InfoS("Secret service serving", "grpc", f.grpcAddr, "http", f.httpAddr, "tls", tlsConf != nil,
		"allowedNamespaces", f.namespaces, "allowedSubjects", f.subjects)

	select {
	case <-ctx.Done():
		klog.InfoS("Shutting down")
		err = nil
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	if h != nil {
		_ = h.Shutdown(sctx)
	}
	if g != nil {
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-sctx.Done():
			g.Stop()
		}
	}
	return err
}

// verifier builds the one configured kind of token verification.
func (f *serveFlags) verifier(ctx context.Context) (secretservice.Verifier, error) {
	kinds := 0
	for _, set := range []bool{len(f.jwtKeys) > 0, f.jwksURL != "", f.tokenReview} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		return nil, errors.New("configure exactly one of --jwt-public-key, --jwks-url and --token-review")
	}
	if f.tokenReview {
		if f.issuer != "" || f.audience != "" {
			return nil, errors.New("--jwt-issuer and --jwt-audience do not apply to --token-review; use --token-review-audiences")
		}
		if len(f.tokenReviewAudiences) == 0 {
			klog.InfoS("WARNING: --token-review without --token-review-audiences accepts any token of the cluster, e.g. any pod's API token")
		}
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("--token-review: %w", err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("--token-review: %w", err)
		}
		return secretservice.NewTokenReviewVerifier(cs, f.tokenReviewAudiences), nil
	}
	o := secretservice.JWTOptions{JWKSURL: f.jwksURL, Issuer: f.issuer, Audience: f.audience}
	for _, path := range f.jwtKeys {
		keys, err := readPublicKeys(path)
		if err != nil {
			return nil, err
		}
		o.PublicKeys = append(o.PublicKeys, keys...)
	}
	if f.jwksCA != "" {
		pemData, err := os.ReadFile(f.jwksCA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemData) {
			return nil, fmt.Errorf("%s: no certificate", f.jwksCA)
		}
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}}
	}
	return secretservice.NewJWTVerifier(ctx, o)
}

// readPublicKeys reads every public key (PKIX or PKCS#1) or certificate in
// a PEM file, so one file can hold the old and the new key of a rotation.
func readPublicKeys(path string) ([]crypto.PublicKey, error) {
	rest, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys []crypto.PublicKey
	for {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		var k crypto.PublicKey
		switch block.Type {
		case "CERTIFICATE":
			var c *x509.Certificate
			if c, err = x509.ParseCertificate(block.Bytes); err == nil {
				k = c.PublicKey
			}
		case "RSA PUBLIC KEY":
			k, err = x509.ParsePKCS1PublicKey(block.Bytes)
		default:
			k, err = x509.ParsePKIXPublicKey(block.Bytes)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, block.Type, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no PEM public key", path)
	}
	return keys, nil
}

// certReloader loads the key pair again when the certificate file changes:
// cert-manager and the kubelet rotate a mounted Secret in place.
type certReloader struct {
	certFile, keyFile string
	mu                sync.Mutex
	mod               time.Time
	cert              *tls.Certificate
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fi, err := os.Stat(r.certFile)
	if err == nil && r.cert != nil && fi.ModTime().Equal(r.mod) {
		return r.cert, nil
	}
	var c tls.Certificate
	if err == nil {
		c, err = tls.LoadX509KeyPair(r.certFile, r.keyFile)
	}
	if err != nil {
		// Mid-rotation the pair can be inconsistent for a moment.
		if r.cert != nil {
			klog.ErrorS(err, "Reloading the TLS certificate; keeping the current one")
			return r.cert, nil
		}
		return nil, err
	}
	r.cert, r.mod = &c, fi.ModTime()
	return r.cert, nil
}
