// Package e2e runs the driver, its image and its chart on a real
// single-node Kubernetes cluster (test/cluster), through the scenario Renku
// runs: a PVC provisioned by csi-provisioner, session pods that read and
// write the bucket while the node plugin is deleted and killed, bad
// credentials, and a clean node after everything is deleted.
//
// It runs only with CSI_RCLONE_E2E_CLUSTER=1 (make e2e-cluster): it builds
// Kubernetes once (~10 min on a fresh machine) and needs root.
package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rclone/rclone/lib/atexit"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
	"github.com/csi-rclone/csi-rclone/test/cluster"
	"github.com/csi-rclone/csi-rclone/test/s3server"
)

const (
	release   = "csi-rclone"
	releaseNS = "kube-system"
	driver    = "csi-rclone"
	bucket    = "bucket"
	accessKey = "e2e-access-key"
	secretKey = "e2e-secret-key-do-not-log"
	badSecret = "wrong-secret-key-do-not-log"
)

// values are the chart's values for this cluster: images imported here,
// no registrar or livenessprobe images (the driver does their jobs), the
// reference secret service, the node's dirs in the cluster's work dir,
// Events on pods and inline volumes.
// There is no cluster DNS or kube-proxy: the node plugin reaches the secret
// service at its pod IP (secretServiceEndpoint), plaintext as the chart
// allows for tests.
func values(c *cluster.Cluster, tag, secretServiceEndpoint string) map[string]any {
	text := fmt.Sprintf(`
image: {repository: csi-rclone.test/csi-rclone, tag: %q, pullPolicy: Never}
kubeletDir: %s
sidecars:
  provisioner: {image: csi-rclone.test/csi-provisioner:%s}
  pullPolicy: Never
node:
  sidecars: false
  events: true
  stateDir: %s
  cacheDir: %s
  mounter: %s
  mountPods:
    resources: {requests: {cpu: 10m, memory: 64Mi}, limits: {memory: 1Gi}}
controller:
  sidecars: false
inlineVolumes: {enabled: true}
logLevel: 3
secretService:
  endpoint: %q
  server:
    enabled: true
    replicas: 1
    image: {repository: csi-rclone.test/csi-rclone-secret-service, tag: "1", pullPolicy: Never}
`, tag, c.KubeletDir, cluster.ProvisionerVersion, c.Path("run", "csi-rclone"), c.Path("cache"), mounterMode(), secretServiceEndpoint)
	v, err := chartutil.ReadValues([]byte(text))
	if err != nil {
		panic(err)
	}
	return v
}

