package nft

import (
	"slices"
	"testing"
)

// Every chain Build, Listening or Registration makes is one Apply asks for by name: a chain missing from instanceChains
// would survive the clear and make the next batch fail with EEXIST.
func TestInstanceChainsCoverBuild(t *testing.T) {
	for _, tc := range goldenCases {
		for _, rs := range []*Ruleset{Build(tc.spec), Listening(tc.spec), Registration(tc.spec)} {
			for _, ch := range rs.Chains {
				if !slices.Contains(InstanceChains(), ch.Name) {
					t.Errorf("%s: chain %s is not in InstanceChains", tc.name, ch.Name)
				}
			}
		}
	}
}
