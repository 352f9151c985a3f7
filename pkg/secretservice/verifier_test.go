package secretservice

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/csi-rclone/csi-rclone/test/testpki"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	pb "github.com/csi-rclone/csi-rclone/proto/secretservice/v1"
)

func TestNewJWTVerifierOptions(t *testing.T) {
	pub := []crypto.PublicKey{&testpki.ECKey(t).PublicKey}
	tests := []struct {
		name string
		o    JWTOptions
	}{
		{"no keys", JWTOptions{Issuer: "i", Audience: "a"}},
		{"keys and JWKS", JWTOptions{PublicKeys: pub, JWKSURL: "https://example.invalid/jwks", Issuer: "i", Audience: "a"}},
		{"no issuer", JWTOptions{PublicKeys: pub, Audience: "a"}},
		{"no audience", JWTOptions{PublicKeys: pub, Issuer: "i"}},
		{"HMAC secret", JWTOptions{PublicKeys: []crypto.PublicKey{[]byte("secret")}, Issuer: "i", Audience: "a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewJWTVerifier(t.Context(), tc.o); err == nil {
				t.Error("accepted")
			}
		})
	}
}

// jwksServer serves the public JWK Set of keys by kid; set replaces it.
func jwksServer(t *testing.T) (ts *httptest.Server, set func(map[string]crypto.Signer)) {
	var doc atomic.Value
	set = func(keys map[string]crypto.Signer) {
		store := jwkset.NewMemoryStorage()
		for kid, k := range keys {
			alg := jwkset.AlgRS256
			if _, ok := k.(*ecdsa.PrivateKey); ok {
				alg = jwkset.AlgES256
			}
			jwk, err := jwkset.NewJWKFromKey(k.Public(), jwkset.JWKOptions{
				Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: alg, USE: jwkset.UseSig},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.KeyWrite(t.Context(), jwk); err != nil {
				t.Fatal(err)
			}
		}
		raw, err := store.JSONPublic(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		doc.Store([]byte(raw))
	}
	ts = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc.Load().([]byte))
	}))
	t.Cleanup(ts.Close)
	return ts, set
}

func TestJWKSVerifier(t *testing.T) {
	rsaK, ecK, rotated := testpki.RSAKey(t), testpki.ECKey(t), testpki.ECKey(t)
	ts, setKeys := jwksServer(t)
	setKeys(map[string]crypto.Signer{"rsa-1": rsaK, "ec-1": ecK})
	v, err := NewJWTVerifier(t.Context(), JWTOptions{
		JWKSURL: ts.URL, HTTPClient: ts.Client(), Issuer: testIssuer, Audience: testAudience,
	})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(m jwt.SigningMethod, kid string, key any) string {
		tok := jwt.NewWithClaims(m, claims())
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// A key the issuer adds later is fetched when a token names its kid (at
	// most every 5 minutes, so this comes before the "unknown kid" case).
	setKeys(map[string]crypto.Signer{"rsa-1": rsaK, "ec-1": ecK, "ec-2": rotated})
	if sub, err := v.Verify(t.Context(), mint(jwt.SigningMethodES256, "ec-2", rotated)); err != nil || sub != testSubject {
		t.Fatalf("after rotation: Verify = %q, %v", sub, err)
	}

	tests := []struct {
		name  string
		token string
		ok    bool
	}{
		{"RS256 by kid", mint(jwt.SigningMethodRS256, "rsa-1", rsaK), true},
		{"ES256 by kid", mint(jwt.SigningMethodES256, "ec-1", ecK), true},
		{"no kid tries every key", mint(jwt.SigningMethodES256, "", ecK), true},
		{"kid of another key", mint(jwt.SigningMethodES256, "ec-1", testpki.ECKey(t)), false},
		{"alg does not match the JWK", mint(jwt.SigningMethodPS256, "rsa-1", rsaK), false},
		{"unknown kid", mint(jwt.SigningMethodRS256, "nope", testpki.RSAKey(t)), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := v.Verify(t.Context(), tc.token)
			if tc.ok && (err != nil || sub != testSubject) {
				t.Fatalf("Verify = %q, %v", sub, err)
			}
			if !tc.ok && err == nil {
				t.Fatal("accepted")
			}
		})
	}

}

func TestTokenReviewVerifier(t *testing.T) {
	const sa = "system:serviceaccount:kube-system:csi-rclone-node"
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authv1.TokenReview).DeepCopy()
		switch tr.Spec.Token {
		case "good":
			tr.Status = authv1.TokenReviewStatus{Authenticated: true, User: authv1.UserInfo{Username: sa}, Audiences: tr.Spec.Audiences}
		case "other-audience":
			tr.Status = authv1.TokenReviewStatus{Authenticated: true, User: authv1.UserInfo{Username: sa}, Audiences: []string{"https://kubernetes.default.svc"}}
		case "api-down":
			return true, nil, errors.New("connection refused")
		default:
			tr.Status = authv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	v := NewTokenReviewVerifier(client, []string{testAudience})

	tests := []struct {
		token, subject, err string
	}{
		{token: "good", subject: sa},
		{token: "forged", err: "not authenticated"},
		{token: "other-audience", err: "audiences"},
		{token: "api-down", err: "connection refused"},
	}
	for _, tc := range tests {
		t.Run(tc.token, func(t *testing.T) {
			sub, err := v.Verify(t.Context(), tc.token)
			if tc.err == "" {
				if err != nil || sub != tc.subject {
					t.Fatalf("Verify = %q, %v; want %q", sub, err, tc.subject)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Verify error %v, want %q", err, tc.err)
			}
		})
	}

	// The user name is the subject that AllowedSubjects lists.
	srv := New(Options{PrivateKey: testpki.RSAKey(t), Verifier: v, AllowedSubjects: []string{sa}})
	for token, want := range map[string]codes.Code{"good": codes.InvalidArgument, "forged": codes.Unauthenticated} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
		_, err := srv.Decrypt(ctx, &pb.DecryptRequest{}) // empty: passes auth, then fails
		if status.Code(err) != want {
			t.Errorf("token %s: %v, want %s", token, err, want)
		}
	}
}
