#!/bin/sh
# /init of the kernel-matrix VM (built by kernel/run.sh): mount the pseudo file systems, load the modules in
# dependency order, run each test binary in its package directory and the real binary's lifecycle smoke test
# (lifecycle.sh), print one result marker, power off.
# The host judges the run by that marker only: QEMU exits 0 even when the guest panics.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /run /tmp /var && mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /tmp && ln -s /run /var/run

while read -r ko args; do
	insmod "$ko" $args || echo "kernel-vm: insmod $ko failed"
done </modules.order
ip link set lo up

# NODELOCALDNS_VM gates the VM-only tests; NODELOCALDNS_TEST_NETNS tells testenv that this whole VM is the
# throwaway network namespace, so the tests run here directly instead of re-executing into a new one.
# NODELOCALDNS_VM_HELD_BACK names the modules this boot leaves out (kernel/run.sh, KERNEL_HOLD_BACK).
export NODELOCALDNS_VM=1 NODELOCALDNS_TEST_NETNS=1 HOME=/tmp TMPDIR=/tmp GOTRACEBACK=all
NODELOCALDNS_VM_HELD_BACK=$(cat /tests/held-back)
export NODELOCALDNS_VM_HELD_BACK
echo "kernel-vm: $(uname -r), $(nproc) cpus, modules: $(cut -d' ' -f1 /proc/modules | tr '\n' ' ')${NODELOCALDNS_VM_HELD_BACK:+; held back: $NODELOCALDNS_VM_HELD_BACK}"

rc=0
while read -r pkg bin; do
	echo "kernel-vm: === $pkg (uptime $(cut -d' ' -f1 /proc/uptime) s)"
	(cd "/src/$pkg" && "/tests/$bin" -test.v -test.timeout=10m $(cat /tests/args)) || rc=1
done </tests/list
if [ -x /tests/lifecycle.sh ]; then
	echo "kernel-vm: === lifecycle (the real binary; uptime $(cut -d' ' -f1 /proc/uptime) s)"
	/tests/lifecycle.sh || rc=1
fi
if [ -x /tests/matrix.sh ]; then
	echo "kernel-vm: === lifecycle matrix (the real binary; uptime $(cut -d' ' -f1 /proc/uptime) s)"
	/tests/matrix.sh || rc=1
fi
echo "kernel-vm: === done (uptime $(cut -d' ' -f1 /proc/uptime) s)"
echo "NODELOCALDNS-KERNEL-RESULT rc=$rc"
sync
poweroff -f