func TestCluster(t *testing.T) {
	if os.Getenv("CSI_RCLONE_E2E_CLUSTER") == "" {
		t.Skip("a real Kubernetes cluster: run with CSI_RCLONE_E2E_CLUSTER=1 (make e2e-cluster)")
	}
	ctx := context.Background()
	logf := func(format string, args ...any) { t.Logf(format, args...) }

	cache := cluster.DefaultCacheDir()
	bins, err := cluster.Build(ctx, cache, logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.BuildPause(ctx, filepath.Join(cache, "bin")); err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Up(ctx, cluster.Options{Binaries: bins, Logf: logf})
	if err != nil {
		t.Fatal(err)
	}
	workDir := c.Path()
	// rclone (the S3 server) exits the process on SIGINT/SIGTERM after
	// running its atexit functions: the teardown is one of them.
	onSignal := atexit.Register(func() {
		if err := c.Down(); err != nil {
			fmt.Fprintln(os.Stderr, "tear-down:", err)
		}
	})
	t.Cleanup(func() {
		atexit.Unregister(onSignal)
		if t.Failed() {
			keepLogs(t, c)
		}
		if err := c.Down(); err != nil {
			t.Errorf("tear-down: %v", err)
		}
		if _, err := os.Stat(workDir); err == nil {
			t.Errorf("%s left", workDir)
		}
	})
	e := &env{t: t, c: c, client: c.Client}

	// Images, without a Docker engine.
	var images []cluster.Image
	for _, tag := range []string{"1", "2"} {
		im, err := cluster.DriverImage(ctx, filepath.Join(cache, "bin"), "csi-rclone.test/csi-rclone:"+tag, "e2e-"+tag)
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, im)
	}
	bb, err := cluster.BusyboxImage(busyboxImage)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := cluster.SecretServiceImage(ctx, filepath.Join(cache, "bin"), "csi-rclone.test/csi-rclone-secret-service:1", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	images = append(images, bb, ss, cluster.ProvisionerImage(bins, "csi-rclone.test/csi-provisioner:"+cluster.ProvisionerVersion))
	if err := c.LoadImages(ctx, images...); err != nil {
		t.Fatal(err)
	}

	// S3 on the host end of the cluster's veth, where pods reach it.
	s3, err := s3server.StartAddr(ctx, cluster.HostIP+":0", t.TempDir(), accessKey, secretKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s3.Stop(context.Background()) })
	if err := s3.MakeBucket(bucket); err != nil {
		t.Fatal(err)
	}

	// Helm's own progress lines are many; its errors come back as errors.
	helm := cluster.Helm{Kubeconfig: c.Kubeconfig, Namespace: releaseNS}
	chart := filepath.Join(cluster.RepoRoot(), "deploy", "helm", "csi-rclone")
	pub := secretServiceKey(ctx, e)
	start := time.Now()
	// Installed once to learn the secret service's pod IP, then pointed at it.
	if _, err := helm.Install(ctx, release, chart, values(c, "1", ""), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	ssEndpoint := "grpc://" + secretServicePodIP(ctx, e) + ":8443"
	if _, err := helm.Upgrade(ctx, release, chart, values(c, "1", ssEndpoint), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("chart installed and ready in %s; secret service at %s", time.Since(start).Round(time.Second), ssEndpoint)
	e.waitFor(ctx, "CSINode lists the driver (registered through its own socket)", 2*time.Minute, func() (bool, error) {
		n, err := c.Client.StorageV1().CSINodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, d := range n.Spec.Drivers {
			if d.Name == driver {
				return true, nil
			}
		}
		return false, nil
	})

	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(ctx, "default ServiceAccount in "+ns, time.Minute, func() (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})

	// The session's data: a Secret, a PVC naming it, a PV from csi-provisioner.
	e.secret(ctx, "data", map[string]string{
		"remote":     "store",
		"remotePath": bucket,
		"configData": s3server.RcloneConfig("store", s3.Endpoint, accessKey, encrypt(t, pub, s3.Endpoint, secretKey)),
	})
	e.pvc(ctx, "data", "data", corev1.ReadWriteMany)
	pv := e.bound(ctx, "data")
	t.Logf("PVC data bound to %s", pv)

	e.pod(ctx, podOpts{name: "session", claim: "data", script: loopScript("/data/session", "session")})
	e.pod(ctx, podOpts{name: "second", claim: "data", script: loopScript("/data/second", "second")})
	// The session's directory through a subPath mount of the same volume.
	e.pod(ctx, podOpts{name: "sub", claim: "data", subPath: "session", script: loopScript("/data", "sub")})
	pods := []string{"session", "second", "sub"}
	podMode := mounterMode() == "pod"
	if podMode {
		// Open files and a working directory across everything below; and
		// another volume, which one volume's trouble must not reach.
		e.pod(ctx, podOpts{name: "held", claim: "data", script: heldScript()})
		e.secret(ctx, "other", map[string]string{
			"remote": "store", "remotePath": bucket + "/other",
			"configData": s3server.RcloneConfig("store", s3.Endpoint, accessKey, encrypt(t, pub, s3.Endpoint, secretKey)),
		})
		if err := os.MkdirAll(s3.Object(bucket, "other"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(s3.Object(bucket, "other/.keep"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		e.pvc(ctx, "other", "other", corev1.ReadWriteMany)
		e.bound(ctx, "other")
		e.pod(ctx, podOpts{name: "other", claim: "other", script: loopScript("/data/other", "other")})
		pods = append(pods, "held", "other")
	}
	uids := map[string]string{}
	for _, p := range pods {
		uids[p] = string(e.running(ctx, p).UID)
	}
	since := uptime()
	e.recovered(ctx, "start", since, pods...)
	var handle, otherHandle, mountPodName string
	if podMode {
		handle, otherHandle = volumeHandle(ctx, e, pv), volumeHandle(ctx, e, e.bound(ctx, "other"))
		checkMountPods(ctx, e, []string{handle, otherHandle}, secretKey)
		mp := mountPods(ctx, e)[handle]
		mountPodName, uids["mount pod"] = mp.Name, string(mp.UID)
	}
	e.waitFor(ctx, "the session's file in the bucket", time.Minute, func() (bool, error) {
		data, err := os.ReadFile(s3.Object(bucket, "session/session-once.txt"))
		return err == nil && string(data) == "session hello\n", err
	})

	t.Run("ReadOnlyMany", func(t *testing.T) {
		e := &env{t: t, c: c, client: c.Client}
		e.pvc(ctx, "ro", "data", corev1.ReadOnlyMany)
		e.bound(ctx, "ro")
		e.pod(ctx, podOpts{name: "ro", claim: "ro", readOnly: true, script: `cat /data/session/session-once.txt
if touch /data/ro-test 2>/tmp/err; then echo "WROTE"; else echo "refused: $(cat /tmp/err)"; fi
sleep 3600`})
		e.running(ctx, "ro")
		var out string
		e.waitFor(ctx, "the read-only pod's verdict", time.Minute, func() (bool, error) {
			data, err := e.client.CoreV1().Pods(ns).GetLogs("ro", &corev1.PodLogOptions{}).DoRaw(ctx)
			out = string(data)
			return err == nil && (strings.Contains(out, "WROTE") || strings.Contains(out, "refused")), err
		})
		t.Logf("read-only pod: %q", out)
		if !strings.Contains(out, "session hello") {
			t.Error("the read-only pod cannot read the bucket")
		}
		if !strings.Contains(out, "Read-only file system") {
			t.Error("a write to a ReadOnlyMany volume did not fail with EROFS")
		}
		e.deletePod(ctx, "ro")
		deletePVC(ctx, e, "ro")
	})

	// Every way the node plugin goes away; after each, every pod reads and
	// writes again, never restarted.
	var longest time.Duration
	for _, d := range []struct {
		name string
		do   func(t *testing.T, e *env)
	}{
		{"kubectl delete pod of the node plugin", func(t *testing.T, e *env) {
			old := nodePluginPod(ctx, e)
			if err := c.Client.CoreV1().Pods(releaseNS).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			e.waitFor(ctx, "a new node plugin pod ready", 3*time.Minute, func() (bool, error) {
				p := nodePluginPod(ctx, e)
				return p != nil && p.UID != old.UID && podReady(p), nil
			})
		}},
		{"kill -9 of the driver in its container", func(t *testing.T, e *env) {
			pid := driverPID()
			if pid == 0 {
				t.Fatal("no driver process found")
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			e.waitFor(ctx, "the driver running again", 3*time.Minute, func() (bool, error) {
				p := nodePluginPod(ctx, e)
				n := driverPID()
				return p != nil && podReady(p) && n != 0 && n != pid, nil
			})
		}},
		{"kubectl rollout restart ds", func(t *testing.T, e *env) {
			old := nodePluginPod(ctx, e)
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
			if _, err := c.Client.AppsV1().DaemonSets(releaseNS).Patch(ctx, release+"-node", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			e.waitFor(ctx, "the rolled out node plugin ready", 3*time.Minute, func() (bool, error) {
				p := nodePluginPod(ctx, e)
				return p != nil && p.UID != old.UID && podReady(p), nil
			})
		}},
		{"helm upgrade to another image tag", func(t *testing.T, e *env) {
			if _, err := helm.Upgrade(ctx, release, chart, values(c, "2", ssEndpoint), 5*time.Minute); err != nil {
				t.Fatal(err)
			}
			e.waitFor(ctx, "the node plugin on tag 2 ready", 3*time.Minute, func() (bool, error) {
				p := nodePluginPod(ctx, e)
				return p != nil && podReady(p) && p.Spec.Containers[0].Image == "csi-rclone.test/csi-rclone:2", nil
			})
		}},
	} {
		t.Run(d.name, func(t *testing.T) {
			e := &env{t: t, c: c, client: c.Client}
			since := uptime()
			sinceWall := time.Now()
			d.do(t, e)
			if podMode {
				// The mounts never went away: nothing failed, not even a
				// file held open or a working directory.
				for p, in := range e.recovered(ctx, d.name, since, pods...) {
					if in.failed > 0 {
						t.Errorf("pod %s: %d failed operations across %s; first: %s", p, in.failed, d.name, in.firstFail)
					}
					longest = max(longest, in.longest)
				}
				// The mount pod is the one made at the stage, on its first
				// image (helm upgrade included) and never restarted.
				e.notRestartedIn(ctx, mountNS, map[string]string{mountPodName: uids["mount pod"]})
				if img := mountPods(ctx, e)[handle].Spec.Containers[0].Image; img != "csi-rclone.test/csi-rclone:1" {
					t.Errorf("the mount pod runs %s, want the image it was made with until its volume is unstaged", img)
				}
				e.notRestarted(ctx, map[string]string{"session": uids["session"], "second": uids["second"], "sub": uids["sub"], "held": uids["held"], "other": uids["other"]})
				return
			}
			// The subPath pod's mount is a bind the kubelet made of the
			// target, which the driver repairs apart (and, once the session
			// pod has looked its directory up through the dead mount,
			// only from inside the pod's mount namespace).
			defer e.logSubpathRepairs(ctx, d.name)
			e.recovered(ctx, d.name, since, "session", "second", "sub")
			recovering, recovered := e.recoveryEvents(ctx, "session", sinceWall)
			t.Logf("events: VolumeRecovering %q, VolumeRecovered %q", recovering, recovered)
			ids := map[string]string{"session": uids["session"], "second": uids["second"], "sub": uids["sub"]}
			e.notRestarted(ctx, ids)
		})
	}

	t.Run("inline volume", func(t *testing.T) {
		e := &env{t: t, c: c, client: c.Client}
		inlineVolume(ctx, t, e, s3server.RcloneConfig("store", s3.Endpoint, accessKey, encrypt(t, pub, s3.Endpoint, secretKey)),
			func(key string) string { return s3.Object(bucket, key) })
	})

	if podMode {
		t.Logf("mount pods: the longest stall of any pod across the node plugin's restarts: %s", longest.Round(10*time.Millisecond))
		t.Run("admission policy", func(t *testing.T) {
			policyRefuses(ctx, t, c, mountPods(ctx, e)[handle], nodePluginPod(ctx, e).Spec.Containers[0].Image)
		})
		t.Run("a mount worker dies (as by the OOM killer)", func(t *testing.T) {
			e := &env{t: t, c: c, client: c.Client}
			before := mountPods(ctx, e)[otherHandle]
			since := uptime()
			killWorker(t, otherHandle)
			// The other volume's pods see nothing; this one's come back, in
			// the same pod (its cache kept), with fresh binds.
			for p, in := range e.recovered(ctx, "a worker's death", since, "session", "second", "sub") {
				if in.failed > 0 {
					t.Errorf("pod %s of another volume: %d failed operations; first: %s", p, in.failed, in.firstFail)
				}
			}
			in := e.recovered(ctx, "its worker's death", since, "other")["other"]
			t.Logf("the volume whose worker died was back after %s", in.longest.Round(10*time.Millisecond))
			e.waitFor(ctx, "the same mount pod, its container restarted", time.Minute, func() (bool, error) {
				after, ok := mountPods(ctx, e)[otherHandle]
				if !ok || after.UID != before.UID {
					return false, fmt.Errorf("mount pod %s replaced by %s", before.UID, after.UID)
				}
				return len(after.Status.ContainerStatuses) == 1 && after.Status.ContainerStatuses[0].RestartCount >= 1, nil
			})
		})
		t.Run("delete the mount pod", func(t *testing.T) {
			e := &env{t: t, c: c, client: c.Client}
			old := mountPods(ctx, e)[otherHandle]
			since := uptime()
			if err := c.Client.CoreV1().Pods(mountNS).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			fresh := runningMountPod(ctx, e, otherHandle, string(old.UID))
			// Made by the upgraded plugin: a new mount pod gets its image.
			if want := nodePluginPod(ctx, e).Spec.Containers[0].Image; fresh.Spec.Containers[0].Image != want {
				t.Errorf("the new mount pod runs %s, want the plugin's image %s", fresh.Spec.Containers[0].Image, want)
			}
			in := e.recovered(ctx, "the mount pod's deletion", since, "other")["other"]
			t.Logf("a deleted mount pod's volume was back by itself after %s (a new pod, a new mount, fresh binds)", in.longest.Round(10*time.Millisecond))
		})
	}

	t.Run("bad credentials", func(t *testing.T) {
		e := &env{t: t, c: c, client: c.Client}
		e.secret(ctx, "bad", map[string]string{
			"remote": "store", "remotePath": bucket,
			"configData": s3server.RcloneConfig("store", s3.Endpoint, accessKey, badSecret),
		})
		e.pvc(ctx, "bad", "bad", corev1.ReadWriteMany)
		e.bound(ctx, "bad")
		e.pod(ctx, podOpts{name: "bad", claim: "bad", script: "sleep 3600"})
		msg := failedMount(ctx, e, "bad")
		t.Logf("FailedMount: %s", msg)
		if strings.Contains(msg, badSecret) || strings.Contains(msg, accessKey) {
			t.Errorf("the event shows a credential: %s", msg)
		}
		// rclone's (and S3's) reason reaches the pod's events.
		if !strings.Contains(msg, "SignatureDoesNotMatch") || !strings.Contains(msg, "PermissionDenied") {
			t.Errorf("the event does not give the storage's reason: %s", msg)
		}
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "bad", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodPending {
			t.Errorf("pod with bad credentials is %s", p.Status.Phase)
		}
		e.deletePod(ctx, "bad")
		deletePVC(ctx, e, "bad")
	})

	t.Run("missing bucket", func(t *testing.T) {
		e := &env{t: t, c: c, client: c.Client}
		e.secret(ctx, "nobucket", map[string]string{
			"remote": "store", "remotePath": "no-such-bucket",
			"configData": s3server.RcloneConfig("store", s3.Endpoint, accessKey, secretKey),
		})
		e.pvc(ctx, "nobucket", "nobucket", corev1.ReadWriteMany)
		e.bound(ctx, "nobucket")
		e.pod(ctx, podOpts{name: "nobucket", claim: "nobucket", script: "sleep 3600"})
		msg := failedMount(ctx, e, "nobucket")
		t.Logf("FailedMount: %s", msg)
		if strings.Contains(msg, secretKey) || strings.Contains(msg, accessKey) {
			t.Errorf("the event shows a credential: %s", msg)
		}
		if !strings.Contains(msg, "directory not found") || !strings.Contains(msg, "NotFound") {
			t.Errorf("the event does not give rclone's reason: %s", msg)
		}
		e.deletePod(ctx, "nobucket")
		deletePVC(ctx, e, "nobucket")
	})

	t.Run("costs", func(t *testing.T) {
		measureCosts(ctx, t, &env{t: t, c: c, client: c.Client}, s3, encrypt(t, pub, s3.Endpoint, secretKey))
	})

	t.Run("delete everything", func(t *testing.T) {
		e := &env{t: t, c: c, client: c.Client}
		for _, p := range pods {
			e.deletePod(ctx, p)
		}
		deletePVC(ctx, e, "data")
		if podMode {
			deletePVC(ctx, e, "other")
			e.waitFor(ctx, "no mount pod left", time.Minute, func() (bool, error) {
				n := len(mountPods(ctx, e))
				return n == 0, fmt.Errorf("%d mount pods", n)
			})
		}
		e.waitFor(ctx, "PV "+pv+" deleted", 2*time.Minute, func() (bool, error) {
			_, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
			return apierrors.IsNotFound(err), err
		})
		for _, f := range []string{"session/session.txt", "second/second.txt", "session/session-once.txt"} {
			if _, err := os.Stat(s3.Object(bucket, f)); err != nil {
				t.Errorf("object %s not in the bucket: %v", f, err)
			}
		}
		e.waitFor(ctx, "nothing left on the node", time.Minute, func() (bool, error) {
			left := leftovers(c)
			return len(left) == 0, fmt.Errorf("%v", left)
		})
	})
}

// leftovers are mounts, workers, records and cache dirs of volumes.
func leftovers(c *cluster.Cluster) []string {
	var left []string
	for _, m := range nodeMounts(c.Path()) {
		left = append(left, "mount "+m)
	}
	for _, w := range workers() {
		left = append(left, "worker pid "+w)
	}
	for _, dir := range []string{c.Path("run", "csi-rclone", "volumes"), c.Path("cache")} {
		entries, _ := os.ReadDir(dir)
		for _, en := range entries {
			left = append(left, filepath.Join(dir, en.Name()))
		}
	}
	return left
}

func nodePluginPod(ctx context.Context, e *env) *corev1.Pod {
	pods, err := e.client.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
	if err != nil {
		return nil
	}
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			return &pods.Items[i]
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// failedMount waits for a FailedMount event of the pod and returns its
// message; the pod must still be waiting for its volume.
func failedMount(ctx context.Context, e *env, pod string) string {
	var msg string
	e.waitFor(ctx, "FailedMount event of "+pod, 3*time.Minute, func() (bool, error) {
		evs, err := e.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Reason == "FailedMount" && strings.Contains(ev.Message, "rpc error") {
				msg = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	return msg
}

func deletePVC(ctx context.Context, e *env, name string) {
	if err := e.client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
	e.waitFor(ctx, "PVC "+name+" gone", 2*time.Minute, func() (bool, error) {
		_, err := e.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}

// keepLogs copies the components' logs out of the work dir before it goes.
func keepLogs(t *testing.T, c *cluster.Cluster) {
	dir := filepath.Join(os.TempDir(), "csi-rclone-cluster-logs")
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	entries, _ := os.ReadDir(c.Path("logs"))
	for _, en := range entries {
		if data, err := os.ReadFile(c.Path("logs", en.Name())); err == nil {
			_ = os.WriteFile(filepath.Join(dir, en.Name()), data, 0o644)
		}
	}
	_ = filepath.WalkDir(c.Path("pod-logs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if data, err := os.ReadFile(p); err == nil {
				name := strings.ReplaceAll(strings.TrimPrefix(p, c.Path("pod-logs")+"/"), "/", "_")
				_ = os.WriteFile(filepath.Join(dir, name), data, 0o644)
			}
		}
		return nil
	})
	t.Logf("component and pod logs kept in %s", dir)
}

// secretServiceKey makes the secret service's key pair: the private key in
// the Secret the chart names, the public key for encrypting.
func secretServiceKey(ctx context.Context, e *env) *rsa.PublicKey {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		e.t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		e.t.Fatal(err)
	}
	_, err = e.client.CoreV1().Secrets(releaseNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-rclone-secret-service-key", Namespace: releaseNS},
		Data:       map[string][]byte{"private.pem": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return &key.PublicKey
}

// encrypt seals a secret_access_key for the namespace and the S3 host, as
// a tenant's tooling would.
func encrypt(t *testing.T, pub *rsa.PublicKey, endpoint, plaintext string) string {
	host, err := envelope.NormalizeHost(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	v, err := envelope.Seal(pub, envelope.Context{Namespace: ns, Option: "secret_access_key", Host: host}, []byte(plaintext))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func secretServicePodIP(ctx context.Context, e *env) string {
	var ip string
	e.waitFor(ctx, "the secret service's pod IP", 2*time.Minute, func() (bool, error) {
		pods, err := e.client.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=secret-service"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Status.PodIP != "" && podReady(&p) {
				ip = p.Status.PodIP
				return true, nil
			}
		}
		return false, fmt.Errorf("%d pods", len(pods.Items))
	})
	return ip
}

// logSubpathRepairs reports how the node plugin repaired the subPath pod's
// mount: stacked on the kubelet's bind, or replaced in the pod's mount
// namespace (when the kernel had dropped the directory entry).
func (e *env) logSubpathRepairs(ctx context.Context, what string) {
	p := nodePluginPod(ctx, e)
	if p == nil {
		return
	}
	data, err := e.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "csi-rclone"}).DoRaw(ctx)
	if err != nil {
		e.t.Logf("%s: node plugin logs: %v", what, err)
		return
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "subPath") {
			e.t.Logf("%s: %s", what, l[strings.Index(l, "]")+1:])
		}
	}
}

// volumeHandle is the CSI volume id of PV name.
func volumeHandle(ctx context.Context, e *env, name string) string {
	pv, err := e.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	if err != nil || pv.Spec.CSI == nil {
		e.t.Fatalf("PV %s: %v", name, err)
	}
	return pv.Spec.CSI.VolumeHandle
}
