// Package cluster brings up a real single-node Kubernetes cluster on this
// machine, for end-to-end tests of the driver: etcd (Debian etcd-server),
// kube-apiserver, kube-controller-manager, kube-scheduler and kubelet (built
// from k8s.io/kubernetes through the wrapper module in k8s/), containerd and
// runc (Debian), and CNI bridge + host-local (Debian
// containernetworking-plugins) for pod IPs.
//
// Everything runs in a network namespace of its own, entered with nsenter
// (not "ip netns exec", which would also give each process its own mount
// namespace and break mount propagation). A veth pair joins it to the host:
//
//	host 10.233.0.1 (csirc-h) ── 10.233.0.2 node (eth0), default route to nowhere
//	                                 └── cni0 10.234.0.1 ── pods 10.234.0.x
//
// There is no kube-proxy and no cluster DNS. The apiserver listens on port
// 443 and the node netns owns 10.96.0.1, the "kubernetes" Service's
// ClusterIP, so in-cluster clients (csi-provisioner, the secret service)
// reach it unchanged.
//
// Every change to the host is undone by Down, which works from what is on
// the machine rather than from memory, so it also cleans up after a crash:
// processes, mounts, cgroups, sysctls, the netns, and host paths the
// components create.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Addresses of the cluster's network.
const (
	HostIP   = "10.233.0.1"
	NodeIP   = "10.233.0.2"
	PodCIDR  = "10.234.0.0/24"
	APIVIP   = "10.96.0.1"
	NodeName = "csi-rclone-node"
	hostVeth = "csirc-h"
	// CgroupDir is the kubelet's cgroup root, in every hierarchy: every
	// container of the cluster runs below it.
	CgroupDir = "csi-rclone-cluster"
)

// DefaultWorkDir is the cluster's scratch dir; it is removed by Down.
const DefaultWorkDir = "/tmp/csi-rclone-cluster"

// Options say where the cluster lives.
type Options struct {
	// WorkDir holds every file of the cluster (default DefaultWorkDir).
	WorkDir string
	// Binaries from Build.
	Binaries Binaries
	// Logf reports progress.
	Logf func(format string, args ...any)
}

// Cluster is a running cluster.
type Cluster struct {
	opts Options
	// Kubeconfig is an admin (system:masters) kubeconfig.
	Kubeconfig string
	// KubeletDir is the kubelet's root dir (--root-dir).
	KubeletDir string
	// Client is an admin client.
	Client kubernetes.Interface
	Config *rest.Config
	procs  map[string]*exec.Cmd
}

// Path is a path in the work dir.
func (c *Cluster) Path(elem ...string) string {
	return filepath.Join(append([]string{c.opts.WorkDir}, elem...)...)
}

