package secrets

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fernet/fernet-go"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
)

// fakeService "decrypts" by reversing the opaque part; it records requests.
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
		r := []rune(ct)
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
	return envelope.Prefix + string(r)
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
				for _, ct := range r.Ciphertexts {
					if strings.HasPrefix(ct, envelope.Prefix) {
						t.Errorf("ciphertext sent with its prefix: %q", ct)
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
