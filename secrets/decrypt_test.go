package secrets

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/fernet/fernet-go"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
)

// fakeService "decrypts" by reversing what follows the v2 prefix; it
// records requests.
type fakeService struct {
	err  error
	reqs []DecryptRequest
}

func (f *fakeService) Decrypt(_ context.Context, req DecryptRequest) (map[string]string, error) {
	f.reqs = append(f.reqs, req)
	if f.err != nil {
		return nil, f.err
	}
	out := map[string]string{}
	for id, ct := range req.Ciphertexts {
		r := []rune(strings.TrimPrefix(ct, envelope.PrefixV2))
		for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
			r[i], r[j] = r[j], r[i]
		}
		out[id] = string(r)
	}
	return out, nil
}

func enc(plain string) string {
	r := []rune(plain)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return envelope.PrefixV2 + string(r)
}

const s3Section = "[store]\ntype = s3\nprovider = Other\nendpoint = http://127.0.0.1:9000\n"

func TestBuildDecrypts(t *testing.T) {
	var fk fernet.Key
	if err := fk.Generate(); err != nil {
		t.Fatal(err)
	}
	tok, _ := fernet.EncryptAndSign([]byte("legacy-secret"), &fk)

	for _, tc := range []struct {
		name    string
		secret  map[string]string
		context map[string]string
		want    map[string]string // options of [store]
		calls   int
	}{
		{
			name:   "encrypted value in configData",
			secret: map[string]string{"remote": "store", "configData": s3Section + "secret_access_key = " + enc("SK-plain") + "\n"},
			want:   map[string]string{"secret_access_key": "SK-plain"},
			calls:  1,
		},
		{
			name: "encrypted overrides fill placeholders",
			secret: map[string]string{"remote": "store", "configData": s3Section + "access_key_id = <sensitive>\nsecret_access_key = <sensitive>\n",
				"access_key_id": enc("AK-plain"), "secret_access_key": enc("SK-plain")},
			context: map[string]string{KeyPVCNamespace: "alice", KeyPVCName: "data"},
			want:    map[string]string{"access_key_id": "AK-plain", "secret_access_key": "SK-plain"},
			calls:   1,
		},
		{
			name:   "plain override",
			secret: map[string]string{"remote": "store", "configData": s3Section, "secret_access_key": "SK-plain"},
			want:   map[string]string{"secret_access_key": "SK-plain"},
		},
		{
			name: "legacy Renku secretKey with Fernet overrides",
			secret: map[string]string{"remote": "store", "configData": s3Section + "secret_access_key = <sensitive>\n",
				"secretKey": fk.Encode(), "secret_access_key": string(tok)},
			want: map[string]string{"secret_access_key": "legacy-secret"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &fakeService{}
			v, err := Build(context.Background(), Source{Secret: tc.secret, VolumeContext: tc.context, VolumeID: "vol"}, nil, svc)
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range tc.want {
				if got := v.Config["store"][k]; got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
				if !strings.Contains(v.Redact("x "+want+" y"), Redacted) {
					t.Errorf("%s value not redacted", k)
				}
			}
			if len(svc.reqs) != tc.calls {
				t.Fatalf("%d calls to the service, want %d", len(svc.reqs), tc.calls)
			}
			if tc.calls > 0 {
				r := svc.reqs[0]
				if r.VolumeID != "vol" || r.PVCNamespace != tc.context[KeyPVCNamespace] || r.PVCName != tc.context[KeyPVCName] {
					t.Errorf("request %+v", r)
				}
				for id, ct := range r.Ciphertexts {
					if !strings.HasPrefix(ct, envelope.PrefixV2) {
						t.Errorf("ciphertext sent without its prefix: %q", ct)
					}
					if _, ok := r.Contexts[id]; !ok {
						t.Errorf("no context for %s", id)
					}
				}
			}
		})
	}
}

