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
	"sync"
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
}

// Process is a running worker.
type Process struct {
	volumeID string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	events   chan event // the events that answer no command: ready, error at start
	done     chan struct{}
	exitErr  error

	mu      sync.Mutex // guards the fields below, and the writes to stdin
	lastID  uint64
	waiters map[uint64]chan event // by command id
	exit    *event                // the worker's last word, once it said it
	gone    chan struct{}         // closed when the event stream has ended
}

func newProcess(volumeID string, stdin io.WriteCloser) *Process {
	return &Process{
		volumeID: volumeID, stdin: stdin,
		events: make(chan event, 4), done: make(chan struct{}), gone: make(chan struct{}),
		waiters: map[uint64]chan event{},
	}
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
	km, err := kernelMountOf(&spec.Volume, opts.UID, opts.GID)
	if err != nil {
		return nil, err
	}
	mountPoint := spec.MountPoint
	dev, err := mountFUSE(mountPoint, km)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMount, err)
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
	go p.readEvents(evR)
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

// readEvents hands each event to the command it answers, or, for events
// that answer none, to Start; it drops answers nobody waits for any more:
// those of commands whose caller gave up.
func (p *Process) readEvents(r io.ReadCloser) {
	defer r.Close()
	defer close(p.events)
	defer close(p.gone)
	dec := json.NewDecoder(r)
	for {
		var ev event
		if err := dec.Decode(&ev); err != nil {
			return
		}
		p.mu.Lock()
		switch {
		case ev.ID != 0:
			if w, ok := p.waiters[ev.ID]; ok {
				delete(p.waiters, ev.ID)
				w <- ev // buffered
			} else {
				klog.V(2).InfoS("dropping a late answer of the worker", "volumeID", p.volumeID, "command", ev.ID, "type", ev.Type)
			}
		case ev.Type == evExit:
			p.exit = &ev
		default:
			select {
			case p.events <- ev:
			default: // nobody reads them after Start
			}
		}
		p.mu.Unlock()
	}
}

// send writes a command with a fresh id and returns where its answer comes.
func (p *Process) send(c command) (uint64, <-chan event, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastID++
	c.ID = p.lastID
	answer := make(chan event, 1)
	p.waiters[c.ID] = answer
	if err := json.NewEncoder(p.stdin).Encode(c); err != nil {
		delete(p.waiters, c.ID)
		return 0, nil, err
	}
	return c.ID, answer, nil
}

// forget stops waiting for the answer to command id: if it comes, it is
// dropped.
func (p *Process) forget(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiters, id)
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

// answerMargin is the part of a caller's deadline that a drain leaves for
// what follows it (unmount, cleanup, the answer to the kubelet).
const answerMargin = 5 * time.Second

// Drain waits up to d, and never past ctx's deadline less answerMargin,
// until the worker has no file open, none dirty and no upload queued or
// running. If that takes longer it returns ErrUploadsPending (or, when ctx
// ends first, ErrUnavailable) and the mount stays as it is: no data is
// dropped, and the worker goes on with the drain, which a later call joins.
// After a drain the caller unmounts, and the worker exits (see Wait).
func (p *Process) Drain(ctx context.Context, d time.Duration) error {
	select {
	case <-p.done:
		return fmt.Errorf("%w: the worker is gone", ErrMount)
	default:
	}
	if deadline, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(deadline)-answerMargin)
	}
	d = max(d, 0)
	id, answer, err := p.send(command{Op: opDrain, TimeoutMS: d.Milliseconds()})
	if err != nil {
		return fmt.Errorf("%w: the worker is gone", ErrMount)
	}
	defer p.forget(id)
	select {
	case ev := <-answer:
		switch ev.Type {
		case evDrained:
			return nil
		case evPending:
			return fmt.Errorf("%w after %s: %s; the uploads go on", ErrUploadsPending, d.Round(time.Millisecond), ev.Work)
		default:
			return errorFromEvent(ev)
		}
	case <-p.gone:
		return fmt.Errorf("%w: the worker is gone", ErrMount)
	case <-ctx.Done():
		return fmt.Errorf("%w: the drain goes on in the background: %w", ErrUnavailable, ctx.Err())
	}
}

// Exit is what a worker reported as it exited.
type Exit struct {
	// NotUploaded counts the files it left in the cache dir not uploaded;
	// negative when it could not tell.
	NotUploaded int
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
	select { // the report, if any, is read before the stream ends
	case <-p.gone:
	case <-time.After(time.Second): // a child of the worker holds the pipe open
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit == nil {
		return Exit{}, false
	}
	return Exit{NotUploaded: p.exit.Work.Dirty}, true
}

// Kill ends the worker at once and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
	_ = p.stdin.Close()
}
