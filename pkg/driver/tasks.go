package driver

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// errShutdown: the driver is shutting down and starts nothing more.
var errShutdown = errors.New("the driver is shutting down")

// tasks runs the driver's background goroutines (recovery, worker
// supervision). Each gets the driver's context, which Shutdown cancels, and
// Shutdown waits for all of them: none can start a worker after it.
type tasks struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newTasks() *tasks {
	ctx, cancel := context.WithCancel(context.Background())
	return &tasks{ctx: ctx, cancel: cancel}
}

// Go runs f in a goroutine with the driver's context, or reports false when
// the driver is shutting down. A panic in f is logged with its stack and
// ends f only.
func (t *tasks) Go(name string, f func(ctx context.Context)) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer func() {
			if r := recover(); r != nil {
				klog.ErrorS(nil, "background task panicked", "task", name, "panic", r, "stack", string(debug.Stack()))
			}
		}()
		f(t.ctx)
	}()
	return true
}

// Cancel cancels the context of every task and refuses new ones.
func (t *tasks) Cancel() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.cancel()
}

// Wait waits until every task has returned; after Cancel, no new one starts.
func (t *tasks) Wait() { t.wg.Wait() }

// sleep waits d, or less when ctx ends first; it reports whether ctx is
// still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
