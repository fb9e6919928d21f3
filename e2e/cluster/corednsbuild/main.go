// Command coredns is CoreDNS with only the plugins the e2e cluster's Corefile uses
// (e2e/cluster/manifests/coredns.yaml) and file, for the zone of
// trainer/tests/test-dnsprobe.sh, so the build skips the cloud providers' SDKs.
// The plugin order is CoreDNS's own (dnsserver.Directives); the blank imports register
// the plugins present in this binary.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/file"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/whoami"
)

func main() {
	coremain.Run()
}
