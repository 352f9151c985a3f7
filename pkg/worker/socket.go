package worker

// A mount pod's worker is reached over a unix socket that it listens on
// in an emptyDir of its pod; the node plugin, root on the node, connects
// through the kubelet's pod directory. The first byte of a connection says
// what the plugin wants:
//
//   - helloStart: the FUSE device the plugin mounted rides on it
//     (SCM_RIGHTS), and the Spec, credentials included, follows as a JSON
//     line. No credential is ever in the pod's spec, env or arguments.
//   - helloAttach: a restarted plugin takes over a worker that already
//     serves a volume; the mount was never interrupted.
//
// Then the connection carries the protocol of the pipes: commands one way,
// events the other. The newest connection is the one obeyed and told; a
// connection that ends does not end the worker, which serves its mount
// until the kernel ends the FUSE session or it is told to exit.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// The first byte of a connection.
const (
	helloStart  = 'S'
	helloAttach = 'A'
)

// helloTimeout bounds how long a connection may take to say what it wants
// (and, for a start, to send its Spec), and how long a write of an event may
// block on a parent that does not read.
const helloTimeout = 10 * time.Second

// ErrNotStarted is the answer of a mount pod's worker that serves no volume
// yet (its container has just started, or started again) to an attach.
var ErrNotStarted = errors.New("the mount worker serves no volume yet")

func init() { kinds["notStarted"] = ErrNotStarted }

// ServeSocket is a mount pod's worker. It waits on ln for the plugin to hand
// it the FUSE device and the Spec, mounts, and then obeys the newest
// connection. onSpec, if not nil, sees the Spec before the mount (to redact
// the worker's own log). cacheDir is the worker's own, whatever the Spec says.
func ServeSocket(ctx context.Context, ln *net.UnixListener, cacheDir string, onSpec func(*Spec)) error {
	h := &hub{cmds: make(chan command)}
	var spec Spec
	var mnt *mounted
	for mnt == nil {
		c, err := ln.AcceptUnix()
		if err != nil {
			return fmt.Errorf("accepting: %w", err)
		}
		m, dec, err := startOn(ctx, c, &spec, cacheDir, onSpec)
		if err != nil {
			// The plugin undoes its mount and tries again later, on a new
			// connection; the worker stays, with its cache.
			klog.InfoS("a start of the mount failed; waiting for the next", "err", err)
			c.Close()
			continue
		}
		mnt = m
		h.take(c, dec, nil)
	}
	go h.accept(ln, spec.VolumeID)
	return obey(ctx, &spec, mnt, h.cmds, h.send)
}

// startOn serves a connection's start: it reads the device and the Spec,
// and mounts.
func startOn(ctx context.Context, c *net.UnixConn, spec *Spec, cacheDir string, onSpec func(*Spec)) (*mounted, *json.Decoder, error) {
	hello, fd, err := readHello(c)
	if err != nil {
		return nil, nil, err
	}
	if hello != helloStart || fd < 0 {
		if fd >= 0 {
			unix.Close(fd)
		}
		writeEvent(c, event{Type: evError, Kind: "notStarted", Message: ErrNotStarted.Error()})
		return nil, nil, fmt.Errorf("%w: hello %q", ErrNotStarted, hello)
	}
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	dec := json.NewDecoder(c)
	*spec = Spec{}
	if err := dec.Decode(spec); err != nil {
		unix.Close(fd)
		writeEvent(c, event{Type: evError, Kind: "invalid", Message: "worker: cannot read its spec"})
		return nil, nil, fmt.Errorf("reading spec: %w", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	// go-fuse serves the device by its number and closes it when done.
	spec.MountPoint = fmt.Sprintf("/dev/fd/%d", fd)
	spec.CacheDir = cacheDir
	if onSpec != nil {
		onSpec(spec)
	}
	mnt, err := mountAndReport(ctx, spec, func(ev event) { writeEvent(c, ev) })
	if err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	return mnt, dec, nil
}

// hub is the worker's end of its connections: the newest one is obeyed and
// told, the ones before it are closed.
type hub struct {
	cmds chan command

	mu  sync.Mutex
	cur *net.UnixConn
	enc *json.Encoder
}

// take makes c the connection obeyed and told, first telling it first, if
// not nil.
func (h *hub) take(c *net.UnixConn, dec *json.Decoder, first *event) {
	h.mu.Lock()
	old := h.cur
	h.cur, h.enc = c, json.NewEncoder(c)
	if first != nil {
		h.write(*first)
	}
	h.mu.Unlock()
	if old != nil {
		old.Close()
	}
	go func() {
		for {
			var cmd command
			if err := dec.Decode(&cmd); err != nil {
				h.drop(c)
				return
			}
			h.mu.Lock()
			current := h.cur == c
			h.mu.Unlock()
			if current {
				h.cmds <- cmd
			}
		}
	}()
}

// drop forgets c, which has ended: events wait for the next connection.
func (h *hub) drop(c *net.UnixConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == c {
		h.cur, h.enc = nil, nil
	}
	c.Close()
}

// send tells the current connection; with none, the event is lost (the
// plugin reads the cache dir instead of the exit report).
func (h *hub) send(ev event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.write(ev)
}

func (h *hub) write(ev event) {
	if h.cur == nil {
		return
	}
	_ = h.cur.SetWriteDeadline(time.Now().Add(helloTimeout))
	_ = h.enc.Encode(ev)
}

// accept takes the attaches of restarted plugins, while the mount serves.
func (h *hub) accept(ln *net.UnixListener, volumeID string) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		hello, fd, err := readHello(c)
		if fd >= 0 {
			unix.Close(fd) // a start: this worker has its device already
		}
		switch {
		case err != nil:
			klog.InfoS("dropping a connection", "err", err)
			c.Close()
		case hello != helloAttach:
			writeEvent(c, event{Type: evError, Kind: "mount", Message: "this mount worker serves a volume already: attach to it"})
			c.Close()
		default:
			klog.InfoS("the node plugin attached", "volumeID", volumeID)
			h.take(c, json.NewDecoder(c), &event{Type: evReady, VolumeID: volumeID})
		}
	}
}

