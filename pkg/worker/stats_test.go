package worker

import (
	"context"
	"errors"
	"testing"
)

func TestTallyCountsEachTransferOnce(t *testing.T) {
	type look struct {
		finished, running []transfer
		read, written     int64
		uploadErrors      int64
		reading, upload   int
	}
	for _, tc := range []struct {
		name  string
		looks []look
	}{
		{"a read in progress, then finished, then pruned", []look{
			{running: []transfer{{bytes: 10}}, read: 10, reading: 1},
			{finished: []transfer{{key: "a", bytes: 30}}, read: 30},
			{finished: []transfer{{key: "a", bytes: 30}}, read: 30},
			{read: 30},
		}},
		{"uploads and reads apart, a failed upload counted once", []look{
			{finished: []transfer{{key: "r", bytes: 5}, {key: "u", upload: true, bytes: 7, failed: true}}, read: 5, written: 7, uploadErrors: 1},
			{finished: []transfer{{key: "u", upload: true, bytes: 7, failed: true}, {key: "u2", upload: true, bytes: 1}},
				running: []transfer{{upload: true, bytes: 2}}, read: 5, written: 10, uploadErrors: 1, upload: 1},
		}},
		{"a transfer that finished between the two reads never goes back", []look{
			{running: []transfer{{bytes: 100}}, read: 100, reading: 1},
			{read: 100}, // finished and pruned before it was seen finished
			{finished: []transfer{{key: "b", bytes: 1}}, read: 100},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := newTally()
			for i, l := range tc.looks {
				r, w, ue, rd, up := tl.observe(l.finished, l.running)
				if r != l.read || w != l.written || ue != l.uploadErrors || rd != l.reading || up != l.upload {
					t.Errorf("look %d: read %d written %d uploadErrors %d reading %d uploading %d, want %d %d %d %d %d",
						i, r, w, ue, rd, up, l.read, l.written, l.uploadErrors, l.reading, l.upload)
				}
			}
		})
	}
}

func TestStatsCommand(t *testing.T) {
	p, w := pipeProcess(t)
	go func() {
		c := w.next()
		if c.Op != opStats || c.ID == 0 {
			t.Errorf("command %+v, want a stats command with an id", c)
		}
		w.send(event{ID: c.ID, Type: evStats, Stats: &Stats{ReadBytes: 3, Dirty: 2}})
		c = w.next()
		w.send(event{ID: c.ID, Type: evError, Kind: "invalid", Message: `unknown command "stats"`})
	}()
	st, err := p.Stats(context.Background())
	if err != nil || st.ReadBytes != 3 || st.Dirty != 2 {
		t.Fatalf("Stats() = %+v, %v", st, err)
	}
	// An older worker that does not know the command.
	if _, err := p.Stats(context.Background()); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Stats() of a worker without the command: %v, want ErrInvalid", err)
	}
	// A worker that does not answer in time.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	go w.next()
	if _, err := p.Stats(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Stats() past the deadline: %v, want ErrUnavailable", err)
	}
}
