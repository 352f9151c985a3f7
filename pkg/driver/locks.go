package driver

import "sync"

// volumeLocks lets one operation at a time work on a volume. A second caller
// is not queued: it gets Aborted and the CO retries, as the CSI spec expects.
type volumeLocks struct {
	mu   sync.Mutex
	held map[string]struct{}
}

func newVolumeLocks() *volumeLocks { return &volumeLocks{held: map[string]struct{}{}} }

// tryAcquire takes the lock of id, or reports false if someone holds it.
func (l *volumeLocks) tryAcquire(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, busy := l.held[id]; busy {
		return false
	}
	l.held[id] = struct{}{}
	return true
}

func (l *volumeLocks) release(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, id)
}
