package bench

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

var flagProfile = flag.String("bench.profile", "loopback",
	"the network between the mounts and S3: loopback, or wan20 / wan80 (20 / 80 ms round trip, 1 Gbit/s per connection, through Toxiproxy on loopback)")

// netProfile is a network between every S3 client of a benchmark and the
// server.
type netProfile struct {
	name string
	rtt  time.Duration // round trip, half of it each way
	// rate is the bandwidth of each direction of each connection, bytes/s.
	// Toxiproxy shapes every connection on its own, as an object store
	// bounds each connection: more streams get more.
	rate int64
}

const gbit = 1e9 / 8 // bytes/s

var netProfiles = map[string]netProfile{
	"loopback": {name: "loopback"},
	"wan20":    {name: "wan20", rtt: 20 * time.Millisecond, rate: gbit},
	"wan80":    {name: "wan80", rtt: 80 * time.Millisecond, rate: gbit},
}

func profile(b *testing.B) netProfile {
	p, ok := netProfiles[*flagProfile]
	if !ok {
		b.Fatalf("-bench.profile %q: want loopback, wan20 or wan80", *flagProfile)
	}
	return p
}

// latencyProxy puts p between clients and upstream (host:port): a
// Toxiproxy in this process, listening on loopback, with a latency toxic
// of rtt/2 and a bandwidth toxic in each direction. It returns the address
// clients use and a stop function.
func latencyProxy(upstream string, p netProfile) (string, func(), error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	proxy := toxiproxy.NewProxy(srv, "s3", "127.0.0.1:0", upstream)
	if err := proxy.Start(); err != nil {
		return "", nil, fmt.Errorf("starting toxiproxy: %w", err)
	}
	for _, dir := range []string{"upstream", "downstream"} {
		for _, toxic := range []string{
			// The delay line first: each chunk leaves rtt/2 after it came.
			fmt.Sprintf(`{"name":"latency-%s","type":"latency","stream":%q,"attributes":{"latency":%d}}`,
				dir, dir, (p.rtt / 2).Milliseconds()),
			// Rate in KB/s (10^3 bytes).
			fmt.Sprintf(`{"name":"bandwidth-%s","type":"bandwidth","stream":%q,"attributes":{"rate":%d}}`,
				dir, dir, p.rate/1000),
		} {
			if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
				proxy.Stop()
				return "", nil, fmt.Errorf("toxiproxy toxic %s: %w", toxic, err)
			}
		}
	}
	return proxy.Listen, proxy.Stop, nil
}
