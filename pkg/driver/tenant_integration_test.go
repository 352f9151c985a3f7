package driver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-rclone/csi-rclone/test/harness"
	"github.com/csi-rclone/csi-rclone/test/procfs"
)

// TestTenantAttacksStartNothing stages, through the real driver, one secret
// per class of tenant attack: each is refused with InvalidArgument before
// any worker starts, and leaves no mount, record or cache dir behind. The
// rules of each class are tested in detail in secrets/policy_test.go.
func TestTenantAttacksStartNothing(t *testing.T) {
	e := startEnv(t)
	if err := e.S3.MakeBucket("tenant"); err != nil {
		t.Fatal(err)
	}
	good := e.Secret("tenant")
	with := func(kv ...string) map[string]string { return secretWith(good, kv...) }
	conf := good["configData"]
	for _, tc := range []struct {
		name   string
		secret map[string]string
		msg    string
	}{
		{"global key runs a command", with("configData", conf+"global.metadata = true\nglobal.metadata_mapper = sh -c 'touch /tmp/pwned'\n"), "global.metadata"},
		{"override key names a node file", with("configData", conf+"override.ca_cert = /var/lib/kubelet/pki/kubelet.crt\n"), "override.ca_cert"},
		{"global key redirects traffic", with("configData", conf+"global.http_proxy = http://evil:3128\n"), "global.http_proxy"},
		{"global key sets node memory", with("configData", conf+"global.buffer_size = 64G\n"), "global.buffer_size"},
		{"unknown option", with("configData", conf+"config = /root/.config/rclone/rclone.conf\n"), `"config"`},
		{"mis-cased option", with("configData", conf+"Secret_Access_Key = x\n"), "Secret_Access_Key"},
		{"another backend's option as a secret key", with("bearer_token", "t"), "bearer_token"},
		{"memory backend", with("configData", "[store]\ntype = memory\n"), "memory"},
		{"cache size off", with("vfsOpt", `{"vfs_cache_max_size":"off"}`), "cache size"},
		{"read-ahead 1P", with("vfsOpt", `{"vfs_read_ahead":"1P"}`), "read-ahead"},
		{"100000 chunk streams", with("vfsOpt", `{"vfs_read_chunk_streams":100000}`), "streams"},
		{"1 MiB value", with("configData", conf+"description = "+strings.Repeat("x", 1<<20)+"\n"), "bytes"},
		{"required option missing", with("configData", "[store]\ntype = webdav\n"), "requires option"},
		{"metadata service", with("configData", "[store]\ntype = http\nurl = http://169.254.169.254/latest/meta-data/\n"), "169.254"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, e, "vol-tenant-"+strings.ReplaceAll(tc.name, " ", "-"), "")
			v.secret = tc.secret
			err := v.stage()
			wantCode(t, err, codes.InvalidArgument)
			msg := status.Convert(err).Message()
			if !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q does not say %q", msg, tc.msg)
			}
			if strings.Contains(msg, harness.SecretAccessKey) || len(msg) > 1000 {
				t.Errorf("message quotes the secret: %.200q", msg)
			}
			if procfs.Mounted(t, v.staging) {
				t.Error("staging path mounted after a refused stage")
			}
			if n := workers(t, v.e, v.id); n != 0 {
				t.Errorf("%d workers started", n)
			}
			for _, dir := range []string{"cache", filepath.Join("state", "volumes")} {
				if left, _ := os.ReadDir(filepath.Join(e.Dir, dir)); len(left) != 0 {
					t.Errorf("%s left: %v", dir, left)
				}
			}
		})
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Error("a tenant's command ran")
	}
}
