package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/csi-rclone/csi-rclone/pkg/driver"
	"github.com/csi-rclone/csi-rclone/pkg/mountpod"
	"github.com/csi-rclone/csi-rclone/pkg/worker"
)

// mounterFlags choose where mount workers run: as children of the node
// plugin (process) or each in a mount pod of its own (pod).
type mounterFlags struct {
	mounter, namespace, image, pullPolicy, kubeletDir, kubeconfig, priorityClass string
	cpuRequest, cpuLimit, memoryRequest, memoryLimit, cacheSize                  string
	maxCPULimit, maxMemoryLimit                                                  string
}

func (m *mounterFlags) register(fl *flag.FlagSet) {
	fl.StringVar(&m.mounter, "mounter", "process", "where each volume's mount worker runs: process (a child of the node plugin) or pod (a mount pod of its own, which outlives the plugin)")
	fl.StringVar(&m.namespace, "mount-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the mount pods (default: $POD_NAMESPACE)")
	fl.StringVar(&m.image, "mount-image", "", "image of the mount pods: the driver's own")
	fl.StringVar(&m.pullPolicy, "mount-image-pull-policy", string(corev1.PullIfNotPresent), "pull policy of the mount pods' image")
	fl.StringVar(&m.kubeletDir, "kubelet-dir", "/var/lib/kubelet", "the kubelet's root dir, as the node plugin sees it: the mount pods' sockets are under its pods/")
	fl.StringVar(&m.kubeconfig, "kubeconfig", "", "kubeconfig of the node plugin for mount pods; empty: in-cluster")
	fl.StringVar(&m.priorityClass, "mount-pod-priority-class", "", "priority class of the mount pods")
	fl.StringVar(&m.cpuRequest, "mount-pod-cpu-request", "10m", "CPU request of each mount pod")
	fl.StringVar(&m.cpuLimit, "mount-pod-cpu-limit", "", "CPU limit of each mount pod; empty: none (throttling a FUSE daemon stalls its readers)")
	fl.StringVar(&m.memoryRequest, "mount-pod-memory-request", "64Mi", "memory request of each mount pod")
	fl.StringVar(&m.memoryLimit, "mount-pod-memory-limit", "2Gi", "memory limit of each mount pod: past it only that volume's worker dies, and comes back")
	fl.StringVar(&m.maxMemoryLimit, "mount-pod-max-memory-limit", "8Gi", "highest memory limit a volume may ask for its mount pod (volume context mountPodMemoryLimit); empty: no maximum")
	fl.StringVar(&m.maxCPULimit, "mount-pod-max-cpu-limit", "", "highest CPU limit a volume may ask for its mount pod (volume context mountPodCPULimit); empty: no maximum")
	fl.StringVar(&m.cacheSize, "mount-pod-cache-size", "", "sizeLimit of each mount pod's cache emptyDir; empty: the volume's cache limit (--default-cache-size) and 1Gi more")
}

// apply sets opts.Mounter for --mounter=pod.
func (m *mounterFlags) apply(opts *driver.Options, defaultCache int64) error {
	switch m.mounter {
	case "process":
		return nil
	case "pod":
	default:
		return fmt.Errorf("--mounter %q: process or pod", m.mounter)
	}
	if opts.Mode != driver.ModeNode && opts.Mode != driver.ModeAll {
		return nil
	}
	var res, maxRes mountpod.Resources
	for _, q := range []struct {
		name, value string
		into        *resource.Quantity
	}{
		{"--mount-pod-cpu-request", m.cpuRequest, &res.CPURequest},
		{"--mount-pod-cpu-limit", m.cpuLimit, &res.CPULimit},
		{"--mount-pod-memory-request", m.memoryRequest, &res.MemoryRequest},
		{"--mount-pod-memory-limit", m.memoryLimit, &res.MemoryLimit},
		{"--mount-pod-cache-size", m.cacheSize, &res.CacheSize},
		{"--mount-pod-max-memory-limit", m.maxMemoryLimit, &maxRes.MemoryLimit},
		{"--mount-pod-max-cpu-limit", m.maxCPULimit, &maxRes.CPULimit},
	} {
		if q.value == "" {
			continue
		}
		v, err := resource.ParseQuantity(q.value)
		if err != nil {
			return fmt.Errorf("%s: %w", q.name, err)
		}
		*q.into = v
	}
	if res.CacheSize.IsZero() && defaultCache > 0 {
		res.CacheSize = *resource.NewQuantity(defaultCache+1<<30, resource.BinarySI)
	}
	cfg, err := m.restConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	l, err := mountpod.New(mountpod.Options{
		Client: client, Namespace: m.namespace, NodeName: opts.NodeID, DriverName: opts.DriverName,
		Version: opts.Version, Image: m.image, PullPolicy: corev1.PullPolicy(m.pullPolicy),
		KubeletDir: m.kubeletDir, Resources: res, Max: maxRes, PriorityClass: m.priorityClass,
	})
	if err != nil {
		return err
	}
	driver.RegisterMetrics(mountpod.Collectors()...)
	opts.Mounter = podMounter{l}
	return nil
}

func (m *mounterFlags) restConfig() (*rest.Config, error) {
	if m.kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", m.kubeconfig)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("--mounter=pod needs the Kubernetes API: %w", err)
	}
	return cfg, nil
}

// podMounter is a mountpod.Launcher as the driver's Mounter.
type podMounter struct{ l *mountpod.Launcher }

func (p podMounter) Start(ctx context.Context, opts worker.Options, spec worker.Spec) (driver.MountWorker, error) {
	w, err := p.l.Start(ctx, opts, spec)
	if err != nil {
		return nil, err
	}
	return w, nil
}

func (p podMounter) Recover(ctx context.Context, ids []string) map[string]driver.MountWorker {
	out := map[string]driver.MountWorker{}
	for id, w := range p.l.Recover(ctx, ids) {
		out[id] = w
	}
	return out
}
