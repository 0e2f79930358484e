# shellcheck shell=bash
# The test node's machine-specific settings, in one place, each with its reason. They are what this kind of machine
# (a small VM: cgroup v1, no systemd, CAP_SYS_RESOURCE missing from the bounding set, no loadable modules) needs
# that a production node would not, plus the few test-speed choices. node.sh sources this file and writes the
# values into the component configs; nothing else sets them.

# kubelet >= 1.35 refuses to start on cgroup v1 ("kubelet is configured to not run on a host using cgroup v1")
# unless failCgroupV1 is false. This machine mounts only v1 controllers (the cgroup2 hierarchy is empty).
KUBELET_FAIL_CGROUP_V1=$( [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]] && echo true || echo false)

# PID 1 is not systemd, so the kubelet and runc manage cgroups through cgroupfs.
CGROUP_DRIVER=cgroupfs

# The node's network namespace comes with a fresh sysfs (as `ip netns exec` mounts one), which hides
# /sys/fs/cgroup: the kubelet fails with "failed to find cgroup mounts". node.sh mounts the same hierarchies again
# inside the node's private mount namespace. These are v1 controller names; a cgroup2 machine mounts cgroup2.
CGROUP_V1_CONTROLLERS="cpu cpuacct cpuset memory devices freezer blkio pids"

# CAP_SYS_RESOURCE is not in this VM's bounding set, so runc cannot write a negative oom_score_adj and every pod
# sandbox fails ("can't get final child's PID from pipe: EOF"). restrict_oom_score_adj makes containerd clamp it.
CONTAINERD_RESTRICT_OOM_SCORE_ADJ=true

# The API server reaches the kubelet (logs, exec) by the node's hostname first, which would go to the host's
# resolver, unreachable from the node's namespace. Prefer the InternalIP.
APISERVER_KUBELET_ADDRESS_TYPES=InternalIP,Hostname

# Global (not per-namespace) sysctls the kubelet rewrites at start. node.sh bind-mounts a file over each inside
# the node's mount namespace, so the kubelet writes the file and the machine keeps its values.
KUBELET_GLOBAL_SYSCTLS="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes"

# nf_conntrack_max is global: kube-proxy leaves it alone with maxPerCore 0 (and the timeouts with 0s).
KUBE_PROXY_CONNTRACK_MAX_PER_CORE=0

# The nodelocaldns DaemonSet's interface kind: this development kernel has no `dummy` (CONFIG_DUMMY unset), so
# the agent falls back to ifb by itself. Nothing to set; recorded because the interface check looks for either.

# Test speed, not machine: the kubelet re-reads ConfigMap volumes every syncFrequency (default 1m); 10s keeps the
# ConfigMap cases short. The suite reports the kubelet's propagation delay apart from ours.
KUBELET_SYNC_FREQUENCY=10s

# Addresses inside the nodes' namespaces (nothing is routed out of them). node-1 runs the control plane, the
# client pods and the agent under test; node-2 runs kube-dns, so queries that fall through to kube-dns cross
# nodes as in any real cluster. The two eth0s are the ends of one veth pair; each node routes the other's pod CIDR
# to the other's node IP.
NODE_NAME=node-1
NODE_IP=10.250.0.10
STUB_UPSTREAM_IP=10.250.0.53   # small DNS servers on node-1 (dnsq serve): its resolv.conf upstream,
STUB_DOMAIN_IP=10.250.0.54     # and the server a stub domain in the kube-dns ConfigMap names
POD_CIDR=10.244.0.0/24
NODE2_NAME=node-2
NODE2_IP=10.250.0.11
# node-2's resolv.conf upstream, which kube-dns (dnsPolicy Default) forwards to. It answers another address than
# node-1's, so an answer says whether kube-dns on node-2 or the agent on node-1 resolved it.
STUB2_UPSTREAM_IP=10.250.0.55
POD2_CIDR=10.244.1.0/24
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SVC_IP=10.96.0.1
KUBE_DNS_IP=10.96.0.10
LOCAL_DNS_IP=169.254.20.10
CLUSTER_DOMAIN=cluster.local
