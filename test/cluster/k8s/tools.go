//go:build tools

// Package k8s pins the Kubernetes binaries test/cluster builds:
// go build k8s.io/kubernetes/cmd/<name> from this directory.
package k8s

import (
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
)
