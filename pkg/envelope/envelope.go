// Package envelope is the encryption of a credential in a Kubernetes Secret:
// envelope encryption like Renku's outer layer. Only the holder of the secret
// service's RSA private key can decrypt, so reading the Secret does not
// reveal the credential.
//
// A value is Marker, a version and the opaque part:
//
//	csi-rclone:enc:v2:<context>.<wrapped key>.<sealed>   (bound, the default)
//	csi-rclone:enc:v1:<wrapped key>.<Fernet token>       (unbound, legacy)
//
// v2 binds the value to the Context it was sealed for: the Kubernetes
// namespace, the rclone option it stands for, and optionally the host of the
// remote. Without that, a tenant could copy a value into another namespace's
// Secret, or under another option of a remote that points to their own
// server, and have the driver decrypt it and send the plaintext there.
//
// v2 in detail, each part base64url without padding:
//   - context: the JSON encoding of Context; readable without any key, so
//     the service can refuse a value used out of its context
//     (ErrWrongContext) before it decrypts anything;
//   - wrapped key: a random AES-256 key, RSA-OAEP-SHA256 under the service's
//     public key, with the OAEP label PrefixV2 + context;
//   - sealed: a random 12-byte nonce and AES-256-GCM of the plaintext with
//     the additional data PrefixV2 + context.
//
// Both the label and the GCM tag authenticate the context: a value whose
// context was changed does not open (ErrMalformed). One AEAD instead of
// Fernet plus a separate MAC, so there is no second key to get wrong.
//
// v1 is the Fernet form of earlier releases: a random Fernet key wrapped with
// RSA-OAEP-SHA256 (no label). It opens still, but says nothing about where
// it may be used; the secret service refuses it unless told otherwise.
package envelope

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/fernet/fernet-go"
)

// Marker starts every encrypted value, whatever its version.
const Marker = "csi-rclone:enc:"

// The prefixes of each version.
const (
	PrefixV1 = Marker + "v1:"
	PrefixV2 = Marker + "v2:"
)

var (
	// ErrMalformed is a value that cannot be decrypted: not of this format,
	// tampered with, or wrapped under another key.
	ErrMalformed = errors.New("malformed or tampered ciphertext")
	// ErrWrongContext is an intact value used where it was not sealed for.
	ErrWrongContext = errors.New("ciphertext sealed for another context")
)

// IsEncrypted reports whether a value is meant as an encrypted value, of any
// version: an unknown version is an error later, never a plaintext.
func IsEncrypted(value string) bool { return strings.HasPrefix(value, Marker) }

// Context is where a value may be used.
type Context struct {
	// Namespace is the Kubernetes namespace of the PVC (required).
	Namespace string `json:"namespace"`
	// Option is the rclone option the value stands for (required), e.g.
	// secret_access_key.
	Option string `json:"option"`
	// Host is the remote's host, as NormalizeHost returns it; empty allows
	// any host.
	Host string `json:"host,omitempty"`
}

