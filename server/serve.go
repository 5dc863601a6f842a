package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// ListenConfig says where and how Serve listens.
type ListenConfig struct {
	// Addr is the TCP address, e.g. ":8888".
	Addr string
	// TLSCertFile and TLSKeyFile, both or neither, turn on HTTPS (TLS 1.2
	// or later). The pair is re-read when either file's modification time
	// changes (checked at most every 10 s, on handshakes), so a rotated
	// Secret is picked up without a restart; a pair that fails to load is
	// logged and the previous one kept.
	TLSCertFile, TLSKeyFile string
	// ClientCAFile, with TLS, requires a certificate signed by one of these
	// CAs on the extender verbs and debug endpoints (a certificate that is
	// given is always verified in the handshake); /livez, /healthz,
	// /readyz and /metrics stay reachable without one, for the kubelet's
	// probes and Prometheus. Read once, at start.
	ClientCAFile string
	// ShutdownTimeout bounds the graceful shutdown when ctx is cancelled:
	// in-flight requests get this long to finish. Zero means
	// DefaultShutdownTimeout (10s).
	ShutdownTimeout time.Duration
}

// certReloadInterval is how often the serving pair's files are checked.
var certReloadInterval = 10 * time.Second // a variable for tests

// Serve listens on cfg.Addr and serves the Handler over HTTP, or HTTPS when
// a certificate is configured, until ctx is cancelled; it then stops
// accepting connections, lets in-flight requests finish (up to
// cfg.ShutdownTimeout) and returns nil. Errors in the configuration or
// from listening are returned at once.
func (s *Server) Serve(ctx context.Context, cfg ListenConfig) error {
	tlsConf, err := s.tlsConfig(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("server: listen on %s: %w", cfg.Addr, err)
	}
	return s.serve(ctx, ln, cfg, tlsConf)
}

// ServeListener is Serve on a listener the caller opened (cfg.Addr is
// ignored). It closes ln.
func (s *Server) ServeListener(ctx context.Context, ln net.Listener, cfg ListenConfig) error {
	tlsConf, err := s.tlsConfig(cfg)
	if err != nil {
		_ = ln.Close()
		return err
	}
	return s.serve(ctx, ln, cfg, tlsConf)
}

func (s *Server) serve(ctx context.Context, ln net.Listener, cfg ListenConfig, tlsConf *tls.Config) error {
	srv := &http.Server{
		Handler:           s.handler,
		TLSConfig:         tlsConf,
		ReadHeaderTimeout: 10 * time.Second,
		// Bodies are at most MaxBodyBytes; a minute is plenty even for
		// 64 MiB on a slow link, and bounds slow clients.
		ReadTimeout: time.Minute,
		// No WriteTimeout: extender calls are bounded by RequestTimeout,
		// and pprof profiles legitimately stream for 30 s or more.
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
	}
	s.log.Info("serving", "address", ln.Addr().String(), "scheme", scheme,
		"clientCertificates", tlsConf != nil && tlsConf.ClientCAs != nil,
		"enforcementPoint", s.enforcementPoint, "requestTimeout", s.requestTimeout,
		"debug", s.debug, "pprof", s.pprof, "binder", s.binder != nil)

	errc := make(chan error, 1)
	go func() {
		var err error
		if tlsConf != nil {
			err = srv.ServeTLS(ln, "", "") // certificates come from tlsConf
		} else {
			err = srv.Serve(ln)
		}
		errc <- err
	}()

	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}

	timeout := cfg.ShutdownTimeout
	if timeout <= 0 {
		timeout = DefaultShutdownTimeout
	}
	s.log.Info("shutting down", "timeout", timeout)
	shCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := srv.Shutdown(shCtx)
	<-errc
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("server: graceful shutdown: %w", err)
	}
	return nil
}

