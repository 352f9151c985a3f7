package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// strict decodes into the typed object registered for each document's
// apiVersion and kind, and fails on unknown or duplicate fields.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// decode splits a YAML stream into documents and decodes each strictly.
// Documents holding only comments are skipped.
func decode(name, text string) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	var objs []runtime.Object
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		if j, err := yaml.YAMLToJSON(doc); err == nil && bytes.Equal(bytes.TrimSpace(j), []byte("null")) {
			continue
		}
		obj, err := decodeDoc(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		objs = append(objs, obj)
	}
}

// unvendored are the API groups whose types are not in client-go's scheme
// (the Prometheus Operator's): their objects decode as unstructured, still
// with a check of every field that the tests read.
var unvendored = map[string]bool{"monitoring.coreos.com/v1": true}

func decodeDoc(doc []byte) (runtime.Object, error) {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return nil, err
	}
	if unvendored[meta.APIVersion] {
		u := &unstructured.Unstructured{}
		if err := yaml.UnmarshalStrict(doc, &u.Object); err != nil {
			return nil, err
		}
		return u, nil
	}
	obj, _, err := strict.Decode(doc, nil, nil)
	return obj, err
}

// objects are decoded manifests, by type.
type objects struct {
	all             []runtime.Object
	csiDrivers      []*storagev1.CSIDriver
	storageClasses  []*storagev1.StorageClass
	daemonSets      []*appsv1.DaemonSet
	deployments     []*appsv1.Deployment
	clusterRoles    []*rbacv1.ClusterRole
	roles           []*rbacv1.Role
	clusterBindings []*rbacv1.ClusterRoleBinding
	bindings        []*rbacv1.RoleBinding
	serviceAccounts []*corev1.ServiceAccount
	services        []*corev1.Service
	secrets         []*corev1.Secret
	pvcs            []*corev1.PersistentVolumeClaim
	pvs             []*corev1.PersistentVolume
	pods            []*corev1.Pod
	netpols         []*networkingv1.NetworkPolicy
	unstructured    []*unstructured.Unstructured // of the unvendored groups
	namespaces      []*corev1.Namespace
	policies        []*admissionv1.ValidatingAdmissionPolicy
	policyBindings  []*admissionv1.ValidatingAdmissionPolicyBinding
}

func decodeFiles(t *testing.T, files map[string]string) *objects {
	t.Helper()
	o := &objects{}
	for name, text := range files {
		objs, err := decode(name, text)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs {
			o.add(t, name, obj)
		}
	}
	return o
}

func (o *objects) add(t *testing.T, file string, obj runtime.Object) {
	o.all = append(o.all, obj)
	switch v := obj.(type) {
	case *storagev1.CSIDriver:
		o.csiDrivers = append(o.csiDrivers, v)
	case *storagev1.StorageClass:
		o.storageClasses = append(o.storageClasses, v)
	case *appsv1.DaemonSet:
		o.daemonSets = append(o.daemonSets, v)
	case *appsv1.Deployment:
		o.deployments = append(o.deployments, v)
	case *rbacv1.ClusterRole:
		o.clusterRoles = append(o.clusterRoles, v)
	case *rbacv1.Role:
		o.roles = append(o.roles, v)
	case *rbacv1.ClusterRoleBinding:
		o.clusterBindings = append(o.clusterBindings, v)
	case *rbacv1.RoleBinding:
		o.bindings = append(o.bindings, v)
	case *corev1.ServiceAccount:
		o.serviceAccounts = append(o.serviceAccounts, v)
	case *corev1.Service:
		o.services = append(o.services, v)
	case *corev1.Secret:
		o.secrets = append(o.secrets, v)
	case *corev1.PersistentVolumeClaim:
		o.pvcs = append(o.pvcs, v)
	case *corev1.PersistentVolume:
		o.pvs = append(o.pvs, v)
	case *corev1.Pod:
		o.pods = append(o.pods, v)
	case *networkingv1.NetworkPolicy:
		o.netpols = append(o.netpols, v)
	case *unstructured.Unstructured:
		o.unstructured = append(o.unstructured, v)
	case *corev1.Namespace:
		o.namespaces = append(o.namespaces, v)
	case *admissionv1.ValidatingAdmissionPolicy:
		o.policies = append(o.policies, v)
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		o.policyBindings = append(o.policyBindings, v)
	default:
		t.Fatalf("%s: unexpected %T", file, obj)
	}
}

// podSpecs are the pod specs of every workload and pod, by a name for messages.
func (o *objects) podSpecs() map[string]*corev1.PodSpec {
	specs := map[string]*corev1.PodSpec{}
	for _, d := range o.daemonSets {
		specs["DaemonSet "+d.Name] = &d.Spec.Template.Spec
	}
	for _, d := range o.deployments {
		specs["Deployment "+d.Name] = &d.Spec.Template.Spec
	}
	for _, p := range o.pods {
		specs["Pod "+p.Name] = &p.Spec
	}
	return specs
}

func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = string(b)
	}
	if len(files) == 0 {
		t.Fatalf("no YAML files in %s", dir)
	}
	return files
}

func container(spec *corev1.PodSpec, name string) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	return nil
}

func volume(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// flag returns the value of --name=value among args.
func flag(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}
