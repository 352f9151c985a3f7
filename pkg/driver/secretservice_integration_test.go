package driver_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/csi-rclone/csi-rclone/test/procfs"
	"github.com/csi-rclone/csi-rclone/test/testpki"

	"github.com/fernet/fernet-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-rclone/csi-rclone/pkg/driver"
	"github.com/csi-rclone/csi-rclone/pkg/envelope"
	"github.com/csi-rclone/csi-rclone/pkg/secretservice"
	"github.com/csi-rclone/csi-rclone/pkg/state"
	"github.com/csi-rclone/csi-rclone/secrets"
	"github.com/csi-rclone/csi-rclone/secrets/client"
	"github.com/csi-rclone/csi-rclone/test/harness"
)

const (
	ssIssuer   = "csi-rclone-node"
	ssAudience = "csi-rclone-secret-service"
	ssSubject  = "system:serviceaccount:kube-system:csi-rclone-node"
	ssNS       = "team-a"
	// ssOtherNS is another tenant's namespace, also allowed by the service.
	ssOtherNS = "team-b"
	// s3Host is the host of the harness's S3 endpoint (http://127.0.0.1:port).
	s3Host = "127.0.0.1"
)

// seal encrypts plaintext for pub, bound to the namespace ssNS, option and
// the harness's S3 host.
func seal(t *testing.T, pub *rsa.PublicKey, option, plaintext string) string {
	return testpki.Seal(t, pub, envelope.Context{Namespace: ssNS, Option: option, Host: s3Host}, plaintext)
}

