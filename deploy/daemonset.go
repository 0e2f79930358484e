package deploy

import _ "embed"

// DaemonSet is base/daemonset.yaml as shipped, placeholders and all. The end-to-end tests start the agent with its
// container's args and probe it the way its probes say (test/e2e/listeners), so the probes tested are the ones a
// cluster runs.
//
//go:embed base/daemonset.yaml
var DaemonSet string
