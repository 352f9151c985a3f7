package deploy_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/csi-rclone/csi-rclone/pkg/envelope"
	"github.com/csi-rclone/csi-rclone/secrets"
)

// The examples decode strictly, fit together, and their Secrets pass the
// driver's own parser and tenant policy.
func TestExamples(t *testing.T) {
	o := decodeFiles(t, readDir(t, "examples"))

	// The example StorageClass is the chart's default one.
	chart := decodeFiles(t, render(t, ""))
	if len(o.storageClasses) != 1 || len(chart.storageClasses) != 1 {
		t.Fatalf("%d example and %d chart StorageClasses, want 1 and 1", len(o.storageClasses), len(chart.storageClasses))
	}
	sc, want := o.storageClasses[0], chart.storageClasses[0]
	if sc.Name != want.Name || sc.Provisioner != want.Provisioner || !maps.Equal(sc.Parameters, want.Parameters) {
		t.Errorf("example StorageClass %s %s %v differs from the chart's %s %s %v",
			sc.Name, sc.Provisioner, sc.Parameters, want.Name, want.Provisioner, want.Parameters)
	}

	secretsByName := map[string]*corev1.Secret{}
	for _, s := range o.secrets {
		secretsByName[s.Namespace+"/"+s.Name] = s
	}
	pvcs := map[string]*corev1.PersistentVolumeClaim{}
	for _, pvc := range o.pvcs {
		pvcs[pvc.Namespace+"/"+pvc.Name] = pvc
		if sc := pvc.Spec.StorageClassName; sc != nil && *sc == want.Name {
			name := pvc.Annotations["csi-rclone.dev/secretName"]
			if secretsByName[pvc.Namespace+"/"+name] == nil {
				t.Errorf("PVC %s: annotation names no example Secret (%q)", pvc.Name, name)
			}
		}
	}
	if len(o.pvs) == 0 {
		t.Error("no static PV example")
	}
	for _, pv := range o.pvs {
		c := pv.Spec.CSI
		if c == nil || c.Driver != "csi-rclone" || c.NodeStageSecretRef == nil ||
			secretsByName[c.NodeStageSecretRef.Namespace+"/"+c.NodeStageSecretRef.Name] == nil {
			t.Errorf("PV %s: %+v does not name an example node-stage secret", pv.Name, c)
			continue
		}
		s := secretsByName[c.NodeStageSecretRef.Namespace+"/"+c.NodeStageSecretRef.Name]
		if err := secrets.Check(s.StringData, c.VolumeAttributes, &secrets.Policy{}); err != nil {
			t.Errorf("PV %s with Secret %s: %v", pv.Name, s.Name, err)
		}
		if !slices.ContainsFunc(o.pvcs, func(pvc *corev1.PersistentVolumeClaim) bool { return pvc.Spec.VolumeName == pv.Name }) {
			t.Errorf("PV %s: no PVC bound to it", pv.Name)
		}
	}

	// Every Secret passes the driver's checks, with its encrypted values in
	// the envelope format; one is in Renku's <sensitive> form.
	renku := false
	for _, s := range o.secrets {
		if err := secrets.Check(s.StringData, nil, &secrets.Policy{}); err != nil {
			t.Errorf("Secret %s: %v", s.Name, err)
		}
		encrypted := 0
		for k, v := range s.StringData {
			if envelope.IsEncrypted(v) {
				encrypted++
				renku = renku || strings.Contains(s.StringData["configData"], k+" = "+secrets.Placeholder)
			}
			encrypted += strings.Count(v, " = "+envelope.PrefixV2)
		}
		if encrypted == 0 {
			t.Errorf("Secret %s has no encrypted value", s.Name)
		}
	}
	if !renku {
		t.Error("no Secret in Renku's form (<sensitive> in configData, the value under the option's name)")
	}

	// The pod mounts every PVC with HostToContainer, so repaired mounts reach it.
	if len(o.pods) == 0 {
		t.Fatal("no pod example")
	}
	for _, p := range o.pods {
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			if pvcs[p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName] == nil {
				t.Errorf("pod %s: claim %s is not an example", p.Name, v.PersistentVolumeClaim.ClaimName)
			}
			for _, c := range p.Spec.Containers {
				for _, m := range c.VolumeMounts {
					if m.Name == v.Name && (m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer) {
						t.Errorf("pod %s: %s mounted without HostToContainer", p.Name, m.Name)
					}
				}
			}
		}
	}

	// The standalone secret service is the chart's, as far as the flags go.
	chartSS := decodeFiles(t, render(t, "secretService: {server: {enabled: true, tls: {secret: csi-rclone-secret-service-tls}}}"))
	exampleArgs, chartArgs := secretServiceArgs(t, o), secretServiceArgs(t, chartSS)
	if !slices.Equal(exampleArgs, chartArgs) {
		t.Errorf("example secret service args\n%q\ndiffer from the chart's\n%q", exampleArgs, chartArgs)
	}
	if len(o.services) != 1 || len(o.clusterRoles) != 1 || len(o.clusterBindings) != 1 {
		t.Error("secret service example without its Service or ClusterRole")
	}
}

func secretServiceArgs(t *testing.T, o *objects) []string {
	t.Helper()
	for _, d := range o.deployments {
		if c := container(&d.Spec.Template.Spec, "secret-service"); c != nil {
			return c.Args
		}
	}
	t.Fatal("no secret service Deployment")
	return nil
}
