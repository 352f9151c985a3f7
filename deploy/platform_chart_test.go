package deploy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/csi-rclone/csi-rclone/deploy"
)

// platformValues turn metrics, the ServiceMonitor and Events on: the
// monitoring example's values.
var platformValues = readFile("examples/monitoring/values.yml")

func serviceMonitors(o *objects) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range o.unstructured {
		if u.GetAPIVersion() == "monitoring.coreos.com/v1" && u.GetKind() == "ServiceMonitor" {
			out = append(out, u)
		}
	}
	return out
}

// With node.metrics.serviceMonitor, a headless Service selects the node
// plugin's pods on their metrics port, and a ServiceMonitor selects that
// Service, in the release's namespace, with the operator's labels.
func TestChartServiceMonitor(t *testing.T) {
	o := decodeFiles(t, render(t, platformValues))
	spec := nodeSpec(t, o)
	p := container(spec, "csi-rclone")
	if v, _ := flag(p.Args, "metrics-address"); v != ":9191" {
		t.Errorf("--metrics-address=%q", v)
	}
	var svcLabels map[string]string
	for _, s := range o.services {
		if !strings.HasSuffix(s.Name, "-node-metrics") {
			continue
		}
		svcLabels = s.Labels
		if s.Spec.ClusterIP != "None" {
			t.Errorf("metrics Service clusterIP %q, want headless", s.Spec.ClusterIP)
		}
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(o.daemonSets[0].Spec.Template.Labels)) {
			t.Errorf("metrics Service selector %v does not select the node pods", s.Spec.Selector)
		}
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != 9191 || s.Spec.Ports[0].TargetPort.StrVal != "metrics" {
			t.Errorf("metrics Service ports %+v", s.Spec.Ports)
		}
	}
	if svcLabels == nil {
		t.Fatal("no metrics Service")
	}
	hasPort := false
	for _, cp := range p.Ports {
		hasPort = hasPort || (cp.Name == "metrics" && cp.ContainerPort == 9191)
	}
	if !hasPort {
		t.Errorf("node plugin ports %+v: no metrics port 9191", p.Ports)
	}

	sms := serviceMonitors(o)
	if len(sms) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(sms))
	}
	sm := sms[0]
	if sm.GetNamespace() != deploy.ReleaseNamespace || sm.GetLabels()["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor namespace %q labels %v", sm.GetNamespace(), sm.GetLabels())
	}
	match, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if len(match) == 0 || !labels.SelectorFromSet(match).Matches(labels.Set(svcLabels)) {
		t.Errorf("ServiceMonitor selector %v does not select the metrics Service %v", match, svcLabels)
	}
	ns, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
	if fmt.Sprint(ns) != "["+deploy.ReleaseNamespace+"]" {
		t.Errorf("ServiceMonitor namespaces %v", ns)
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v", eps)
	}
	ep := eps[0].(map[string]any)
	if ep["port"] != "metrics" || ep["path"] != "/metrics" || ep["interval"] != "15s" {
		t.Errorf("ServiceMonitor endpoint %v", ep)
	}

	// Off by default, and refused without the metrics it would scrape.
	if sms := serviceMonitors(decodeFiles(t, render(t, ""))); len(sms) != 0 {
		t.Errorf("a ServiceMonitor by default")
	}
	if _, err := deploy.Render(chartDir, []byte("node: {metrics: {serviceMonitor: {enabled: true}}}"), deploy.ReleaseNamespace); err == nil {
		t.Error("a ServiceMonitor without node.metrics.enabled rendered")
	}
}

// With node.events the node plugin gets its API token and, bound to its
// ServiceAccount only, create and patch on Events, and nothing else; the
// kubelet passes it the pod's name (podInfoOnMount).
func TestChartEvents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string
		on     bool
	}{
		// Mount pods need the token too (checkMountPods): off here.
		{"defaults", "node: {mounter: process}", false},
		{"events", platformValues, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := decodeFiles(t, render(t, tc.values))
			spec := nodeSpec(t, o)
			sa := spec.ServiceAccountName
			p := container(spec, "csi-rclone")
			if ok := slices.Contains(p.Args, "--events"); ok != tc.on {
				t.Errorf("--events in the args: %t, want %t", ok, tc.on)
			}
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken != tc.on {
				t.Errorf("automountServiceAccountToken %v, want %t", spec.AutomountServiceAccountToken, tc.on)
			}
			if d := o.csiDrivers[0].Spec; d.PodInfoOnMount == nil || *d.PodInfoOnMount != tc.on {
				t.Errorf("podInfoOnMount %v, want %t", d.PodInfoOnMount, tc.on)
			}
			var granted []string
			for _, b := range o.clusterBindings {
				for _, s := range b.Subjects {
					if s.Kind != "ServiceAccount" || s.Name != sa {
						continue
					}
					if len(b.Subjects) != 1 {
						t.Errorf("ClusterRoleBinding %s binds %+v beside the node plugin", b.Name, b.Subjects)
					}
					for _, r := range o.clusterRoles {
						if r.Name != b.RoleRef.Name {
							continue
						}
						for _, rule := range r.Rules {
							granted = append(granted, fmt.Sprintf("%v %v %v %v", rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames))
						}
					}
				}
			}
			for _, b := range o.bindings {
				if b.RoleRef.Name == "csi-rclone-mount-pods" {
					continue // pods in the mount namespace: checkMountPods
				}
				checkNotBound(t, "RoleBinding "+b.Name, b.Subjects, sa)
			}
			want := "[]"
			if tc.on {
				want = "[[] [events] [create patch] []]"
			}
			if fmt.Sprint(granted) != want {
				t.Errorf("the node plugin may %v, want %s", granted, want)
			}
		})
	}
}
