package e2e

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/csi-rclone/csi-rclone/test/harness"
	"github.com/csi-rclone/csi-rclone/test/testpki"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csi-rclone/csi-rclone/pkg/secretservice"
	"github.com/csi-rclone/csi-rclone/test/kubelet"
)

// driverProc is the csi-rclone binary running as the node plugin.
type driverProc struct {
	cmd      *exec.Cmd
	conn     *grpc.ClientConn
	node     csi.NodeClient
	identity csi.IdentityClient
	started  time.Time
}

// startDriver starts the node plugin and waits until it reports ready,
// which it does once it has recovered every recorded volume.
func (e *env) startDriver(t *testing.T) *driverProc {
	t.Helper()
	e.starts++
	logFile, err := os.Create(filepath.Join(e.dir, fmt.Sprintf("driver-%d.log", e.starts)))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(binary, "--mode=node", "--nodeid=e2e-node", "--driver-name="+driverName,
		"--endpoint=unix://"+e.socket, "--state-dir="+e.stateDir, "--cache-dir="+e.cacheDir, "--v=3",
		"--secret-service=grpc://"+e.secretAddr, "--secret-service-signing-key="+e.signingKey,
		"--secret-service-issuer=csi-rclone-e2e", "--secret-service-audience=e2e-secret-service")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + e.tmpDir}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	d := &driverProc{cmd: cmd, started: time.Now()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+e.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	d.conn, d.node, d.identity = conn, csi.NewNodeClient(conn), csi.NewIdentityClient(conn)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r, err := d.identity.Probe(context.Background(), &csi.ProbeRequest{})
		if err == nil && r.GetReady().GetValue() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("driver not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.kubelet.Node = d.node
	e.driver = d
	return d
}

// kill9 kills the driver with SIGKILL and waits for it.
func (d *driverProc) kill9() {
	_ = d.conn.Close()
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	_ = d.cmd.Wait()
}

// workerPIDs lists the live mount workers, by volume id.
func workerPIDs() map[string][]int {
	out := map[string][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		args := procArgs(pid)
		// The whole path: other test runs on the machine start workers of
		// their own binaries, with the same volume ids.
		if len(args) >= 4 && args[1] == "mount-worker" && args[0] == binary {
			if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !bytes.Contains(stat, []byte(") Z ")) {
				out[args[3]] = append(out[args[3]], pid)
			}
		}
	}
	return out
}

func procArgs(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

func killWorkers(volumeIDs ...string) {
	for id, pids := range workerPIDs() {
		if len(volumeIDs) > 0 && !contains(volumeIDs, id) {
			continue
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// container plays an app container: a process in a mount namespace of its
// own, with the pod's target bound in with rslave propagation, as runc does
// for a volumeMount with mountPropagation: HostToContainer.
type container struct {
	name string
	cmd  *exec.Cmd
	dir  string // where the volume (or a file of it) is, inside the container's namespace
}

func startContainer(t *testing.T, e *env, name, target string) *container {
	t.Helper()
	dir := filepath.Join(e.dir, "containers", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A subPath may name a file: the runtime mounts it on a file.
	if fi, err := os.Stat(target); err != nil {
		t.Fatal(err)
	} else if !fi.IsDir() {
		dir = filepath.Join(dir, filepath.Base(target))
		if err := os.WriteFile(dir, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "slave", "sleep", "3600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &container{name: name, cmd: cmd, dir: dir}
	t.Cleanup(c.stop)
	self, _ := os.Readlink("/proc/self/ns/mnt")
	for i := 0; ; i++ {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
		if err == nil && ns != self {
			break
		}
		if i > 200 {
			t.Fatalf("container %s has no mount namespace of its own", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, args := range [][]string{{"mount", "--rbind", target, dir}, {"mount", "--make-rslave", dir}} {
		if out, err := c.run(args...); err != nil {
			t.Fatalf("container %s: %v: %v %s", name, args, err, out)
		}
	}
	return c
}

// run runs a command in the container's mount namespace, bounded in time.
func (c *container) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	full := append([]string{"-t", strconv.Itoa(c.cmd.Process.Pid), "-m", "--"}, args...)
	out, err := exec.CommandContext(ctx, "nsenter", full...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (c *container) read(name string) (string, error) {
	out, err := c.run("cat", filepath.Join(c.dir, name))
	if err != nil {
		return "", fmt.Errorf("%s: %v: %s", c.name, err, out)
	}
	return out, nil
}

func (c *container) write(name, content string) error {
	out, err := c.run("sh", "-c", `printf %s "$1" > "$2"`, "sh", content, filepath.Join(c.dir, name))
	if err != nil {
		return fmt.Errorf("%s: %v: %s", c.name, err, out)
	}
	return nil
}

func (c *container) appendTo(name, content string) error {
	out, err := c.run("sh", "-c", `printf %s "$1" >> "$2"`, "sh", content, filepath.Join(c.dir, name))
	if err != nil {
		return fmt.Errorf("%s: %v: %s", c.name, err, out)
	}
	return nil
}

func (c *container) stop() {
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	}
}

// newSecretService starts the reference secret service on loopback; it
// trusts JWTs signed by signingPub and decrypts for namespace "alice" only.
func newSecretService(t *testing.T, signingPub *ecdsa.PublicKey) (*harness.SecretService, *rsa.PrivateKey) {
	t.Helper()
	key := testpki.RSAKey(t)
	v, err := secretservice.NewJWTVerifier(context.Background(), secretservice.JWTOptions{
		PublicKeys: []crypto.PublicKey{signingPub}, Issuer: "csi-rclone-e2e", Audience: "e2e-secret-service",
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := harness.StartSecretService(secretservice.New(secretservice.Options{
		PrivateKey: key, Verifier: v, AllowedNamespaces: []string{"alice"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s, key
}

// ecKeyPEM makes the driver's JWT signing key.
func ecKeyPEM(t *testing.T, path string) *ecdsa.PublicKey {
	t.Helper()
	key := testpki.ECKey(t)
	testpki.WritePrivateKey(t, filepath.Dir(path), filepath.Base(path), key)
	return &key.PublicKey
}

// gate is a TCP proxy to a backend that can hold every new connection, as a
// storage that hangs does.
type gate struct {
	lis     net.Listener
	backend string
	mu      sync.Mutex
	blocked bool
	held    []net.Conn
}

func newGate(t *testing.T, backend string) *gate {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{lis: lis, backend: backend}
	go g.serve()
	t.Cleanup(func() { _ = lis.Close(); g.setBlocked(false) })
	return g
}

func (g *gate) endpoint() string { return "http://" + g.lis.Addr().String() }

func (g *gate) setBlocked(b bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.blocked = b
	if !b {
		for _, c := range g.held {
			_ = c.Close()
		}
		g.held = nil
	}
}

func (g *gate) serve() {
	for {
		c, err := g.lis.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		if g.blocked {
			g.held = append(g.held, c)
			g.mu.Unlock()
			continue
		}
		g.mu.Unlock()
		go func() {
			defer c.Close()
			b, err := net.Dial("tcp", g.backend)
			if err != nil {
				return
			}
			defer b.Close()
			go func() { _, _ = io.Copy(b, c) }()
			_, _ = io.Copy(c, b)
		}()
	}
}

// eventually retries f until it succeeds or d passes, and says how long it
// took.
func eventually(t *testing.T, d time.Duration, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := f()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("%s: not within %s: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var _ = kubelet.Volume{}
