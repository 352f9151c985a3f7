//go:build tools

// Package provisioner pins csi-provisioner for test/cluster:
// go build github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner
package provisioner

import _ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
