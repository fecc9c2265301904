// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 as a library.
//
// `go install go.etcd.io/etcd/v3` fails on the replace directives of etcd's own go.mod,
// so this wrapper module depends on the server module and calls its entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