// startSecretServiceEnv starts the secret service (envelope key pub, JWT
// signed by a key of the driver's, namespaces ssNS and ssOtherNS) and the
// driver with a client of it.
func startSecretServiceEnv(t *testing.T) (*harness.Env, *harness.SecretService, *rsa.PublicKey) {
	t.Helper()
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	serviceKey, signKey := testpki.RSAKey(t), testpki.ECKey(t)
	keyFile := testpki.WritePrivateKey(t, t.TempDir(), "token-key.pem", signKey)
	verifier, err := secretservice.NewJWTVerifier(t.Context(), secretservice.JWTOptions{
		PublicKeys: []crypto.PublicKey{&signKey.PublicKey}, Issuer: ssIssuer, Audience: ssAudience,
	})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := harness.StartSecretService(secretservice.New(secretservice.Options{
		PrivateKey: serviceKey, Verifier: verifier,
		AllowedNamespaces: []string{ssNS, ssOtherNS}, AllowedSubjects: []string{ssSubject},
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ss.Stop)

	tok, err := client.NewSignedToken(keyFile, ssIssuer, ssSubject, ssAudience, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Options{
		Endpoint: "grpc://" + ss.Addr, Token: tok,
		Timeout: 5 * time.Second, Attempts: 2, Backoff: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	e, err := harness.Start(context.Background(), t.TempDir(), func(o *driver.Options) { o.Decrypter = c })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, ss, &serviceKey.PublicKey
}

// withOption replaces the value of an option in the harness's config.
func withOption(t *testing.T, configData, key, value string) string {
	t.Helper()
	lines := strings.Split(configData, "\n")
	found := false
	for i, line := range lines {
		if k, _, ok := strings.Cut(line, " = "); ok && k == key {
			lines[i] = key + " = " + value
			found = true
		}
	}
	if !found {
		t.Fatalf("config has no %s:\n%s", key, configData)
	}
	return strings.Join(lines, "\n")
}

// writeThrough stages v, writes a file through a published target, and
// unstages: the file must then be an object in the bucket.
func writeThrough(t *testing.T, v *vol, bucket string) {
	t.Helper()
	v.mustStage()
	if !recorded(t, v.e, v.id) {
		t.Fatal("no recovery record of a staged volume") // else failsCleanly's check proves nothing
	}
	target := v.mustPublish("pod", false)
	content := "written through " + v.id
	if err := os.WriteFile(filepath.Join(target, "f.txt"), []byte(content), 0o644); err != nil {
		t.Fatalf("write through the target: %v", err)
	}
	if err := v.unpublish(target); err != nil {
		t.Fatal(err)
	}
	if err := v.unstage(); err != nil {
		t.Fatalf("unstage: %v", err)
	}
	got, err := os.ReadFile(v.e.S3.Object(bucket, "f.txt"))
	if err != nil || string(got) != content {
		t.Fatalf("object in the bucket: %q, %v", got, err)
	}
	if procfs.Mounted(t, v.staging) || workers(t, v.e, v.id) != 0 || recorded(t, v.e, v.id) {
		t.Fatal("mount, worker or record left after unstage")
	}
}

// failsCleanly stages v, wants code, and checks that nothing is left (no
// mount, worker, cache dir or record) and that the message quotes no
// credential. It returns the stage's error.
func failsCleanly(t *testing.T, v *vol, code codes.Code, secretValues ...string) error {
	t.Helper()
	err := v.stage()
	wantCode(t, err, code)
	t.Logf("stage: %v", err)
	for _, s := range append(secretValues, harness.SecretAccessKey) {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error quotes a credential or ciphertext: %v", err)
		}
	}
	if procfs.Mounted(t, v.staging) {
		t.Error("staging path mounted after a failed stage")
	}
	if n := workers(t, v.e, v.id); n != 0 {
		t.Errorf("%d workers left", n)
	}
	if left, _ := os.ReadDir(filepath.Join(v.e.Dir, "cache")); len(left) != 0 {
		t.Errorf("cache dirs left: %v", left)
	}
	if recorded(t, v.e, v.id) {
		t.Error("recovery record left after a failed stage")
	}
	return err
}

// recorded reports whether the driver holds a recovery record of a volume.
// It reads the files itself: state.New would chmod the directory, which
// the unprivileged workers traverse.
func recorded(t *testing.T, e *harness.Env, volumeID string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(e.Dir, "state", "volumes", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rec state.Volume
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatalf("record %s: %v", f, err)
		}
		if rec.VolumeID == volumeID {
			return true
		}
	}
	return false
}

func TestSecretServiceStage(t *testing.T) {
	e, ss, pub := startSecretServiceEnv(t)
	pvc := map[string]string{secrets.KeyPVCNamespace: ssNS, secrets.KeyPVCName: "data"}
	// All buckets first: the S3 server caches its listing of buckets.
	for _, b := range []string{"enc-config", "enc-override", "enc-fail"} {
		if err := e.S3.MakeBucket(b); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("encrypted configData", func(t *testing.T) {
		v := newVol(t, e, "vol-ss-config", "enc-config")
		cfg := withOption(t, v.secret["configData"], "secret_access_key", seal(t, pub, "secret_access_key", harness.SecretAccessKey))
		// Two encrypted values, decrypted in one call.
		v.secret["configData"] = withOption(t, cfg, "access_key_id", seal(t, pub, "access_key_id", harness.AccessKeyID))
		v.context = pvc
		writeThrough(t, v, "enc-config")
	})

	t.Run("Renku override", func(t *testing.T) {
		v := newVol(t, e, "vol-ss-override", "enc-override")
		v.secret["configData"] = withOption(t, v.secret["configData"], "secret_access_key", secrets.Placeholder)
		v.secret["secret_access_key"] = seal(t, pub, "secret_access_key", harness.SecretAccessKey)
		v.context = pvc
		writeThrough(t, v, "enc-override")
	})

	good := seal(t, pub, "secret_access_key", harness.SecretAccessKey)
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		ct      string
		context map[string]string
		code    codes.Code
	}{
		{"namespace not allowed", good, map[string]string{secrets.KeyPVCNamespace: "team-z", secrets.KeyPVCName: "data"}, codes.PermissionDenied},
		{"no namespace", good, nil, codes.PermissionDenied},
		{"tampered ciphertext", tamperEnvelope(good), pvc, codes.InvalidArgument},
		{"ciphertext for another service", seal(t, &otherKey.PublicKey, "secret_access_key", harness.SecretAccessKey), pvc, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, e, "vol-ss-"+strings.ReplaceAll(tc.name, " ", "-"), "enc-fail")
			v.secret["configData"] = withOption(t, v.secret["configData"], "secret_access_key", secrets.Placeholder)
			v.secret["secret_access_key"] = tc.ct
			v.context = tc.context
			failsCleanly(t, v, tc.code, tc.ct)
		})
	}

	t.Run("service down, then back", func(t *testing.T) {
		v := newVol(t, e, "vol-ss-down", "enc-fail")
		v.secret["configData"] = withOption(t, v.secret["configData"], "secret_access_key", good)
		v.context = pvc
		ss.Stop()
		failsCleanly(t, v, codes.Unavailable, good)

		// The kubelet retries the stage; once the service is back it works.
		if err := ss.Start(); err != nil {
			t.Fatal(err)
		}
		eventuallyWithin(t, 30*time.Second, "stage after the secret service came back", v.stage)
		t.Cleanup(func() { v.unstage() })
		if !procfs.Mounted(t, v.staging) || workers(t, v.e, v.id) != 1 {
			t.Fatal("volume not mounted after the stage succeeded")
		}
		if err := v.unstage(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSecretServiceContextBinding: the attacks that binding values to their
// context stops. Each value is intact and sealed for this service; each
// stage is refused by the service before any worker starts.
func TestSecretServiceContextBinding(t *testing.T) {
	e, _, pub := startSecretServiceEnv(t)
	if err := e.S3.MakeBucket("bound"); err != nil {
		t.Fatal(err)
	}
	pvc := func(ns string) map[string]string {
		return map[string]string{secrets.KeyPVCNamespace: ns, secrets.KeyPVCName: "data"}
	}
	// The tenant's own server: another host name for the same S3 server, so
	// that only the host differs.
	tenantEndpoint := strings.Replace(e.S3.Endpoint, s3Host, "localhost", 1)
	// Another tenant's Secret holds this value, sealed for their namespace.
	victims := testpki.Seal(t, pub, envelope.Context{Namespace: ssOtherNS, Option: "secret_access_key", Host: s3Host}, harness.SecretAccessKey)
	keyID := seal(t, pub, "access_key_id", harness.AccessKeyID)
	secret := seal(t, pub, "secret_access_key", harness.SecretAccessKey)

	t.Run("bound value in its context", func(t *testing.T) {
		v := newVol(t, e, "vol-bound-ok", "bound")
		v.secret["configData"] = withOption(t, v.secret["configData"], "secret_access_key", secret)
		v.context = pvc(ssNS)
		writeThrough(t, v, "bound")
	})

	for _, tc := range []struct {
		name string
		mod  func(v *vol)
		msg  string
	}{
		{"replayed into another namespace", func(v *vol) {
			v.secret["configData"] = withOption(t, v.secret["configData"], "secret_access_key", victims)
		}, `sealed for namespace "team-b", used in namespace "team-a"`},
		{"moved to another option", func(v *vol) {
			v.secret["configData"] = withOption(t, v.secret["configData"], "secret_access_key", keyID)
		}, `sealed for option "access_key_id", used as option "secret_access_key"`},
		{"endpoint overridden to the tenant's server", func(v *vol) {
			v.secret["configData"] = withOption(t, v.secret["configData"], "secret_access_key", secret)
			v.secret["endpoint"] = tenantEndpoint
		}, `sealed for host "127.0.0.1", used for host "localhost"`},
		{"endpoint of the tenant's server in configData", func(v *vol) {
			cfg := withOption(t, v.secret["configData"], "endpoint", tenantEndpoint)
			v.secret["configData"] = withOption(t, cfg, "secret_access_key", secrets.Placeholder)
			v.secret["secret_access_key"] = secret
		}, `sealed for host "127.0.0.1", used for host "localhost"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, e, "vol-bound-"+strings.ReplaceAll(tc.name, " ", "-"), "bound")
			v.context = pvc(ssNS)
			tc.mod(v)
			err := failsCleanly(t, v, codes.PermissionDenied, victims, keyID, secret, harness.AccessKeyID)
			if msg := status.Convert(err).Message(); !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q does not say %q", msg, tc.msg)
			}
		})
	}
}

// TestSecretServiceUnbound: a v1 value is refused unless the service allows
// unbound values.
func TestSecretServiceUnbound(t *testing.T) {
	e, _, pub := startSecretServiceEnv(t)
	if err := e.S3.MakeBucket("unbound"); err != nil {
		t.Fatal(err)
	}
	v := newVol(t, e, "vol-unbound", "unbound")
	ct := testpki.SealUnbound(t, pub, harness.SecretAccessKey)
	v.secret["configData"] = withOption(t, v.secret["configData"], "secret_access_key", ct)
	v.context = map[string]string{secrets.KeyPVCNamespace: ssNS}
	err := failsCleanly(t, v, codes.PermissionDenied, ct)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "unbound ciphertext; re-encrypt with a context") {
		t.Errorf("message %q does not say why", msg)
	}
}

// tamperEnvelope changes one character after the first "." of a value (the
// wrapped key of v2).
func tamperEnvelope(ct string) string {
	i := strings.Index(ct, ".") + 20
	c := byte('A')
	if ct[i] == 'A' {
		c = 'B'
	}
	return ct[:i] + string(c) + ct[i+1:]
}

// TestLegacyRenkuFernet: Renku's secrets without any secret service: a
// Fernet key in secretKey and Fernet-encrypted overrides.
func TestLegacyRenkuFernet(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("legacy"); err != nil {
		t.Fatal(err)
	}
	var key fernet.Key
	if err := key.Generate(); err != nil {
		t.Fatal(err)
	}
	tok, err := fernet.EncryptAndSign([]byte(harness.SecretAccessKey), &key)
	if err != nil {
		t.Fatal(err)
	}
	legacy := func(id string) *vol {
		v := newVol(t, e, id, "legacy")
		v.secret["configData"] = withOption(t, v.secret["configData"], "secret_access_key", secrets.Placeholder)
		v.secret[secrets.KeySecretKey] = key.Encode()
		v.secret["secret_access_key"] = string(tok)
		return v
	}

	t.Run("stages and mounts", func(t *testing.T) {
		writeThrough(t, legacy("vol-legacy"), "legacy")
	})

	t.Run("wrong Fernet key", func(t *testing.T) {
		v := legacy("vol-legacy-wrong-key")
		var other fernet.Key
		if err := other.Generate(); err != nil {
			t.Fatal(err)
		}
		v.secret[secrets.KeySecretKey] = other.Encode()
		failsCleanly(t, v, codes.InvalidArgument, string(tok), key.Encode(), other.Encode())
	})

	t.Run("placeholder without an override", func(t *testing.T) {
		v := legacy("vol-legacy-no-override")
		delete(v.secret, "secret_access_key")
		failsCleanly(t, v, codes.InvalidArgument, key.Encode())
	})
}

// TestEncryptedWithoutSecretService: an envelope needs a secret service; a
// driver without one refuses the volume as invalid.
func TestEncryptedWithoutSecretService(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("noservice"); err != nil {
		t.Fatal(err)
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ct := seal(t, &k.PublicKey, "secret_access_key", harness.SecretAccessKey)
	v := newVol(t, e, "vol-enc-no-service", "noservice")
	v.secret["configData"] = withOption(t, v.secret["configData"], "secret_access_key", ct)
	failsCleanly(t, v, codes.InvalidArgument, ct)
	if msg := status.Convert(v.stage()).Message(); !strings.Contains(msg, "secret service") {
		t.Errorf("message does not say why: %q", msg)
	}
}
