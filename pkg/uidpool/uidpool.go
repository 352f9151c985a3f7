// Package uidpool hands every staged volume a uid of its own from a range
// the operator sets aside, so that no two mount workers share a user: one
// tenant's worker cannot read another's files, cache or memory.
//
// The gid of a volume is the same number: a group of its own.
package uidpool

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// ErrExhausted: every uid of the range belongs to a volume.
var ErrExhausted = errors.New("every worker uid of the range is in use")

// Range is the uids First..Last, both included.
type Range struct{ First, Last int }

// maxID keeps uids clear of -1 (uint32 0xffffffff, "no change" to
// setresuid and chown) and of 0xfffffffe, the kernel's overflow id.
const maxID = 1<<32 - 3

// ParseRange reads "FIRST-LAST" (both included) or "FIRST+COUNT".
func ParseRange(s string) (Range, error) {
	var r Range
	first, rest, ok := strings.Cut(s, "-")
	count := false
	if !ok {
		if first, rest, ok = strings.Cut(s, "+"); !ok {
			return r, fmt.Errorf("uid range %q: want FIRST-LAST or FIRST+COUNT", s)
		}
		count = true
	}
	a, err := strconv.ParseUint(strings.TrimSpace(first), 10, 32)
	if err != nil {
		return r, fmt.Errorf("uid range %q: %w", s, err)
	}
	b, err := strconv.ParseUint(strings.TrimSpace(rest), 10, 32)
	if err != nil {
		return r, fmt.Errorf("uid range %q: %w", s, err)
	}
	r.First, r.Last = int(a), int(b)
	if count {
		r.Last = int(a) + int(b) - 1
	}
	return r, r.Validate()
}

// Validate checks that r is a non-empty range of unprivileged ids.
func (r Range) Validate() error {
	switch {
	case r.First <= 0:
		return fmt.Errorf("uid range %s: must not include root (0)", r)
	case r.Last < r.First:
		return fmt.Errorf("uid range %s is empty", r)
	case r.Last > maxID:
		return fmt.Errorf("uid range %s: %d is above the largest usable id %d", r, r.Last, maxID)
	}
	return nil
}

// Contains reports whether uid is in r.
func (r Range) Contains(uid int) bool { return uid >= r.First && uid <= r.Last }

// Size is how many uids r holds.
func (r Range) Size() int { return r.Last - r.First + 1 }

func (r Range) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// Pool remembers which volume holds which uid of a range. It is safe for
// concurrent use.
type Pool struct {
	r    Range
	mu   sync.Mutex
	byID map[string]int // volume id → uid
	used map[int]string // uid → volume id
}

// New makes an empty pool over r.
func New(r Range) (*Pool, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &Pool{r: r, byID: map[string]int{}, used: map[int]string{}}, nil
}

// Range is the pool's range.
func (p *Pool) Range() Range { return p.r }

// Allocate gives volumeID the lowest free uid, or the one it holds already.
func (p *Pool) Allocate(volumeID string) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if uid, ok := p.byID[volumeID]; ok {
		return uid, nil
	}
	// Linear: a node stages hundreds of volumes, not millions.
	for uid := p.r.First; uid <= p.r.Last; uid++ {
		if _, taken := p.used[uid]; !taken {
			p.byID[volumeID], p.used[uid] = uid, volumeID
			return uid, nil
		}
	}
	return 0, fmt.Errorf("%w (%s, %d volumes)", ErrExhausted, p.r, len(p.byID))
}

// Reserve gives volumeID the uid its record names, as recovery does. A uid
// outside the range (the operator changed it) or held by another volume
// is refused: the caller then allocates a new one.
func (p *Pool) Reserve(volumeID string, uid int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.r.Contains(uid) {
		return fmt.Errorf("uid %d is outside the worker uid range %s", uid, p.r)
	}
	if owner, taken := p.used[uid]; taken && owner != volumeID {
		return fmt.Errorf("uid %d belongs to volume %q", uid, owner)
	}
	if old, ok := p.byID[volumeID]; ok && old != uid {
		delete(p.used, old)
	}
	p.byID[volumeID], p.used[uid] = uid, volumeID
	return nil
}

// Release frees the uid of volumeID, if it holds one.
func (p *Pool) Release(volumeID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if uid, ok := p.byID[volumeID]; ok {
		delete(p.byID, volumeID)
		delete(p.used, uid)
	}
}
