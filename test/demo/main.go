// Command demo runs the driver's main job end to end on this machine: a real
// S3 server on loopback with a few sample files, the csi-rclone node plugin
// as a separate process, and a stand-in for the kubelet that stages one
// volume, publishes it to two pods, reads and writes through both, and
// cleans everything up. It needs root and /dev/fuse.
//
//	go build -o bin/csi-rclone ./cmd/csi-rclone && go run ./test/demo -binary bin/csi-rclone
package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
	"github.com/csi-rclone/csi-rclone/pkg/secretservice"
	"github.com/csi-rclone/csi-rclone/secrets"
	"github.com/csi-rclone/csi-rclone/test/harness"
	"github.com/csi-rclone/csi-rclone/test/kubelet"
	"github.com/csi-rclone/csi-rclone/test/s3server"
)

func main() {
	binary := flag.String("binary", "bin/csi-rclone", "the csi-rclone binary")
	keep := flag.Bool("keep", false, "keep the work dir (logs) afterwards")
	flag.Parse()
	if why := harness.Supported(); why != "" {
		fail("the demo %s", why)
	}
	if err := run(*binary, *keep); err != nil {
		fail("%v", err)
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }
func info(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "demo failed: "+format+"\n", args...)
	os.Exit(1)
}

func run(binary string, keep bool) (err error) {
	ctx := context.Background()
	bin, err := filepath.Abs(binary)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "csi-rclone-demo-")
	if err != nil {
		return err
	}
	// The mount workers run unprivileged and must reach their mount points.
	if err := os.Chmod(dir, 0o711); err != nil {
		return err
	}
	defer func() {
		if keep {
			info("work dir kept: %s", dir)
		} else if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
			err = rerr
		}
	}()

	step("starting an S3 server on loopback (rclone serve s3) with sample files")
	s3, err := s3server.Start(ctx, filepath.Join(dir, "s3"), harness.AccessKeyID, harness.SecretAccessKey)
	if err != nil {
		return err
	}
	defer s3.Stop(ctx)
	samples := map[string]string{
		"README.txt":          "Sample bucket for the csi-rclone demo.\n",
		"data/iris.csv":       "sepal_length,sepal_width,species\n5.1,3.5,setosa\n7.0,3.2,versicolor\n",
		"notebooks/hello.txt": "hello from S3\n",
	}
	if err := s3.MakeBucket("demo"); err != nil {
		return err
	}
	for key, body := range samples {
		p := s3.Object("demo", key)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return err
		}
	}
	info("endpoint %s, bucket \"demo\" with %d objects", s3.Endpoint, len(samples))

	step("starting the secret service on loopback; sealing the S3 secret key for it, bound to namespace \"demo\", option secret_access_key and the endpoint's host")
	ss, sealed, signingKey, err := startSecretService(dir, s3.Endpoint)
	if err != nil {
		return err
	}
	defer ss.Stop()
	info("grpc://%s; the Secret will hold secret_access_key: %s...", ss.Addr, sealed[:40])

	step("starting the node plugin: %s", bin)
	socket := filepath.Join(dir, "plugin", "csi.sock")
	logPath := filepath.Join(dir, "driver.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	driver := exec.Command(bin, "--mode=node", "--nodeid=demo-node", "--endpoint=unix://"+socket,
		"--state-dir="+filepath.Join(dir, "state"), "--cache-dir="+filepath.Join(dir, "cache"), "--v=3",
		"--secret-service=grpc://"+ss.Addr, "--secret-service-signing-key="+signingKey,
		"--secret-service-issuer="+demoIssuer, "--secret-service-audience="+demoAudience)
	driver.Stdout, driver.Stderr = logFile, logFile
	if err := driver.Start(); err != nil {
		return err
	}
	defer func() {
		_ = driver.Process.Signal(syscall.SIGTERM)
		_ = driver.Wait()
	}()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := waitReady(ctx, csi.NewIdentityClient(conn)); err != nil {
		return fmt.Errorf("%w (driver log: %s)", err, logPath)
	}
	info("pid %d, socket %s, log %s; mount workers run as uids of their own from %s", driver.Process.Pid, socket, logPath, harness.WorkerUIDs)

	k := &kubelet.Kubelet{Root: filepath.Join(dir, "kubelet"), DriverName: "csi-rclone", Node: csi.NewNodeClient(conn)}
	if err := k.MakeRootShared(); err != nil {
		return err
	}
	defer k.ReleaseRoot()
	vol := kubelet.Volume{
		PV: "pv-demo", Handle: "demo-volume",
		Capability: harness.MountCapability(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER),
		// As a platform writes it: the credential encrypted, a placeholder
		// in the config.
		Secret: map[string]string{
			"remote":            harness.RemoteName,
			"remotePath":        "demo",
			"configData":        s3server.RcloneConfig(harness.RemoteName, s3.Endpoint, harness.AccessKeyID, secrets.Placeholder),
			"secret_access_key": sealed,
		},
		Context: map[string]string{secrets.KeyPVCNamespace: "demo"},
	}

	step("NodeStageVolume: one rclone mount in a worker process")
	start := time.Now()
	if err := k.Stage(ctx, vol); err != nil {
		return err
	}
	info("staged at %s in %s", k.StagingPath(vol), time.Since(start).Round(time.Millisecond))

	step("NodePublishVolume to two pods: bind mounts of the one staging mount")
	a, err := k.Publish(ctx, vol, "pod-a", false)
	if err != nil {
		return err
	}
	b, err := k.Publish(ctx, vol, "pod-b", false)
	if err != nil {
		return err
	}
	info("pod-a: %s", a)
	info("pod-b: %s", b)

	step("listing pod-a's target")
	if err := list(a); err != nil {
		return err
	}
	step("writing results/summary.txt through pod-a, reading it through pod-b")
	if err := os.MkdirAll(filepath.Join(a, "results"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(a, "results", "summary.txt"), []byte("2 species, 2 rows\n"), 0o644); err != nil {
		return err
	}
	got, err := os.ReadFile(filepath.Join(b, "results", "summary.txt"))
	if err != nil {
		return err
	}
	info("pod-b reads: %q", got)

	step("NodeUnpublishVolume pod-a; pod-b keeps working")
	if err := k.Unpublish(ctx, vol, "pod-a"); err != nil {
		return err
	}
	if _, err := os.ReadFile(filepath.Join(b, "notebooks", "hello.txt")); err != nil {
		return fmt.Errorf("pod-b broken after pod-a left: %w", err)
	}
	info("pod-b still reads notebooks/hello.txt")
	if err := k.Unpublish(ctx, vol, "pod-b"); err != nil {
		return err
	}

	step("NodeUnstageVolume: waits for uploads, unmounts, stops the worker")
	start = time.Now()
	if err := k.Unstage(ctx, vol); err != nil {
		return err
	}
	info("unstaged in %s", time.Since(start).Round(time.Millisecond))
	body, err := os.ReadFile(s3.Object("demo", "results/summary.txt"))
	if err != nil {
		return fmt.Errorf("the written file did not reach the bucket: %w", err)
	}
	info("bucket now holds results/summary.txt: %q", body)

	step("checking that nothing is left and no credential was logged")
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), k.Root+"/") {
		return fmt.Errorf("mounts left under %s", k.Root)
	}
	logged, _ := os.ReadFile(logPath)
	if strings.Contains(string(logged), harness.SecretAccessKey) {
		return fmt.Errorf("the secret key appears in %s", logPath)
	}
	info("no mount left under the kubelet root; driver log (%d lines) holds no credential", strings.Count(string(logged), "\n"))
	step("done")
	return nil
}

