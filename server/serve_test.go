package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testPKI is a CA with a server certificate (127.0.0.1, localhost) and a
// client certificate, as PEM files in a temporary directory.
type testPKI struct {
	dir                       string
	caFile, certFile, keyFile string
	clientCert                tls.Certificate
	caPool                    *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert, caDER := newCA(t)
	p := &testPKI{
		dir:    dir,
		caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key"),
		caPool: x509.NewCertPool(),
	}
	p.caPool.AddCert(caCert)
	writePEM(t, p.caFile, "CERTIFICATE", caDER)
	p.writeServerPair(t, caKey, caCert, "server-1")

	clientKey := newKey(t)
	clientDER := sign(t, &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "kube-scheduler"},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, caCert, &clientKey.PublicKey, caKey)
	p.clientCert = tls.Certificate{Certificate: [][]byte{clientDER}, PrivateKey: clientKey}
	return p
}

func (p *testPKI) writeServerPair(t *testing.T, caKey *ecdsa.PrivateKey, caCert *x509.Certificate, cn string) {
	t.Helper()
	key := newKey(t)
	der := sign(t, &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}, caCert, &key.PublicKey, caKey)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.certFile, "CERTIFICATE", der)
	writePEM(t, p.keyFile, "EC PRIVATE KEY", keyDER)
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newCA(t *testing.T) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "test CA"},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func sign(t *testing.T, tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startServing runs ServeListener on a loopback port and returns its
// address and a stop function that cancels and waits for Serve's result.
func startServing(t *testing.T, s *Server, cfg ListenConfig) (addr string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ServeListener(ctx, ln, cfg) }()
	var stopped bool
	var result error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case result = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not return after cancel")
			}
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return ln.Addr().String(), stop
}

