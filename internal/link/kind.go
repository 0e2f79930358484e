package link

import "fmt"

// chooseKind asks the kernel which link kind to use by creating, then deleting, a short-lived link named
// trialName: first dummy (unless tryDummy is false), then ifb. It returns the kind and, when it is not dummy,
// why, for one warning at start-up. Asking the kernel is the only reliable test: the kind may be built in, a
// module loaded on demand by rtnl_newlink, or absent (EOPNOTSUPP), and nothing in /proc or /sys says which in
// advance.
func chooseKind(ops linkOps, tryDummy bool) (kind, why string, err error) {
	why = "dummy links disabled by option"
	if tryDummy {
		err := tryKind(ops, KindDummy)
		if err == nil {
			return KindDummy, "", nil
		}
		if !isNotSupported(err) {
			return "", "", err
		}
		why = fmt.Sprintf("the kernel has no dummy link kind (CONFIG_DUMMY unset or module missing): %v", err)
	}
	if err := tryKind(ops, KindIfb); err != nil {
		return "", "", fmt.Errorf("no usable link kind (%s; and ifb: %w)", why, err)
	}
	return KindIfb, why, nil
}

// tryKind creates and deletes a trial link of kind. A trial link left over from a crash (EEXIST) is deleted
// and the trial made once more.
func tryKind(ops linkOps, kind string) error {
	for attempt := 0; ; attempt++ {
		err := ops.LinkAdd(newLink(kind, trialName))
		if isExist(err) && attempt == 0 {
			if err := ops.LinkDel(newLink(kind, trialName)); err != nil && !isNotFound(err) {
				return fmt.Errorf("delete stale trial link %q: %w", trialName, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("create %s trial link %q: %w", kind, trialName, err)
		}
		if err := ops.LinkDel(newLink(kind, trialName)); err != nil {
			return fmt.Errorf("delete %s trial link %q: %w", kind, trialName, err)
		}
		return nil
	}
}
