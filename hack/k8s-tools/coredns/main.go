// Command coredns is the cluster DNS of the kind node image (recall_dev.kind_image), built from
// github.com/coredns/coredns as a library with only the plugins kubeadm's Corefile names.
//
// CoreDNS's own main links every plugin it ships (clouds, etcd, ...); a plugin registers itself
// when its package is imported, so this command imports coremain and the Corefile's plugins
// and nothing else. The version kubeadm expects is the one go.mod requires.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() {
	coremain.Run()
}
