package secretservice

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/csi-rclone/csi-rclone/test/testpki"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
	pb "github.com/csi-rclone/csi-rclone/proto/secretservice/v1"
)

const (
	testIssuer   = "csi-rclone"
	testAudience = "csi-rclone-secret-service"
	testSubject  = "node:node-1"
	testNS       = "team-a"
)

// env is a running service: its keys, and a client for each transport.
type env struct {
	serviceKey *rsa.PrivateKey
	signKey    *ecdsa.PrivateKey
	transports map[string]decryptFunc
}

// decryptFunc calls the service with a bearer token ("" sends none) and
// answers a gRPC status error.
type decryptFunc func(t *testing.T, token string, req *pb.DecryptRequest) (*pb.DecryptResponse, error)

// newEnv starts the service; tweak, if not nil, changes its options.
func newEnv(t *testing.T, tweak func(*Options)) *env {
	t.Helper()
	e := &env{serviceKey: testpki.RSAKey(t), signKey: testpki.ECKey(t)}
	v, err := NewJWTVerifier(t.Context(), JWTOptions{
		PublicKeys: []crypto.PublicKey{&e.signKey.PublicKey}, Issuer: testIssuer, Audience: testAudience,
	})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{
		PrivateKey: e.serviceKey, Verifier: v,
		AllowedNamespaces: []string{testNS, "team-b"}, AllowedSubjects: []string{testSubject, "node:node-2"},
	}
	if tweak != nil {
		tweak(&o)
	}
	srv := New(o)
	serverTLS, roots, _ := testpki.ServerTLS(t)
	e.transports = map[string]decryptFunc{
		"grpc": startGRPC(t, srv, serverTLS, roots),
		"http": startHTTP(t, srv, serverTLS, roots),
	}
	return e
}

func startGRPC(t *testing.T, srv *Server, serverTLS *tls.Config, roots *x509.CertPool) decryptFunc {
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(serverTLS)))
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := pb.NewSecretServiceClient(conn)
	return func(t *testing.T, token string, req *pb.DecryptRequest) (*pb.DecryptResponse, error) {
		ctx := t.Context()
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		return client.Decrypt(ctx, req)
	}
}

func startHTTP(t *testing.T, srv *Server, serverTLS *tls.Config, roots *x509.CertPool) decryptFunc {
	ts := httptest.NewUnstartedServer(srv.HTTPHandler())
	ts.TLS = serverTLS.Clone()
	ts.StartTLS()
	t.Cleanup(ts.Close)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	return func(t *testing.T, token string, req *pb.DecryptRequest) (*pb.DecryptResponse, error) {
		body, err := protojson.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		resp, data := post(t, client, ts.URL+"/v1/decrypt", token, body)
		if resp.StatusCode == http.StatusOK {
			out := &pb.DecryptResponse{}
			if err := protojson.Unmarshal(data, out); err != nil {
				t.Fatalf("decoding %s: %v", data, err)
			}
			return out, nil
		}
		st := httpStatusError(t, resp, data)
		if want := map[codes.Code]int{
			codes.InvalidArgument: 400, codes.Unauthenticated: 401, codes.PermissionDenied: 403,
		}[st.Code()]; want != resp.StatusCode {
			t.Errorf("HTTP status %d for %s, want %d", resp.StatusCode, st.Code(), want)
		}
		return nil, st.Err()
	}
}

func post(t *testing.T, c *http.Client, url, token string, body []byte) (*http.Response, []byte) {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, data
}

// httpStatusError reads an error body {"code": "PermissionDenied", ...}.
func httpStatusError(t *testing.T, resp *http.Response, data []byte) *status.Status {
	t.Helper()
	var e struct{ Code, Message string }
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatalf("HTTP %d: error body %q: %v", resp.StatusCode, data, err)
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == e.Code {
			return status.New(c, e.Message)
		}
	}
	t.Fatalf("HTTP %d: unknown code %q", resp.StatusCode, e.Code)
	return nil
}

