package client

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csi-rclone/csi-rclone/test/testpki"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
	"github.com/csi-rclone/csi-rclone/pkg/secretservice"
	"github.com/csi-rclone/csi-rclone/secrets"
)

const (
	testIssuer   = "csi-rclone-node"
	testAudience = "csi-rclone-secret-service"
	testSubject  = "system:serviceaccount:kube-system:csi-rclone-node"
	allowedNS    = "team-a"
)

// fixture is everything both transports share: the service's envelope key,
// the driver's JWT signing keys, and the TLS material.
type fixture struct {
	serviceKey *rsa.PrivateKey
	srv        *secretservice.Server
	serverTLS  *tls.Config
	// caFile is the CA of the server certificate; otherCAFile another CA.
	caFile, otherCAFile string
	// ecKeyFile and rsaKeyFile are trusted by the service; untrustedKeyFile
	// is not.
	ecKeyFile, rsaKeyFile, untrustedKeyFile string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{serviceKey: testpki.RSAKey(t)}

	ecKey, rsaKey := testpki.ECKey(t), testpki.RSAKey(t)
	// Each format NewSignedToken reads: PKCS#8, SEC 1, PKCS#1.
	f.ecKeyFile = testpki.WritePEM(t, dir, "ec.pem", "EC PRIVATE KEY", must(x509.MarshalECPrivateKey(ecKey)))
	f.rsaKeyFile = testpki.WritePEM(t, dir, "rsa.pem", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey))
	f.untrustedKeyFile = testpki.WritePEM(t, dir, "untrusted.pem", "PRIVATE KEY", must(x509.MarshalPKCS8PrivateKey(testpki.ECKey(t))))

	v, err := secretservice.NewJWTVerifier(t.Context(), secretservice.JWTOptions{
		PublicKeys: []crypto.PublicKey{&ecKey.PublicKey, &rsaKey.PublicKey},
		Issuer:     testIssuer, Audience: testAudience,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = secretservice.New(secretservice.Options{
		PrivateKey: f.serviceKey, Verifier: v,
		AllowedNamespaces: []string{allowedNS}, AllowedSubjects: []string{testSubject},
	})

	var caPEM []byte
	f.serverTLS, _, caPEM = testpki.ServerTLS(t)
	f.caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(f.caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, otherPEM := testpki.ServerTLS(t)
	f.otherCAFile = filepath.Join(dir, "other-ca.pem")
	if err := os.WriteFile(f.otherCAFile, otherPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// transportKind starts the service on a listener and names the endpoint.
type transportKind struct {
	name  string
	start func(t *testing.T, f *fixture, lis net.Listener) (endpoint string)
}

var tlsTransports = []transportKind{
	{"grpcs", func(t *testing.T, f *fixture, lis net.Listener) string {
		g := grpc.NewServer(grpc.Creds(credentials.NewTLS(f.serverTLS)))
		f.srv.Register(g)
		go func() { _ = g.Serve(lis) }()
		t.Cleanup(g.Stop)
		return "grpcs://" + lis.Addr().String()
	}},
	{"https", func(t *testing.T, f *fixture, lis net.Listener) string {
		ts := httptest.NewUnstartedServer(f.srv.HTTPHandler())
		_ = ts.Listener.Close()
		ts.Listener = lis
		ts.TLS = f.serverTLS.Clone()
		ts.StartTLS()
		t.Cleanup(ts.Close)
		return ts.URL
	}},
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// recorder is a TokenSource that remembers every token it handed out, so
// that error messages can be checked for them and attempts counted.
type recorder struct {
	src    TokenSource
	mu     sync.Mutex
	tokens []string
}

func (r *recorder) Token(ctx context.Context) (string, error) {
	tok, err := r.src.Token(ctx)
	if err == nil {
		r.mu.Lock()
		r.tokens = append(r.tokens, tok)
		r.mu.Unlock()
	}
	return tok, err
}

func (r *recorder) issued() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.tokens...)
}

func signed(t *testing.T, keyFile, issuer, audience string, mod func(*SignedToken)) *SignedToken {
	t.Helper()
	s, err := NewSignedToken(keyFile, issuer, testSubject, audience, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if mod != nil {
		mod(s)
	}
	return s
}

func TestDecryptTLS(t *testing.T) {
	f := newFixture(t)
	plain := map[string]string{
		"store/secret_access_key": "s3-secret-Ab9/+x",
		"/password":               "pässwörd with spaces",
		"crypt/password2":         "salt-" + strings.Repeat("z", 300),
	}
	cts := map[string]string{}
	for id, p := range plain {
		cts[id] = encrypt(t, &f.serviceKey.PublicKey, id, p)
	}
	tampered := tamper(cts["/password"])
	otherServiceCT := encrypt(t, &testpki.RSAKey(t).PublicKey, "/x", "for another service")
	moved := map[string]string{"/secret_access_key": cts["/password"]}
	otherHost := map[string]secrets.UseContext{"/password": {Option: "password", Host: "tenant.example"}}

	tests := []struct {
		name  string
		token func(t *testing.T) TokenSource
		ca    string // default f.caFile
		ns    string
		cts   map[string]string
		uses  map[string]secrets.UseContext // default: usesOf(cts)
		want  map[string]string
		kind  error // nil: success; errAny: any error
	}{
		{name: "success EC key", ns: allowedNS, cts: cts, want: plain},
		{name: "success RSA key", token: func(t *testing.T) TokenSource {
			return signed(t, f.rsaKeyFile, testIssuer, testAudience, nil)
		}, ns: allowedNS, cts: map[string]string{"/password": cts["/password"]}, want: map[string]string{"/password": plain["/password"]}},
		{name: "expired token", token: func(t *testing.T) TokenSource {
			return signed(t, f.ecKeyFile, testIssuer, testAudience, func(s *SignedToken) {
				s.now = func() time.Time { return time.Now().Add(-time.Hour) }
			})
		}, ns: allowedNS, cts: cts, kind: secrets.ErrDenied},
		{name: "wrong audience", token: func(t *testing.T) TokenSource {
			return signed(t, f.ecKeyFile, testIssuer, "kubernetes", nil)
		}, ns: allowedNS, cts: cts, kind: secrets.ErrDenied},
		{name: "wrong issuer", token: func(t *testing.T) TokenSource {
			return signed(t, f.ecKeyFile, "someone-else", testAudience, nil)
		}, ns: allowedNS, cts: cts, kind: secrets.ErrDenied},
		{name: "wrong signing key", token: func(t *testing.T) TokenSource {
			return signed(t, f.untrustedKeyFile, testIssuer, testAudience, nil)
		}, ns: allowedNS, cts: cts, kind: secrets.ErrDenied},
		{name: "token source fails", token: func(t *testing.T) TokenSource {
			return FileToken{Path: filepath.Join(t.TempDir(), "missing")}
		}, ns: allowedNS, cts: cts, kind: secrets.ErrUnavailable},
		{name: "namespace not allowed", ns: "team-b", cts: cts, kind: secrets.ErrDenied},
		{name: "no namespace", cts: cts, kind: secrets.ErrDenied},
		{name: "tampered ciphertext", ns: allowedNS,
			cts: map[string]string{"store/secret_access_key": cts["store/secret_access_key"], "/password": tampered}, kind: secrets.ErrInvalid},
		{name: "ciphertext for another service", ns: allowedNS, cts: map[string]string{"/x": otherServiceCT}, kind: secrets.ErrInvalid},
		{name: "moved to another option", ns: allowedNS, cts: moved, kind: secrets.ErrDenied},
		{name: "used for another host", ns: allowedNS, cts: map[string]string{"/password": cts["/password"]}, uses: otherHost, kind: secrets.ErrDenied},
		{name: "no contexts sent", ns: allowedNS, cts: cts, uses: map[string]secrets.UseContext{}, kind: secrets.ErrDenied},
		{name: "CA does not match", ca: f.otherCAFile, ns: allowedNS, cts: cts, kind: errAny},
	}
	for _, tr := range tlsTransports {
		t.Run(tr.name, func(t *testing.T) {
			endpoint := tr.start(t, f, listen(t, "127.0.0.1:0"))
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					var src TokenSource = signed(t, f.ecKeyFile, testIssuer, testAudience, nil)
					if tc.token != nil {
						src = tc.token(t)
					}
					rec := &recorder{src: src}
					ca := f.caFile
					if tc.ca != "" {
						ca = tc.ca
					}
					c := newClient(t, Options{Endpoint: endpoint, CAFile: ca, Token: rec, Timeout: 5 * time.Second, Attempts: 2, Backoff: 10 * time.Millisecond})
					uses := tc.uses
					if uses == nil {
						uses = usesOf(tc.cts)
					}
					got, err := c.Decrypt(t.Context(), secrets.DecryptRequest{
						VolumeID: "vol-1", PVCNamespace: tc.ns, PVCName: "data", Ciphertexts: tc.cts, Contexts: uses,
					})
					if tc.kind == nil {
						if err != nil {
							t.Fatalf("Decrypt: %v", err)
						}
						if !maps.Equal(got, tc.want) {
							t.Fatalf("plaintexts %v, want %v", got, tc.want)
						}
						if len(rec.issued()) != 1 {
							t.Errorf("%d tokens for one successful call", len(rec.issued()))
						}
						return
					}
					if err == nil {
						t.Fatalf("no error; plaintexts %v", got)
					}
					t.Logf("error: %v", err)
					if got != nil {
						t.Errorf("plaintexts %v returned with an error", got)
					}
					if tc.kind != errAny && !errors.Is(err, tc.kind) {
						t.Fatalf("error %v, want %v", err, tc.kind)
					}
					noSecrets(t, err, rec, plain, tc.cts)
				})
			}
		})
	}
}

// errAny: the case must fail, with whatever error.
var errAny = errors.New("any error")

// noSecrets checks that the error names no plaintext, token or ciphertext.
func noSecrets(t *testing.T, err error, rec *recorder, plain, cts map[string]string) {
	t.Helper()
	msg := err.Error()
	for _, p := range plain {
		if strings.Contains(msg, p) {
			t.Errorf("error %q contains a plaintext", msg)
		}
	}
	for _, tok := range rec.issued() {
		if strings.Contains(msg, tok) {
			t.Errorf("error %q contains the token", msg)
		}
		// The signature alone is as good as the token.
		if sig := tok[strings.LastIndex(tok, ".")+1:]; strings.Contains(msg, sig) {
			t.Errorf("error %q contains the token's signature", msg)
		}
	}
	for _, ct := range cts {
		if strings.Contains(msg, ct) {
			t.Errorf("error %q contains a ciphertext", msg)
		}
	}
}

// TestServiceDown: nothing listens, so every attempt fails with
// Unavailable; then the service starts on that port while the client is
// retrying, and the call succeeds.
func TestServiceDown(t *testing.T) {
	f := newFixture(t)
	plain := map[string]string{"/secret_access_key": "comes-back-secret"}
	cts := map[string]string{"/secret_access_key": encrypt(t, &f.serviceKey.PublicKey, "/secret_access_key", plain["/secret_access_key"])}
	req := secrets.DecryptRequest{VolumeID: "vol-down", PVCNamespace: allowedNS, Ciphertexts: cts, Contexts: usesOf(cts)}

	for _, tr := range tlsTransports {
		t.Run(tr.name, func(t *testing.T) {
			// A port that was free a moment ago: nothing listens on it.
			lis := listen(t, "127.0.0.1:0")
			addr := lis.Addr().String()
			_ = lis.Close()
			endpoint := tr.name + "://" + addr

			t.Run("unavailable after the attempts", func(t *testing.T) {
				rec := &recorder{src: signed(t, f.ecKeyFile, testIssuer, testAudience, nil)}
				c := newClient(t, Options{Endpoint: endpoint, CAFile: f.caFile, Token: rec, Timeout: 2 * time.Second, Attempts: 3, Backoff: 10 * time.Millisecond})
				start := time.Now()
				got, err := c.Decrypt(t.Context(), req)
				if !errors.Is(err, secrets.ErrUnavailable) {
					t.Fatalf("got %v, %v; want ErrUnavailable", got, err)
				}
				if n := len(rec.issued()); n != 3 {
					t.Errorf("%d attempts, want 3", n)
				}
				// Waits of 10 and 20 ms between the three attempts.
				if d := time.Since(start); d < 30*time.Millisecond || d > 5*time.Second {
					t.Errorf("took %s", d)
				}
				noSecrets(t, err, rec, plain, cts)
			})

			t.Run("context ends the retries", func(t *testing.T) {
				rec := &recorder{src: signed(t, f.ecKeyFile, testIssuer, testAudience, nil)}
				c := newClient(t, Options{Endpoint: endpoint, CAFile: f.caFile, Token: rec, Timeout: 2 * time.Second, Attempts: 100, Backoff: 50 * time.Millisecond})
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				defer cancel()
				start := time.Now()
				_, err := c.Decrypt(ctx, req)
				if !errors.Is(err, secrets.ErrUnavailable) {
					t.Fatalf("got %v, want ErrUnavailable", err)
				}
				if d := time.Since(start); d > 3*time.Second {
					t.Errorf("took %s after the context ended", d)
				}
			})

			t.Run("service starts while retrying", func(t *testing.T) {
				rec := &recorder{src: signed(t, f.ecKeyFile, testIssuer, testAudience, nil)}
				c := newClient(t, Options{Endpoint: endpoint, CAFile: f.caFile, Token: rec, Timeout: 2 * time.Second, Attempts: 20, Backoff: 50 * time.Millisecond})
				started := make(chan error, 1)
				go func() {
					time.Sleep(300 * time.Millisecond)
					lis, err := net.Listen("tcp", addr)
					if err == nil {
						tr.start(t, f, lis)
					}
					started <- err
				}()
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				got, err := c.Decrypt(ctx, req)
				if lerr := <-started; lerr != nil {
					t.Fatalf("listening again on %s: %v", addr, lerr)
				}
				if err != nil {
					t.Fatalf("Decrypt: %v", err)
				}
				if !maps.Equal(got, plain) {
					t.Fatalf("plaintexts %v, want %v", got, plain)
				}
				if n := len(rec.issued()); n < 2 {
					t.Errorf("%d attempts: the service was up before the first", n)
				}
			})
		})
	}
}

// TestPlainTransports: the schemes without TLS (grpc, unix, http with a
// base path) carry the same calls.
func TestPlainTransports(t *testing.T) {
	f := newFixture(t)
	plain := map[string]string{"/k": "plain-transport-secret"}
	cts := map[string]string{"/k": encrypt(t, &f.serviceKey.PublicKey, "/k", plain["/k"])}

	g := grpc.NewServer()
	f.srv.Register(g)
	tcp := listen(t, "127.0.0.1:0")
	sock := filepath.Join(t.TempDir(), "ss.sock")
	unixLis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(tcp) }()
	g2 := grpc.NewServer()
	f.srv.Register(g2)
	go func() { _ = g2.Serve(unixLis) }()
	t.Cleanup(g.Stop)
	t.Cleanup(g2.Stop)
	mux := http.NewServeMux()
	mux.Handle("/base/", http.StripPrefix("/base", f.srv.HTTPHandler()))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)

	for name, endpoint := range map[string]string{
		"grpc": "grpc://" + tcp.Addr().String(),
		"unix": "unix://" + sock,
		"http": hs.URL + "/base/",
	} {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{src: signed(t, f.ecKeyFile, testIssuer, testAudience, nil)}
			c := newClient(t, Options{Endpoint: endpoint, Token: rec, Attempts: 1})
			got, err := c.Decrypt(t.Context(), secrets.DecryptRequest{VolumeID: "v", PVCNamespace: allowedNS, Ciphertexts: cts, Contexts: usesOf(cts)})
			if err != nil || !maps.Equal(got, plain) {
				t.Fatalf("got %v, %v", got, err)
			}
			_, err = c.Decrypt(t.Context(), secrets.DecryptRequest{VolumeID: "v", PVCNamespace: "team-b", Ciphertexts: cts, Contexts: usesOf(cts)})
			if !errors.Is(err, secrets.ErrDenied) {
				t.Fatalf("other namespace: %v, want ErrDenied", err)
			}
			noSecrets(t, err, rec, plain, cts)
		})
	}
}

