package nftwatch

import (
	"fmt"
	"os"
	"strconv"
)

// initPIDNamespaceInode is PROC_PID_INIT_INO (include/linux/proc_ns.h): the fixed inode number of the initial
// pid namespace, as /proc/self/ns/pid shows it ("pid:[4026531836]").
const initPIDNamespaceInode = 0xEFFFFFFC

// pidsAreGlobal reports whether our pids are the kernel's global ones. NFTA_GEN_PROC_PID carries the committing
// thread's id in the initial pid namespace (task_pid_nr), so only there can it be compared with ours: in a
// container the agent is pid 1, and so is the host's init, whose commits would pass for our own.
func pidsAreGlobal() bool {
	link, err := os.Readlink("/proc/self/ns/pid")
	return err == nil && link == fmt.Sprintf("pid:[%d]", initPIDNamespaceInode)
}

// isOwn reports whether a transaction was committed by this process: through one of the ignored connections,
// or, where pids are global (see pidsAreGlobal), by one of our threads. Elsewhere only the netlink port says
// it, which is why every connection that writes is given to Watch with IgnoreConn.
// Writer is a socket of ours that writes to nftables ([nftconn.Conn]): the kernel stamps its port on the
// notifications its transactions cause.
type Writer interface{ PortID() uint32 }

func isOwn(portID, pid uint32, own []Writer, globalPIDs bool) bool {
	for _, c := range own {
		if p := c.PortID(); p != 0 && p == portID {
			return true
		}
	}
	if pid == 0 || !globalPIDs {
		return false
	}
	if int(pid) == os.Getpid() {
		return true
	}
	// The kernel reports the committing thread's id, not the process id.
	_, err := os.Stat("/proc/self/task/" + strconv.Itoa(int(pid)))
	return err == nil
}
