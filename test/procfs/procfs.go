// Package procfs reads what tests check of a process in /proc.
package procfs

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Status is /proc/<pid>/status as field → value ("Uid" → "5000\t5000\t5000\t5000").
func Status(t testing.TB, pid int) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}