func TestServeTLSClientCertificates(t *testing.T) {
	pki := newTestPKI(t)
	s, _ := newTestServer(t, Options{})
	addr, stop := startServing(t, s, ListenConfig{TLSCertFile: pki.certFile, TLSKeyFile: pki.keyFile, ClientCAFile: pki.caFile})

	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: pki.caPool, Certificates: certs, MinVersion: tls.VersionTLS12,
		}}}
	}
	url := "https://" + addr + "/filter"

	// Without a client certificate: refused on the verbs and debug
	// endpoints, served on the probes (the kubelet has no certificate).
	for _, path := range []string{"/filter", "/debug/explain"} {
		resp, err := client().Post("https://"+addr+path, "application/json", strings.NewReader(validBody(t, "/filter")))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "client certificate") {
			t.Fatalf("%s without a client certificate: %s %s", path, resp.Status, body)
		}
	}
	if resp, err := client().Get("https://" + addr + "/readyz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/readyz without a client certificate: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// A certificate from another CA is refused in the handshake.
	other := newTestPKI(t)
	if resp, err := client(other.clientCert).Post(url, "application/json", strings.NewReader(validBody(t, "/filter"))); err == nil {
		resp.Body.Close()
		t.Fatalf("a client with a certificate of another CA got %s", resp.Status)
	}
	// With one: served.
	resp, err := client(pki.clientCert).Post(url, "application/json", strings.NewReader(validBody(t, "/filter")))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"NodeNames":["good-1"]`) {
		t.Fatalf("%s %s", resp.Status, body)
	}
	if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Errorf("TLS state %+v", resp.TLS)
	}
	// TLS 1.1 is refused.
	old := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pki.caPool, Certificates: []tls.Certificate{pki.clientCert},
		MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11, //nolint:gosec // testing refusal
	}}}
	if resp, err := old.Get("https://" + addr + "/livez"); err == nil {
		resp.Body.Close()
		t.Error("TLS 1.1 accepted")
	}
	if err := stop(); err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestServeTLSWithoutClientCA(t *testing.T) {
	pki := newTestPKI(t)
	s, _ := newTestServer(t, Options{})
	addr, _ := startServing(t, s, ListenConfig{TLSCertFile: pki.certFile, TLSKeyFile: pki.keyFile})
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.caPool, MinVersion: tls.VersionTLS12}}}
	resp, err := c.Get("https://" + addr + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
}

func TestServeConfigErrors(t *testing.T) {
	pki := newTestPKI(t)
	s, _ := newTestServer(t, Options{})
	for name, cfg := range map[string]ListenConfig{
		"cert without key":      {Addr: "127.0.0.1:0", TLSCertFile: pki.certFile},
		"key without cert":      {Addr: "127.0.0.1:0", TLSKeyFile: pki.keyFile},
		"client CA without TLS": {Addr: "127.0.0.1:0", ClientCAFile: pki.caFile},
		"missing cert file":     {Addr: "127.0.0.1:0", TLSCertFile: filepath.Join(pki.dir, "nope"), TLSKeyFile: pki.keyFile},
		"CA file without PEM":   {Addr: "127.0.0.1:0", TLSCertFile: pki.certFile, TLSKeyFile: pki.keyFile, ClientCAFile: pki.keyFile},
		"bad address":           {Addr: "256.0.0.1:http"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.Serve(ctx, cfg); err == nil {
			t.Errorf("%s: want an error", name)
		}
		cancel()
	}
}

// Cancelling the context lets in-flight requests finish.
func TestServeGracefulShutdown(t *testing.T) {
	s, fp := newTestServer(t, Options{})
	fp.set(func(f *fakePolicy) { f.delay = 300 * time.Millisecond })
	addr, stop := startServing(t, s, ListenConfig{})

	type result struct {
		status int
		body   string
		err    error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Post("http://"+addr+"/filter", "application/json", strings.NewReader(validBody(t, "/filter")))
		if err != nil {
			res <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{status: resp.StatusCode, body: string(b)}
	}()
	// Wait until the engine has the request, then shut down.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if calls, _, _ := fp.snapshot(); calls > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("request never reached the engine")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	r := <-res
	if r.err != nil || r.status != 200 || !strings.Contains(r.body, "good-1") {
		t.Fatalf("in-flight request: %+v", r)
	}
	// New connections are refused.
	if resp, err := http.Get("http://" + addr + "/livez"); err == nil {
		resp.Body.Close()
		t.Error("served after shutdown")
	}
}

func TestKeypairReload(t *testing.T) {
	pki := newTestPKI(t)
	k := &keypairReloader{certFile: pki.certFile, keyFile: pki.keyFile, interval: 0, log: testLogger(t)}
	if err := k.load(); err != nil {
		t.Fatal(err)
	}
	cn := func() string {
		c, err := k.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName
	}
	if got := cn(); got != "server-1" {
		t.Fatalf("CN %q", got)
	}
	caKey, caCert, _ := newCA(t)
	pki.writeServerPair(t, caKey, caCert, "server-2")
	future := time.Now().Add(time.Minute)
	for _, f := range []string{pki.certFile, pki.keyFile} {
		if err := os.Chtimes(f, future, future); err != nil {
			t.Fatal(err)
		}
	}
	if got := cn(); got != "server-2" {
		t.Fatalf("after rotation CN %q", got)
	}
	// A broken pair is not picked up: the previous one stays.
	if err := os.WriteFile(pki.keyFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := future.Add(time.Minute)
	_ = os.Chtimes(pki.keyFile, later, later)
	if got := cn(); got != "server-2" {
		t.Fatalf("after a broken rotation CN %q", got)
	}
}

// TestServeClientCAReload: the client CA file is rotated under a running
// server (another CA, then a file that does not parse): handshakes follow
// the file, and a broken file keeps the CA in force.
func TestServeClientCAReload(t *testing.T) {
	old := certReloadInterval
	certReloadInterval = 0 // check the file on every handshake
	defer func() { certReloadInterval = old }()
	pki, other := newTestPKI(t), newTestPKI(t)
	s, _ := newTestServer(t, Options{})
	addr, _ := startServing(t, s, ListenConfig{TLSCertFile: pki.certFile, TLSKeyFile: pki.keyFile, ClientCAFile: pki.caFile})
	served := func(cert tls.Certificate) bool {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{
			RootCAs: pki.caPool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		}}}
		resp, err := c.Post("https://"+addr+"/filter", "application/json", strings.NewReader(validBody(t, "/filter")))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	rotate := func(content []byte) {
		t.Helper()
		if err := os.WriteFile(pki.caFile, content, 0o644); err != nil {
			t.Fatal(err)
		}
		next := time.Now().Add(time.Duration(len(content)+1) * time.Second)
		if err := os.Chtimes(pki.caFile, next, next); err != nil {
			t.Fatal(err)
		}
	}
	if !served(pki.clientCert) || served(other.clientCert) {
		t.Fatal("before the rotation: want the first CA's client only")
	}
	otherCA, err := os.ReadFile(other.caFile)
	if err != nil {
		t.Fatal(err)
	}
	rotate(otherCA)
	if served(pki.clientCert) || !served(other.clientCert) {
		t.Fatal("after the rotation: want the new CA's client only")
	}
	rotate([]byte("not a certificate"))
	if !served(other.clientCert) {
		t.Error("a broken CA file replaced the CA in force")
	}
}
