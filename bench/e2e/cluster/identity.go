package cluster

import (
	"context"
	"fmt"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ImpersonatedConfig returns an admin config that impersonates user with
// groups: every request is authorized as that user (RBAC applies), with no
// credential of its own. Usable in process only; WriteKubeconfig keeps the
// impersonation but also the admin token.
func (c *Cluster) ImpersonatedConfig(user string, groups ...string) *rest.Config {
	cfg := c.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return cfg
}

// ClientCertConfig returns a config that authenticates as user (certificate
// CN) in groups (O) with a client certificate signed by the cluster CA. This
// is real authentication (no impersonation), so the config can be written
// with WriteKubeconfig and handed to a separate process.
func (c *Cluster) ClientCertConfig(user string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := c.ca.issue(user, groups, nil, true)
	if err != nil {
		return nil, err
	}
	cfg := c.RESTConfig()
	cfg.BearerToken = ""
	cfg.TLSClientConfig.CertData = certPEM
	cfg.TLSClientConfig.KeyData = keyPEM
	return cfg, nil
}

// ServiceAccountToken creates the namespace and the ServiceAccount if they do
// not exist and returns a bound token for it from the TokenRequest API
// (ttl 0 means 24h; the API server's minimum is 10 minutes). The identity is
// system:serviceaccount:<namespace>:<name>, in groups
// system:serviceaccounts and system:serviceaccounts:<namespace>.
func (c *Cluster) ServiceAccountToken(ctx context.Context, namespace, name string, ttl time.Duration) (string, error) {
	if ttl == 0 {
		ttl = 24 * time.Hour
	}
	if err := c.EnsureNamespace(ctx, namespace); err != nil {
		return "", err
	}
	cs := c.Client()
	_, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("cluster: creating service account %s/%s: %w", namespace, name, err)
	}
	secs := int64(ttl / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("cluster: token for service account %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// ServiceAccountConfig is ServiceAccountToken wrapped in a *rest.Config
// (24h token, QPS 1000, burst 2000).
func (c *Cluster) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	tok, err := c.ServiceAccountToken(ctx, namespace, name, 0)
	if err != nil {
		return nil, err
	}
	cfg := c.RESTConfig()
	cfg.BearerToken = tok
	return cfg, nil
}

// ClientFor builds a clientset from cfg (a convenience for the configs above).
func ClientFor(cfg *rest.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(cfg) }

// WriteKubeconfig writes cfg (host, CA, bearer token or client certificate,
// impersonation) to path as a kubeconfig file, for a subprocess.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	ca := cfg.TLSClientConfig.CAData
	if len(ca) == 0 && cfg.TLSClientConfig.CAFile != "" {
		b, err := os.ReadFile(cfg.TLSClientConfig.CAFile)
		if err != nil {
			return err
		}
		ca = b
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: ca,
		InsecureSkipTLSVerify:    cfg.TLSClientConfig.Insecure,
	}
	kc.AuthInfos["e2e"] = &clientcmdapi.AuthInfo{
		Token:                 cfg.BearerToken,
		ClientCertificateData: cfg.TLSClientConfig.CertData,
		ClientKeyData:         cfg.TLSClientConfig.KeyData,
		Impersonate:           cfg.Impersonate.UserName,
		ImpersonateGroups:     cfg.Impersonate.Groups,
	}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e"}
	kc.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*kc, path)
}

// ImpersonatedClient is ClientFor(c.ImpersonatedConfig(user, groups...)).
// For a service account use user "system:serviceaccount:<ns>:<name>" and
// groups "system:serviceaccounts", "system:serviceaccounts:<ns>".
func (c *Cluster) ImpersonatedClient(user string, groups ...string) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(c.ImpersonatedConfig(user, groups...))
}
