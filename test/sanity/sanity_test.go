// Package sanity runs the CSI conformance suite csi-sanity against the real
// driver: a real S3 server on loopback, real rclone FUSE mounts at the
// staging path and real bind mounts at the targets. It needs root,
// /dev/fuse and fusermount3, and skips without them.
package sanity

import (
	"context"
	"os"
	"os/exec"
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

// sanityModeEnv selects the directory class in a re-executed test binary:
// Ginkgo runs one suite per process.
const sanityModeEnv = "CSI_RCLONE_SANITY_DIRECTORIES"

func TestSanity(t *testing.T) {
	if os.Getenv(sanityModeEnv) == "" {
		runSanity(t, nil, nil)
		return
	}
	// A class with a directory per volume: CreateVolume makes it with a
	// provisioner secret and DeleteVolume removes it. csi-sanity passes no
	// PVC metadata, so the parameters carry it; every volume of the run
	// shares the directory.
	runSanity(t, map[string]string{
		"subdirTemplate":                   "${pvc.namespace}/${pvc.name}",
		"onDelete":                         "delete",
		"csi.storage.k8s.io/pvc/namespace": "sanity-ns",
		"csi.storage.k8s.io/pvc/name":      "sanity-pvc",
	}, func(s *sanity.CSISecrets, env *harness.Env) {
		s.CreateVolumeSecret = map[string]string{"remote": harness.RemoteName, "remotePath": bucket, "configData": env.S3.RcloneConfig(harness.RemoteName)}
		s.DeleteVolumeSecret = s.CreateVolumeSecret
	})
}

// TestSanityDirectories runs TestSanity again, in a new process, on a
// directory-per-volume class.
func TestSanityDirectories(t *testing.T) {
	if os.Getenv(sanityModeEnv) != "" {
		t.Skip("the outer process runs this")
	}
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSanity$", "-test.count=1")
	cmd.Env = append(os.Environ(), sanityModeEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("csi-sanity on a directory class: %v\n%s", err, out)
	}
}

func runSanity(t *testing.T, params map[string]string, withSecrets func(*sanity.CSISecrets, *harness.Env)) {
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
	// and the rclone config; no other call needs one but a directory
	// class's CreateVolume and DeleteVolume.
	secretsFile := filepath.Join(dir, "secrets.yaml")
	sec := &sanity.CSISecrets{NodeStageVolumeSecret: env.Secret(bucket)}
	if withSecrets != nil {
		withSecrets(sec, env)
	}
	data, err := yaml.Marshal(sec)
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
	config.TestVolumeSize = 1 << 30 // shown as the mount's size
	config.TestVolumeParameters = params

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
