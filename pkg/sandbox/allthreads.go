//go:build linux

package sandbox

import (
	"syscall"

	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// allThreadsSyscall runs a system call on every thread of the process,
// through libpsx (which go-landlock uses too): the Go runtime's own
// syscall.AllThreadsSyscall refuses to when cgo is linked in.
func allThreadsSyscall(nr, a1, a2 uintptr) error {
	if _, _, errno := psx.Syscall3(nr, a1, a2, 0); errno != 0 {
		return syscall.Errno(errno)
	}
	return nil
}
