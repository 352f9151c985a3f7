package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// session is the parent's end of the protocol on one stream, whatever
// carries it (a child's pipes, a mount pod's socket): commands out, events
// in, each answer matched to its command by id.
type session struct {
	volumeID string
	w        io.Writer  // commands
	events   chan event // the events that answer no command: ready, error at start

	mu      sync.Mutex // guards the fields below, and the writes to w
	lastID  uint64
	waiters map[uint64]chan event // by command id
	exit    *event                // the worker's last word, once it said it
	gone    chan struct{}         // closed when the event stream has ended
}

func newSession(volumeID string, w io.Writer) *session {
	return &session{
		volumeID: volumeID, w: w,
		events: make(chan event, 4), gone: make(chan struct{}),
		waiters: map[uint64]chan event{},
	}
}

// readEvents hands each event to the command it answers, or, for events
// that answer none, to the starter; it drops answers nobody waits for any
// more: those of commands whose caller gave up.
func (p *session) readEvents(r io.Reader) {
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
			default: // nobody reads them after the start
			}
		}
		p.mu.Unlock()
	}
}

// send writes a command with a fresh id and returns where its answer comes.
func (p *session) send(c command) (uint64, <-chan event, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastID++
	c.ID = p.lastID
	answer := make(chan event, 1)
	p.waiters[c.ID] = answer
	if err := json.NewEncoder(p.w).Encode(c); err != nil {
		delete(p.waiters, c.ID)
		return 0, nil, err
	}
	return c.ID, answer, nil
}

// forget stops waiting for the answer to command id: if it comes, it is
// dropped.
func (p *session) forget(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiters, id)
}

// answerMargin is the part of a caller's deadline that a drain leaves for
// what follows it (unmount, cleanup, the answer to the kubelet).
const answerMargin = 5 * time.Second

// drain is Drain for a worker that is gone once done is closed.
func (p *session) drain(ctx context.Context, d time.Duration, done <-chan struct{}) error {
	select {
	case <-done:
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

// exitReport is the worker's last report, once the stream has ended (or a
// second after the caller stopped waiting for the worker).
func (p *session) exitReport() (Exit, bool) {
	select { // the report, if any, is read before the stream ends
	case <-p.gone:
	case <-time.After(time.Second): // a child of the worker holds the stream open
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit == nil {
		return Exit{}, false
	}
	return Exit{NotUploaded: p.exit.Work.Dirty}, true
}

// Exit is what a worker reported as it exited.
type Exit struct {
	// NotUploaded counts the files it left in the cache dir not uploaded;
	// negative when it could not tell.
	NotUploaded int
}
