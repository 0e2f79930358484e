// Command dnsq is the test cluster's client and helper binary, one static program for several images and roles:
//
//	dnsq pause                          pod sandbox: block until SIGTERM, reap children (the pause image)
//	dnsq sleep                          same, as the client pod's main process
//	dnsq q [-tcp] [-type T] [-server S] [-sport P] NAME
//	                                    one query (dig-like), prints the rcode and each answer record
//	dnsq lookup NAME                    resolve through /etc/resolv.conf as an application would (search, ndots)
//	dnsq cat FILE                       print a file (the images have no shell)
//	dnsq load -server S[,S2] -name N -rate R -duration D [-proto udp,tcp]
//	                                    steady load, a fresh socket per query; prints a JSON summary per server
//	                                    and protocol
//	dnsq load -resolver -name N -rate R -duration D
//	                                    the same, each query a lookup through /etc/resolv.conf (search, ndots)
//	dnsq serve -addr A -a IP            answer every A question with IP, over UDP and TCP (a stub upstream)
//	dnsq registry -addr A -image TAR [-delay D]
//	                                    serve an image archive over the registry API, the first tag resolution
//	                                    held D (a pull that takes time)
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dnsq pause|sleep|q|lookup|cat|load|serve|registry ...")
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var code int
	switch cmd {
	case "pause", "sleep":
		pause()
	case "q":
		code = query(args)
	case "lookup":
		code = lookup(args)
	case "cat":
		code = cat(args)
	case "load":
		code = load(args)
	case "serve":
		code = serve(args)
	case "registry":
		code = registry(args)
	default:
		fmt.Fprintf(os.Stderr, "dnsq: unknown command %q\n", cmd)
		code = 2
	}
	os.Exit(code)
}

// pause blocks until SIGTERM or SIGINT and, as PID 1 of a pod sandbox, reaps whatever is re-parented to it.
func pause() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for {
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(-1, &ws, 0, nil); err != nil {
				time.Sleep(time.Second)
			}
		}
	}()
	<-sig
}

func cat(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: dnsq cat FILE")
		return 2
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Stdout.Write(b)
	return 0
}
