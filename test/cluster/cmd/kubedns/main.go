// Command kubedns is the test cluster's cluster DNS: CoreDNS, built from its module, with the kubernetes plugin and
// the plugins the kube-dns Corefile in manifests/kube-dns.yaml uses (the CoreDNS image's own Corefile, less
// what needs the internet), and hosts, which the DNS conformance specs' own CoreDNS server pod uses (e2e-images.sh
// puts this binary at /coredns in their images). The image holds only this binary.
package main

import (
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
