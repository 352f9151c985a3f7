package envelope

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommand(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pub := filepath.Join(t.TempDir(), "pub.pem")
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Command("encrypt", []string{"--public-key", pub}, strings.NewReader("s3cr3t\n"), &out); err != nil {
		t.Fatal(err)
	}
	got, err := Decrypt(key, strings.TrimPrefix(strings.TrimSpace(out.String()), Prefix))
	if err != nil || string(got) != "s3cr3t" {
		t.Fatalf("round trip: %q %v", got, err)
	}
	for name, args := range map[string][]string{
		"no key":            nil,
		"value as argument": {"--public-key", pub, "s3cr3t"},
	} {
		if err := Command("encrypt", args, strings.NewReader("x"), &out); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
