package provision

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/secrets"
)

// TestMain lets this test binary serve as the provisioning child.
func TestMain(m *testing.M) {
	if IsInvocation(os.Args) {
		Main()
	}
	os.Exit(m.Run())
}

func s3Volume(endpoint string) secrets.Volume {
	return secrets.Volume{
		Config: secrets.Config{"store": {
			"type": "s3", "provider": "Other", "endpoint": endpoint, "force_path_style": "true",
			"access_key_id": "key-id-1", "secret_access_key": "very-secret-2",
		}},
		Remote: "store",
		Path:   "bucket",
	}
}

// A storage that accepts connections and never answers costs one timeout,
// then the child is gone.
func TestRunTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	err = Run(context.Background(), Options{Timeout: time.Second},
		Request{Op: OpMkdir, Volume: s3Volume("http://" + l.Addr().String()), Dir: "a/b"})
	if !errors.Is(err, worker.ErrUnavailable) {
		t.Fatalf("Run = %v; want %v", err, worker.ErrUnavailable)
	}
}

// The child checks what it is asked as the controller does, and its errors
// name no credential.
func TestRunRefuses(t *testing.T) {
	for name, req := range map[string]Request{
		"escaping dir":     {Op: OpMkdir, Dir: "../other"},
		"escaping archive": {Op: OpArchive, Dir: "a", To: "/etc"},
		"unknown op":       {Op: "chmod", Dir: "a"},
	} {
		t.Run(name, func(t *testing.T) {
			req.Volume = s3Volume("http://127.0.0.1:1")
			err := Run(context.Background(), Options{Timeout: 30 * time.Second}, req)
			if !errors.Is(err, secrets.ErrInvalid) {
				t.Fatalf("Run = %v; want invalid", err)
			}
			if strings.Contains(err.Error(), "very-secret-2") {
				t.Errorf("error names the secret: %v", err)
			}
		})
	}
}
