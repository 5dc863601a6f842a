//go:build linux

package main

import (
	"net"

	"golang.org/x/sys/unix"
)

// outOfOrder is how many segments conn has received out of order
// (TCP_INFO's tcpi_rcv_ooopack); false where the kernel does not say. An
// answer whose segments arrive out of order draws duplicate
// acknowledgements, and the sender resends part of it: on loopback that
// happens when the writing thread moves between processors mid-write.
func outOfOrder(conn net.Conn) (uint32, bool) {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return 0, false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || gerr != nil {
		return 0, false
	}
	return info.Rcv_ooopack, true
}
