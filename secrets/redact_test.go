package secrets

import (
	"slices"
	"testing"
)

func TestSensitive(t *testing.T) {
	cfg := Config{
		"s3remote": {"type": "s3", "provider": "Other", "access_key_id": "AKIDVALUE", "secret_access_key": "SECRETVALUE", "endpoint": "http://127.0.0.1:9000"},
		"enc":      {"type": "crypt", "remote": "s3remote:bucket", "password": "CRYPTPASSWORD", "filename_encryption": "standard"},
		// An unknown type: only option names tell what is sensitive.
		"odd": {"type": "nosuch", "my_token": "TOKENVALUE", "region": "eu"},
	}
	got := cfg.Sensitive()
	for _, want := range []string{"AKIDVALUE", "SECRETVALUE", "CRYPTPASSWORD", "TOKENVALUE"} {
		if !slices.Contains(got, want) {
			t.Errorf("Sensitive() = %q, lacks %q", got, want)
		}
	}
	for _, not := range []string{"s3", "crypt", "Other", "http://127.0.0.1:9000", "s3remote:bucket", "standard", "eu"} {
		if slices.Contains(got, not) {
			t.Errorf("Sensitive() = %q, holds %q", got, not)
		}
	}

	msg := "PUT http://127.0.0.1:9000 with AKIDVALUE/SECRETVALUE (crypt CRYPTPASSWORD) failed"
	want := "PUT http://127.0.0.1:9000 with ***/*** (crypt ***) failed"
	if r := cfg.Redact(msg); r != want {
		t.Errorf("Redact() = %q, want %q", r, want)
	}
}

func TestRedactNestedSecrets(t *testing.T) {
	// One secret contains another: whichever map order, the longer one
	// must be replaced whole.
	cfg := Config{"s3remote": {"type": "s3", "access_key_id": "ABCDEF", "secret_access_key": "xxABCDEFyy"}}
	if got := cfg.Redact("k=xxABCDEFyy"); got != "k=***" {
		t.Errorf("Redact() = %q, want k=***", got)
	}
}

func TestRedactValues(t *testing.T) {
	for _, tc := range []struct {
		name, msg string
		values    []string
		want      string
	}{
		{"none", "nothing here", nil, "nothing here"},
		{"every occurrence", "a SECRET b SECRET", []string{"SECRET"}, "a *** b ***"},
		{"longest first", "token=abc123xyz", []string{"abc123xyz", "abc123"}, "token=***"},
		{"shorter value elsewhere", "abc123xyz and abc123", []string{"abc123xyz", "abc123"}, "*** and ***"},
		{"values under three bytes ignored", "a ab abc", []string{"a", "ab", ""}, "a ab abc"},
		{"three bytes redacted", "a ab abc", []string{"abc"}, "a ab ***"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RedactValues(tc.msg, tc.values); got != tc.want {
				t.Errorf("RedactValues(%q, %q) = %q, want %q", tc.msg, tc.values, got, tc.want)
			}
		})
	}
}

// TestVolumeRedact checks that a value that came as an override (Secrets) is
// replaced whole even when it holds a shorter sensitive value.
func TestVolumeRedact(t *testing.T) {
	endpoint := "https://" + leak + ".example"
	v, err := Parse(sec(s3LeakConf, "s3remote", "endpoint", endpoint), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Redact("dial " + endpoint + ": refused"); got != "dial ***: refused" {
		t.Errorf("Redact() = %q, want %q", got, "dial ***: refused")
	}
}
