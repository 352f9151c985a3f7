// Package s3server starts a real S3 server on loopback for tests and the
// demo: rclone's own "serve s3", backed by a local directory in which each
// top-level directory is a bucket, so that a test can check what reached the
// bucket by reading files.
package s3server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rclone/rclone/fs/rc"

	_ "github.com/rclone/rclone/backend/local" // the directory behind the server
	_ "github.com/rclone/rclone/cmd/serve/s3"  // registers serve type "s3"
)

// Server is a running S3 server.
type Server struct {
	// Endpoint is the server's URL, "http://127.0.0.1:PORT".
	Endpoint string
	// Dir holds one directory per bucket.
	Dir string
	// AccessKeyID and SecretAccessKey are the only credentials it accepts.
	AccessKeyID, SecretAccessKey string
	id                           string
	stopped                      bool
	extraKeys                    []string
}

// Start serves dir on a free loopback port, accepting the key pair
// accessKeyID, secretAccessKey and, if given, more pairs of extraKeys
// (id, secret, id, secret ...).
func Start(ctx context.Context, dir, accessKeyID, secretAccessKey string, extraKeys ...string) (*Server, error) {
	return start(ctx, "127.0.0.1:0", dir, accessKeyID, secretAccessKey, extraKeys)
}

// Restart stops the server and starts it again on the same address, as a
// storage outage would.
func (s *Server) Restart(ctx context.Context) error {
	if !s.stopped {
		if err := s.Stop(ctx); err != nil {
			return err
		}
	}
	n, err := start(ctx, strings.TrimPrefix(s.Endpoint, "http://"), s.Dir, s.AccessKeyID, s.SecretAccessKey, s.extraKeys)
	if err != nil {
		return err
	}
	*s = *n
	return nil
}

func start(ctx context.Context, addr, dir, accessKeyID, secretAccessKey string, extraKeys []string) (*Server, error) {
	if len(extraKeys)%2 != 0 {
		return nil, fmt.Errorf("extra keys come in pairs")
	}
	keys := []string{accessKeyID + "," + secretAccessKey}
	for i := 0; i < len(extraKeys); i += 2 {
		keys = append(keys, extraKeys[i]+","+extraKeys[i+1])
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	start := rc.Calls.Get("serve/start")
	if start == nil {
		return nil, fmt.Errorf("rclone serve/start is not compiled in")
	}
	out, err := start.Fn(ctx, rc.Params{
		"type":     "s3",
		"fs":       dir,
		"addr":     []string{addr},
		"auth_key": keys,
	})
	if err != nil {
		return nil, fmt.Errorf("starting S3 server: %w", err)
	}
	return &Server{
		Endpoint:        "http://" + out["addr"].(string),
		Dir:             dir,
		AccessKeyID:     accessKeyID,
		SecretAccessKey: secretAccessKey,
		id:              out["id"].(string),
		extraKeys:       extraKeys,
	}, nil
}

// Stop shuts the server down.
func (s *Server) Stop(ctx context.Context) error {
	if s.stopped {
		return nil
	}
	_, err := rc.Calls.Get("serve/stop").Fn(ctx, rc.Params{"id": s.id})
	s.stopped = err == nil
	return err
}

// MakeBucket creates a bucket.
func (s *Server) MakeBucket(name string) error {
	return os.MkdirAll(filepath.Join(s.Dir, name), 0o755)
}

// Object is the path of an object's content on disk.
func (s *Server) Object(bucket, key string) string {
	return filepath.Join(s.Dir, bucket, filepath.FromSlash(key))
}

// RcloneConfig is an rclone config section named name for this server.
func (s *Server) RcloneConfig(name string) string {
	return RcloneConfig(name, s.Endpoint, s.AccessKeyID, s.SecretAccessKey)
}

// RcloneConfig is an rclone config section for an S3 endpoint.
func RcloneConfig(name, endpoint, accessKeyID, secretAccessKey string) string {
	return fmt.Sprintf("[%s]\ntype = s3\nprovider = Other\naccess_key_id = %s\nsecret_access_key = %s\nendpoint = %s\nforce_path_style = true\n",
		name, accessKeyID, secretAccessKey, endpoint)
}