// tlsConfig builds the TLS configuration, or nil for plain HTTP.
func (s *Server) tlsConfig(cfg ListenConfig) (*tls.Config, error) {
	if cfg.TLSCertFile == "" && cfg.TLSKeyFile == "" {
		if cfg.ClientCAFile != "" {
			return nil, errors.New("server: a client CA needs TLS: set the certificate and key files too")
		}
		return nil, nil
	}
	if cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" {
		return nil, errors.New("server: TLS needs both a certificate file and a key file")
	}
	kp := &keypairReloader{certFile: cfg.TLSCertFile, keyFile: cfg.TLSKeyFile, interval: certReloadInterval, log: s.log}
	if err := kp.load(); err != nil {
		return nil, err
	}
	conf := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: kp.GetCertificate,
	}
	if cfg.ClientCAFile != "" {
		ca := &caReloader{file: cfg.ClientCAFile, interval: certReloadInterval, log: s.log}
		if err := ca.load(); err != nil {
			return nil, err
		}
		conf.ClientCAs = ca.pool
		// Each handshake verifies against the CA file as it is now (checked
		// every certReloadInterval): rotating the scheduler's client CA
		// needs no restart.
		conf.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := conf.Clone()
			c.GetConfigForClient = nil
			c.ClientCAs = ca.Pool()
			return c, nil
		}
		// Verified when given; required by requireClientCert on every
		// route but the probes and /metrics, which the kubelet and
		// Prometheus reach without a client certificate.
		conf.ClientAuth = tls.VerifyClientCertIfGiven
		s.clientCertRequired.Store(true)
	}
	return conf, nil
}

// caReloader holds the client CA pool and re-reads its file when it
// changes; a file that no longer parses keeps the previous pool.
type caReloader struct {
	file     string
	interval time.Duration
	log      *slog.Logger

	mu        sync.Mutex
	pool      *x509.CertPool
	mod       time.Time
	lastCheck time.Time
}

// load reads the CA file; the caller holds mu or has not shared c yet.
func (c *caReloader) load() error {
	mod, err := modTime(c.file)
	if err != nil {
		return fmt.Errorf("server: reading client CA: %w", err)
	}
	pem, err := os.ReadFile(c.file)
	if err != nil {
		return fmt.Errorf("server: reading client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("server: client CA file %s holds no PEM certificate", c.file)
	}
	c.pool, c.mod, c.lastCheck = pool, mod, time.Now()
	return nil
}

// Pool is the CA pool in force, re-read first when the file changed.
func (c *caReloader) Pool() *x509.CertPool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.lastCheck) >= c.interval {
		c.lastCheck = time.Now()
		if mod, err := modTime(c.file); err == nil && !mod.Equal(c.mod) {
			if err := c.load(); err != nil {
				c.log.Warn("keeping the previous client CA", "error", err)
			} else {
				c.log.Info("reloaded the client CA", "file", c.file)
			}
		}
	}
	return c.pool
}

// keypairReloader serves a certificate pair and re-reads it when its files
// change.
type keypairReloader struct {
	certFile, keyFile string
	interval          time.Duration
	log               *slog.Logger

	mu              sync.Mutex
	cert            *tls.Certificate
	certMod, keyMod time.Time
	lastCheck       time.Time
}

func modTime(path string) (time.Time, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}, err
	}
	return fi.ModTime(), nil
}

// load reads the pair; the caller holds mu or has not shared k yet.
func (k *keypairReloader) load() error {
	cm, err := modTime(k.certFile)
	if err != nil {
		return fmt.Errorf("server: TLS certificate: %w", err)
	}
	km, err := modTime(k.keyFile)
	if err != nil {
		return fmt.Errorf("server: TLS key: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return fmt.Errorf("server: loading TLS key pair: %w", err)
	}
	k.cert, k.certMod, k.keyMod, k.lastCheck = &cert, cm, km, time.Now()
	return nil
}

func (k *keypairReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Since(k.lastCheck) >= k.interval {
		k.lastCheck = time.Now()
		cm, cerr := modTime(k.certFile)
		km, kerr := modTime(k.keyFile)
		if cerr == nil && kerr == nil && (!cm.Equal(k.certMod) || !km.Equal(k.keyMod)) {
			if err := k.load(); err != nil {
				k.log.Warn("keeping the previous TLS certificate", "error", err)
			} else {
				k.log.Info("reloaded the TLS certificate", "file", k.certFile)
			}
		}
	}
	return k.cert, nil
}
