package perf

import (
	"context"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/server"
)

// Serve starts the service's HTTP server (server.New with default
// options) for the engine on a loopback listener, and returns its base URL
// and a function that shuts it down. The service logs a line for every pod
// it rejects on some node: those lines are formatted as the service
// formats them, then thrown away.
func Serve(ctx context.Context, e *opa.Engine) (string, func() error, error) {
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := server.New(server.Options{Policy: e, Logger: log})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.ServeListener(sctx, ln, server.ListenConfig{ShutdownTimeout: 5 * time.Second}) }()
	stop := func() error {
		cancel()
		return <-done
	}
	return "http://" + ln.Addr().String(), stop, nil
}
