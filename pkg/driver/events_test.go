package driver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/csi-rclone/csi-rclone/pkg/state"
)

func TestPodOf(t *testing.T) {
	const uid = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"
	target := "/var/lib/kubelet/pods/" + uid + "/volumes/kubernetes.io~csi/pv-1/mount"
	for _, tc := range []struct {
		name   string
		target string
		ctx    map[string]string
		want   state.Pod
	}{
		{"podInfoOnMount", target, map[string]string{keyPodNamespace: "team", keyPodName: "web-0", keyPodUID: uid}, state.Pod{Namespace: "team", Name: "web-0", UID: uid}},
		{"uid from the path only", target, nil, state.Pod{UID: uid}},
		{"not a kubelet path", "/mnt/x", map[string]string{"other": "x"}, state.Pod{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := podOf(tc.target, tc.ctx); got != tc.want {
				t.Errorf("podOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A worker that dies puts a Warning VolumeRecovering and then a Normal
// VolumeRecovered on the pod the volume is published for, in its namespace.
func TestRecoveryEventsOnPods(t *testing.T) {
	f := newFakeNode(t)
	client := fake.NewClientset()
	rec, stop := NewEventRecorder(client, "csi-rclone", "node-1")
	t.Cleanup(stop)
	f.d.opts.Events = rec
	ctx := context.Background()

	const uid = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"
	_, err := f.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: "vol-ev", StagingTargetPath: f.stagingPath("vol-ev"), VolumeCapability: capability(rwo), Secrets: fakeSecret(),
		VolumeContext: map[string]string{"csi.storage.k8s.io/pvc/name": "data"},
	})
	if err != nil {
		t.Fatal(err)
	}
	target := f.targetPath(uid, "vol-ev")
	if _, err := f.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: "vol-ev", StagingTargetPath: f.stagingPath("vol-ev"), TargetPath: target, VolumeCapability: capability(rwo),
		VolumeContext: map[string]string{keyPodNamespace: "team", keyPodName: "web-0", keyPodUID: uid},
	}); err != nil {
		t.Fatal(err)
	}
	if p := f.get("vol-ev").rec.Pods[target]; p.Name != "web-0" {
		t.Fatalf("record pods %+v", f.get("vol-ev").rec.Pods)
	}

	f.mu.Lock()
	w := f.started[0]
	f.mu.Unlock()
	w.Kill()

	var got []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		list, err := client.CoreV1().Events("team").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, e := range list.Items {
			if e.InvolvedObject.Kind != "Pod" || e.InvolvedObject.Name != "web-0" || string(e.InvolvedObject.UID) != uid {
				t.Errorf("event on %+v", e.InvolvedObject)
			}
			if !strings.Contains(e.Message, "vol-ev (PVC data)") || e.Source.Host != "node-1" {
				t.Errorf("event message %q, source %+v", e.Message, e.Source)
			}
			got = append(got, e.Type+" "+e.Reason)
		}
		if strings.Contains(fmt.Sprint(got), "Normal VolumeRecovered") || time.Now().After(deadline) {
			break
		}
	}
	want := map[string]bool{corev1.EventTypeWarning + " " + ReasonRecovering: true, corev1.EventTypeNormal + " " + ReasonRecovered: true}
	for _, g := range got {
		delete(want, g)
	}
	if len(want) != 0 {
		t.Errorf("events %v, missing %v", got, want)
	}
	if list, _ := client.CoreV1().Events("").List(ctx, metav1.ListOptions{}); len(list.Items) != len(got) {
		t.Errorf("%d events in all namespaces, %d in the pod's", len(list.Items), len(got))
	}

	// Unpublished: the pod is no longer told.
	if _, err := f.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-ev", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if pods := f.get("vol-ev").rec.Pods; len(pods) != 0 {
		t.Errorf("record pods after unpublish: %+v", pods)
	}
}
