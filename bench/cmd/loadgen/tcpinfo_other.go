//go:build !linux

package main

import "net"

// outOfOrder is not known outside Linux.
func outOfOrder(net.Conn) (uint32, bool) { return 0, false }
