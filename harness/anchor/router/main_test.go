package main

import (
	"reflect"
	"testing"
)

func TestVirtioPICLines(t *testing.T) {
	interrupts := `           CPU0
  0:          2    XT-PIC   0  timer
  4:        151    XT-PIC   4  ttyS0
 10:          0    XT-PIC  10  virtio0, virtio1
 11:        403    XT-PIC  11  virtio2
 23:        327      MIPS   7  timer
 24:          5      MIPS   8  virtio9
`
	if got := virtioPICLines(interrupts); !reflect.DeepEqual(got, []int{10, 11}) {
		t.Errorf("virtioPICLines = %v, want [10 11]", got)
	}
	if got := virtioPICLines("  0: 2 XT-PIC 0 timer\n"); got != nil {
		t.Errorf("no virtio line: %v", got)
	}
}
