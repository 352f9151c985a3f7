package cluster

import (
	"context"
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Helm installs and upgrades a chart with Helm's Go SDK, as "helm install
// --wait" and "helm upgrade --wait" would.
type Helm struct {
	Kubeconfig string
	Namespace  string
	Logf       func(string, ...any)
}

func (h Helm) config() (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &h.Kubeconfig
	flags.Namespace = &h.Namespace
	cfg := new(action.Configuration)
	logf := h.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := cfg.Init(flags, h.Namespace, "secret", func(format string, v ...any) { logf("helm: "+format, v...) }); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return cfg, nil
}

// Install installs chartDir as release name with values, waiting for its
// workloads to be ready.
func (h Helm) Install(ctx context.Context, name, chartDir string, values map[string]any, timeout time.Duration) (*release.Release, error) {
	cfg, err := h.config()
	if err != nil {
		return nil, err
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace = name, h.Namespace
	in.Wait, in.Timeout = true, timeout
	rel, err := in.RunWithContext(ctx, ch, values)
	if err != nil {
		return nil, fmt.Errorf("helm install %s: %w", name, err)
	}
	return rel, nil
}

// Upgrade upgrades release name to chartDir with values (not reusing the
// old ones), waiting for its workloads to be ready.
func (h Helm) Upgrade(ctx context.Context, name, chartDir string, values map[string]any, timeout time.Duration) (*release.Release, error) {
	cfg, err := h.config()
	if err != nil {
		return nil, err
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace = h.Namespace
	up.Wait, up.Timeout = true, timeout
	rel, err := up.RunWithContext(ctx, name, ch, values)
	if err != nil {
		return nil, fmt.Errorf("helm upgrade %s: %w", name, err)
	}
	return rel, nil
}

// Uninstall removes release name and waits for its objects to go.
func (h Helm) Uninstall(name string, timeout time.Duration) error {
	cfg, err := h.config()
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.Wait, un.Timeout = true, timeout
	if _, err := un.Run(name); err != nil {
		return fmt.Errorf("helm uninstall %s: %w", name, err)
	}
	return nil
}
