package main

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/nodetaint"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
	"github.com/nodelocaldns/nodelocaldns/internal/podwatch"
	"github.com/nodelocaldns/nodelocaldns/internal/supervisor"
)

// podIdentity is the actor that watches this node's pods and names acct's clients by them (-pod-identity), or
// nil when the flag is off. As with -startup-taint, what it needs from the pod is checked before anything
// starts; the API server's answers are only retried.
func podIdentity(o *options.Options, getenv func(string) string, saDir string, acct *clients.Accounting, log *zap.Logger) (*supervisor.Actor, error) {
	if !o.PodIdentity {
		return nil, nil
	}
	if acct == nil {
		return nil, fmt.Errorf("flag -pod-identity names the per-client accounting's clients, which %s=off turns off", clients.Env)
	}
	node := getenv(nodeNameEnv)
	if node == "" {
		return nil, fmt.Errorf("flag -pod-identity needs the node's name in $%s (the downward API: fieldRef spec.nodeName)", nodeNameEnv)
	}
	base, token, tlsConfig, err := nodetaint.InClusterConfig(getenv, saDir)
	if err != nil {
		return nil, fmt.Errorf("flag -pod-identity: %w", err)
	}
	w := podwatch.New(log.Named("podwatch"), base, token, tlsConfig, node)
	acct.SetNamer(w.Name)
	return &supervisor.Actor{Name: "pod identity", Run: w.Run}, nil
}