// Where the tests' values are used, unless a case says otherwise: "a" is
// sealed for this context, host included; "b" and "k" for any host.
var (
	useA = &pb.UseContext{Option: "secret_access_key", Host: "s3.example.com"}
	useB = &pb.UseContext{Option: "pass"}
)

func TestDecrypt(t *testing.T) {
	e := newEnv(t, nil)
	valid := func(c *jwt.RegisteredClaims) {}
	good := e.token(t, valid)
	ctA := e.seal(t, envelope.Context{Namespace: testNS, Option: "secret_access_key", Host: "s3.example.com"}, "s3cr3t-a")
	ctB := e.seal(t, envelope.Context{Namespace: testNS, Option: "pass"}, "pässwörd b")
	ctTeamB := e.seal(t, envelope.Context{Namespace: "team-b", Option: "pass"}, "for team b")
	otherKeyCT := testpki.Seal(t, &testpki.RSAKey(t).PublicKey, envelope.Context{Namespace: testNS, Option: "pass"}, "x")
	unbound := testpki.SealUnbound(t, &e.serviceKey.PublicKey, "v1 value")

	tests := []struct {
		name  string
		token string
		ns    string
		cts   map[string]string
		uses  map[string]*pb.UseContext // default: a → useA, others → useB
		want  map[string]string
		code  codes.Code
		msg   string // in the error message
	}{
		{name: "success", token: good, ns: testNS, cts: map[string]string{"a": ctA, "b": ctB},
			want: map[string]string{"a": "s3cr3t-a", "b": "pässwörd b"}},
		{name: "request host is normalized", token: good, ns: testNS, cts: map[string]string{"a": ctA},
			uses: map[string]*pb.UseContext{"a": {Option: "secret_access_key", Host: "HTTPS://S3.Example.com:443/bucket"}},
			want: map[string]string{"a": "s3cr3t-a"}},
		{name: "no host sealed: any host", token: good, ns: testNS, cts: map[string]string{"b": ctB},
			uses: map[string]*pb.UseContext{"b": {Option: "pass", Host: "elsewhere.example"}},
			want: map[string]string{"b": "pässwörd b"}},
		{name: "other allowed subject", token: e.token(t, func(c *jwt.RegisteredClaims) { c.Subject = "node:node-2" }),
			ns: "team-b", cts: map[string]string{"b": ctTeamB}, want: map[string]string{"b": "for team b"}},
		{name: "missing token", ns: testNS, cts: map[string]string{"a": ctA}, code: codes.Unauthenticated},
		{name: "garbage token", token: "not.a.jwt", ns: testNS, cts: map[string]string{"a": ctA}, code: codes.Unauthenticated},
		{name: "expired", token: e.token(t, func(c *jwt.RegisteredClaims) {
			c.IssuedAt = jwt.NewNumericDate(time.Now().Add(-time.Hour))
			c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-10 * time.Minute))
		}), ns: testNS, cts: map[string]string{"a": ctA}, code: codes.Unauthenticated, msg: "expired"},
		{name: "no expiry", token: e.token(t, func(c *jwt.RegisteredClaims) { c.ExpiresAt = nil }),
			ns: testNS, cts: map[string]string{"a": ctA}, code: codes.Unauthenticated, msg: "exp"},
		{name: "no subject", token: e.token(t, func(c *jwt.RegisteredClaims) { c.Subject = "" }),
			ns: testNS, cts: map[string]string{"a": ctA}, code: codes.Unauthenticated, msg: "subject"},
		{name: "wrong audience", token: e.token(t, func(c *jwt.RegisteredClaims) { c.Audience = jwt.ClaimStrings{"kubernetes"} }),
			ns: testNS, cts: map[string]string{"a": ctA}, code: codes.Unauthenticated, msg: "aud"},
		{name: "wrong issuer", token: e.token(t, func(c *jwt.RegisteredClaims) { c.Issuer = "someone-else" }),
			ns: testNS, cts: map[string]string{"a": ctA}, code: codes.Unauthenticated, msg: "iss"},
		{name: "wrong signing key", token: sign(t, jwt.SigningMethodES256, testpki.ECKey(t), claims()),
			ns: testNS, cts: map[string]string{"a": ctA}, code: codes.Unauthenticated},
		{name: "alg none", token: sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims()),
			ns: testNS, cts: map[string]string{"a": ctA}, code: codes.Unauthenticated, msg: "signing method none is invalid"},
		// The classic confusion: an HMAC keyed with the public verification key.
		{name: "alg HS256", token: sign(t, jwt.SigningMethodHS256, publicDER(t, &e.signKey.PublicKey), claims()),
			ns: testNS, cts: map[string]string{"a": ctA}, code: codes.Unauthenticated, msg: "signing method HS256 is invalid"},
		{name: "subject not allowed", token: e.token(t, func(c *jwt.RegisteredClaims) { c.Subject = "node:intruder" }),
			ns: testNS, cts: map[string]string{"a": ctA}, code: codes.PermissionDenied, msg: "node:intruder"},
		{name: "namespace not allowed", token: good, ns: "team-c", cts: map[string]string{"a": ctA},
			code: codes.PermissionDenied, msg: "team-c"},
		{name: "no namespace", token: good, cts: map[string]string{"a": ctA}, code: codes.PermissionDenied},
		// The attacks that binding stops.
		{name: "replayed into another namespace", token: good, ns: "team-b", cts: map[string]string{"a": ctA},
			code: codes.PermissionDenied, msg: `a: ciphertext sealed for another context: sealed for namespace "team-a", used in namespace "team-b"`},
		{name: "moved to another option", token: good, ns: testNS, cts: map[string]string{"a": ctA},
			uses: map[string]*pb.UseContext{"a": {Option: "pass", Host: "s3.example.com"}},
			code: codes.PermissionDenied, msg: `sealed for option "secret_access_key", used as option "pass"`},
		{name: "sealed host, other host", token: good, ns: testNS, cts: map[string]string{"a": ctA},
			uses: map[string]*pb.UseContext{"a": {Option: "secret_access_key", Host: "evil.example"}},
			code: codes.PermissionDenied, msg: `sealed for host "s3.example.com", used for host "evil.example"`},
		{name: "sealed host, host unknown", token: good, ns: testNS, cts: map[string]string{"a": ctA},
			uses: map[string]*pb.UseContext{"a": {Option: "secret_access_key"}},
			code: codes.PermissionDenied, msg: "host is unknown"},
		{name: "no use context sent", token: good, ns: testNS, cts: map[string]string{"b": ctB},
			uses: map[string]*pb.UseContext{}, code: codes.PermissionDenied, msg: `used as option ""`},
		{name: "one of two denied", token: good, ns: testNS, cts: map[string]string{"a": ctA, "b": ctTeamB},
			code: codes.PermissionDenied, msg: `b: ciphertext sealed for another context: sealed for namespace "team-b"`},
		{name: "unbound refused", token: good, ns: testNS, cts: map[string]string{"u": unbound},
			code: codes.PermissionDenied, msg: "u: unbound ciphertext; re-encrypt with a context"},
		{name: "unbound without prefix refused", token: good, ns: testNS, cts: map[string]string{"u": strings.TrimPrefix(unbound, envelope.PrefixV1)},
			code: codes.PermissionDenied, msg: "unbound ciphertext"},
		{name: "tampered ciphertext", token: good, ns: testNS, cts: map[string]string{"a": ctA, "b": tamper(ctB)},
			code: codes.InvalidArgument, msg: "b"},
		{name: "other service key", token: good, ns: testNS, cts: map[string]string{"k": otherKeyCT},
			code: codes.InvalidArgument, msg: "k"},
		{name: "not an envelope", token: good, ns: testNS, cts: map[string]string{"k": "plain"},
			code: codes.InvalidArgument, msg: "k"},
		{name: "unknown version", token: good, ns: testNS, cts: map[string]string{"k": envelope.Marker + "v3:abc"},
			code: codes.InvalidArgument, msg: "k"},
		{name: "empty request", token: good, ns: testNS, code: codes.InvalidArgument},
	}
	for tname, call := range e.transports {
		for _, tc := range tests {
			t.Run(tname+"/"+tc.name, func(t *testing.T) {
				req := &pb.DecryptRequest{VolumeId: "vol-1", PvcNamespace: tc.ns, PvcName: "data", Ciphertexts: tc.cts, Contexts: tc.uses}
				if tc.uses == nil {
					req.Contexts = defaultUses(tc.cts)
				}
				resp, err := call(t, tc.token, req)
				if got := status.Code(err); got != tc.code {
					t.Fatalf("code %s (%v), want %s", got, err, tc.code)
				}
				if tc.code != codes.OK {
					msg := status.Convert(err).Message()
					if !strings.Contains(msg, tc.msg) {
						t.Errorf("message %q does not contain %q", msg, tc.msg)
					}
					for _, secret := range append([]string{tc.token}, slices.Collect(maps.Values(tc.cts))...) {
						if secret != "" && strings.Contains(msg, secret) {
							t.Errorf("message %q echoes a token or ciphertext", msg)
						}
					}
					for _, plain := range []string{"s3cr3t-a", "pässwörd b", "for team b", "v1 value"} {
						if strings.Contains(msg, plain) {
							t.Errorf("message %q quotes a plaintext", msg)
						}
					}
					return
				}
				if got := resp.GetPlaintexts(); !maps.Equal(got, tc.want) {
					t.Errorf("plaintexts %v, want %v", got, tc.want)
				}
			})
		}
	}
}

