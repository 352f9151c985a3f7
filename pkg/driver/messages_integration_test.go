package driver_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-rclone/csi-rclone/test/harness"
)

// TestFailedMountMessages pins the exact texts a user reads in a FailedMount
// event (the kubelet shows NodeStageVolume's message) for the three common
// mistakes, against the real S3 server.
func TestFailedMountMessages(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("exists"); err != nil {
		t.Fatal(err)
	}
	good := e.Secret("exists")
	with := func(kv ...string) map[string]string { return secretWith(good, kv...) }
	for _, tc := range []struct {
		name   string
		secret map[string]string
		code   codes.Code
		want   string
	}{
		{"bad credentials", with("configData", strings.Replace(good["configData"], harness.SecretAccessKey, "wrong-secret", 1)), codes.PermissionDenied,
			"mounting volume: permission denied by the storage: listing store:exists: S3 ListObjects: SignatureDoesNotMatch (HTTP 403): The request signature we calculated does not match the signature you provided. Check your key and signing method."},
		{"missing bucket", with("remotePath", "no-such-bucket"), codes.NotFound,
			"mounting volume: not found on the storage: listing store:no-such-bucket: directory not found"},
		{"refused config", with("configData", "[store]\ntype = local\n"), codes.InvalidArgument,
			`invalid volume configuration: section "store": backend type "local" is not allowed on this cluster`},
		{"malformed config", with("configData", "[store\ntype = s3"), codes.InvalidArgument,
			"invalid volume configuration: configData is not a valid rclone config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, e, "vol-msg-"+strings.ReplaceAll(tc.name, " ", "-"), "")
			v.secret = tc.secret
			err := v.stage()
			wantCode(t, err, tc.code)
			if got := status.Convert(err).Message(); got != tc.want {
				t.Errorf("message\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
}
