package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux this runs on).
const clockTick = 10 * time.Millisecond

// procCPU returns the user plus system CPU time of process pid so far, from
// /proc/<pid>/stat (10 ms resolution).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime or stime", pid)
	}
	return time.Duration(u+st) * clockTick, nil
}

// procRSS returns VmRSS of process pid in bytes, from /proc/<pid>/status.
func procRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", v, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// selfCPU returns this process's user plus system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuSample is the CPU time of the three parties of a run at one instant.
type cpuSample struct {
	server, middle, bench time.Duration
	machine               time.Duration // busy CPU time of the whole machine, all processes
	at                    time.Time
	wall                  time.Duration // set by sub: the wall time between the samples
}

// sampleCPU reads the CPU of the server, of the middle process (0 when
// middle is 0: the direct work queue has none) and of this process.
func sampleCPU(server, middle int) cpuSample {
	var s cpuSample
	s.server, _ = procCPU(server)
	if middle > 0 {
		s.middle, _ = procCPU(middle)
	}
	s.bench = selfCPU()
	s.machine = machineBusy()
	s.at = time.Now()
	return s
}

// sub returns the CPU and wall time used between b and a.
func (a cpuSample) sub(b cpuSample) cpuSample {
	return cpuSample{server: a.server - b.server, middle: a.middle - b.middle, bench: a.bench - b.bench,
		machine: a.machine - b.machine, wall: a.at.Sub(b.at)}
}

// foreign returns the share of the machine's CPU capacity that processes
// other than the three measured used during the interval d (d from sub):
// other engineers' tests, builds... A run with much of it is not comparable.
func (d cpuSample) foreign() float64 {
	wall := d.wall
	if wall <= 0 {
		return 0
	}
	other := d.machine - d.server - d.middle - d.bench
	return max(0, other.Seconds()/(wall.Seconds()*float64(runtime.NumCPU())))
}

// machineBusy returns the machine's total non-idle CPU time, from /proc/stat.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest times are already in user
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * clockTick
}
