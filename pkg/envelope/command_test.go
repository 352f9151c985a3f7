package envelope

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommand(t *testing.T) {
	key := testKey(t)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pub := filepath.Join(t.TempDir(), "pub.pem")
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want *Context // nil: unbound
	}{
		{"bound", []string{"--public-key", pub, "--namespace", "team-a", "--option", "secret_access_key"},
			&Context{Namespace: "team-a", Option: "secret_access_key"}},
		{"bound to a host given as URL", []string{"--public-key", pub, "--namespace", "team-a", "--option", "pass", "--host", "https://Dav.Example.com:8443/remote.php"},
			&Context{Namespace: "team-a", Option: "pass", Host: "dav.example.com"}},
		{"unbound", []string{"--public-key", pub, "--unbound"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := Command("encrypt", tc.args, strings.NewReader("s3cr3t\n"), &out); err != nil {
				t.Fatal(err)
			}
			v, err := Parse(strings.TrimSpace(out.String()))
			if err != nil {
				t.Fatal(err)
			}
			if (tc.want == nil) != (v.Context == nil) || (tc.want != nil && *v.Context != *tc.want) {
				t.Fatalf("context %+v, want %+v", v.Context, tc.want)
			}
			if got, err := v.Open(key); err != nil || string(got) != "s3cr3t" {
				t.Fatalf("round trip: %q %v", got, err)
			}
		})
	}
	for name, args := range map[string][]string{
		"no key":              {"--namespace", "team-a", "--option", "pass"},
		"value as argument":   {"--public-key", pub, "--namespace", "team-a", "--option", "pass", "s3cr3t"},
		"no namespace":        {"--public-key", pub, "--option", "pass"},
		"no option":           {"--public-key", pub, "--namespace", "team-a"},
		"bad namespace":       {"--public-key", pub, "--namespace", "Team A", "--option", "pass"},
		"bad host":            {"--public-key", pub, "--namespace", "team-a", "--option", "pass", "--host", "http://a b"},
		"unbound and context": {"--public-key", pub, "--unbound", "--namespace", "team-a"},
	} {
		var out bytes.Buffer
		if err := Command("encrypt", args, strings.NewReader("x"), &out); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
