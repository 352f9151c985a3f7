package secretservice

import (
	"crypto/rand"
	"crypto/rsa"
	"testing"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
)

func TestPreviousKeysOpenOldEnvelopes(t *testing.T) {
	oldKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	newKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	c := envelope.Context{Namespace: "team-a", Option: "pass"}
	sealedOld, _ := envelope.Seal(&oldKey.PublicKey, c, []byte("old"))
	sealedNew, _ := envelope.Seal(&newKey.PublicKey, c, []byte("new"))
	unboundOld, _ := envelope.SealUnbound(&oldKey.PublicKey, []byte("old v1"))
	rotated := New(Options{PrivateKey: newKey, PreviousKeys: []*rsa.PrivateKey{oldKey}})
	parse := func(s string) *envelope.Value {
		v, err := envelope.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for sealed, want := range map[string]string{sealedOld: "old", sealedNew: "new", unboundOld: "old v1"} {
		got, err := rotated.open(parse(sealed))
		if err != nil || string(got) != want {
			t.Fatalf("open: %q %v, want %q", got, err, want)
		}
	}
	if _, err := New(Options{PrivateKey: newKey}).open(parse(sealedOld)); err == nil {
		t.Fatal("an envelope of a dropped key opened")
	}
}