const (
	demoIssuer   = "csi-rclone-demo"
	demoAudience = "csi-rclone-demo-secret-service"
)

// startSecretService runs the reference secret service with a fresh RSA key,
// trusting JWTs signed by a fresh EC key that the driver gets as a file. It
// returns the service, the S3 secret key sealed for it (for namespace "demo"
// and endpoint's host), and the key file.
func startSecretService(dir, endpoint string) (*harness.SecretService, string, string, error) {
	serviceKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, "", "", err
	}
	signing, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(signing)
	if err != nil {
		return nil, "", "", err
	}
	keyFile := filepath.Join(dir, "driver-jwt-key.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, "", "", err
	}
	verifier, err := secretservice.NewJWTVerifier(context.Background(), secretservice.JWTOptions{
		PublicKeys: []crypto.PublicKey{&signing.PublicKey}, Issuer: demoIssuer, Audience: demoAudience,
	})
	if err != nil {
		return nil, "", "", err
	}
	host, err := envelope.NormalizeHost(endpoint)
	if err != nil {
		return nil, "", "", err
	}
	sealed, err := envelope.Seal(&serviceKey.PublicKey,
		envelope.Context{Namespace: "demo", Option: "secret_access_key", Host: host}, []byte(harness.SecretAccessKey))
	if err != nil {
		return nil, "", "", err
	}
	ss, err := harness.StartSecretService(secretservice.New(secretservice.Options{
		PrivateKey: serviceKey, Verifier: verifier, AllowedNamespaces: []string{"demo"},
	}))
	return ss, sealed, keyFile, err
}

func waitReady(ctx context.Context, id csi.IdentityClient) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := id.Probe(ctx, &csi.ProbeRequest{}); err == nil && r.GetReady().GetValue() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the driver did not become ready")
}

func list(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			info("%s/", rel)
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		info("%-22s %4d bytes  %v", rel, fi.Size(), fi.Mode())
		return nil
	})
}
