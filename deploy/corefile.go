package deploy

import _ "embed"

// StandardCorefile is the Corefile template of the node-local-dns ConfigMap that base/configmap.yaml ships (and
// the standard nodelocaldns.yaml carries), placeholders and all; TestBaseCorefileIsStandard proves the two equal.
// The test harness and scripts/demo.sh start from it (scripts read testdata/standard.Corefile), so what the tests
// and the demo run is what a cluster runs.
//
//go:embed testdata/standard.Corefile
var StandardCorefile string
