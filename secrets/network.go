package secrets

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// DefaultDeniedNetworks are refused as the address of any remote whatever
// the operator lists: link-local (the cloud metadata services at
// 169.254.169.254 and fd00:ec2::254, and what the node's own link offers)
// and Alibaba's metadata address. A remote that reached them would serve the
// node's cloud identity as files. Operators add loopback and the cluster's
// pod and service ranges (the chart does).
var DefaultDeniedNetworks = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("100.100.100.200/32"),
}

// deniedHosts are metadata services reached by name.
var deniedHosts = []string{"metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"}

// addressOptions hold a server's address, with or without a scheme; any
// other value is checked too when it holds a URL.
var addressOptions = []string{
	"endpoint", "url", "host", "server", "hostname", "namenode", "api_url", "auth", "auth_url", "token_url",
	"http_proxy", "socks_proxy", "proxy", "sts_endpoint", "upload_prefix",
}

// ParseNetworks reads a comma-separated list of CIDRs (or single addresses).
func ParseNetworks(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%q is not a CIDR or an address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// checkAddress refuses a value that names a denied network or host. Names
// that resolve into a denied network are not seen here: the node plugin's
// NetworkPolicy is the layer that catches those (see SECURITY.md).
func (p *Policy) checkAddress(section, key, value string) error {
	host, ok := addressHost(key, value)
	if !ok {
		return nil
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, h := range deniedHosts {
		if host == h {
			return invalidf("section %q option %q: %s is a metadata service, which remotes may not reach", section, key, host)
		}
	}
	addr, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		return nil // a name
	}
	addr = addr.Unmap().WithZone("")
	for _, n := range append(DefaultDeniedNetworks, p.DenyNetworks...) {
		if n.Contains(addr) {
			return invalidf("section %q option %q: address %s is in %s, which remotes may not reach on this cluster", section, key, addr, n)
		}
	}
	return nil
}

// addressHost takes the host out of a URL, or out of host[:port] for an
// address option.
func addressHost(key, value string) (string, bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return "", false
	}
	if strings.Contains(value, "://") {
		u, err := url.Parse(value)
		if err != nil {
			return "", false
		}
		return u.Hostname(), u.Hostname() != ""
	}
	isAddress := false
	for _, o := range addressOptions {
		if key == o {
			isAddress = true
		}
	}
	if !isAddress {
		return "", false
	}
	hostport, _, _ := strings.Cut(value, "/")
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h, true
	}
	return hostport, true
}
