package benchkit

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the times in /proc/<pid>/stat and /proc/stat
// (USER_HZ, 100 on every Linux build the kernel ABI allows).
const userHZ = 100

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / userHZ }

// ProcCPU is the CPU a process has used so far, user and system (the
// kernel's work on its behalf: its syscalls, its page faults), from
// /proc/<pid>/stat. A process that is gone has used 0.
type ProcCPU struct{ User, System time.Duration }

// Total is user + system.
func (c ProcCPU) Total() time.Duration { return c.User + c.System }

// Sub is c - o.
func (c ProcCPU) Sub(o ProcCPU) ProcCPU { return ProcCPU{c.User - o.User, c.System - o.System} }

// CPUOf sums the CPU of pids so far.
func CPUOf(pids ...int) ProcCPU {
	var sum ProcCPU
	for _, pid := range pids {
		c, err := procCPU(pid)
		if err == nil {
			sum.User += c.User
			sum.System += c.System
		}
	}
	return sum
}

func procCPU(pid int) (ProcCPU, error) {
	name := "/proc/self/stat"
	if pid > 0 {
		name = fmt.Sprintf("/proc/%d/stat", pid)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return ProcCPU{}, err
	}
	// Fields after the command, which may hold spaces: state is field 3,
	// utime 14 and stime 15 (proc(5)).
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return ProcCPU{}, fmt.Errorf("%s: no command", name)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return ProcCPU{}, fmt.Errorf("%s: %d fields", name, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return ProcCPU{}, fmt.Errorf("%s: bad utime/stime", name)
	}
	return ProcCPU{ticks(ut), ticks(st)}, nil
}

// SelfCPU is this process's CPU so far.
func SelfCPU() ProcCPU { c, _ := procCPU(0); return c }

// MachineCPU is the time all CPUs of the machine have spent in each state
// so far, from the "cpu" line of /proc/stat.
type MachineCPU struct {
	User    time.Duration // user and nice
	System  time.Duration
	SoftIRQ time.Duration // irq and softirq: network (loopback) receive work, mostly
	Idle    time.Duration // idle and iowait
	Steal   time.Duration // taken by the hypervisor for other guests
}

// Busy is every state but idle.
func (m MachineCPU) Busy() time.Duration { return m.User + m.System + m.SoftIRQ + m.Steal }

// Sub is m - o.
func (m MachineCPU) Sub(o MachineCPU) MachineCPU {
	return MachineCPU{m.User - o.User, m.System - o.System, m.SoftIRQ - o.SoftIRQ, m.Idle - o.Idle, m.Steal - o.Steal}
}

// Machine reads /proc/stat.
func Machine() (MachineCPU, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	return parseCPULine(line)
}

func parseCPULine(line string) (MachineCPU, error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return MachineCPU{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var v [8]int64 // user nice system idle iowait irq softirq steal
	for i := range v {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return MachineCPU{}, fmt.Errorf("/proc/stat: %w", err)
		}
		v[i] = n
	}
	return MachineCPU{
		User: ticks(v[0] + v[1]), System: ticks(v[2]), Idle: ticks(v[3] + v[4]),
		SoftIRQ: ticks(v[5] + v[6]), Steal: ticks(v[7]),
	}, nil
}
