package worker

import (
	"bufio"
	"os"
	"runtime/debug"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/csi-rclone/csi-rclone/secrets"
)

// redactStderr puts a pipe in place of this process's stderr and copies it,
// line by line, to the real one, with the credentials of the Spec that the
// returned function is given replaced: the driver does that for its child
// workers, and a mount pod's worker has no driver reading its stderr. If the
// pipe cannot be made, stderr stays as it is and the function does nothing.
func redactStderr() func(*Spec) {
	var mu sync.Mutex
	var redact func(string) string
	r, w, err := os.Pipe()
	if err != nil {
		return func(*Spec) {}
	}
	realFD, err := unix.Dup(2)
	if err != nil {
		r.Close()
		w.Close()
		return func(*Spec) {}
	}
	if err := unix.Dup3(int(w.Fd()), 2, 0); err != nil {
		r.Close()
		w.Close()
		unix.Close(realFD)
		return func(*Spec) {}
	}
	w.Close()
	out := os.NewFile(uintptr(realFD), "stderr")
	// A crash's trace goes straight out: the copy would die with it.
	_ = debug.SetCrashOutput(out, debug.CrashOptions{})
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			if redact != nil {
				line = redact(line)
			}
			mu.Unlock()
			_, _ = out.WriteString(line + "\n")
		}
	}()
	return func(s *Spec) {
		values := append(s.Volume.Config.Sensitive(), s.Volume.Secrets...)
		mu.Lock()
		redact = func(line string) string { return secrets.RedactValues(line, values) }
		mu.Unlock()
	}
}
