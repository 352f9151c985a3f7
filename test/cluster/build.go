package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Versions the cluster is built from; the wrapper modules in k8s/ and
// provisioner/ pin the same.
const (
	KubernetesVersion  = "v1.34.4"
	ProvisionerVersion = "v6.4.0"
)

// Binaries are the paths of what the cluster runs, built from Go modules.
type Binaries struct {
	APIServer, ControllerManager, Scheduler, Kubelet, Kubectl string
	Provisioner                                               string
}

// sourceDir is this package's directory: the wrapper modules are below it.
func sourceDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// RepoRoot is the csi-rclone module's root.
func RepoRoot() string { return filepath.Join(sourceDir(), "..", "..") }

// DefaultCacheDir holds the binaries between runs.
func DefaultCacheDir() string {
	if d := os.Getenv("CSI_RCLONE_CLUSTER_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "csi-rclone-cluster")
	}
	return "/var/cache/csi-rclone-cluster"
}

// Build builds the Kubernetes binaries and csi-provisioner into cacheDir,
// once: the directory's name holds the versions and the Go toolchain, so a
// change of either builds again. A fresh machine spends ~10 minutes here.
func Build(ctx context.Context, cacheDir string, logf func(string, ...any)) (Binaries, error) {
	k8sDir := filepath.Join(cacheDir, "k8s-"+KubernetesVersion+"-"+runtime.Version())
	provDir := filepath.Join(cacheDir, "csi-provisioner-"+ProvisionerVersion+"-"+runtime.Version())
	b := Binaries{
		APIServer:         filepath.Join(k8sDir, "kube-apiserver"),
		ControllerManager: filepath.Join(k8sDir, "kube-controller-manager"),
		Scheduler:         filepath.Join(k8sDir, "kube-scheduler"),
		Kubelet:           filepath.Join(k8sDir, "kubelet"),
		Kubectl:           filepath.Join(k8sDir, "kubectl"),
		Provisioner:       filepath.Join(provDir, "csi-provisioner"),
	}
	minor := strings.Split(KubernetesVersion, ".")[1]
	k8sFlags := fmt.Sprintf("-s -w -X k8s.io/component-base/version.gitVersion=%s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=%s", KubernetesVersion, minor)
	for _, t := range []struct{ out, module, pkg, ldflags string }{
		{b.APIServer, "k8s", "k8s.io/kubernetes/cmd/kube-apiserver", k8sFlags},
		{b.ControllerManager, "k8s", "k8s.io/kubernetes/cmd/kube-controller-manager", k8sFlags},
		{b.Scheduler, "k8s", "k8s.io/kubernetes/cmd/kube-scheduler", k8sFlags},
		{b.Kubelet, "k8s", "k8s.io/kubernetes/cmd/kubelet", k8sFlags},
		{b.Kubectl, "k8s", "k8s.io/kubernetes/cmd/kubectl", k8sFlags},
		{b.Provisioner, "provisioner", "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner", "-s -w -X main.version=" + ProvisionerVersion},
	} {
		if _, err := os.Stat(t.out); err == nil {
			continue
		}
		logf("building %s (once; cached in %s)", filepath.Base(t.out), filepath.Dir(t.out))
		if err := goBuild(ctx, filepath.Join(sourceDir(), t.module), t.out, t.pkg, t.ldflags); err != nil {
			return b, err
		}
	}
	return b, nil
}

// goBuild builds a static binary, written under a temporary name and
// renamed so that an interrupted build leaves nothing that looks done.
func goBuild(ctx context.Context, dir, out, pkg, ldflags string, extraEnv ...string) error {
	return build(ctx, dir, out, pkg, []string{"-trimpath", "-ldflags", ldflags}, extraEnv...)
}

// goBuildShared is goBuild without -trimpath, for the repo's own binaries:
// they then share the build cache with make test (rclone is large), where
// the Dockerfile's -trimpath would compile everything a second time. It
// only changes the source paths recorded in the binary.
func goBuildShared(ctx context.Context, dir, out, pkg, ldflags string, extraEnv ...string) error {
	return build(ctx, dir, out, pkg, []string{"-ldflags", ldflags}, extraEnv...)
}

func build(ctx context.Context, dir, out, pkg string, flags []string, extraEnv ...string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, flags...), "-o", tmp, pkg)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), extraEnv...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return os.Rename(tmp, out)
}
