package benchkit

import (
	"os"
	"testing"
	"time"
)

func TestParseCPULine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want MachineCPU
		bad  bool
	}{
		{line: "cpu  100 5 50 1000 10 1 9 2 0 0", want: MachineCPU{
			User: 1050 * time.Millisecond, System: 500 * time.Millisecond, Idle: 10100 * time.Millisecond,
			SoftIRQ: 100 * time.Millisecond, Steal: 20 * time.Millisecond}},
		{line: "cpu0 1 2 3 4 5 6 7 8", bad: true},
		{line: "cpu 1 2 x 4 5 6 7 8", bad: true},
		{line: "cpu 1 2", bad: true},
	} {
		got, err := parseCPULine(tc.line)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseCPULine(%q) = %+v, %v; want %+v, bad %v", tc.line, got, err, tc.want, tc.bad)
		}
	}
}

func TestCPUOf(t *testing.T) {
	// Burn a little CPU: this process's counters cannot go down, and a
	// process that does not exist counts 0.
	before := CPUOf(os.Getpid())
	x := 0
	for i := 0; i < 1e8; i++ {
		x += i
	}
	_ = x
	after := CPUOf(os.Getpid())
	if after.Total() < before.Total() {
		t.Errorf("CPU went down: %v then %v", before, after)
	}
	if got := CPUOf(1 << 30); got.Total() != 0 {
		t.Errorf("CPUOf(no such pid) = %v", got)
	}
	if _, err := Machine(); err != nil {
		t.Error(err)
	}
}
