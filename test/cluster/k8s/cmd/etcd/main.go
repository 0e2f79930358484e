// Command etcd is the etcd server from go.etcd.io/etcd/server/v3 at the version k8s.io/kubernetes itself requires,
// so the API server runs against an etcd it supports (Debian bookworm ships 3.4, outside 1.36's range).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
