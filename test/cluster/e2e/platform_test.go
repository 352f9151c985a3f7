package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// recoveryEvents waits for the driver's VolumeRecovering and then
// VolumeRecovered Events on pod, recorded after since (a time on the API
// server's clock, which is this machine's), and returns their messages.
func (e *env) recoveryEvents(ctx context.Context, pod string, since time.Time) (recovering, recovered string) {
	e.t.Helper()
	e.waitFor(ctx, "VolumeRecovering and VolumeRecovered events on "+pod, 2*time.Minute, func() (bool, error) {
		evs, err := e.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.LastTimestamp.Time.Before(since.Truncate(time.Second)) || ev.Source.Component != driver {
				continue
			}
			switch {
			case ev.Reason == "VolumeRecovering" && ev.Type == corev1.EventTypeWarning:
				recovering = ev.Message
			case ev.Reason == "VolumeRecovered" && ev.Type == corev1.EventTypeNormal:
				recovered = ev.Message
			}
		}
		return recovering != "" && recovered != "", fmt.Errorf("recovering %q, recovered %q", recovering, recovered)
	})
	return recovering, recovered
}

// inlinePod is a pod with a CSI ephemeral inline volume at /data: the
// Secret secretName (nodePublishSecretRef) and volumeAttributes attrs.
func (e *env) inlinePod(ctx context.Context, name, secretName string, attrs map[string]string, script string) {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(1000)), FSGroup: ptr(int64(1000)), RunAsNonRoot: ptr(true),
			},
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "job", Image: busyboxImage, ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/bin/sh", "-c", script},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data", MountPropagation: ptr(corev1.MountPropagationHostToContainer)}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
				Driver: driver, VolumeAttributes: attrs,
				NodePublishSecretRef: &corev1.LocalObjectReference{Name: secretName},
			}}}},
		},
	}
	if _, err := e.client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// inlineVolume runs a pod with an inline volume whose Secret holds a value
// encrypted for the namespace: it mounts, writes through to the bucket,
// and when the pod is deleted its worker and mount go.
func inlineVolume(ctx context.Context, t *testing.T, e *env, configData string, object func(string) string) {
	before := len(workers())
	e.secret(ctx, "inline", map[string]string{"remote": "store", "configData": configData})
	e.inlinePod(ctx, "inline", "inline", map[string]string{"remotePath": bucket + "/inline", "capacity": "2Gi"},
		`echo "inline hello" > /data/inline.txt && df -h /data && sleep 3600`)
	e.running(ctx, "inline")
	if n := len(workers()); n != before+1 {
		t.Errorf("%d workers with the inline pod, %d before: want one more", n, before)
	}
	e.waitFor(ctx, "the inline pod's file in the bucket", time.Minute, func() (bool, error) {
		data, err := os.ReadFile(object("inline/inline.txt"))
		return err == nil && string(data) == "inline hello\n", err
	})
	out, err := e.client.CoreV1().Pods(ns).GetLogs("inline", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(out), "2.0G") {
		t.Errorf("df in the inline pod does not show its capacity: %q, %v", out, err)
	}
	e.deletePod(ctx, "inline")
	e.waitFor(ctx, "the inline volume's worker gone", time.Minute, func() (bool, error) {
		n := len(workers())
		return n == before, fmt.Errorf("%d workers, want %d", n, before)
	})
}
