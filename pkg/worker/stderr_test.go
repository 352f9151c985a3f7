package worker

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/secrets"
)

// The worker's stderr reaches the driver's log, and the error message of a
// failed start, only redacted.
func TestLogStderrRedacts(t *testing.T) {
	const (
		key      = "AKIA-very-secret-key"
		override = "override-token-value"
	)
	var mu sync.Mutex
	var logged []string
	klog.SetLogger(funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, args)
	}, funcr.Options{}))
	t.Cleanup(klog.ClearLogger)

	vol := &secrets.Volume{
		Config:  secrets.Config{"store": {"type": "s3", "secret_access_key": key, "endpoint": "http://127.0.0.1:9000"}},
		Secrets: []string{override},
	}
	p := &Process{session: newSession("v", nil), cmd: &exec.Cmd{Process: &os.Process{Pid: 1}}}
	stderr := strings.NewReader("starting\nauth failed for " + key + "\nbad token " + override + "\n")
	last := make(chan string, 1)
	p.logStderr(stderr, last, redactor(vol))

	mu.Lock()
	defer mu.Unlock()
	if len(logged) != 3 {
		t.Fatalf("logged %d lines, want 3: %q", len(logged), logged)
	}
	all := strings.Join(logged, "\n") + "\n" + <-last
	for _, secret := range []string{key, override} {
		if strings.Contains(all, secret) {
			t.Errorf("a credential reached the log or the last line: %s", all)
		}
	}
	if !strings.Contains(all, "bad token "+secrets.Redacted) || !strings.Contains(all, "auth failed for "+secrets.Redacted) {
		t.Errorf("redaction took more than the credentials: %s", all)
	}
}
