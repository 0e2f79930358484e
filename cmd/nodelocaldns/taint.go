package main

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/nodetaint"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
	"github.com/nodelocaldns/nodelocaldns/internal/supervisor"
)

// nodeNameEnv names the node for -startup-taint: the downward API's spec.nodeName (fieldRef), as the chart sets it.
const nodeNameEnv = "NODE_NAME"

// startupTaint is the actor that removes the node's start-up taint once the agent serves (-startup-taint), or
// nil when the flag is off. What it needs from the pod is checked here, before anything starts: a missing
// variable or service account is a configuration error, while the API server's answers are only retried.
func startupTaint(o *options.Options, getenv func(string) string, saDir string, log *zap.Logger) (*supervisor.Actor, error) {
	if o.StartupTaint == "" {
		return nil, nil
	}
	node := getenv(nodeNameEnv)
	if node == "" {
		return nil, fmt.Errorf("flag -startup-taint %q needs the node's name in $%s (the downward API: fieldRef spec.nodeName)", o.StartupTaint, nodeNameEnv)
	}
	c, err := nodetaint.InCluster(getenv, saDir)
	if err != nil {
		return nil, fmt.Errorf("flag -startup-taint %q: %w", o.StartupTaint, err)
	}
	r := &nodetaint.Remover{API: c, Node: node, Key: o.StartupTaint, Log: log.Named("taint")}
	return &supervisor.Actor{Name: "start-up taint", Run: r.Run}, nil
}
