//go:build !unix

package bench

func processCPU() (CPUTime, bool) { return CPUTime{}, false }