// TestAllowUnbound: an operator who allows unbound values gets v1 values
// decrypted (with or without their prefix), and v2 still bound.
func TestAllowUnbound(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.AllowUnbound = true })
	token := e.token(t, func(*jwt.RegisteredClaims) {})
	unbound := testpki.SealUnbound(t, &e.serviceKey.PublicKey, "v1 value")
	bound := e.seal(t, envelope.Context{Namespace: testNS, Option: "pass"}, "v2 value")
	for tname, call := range e.transports {
		t.Run(tname, func(t *testing.T) {
			cts := map[string]string{"u": unbound, "raw": strings.TrimPrefix(unbound, envelope.PrefixV1), "b": bound}
			resp, err := call(t, token, &pb.DecryptRequest{VolumeId: "v", PvcNamespace: testNS, Ciphertexts: cts, Contexts: defaultUses(cts)})
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]string{"u": "v1 value", "raw": "v1 value", "b": "v2 value"}; !maps.Equal(resp.GetPlaintexts(), want) {
				t.Fatalf("plaintexts %v, want %v", resp.GetPlaintexts(), want)
			}
			_, err = call(t, token, &pb.DecryptRequest{VolumeId: "v", PvcNamespace: "team-b", Ciphertexts: map[string]string{"b": bound}, Contexts: defaultUses(cts)})
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("bound value in another namespace: %v, want PermissionDenied", err)
			}
		})
	}
}