// writeEvent writes ev on a connection that is not (yet) the hub's.
func writeEvent(c *net.UnixConn, ev event) {
	_ = c.SetWriteDeadline(time.Now().Add(helloTimeout))
	_ = json.NewEncoder(c).Encode(ev)
}

// readHello reads a connection's first byte, and the file descriptor that
// came with it (-1: none). Only root (the plugin) and the worker's own uid
// may connect; the socket's mode keeps the others out already.
func readHello(c *net.UnixConn) (byte, int, error) {
	if err := checkPeer(c); err != nil {
		return 0, -1, err
	}
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	defer c.SetReadDeadline(time.Time{})
	b := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, flags, _, err := c.ReadMsgUnix(b, oob)
	if err != nil {
		return 0, -1, fmt.Errorf("reading hello: %w", err)
	}
	fd := -1
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return 0, -1, fmt.Errorf("reading hello: %w", err)
		}
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			for _, f := range fds {
				if fd < 0 {
					fd = f
				} else {
					unix.Close(f)
				}
			}
		}
	}
	if n != 1 || flags&unix.MSG_CTRUNC != 0 {
		if fd >= 0 {
			unix.Close(fd)
		}
		return 0, -1, errors.New("reading hello: short or truncated")
	}
	return b[0], fd, nil
}

// checkPeer admits root and this process's own uid.
func checkPeer(c *net.UnixConn) error {
	cred, err := peerCred(c)
	if err != nil {
		return err
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("refusing a connection from uid %d", cred.Uid)
	}
	return nil
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, credErr
}

// Listen makes the worker's socket at path, for root and its own uid only.
// A socket left by a previous container of the pod is removed first.
func Listen(path string) (*net.UnixListener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	old := unix.Umask(0o077)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false) // a restarted plugin may still be connecting
	return ln, nil
}

// Conn is a mount pod's worker, reached over its socket.
type Conn struct {
	*session
	c   *net.UnixConn
	pid int
}

// StartOn mounts the FUSE device at spec.MountPoint, as Start does, and
// hands it and spec to the worker that listens on socketPath (waiting until
// it does, within ctx). On failure no mount is left.
func StartOn(ctx context.Context, socketPath string, opts Options, spec Spec) (_ *Conn, err error) {
	mountPoint := spec.MountPoint
	dev, err := mountFor(&spec, opts)
	if err != nil {
		return nil, err
	}
	defer dev.Close() // the worker has its own copy, or failed
	defer func() {
		if err != nil {
			_ = unmountFUSE(mountPoint)
		}
	}()
	c, err := dial(ctx, socketPath)
	if err != nil {
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Now().Add(helloTimeout))
	_, _, werr := c.WriteMsgUnix([]byte{helloStart}, unix.UnixRights(int(dev.Fd())), nil)
	if werr == nil {
		spec.MountPoint, spec.CacheDir = "", "" // the worker's own
		werr = json.NewEncoder(c).Encode(spec)
	}
	_ = c.SetWriteDeadline(time.Time{})
	w, err := connect(ctx, c, spec.VolumeID, "")
	if err == nil && werr != nil { // cannot be: the worker answered a spec it did not get
		w.Detach()
		err = werr
	}
	if err != nil && werr != nil && !errors.Is(err, ErrMount) {
		// A worker that refused closes at once: its answer says why.
		err = fmt.Errorf("%w: handing the device and spec to the mount worker: %w", ErrMount, werr)
	}
	return w, err
}

