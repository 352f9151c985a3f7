package uidpool

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Range
		wantErr bool
	}{
		{in: "2000-2009", want: Range{2000, 2009}},
		{in: "2000+10", want: Range{2000, 2009}},
		{in: " 5 - 5 ", want: Range{5, 5}},
		{in: "0-10", wantErr: true},         // root
		{in: "10-9", wantErr: true},         // empty
		{in: "10+0", wantErr: true},         // empty
		{in: "10", wantErr: true},           // no end
		{in: "a-b", wantErr: true},          // not numbers
		{in: "-5-10", wantErr: true},        // negative
		{in: "1-4294967295", wantErr: true}, // -1 as uint32
	} {
		got, err := ParseRange(tc.in)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("ParseRange(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestPool(t *testing.T) {
	type step struct {
		op      string // allocate, reserve, release
		volume  string
		uid     int // reserve: the uid; allocate: the uid wanted
		wantErr error
	}
	exhausted, refused := ErrExhausted, errors.New("refused")
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"lowest free first", []step{
			{"allocate", "a", 100, nil},
			{"allocate", "b", 101, nil},
			{"allocate", "c", 102, nil},
		}},
		{"same volume, same uid", []step{
			{"allocate", "a", 100, nil},
			{"allocate", "a", 100, nil},
			{"allocate", "b", 101, nil},
		}},
		{"reuse after release, lowest first", []step{
			{"allocate", "a", 100, nil},
			{"allocate", "b", 101, nil},
			{"allocate", "c", 102, nil},
			{"release", "b", 0, nil},
			{"release", "a", 0, nil},
			{"allocate", "d", 100, nil},
			{"allocate", "e", 101, nil},
		}},
		{"exhausted", []step{
			{"allocate", "a", 100, nil},
			{"allocate", "b", 101, nil},
			{"allocate", "c", 102, nil},
			{"allocate", "d", 0, exhausted},
			{"release", "c", 0, nil},
			{"allocate", "d", 102, nil},
		}},
		{"recovery reserves recorded uids, then a record without one gets the lowest free", []step{
			{"reserve", "a", 102, nil},
			{"reserve", "b", 100, nil},
			{"allocate", "old-record", 101, nil},
			{"allocate", "new", 0, exhausted},
		}},
		{"reserve refuses another volume's uid and uids outside the range", []step{
			{"reserve", "a", 100, nil},
			{"reserve", "b", 100, refused},
			{"reserve", "b", 99, refused},
			{"reserve", "b", 103, refused},
			{"allocate", "b", 101, nil},
		}},
		{"reserve moves a volume to its recorded uid", []step{
			{"allocate", "a", 100, nil},
			{"reserve", "a", 102, nil},
			{"allocate", "b", 100, nil},
		}},
		{"release of an unknown volume is harmless", []step{
			{"release", "x", 0, nil},
			{"allocate", "a", 100, nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Range{100, 102})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				var err error
				switch s.op {
				case "allocate":
					var uid int
					uid, err = p.Allocate(s.volume)
					if err == nil && uid != s.uid {
						t.Fatalf("step %d: allocate %s = %d, want %d", i, s.volume, uid, s.uid)
					}
				case "reserve":
					err = p.Reserve(s.volume, s.uid)
				case "release":
					p.Release(s.volume)
				}
				switch {
				case s.wantErr == nil && err != nil:
					t.Fatalf("step %d: %s %s: %v", i, s.op, s.volume, err)
				case s.wantErr == refused && err == nil, s.wantErr == exhausted && !errors.Is(err, ErrExhausted):
					t.Fatalf("step %d: %s %s: got %v, want %v", i, s.op, s.volume, err, s.wantErr)
				}
			}
		})
	}
}

// Concurrent stages of different volumes never get the same uid.
func TestPoolConcurrent(t *testing.T) {
	p, err := New(Range{1000, 1063})
	if err != nil {
		t.Fatal(err)
	}
	uids := make([]int, 64)
	var wg sync.WaitGroup
	for i := range uids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid, err := p.Allocate(fmt.Sprintf("vol-%d", i))
			if err != nil {
				t.Error(err)
			}
			uids[i] = uid
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, uid := range uids {
		if seen[uid] || !p.Range().Contains(uid) {
			t.Fatalf("uid %d given twice or outside the range: %v", uid, uids)
		}
		seen[uid] = true
	}
	if _, err := p.Allocate("one-more"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("65th volume: %v, want ErrExhausted", err)
	}
}
