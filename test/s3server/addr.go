package s3server

import "context"

// StartAddr is Start on a given address, e.g. an address of a test
// cluster's network that its pods reach ("10.233.0.1:0").
func StartAddr(ctx context.Context, addr, dir, accessKeyID, secretAccessKey string, extraKeys ...string) (*Server, error) {
	return start(ctx, addr, dir, accessKeyID, secretAccessKey, extraKeys)
}
