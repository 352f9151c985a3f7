package worker

// What other child processes of the driver (the provisioning one) share
// with a mount worker: the error language and the sandbox hand-over.

// Classify wraps err with the kind (ErrPermissionDenied, ErrNotFound, ...)
// that rclone's error says, as a mount worker does.
func Classify(err error) error { return classify(err) }

// KindOf names err's kind for a protocol line; "mount" when none matches.
func KindOf(err error) string { return kindOf(err) }

// ErrorOf rebuilds a kinded error from a protocol line.
func ErrorOf(kind, message string) error {
	return errorFromEvent(event{Type: "error", Kind: kind, Message: message})
}

// SandboxCaps are the ambient capabilities a child started under another
// uid needs to confine itself fully (see sandboxCaps).
func SandboxCaps() []uintptr { return sandboxCaps() }
