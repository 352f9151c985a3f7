package envelope

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"strings"
	"testing"

	"github.com/fernet/fernet-go"
)

func TestRoundTripAndTampering(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	ct, err := Encrypt(&key.PublicKey, []byte("s3cr3t"))
	if err != nil {
		t.Fatal(err)
	}
	if !IsEncrypted(ct) || strings.Contains(ct, "s3cr3t") {
		t.Fatalf("ciphertext %q", ct)
	}
	opaque := strings.TrimPrefix(ct, Prefix)
	got, err := Decrypt(key, opaque)
	if err != nil || string(got) != "s3cr3t" {
		t.Fatalf("decrypt: %q %v", got, err)
	}
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	for name, bad := range map[string]string{
		"no separator":   strings.ReplaceAll(opaque, ".", ""),
		"tampered key":   flip(opaque, 10),
		"tampered token": flip(opaque, len(opaque)-10),
		"empty":          "",
	} {
		if _, err := Decrypt(key, bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := Decrypt(other, opaque); !errors.Is(err, ErrMalformed) {
		t.Errorf("another key: %v, want ErrMalformed", err)
	}
}

func TestDecryptFernet(t *testing.T) {
	var k fernet.Key
	if err := k.Generate(); err != nil {
		t.Fatal(err)
	}
	tok, _ := fernet.EncryptAndSign([]byte("renku"), &k)
	if got, err := DecryptFernet(k.Encode(), string(tok)); err != nil || string(got) != "renku" {
		t.Fatalf("%q %v", got, err)
	}
	if _, err := DecryptFernet("not-a-key", string(tok)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad key: %v", err)
	}
	if _, err := DecryptFernet(k.Encode(), "gAAAAAbogus"); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad token: %v", err)
	}
}
