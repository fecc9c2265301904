// Command etcd is the etcd of the kind node image (recall_dev.kind_image): the version kubeadm
// names for this Kubernetes release (`kubeadm config images list`), not the one the local
// control plane runs (../etcd). Built as ../etcd is: the server module as a library, its
// entry point called.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
