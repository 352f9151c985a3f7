package envelope

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/fernet/fernet-go"
)

func testKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

var testContext = Context{Namespace: "team-a", Option: "secret_access_key", Host: "s3.example.com"}

func TestSealRoundTrip(t *testing.T) {
	key := testKey(t)
	for _, c := range []Context{testContext, {Namespace: "team-a", Option: "pass"}} {
		ct, err := Seal(&key.PublicKey, c, []byte("s3cr3t"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(ct, PrefixV2) || !IsEncrypted(ct) || strings.Contains(ct, "s3cr3t") {
			t.Fatalf("value %q", ct)
		}
		// The context is readable without the key.
		v, err := Parse(ct)
		if err != nil || v.Context == nil || *v.Context != c {
			t.Fatalf("parse: %+v %v, want context %+v", v, err, c)
		}
		got, err := v.Open(key)
		if err != nil || string(got) != "s3cr3t" {
			t.Fatalf("open: %q %v", got, err)
		}
	}
}

func TestUnboundRoundTrip(t *testing.T) {
	key := testKey(t)
	ct, err := SealUnbound(&key.PublicKey, []byte("s3cr3t"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := Parse(ct)
	if err != nil || v.Context != nil || !strings.HasPrefix(ct, PrefixV1) {
		t.Fatalf("parse %q: %+v %v", ct, v, err)
	}
	if got, err := v.Open(key); err != nil || string(got) != "s3cr3t" {
		t.Fatalf("open: %q %v", got, err)
	}
}

func TestSealRefusesInvalidContext(t *testing.T) {
	key := testKey(t)
	for name, c := range map[string]Context{
		"no namespace":        {Option: "pass"},
		"no option":           {Namespace: "team-a"},
		"namespace uppercase": {Namespace: "Team-A", Option: "pass"},
		"option with dash":    {Namespace: "team-a", Option: "secret-access-key"},
		"host with port":      {Namespace: "team-a", Option: "pass", Host: "example.com:443"},
		"host uppercase":      {Namespace: "team-a", Option: "pass", Host: "Example.com"},
	} {
		if _, err := Seal(&key.PublicKey, c, []byte("x")); err == nil {
			t.Errorf("%s: sealed", name)
		}
	}
}

// TestTamperingIsMalformed: changing any part of a v2 value (the context
// too, so that it names another namespace) makes it not open.
func TestTamperingIsMalformed(t *testing.T) {
	key := testKey(t)
	ct, err := Seal(&key.PublicKey, testContext, []byte("s3cr3t"))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(strings.TrimPrefix(ct, PrefixV2), ".")
	b64 := base64.RawURLEncoding
	join := func(p0, p1, p2 string) string { return PrefixV2 + p0 + "." + p1 + "." + p2 }
	flip := func(s string) string {
		raw, _ := b64.DecodeString(s)
		raw[len(raw)/2] ^= 1
		return b64.EncodeToString(raw)
	}
	otherNS := b64.EncodeToString([]byte(`{"namespace":"team-b","option":"secret_access_key","host":"s3.example.com"}`))
	otherOption := b64.EncodeToString([]byte(`{"namespace":"team-a","option":"pass","host":"s3.example.com"}`))
	noHost := b64.EncodeToString([]byte(`{"namespace":"team-a","option":"secret_access_key"}`))
	other, _ := Seal(&key.PublicKey, testContext, []byte("other"))
	otherParts := strings.Split(strings.TrimPrefix(other, PrefixV2), ".")

	for _, tc := range []struct {
		name  string
		value string
	}{
		{"context names another namespace", join(otherNS, parts[1], parts[2])},
		{"context names another option", join(otherOption, parts[1], parts[2])},
		{"host dropped from the context", join(noHost, parts[1], parts[2])},
		{"wrapped key", join(parts[0], flip(parts[1]), parts[2])},
		{"wrapped key of another value", join(parts[0], otherParts[1], parts[2])},
		{"ciphertext", join(parts[0], parts[1], flip(parts[2]))},
		{"ciphertext of another value", join(parts[0], parts[1], otherParts[2])},
		{"v1 prefix on a v2 body", PrefixV1 + strings.TrimPrefix(ct, PrefixV2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Parse(tc.value)
			if err == nil {
				_, err = v.Open(key)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want ErrMalformed", err)
			}
		})
	}
	v, _ := Parse(ct)
	if _, err := v.Open(testKey(t)); !errors.Is(err, ErrMalformed) {
		t.Errorf("another key: %v, want ErrMalformed", err)
	}
}

func TestParseMalformed(t *testing.T) {
	b64 := base64.RawURLEncoding.EncodeToString
	body := "." + b64([]byte("wrapped")) + "." + b64(make([]byte, 40))
	for name, value := range map[string]string{
		"empty":                 "",
		"no prefix":             "abc.def",
		"unknown version":       Marker + "v9:abc",
		"v1 without separator":  PrefixV1 + "abc",
		"v2 two parts":          PrefixV2 + "abc.def",
		"v2 not base64":         PrefixV2 + "a*c.def.ghi",
		"context not JSON":      PrefixV2 + b64([]byte("team-a")) + body,
		"context unknown field": PrefixV2 + b64([]byte(`{"namespace":"a","option":"b","extra":1}`)) + body,
		"context not canonical": PrefixV2 + b64([]byte(`{"option":"b","namespace":"a"}`)) + body,
		"context invalid":       PrefixV2 + b64([]byte(`{"namespace":"","option":"b"}`)) + body,
		"sealed part too short": PrefixV2 + b64([]byte(`{"namespace":"a","option":"b"}`)) + "." + b64([]byte("w")) + "." + b64([]byte("short")),
	} {
		if _, err := Parse(value); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func TestPermits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sealed Context
		use    Context
		part   string // in the error; "" = permitted
	}{
		{"same", testContext, testContext, ""},
		{"no host sealed: any host", Context{Namespace: "team-a", Option: "pass"}, Context{Namespace: "team-a", Option: "pass", Host: "evil.example"}, ""},
		{"other namespace", testContext, Context{Namespace: "team-b", Option: "secret_access_key", Host: "s3.example.com"}, "namespace"},
		{"other option", testContext, Context{Namespace: "team-a", Option: "pass", Host: "s3.example.com"}, "option"},
		{"other host", testContext, Context{Namespace: "team-a", Option: "secret_access_key", Host: "evil.example"}, "host"},
		{"unknown host", testContext, Context{Namespace: "team-a", Option: "secret_access_key"}, "host is unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sealed.Permits(tc.use)
			if tc.part == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrWrongContext) || !strings.Contains(err.Error(), tc.part) {
				t.Fatalf("got %v, want ErrWrongContext naming %s", err, tc.part)
			}
		})
	}
}

func TestNormalizeHost(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"s3.example.com", "s3.example.com"},
		{"S3.Example.COM.", "s3.example.com"},
		{"s3.example.com:9000", "s3.example.com"},
		{"https://s3.example.com:9000/bucket?x=1", "s3.example.com"},
		{"http://user:pw@dav.example.com/remote.php", "dav.example.com"},
		{"127.0.0.1:9000", "127.0.0.1"},
		{"http://[::1]:8080", "::1"},
		{"::1", "::1"},
		{" sftp.example.com ", "sftp.example.com"},
	} {
		got, err := NormalizeHost(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("NormalizeHost(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "https://", "http://exa mple.com", "http://%zz"} {
		if got, err := NormalizeHost(bad); err == nil {
			t.Errorf("NormalizeHost(%q) = %q, want an error", bad, got)
		}
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