func TestNewRejects(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := FileToken{Path: filepath.Join(dir, "token")}
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"no token source", Options{Endpoint: "grpcs://127.0.0.1:1"}},
		{"unknown scheme", Options{Endpoint: "ftp://127.0.0.1:1", Token: tok}},
		{"missing CA file", Options{Endpoint: "https://127.0.0.1:1", CAFile: filepath.Join(dir, "none"), Token: tok}},
		{"CA file without a certificate", Options{Endpoint: "grpcs://127.0.0.1:1", CAFile: notPEM, Token: tok}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := New(tc.o); err == nil {
				_ = c.Close()
				t.Fatal("New accepted it")
			}
		})
	}
}

func TestFileTokenIsReadAtEachCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	src := FileToken{Path: path}
	for _, tok := range []string{"first", "rotated"} {
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := src.Token(t.Context()); err != nil || got != tok {
			t.Fatalf("got %q, %v; want %q", got, err, tok)
		}
	}
	if err := os.WriteFile(path, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Token(t.Context()); err == nil {
		t.Fatal("an empty token file was accepted")
	}
}

func newClient(t *testing.T, o Options) *Client {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testHost is the host every test value is sealed for.
const testHost = "s3.example.org"

// encrypt seals plaintext for the namespace allowedNS, testHost and the
// option its id names ("section/option").
func encrypt(t *testing.T, pub *rsa.PublicKey, id, plaintext string) string {
	t.Helper()
	return testpki.Seal(t, pub, envelope.Context{Namespace: allowedNS, Option: optionOf(id), Host: testHost}, plaintext)
}

func optionOf(id string) string { return id[strings.LastIndex(id, "/")+1:] }

// usesOf says each value is used as the option its id names, on testHost.
func usesOf(cts map[string]string) map[string]secrets.UseContext {
	uses := map[string]secrets.UseContext{}
	for id := range cts {
		uses[id] = secrets.UseContext{Option: optionOf(id), Host: testHost}
	}
	return uses
}

// tamper changes one character after the first "." (the wrapped key).
func tamper(ct string) string {
	i := strings.Index(ct, ".") + 20
	c := byte('A')
	if ct[i] == 'A' {
		c = 'B'
	}
	return ct[:i] + string(c) + ct[i+1:]
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
