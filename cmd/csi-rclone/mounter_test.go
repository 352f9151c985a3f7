package main

import (
	"flag"
	"strings"
	"testing"

	"github.com/csi-rclone/csi-rclone/pkg/driver"
)

func TestMounterFlags(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, tc := range []struct {
		name    string
		args    []string
		mode    driver.Mode
		wantErr string // "" none
		pods    bool   // opts.Mounter set
	}{
		{"process is the default", nil, driver.ModeNode, "", false},
		{"unknown", []string{"--mounter=pods"}, driver.ModeNode, "process or pod", false},
		{"pod in the controller: nothing to do", []string{"--mounter=pod"}, driver.ModeController, "", false},
		{"pod needs the API", []string{"--mounter=pod", "--mount-image=x", "--mount-namespace=m"}, driver.ModeNode, "Kubernetes API", false},
		{"bad quantity", []string{"--mounter=pod", "--mount-pod-memory-limit=lots"}, driver.ModeNode, "--mount-pod-memory-limit", false},
		{"kubeconfig that is not there", []string{"--mounter=pod", "--kubeconfig=/nonexistent"}, driver.ModeNode, "nonexistent", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fl := flag.NewFlagSet("t", flag.ContinueOnError)
			var m mounterFlags
			m.register(fl)
			if err := fl.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			opts := driver.Options{Mode: tc.mode, NodeID: "n"}
			err := m.apply(&opts, 5<<30)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("apply: %v, want %q", err, tc.wantErr)
			}
			if (opts.Mounter != nil) != tc.pods {
				t.Fatalf("mounter set: %t", opts.Mounter != nil)
			}
		})
	}
}