func TestBuildDecryptFailures(t *testing.T) {
	var fk fernet.Key
	_ = fk.Generate()
	base := map[string]string{"remote": "store", "configData": s3Section + "secret_access_key = " + enc("SK") + "\n"}
	for _, tc := range []struct {
		name   string
		secret map[string]string
		svc    Decrypter
		want   error
	}{
		{"no secret service", base, nil, ErrInvalid},
		{"service refuses", base, &fakeService{err: fmt.Errorf("%w: namespace", ErrDenied)}, ErrDenied},
		{"service down", base, &fakeService{err: fmt.Errorf("%w: refused", ErrUnavailable)}, ErrUnavailable},
		{"tampered ciphertext", base, &fakeService{err: fmt.Errorf("%w: tampered", ErrInvalid)}, ErrInvalid},
		{"placeholder without override", map[string]string{"remote": "store", "configData": s3Section + "secret_access_key = <sensitive>\n"}, &fakeService{}, ErrInvalid},
		{"legacy token that does not decrypt", map[string]string{"remote": "store", "configData": s3Section, "secretKey": fk.Encode(), "secret_access_key": "gAAAAAnot-a-token"}, nil, ErrInvalid},
		{"decrypted value with a line break", map[string]string{"remote": "store", "configData": s3Section, "secret_access_key": enc("a\n[evil]\ntype = local")}, &fakeService{}, ErrInvalid},
		{"override of a denied option", map[string]string{"remote": "store", "configData": s3Section, "env_auth": "true"}, nil, ErrInvalid},
		{"override key that is no option name", map[string]string{"remote": "store", "configData": s3Section, "Bad Key": "x"}, nil, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(context.Background(), Source{Secret: tc.secret}, nil, tc.svc)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestDecryptContexts: each value goes with the option it is set as and the
// host of its section's effective options, overrides included.
func TestDecryptContexts(t *testing.T) {
	var fk fernet.Key
	if err := fk.Generate(); err != nil {
		t.Fatal(err)
	}
	fernetEndpoint, _ := fernet.EncryptAndSign([]byte("https://tenant.example"), &fk)
	const s3 = "[store]\ntype = s3\nprovider = Other\n"
	const swift = "[sw]\ntype = swift\nuser = u\n"
	for _, tc := range []struct {
		name   string
		secret map[string]string
		want   map[string]UseContext
	}{
		{
			name:   "configData value, endpoint URL with port",
			secret: map[string]string{"remote": "store", "configData": s3 + "endpoint = http://127.0.0.1:9000\nsecret_access_key = " + enc("SK") + "\n"},
			want:   map[string]UseContext{"store/secret_access_key": {"secret_access_key", "127.0.0.1"}},
		},
		{
			name: "override of the endpoint: the host of the tenant's server",
			secret: map[string]string{"remote": "store", "configData": s3 + "endpoint = https://s3.example.org\nsecret_access_key = <sensitive>\naccess_key_id = " + enc("AK") + "\n",
				"endpoint": "https://Tenant.Example:8443/", "secret_access_key": enc("SK")},
			want: map[string]UseContext{"/secret_access_key": {"secret_access_key", "tenant.example"}, "store/access_key_id": {"access_key_id", "tenant.example"}},
		},
		{
			name: "legacy Fernet override of the endpoint is read in plaintext",
			secret: map[string]string{"remote": "store", "configData": s3 + "endpoint = https://s3.example.org\nsecret_access_key = " + enc("SK") + "\n",
				"secretKey": fk.Encode(), "endpoint": string(fernetEndpoint)},
			want: map[string]UseContext{"store/secret_access_key": {"secret_access_key", "tenant.example"}},
		},
		{
			name: "overrides apply to the mounted remote only",
			secret: map[string]string{"remote": "dav", "url": "https://tenant.example/dav",
				"configData": "[dav]\ntype = webdav\nurl = https://dav.example.org/remote.php/dav\npass = " + enc("DAV") + "\n" +
					"[other]\ntype = s3\nprovider = Other\nendpoint = https://s3.example.org\nsecret_access_key = " + enc("SK") + "\n"},
			want: map[string]UseContext{"dav/pass": {"pass", "tenant.example"}, "other/secret_access_key": {"secret_access_key", "s3.example.org"}},
		},
		{
			name:   "sftp host",
			secret: map[string]string{"remote": "box", "configData": "[box]\ntype = sftp\nhost = SFTP.example.org\nuser = u\npass = " + enc("PW") + "\n"},
			want:   map[string]UseContext{"box/pass": {"pass", "sftp.example.org"}},
		},
		{
			name:   "no host option",
			secret: map[string]string{"remote": "store", "configData": s3 + "region = eu-central-1\nsecret_access_key = " + enc("SK") + "\n"},
			want:   map[string]UseContext{"store/secret_access_key": {"secret_access_key", ""}},
		},
		{
			name:   "encrypted endpoint: host unknown",
			secret: map[string]string{"remote": "store", "configData": s3 + "endpoint = " + enc("https://s3.example.org") + "\nsecret_access_key = " + enc("SK") + "\n"},
			want:   map[string]UseContext{"store/secret_access_key": {"secret_access_key", ""}, "store/endpoint": {"endpoint", ""}},
		},
		{
			name:   "host options that disagree: host unknown",
			secret: map[string]string{"remote": "sw", "configData": swift + "auth = https://keystone.example.org/v3\nstorage_url = https://tenant.example/v1/AUTH_x\nkey = " + enc("K") + "\n"},
			want:   map[string]UseContext{"sw/key": {"key", ""}},
		},
		{
			name:   "host options that agree",
			secret: map[string]string{"remote": "sw", "configData": swift + "auth = https://swift.example.org/auth/v1.0\nstorage_url = swift.example.org:443\nkey = " + enc("K") + "\n"},
			want:   map[string]UseContext{"sw/key": {"key", "swift.example.org"}},
		},
		{
			name:   "unparsable endpoint: host unknown",
			secret: map[string]string{"remote": "store", "configData": s3 + "endpoint = http://exa mple\nsecret_access_key = " + enc("SK") + "\n"},
			want:   map[string]UseContext{"store/secret_access_key": {"secret_access_key", ""}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &fakeService{}
			vc := map[string]string{KeyPVCNamespace: "alice"}
			if _, err := Build(context.Background(), Source{Secret: tc.secret, VolumeContext: vc, VolumeID: "vol"}, nil, svc); err != nil {
				t.Fatal(err)
			}
			if len(svc.reqs) != 1 {
				t.Fatalf("%d calls, want 1", len(svc.reqs))
			}
			r := svc.reqs[0]
			if !maps.Equal(r.Contexts, tc.want) {
				t.Errorf("contexts %v, want %v", r.Contexts, tc.want)
			}
			if r.PVCNamespace != "alice" {
				t.Errorf("namespace %q", r.PVCNamespace)
			}
		})
	}
}

// TestNamespaceNotFromSecret: the namespace a value is decrypted for comes
// from the volume context; a secret key cannot set it.
func TestNamespaceNotFromSecret(t *testing.T) {
	cfg := s3Section + "secret_access_key = " + enc("SK") + "\n"
	for _, key := range []string{KeyPVCNamespace, "pvc_namespace", "namespace"} {
		svc := &fakeService{}
		secret := map[string]string{"remote": "store", "configData": cfg, key: "victim"}
		_, err := Build(context.Background(), Source{Secret: secret, VolumeContext: map[string]string{KeyPVCNamespace: "alice"}}, nil, svc)
		if err == nil && key == KeyPVCNamespace {
			t.Fatalf("secret key %q accepted", key)
		}
		if err == nil {
			// A plain option name is an option override of the remote, never the namespace.
			if len(svc.reqs) != 1 || svc.reqs[0].PVCNamespace != "alice" {
				t.Errorf("secret key %q: requests %+v", key, svc.reqs)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || len(svc.reqs) != 0 {
			t.Errorf("secret key %q: %v, %d requests", key, err, len(svc.reqs))
		}
	}
}

func TestCheckAcceptsEncryptedValuesWithoutService(t *testing.T) {
	secret := map[string]string{"remote": "store", "configData": s3Section + "secret_access_key = " + enc("SK") + "\n"}
	if err := Check(secret, nil, nil); err != nil {
		t.Fatal(err)
	}
	secret["configData"] = "[store]\ntype = local\n"
	if err := Check(secret, nil, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v", err)
	}
}
