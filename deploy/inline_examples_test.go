package deploy_test

import (
	"slices"
	"testing"

	storagev1 "k8s.io/api/storage/v1"

	"github.com/csi-rclone/csi-rclone/secrets"
)

// The inline-volume example decodes strictly, the chart with its values
// lists Ephemeral (and gives the driver the pod's info), and the pod's
// volume names the chart's driver and an example Secret that passes the
// driver's own checks with the volume's attributes.
func TestInlineExample(t *testing.T) {
	o := decodeFiles(t, readDir(t, "examples/inline"))
	chart := decodeFiles(t, render(t, readFile("examples/inline/values.yml")))
	d := chart.csiDrivers[0]
	if !slices.Contains(d.Spec.VolumeLifecycleModes, storagev1.VolumeLifecycleEphemeral) ||
		!slices.Contains(d.Spec.VolumeLifecycleModes, storagev1.VolumeLifecyclePersistent) {
		t.Errorf("CSIDriver modes %v, want Persistent and Ephemeral", d.Spec.VolumeLifecycleModes)
	}
	if d.Spec.PodInfoOnMount == nil || !*d.Spec.PodInfoOnMount {
		t.Error("inline volumes without podInfoOnMount: the driver cannot tell them apart")
	}
	if def := decodeFiles(t, render(t, "")).csiDrivers[0]; slices.Contains(def.Spec.VolumeLifecycleModes, storagev1.VolumeLifecycleEphemeral) {
		t.Error("inline volumes are on by default")
	}

	if len(o.pods) != 1 || len(o.secrets) != 1 {
		t.Fatalf("%d pods and %d Secrets, want 1 and 1", len(o.pods), len(o.secrets))
	}
	pod, secret := o.pods[0], o.secrets[0]
	inline := 0
	for _, v := range pod.Spec.Volumes {
		c := v.CSI
		if c == nil {
			continue
		}
		inline++
		if c.Driver != d.Name {
			t.Errorf("volume %s: driver %q, want the chart's %q", v.Name, c.Driver, d.Name)
		}
		if c.NodePublishSecretRef == nil || c.NodePublishSecretRef.Name != secret.Name || pod.Namespace != secret.Namespace {
			t.Errorf("volume %s: secret %+v is not the example's %s/%s", v.Name, c.NodePublishSecretRef, secret.Namespace, secret.Name)
		}
		if err := secrets.Check(secret.StringData, c.VolumeAttributes, &secrets.Policy{}); err != nil {
			t.Errorf("volume %s with Secret %s: %v", v.Name, secret.Name, err)
		}
		for _, ctr := range pod.Spec.Containers {
			for _, m := range ctr.VolumeMounts {
				if m.Name == v.Name && (m.MountPropagation == nil || *m.MountPropagation != "HostToContainer") {
					t.Errorf("%s mounted without HostToContainer", m.Name)
				}
			}
		}
	}
	if inline != 1 {
		t.Errorf("%d inline volumes in the example pod, want 1", inline)
	}
}

// The monitoring example's values render a ServiceMonitor and the Events
// RBAC (checked in detail by TestChartServiceMonitor and TestChartEvents).
func TestMonitoringExample(t *testing.T) {
	o := decodeFiles(t, render(t, readFile("examples/monitoring/values.yml")))
	if len(serviceMonitors(o)) != 1 {
		t.Error("no ServiceMonitor")
	}
	if d := o.csiDrivers[0]; d.Spec.PodInfoOnMount == nil || !*d.Spec.PodInfoOnMount {
		t.Error("events without podInfoOnMount")
	}
}
