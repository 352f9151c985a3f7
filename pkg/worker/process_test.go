package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// fakeWorker is the worker's end of the pipes: it reads commands and writes
// events, as the test tells it.
type fakeWorker struct {
	t      *testing.T
	cmds   *json.Decoder
	events *json.Encoder
	close  func()
}

// pipeProcess is a Process on pipes, with no process behind it.
func pipeProcess(t *testing.T) (*Process, *fakeWorker) {
	cmdR, cmdW := io.Pipe()
	evR, evW := io.Pipe()
	p := newProcess("vol", cmdW)
	go p.readEvents(evR)
	w := &fakeWorker{t: t, cmds: json.NewDecoder(bufio.NewReader(cmdR)), events: json.NewEncoder(evW), close: func() { _ = evW.Close() }}
	t.Cleanup(func() { _ = cmdR.Close(); _ = evW.Close() })
	return p, w
}

func (w *fakeWorker) next() command {
	var c command
	if err := w.cmds.Decode(&c); err != nil {
		w.t.Errorf("reading a command: %v", err)
	}
	return c
}

func (w *fakeWorker) send(ev event) {
	if err := w.events.Encode(ev); err != nil {
		w.t.Errorf("writing an event: %v", err)
	}
}

// A drain that the caller gave up on may be answered late; that answer must
// not be taken for the answer to the next drain.
func TestLateDrainAnswerIsDropped(t *testing.T) {
	for _, tc := range []struct {
		name          string
		late, current event // the answer to the abandoned drain, then to the current one
		want          error
	}{
		{"late drained, then pending", event{Type: evDrained}, event{Type: evPending, Work: Work{Dirty: 1}}, ErrUploadsPending},
		{"late pending, then drained", event{Type: evPending, Work: Work{Uploads: 1}}, event{Type: evDrained}, nil},
		{"late error, then drained", event{Type: evError, Kind: "mount", Message: "boom"}, event{Type: evDrained}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, w := pipeProcess(t)
			first := make(chan command, 1)
			go func() {
				c1 := w.next()
				first <- c1
				c2 := w.next() // the retry: only now does the first answer come
				tc.late.ID = c1.ID
				w.send(tc.late)
				tc.current.ID = c2.ID
				w.send(tc.current)
			}()

			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- p.Drain(ctx, time.Minute) }()
			<-first
			cancel() // the kubelet gave up on the call
			if err := <-errc; !errors.Is(err, ErrUnavailable) {
				t.Fatalf("abandoned drain: %v, want ErrUnavailable", err)
			}

			err := p.Drain(context.Background(), time.Minute)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("second drain: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestDrainCommand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		ctxLeft time.Duration // 0: no deadline
		max     time.Duration // the command's timeout is at most this
		min     time.Duration // and at least this
	}{
		{"drain timeout", 90 * time.Second, 0, 90 * time.Second, 90 * time.Second},
		{"the call's deadline is shorter", 90 * time.Second, 60 * time.Second, 60*time.Second - answerMargin, 50 * time.Second},
		{"the call's deadline is nearly up", 90 * time.Second, answerMargin / 2, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, w := pipeProcess(t)
			ctx := context.Background()
			if tc.ctxLeft > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctxLeft)
				defer cancel()
			}
			got := make(chan command, 1)
			go func() {
				c := w.next()
				got <- c
				w.send(event{ID: c.ID, Type: evPending, Work: Work{Dirty: 2, Uploads: 1, Busy: true}})
			}()
			err := p.Drain(ctx, tc.timeout)
			if !errors.Is(err, ErrUploadsPending) {
				t.Fatalf("drain: %v", err)
			}
			c := <-got
			if c.Op != "drain" || c.ID == 0 {
				t.Fatalf("command %+v", c)
			}
			if d := time.Duration(c.TimeoutMS) * time.Millisecond; d > tc.max || d < tc.min {
				t.Fatalf("command timeout %s, want in [%s, %s]", d, tc.min, tc.max)
			}
		})
	}
}

func TestCommandIDsDiffer(t *testing.T) {
	p, w := pipeProcess(t)
	ids := make(chan uint64, 3)
	go func() {
		for range 3 {
			c := w.next()
			ids <- c.ID
			w.send(event{ID: c.ID, Type: evDrained})
		}
	}()
	for range 3 {
		if err := p.Drain(context.Background(), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint64]bool{}
	for range 3 {
		seen[<-ids] = true
	}
	if len(seen) != 3 {
		t.Fatalf("ids %v", seen)
	}
}

func TestWaitReturnsExitReport(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []event
		want   Exit
		ok     bool
	}{
		{"none left", []event{{Type: evExit}}, Exit{NotUploaded: 0}, true},
		{"files left", []event{{Type: evExit, Work: Work{Dirty: 3}}}, Exit{NotUploaded: 3}, true},
		{"could not tell", []event{{Type: evExit, Work: Work{Dirty: -1}}}, Exit{NotUploaded: -1}, true},
		{"died without a word", nil, Exit{}, false},
		{"a late answer is no report", []event{{ID: 7, Type: evDrained}}, Exit{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, w := pipeProcess(t)
			for _, ev := range tc.events {
				w.send(ev)
			}
			w.close()
			close(p.done) // the process has exited
			got, ok := p.Wait(time.Second)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("Wait: %+v %t, want %+v %t", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestDrainerGoesOnAndIsJoined(t *testing.T) {
	var done atomic.Bool
	var expedited, running, maxRunning atomic.Int32
	d := &drainer{
		work: func() Work {
			n := running.Add(1)
			defer running.Add(-1)
			if n > maxRunning.Load() {
				maxRunning.Store(n)
			}
			return Work{Uploads: map[bool]int{false: 1, true: 0}[done.Load()]}
		},
		expedite: func() { expedited.Add(1) },
		poll:     time.Millisecond,
	}
	ctx := context.Background()
	if d.wait(ctx, 20*time.Millisecond) {
		t.Fatal("drained with an upload queued")
	}
	// The drain goes on after its caller gave up.
	before := expedited.Load()
	for expedited.Load() < before+3 {
		time.Sleep(time.Millisecond)
	}
	// Callers at the same time join one drain.
	results := make(chan bool, 3)
	for range 3 {
		go func() { results <- d.wait(ctx, time.Minute) }()
	}
	done.Store(true)
	for range 3 {
		if !<-results {
			t.Fatal("a joined drain did not finish")
		}
	}
	if maxRunning.Load() != 1 {
		t.Fatalf("%d drains ran at once", maxRunning.Load())
	}
	// Nothing left: a new drain finishes at once.
	if !d.wait(ctx, time.Minute) {
		t.Fatal("drain with nothing left")
	}
}

func TestDrainerStopsWithItsContext(t *testing.T) {
	var polls atomic.Int32
	d := &drainer{work: func() Work { polls.Add(1); return Work{Busy: true} }, expedite: func() {}, poll: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	if d.wait(ctx, 10*time.Millisecond) {
		t.Fatal("drained while busy")
	}
	cancel()
	time.Sleep(20 * time.Millisecond)
	n := polls.Load()
	time.Sleep(20 * time.Millisecond)
	if polls.Load() > n+1 {
		t.Fatal("the drain goes on after the worker's context ended")
	}
}