var (
	namespaceRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	optionRE    = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// Validate checks that c names a namespace (a DNS label) and an option (an
// rclone option name), and that Host is empty or normalized.
func (c Context) Validate() error {
	if len(c.Namespace) > 63 || !namespaceRE.MatchString(c.Namespace) {
		return fmt.Errorf("namespace %q is not a Kubernetes namespace name", c.Namespace)
	}
	if !optionRE.MatchString(c.Option) {
		return fmt.Errorf("option %q is not an rclone option name", c.Option)
	}
	if c.Host != "" {
		if h, err := NormalizeHost(c.Host); err != nil || h != c.Host {
			return fmt.Errorf("host %q is not a lowercase host name without port", c.Host)
		}
	}
	return nil
}

// Permits reports, as an error wrapping ErrWrongContext that names the part
// that differs, whether a value sealed for c may be used in use. An empty
// c.Host allows any host.
func (c Context) Permits(use Context) error {
	switch {
	case c.Namespace != use.Namespace:
		return fmt.Errorf("%w: sealed for namespace %q, used in namespace %q", ErrWrongContext, c.Namespace, use.Namespace)
	case c.Option != use.Option:
		return fmt.Errorf("%w: sealed for option %q, used as option %q", ErrWrongContext, c.Option, use.Option)
	case c.Host != "" && c.Host != use.Host:
		if use.Host == "" {
			return fmt.Errorf("%w: sealed for host %q, used where the host is unknown", ErrWrongContext, c.Host)
		}
		return fmt.Errorf("%w: sealed for host %q, used for host %q", ErrWrongContext, c.Host, use.Host)
	}
	return nil
}

// Seal returns the v2 value of plaintext for pub, bound to c.
func Seal(pub *rsa.PublicKey, c Context, plaintext []byte) (string, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	encoded, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	ad := additionalData(encoded)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	wrapped, err := rsa.EncryptOAEP(sha256.New(), rand.Reader, pub, key, ad)
	if err != nil {
		return "", fmt.Errorf("wrapping key: %w", err)
	}
	aead, err := newGCM(key)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	sealed := aead.Seal(nonce, nonce, plaintext, ad)
	b64 := base64.RawURLEncoding.EncodeToString
	return PrefixV2 + b64(encoded) + "." + b64(wrapped) + "." + b64(sealed), nil
}

// SealUnbound returns the v1 value of plaintext for pub: valid in any
// namespace and under any option. Prefer Seal.
func SealUnbound(pub *rsa.PublicKey, plaintext []byte) (string, error) {
	var k fernet.Key
	if err := k.Generate(); err != nil {
		return "", err
	}
	wrapped, err := rsa.EncryptOAEP(sha256.New(), rand.Reader, pub, []byte(k.Encode()), nil)
	if err != nil {
		return "", fmt.Errorf("wrapping key: %w", err)
	}
	tok, err := fernet.EncryptAndSign(plaintext, &k)
	if err != nil {
		return "", err
	}
	return PrefixV1 + base64.RawURLEncoding.EncodeToString(wrapped) + "." + string(tok), nil
}

// Value is a parsed encrypted value, not yet opened.
type Value struct {
	// Context is what a v2 value was sealed for; nil for v1 (unbound).
	Context *Context

	encodedContext []byte // v2: authenticated as it was sealed
	wrapped        []byte
	sealed         []byte // v2: nonce and GCM output; v1: the Fernet token
}

// Parse reads a full value (with its prefix) without any key. Its errors
// wrap ErrMalformed.
func Parse(value string) (*Value, error) {
	switch {
	case strings.HasPrefix(value, PrefixV2):
		return parseV2(strings.TrimPrefix(value, PrefixV2))
	case strings.HasPrefix(value, PrefixV1):
		return parseV1(strings.TrimPrefix(value, PrefixV1))
	case IsEncrypted(value):
		return nil, fmt.Errorf("%w: unknown version", ErrMalformed)
	}
	return nil, fmt.Errorf("%w: no %s prefix", ErrMalformed, Marker)
}

func parseV1(opaque string) (*Value, error) {
	wrapped64, tok, ok := strings.Cut(opaque, ".")
	if !ok || tok == "" {
		return nil, ErrMalformed
	}
	wrapped, err := base64.RawURLEncoding.DecodeString(wrapped64)
	if err != nil || len(wrapped) == 0 {
		return nil, ErrMalformed
	}
	return &Value{wrapped: wrapped, sealed: []byte(tok)}, nil
}

func parseV2(opaque string) (*Value, error) {
	parts := strings.Split(opaque, ".")
	if len(parts) != 3 {
		return nil, ErrMalformed
	}
	var raw [3][]byte
	for i, p := range parts {
		b, err := base64.RawURLEncoding.DecodeString(p)
		if err != nil || len(b) == 0 {
			return nil, ErrMalformed
		}
		raw[i] = b
	}
	var c Context
	dec := json.NewDecoder(bytes.NewReader(raw[0]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || dec.More() {
		return nil, fmt.Errorf("%w: context is not readable", ErrMalformed)
	}
	// One encoding per context: what Seal writes, and nothing else.
	if canonical, err := json.Marshal(c); err != nil || !bytes.Equal(canonical, raw[0]) || c.Validate() != nil {
		return nil, fmt.Errorf("%w: context is not valid", ErrMalformed)
	}
	if len(raw[2]) < 12+16 { // nonce and GCM tag
		return nil, ErrMalformed
	}
	return &Value{Context: &c, encodedContext: raw[0], wrapped: raw[1], sealed: raw[2]}, nil
}

// Open decrypts v with priv. Its errors wrap ErrMalformed: a tampered value
// (context included) and a value for another key look the same.
func (v *Value) Open(priv *rsa.PrivateKey) ([]byte, error) {
	if v.Context == nil {
		return v.openV1(priv)
	}
	ad := additionalData(v.encodedContext)
	key, err := rsa.DecryptOAEP(sha256.New(), nil, priv, v.wrapped, ad)
	if err != nil || len(key) != 32 {
		return nil, ErrMalformed
	}
	aead, err := newGCM(key)
	if err != nil {
		return nil, ErrMalformed
	}
	n := aead.NonceSize()
	pt, err := aead.Open(nil, v.sealed[:n], v.sealed[n:], ad)
	if err != nil {
		return nil, ErrMalformed
	}
	return pt, nil
}

func (v *Value) openV1(priv *rsa.PrivateKey) ([]byte, error) {
	encodedKey, err := rsa.DecryptOAEP(sha256.New(), nil, priv, v.wrapped, nil)
	if err != nil {
		return nil, ErrMalformed
	}
	k, err := fernet.DecodeKey(string(encodedKey))
	if err != nil {
		return nil, ErrMalformed
	}
	msg := fernet.VerifyAndDecrypt(v.sealed, 0, []*fernet.Key{k})
	if msg == nil {
		return nil, ErrMalformed
	}
	return msg, nil
}

// additionalData is what the OAEP label and the GCM tag authenticate: the
// version too, so that no part of a value is read under another version.
func additionalData(encodedContext []byte) []byte {
	return append([]byte(PrefixV2), encodedContext...)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// DecryptFernet opens a Fernet token with a Fernet key, as Renku's legacy
// secrets carry them (secretKey beside the tokens).
func DecryptFernet(key, token string) ([]byte, error) {
	k, err := fernet.DecodeKey(key)
	if err != nil {
		return nil, fmt.Errorf("%w: secretKey is not a Fernet key", ErrMalformed)
	}
	msg := fernet.VerifyAndDecrypt([]byte(token), 0, []*fernet.Key{k})
	if msg == nil {
		return nil, ErrMalformed
	}
	return msg, nil
}

// ReadPublicKey reads an RSA public key from a PEM file (PKIX or PKCS#1).
func ReadPublicKey(path string) (*rsa.PublicKey, error) {
	block, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	if k, err := x509.ParsePKCS1PublicKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an RSA public key", path)
	}
	return rk, nil
}

// ReadPrivateKey reads an RSA private key from a PEM file (PKCS#8 or PKCS#1).
func ReadPrivateKey(path string) (*rsa.PrivateKey, error) {
	block, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an RSA private key", path)
	}
	return rk, nil
}

func readPEM(path string) (*pem.Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	return block, nil
}
