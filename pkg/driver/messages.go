package driver

import (
	"regexp"
	"strings"
)

// The kubelet shows a NodeStageVolume error as a FailedMount event, and
// csi-provisioner a CreateVolume error as a ProvisioningFailed one: the
// message is for the user who owns the pod or the PVC. userMessage makes it
// one line that gives the storage's own reason, without the request ids and
// the doubled context that error chains collect. Credentials are redacted
// before an error gets here (secrets, pkg/worker).

// maxMessage bounds a message; Kubernetes cuts event messages at 1 KiB.
const maxMessage = 800

var (
	// The AWS SDK's "operation error S3: ListObjects, https response error
	// StatusCode: 403, RequestID: ..., HostID: ..., api error Code: text".
	awsError = regexp.MustCompile(`operation error ([\w.-]+): (\w+), https response error StatusCode: (\d+)(?:, RequestID: [^,]*)?(?:, HostID: [^,]*)?, api error ([\w.-]+): `)
	// The same without an API error code (a HEAD request has no body).
	awsBare = regexp.MustCompile(`operation error ([\w.-]+): (\w+), https response error StatusCode: (\d+)(?:, RequestID: [^,]*)?(?:, HostID: [^,]*)?`)
	// Request ids of other forms that stay (S3 XML, Azure, GCS headers).
	requestIDs = regexp.MustCompile(`(?i),? *(?:request ?id|host ?id|x-amz-request-id|x-amz-id-2|x-ms-request-id)[:=] *[A-Za-z0-9+/=_-]+`)
	// An rclone log prefix that a worker's last stderr line carries.
	logPrefix = regexp.MustCompile(`\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (?:[A-Z]+ *: *)?`)
	spaces    = regexp.MustCompile(`\s+`)
)

// userMessage is what: err, shaped for a user.
func userMessage(what string, err error) string {
	msg := err.Error()
	msg = awsError.ReplaceAllString(msg, "$1 $2: $4 (HTTP $3): ")
	msg = awsBare.ReplaceAllString(msg, "$1 $2: HTTP $3")
	msg = requestIDs.ReplaceAllString(msg, "")
	msg = logPrefix.ReplaceAllString(msg, "")
	msg = strings.TrimSpace(spaces.ReplaceAllString(msg, " "))
	msg = dedupe(msg)
	// "volume configuration: invalid volume configuration: ..." says it twice.
	first, _, _ := strings.Cut(msg, ": ")
	if what != "" && !strings.HasSuffix(strings.ToLower(first), strings.ToLower(what)) {
		msg = what + ": " + msg
	}
	if len(msg) > maxMessage {
		msg = strings.ToValidUTF8(msg[:maxMessage], "") + "…"
	}
	return msg
}

// dedupe drops a clause that repeats the one before it, as "mount failed:
// mount failed: ..." from two wraps of one kind.
func dedupe(msg string) string {
	parts := strings.Split(msg, ": ")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		if i > 0 && strings.EqualFold(p, parts[i-1]) {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ": ")
}
