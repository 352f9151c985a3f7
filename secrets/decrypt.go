package secrets

import (
	"context"
	"errors"
	"fmt"
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
// keyed by ids the caller chooses. Each ciphertext is without the prefix.
type DecryptRequest struct {
	VolumeID     string
	PVCNamespace string
	PVCName      string
	Ciphertexts  map[string]string
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
// overrides.
func decrypt(ctx context.Context, src Source, cfg Config, overrides map[string]string, dec Decrypter) ([]string, error) {
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
	add := func(id string, m map[string]string, key string) {
		if v := m[key]; envelope.IsEncrypted(v) {
			places[id] = place{m, key}
			ciphertexts[id] = strings.TrimPrefix(v, envelope.Prefix)
		}
	}
	for name, section := range cfg {
		for key := range section {
			add(name+"/"+key, section, key)
		}
	}
	for key := range overrides {
		add("/"+key, overrides, key)
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
