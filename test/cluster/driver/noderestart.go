package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A node's first start, emulated on a running node (firststart.go has the cases). What a boot leaves is: no
// interface and no table of ours (the kernel starts empty), containerd and the kubelet starting, and the agent's
// image still to be pulled. So: the kubelet stops, the agent's container is killed and what it left in the
// kernel removed (`nodelocaldns -teardown`, as on a fresh kernel), our image removed from the node's containerd,
// containerd stops; then containerd and the kubelet start again, and the kubelet pulls the image from a
// registry on the node (`dnsq registry`) that holds the tag's resolution for pullDelay: a pull that takes time,
// through the kubelet and containerd's own pull path, instead of an import. The other pods' containers keep
// running through it (their shims outlive containerd), so a client pod's queries can be followed throughout.

// The registry on the node and the image name containerd resolves through it.
const (
	registryAddr   = "127.0.0.1:5000"
	registryHost   = "ghcr.io" // ourImageRepo's registry: containerd's mirror for it is the node's registry
	ourImageTarget = "nodelocaldns.tar"
)

// component is a process node.sh started on a node (the kubelet, containerd), read from /proc so that it can be
// stopped and started again as it was, or with another configuration file.
type component struct {
	n    *node
	name string
	args []string
	env  []string
}

func (n *node) pidFile(name string) string { return filepath.Join(n.state, "logs", name+".pid") }

func captureComponent(n *node, name string) (*component, error) {
	b, err := os.ReadFile(n.pidFile(name))
	if err != nil {
		return nil, err
	}
	pid := strings.TrimSpace(string(b))
	cmdline, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		return nil, fmt.Errorf("%s %s (pid %s): %w", n.name, name, pid, err)
	}
	environ, err := os.ReadFile("/proc/" + pid + "/environ")
	if err != nil {
		return nil, err
	}
	split := func(b []byte) []string { return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00") }
	return &component{n: n, name: name, args: split(cmdline), env: split(environ)}, nil
}

