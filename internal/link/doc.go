// Package link keeps the interface that carries the node-local DNS listen IPs in the state we want, and tells
// the reconcile runner the moment someone changes it.
//
// node-cache creates a `dummy` interface once, adds its IPs with AddrAdd (ignoring EEXIST), never sets it UP and
// re-checks it every 60 s. We instead:
//
//   - compute a plan from what the kernel reports (pure: [diff]) and apply only that plan: create the link if
//     missing, set it UP, AddrReplace every listen IP as /32 or /128, and delete any other address on that link
//     (the kernel's own IPv6 link-local address excepted), so a second [Manager.Ensure] writes nothing;
//   - use the `dummy` kind in production and fall back to `ifb` where the kernel has no dummy support (some
//     minimal and development kernels), saying why once at start-up: the trial in [New] creates and deletes a
//     short-lived link of each kind, because only the kernel can say whether a kind exists (module autoload);
//   - watch link and address notifications ([Watch]) so a deleted interface, a removed address or a link set
//     down is repaired in milliseconds instead of at the next periodic pass.
//
// Words: "the interface" is what operators name (-interfacename, log messages, metrics' interface_add); "link" is
// the kernel's and rtnetlink's word for the same object, used in this package's code. The addresses it must
// carry are not only ours: the supervisor passes the union of every live instance's addresses (several
// instances share one interface during a rollout), so Ensure removes only what no instance needs.
//
// Every request has a deadline (requestTimeout), so a wedged netlink socket fails a pass instead of hanging it.
//
// Everything that touches the kernel goes through the small [linkOps] interface, which *netlink.Handle
// satisfies and which the unit tests replace with a map-backed fake returning the kernel's errors.
//
// May touch: our interface, over rtnetlink.
package link
