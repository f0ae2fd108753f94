package bench

import (
	"os"
	"strings"
)

// LoadAvg is the 1, 5 and 15 minute load averages as uptime prints them
// ("4.52 6.56 7.84"), or "" where /proc/loadavg is missing. Figures taken
// on a shared machine mean little without it.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
