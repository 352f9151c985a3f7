package main

import (
	"context"
	"flag"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/registration"
)

// sidecarFlags turn on the jobs of node-driver-registrar and livenessprobe
// inside the driver, for clusters where those images cannot be had.
type sidecarFlags struct {
	kubeletRegistrationPath string
	registrationDir         string
	healthAddress           string
	probeTimeout            time.Duration
}

func (f *sidecarFlags) register(fl *flag.FlagSet) {
	fl.StringVar(&f.kubeletRegistrationPath, "kubelet-registration-path", "", "register with the kubelet (node-driver-registrar's job), giving it this host path of the CSI socket, e.g. /var/lib/kubelet/plugins/csi-rclone/csi.sock; empty: off")
	fl.StringVar(&f.registrationDir, "registration-dir", "/registration", "the kubelet's plugins_registry directory, as this process sees it")
	fl.StringVar(&f.healthAddress, "health-address", "", "serve /healthz from the Identity Probe (livenessprobe's job) on this address, e.g. :9808; empty: off")
	fl.DurationVar(&f.probeTimeout, "probe-timeout", 3*time.Second, "how long /healthz waits for the Identity Probe")
}

// start runs what the flags turn on. The returned context ends when ctx
// does or when one of them fails, so the process exits and is restarted
// rather than running unregistered; wait returns once they have stopped.
func (f *sidecarFlags) start(ctx context.Context, driverName, endpoint string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	var done []chan struct{}
	run := func(name string, fn func() error) {
		ch := make(chan struct{})
		done = append(done, ch)
		go func() {
			defer close(ch)
			if err := fn(); err != nil {
				klog.ErrorS(err, "stopping", "part", name)
				cancel()
			}
		}()
	}
	if f.kubeletRegistrationPath != "" {
		run("registration", func() error {
			srv, err := registration.New(registration.Options{DriverName: driverName, KubeletEndpoint: f.kubeletRegistrationPath, Dir: f.registrationDir})
			if err != nil {
				return err
			}
			// The kubelet calls NodeGetInfo as soon as it sees the socket.
			if !waitForSocket(ctx, endpoint) {
				return nil
			}
			return srv.Run(ctx)
		})
	}
	if f.healthAddress != "" {
		run("health", func() error {
			probe, closeProbe, err := registration.CSIProber(endpoint)
			if err != nil {
				return err
			}
			defer closeProbe()
			return registration.ServeHealth(ctx, f.healthAddress, probe, f.probeTimeout)
		})
	}
	return ctx, func() {
		cancel()
		for _, ch := range done {
			<-ch
		}
	}
}

// waitForSocket waits until the CSI server listens on endpoint
// ("unix:///path"); false when ctx ends first.
func waitForSocket(ctx context.Context, endpoint string) bool {
	path := endpoint
	if u, err := url.Parse(endpoint); err == nil && u.Scheme == "unix" {
		path = filepath.Join(u.Host, u.Path)
	}
	for {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}
