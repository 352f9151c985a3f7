package client

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TokenSource gives the JWT for a call.
type TokenSource interface {
	Token(ctx context.Context) (string, error)
}

// FileToken reads the token from a file at every call: the kubelet rotates a
// projected ServiceAccount token in place, and a token read once would expire.
type FileToken struct{ Path string }

// Token implements TokenSource.
func (f FileToken) Token(context.Context) (string, error) {
	data, err := os.ReadFile(f.Path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fmt.Errorf("%s is empty", f.Path)
	}
	return tok, nil
}

// SignedToken signs a fresh short-lived token for each call with a key of
// the driver's own (RSA: RS256, EC P-256: ES256).
type SignedToken struct {
	Key                       crypto.Signer
	Issuer, Subject, Audience string
	TTL                       time.Duration
	now                       func() time.Time
}

// NewSignedToken reads a PEM private key (PKCS#8, PKCS#1 or SEC 1).
func NewSignedToken(keyFile, issuer, subject, audience string, ttl time.Duration) (*SignedToken, error) {
	data, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", keyFile)
	}
	var key any
	if key, err = x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
		if key, err = x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
			if key, err = x509.ParseECPrivateKey(block.Bytes); err != nil {
				return nil, fmt.Errorf("%s: not an RSA or EC private key", keyFile)
			}
		}
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", keyFile)
	}
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	return &SignedToken{Key: signer, Issuer: issuer, Subject: subject, Audience: audience, TTL: ttl}, nil
}

// Token implements TokenSource.
func (s *SignedToken) Token(context.Context) (string, error) {
	now := time.Now()
	if s.now != nil {
		now = s.now()
	}
	var method jwt.SigningMethod
	switch s.Key.(type) {
	case *rsa.PrivateKey:
		method = jwt.SigningMethodRS256
	case *ecdsa.PrivateKey:
		method = jwt.SigningMethodES256
	default:
		return "", errors.New("unsupported signing key")
	}
	claims := jwt.RegisteredClaims{
		Issuer:    s.Issuer,
		Subject:   s.Subject,
		Audience:  jwt.ClaimStrings{s.Audience},
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now.Add(-30 * time.Second)),
		ExpiresAt: jwt.NewNumericDate(now.Add(s.TTL)),
	}
	return jwt.NewWithClaims(method, claims).SignedString(s.Key)
}
