// Package envelope is the encryption of a credential in a Kubernetes Secret:
// envelope encryption like Renku's outer layer. Each value gets a random
// Fernet key; the value is a Fernet token under that key, and the key is
// wrapped with RSA-OAEP-SHA256 under the secret service's public key. Only
// the holder of the private key (the secret service) can decrypt, so
// reading the Secret does not reveal the credential.
//
// In a Secret, an encrypted value is Prefix followed by the opaque part:
// base64url(wrapped key) "." Fernet token.
package envelope

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/fernet/fernet-go"
)

// Prefix marks an encrypted value in a stage secret; the version names the
// format of what follows.
const Prefix = "csi-rclone:enc:v1:"

// ErrMalformed is a ciphertext that cannot be decrypted: not of this format,
// tampered with, or wrapped under another key.
var ErrMalformed = errors.New("malformed or tampered ciphertext")

// IsEncrypted reports whether a value is in this format.
func IsEncrypted(value string) bool { return strings.HasPrefix(value, Prefix) }

// Encrypt returns Prefix + the opaque ciphertext of plaintext for pub.
func Encrypt(pub *rsa.PublicKey, plaintext []byte) (string, error) {
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
	return Prefix + base64.RawURLEncoding.EncodeToString(wrapped) + "." + string(tok), nil
}

// Decrypt opens an opaque ciphertext (without Prefix) with priv.
func Decrypt(priv *rsa.PrivateKey, opaque string) ([]byte, error) {
	wrapped64, tok, ok := strings.Cut(opaque, ".")
	if !ok {
		return nil, ErrMalformed
	}
	wrapped, err := base64.RawURLEncoding.DecodeString(wrapped64)
	if err != nil {
		return nil, ErrMalformed
	}
	encodedKey, err := rsa.DecryptOAEP(sha256.New(), nil, priv, wrapped, nil)
	if err != nil {
		return nil, ErrMalformed
	}
	k, err := fernet.DecodeKey(string(encodedKey))
	if err != nil {
		return nil, ErrMalformed
	}
	msg := fernet.VerifyAndDecrypt([]byte(tok), 0, []*fernet.Key{k})
	if msg == nil {
		return nil, ErrMalformed
	}
	return msg, nil
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
