// Package mountpod runs each staged volume's mount worker in a pod of its
// own on the node, instead of as a child of the node plugin, so that the
// mount outlives restarts and upgrades of the plugin.
//
// The flow of a stage, in order:
//  1. the plugin (root, privileged) opens /dev/fuse and mounts it at the
//     volume's mount dir, as for a child worker (pkg/worker);
//  2. Launcher.Start makes sure the volume's mount pod exists on this node
//     (nodeName): the driver's image, "csi-rclone mount-worker --socket ...",
//     Pod Security "restricted", the worker's uid, no token, no hostPath, no
//     device, and no credential anywhere in the object;
//  3. the worker listens on a socket in an emptyDir of its pod, which the
//     plugin reaches through the kubelet's pod directory; the plugin hands
//     it the FUSE device (SCM_RIGHTS) and the Spec (rclone config with
//     credentials) over that socket, and closes its own copy of the device;
//  4. the same connection carries the drain, exit and exit report; a
//     restarted plugin finds the pod by its labels and attaches (Adopt).
//
// At unstage the plugin drains, unmounts, and deletes the pod once its
// worker reported that no file is left not uploaded.
package mountpod

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations of a mount pod.
const (
	LabelApp     = "app.kubernetes.io/name"
	AppName      = "csi-rclone-mount"
	LabelDriver  = "csi-rclone.io/driver"
	LabelNode    = "csi-rclone.io/node"    // hash of the node name
	LabelVolume  = "csi-rclone.io/volume"  // hash of the volume id
	LabelVersion = "csi-rclone.io/version" // the driver version that made the pod
	// AnnotationVolumeID is the volume id itself (no credential): labels
	// hold 63 characters, volume ids more.
	AnnotationVolumeID = "csi-rclone.io/volume-id"
)

// Paths inside a mount pod, and the names of its emptyDirs.
const (
	socketVolume  = "socket"
	cacheVolume   = "cache"
	socketDir     = "/run/csi-rclone-mount"
	socketName    = "worker.sock"
	cacheDir      = "/cache"
	containerName = "worker"
	// binary is where the driver's image has csi-rclone (Dockerfile).
	binary = "/usr/local/bin/csi-rclone"
)

// Resources are a mount pod's requests and limits.
type Resources struct {
	CPURequest, CPULimit       resource.Quantity
	MemoryRequest, MemoryLimit resource.Quantity
	// CacheSize is the sizeLimit of the cache emptyDir: the kubelet evicts
	// the pod past it.
	CacheSize resource.Quantity
}

// hash is a label-safe name for any string.
func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:40]
}

// podName is the mount pod of a volume on a node: one per pair, so that a
// volume staged on two nodes has two.
func podName(node, volumeID string) string {
	return "csi-rclone-mount-" + hash(node + "\x00" + volumeID)[:32]
}

// SocketPath is where the plugin reaches the worker's socket of pod uid
// through the kubelet's directory.
func SocketPath(kubeletDir, podUID string) string {
	return filepath.Join(kubeletDir, "pods", podUID, "volumes", "kubernetes.io~empty-dir", socketVolume, socketName)
}

// CachePath is where the plugin reads the worker's cache of pod uid.
func CachePath(kubeletDir, podUID string) string {
	return filepath.Join(kubeletDir, "pods", podUID, "volumes", "kubernetes.io~empty-dir", cacheVolume)
}

// podSpec is what a mount pod is made of. It holds no credential: the
// worker gets its config over the socket.
type podSpec struct {
	namespace, node, driver, version string
	image                            string
	pullPolicy                       corev1.PullPolicy
	volumeID                         string
	uid                              int64
	res                              Resources
	priorityClass                    string
}

func (p podSpec) labels() map[string]string {
	return map[string]string{
		LabelApp:     AppName,
		LabelDriver:  hash(p.driver),
		LabelNode:    hash(p.node),
		LabelVolume:  hash(p.volumeID),
		LabelVersion: labelValue(p.version),
	}
}

// labelValue keeps what a label value may hold.
func labelValue(s string) string {
	out := []byte{}
	for i := 0; i < len(s) && len(out) < 63; i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			out = append(out, c)
		}
	}
	for len(out) > 0 && !alnum(out[len(out)-1]) {
		out = out[:len(out)-1]
	}
	for len(out) > 0 && !alnum(out[0]) {
		out = out[1:]
	}
	return string(out)
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

func (p podSpec) pod() *corev1.Pod {
	yes, no := true, false
	grace := int64(5)
	limits := corev1.ResourceList{}
	requests := corev1.ResourceList{}
	set := func(l corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
		if !q.IsZero() {
			l[name] = q
		}
	}
	set(requests, corev1.ResourceCPU, p.res.CPURequest)
	set(requests, corev1.ResourceMemory, p.res.MemoryRequest)
	set(limits, corev1.ResourceCPU, p.res.CPULimit)
	set(limits, corev1.ResourceMemory, p.res.MemoryLimit)
	env := []corev1.EnvVar{{Name: "HOME", Value: cacheDir}, {Name: "TMPDIR", Value: cacheDir}}
	if !p.res.MemoryLimit.IsZero() {
		// The collector works harder before the cgroup's limit is reached.
		env = append(env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: strconv.FormatInt(p.res.MemoryLimit.Value()/10*9, 10)})
	}
	var cacheLimit *resource.Quantity
	if !p.res.CacheSize.IsZero() {
		q := p.res.CacheSize.DeepCopy()
		cacheLimit = &q
	}
	socketLimit := resource.MustParse("1Mi")
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: podName(p.node, p.volumeID), Namespace: p.namespace,
			Labels:      p.labels(),
			Annotations: map[string]string{AnnotationVolumeID: p.volumeID},
		},
		Spec: corev1.PodSpec{
			NodeName: p.node,
			// A container that dies (out of memory, say) starts again with
			// its cache, and the plugin hands it the volume again. A
			// worker that exits after an unmount starts again too, idle,
			// until the plugin deletes the pod.
			RestartPolicy:                 corev1.RestartPolicyAlways,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			PriorityClassName:             p.priorityClass,
			// nodeName skips the scheduler, not the taint manager.
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      &p.uid,
				RunAsGroup:     &p.uid,
				FSGroup:        &p.uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           p.image,
				ImagePullPolicy: p.pullPolicy,
				Command:         []string{binary},
				Args: []string{"mount-worker", "--volume-id", p.volumeID, "--cache-dir", cacheDir,
					"--socket", filepath.Join(socketDir, socketName)},
				Env:       env,
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					ReadOnlyRootFilesystem:   &yes,
					RunAsNonRoot:             &yes,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: socketVolume, MountPath: socketDir},
					{Name: cacheVolume, MountPath: cacheDir},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: socketVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &socketLimit}}},
				{Name: cacheVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: cacheLimit}}},
			},
		},
	}
}

// String names a pod for logs.
func (p podSpec) String() string {
	return fmt.Sprintf("%s/%s", p.namespace, podName(p.node, p.volumeID))
}
