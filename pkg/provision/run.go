package provision

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/secrets"
)

// Options say how to start provisioning children.
type Options struct {
	// Binary is the csi-rclone executable; empty means this process's own.
	Binary string
	// UID and GID the child runs as when the controller is root: a worker
	// uid (pkg/uidpool), never root's. An unprivileged controller (the chart
	// runs it as 65532) cannot switch, and its child runs as itself.
	UID, GID int
	// MemoryLimit bounds the child's data segment as a worker's; 0: none.
	MemoryLimit int64
	// Timeout bounds one operation; zero means DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout bounds an operation when Options give none: csi-provisioner
// calls again after its own timeout, and every operation is idempotent.
const DefaultTimeout = time.Minute

// Run performs req in a child process and waits for its answer, at most
// opts.Timeout. The child confines itself (pkg/sandbox) to a scratch dir of
// its own before it reads req. Errors carry the worker's kinds
// (worker.ErrPermissionDenied, ...) and no credential.
func Run(ctx context.Context, opts Options, req Request) error {
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("finding own executable: %w", err)
		}
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	spec, err := json.Marshal(req)
	if err != nil {
		return err
	}
	switchUID := opts.UID > 0 && os.Geteuid() == 0
	scratch, err := os.MkdirTemp("", "csi-rclone-provision-")
	if err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	defer os.RemoveAll(scratch)
	if switchUID {
		if err := os.Chown(scratch, opts.UID, opts.GID); err != nil {
			return fmt.Errorf("scratch dir: %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, bin, Arg, "--scratch-dir", scratch, "--memory-limit", strconv.FormatInt(opts.MemoryLimit, 10))
	// No credential in the environment or on the command line: the request,
	// config included, goes over stdin.
	cmd.Env = []string{"HOME=" + scratch, "TMPDIR=" + scratch}
	cmd.Dir = scratch
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if switchUID {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(opts.UID), Gid: uint32(opts.GID), Groups: []uint32{}}
		cmd.SysProcAttr.AmbientCaps = worker.SandboxCaps()
	}
	cmd.WaitDelay = time.Second
	cmd.Stdin = bytes.NewReader(append(spec, '\n'))
	var stdout bytes.Buffer
	cmd.Stdout = &limitedWriter{w: &stdout, n: 64 * 1024}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting provision-worker: %w", err)
	}
	last := logStderr(stderr, &req.Volume, cmd.Process.Pid)
	waitErr := cmd.Wait()
	lastLine := <-last

	var ans answer
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &ans); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %s took longer than %s", worker.ErrUnavailable, req.Op, timeout)
		}
		return fmt.Errorf("provision-worker exited (%v) without an answer: %s", waitErr, lastLine)
	}
	if !ans.OK {
		return worker.ErrorOf(ans.Kind, ans.Message)
	}
	return nil
}

// logStderr logs the child's lines, redacted, and sends the last one when
// the pipe closes.
func logStderr(r io.Reader, v *secrets.Volume, pid int) <-chan string {
	last := make(chan string, 1)
	go func() {
		line := ""
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line = v.Redact(sc.Text())
			klog.InfoS("provision-worker", "pid", pid, "log", line)
		}
		_, _ = io.Copy(io.Discard, r)
		last <- line
	}()
	return last
}

// limitedWriter keeps at most n bytes and drops the rest, so that a child
// cannot grow the controller's memory.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return len(p), nil
	}
	k := min(len(p), l.n)
	l.n -= k
	if _, err := l.w.Write(p[:k]); err != nil {
		return 0, err
	}
	return len(p), nil
}
