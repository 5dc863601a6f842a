// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 for
// the e2e harness (go install of etcd itself fails because of its replace
// directives).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
