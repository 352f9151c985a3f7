package driver

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/csi-rclone/csi-rclone/pkg/worker"
	"github.com/csi-rclone/csi-rclone/secrets"
)

func TestUserMessage(t *testing.T) {
	for _, tc := range []struct {
		name, what string
		err        error
		want       string
	}{{
		name: "bad credentials",
		what: "mounting volume",
		err:  &worker.MountError{Kind: worker.ErrPermissionDenied, Message: "permission denied by the storage: listing store:exists: operation error S3: ListObjects, https response error StatusCode: 403, RequestID: F728C9D34F9AB710, HostID: RjcyOEM5RDM0RjlBQjcxMEY3MjhDOUQzNEY5QUI3MTBGNzI4QzlEMzRGOUFCNzEwRjcyOEM5RDM0RjlBQjcxMA==, api error SignatureDoesNotMatch: The request signature we calculated does not match the signature you provided. Check your key and signing method."},
		want: "mounting volume: permission denied by the storage: listing store:exists: S3 ListObjects: SignatureDoesNotMatch (HTTP 403): The request signature we calculated does not match the signature you provided. Check your key and signing method.",
	}, {
		name: "unknown key id",
		what: "mounting volume",
		err:  &worker.MountError{Kind: worker.ErrPermissionDenied, Message: "permission denied by the storage: listing store:b: operation error S3: ListObjectsV2, https response error StatusCode: 403, RequestID: 1, HostID: 2, api error InvalidAccessKeyId: The AWS Access Key Id you provided does not exist in our records."},
		want: "mounting volume: permission denied by the storage: listing store:b: S3 ListObjectsV2: InvalidAccessKeyId (HTTP 403): The AWS Access Key Id you provided does not exist in our records.",
	}, {
		name: "missing bucket",
		what: "mounting volume",
		err:  &worker.MountError{Kind: worker.ErrNotFound, Message: "not found on the storage: listing store:no-such-bucket: directory not found"},
		want: "mounting volume: not found on the storage: listing store:no-such-bucket: directory not found",
	}, {
		name: "missing bucket on AWS",
		what: "mounting volume",
		err:  &worker.MountError{Kind: worker.ErrNotFound, Message: "not found on the storage: listing store:b: operation error S3: ListObjects, https response error StatusCode: 404, RequestID: X, HostID: Y, api error NoSuchBucket: The specified bucket does not exist"},
		want: "mounting volume: not found on the storage: listing store:b: S3 ListObjects: NoSuchBucket (HTTP 404): The specified bucket does not exist",
	}, {
		name: "no body",
		what: "mounting volume",
		err:  errors.New("opening store:b: operation error S3: HeadObject, https response error StatusCode: 403, RequestID: A1, HostID: B2"),
		want: "mounting volume: opening store:b: S3 HeadObject: HTTP 403",
	}, {
		name: "refused config",
		what: "volume configuration",
		err:  fmt.Errorf("%w: section %q: backend type %q is not allowed on this cluster", secrets.ErrInvalid, "store", "local"),
		want: `invalid volume configuration: section "store": backend type "local" is not allowed on this cluster`,
	}, {
		name: "a multi-line worker line",
		what: "mounting volume",
		err:  fmt.Errorf("%w: worker exited (exit status 1) before mounting: 2026/12/01 09:54:53 ERROR : store: failed\n  to start", worker.ErrMount),
		want: "mounting volume: mount failed: worker exited (exit status 1) before mounting: store: failed to start",
	}, {
		name: "one kind twice",
		what: "mounting volume again",
		err:  fmt.Errorf("%w: %w", worker.ErrMount, &worker.MountError{Kind: worker.ErrMount, Message: "mount failed: fusermount: exit status 1"}),
		want: "mounting volume again: mount failed: fusermount: exit status 1",
	}, {
		name: "other request ids",
		what: "deleting the volume's directory",
		err:  errors.New("purge d: couldn't list: HTTP 500, x-ms-request-id: 4a1b-22, try later"),
		want: "deleting the volume's directory: purge d: couldn't list: HTTP 500, try later",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := userMessage(tc.what, tc.err); got != tc.want {
				t.Errorf("userMessage =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
	long := userMessage("x", errors.New(strings.Repeat("é", 1000)))
	if len(long) > maxMessage+len("…") || !strings.HasSuffix(long, "…") {
		t.Errorf("a long message is not cut: %d bytes", len(long))
	}
}