func defaultUses(cts map[string]string) map[string]*pb.UseContext {
	uses := map[string]*pb.UseContext{}
	for id := range cts {
		uses[id] = useB
		if id == "a" {
			uses[id] = useA
		}
	}
	return uses
}

func TestHTTPProtocol(t *testing.T) {
	srv := New(Options{PrivateKey: testpki.RSAKey(t), Verifier: staticVerifier{}})
	ts := httptest.NewServer(srv.HTTPHandler())
	defer ts.Close()
	url := ts.URL + "/v1/decrypt"

	tests := []struct {
		name   string
		method string
		body   string
		status int
		code   string
		msg    string
	}{
		{"GET", http.MethodGet, "", 405, "Unimplemented", "POST"},
		{"not JSON", http.MethodPost, "{", 400, "InvalidArgument", "decoding"},
		{"body over 1 MiB", http.MethodPost, `{"volumeId":"` + strings.Repeat("x", maxBody) + `"}`, 400, "InvalidArgument", "exceeds"},
		// Parsed despite the unknown field: it fails only at decryption.
		{"unknown field ignored", http.MethodPost, `{"ciphertexts":{"a":"x"},"future":1}`, 400, "InvalidArgument", "cannot decrypt a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := http.NewRequestWithContext(t.Context(), tc.method, url, strings.NewReader(tc.body))
			r.Header.Set("Authorization", "Bearer ok")
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			st := httpStatusError(t, resp, data)
			if resp.StatusCode != tc.status || st.Code().String() != tc.code || !strings.Contains(st.Message(), tc.msg) {
				t.Errorf("got %d %s (%s), want %d %s", resp.StatusCode, st.Code(), st.Message(), tc.status, tc.code)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

// TestLogsNoSecrets decrypts and fails, and checks the log names the
// decision but no token, ciphertext or plaintext.
func TestLogsNoSecrets(t *testing.T) {
	var buf bytes.Buffer
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	klog.SetOutput(&buf)
	t.Cleanup(func() { klog.SetOutput(io.Discard); _ = fs.Set("logtostderr", "true") })

	e := newEnv(t, nil)
	token := e.token(t, func(*jwt.RegisteredClaims) {})
	ct := e.seal(t, envelope.Context{Namespace: testNS, Option: "pass"}, "hunter2")
	call := e.transports["grpc"]
	uses := map[string]*pb.UseContext{"pw": useB}
	if _, err := call(t, token, &pb.DecryptRequest{VolumeId: "vol-9", PvcNamespace: testNS, Ciphertexts: map[string]string{"pw": ct}, Contexts: uses}); err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, token, &pb.DecryptRequest{VolumeId: "vol-9", PvcNamespace: testNS, Ciphertexts: map[string]string{"pw": tamper(ct)}, Contexts: uses}); status.Code(err) != codes.InvalidArgument {
		t.Fatal(err)
	}
	if _, err := call(t, token, &pb.DecryptRequest{VolumeId: "vol-9", PvcNamespace: "team-b", Ciphertexts: map[string]string{"pw": ct}, Contexts: uses}); status.Code(err) != codes.PermissionDenied {
		t.Fatal(err)
	}
	klog.Flush()
	log := buf.String()
	for _, want := range []string{`subject="node:node-1"`, `volumeID="vol-9"`, `outcome="OK"`, `outcome="InvalidArgument"`, `outcome="PermissionDenied"`, "sealed for namespace", "values=1"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
	for _, secret := range []string{token, ct, tamper(ct), "hunter2"} {
		if strings.Contains(log, secret) {
			t.Errorf("log contains a secret:\n%s", log)
		}
	}
}

// staticVerifier accepts every token as subject "test".
type staticVerifier struct{}

func (staticVerifier) Verify(context.Context, string) (string, error) { return "test", nil }

func claims() jwt.RegisteredClaims {
	now := time.Now()
	return jwt.RegisteredClaims{
		Issuer: testIssuer, Subject: testSubject, Audience: jwt.ClaimStrings{testAudience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(5 * time.Minute)),
	}
}

// token signs claims(), changed by mod, with the trusted key.
func (e *env) token(t *testing.T, mod func(*jwt.RegisteredClaims)) string {
	c := claims()
	mod(&c)
	return sign(t, jwt.SigningMethodES256, e.signKey, c)
}

func sign(t *testing.T, m jwt.SigningMethod, key any, c jwt.Claims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// seal returns the whole value, as the driver sends it.
func (e *env) seal(t *testing.T, c envelope.Context, plaintext string) string {
	return testpki.Seal(t, &e.serviceKey.PublicKey, c, plaintext)
}

// tamper changes one character after the first "." (the wrapped key of a
// v2 value).
func tamper(ct string) string {
	i := strings.Index(ct, ".") + 20
	c := byte('A')
	if ct[i] == 'A' {
		c = 'B'
	}
	return ct[:i] + string(c) + ct[i+1:]
}

func publicDER(t *testing.T, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
