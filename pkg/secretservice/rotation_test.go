package secretservice

import (
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
)

func TestPreviousKeysOpenOldEnvelopes(t *testing.T) {
	oldKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	newKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	sealedOld, _ := envelope.Encrypt(&oldKey.PublicKey, []byte("old"))
	sealedNew, _ := envelope.Encrypt(&newKey.PublicKey, []byte("new"))
	rotated := New(Options{PrivateKey: newKey, PreviousKeys: []*rsa.PrivateKey{oldKey}})
	for sealed, want := range map[string]string{sealedOld: "old", sealedNew: "new"} {
		got, err := rotated.open(strings.TrimPrefix(sealed, envelope.Prefix))
		if err != nil || string(got) != want {
			t.Fatalf("open: %q %v, want %q", got, err, want)
		}
	}
	if _, err := New(Options{PrivateKey: newKey}).open(strings.TrimPrefix(sealedOld, envelope.Prefix)); err == nil {
		t.Fatal("an envelope of a dropped key opened")
	}
}
