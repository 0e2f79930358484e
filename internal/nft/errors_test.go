package nft

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

func TestErrorPredicates(t *testing.T) {
	for _, tc := range []struct {
		err                 error
		notExist, exist, ns bool
	}{
		{fmt.Errorf("delete: %w", unix.ENOENT), true, false, false},
		{errors.New("receiveAckAware: netlink receive: no such file or directory"), true, false, false}, // google/nftables' %v
		{fmt.Errorf("add: %w", unix.EEXIST), false, true, false},
		{fmt.Errorf("add: %w", unix.EOPNOTSUPP), false, false, true},
		{fmt.Errorf("dial: %w", unix.EPROTONOSUPPORT), false, false, true},
		{nil, false, false, false},
		{unix.EPERM, false, false, false},
	} {
		if IsNotExist(tc.err) != tc.notExist || IsExist(tc.err) != tc.exist || IsNotSupported(tc.err) != tc.ns {
			t.Errorf("%v: IsNotExist=%v IsExist=%v IsNotSupported=%v", tc.err, IsNotExist(tc.err), IsExist(tc.err), IsNotSupported(tc.err))
		}
	}
}
