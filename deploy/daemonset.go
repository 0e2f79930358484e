package deploy

import _ "embed"

// DaemonSet is the kustomize base's daemonset.yaml as shipped, placeholders and all (chart/base: deploy/base is a
// link to it, which embed does not follow). The end-to-end tests start the agent with its container's args and probe it the way its probes say (test/e2e/listeners), so the probes tested are the ones a
// cluster runs.
//
//go:embed chart/base/daemonset.yaml
var DaemonSet string
