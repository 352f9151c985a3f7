package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/secrets"
)

// Options say how to start workers.
type Options struct {
	// Binary is the csi-rclone executable; empty means this process's own.
	Binary string
	// UID and GID the worker runs as: the volume's own, never root's (see
	// pkg/uidpool). The worker also owns the FUSE connection.
	UID, GID int
	// MemoryLimit bounds the worker's data segment (RLIMIT_DATA, which
	// counts Go's heap), in bytes; 0: none. A tenant's server decides how
	// much a listing costs: past the limit that volume's worker dies and is
	// started again, instead of the node's memory running out for all.
	MemoryLimit int64
	// PodResources are the requests and limits that the volume asks its
	// mount pod to get (volume context keys, see pkg/mountpod); a child
	// worker ignores them.
	PodResources map[string]string
}

// Process is a running worker, a child of this process.
type Process struct {
	*session
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	done    chan struct{}
	exitErr error
}

func newProcess(volumeID string, stdin io.WriteCloser) *Process {
	return &Process{session: newSession(volumeID, stdin), stdin: stdin, done: make(chan struct{})}
}

// Start mounts the FUSE device at spec.MountPoint, launches a worker that
// serves it, hands it spec and waits until the volume is mounted or the
// worker failed. On failure no process and no mount is left.
func Start(ctx context.Context, opts Options, spec Spec) (p *Process, err error) {
	if opts.UID <= 0 || opts.GID <= 0 {
		return nil, fmt.Errorf("%w: a worker needs a uid and gid of its own, not %d:%d", ErrMount, opts.UID, opts.GID)
	}
	bin := opts.Binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding own executable: %w", err)
		}
	}
	mountPoint := spec.MountPoint
	dev, err := mountFor(&spec, opts)
	if err != nil {
		return nil, err
	}
	defer dev.Close() // on the early returns; a no-op after the one below
	defer func() {
		if err != nil {
			_ = unmountFUSE(mountPoint)
		}
	}()
	spec.MountPoint = fuseMountPoint

	// The cache dir is on the command line (it is no secret) because the
	// worker confines itself to it before it reads the spec.
	cmd := exec.Command(bin, Arg, "--volume-id", spec.VolumeID, "--cache-dir", spec.CacheDir, "--memory-limit", strconv.FormatInt(opts.MemoryLimit, 10))
	// No credential in the environment: the worker gets a home and a temp
	// dir of its own, in its cache dir, the one place it may write.
	cmd.Env = []string{"HOME=" + spec.CacheDir, "TMPDIR=" + spec.CacheDir}
	if opts.MemoryLimit > 0 {
		// The collector works harder before the hard limit is reached.
		cmd.Env = append(cmd.Env, fmt.Sprintf("GOMEMLIMIT=%d", opts.MemoryLimit/10*9))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig:   syscall.SIGKILL,
		Credential:  &syscall.Credential{Uid: uint32(opts.UID), Gid: uint32(opts.GID), Groups: []uint32{}},
		AmbientCaps: sandboxCaps(),
	}

	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{evW, dev} // fd 3 and fuseFD
	if err := cmd.Start(); err != nil {
		evR.Close()
		evW.Close()
		return nil, fmt.Errorf("starting worker: %w", err)
	}
	evW.Close()
	dev.Close() // the worker has its own copy

	p = newProcess(spec.VolumeID, stdin)
	p.cmd = cmd
	lastLine := make(chan string, 1)
	go p.logStderr(stderr, lastLine, redactor(&spec.Volume))
	go func() { defer evR.Close(); p.readEvents(evR) }()
	go func() {
		p.exitErr = cmd.Wait()
		close(p.done)
	}()

	if err := json.NewEncoder(stdin).Encode(spec); err != nil {
		p.Kill()
		return nil, fmt.Errorf("handing the spec to the worker: %w", err)
	}

	select {
	case ev, ok := <-p.events:
		switch {
		case ok && ev.Type == evReady:
			return p, nil
		case ok && ev.Type == evError:
			p.Kill()
			return nil, errorFromEvent(ev)
		default:
			p.Kill()
			last := ""
			select {
			case last = <-lastLine:
			default:
			}
			return nil, fmt.Errorf("%w: worker exited (%v) before mounting: %s", ErrMount, p.exitErr, last)
		}
	case <-ctx.Done():
		p.Kill()
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
}

// sandboxCaps is CAP_SETPCAP, handed to a worker only so that it can empty
// its capability bounding set; it drops this one too before it reads its
// spec (pkg/sandbox). A driver without it starts workers with none: their
// bounding set stays, inert under no_new_privs.
func sandboxCaps() []uintptr {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil || data[0].Effective&(1<<unix.CAP_SETPCAP) == 0 {
		return nil
	}
	return []uintptr{unix.CAP_SETPCAP}
}

// logStderr forwards rclone's log lines, tagged with the volume, and keeps
// the last one for an error message: both redacted, for rclone may quote a
// credential (an endpoint with a key in it, a failing option's value).
func (p *Process) logStderr(r io.Reader, last chan string, redact func(string) string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := redact(sc.Text())
		klog.InfoS("worker", "volumeID", p.volumeID, "pid", p.Pid(), "log", line)
		select {
		case <-last:
		default:
		}
		last <- line
	}
	// A line longer than the buffer ends the scan; drain the rest unread so
	// that the worker never blocks writing to a full pipe.
	_, _ = io.Copy(io.Discard, r)
}

// redactor replaces the volume's credentials in a line; the list of them is
// made once, not per line.
func redactor(v *secrets.Volume) func(string) string {
	values := append(v.Config.Sensitive(), v.Secrets...)
	return func(line string) string { return secrets.RedactValues(line, values) }
}

// Pid is the worker's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the worker has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Drain waits up to d, and never past ctx's deadline less answerMargin,
// until the worker has no file open, none dirty and no upload queued or
// running. If that takes longer it returns ErrUploadsPending (or, when ctx
// ends first, ErrUnavailable) and the mount stays as it is: no data is
// dropped, and the worker goes on with the drain, which a later call joins.
// After a drain the caller unmounts, and the worker exits (see Wait).
func (p *Process) Drain(ctx context.Context, d time.Duration) error {
	return p.drain(ctx, d, p.done)
}

// Wait waits up to d for the worker to exit, then kills it. It returns the
// worker's last report, and false when the worker sent none (it was killed,
// or it died).
func (p *Process) Wait(d time.Duration) (Exit, bool) {
	select {
	case <-p.done:
	case <-time.After(d):
		p.Kill()
	}
	_ = p.stdin.Close()
	return p.exitReport()
}

// Detach lets go of the worker; a child dies with its parent in any case
// (Pdeathsig), so it is killed now.
func (p *Process) Detach() { p.Kill() }

// Kill ends the worker at once and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
	_ = p.stdin.Close()
}
