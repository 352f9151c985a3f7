// Package sanity runs the CSI conformance suite csi-sanity against the real
// driver: a real S3 server on loopback, real rclone FUSE mounts at the
// staging path and real bind mounts at the targets. It needs root,
// /dev/fuse and fusermount3, and skips without them.
package sanity

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	yaml "gopkg.in/yaml.v2"

	"github.com/csi-rclone/csi-rclone/pkg/provision"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/test/harness"
)

// TestMain lets this test binary serve as the driver's mount worker and
// provisioning child.
func TestMain(m *testing.M) {
	if worker.IsWorkerInvocation(os.Args) {
		worker.Main()
	}
	if provision.IsInvocation(os.Args) {
		provision.Main()
	}
	os.Exit(m.Run())
}

const bucket = "sanity"

func TestSanity(t *testing.T) {
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	dir := t.TempDir()
	env, err := harness.Start(context.Background(), filepath.Join(dir, "env"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		env.Close()
		checkNoMountsLeft(t, dir)
	})
	if err := env.S3.MakeBucket(bucket); err != nil {
		t.Fatal(err)
	}

	// csi-sanity reads secrets only from a YAML file (TestConfig has no
	// field for them). The node-stage secret carries the remote, the bucket
	// and the rclone config; no other call needs one.
	secretsFile := filepath.Join(dir, "secrets.yaml")
	data, err := yaml.Marshal(&sanity.CSISecrets{NodeStageVolumeSecret: env.Secret(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretsFile, data, 0o600); err != nil {
		t.Fatal(err)
	}

	config := sanity.NewTestConfig()
	config.Address = env.Endpoint
	// csi-sanity creates these two directories before each spec and removes
	// them after it; they must not exist beforehand. The driver creates the
	// target (TargetPath + "/target") itself and removes it on unpublish.
	config.TargetPath = filepath.Join(dir, "target")
	config.StagingPath = filepath.Join(dir, "staging")
	config.SecretsFile = secretsFile
	config.IdempotentCount = 2
	config.TestVolumeSize = 1 << 30 // echoed back: remotes have no size

	sanity.Test(t, config)
}

// checkNoMountsLeft fails the test when a mount below dir (the rclone FUSE
// mounts at the staging path, the binds at the targets) is still there after
// the driver has gone. Mounts elsewhere belong to other processes.
func checkNoMountsLeft(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if strings.HasPrefix(f[4], dir+"/") {
			t.Errorf("mount left after the sanity run: %s", line)
		}
	}
}