// stop sends SIGTERM and waits for the process to go, SIGKILL after 15 s.
func (p *component) stop() error {
	b, err := os.ReadFile(p.n.pidFile(p.name))
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return err
	}
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(15 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(5 * time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// start starts the component again in its node's namespaces with the same environment and args (the flag
// named configFlag, when given, set to config instead), its output appended to its log, its PID where node.sh
// keeps it, so that `node.sh down` stops it.
func (p *component) start(configFlag, config string) error {
	args := append([]string{}, p.args...)
	if configFlag != "" {
		found := false
		for i, a := range args {
			if strings.HasPrefix(a, configFlag+"=") {
				args[i], found = configFlag+"="+config, true
			} else if a == configFlag && i+1 < len(args) {
				args[i+1], found = config, true
			}
		}
		if !found {
			return fmt.Errorf("%s: no %s in %q", p.name, configFlag, args)
		}
	}
	log, err := os.OpenFile(filepath.Join(p.n.state, "logs", p.name+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command("nsenter", append([]string{"-t", p.n.anchor, "-m", "-n", "--"}, args...)...)
	cmd.Env, cmd.Stdout, cmd.Stderr = p.env, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait()
	return os.WriteFile(p.n.pidFile(p.name), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
}

// firstBoot says how the node comes back.
type firstBoot struct {
	pullDelay time.Duration
	// registerTaint, when set, makes the node register anew (its Node object deleted) with this taint, as a new
	// node whose kubelet has registerWithTaints.
	registerTaint string
}

// bootTimes are the instants of one emulated boot.
type bootTimes struct {
	down    time.Time // the kubelet stopped, the agent killed
	t0      time.Time // containerd starting: the boot, as the node's pods see it
	kubelet time.Time // the kubelet starting
}

// bootNode emulates the node's first start (the top of this file). The registry it starts runs until stop is
// called; its log is the node's logs/registry.log.
func bootNode(ctx context.Context, c *cluster, n *node, b firstBoot) (times bootTimes, stopRegistry func(), err error) {
	stopRegistry = func() {}
	kubelet, err := captureComponent(n, "kubelet")
	if err != nil {
		return times, stopRegistry, err
	}
	containerd, err := captureComponent(n, "containerd")
	if err != nil {
		return times, stopRegistry, err
	}
	a, err := currentAgent(ctx, c, n)
	if err != nil {
		return times, stopRegistry, err
	}
	if err := kubelet.stop(); err != nil {
		return times, stopRegistry, err
	}
	if _, err := n.ctr(ctx, "tasks", "kill", "-s", "SIGKILL", a.containerID); err != nil {
		return times, stopRegistry, err
	}
	times.down = time.Now()
	if err := poll(ctx, 10*time.Second, 100*time.Millisecond, func() (bool, error) { return !alive(a.pid), nil }); err != nil {
		return times, stopRegistry, fmt.Errorf("the agent (pid %d) did not die: %w", a.pid, err)
	}
	// A fresh kernel: no interface, no fallback, nothing of ours.
	if out, err := n.sh(ctx, c.cfg.agent, "-teardown", "-localip", localDNSIP+","+kubeDNSIP); err != nil {
		return times, stopRegistry, fmt.Errorf("-teardown: %v\n%s", err, out)
	}
	t, err := ourTables(ctx, n)
	if err == nil && len(t) > 0 {
		err = fmt.Errorf("tables left after -teardown: %v", t)
	}
	if l, lerr := ourLinks(ctx, n); err == nil && (lerr != nil || len(l) > 0) {
		err = errors.Join(lerr, fmt.Errorf("interfaces left after -teardown: %v", l))
	}
	if err != nil {
		return times, stopRegistry, err
	}
	if err := removeOurImages(ctx, n); err != nil {
		return times, stopRegistry, err
	}
	if err := containerd.stop(); err != nil {
		return times, stopRegistry, err
	}
	kubeletConfig := filepath.Join(n.state, "kubelet.yaml")
	if b.registerTaint != "" {
		if _, err := c.kubectl(ctx, "delete", "node", n.name, "--wait=true", "--timeout=60s"); err != nil {
			return times, stopRegistry, err
		}
		if kubeletConfig, err = withLines(n, "kubelet.yaml", "kubelet-registering.yaml",
			fmt.Sprintf("registerWithTaints:\n- {key: %q, effect: NoSchedule}\n", b.registerTaint)); err != nil {
			return times, stopRegistry, err
		}
	}
	// The pull: containerd's mirror for our image's registry is the node's registry, over plain HTTP.
	containerdConfig, err := withLines(n, "containerd.toml", "containerd-pull.toml", fmt.Sprintf(
		"[plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.%q]\n  endpoint = [\"http://%s\"]\n", registryHost, registryAddr))
	if err != nil {
		return times, stopRegistry, err
	}
	stopRegistry, err = startRegistry(n, filepath.Join(c.cfg.images, ourImageTarget), b.pullDelay)
	if err != nil {
		return times, func() {}, err
	}

	times.t0 = time.Now()
	if err := containerd.start("--config", containerdConfig); err != nil {
		return times, stopRegistry, err
	}
	if err := poll(ctx, 30*time.Second, 100*time.Millisecond, func() (bool, error) {
		_, err := n.ctr(ctx, "version")
		return err == nil, err
	}); err != nil {
		return times, stopRegistry, fmt.Errorf("containerd on %s did not come back: %w", n.name, err)
	}
	times.kubelet = time.Now()
	return times, stopRegistry, kubelet.keepStarted("--config", kubeletConfig)
}

// keepStarted starts the component and starts it again while it exits within its first seconds, as a service
// manager does: the kubelet exits at once when containerd answers but its CRI service is still initializing
// ("server is not initialized yet"), which `ctr version` cannot tell.
func (p *component) keepStarted(configFlag, config string) error {
	for attempt := 1; ; attempt++ {
		if err := p.start(configFlag, config); err != nil {
			return err
		}
		b, err := os.ReadFile(p.n.pidFile(p.name))
		if err != nil {
			return err
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		deadline := time.Now().Add(5 * time.Second)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if alive(pid) {
			return nil
		}
		if attempt == 10 {
			return fmt.Errorf("%s on %s exits at start (10 tries): see its log", p.name, p.n.name)
		}
		time.Sleep(time.Second)
	}
}

// withLines writes the node's configuration file from (as node.sh wrote it) with lines appended, as to, and
// returns to's path.
func withLines(n *node, from, to, lines string) (string, error) {
	b, err := os.ReadFile(filepath.Join(n.state, from))
	if err != nil {
		return "", err
	}
	p := filepath.Join(n.state, to)
	return p, os.WriteFile(p, append(append(b, '\n'), lines...), 0o644)
}

// removeOurImages removes every reference to our image from the node's containerd, its content with it, so
// that the kubelet has to pull it.
func removeOurImages(ctx context.Context, n *node) error {
	out, err := n.ctr(ctx, "images", "ls", "-q")
	if err != nil {
		return err
	}
	var refs []string
	for _, r := range strings.Fields(out) {
		if strings.HasPrefix(r, ourImageRepo) {
			refs = append(refs, r)
		}
	}
	if len(refs) == 0 {
		return fmt.Errorf("%s: no image of %s to remove: %q", n.name, ourImageRepo, out)
	}
	_, err = n.ctr(ctx, append([]string{"images", "rm", "--sync"}, refs...)...)
	return err
}

// startRegistry runs `dnsq registry` in the node's namespaces, serving the image archive, with the tag's
// resolution held for delay. It dies with the driver (Pdeathsig) or when stop is called.
func startRegistry(n *node, archive string, delay time.Duration) (stop func(), err error) {
	log, err := os.OpenFile(filepath.Join(n.state, "logs", "registry.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("nsenter", "-t", n.anchor, "-m", "-n", "--", n.cfg.dnsq, "registry", "-addr", registryAddr,
		"-image", archive, "-delay", delay.String())
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(done) }()
	stop = func() {
		cmd.Process.Kill()
		<-done
	}
	// Up once it answers /v2/ (curl runs in the node's namespaces).
	if err := poll(context.Background(), 10*time.Second, 100*time.Millisecond, func() (bool, error) {
		_, err := n.sh(context.Background(), "curl", "-sf", "http://"+registryAddr+"/v2/")
		return err == nil, err
	}); err != nil {
		stop()
		return nil, fmt.Errorf("registry on %s: %w", n.name, err)
	}
	return stop, nil
}

// registryHeld is when the node's registry began holding the tag's resolution (the pull's start), from its log.
func registryHeld(n *node) (time.Time, error) {
	b, err := os.ReadFile(filepath.Join(n.state, "logs", "registry.log"))
	if err != nil {
		return time.Time{}, err
	}
	var last time.Time
	for _, l := range bytes.Split(b, []byte("\n")) {
		s := string(l)
		if !strings.Contains(s, "holding tag") {
			continue
		}
		// "registry: 2006/01/02 15:04:05.000000 holding tag ..."
		f := strings.Fields(strings.TrimPrefix(s, "registry: "))
		if len(f) >= 2 {
			if t, err := time.ParseInLocation("2006/01/02 15:04:05.000000", f[0]+" "+f[1], time.Local); err == nil {
				last = t
			}
		}
	}
	if last.IsZero() {
		return last, errors.New("the registry never held a tag: nothing pulled from it")
	}
	return last, nil
}
