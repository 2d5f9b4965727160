package main

// What the collector spent: CPU time and RSS from /proc, allocations from its own metrics.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuSeconds is utime + stime of pid (fields 14 and 15 of /proc/PID/stat, counted after the
// command name, which may contain spaces and parentheses).
func cpuSeconds(pid int, clkTck float64) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseCPU(string(raw), clkTck)
}

func parseCPU(stat string, clkTck float64) (float64, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	f := strings.Fields(stat[end+1:])
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, errors.New("/proc stat: too few fields")
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	s, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc stat: %w", err)
	}
	return (u + s) / clkTck, nil
}

func statusKiB(pid int, key string) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, key)
}

// scrape returns the sum of every series of the metric name (with or without the _total suffix)
// on a Prometheus text endpoint, and whether there was one.
func scrape(endpoint, name string) (float64, bool) {
	if endpoint == "" {
		return 0, false
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(endpoint)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	return sumMetric(string(body), name)
}

func sumMetric(text, name string) (float64, bool) {
	var sum float64
	found := false
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		metric, _, _ := strings.Cut(f[0], "{")
		if metric != name && metric != name+"_total" {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}
