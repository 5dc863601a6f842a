package chart_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	configv1 "k8s.io/kube-scheduler/config/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
)

// TestChartServiceOverTLS runs the service as the chart's Deployment runs
// it (the rendered container's arguments, the certificate files where the
// rendered volume puts them, moved into a temporary folder) and schedules
// through the real kube-scheduler, which calls it over TLS with a client
// certificate, checking the serving certificate against the Service's name.
func TestChartServiceOverTLS(t *testing.T) {
	objs, err := render(t, "")
	if err != nil {
		t.Fatal(err)
	}
	args := containerArgs(t, objs)
	dir := t.TempDir()
	host := release + "." + release + ".svc"
	pki := newPKI(t, dir, host)

	c := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	if err := c.InstallGatekeeperCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	installExample(t, c, "tenant-isolation")
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Labels: map[string]string{"tenant": "alpha"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names := []string{"alpha-1", "beta-1"}
	if _, err := c.CreateNodes(ctx, 2, func(i int) *corev1.Node {
		return cluster.FakeNode(names[i], map[string]string{"tenant": strings.TrimSuffix(names[i], "-1")}, nil)
	}); err != nil {
		t.Fatal(err)
	}

	bin, err := cluster.BuildExtender(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "/etc/opa-scheduler-extender/tls/", dir+"/")
		if a == "--listen=:8443" {
			args[i] = fmt.Sprintf("--listen=127.0.0.1:%d", port)
		}
	}
	args = append(args, "--kubeconfig", c.Kubeconfig)
	if _, err := c.StartProcess(t, "extender", bin, args...); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d", port)
	waitReady(t, url, host, pki.caPool)

	sched := c.StartScheduler(t, cluster.SchedulerOptions{Extenders: []configv1.Extender{{
		URLPrefix: url, FilterVerb: "filter", PrioritizeVerb: "prioritize", Weight: 1,
		NodeCacheCapable: true, EnableHTTPS: true, HTTPTimeout: metav1.Duration{Duration: 5 * time.Second},
		TLSConfig: &configv1.ExtenderTLSConfig{ServerName: host, CAData: pki.caPEM, CertData: pki.clientPEM, KeyData: pki.clientKeyPEM},
	}}})
	defer sched.Stop()
	if _, err := c.Client().CoreV1().Pods("alpha").Create(ctx, cluster.PausePod("alpha", "web-1", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := c.WaitForPodBound(ctx, "alpha", "web-1", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "alpha-1" {
		t.Errorf("the tenant pod went to %s, want alpha-1 (beta-1 is another tenant's)", p.Spec.NodeName)
	}
	// The scheduler's filter call went through TLS: the service counted it.
	if metrics := get(t, url+"/metrics", host, pki.caPool); !strings.Contains(metrics, `opa_scheduler_extender_request_duration_seconds_count{result="ok",verb="filter"} 1`) {
		t.Errorf("the service answered no filter call:\n%s", grepLines(metrics, "request_duration_seconds_count"))
	}
}

func get(t *testing.T, url, host string, pool *x509.CertPool) string {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}}}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// containerArgs are the rendered Deployment's container arguments.
func containerArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			m, _ := c.(map[string]any)
			var out []string
			for _, a := range m["args"].([]any) {
				out = append(out, fmt.Sprint(a))
			}
			return out
		}
	}
	t.Fatal("the chart renders no Deployment")
	return nil
}

func installExample(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	ctx := context.Background()
	tmpl := file(t, filepath.Join("deploy", "examples", name, "template.yaml"))[0]
	con := file(t, filepath.Join("deploy", "examples", name, "constraint.yaml"))[0]
	if err := c.CreateConstraintCRDForTemplate(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Dynamic().Resource(cluster.ConstraintTemplateGVR).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Dynamic().Resource(cluster.ConstraintGVR(con.GetKind())).Create(ctx, con, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitReady(t *testing.T, url, host string, pool *x509.CertPool) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service is not ready over TLS for %s: %v", host, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// testPKI is what deploy/gen-certs.sh makes: a CA, the serving pair for the
// Service's name (tls.crt, tls.key, ca.crt in dir, the chart's Secret
// layout) and the scheduler's client pair.
type testPKI struct {
	caPEM, clientPEM, clientKeyPEM []byte
	caPool                         *x509.CertPool
}

func newPKI(t *testing.T, dir, host string) testPKI {
	t.Helper()
	caKey := key(t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "opa-scheduler-extender-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, dns []string) ([]byte, []byte) {
		k := key(t)
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), DNSNames: dns,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	}
	serverPEM, serverKey := leaf(2, host, x509.ExtKeyUsageServerAuth, []string{host})
	clientPEM, clientKey := leaf(3, "system:kube-scheduler", x509.ExtKeyUsageClientAuth, nil)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	for name, b := range map[string][]byte{"tls.crt": serverPEM, "tls.key": serverKey, "ca.crt": caPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return testPKI{caPEM: caPEM, clientPEM: clientPEM, clientKeyPEM: clientKey, caPool: pool}
}

func key(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
