// Package procfs reads what tests check of a process, or of this one's
// mounts, in /proc.
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

// Mounted says whether something is mounted at path in this process's mount
// namespace (path as mountinfo writes it).
func Mounted(t testing.TB, path string) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}
