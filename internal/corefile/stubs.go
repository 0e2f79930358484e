package corefile

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// appendStubs appends the stub blocks to the substituted base, which holds baseBlocks server blocks, and checks
// that the result parses as exactly those blocks followed by one block per stub domain. Values cannot inject
// text (they are whitelisted), but the base's last bytes could still capture what follows them (caddyfile reads
// an unterminated quote to end of file); this makes sure no stub block was absorbed or merged.
func appendStubs(out []byte, baseBlocks int, kd KubeDNS, local string, p Params) ([]byte, error) {
	if len(kd.StubDomains) == 0 {
		return out, nil
	}
	port := p.DNSPort
	full := append(bytes.Clone(out), stubBlocks(kd, local, port)...)
	blocks, err := validate(full, p.Directives, strconv.Itoa(int(port)))
	if err != nil {
		return nil, fmt.Errorf("rendered Corefile: %w", err)
	}
	domains := sortedDomains(kd)
	if len(blocks) != baseBlocks+len(domains) {
		return nil, fmt.Errorf("rendered Corefile: %d server blocks, want the base's %d and %d stub domains "+
			"(does the base end inside a quote?)", len(blocks), baseBlocks, len(domains))
	}
	for i, d := range domains {
		want := fmt.Sprintf("%s:%d", d, port)
		if b := blocks[baseBlocks+i]; len(b.Keys) != 1 || b.Keys[0] != want {
			return nil, fmt.Errorf("rendered Corefile: stub block %d has keys %q, want %q", i, b.Keys, want)
		}
	}
	return full, nil
}

// stubBlocks renders one block per stub domain, sorted by domain.
func stubBlocks(kd KubeDNS, local string, port uint16) []byte {
	var b bytes.Buffer
	for _, d := range sortedDomains(kd) {
		fmt.Fprintf(&b, stubBlock, d, port, stubCacheTTL, local, strings.Join(kd.StubDomains[d], " "))
	}
	return b.Bytes()
}

func sortedDomains(kd KubeDNS) []string {
	domains := make([]string, 0, len(kd.StubDomains))
	for d := range kd.StubDomains {
		domains = append(domains, d)
	}
	slices.Sort(domains)
	return domains
}
