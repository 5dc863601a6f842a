package main

import (
	"context"
	"fmt"
	"io"
)

func runServe(ctx context.Context, args []string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "serve: not wired yet")
	return 2
}