// Attach takes over the worker that serves volumeID on socketPath, after a
// restart of the plugin. ErrNotStarted: that worker serves no volume.
func Attach(ctx context.Context, socketPath, volumeID string) (*Conn, error) {
	c, err := dial(ctx, socketPath)
	if err != nil {
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Now().Add(helloTimeout))
	if _, err := c.Write([]byte{helloAttach}); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: attaching to the mount worker: %w", ErrUnavailable, err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	return connect(ctx, c, volumeID, volumeID)
}

// connect waits for the worker's first event on c: ready (for want, if not
// empty), or why not.
func connect(ctx context.Context, c *net.UnixConn, volumeID, want string) (*Conn, error) {
	w := &Conn{session: newSession(volumeID, c), c: c}
	if cred, err := peerCred(c); err == nil {
		w.pid = int(cred.Pid) // 0 when the worker's pid namespace is not ours
	}
	go w.readEvents(c)
	select {
	case ev, ok := <-w.events:
		switch {
		case ok && ev.Type == evReady && (want == "" || ev.VolumeID == want):
			return w, nil
		case ok && ev.Type == evReady:
			c.Close()
			return nil, fmt.Errorf("%w: the mount worker serves volume %q, not %q", ErrMount, ev.VolumeID, want)
		case ok && ev.Type == evError:
			c.Close()
			return nil, errorFromEvent(ev)
		default:
			c.Close()
			return nil, fmt.Errorf("%w: the mount worker closed the connection before mounting", ErrMount)
		}
	case <-ctx.Done():
		c.Close()
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
}

// dial connects to socketPath, waiting while the socket is not there yet
// or nobody listens on it (the mount pod's container is starting). It goes
// through /proc/self/fd, for a kubelet pod dir's path may be longer than a
// socket address can be.
func dial(ctx context.Context, socketPath string) (*net.UnixConn, error) {
	for {
		c, err := dialOnce(socketPath)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: connecting to the mount worker: %w", ErrUnavailable, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: connecting to the mount worker: %w (%w)", ErrUnavailable, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func dialOnce(socketPath string) (*net.UnixConn, error) {
	dir, err := unix.Open(filepath.Dir(socketPath), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Dir(socketPath), Err: err}
	}
	defer unix.Close(dir)
	addr := fmt.Sprintf("/proc/self/fd/%d/%s", dir, filepath.Base(socketPath))
	return net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
}

// Pid is the worker's process id as this process sees it; 0 when it runs
// in a pid namespace that is not this one's.
func (w *Conn) Pid() int { return w.pid }

// Done is closed when the connection has ended: the worker exited (or, if
// this is no longer the newest connection, another plugin took over).
func (w *Conn) Done() <-chan struct{} { return w.gone }

// Drain is Process.Drain over the socket.
func (w *Conn) Drain(ctx context.Context, d time.Duration) error { return w.drain(ctx, d, w.gone) }

// Stats is Process.Stats over the socket.
func (w *Conn) Stats(ctx context.Context) (Stats, error) { return w.stats(ctx, w.gone) }

// Wait waits up to d for the worker to exit after an unmount, and returns
// its last report.
func (w *Conn) Wait(d time.Duration) (Exit, bool) {
	select {
	case <-w.gone:
	case <-time.After(d):
	}
	w.c.Close()
	return w.exitReport()
}

// Kill tells the worker to exit at once (its pod starts it again, with its
// cache, for the next start) and waits a moment for it.
func (w *Conn) Kill() {
	if _, _, err := w.send(command{Op: opExit}); err == nil {
		select {
		case <-w.gone:
		case <-time.After(5 * time.Second):
		}
	}
	w.c.Close()
}

// Detach lets go of the worker, which goes on serving its mount until a
// plugin attaches again.
func (w *Conn) Detach() { w.c.Close() }