func (o *Options) setDefaults() {
	if o.WorkDir == "" {
		o.WorkDir = DefaultWorkDir
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// Up brings the cluster up and waits until the node is Ready. On failure it
// tears down what it made. It first cleans up what an earlier run left.
func Up(ctx context.Context, opts Options) (_ *Cluster, err error) {
	opts.setDefaults()
	if err := Down(opts.WorkDir, opts.Logf); err != nil {
		return nil, fmt.Errorf("cleaning up an earlier run: %w", err)
	}
	c := &Cluster{opts: opts, procs: map[string]*exec.Cmd{}, KubeletDir: filepath.Join(opts.WorkDir, "kubelet")}
	defer func() {
		if err != nil {
			opts.Logf("bring-up failed (%v); tearing down", err)
			if derr := c.Down(); derr != nil {
				opts.Logf("tear-down: %v", derr)
			}
		}
	}()
	start := time.Now()
	for _, d := range []string{"logs", "pod-logs", "etcd", "containerd", "cni/net.d", "cni/networks", "kubelet", "kubelet-plugins", "flex", "run", "cache"} {
		if err := os.MkdirAll(c.Path(d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := saveHostState(c.Path(hostStateFile)); err != nil {
		return nil, err
	}
	if err := c.setupNetwork(); err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if err := c.setupMounts(); err != nil {
		return nil, fmt.Errorf("mounts: %w", err)
	}
	if err := setupCgroups(); err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	p, err := c.setupPKI()
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	if err := c.startControlPlane(ctx, p); err != nil {
		return nil, err
	}
	if err := c.startNode(ctx, p); err != nil {
		return nil, err
	}
	opts.Logf("cluster up in %s; KUBECONFIG=%s", time.Since(start).Round(time.Second), c.Kubeconfig)
	return c, nil
}

// Down stops the cluster, undoes every change to the host, and checks
// that nothing is left.
func (c *Cluster) Down() error {
	var before hostState
	if data, err := os.ReadFile(c.Path(hostStateFile)); err == nil {
		_ = json.Unmarshal(data, &before)
	}
	// The kubelet first and gracefully, so that it starts nothing more.
	if cmd := c.procs["kubelet"]; cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		waitExit(cmd, 10*time.Second)
	}
	err := Down(c.opts.WorkDir, c.opts.Logf)
	for _, cmd := range c.procs {
		waitExit(cmd, 5*time.Second)
	}
	if left := leftovers(c.opts.WorkDir, before); len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("left on the host: %s", strings.Join(left, "; ")))
	}
	return err
}

// leftovers lists what a cluster in workDir left on the host: processes,
// mounts, cgroups, the veth, the work dir, and (given what Up found) changed
// sysctls and host paths that were absent.
func leftovers(workDir string, before hostState) []string {
	var left []string
	for _, pid := range ownProcesses(workDir, nil) {
		left = append(left, fmt.Sprintf("process %d", pid))
	}
	mounts, _ := mountsUnder(workDir)
	for _, m := range mounts {
		left = append(left, "mount "+m)
	}
	for _, cg := range cgroupRoots() {
		left = append(left, "cgroup "+cg)
	}
	if _, err := os.Stat("/sys/class/net/" + hostVeth); err == nil {
		left = append(left, "link "+hostVeth)
	}
	if _, err := os.Stat(workDir); err == nil {
		left = append(left, workDir)
	}
	for name, v := range before.Sysctls {
		if cur, err := os.ReadFile(sysctlPath(name)); err == nil && strings.TrimSpace(string(cur)) != v {
			left = append(left, fmt.Sprintf("sysctl %s=%s, was %s", name, strings.TrimSpace(string(cur)), v))
		}
	}
	for _, p := range before.Absent {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, p)
		}
	}
	return left
}

func waitExit(cmd *exec.Cmd, d time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		_ = cmd.Process.Kill()
	}
}

// nsenter runs a command in the cluster's network namespace.
func (c *Cluster) nsenter(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + c.Path("netns"), "--", name}, args...)...)
}

