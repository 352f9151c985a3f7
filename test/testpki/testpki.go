// Package testpki makes the keys, certificates and sealed values that tests
// of the secret flow need: real crypto, made fresh for each test.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
)

// RSAKey makes a 2048-bit RSA key.
func RSAKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// ECKey makes a P-256 key.
func ECKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// WritePEM writes der as a PEM block of type typ to dir/name, 0600.
func WritePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// WritePrivateKey writes key as PKCS#8 PEM to dir/name.
func WritePrivateKey(t testing.TB, dir, name string, key any) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return WritePEM(t, dir, name, "PRIVATE KEY", der)
}

// Seal seals plaintext for pub, bound to c: the full
// "csi-rclone:enc:v2:..." value.
func Seal(t testing.TB, pub *rsa.PublicKey, c envelope.Context, plaintext string) string {
	t.Helper()
	ct, err := envelope.Seal(pub, c, []byte(plaintext))
	if err != nil {
		t.Fatal(err)
	}
	return ct
}

// SealUnbound seals plaintext for pub in the v1 form, bound to nothing.
func SealUnbound(t testing.TB, pub *rsa.PublicKey, plaintext string) string {
	t.Helper()
	ct, err := envelope.SealUnbound(pub, []byte(plaintext))
	if err != nil {
		t.Fatal(err)
	}
	return ct
}

// ServerTLS makes a CA and a server certificate for 127.0.0.1 signed by it.
// It returns the server's config, a pool with the CA, and the CA as PEM.
func ServerTLS(t testing.TB) (*tls.Config, *x509.CertPool, []byte) {
	t.Helper()
	caKey, srvKey := ECKey(t), ECKey(t)
	now := time.Now()
	serial := func() *big.Int {
		n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "csi-rclone test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "secret-service"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}},
		MinVersion:   tls.VersionTLS12,
	}, pool, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}
