package worker

// The error kinds, exported for other child processes of the driver (the
// provisioning one) that speak the same error language as a mount worker.

// Classify wraps err with the kind (ErrPermissionDenied, ErrNotFound, ...)
// that rclone's error says, as a mount worker does.
func Classify(err error) error { return classify(err) }

// KindOf names err's kind for a protocol line; "mount" when none matches.
func KindOf(err error) string { return kindOf(err) }

// ErrorOf rebuilds a kinded error from a protocol line.
func ErrorOf(kind, message string) error {
	return errorFromEvent(event{Type: "error", Kind: kind, Message: message})
}