func run(cmd *exec.Cmd) error {
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (c *Cluster) setupNetwork() error {
	ns := c.Path("netns")
	if err := os.WriteFile(ns, nil, 0o600); err != nil {
		return err
	}
	// unshare keeps the namespace alive by bind-mounting it onto ns.
	if err := run(exec.Command("unshare", "--net="+ns, "true")); err != nil {
		return err
	}
	pid := fmt.Sprint(os.Getpid())
	for _, cmd := range []*exec.Cmd{
		c.nsenter("ip", "link", "set", "lo", "up"),
		c.nsenter("ip", "link", "add", "eth0", "type", "veth", "peer", "name", hostVeth, "netns", pid),
		c.nsenter("ip", "addr", "add", NodeIP+"/24", "dev", "eth0"),
		c.nsenter("ip", "link", "set", "eth0", "up"),
		// The kubernetes Service's ClusterIP, local: no kube-proxy needed.
		c.nsenter("ip", "addr", "add", APIVIP+"/32", "dev", "lo"),
		// The kubelet wants a default route; this one leads nowhere (no
		// host answers for .254), so nothing leaves the machine.
		c.nsenter("ip", "route", "add", "default", "via", "10.233.0.254"),
		exec.Command("ip", "addr", "add", HostIP+"/24", "dev", hostVeth),
		exec.Command("ip", "link", "set", hostVeth, "up"),
		// Replies from the host (the test's S3 server) to pods.
		exec.Command("ip", "route", "add", PodCIDR, "via", NodeIP, "dev", hostVeth),
	} {
		if err := run(cmd); err != nil {
			return err
		}
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "csi-rclone-cluster",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    }
  ]
}
`, PodCIDR, c.Path("cni", "networks"))
	return os.WriteFile(c.Path("cni", "net.d", "10-bridge.conflist"), []byte(conf), 0o644)
}

// setupMounts makes the kubelet dir an rshared mount of its own, so that
// mounts made by the node plugin (Bidirectional) reach the host and the pods
// (HostToContainer), and puts the driver's records on a tmpfs, like /run.
func (c *Cluster) setupMounts() error {
	k := c.KubeletDir
	for _, args := range [][]string{
		{"--bind", k, k},
		{"--make-rshared", k},
		{"-t", "tmpfs", "-o", "mode=0755,size=64m", "tmpfs", c.Path("run")},
	} {
		if err := run(exec.Command("mount", args...)); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) setupPKI() (*pki, error) {
	p, err := newPKI(c.Path("pki"))
	if err != nil {
		return nil, err
	}
	for _, cert := range []struct {
		name, cn string
		orgs     []string
		hosts    []string
	}{
		{"apiserver", "kube-apiserver", nil, []string{NodeIP, APIVIP, "127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil},
		{"admin", "admin", []string{"system:masters"}, nil},
		{"controller-manager", "system:kube-controller-manager", nil, nil},
		{"scheduler", "system:kube-scheduler", nil, nil},
		{"kubelet-client", "system:node:" + NodeName, []string{"system:nodes"}, nil},
		{"kubelet", NodeName, nil, []string{NodeIP, NodeName}},
	} {
		if err := p.issue(cert.name, cert.cn, cert.orgs, cert.hosts...); err != nil {
			return nil, err
		}
	}
	server := "https://" + NodeIP + ":443"
	for _, name := range []string{"admin", "controller-manager", "scheduler", "kubelet-client"} {
		path, err := p.kubeconfig(name, server)
		if err != nil {
			return nil, err
		}
		if name == "admin" {
			c.Kubeconfig = path
		}
	}
	return p, nil
}

// start runs a component in the netns, its output in logs/<name>.log. Its
// own process group keeps a Ctrl-C for the caller, who tears down in order.
func (c *Cluster) start(name, bin string, args ...string) error {
	logFile, err := os.OpenFile(c.Path("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := c.nsenter(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	c.procs[name] = cmd
	c.opts.Logf("started %s (pid %d)", name, cmd.Process.Pid)
	return nil
}

func (c *Cluster) startControlPlane(ctx context.Context, p *pki) error {
	b := c.opts.Binaries
	if err := c.start("etcd", "etcd",
		"--name=node", "--data-dir="+c.Path("etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=node=http://127.0.0.1:2380", "--log-level=warn"); err != nil {
		return err
	}
	if err := c.start("kube-apiserver", b.APIServer,
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0", "--secure-port=443", "--advertise-address="+NodeIP,
		"--service-cluster-ip-range=10.96.0.0/24",
		"--client-ca-file="+p.path("ca.crt"),
		"--tls-cert-file="+p.path("apiserver.crt"), "--tls-private-key-file="+p.path("apiserver.key"),
		"--kubelet-client-certificate="+p.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+p.path("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+p.path("sa.pub"),
		"--service-account-signing-key-file="+p.path("sa.key"),
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		"--v=1"); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 50, 100
	c.Config = cfg
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := c.poll(ctx, "apiserver ready", 3*time.Minute, func() (bool, error) {
		_, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, nil
	}); err != nil {
		return err
	}
	if err := c.start("kube-controller-manager", b.ControllerManager,
		"--kubeconfig="+p.path("controller-manager.kubeconfig"),
		"--authentication-kubeconfig="+p.path("controller-manager.kubeconfig"),
		"--authorization-kubeconfig="+p.path("controller-manager.kubeconfig"),
		"--bind-address=127.0.0.1",
		"--service-account-private-key-file="+p.path("sa.key"),
		"--root-ca-file="+p.path("ca.crt"),
		"--cluster-signing-cert-file="+p.path("ca.crt"), "--cluster-signing-key-file="+p.path("ca.key"),
		"--use-service-account-credentials=true",
		"--leader-elect=false",
		// Its default would create /usr/libexec/kubernetes on the host.
		"--flex-volume-plugin-dir="+c.Path("flex"),
		"--v=1"); err != nil {
		return err
	}
	return c.start("kube-scheduler", b.Scheduler,
		"--kubeconfig="+p.path("scheduler.kubeconfig"),
		"--authentication-kubeconfig="+p.path("scheduler.kubeconfig"),
		"--authorization-kubeconfig="+p.path("scheduler.kubeconfig"),
		"--bind-address=127.0.0.1", "--leader-elect=false", "--v=1")
}

// PauseImage is the sandbox image (sandbox_image); LoadImages imports it.
const PauseImage = "csi-rclone.test/pause:1"

func (c *Cluster) startContainerd(ctx context.Context) error {
	sock := c.Path("containerd", "containerd.sock")
	conf := fmt.Sprintf(`version = 2
