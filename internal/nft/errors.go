package nft

import (
	"errors"
	"strings"
	"syscall"
)

// IsNotExist reports whether err is the kernel's ENOENT (no such table, chain or set).
func IsNotExist(err error) bool { return isErrno(err, syscall.ENOENT, "no such file or directory") }

// IsExist reports whether err is the kernel's EEXIST.
func IsExist(err error) bool { return isErrno(err, syscall.EEXIST, "file exists") }

// IsNotSupported reports whether err says the kernel lacks nf_tables or a feature we use (EOPNOTSUPP,
// or EPROTONOSUPPORT when the nfnetlink subsystem is missing altogether).
func IsNotSupported(err error) bool {
	return isErrno(err, syscall.EOPNOTSUPP, "operation not supported") ||
		isErrno(err, syscall.EPROTONOSUPPORT, "protocol not supported")
}

// IsOwnerFlagRefused reports whether err is how a kernel refuses a NEWTABLE with NFT_TABLE_F_OWNER: EOPNOTSUPP,
// or EINVAL before Linux 5.12, whose nf_tables_newtable rejected any flag but DORMANT with -EINVAL
// (the flag came with "netfilter: nftables: introduce table ownership", Linux 5.12).
func IsOwnerFlagRefused(err error) bool {
	return IsNotSupported(err) || isErrno(err, syscall.EINVAL, "invalid argument")
}

// isErrno matches errno through wrapping and, as a fallback, by its text: google/nftables v0.3.0 formats some
// netlink errors with %v (GetRules, receiveAckAware), which drops the errno from the chain.
func isErrno(err error, errno syscall.Errno, text string) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, errno) || strings.Contains(err.Error(), text)
}

// ErrNoOwnerFlag explains a refused owner flag.
const ErrNoOwnerFlag = "nodelocaldns needs NFT_TABLE_F_OWNER (Linux 5.12 or later; kube-proxy's nftables mode needs 5.13); " +
	"kernels before 5.12 refuse the flag with \"invalid argument\""
