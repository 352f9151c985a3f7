package deploy_test

import (
	"maps"
	"testing"

	"github.com/csi-rclone/csi-rclone/pkg/driver"
	"github.com/csi-rclone/csi-rclone/pkg/provision"
	"github.com/csi-rclone/csi-rclone/secrets"
)

// The directory-per-PVC and capacity examples decode strictly, are what the
// chart makes from their values.yml, and pass the driver's own checks.
func TestPlatformExamples(t *testing.T) {
	o := decodeFiles(t, readDir(t, "examples/platform"))
	chart := decodeFiles(t, render(t, readFile("examples/platform/values.yml")))
	if len(o.storageClasses) != 1 || len(chart.storageClasses) != 1 {
		t.Fatalf("%d example and %d chart StorageClasses, want 1 and 1", len(o.storageClasses), len(chart.storageClasses))
	}
	sc, want := o.storageClasses[0], chart.storageClasses[0]
	if sc.Name != want.Name || sc.Provisioner != want.Provisioner || !maps.Equal(sc.Parameters, want.Parameters) ||
		*sc.ReclaimPolicy != *want.ReclaimPolicy {
		t.Errorf("example StorageClass %s %v differs from the chart's %s %v", sc.Name, sc.Parameters, want.Name, want.Parameters)
	}
	if len(o.secrets) != 1 {
		t.Fatalf("%d Secrets, want 1", len(o.secrets))
	}
	secret := o.secrets[0]

	for _, pvc := range o.pvcs {
		if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != sc.Name {
			continue
		}
		// What csi-provisioner passes, and what CreateVolume makes of it.
		params := maps.Clone(sc.Parameters)
		params[provision.KeyPVCName], params[provision.KeyPVCNamespace], params[provision.KeyPVName] = pvc.Name, pvc.Namespace, "pvc-1"
		dir, err := provision.Expand(params[provision.ParamSubdirTemplate], params)
		if err != nil || dir != "alice/notebooks" {
			t.Errorf("PVC %s: directory %q, %v", pvc.Name, dir, err)
		}
		if _, err := provision.ParseOnDelete(params[provision.ParamOnDelete]); err != nil {
			t.Error(err)
		}
		if sc.Parameters["csi.storage.k8s.io/provisioner-secret-name"] != secret.Name || pvc.Namespace != secret.Namespace {
			t.Errorf("PVC %s: the class's provisioner secret is not the example's", pvc.Name)
		}
		if err := secrets.Check(secret.StringData, params, &secrets.Policy{}); err != nil {
			t.Errorf("PVC %s with Secret %s: %v", pvc.Name, secret.Name, err)
		}
		if _, ok := secret.StringData[secrets.KeyRemotePathSuffix]; ok {
			t.Error("the provisioner secret sets remotePathSuffix")
		}
	}
	if len(o.pvs) != 1 {
		t.Fatalf("%d PVs, want 1", len(o.pvs))
	}
	pv := o.pvs[0]
	n, err := driver.ParseCapacity(pv.Spec.CSI.VolumeAttributes[secrets.KeyCapacity])
	if q := pv.Spec.Capacity["storage"]; err != nil || n != q.Value() {
		t.Errorf("PV %s: capacity attribute %d (%v), spec %s", pv.Name, n, err, q.String())
	}
	if err := secrets.Check(secret.StringData, pv.Spec.CSI.VolumeAttributes, &secrets.Policy{}); err != nil {
		t.Errorf("PV %s: %v", pv.Name, err)
	}
}