root = %q
state = %q
# The "opt" plugin would create /opt/containerd on the host.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # root here lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj.
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
`, c.Path("containerd", "root"), c.Path("containerd", "state"), sock, sock+".ttrpc", PauseImage, c.Path("cni", "net.d"), c.Path("containerd", "runc"))
	confPath := c.Path("containerd", "config.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	if err := c.start("containerd", "containerd", "--config="+confPath); err != nil {
		return err
	}
	if err := c.poll(ctx, "containerd", time.Minute, func() (bool, error) {
		return run(exec.Command("ctr", "--address", sock, "version")) == nil, nil
	}); err != nil {
		return err
	}
	return c.LoadImages(ctx, PauseImageFiles)
}

func (c *Cluster) startNode(ctx context.Context, p *pki) error {
	if err := c.startContainerd(ctx); err != nil {
		return err
	}
	sock := c.Path("containerd", "containerd.sock")
	kubeletConf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: /%s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
volumePluginDir: %q
podLogsDir: %q
tlsCertFile: %q
tlsPrivateKeyFile: %q
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
resolvConf: /etc/resolv.conf
evictionHard: {memory.available: 50Mi, nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
serializeImagePulls: false
`, p.path("ca.crt"), CgroupDir, sock, c.Path("kubelet-plugins"), c.Path("pod-logs"), p.path("kubelet.crt"), p.path("kubelet.key"))
	kubeletConfPath := c.Path("kubelet-config.yaml")
	if err := os.WriteFile(kubeletConfPath, []byte(kubeletConf), 0o644); err != nil {
		return err
	}
	if err := c.start("kubelet", c.opts.Binaries.Kubelet,
		"--config="+kubeletConfPath,
		"--kubeconfig="+p.path("kubelet-client.kubeconfig"),
		"--root-dir="+c.KubeletDir,
		"--node-ip="+NodeIP,
		"--hostname-override="+NodeName,
		"--v=1"); err != nil {
		return err
	}
	if err := c.poll(ctx, "node Ready", 3*time.Minute, func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	// Pods are refused until the namespace's default ServiceAccount exists.
	return c.poll(ctx, "default ServiceAccounts", time.Minute, func() (bool, error) {
		for _, ns := range []string{"default", "kube-system"} {
			if _, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
}

// poll calls cond every 250 ms until it is true, it fails, a component
// exits, or the timeout passes.
func (c *Cluster) poll(ctx context.Context, what string, timeout time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		for name, cmd := range c.procs {
			if cmd.ProcessState != nil || (cmd.Process != nil && cmd.Process.Signal(syscall.Signal(0)) != nil) {
				return fmt.Errorf("waiting for %s: %s exited; see %s", what, name, c.Path("logs", name+".log"))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// hostState is what Up found on the host before changing it.
type hostState struct {
	Sysctls map[string]string `json:"sysctls"`
	// Paths outside the work dir that did not exist and that the
	// components may create.
	Absent []string `json:"absent"`
	// Network namespaces in /run/netns before (containerd adds cni-*).
	Netns []string `json:"netns"`
}

const hostStateFile = "host-state.json"

// The kubelet sets these at start.
var kubeletSysctls = []string{
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
}

// Host paths the components create when absent.
var maybeCreated = []string{
	"/run/containerd", "/var/lib/containerd", "/opt/containerd", "/var/lib/cni", "/var/log/containers", "/var/log/pods",
	"/run/netns", "/var/run/netns", "/etc/cni", "/opt/cni", "/var/lib/kubelet", "/usr/libexec/kubernetes",
	"/etc/kubernetes", "/run/flannel",
}

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

func saveHostState(path string) error {
	st := hostState{Sysctls: map[string]string{}}
	for _, name := range kubeletSysctls {
		if v, err := os.ReadFile(sysctlPath(name)); err == nil {
			st.Sysctls[name] = strings.TrimSpace(string(v))
		}
	}
	for _, p := range maybeCreated {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			st.Absent = append(st.Absent, p)
		}
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		st.Netns = append(st.Netns, e.Name())
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}
