package secrets

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
)

// Errors of the secret service, beside ErrInvalid (a malformed ciphertext).
var (
	// ErrDenied: the secret service refused this driver or this namespace.
	ErrDenied = errors.New("the secret service refused to decrypt")
	// ErrUnavailable: the secret service could not be reached.
	ErrUnavailable = errors.New("the secret service is unavailable")
)

// Volume context keys that external-provisioner adds with
// --extra-create-metadata; they tell the secret service whose PVC this is.
const (
	KeyPVCName      = "csi.storage.k8s.io/pvc/name"
	KeyPVCNamespace = "csi.storage.k8s.io/pvc/namespace"
)

// DecryptRequest asks the secret service for the plaintexts of ciphertexts,
// keyed by ids the caller chooses. Each ciphertext is the whole value, with
// its prefix.
type DecryptRequest struct {
	VolumeID string
	// PVCNamespace is from the volume context, never from the secret: a
	// bound value decrypts only in the namespace it was sealed for.
	PVCNamespace string
	PVCName      string
	Ciphertexts  map[string]string
	// Contexts says, by the same ids, where each value will be used.
	Contexts map[string]UseContext
}

// UseContext is where a decrypted value goes: the rclone option it is set
// as, and the host of its remote ("" when unknown). The secret service
// compares them with what the value was sealed for.
type UseContext struct {
	Option string
	Host   string
}

// hostOptions are the options rclone's backends (v1.76) take their server
// from: endpoint (s3, azureblob, b2, gcs, koofr, oracleobjectstorage,
// qingstor, sharefile, ...), url (webdav, http, filefabric), host (sftp,
// ftp, smb, netstorage, quatrix), hostname (pcloud), auth and storage_url
// (swift), api_url (sia, pixeldrain). It is not addressOptions (network.go):
// those include proxies, checked as addresses but not where a credential is
// meant to go.
var hostOptions = []string{"endpoint", "url", "host", "hostname", "auth", "storage_url", "api_url"}

// sectionHost is the host that a section's credentials are sent to, from its
// effective options; "" when it cannot tell. Every host option the section
// sets must name the same host: a backend reads only one of them, and a
// tenant could otherwise set a decoy beside the one that counts. An
// encrypted or unparsable value makes the host unknown.
func sectionHost(section map[string]string) string {
	host := ""
	for _, key := range hostOptions {
		v := strings.TrimSpace(section[key])
		if v == "" {
			continue
		}
		if envelope.IsEncrypted(v) || v == Placeholder {
			return ""
		}
		h, err := envelope.NormalizeHost(v)
		if err != nil || (host != "" && h != host) {
			return ""
		}
		host = h
	}
	return host
}

// Decrypter is a secret service client. Its errors wrap ErrInvalid,
// ErrDenied or ErrUnavailable.
type Decrypter interface {
	Decrypt(ctx context.Context, req DecryptRequest) (map[string]string, error)
}

var optionName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// optionOverrides are the keys of the secret that are not reserved: each
// sets an option of the mounted remote, as Renku writes them.
func optionOverrides(secret map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for key, value := range secret {
		if slices.Contains(reservedKeys, key) {
			continue
		}
		if !optionName.MatchString(key) {
			return nil, invalidf("secret key %q is neither a known key nor an rclone option name", key)
		}
		out[key] = value
	}
	return out, nil
}

// decrypt replaces, in place, every encrypted value of cfg and overrides
// with its plaintext, and returns the values that came encrypted or as
// overrides. The overrides are options of the remote section, which is where
// they are used: its host is that of its options after the overrides.
func decrypt(ctx context.Context, src Source, cfg Config, remote string, overrides map[string]string, dec Decrypter) ([]string, error) {
	var secretValues []string
	if key, legacy := src.Secret[KeySecretKey]; legacy {
		for name, token := range overrides {
			if envelope.IsEncrypted(token) {
				continue
			}
			plain, err := envelope.DecryptFernet(key, token)
			if err != nil {
				return nil, invalidf("option %q cannot be decrypted with %s: %v", name, KeySecretKey, err)
			}
			overrides[name] = string(plain)
		}
	}

	// One call for every encrypted value, each under an id that says where
	// it goes: "<section>/<option>" in configData, "/<option>" for overrides.
	type place struct {
		m   map[string]string
		key string
	}
	places := map[string]place{}
	ciphertexts := map[string]string{}
	contexts := map[string]UseContext{}
	add := func(id string, m map[string]string, key, host string) {
		if v := m[key]; envelope.IsEncrypted(v) {
			places[id] = place{m, key}
			ciphertexts[id] = v
			contexts[id] = UseContext{Option: key, Host: host}
		}
	}
	for name, section := range cfg {
		effective := section
		if name == remote {
			effective = maps.Clone(section)
			maps.Copy(effective, overrides)
		}
		host := sectionHost(effective)
		for key := range section {
			add(name+"/"+key, section, key, host)
		}
		if name == remote {
			for key := range overrides {
				add("/"+key, overrides, key, host)
			}
		}
	}
	if len(ciphertexts) > 0 {
		if dec == nil {
			return nil, invalidf("the secret holds encrypted values but this driver has no secret service configured")
		}
		plain, err := dec.Decrypt(ctx, DecryptRequest{
			VolumeID:     src.VolumeID,
			PVCNamespace: src.VolumeContext[KeyPVCNamespace],
			PVCName:      src.VolumeContext[KeyPVCName],
			Ciphertexts:  ciphertexts,
			Contexts:     contexts,
		})
		if err != nil {
			return nil, fmt.Errorf("decrypting %d value(s): %w", len(ciphertexts), err)
		}
		for id, p := range places {
			v, ok := plain[id]
			if !ok {
				return nil, fmt.Errorf("the secret service returned no value for %s", id)
			}
			p.m[p.key] = v
			secretValues = append(secretValues, v)
		}
	}
	for _, v := range overrides {
		secretValues = append(secretValues, v)
	}
	return secretValues, nil
}

// Check validates a secret and a volume context as Build does, without
// decrypting: encrypted values pass as they are. The controller uses it to
// fail a PVC early; the node decrypts and checks again.
func Check(secret, volumeContext map[string]string, policy *Policy) error {
	_, err := Build(context.Background(), Source{Secret: secret, VolumeContext: volumeContext}, policy, unchecked{})
	return err
}

type unchecked struct{}

func (unchecked) Decrypt(_ context.Context, req DecryptRequest) (map[string]string, error) {
	out := make(map[string]string, len(req.Ciphertexts))
	for id := range req.Ciphertexts {
		out[id] = "encrypted"
	}
	return out, nil
}
