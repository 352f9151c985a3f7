package secretservice

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Verifier authenticates the caller of Decrypt by its bearer token.
type Verifier interface {
	// Verify returns the token's subject; any error means the caller is
	// unauthenticated.
	Verify(ctx context.Context, token string) (subject string, err error)
}

// jwtAlgorithms are the only accepted signature algorithms: asymmetric, so a
// public key can never double as an HMAC secret, and never "none".
var jwtAlgorithms = []string{"RS256", "RS384", "RS512", "ES256", "ES384", "PS256"}

// clockSkew tolerates clocks of the caller and the service that differ a little.
const clockSkew = 30 * time.Second

// JWTOptions configure NewJWTVerifier. Exactly one of PublicKeys and JWKSURL
// is set; Issuer and Audience are required.
type JWTOptions struct {
	// PublicKeys are static verification keys (*rsa.PublicKey or
	// *ecdsa.PublicKey); a token is accepted if any of them verifies it.
	PublicKeys []crypto.PublicKey
	// JWKSURL is a JWK Set fetched at start, refreshed hourly and when a
	// token names an unknown kid.
	JWKSURL string
	// HTTPClient fetches JWKSURL (for a private CA); nil: http.DefaultClient.
	HTTPClient *http.Client
	Issuer     string
	Audience   string
}

type jwtVerifier struct {
	parser  *jwt.Parser
	keyfunc func(ctx context.Context) jwt.Keyfunc
}

// NewJWTVerifier verifies signed JWTs. The context ends the JWKS refresh.
func NewJWTVerifier(ctx context.Context, o JWTOptions) (Verifier, error) {
	if (len(o.PublicKeys) == 0) == (o.JWKSURL == "") {
		return nil, errors.New("jwt verifier: set exactly one of public keys and a JWKS URL")
	}
	// Without both, a token minted for another service would be accepted here.
	if o.Issuer == "" || o.Audience == "" {
		return nil, errors.New("jwt verifier: issuer and audience are required")
	}
	v := &jwtVerifier{parser: jwt.NewParser(
		jwt.WithValidMethods(jwtAlgorithms),
		jwt.WithIssuer(o.Issuer),
		jwt.WithAudience(o.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(clockSkew),
	)}
	if o.JWKSURL != "" {
		kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{o.JWKSURL}, keyfunc.Override{Client: o.HTTPClient})
		if err != nil {
			return nil, fmt.Errorf("jwt verifier: JWKS %s: %w", o.JWKSURL, err)
		}
		v.keyfunc = kf.KeyfuncCtx
		return v, nil
	}
	keys := jwt.VerificationKeySet{}
	for i, k := range o.PublicKeys {
		switch k.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey:
			keys.Keys = append(keys.Keys, k)
		default:
			return nil, fmt.Errorf("jwt verifier: public key %d: %T is neither RSA nor ECDSA", i, k)
		}
	}
	v.keyfunc = func(context.Context) jwt.Keyfunc {
		return func(*jwt.Token) (any, error) { return keys, nil }
	}
	return v, nil
}

func (v *jwtVerifier) Verify(ctx context.Context, token string) (string, error) {
	var claims jwt.RegisteredClaims
	if _, err := v.parser.ParseWithClaims(token, &claims, v.keyfunc(ctx)); err != nil {
		return "", err
	}
	if claims.Subject == "" {
		return "", errors.New("token has no subject")
	}
	return claims.Subject, nil
}

type tokenReviewVerifier struct {
	client    kubernetes.Interface
	audiences []string
}

// NewTokenReviewVerifier asks the Kubernetes API server whether a token is
// valid (authentication.k8s.io/v1 TokenReview); the subject is the user name,
// e.g. system:serviceaccount:kube-system:csi-rclone-node. With audiences, the
// token must be issued for one of them.
func NewTokenReviewVerifier(client kubernetes.Interface, audiences []string) Verifier {
	return &tokenReviewVerifier{client: client, audiences: audiences}
}

func (v *tokenReviewVerifier) Verify(ctx context.Context, token string) (string, error) {
	review := &authv1.TokenReview{Spec: authv1.TokenReviewSpec{Token: token, Audiences: v.audiences}}
	res, err := v.client.AuthenticationV1().TokenReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token review: %w", err)
	}
	st := res.Status
	if !st.Authenticated {
		return "", fmt.Errorf("token review: not authenticated: %s", st.Error)
	}
	// An authenticator that ignores spec.audiences would accept a token meant
	// for anyone; the API docs ask clients to check status.audiences.
	if len(v.audiences) > 0 && !slices.ContainsFunc(st.Audiences, func(a string) bool { return slices.Contains(v.audiences, a) }) {
		return "", fmt.Errorf("token review: token is for audiences %v, want one of %v", st.Audiences, v.audiences)
	}
	if st.User.Username == "" {
		return "", errors.New("token review: no user name")
	}
	return st.User.Username, nil
}
