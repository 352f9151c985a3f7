package driver

import (
	"fmt"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/csi-rclone/csi-rclone/pkg/state"
	"github.com/csi-rclone/csi-rclone/secrets"
)

// Event reasons on the pods that use a volume.
const (
	ReasonRecovering = "VolumeRecovering" // Warning: the mount is dead, the driver mounts it again
	ReasonRecovered  = "VolumeRecovered"  // Normal: mounted again, targets repaired
)

// Volume context keys the kubelet adds to NodePublishVolume when the
// CSIDriver has podInfoOnMount.
const (
	keyPodNamespace = "csi.storage.k8s.io/pod.namespace"
	keyPodName      = "csi.storage.k8s.io/pod.name"
	keyPodUID       = "csi.storage.k8s.io/pod.uid"
)

// EventRecorder is what the node plugin tells users with: client-go's.
type EventRecorder = record.EventRecorder

// NewEventRecorder records Events through client, as the node plugin of
// node: the only API calls it makes are creating and patching Events. stop
// flushes and ends the recording.
func NewEventRecorder(client kubernetes.Interface, driverName, node string) (rec EventRecorder, stop func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: driverName, Host: node}), b.Shutdown
}

// InClusterEventRecorder is NewEventRecorder with the pod's ServiceAccount.
func InClusterEventRecorder(driverName, node string) (EventRecorder, func(), error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("events need the Kubernetes API: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("events: %w", err)
	}
	rec, stop := NewEventRecorder(client, driverName, node)
	return rec, stop, nil
}

// podUIDInPath is the kubelet's pod directory in a target path:
// <kubelet>/pods/<uid>/volumes/...
var podUIDInPath = regexp.MustCompile(`/pods/([0-9a-fA-F-]{8,64})/volumes/`)

// podOf is the pod a publish is for, as far as the request says.
func podOf(target string, volumeContext map[string]string) state.Pod {
	p := state.Pod{Namespace: volumeContext[keyPodNamespace], Name: volumeContext[keyPodName], UID: volumeContext[keyPodUID]}
	if p.UID == "" {
		if m := podUIDInPath.FindStringSubmatch(target); m != nil {
			p.UID = m[1]
		}
	}
	return p
}

// recordPod keeps which pod target is published for, so that a restarted
// driver knows whom to tell about a recovery.
func (s *nodeServer) recordPod(v *stagedVolume, target string, volumeContext map[string]string) {
	p := podOf(target, volumeContext)
	if p == (state.Pod{}) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v.rec.Pods[target] == p {
		return
	}
	if v.rec.Pods == nil {
		v.rec.Pods = map[string]state.Pod{}
	}
	v.rec.Pods[target] = p
	_ = s.store.Save(v.rec) // on failure, only the events of a restart are lost
}

// tellPods puts an Event on every pod that v is published for and whose
// name the kubelet passed; nothing when events are off.
func (s *nodeServer) tellPods(v *stagedVolume, eventType, reason, format string, args ...any) {
	rec := s.d.opts.Events
	if rec == nil {
		return
	}
	s.mu.Lock()
	var pods []state.Pod
	for target, p := range v.rec.Pods {
		if _, published := v.rec.Targets[target]; published && p.Namespace != "" && p.Name != "" {
			pods = append(pods, p)
		}
	}
	pvc := v.rec.Context[secrets.KeyPVCName]
	s.mu.Unlock()
	what := fmt.Sprintf("volume %s", v.id)
	if pvc != "" {
		what = fmt.Sprintf("volume %s (PVC %s)", v.id, pvc)
	}
	msg := what + ": " + fmt.Sprintf(format, args...)
	for _, p := range pods {
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID)}
		rec.Event(ref, eventType, reason, msg)
	}
}
