package envelope

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
)

var hostnameRE = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$`)

// NormalizeHost returns the host of s, the value of a server option: a URL
// ("https://s3.example.com:9000/path"), a host:port or a bare host or IP.
// The host is lowercased, without port, brackets or trailing dot, so that
// the sealing side and the driver compare the same string.
func NormalizeHost(s string) (string, error) {
	s = strings.TrimSpace(s)
	host := s
	if ip := net.ParseIP(s); ip == nil { // a bare IPv6 address has colons but no port
		raw := s
		if !strings.Contains(s, "://") {
			raw = "//" + s
		}
		u, err := url.Parse(raw)
		if err != nil {
			return "", fmt.Errorf("%q is neither a URL nor a host[:port]", s)
		}
		host = u.Hostname()
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip := net.ParseIP(host); ip != nil {
		return ip.String(), nil
	}
	if len(host) > 253 || !hostnameRE.MatchString(host) {
		return "", fmt.Errorf("%q names no host", s)
	}
	return host, nil
}
