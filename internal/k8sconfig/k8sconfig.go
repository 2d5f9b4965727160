// Package k8sconfig is the Kubernetes client configuration shared by kubetrail's components. Its
// YAML keys are the ones contrib's Kubernetes components use (auth_type, context, kube_api_qps,
// kube_api_burst), so a collector config reads the same across receivers.
package k8sconfig

import (
	"errors"
	"fmt"
	"net"
	"os"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// AuthType says how to reach and authenticate to the apiserver.
type AuthType string

const (
	// AuthTypeNone talks to the in-cluster apiserver address without credentials.
	AuthTypeNone AuthType = "none"
	// AuthTypeServiceAccount uses the pod's service-account token and CA (in-cluster).
	AuthTypeServiceAccount AuthType = "serviceAccount"
	// AuthTypeKubeConfig loads a kubeconfig ($KUBECONFIG or ~/.kube/config), optionally a context.
	AuthTypeKubeConfig AuthType = "kubeConfig"
	// AuthTypeTLS uses the in-cluster apiserver address with a client certificate.
	AuthTypeTLS AuthType = "tls"
)

// APIConfig is the user-facing Kubernetes client configuration.
type APIConfig struct {
	// AuthType is one of none, serviceAccount, kubeConfig, tls.
	AuthType AuthType `mapstructure:"auth_type"`
	// Context selects a kubeconfig context (auth_type kubeConfig only); empty means current.
	Context string `mapstructure:"context"`
	// KubeAPIQPS and KubeAPIBurst bound the client's request rate; 0 keeps client-go's defaults.
	KubeAPIQPS   float32 `mapstructure:"kube_api_qps"`
	KubeAPIBurst int     `mapstructure:"kube_api_burst"`
	// CAFile, CertFile and KeyFile are the client certificate for auth_type tls; CAFile defaults
	// to the in-cluster service-account CA.
	CAFile   string `mapstructure:"ca_file"`
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
}

// DefaultAPIConfig is the in-cluster default.
func DefaultAPIConfig() APIConfig { return APIConfig{AuthType: AuthTypeServiceAccount} }

const inClusterCA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

// Validate checks the configuration without touching the network or the file system.
func (c APIConfig) Validate() error {
	switch c.AuthType {
	case AuthTypeNone, AuthTypeServiceAccount, AuthTypeKubeConfig:
	case AuthTypeTLS:
		if c.CertFile == "" || c.KeyFile == "" {
			return errors.New("auth_type tls needs cert_file and key_file")
		}
	case "":
		return errors.New("auth_type must be set: none, serviceAccount, kubeConfig or tls")
	default:
		return fmt.Errorf("auth_type %q is not one of none, serviceAccount, kubeConfig, tls", c.AuthType)
	}
	if c.Context != "" && c.AuthType != AuthTypeKubeConfig {
		return errors.New("context is only meaningful with auth_type kubeConfig")
	}
	if c.KubeAPIQPS < 0 || c.KubeAPIBurst < 0 {
		return errors.New("kube_api_qps and kube_api_burst must not be negative")
	}
	return nil
}

// RESTConfig builds the client-go configuration.
func (c APIConfig) RESTConfig() (*rest.Config, error) {
	var cfg *rest.Config
	switch c.AuthType {
	case AuthTypeKubeConfig:
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		overrides := &clientcmd.ConfigOverrides{CurrentContext: c.Context}
		var err error
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig: %w", err)
		}
	case AuthTypeServiceAccount:
		var err error
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster service account: %w", err)
		}
	case AuthTypeNone, AuthTypeTLS:
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, errors.New("auth_type " + string(c.AuthType) + " needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT")
		}
		cfg = &rest.Config{Host: "https://" + net.JoinHostPort(host, port)}
		if c.AuthType == AuthTypeTLS {
			ca := c.CAFile
			if ca == "" {
				ca = inClusterCA
			}
			cfg.TLSClientConfig = rest.TLSClientConfig{CAFile: ca, CertFile: c.CertFile, KeyFile: c.KeyFile}
		} else {
			cfg.TLSClientConfig = rest.TLSClientConfig{Insecure: true}
		}
	default:
		return nil, fmt.Errorf("auth_type %q is not supported", c.AuthType)
	}
	if c.KubeAPIQPS > 0 {
		cfg.QPS = c.KubeAPIQPS
	}
	if c.KubeAPIBurst > 0 {
		cfg.Burst = c.KubeAPIBurst
	}
	cfg.UserAgent = "kubetrail"
	return cfg, nil
}

// Clients bundles the clients the components use, built from one rest.Config.
type Clients struct {
	Kube      kubernetes.Interface
	Metadata  metadata.Interface
	Discovery discovery.DiscoveryInterface
}

// NewClients builds the typed, metadata-only and discovery clients.
func (c APIConfig) NewClients() (*Clients, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	return &Clients{Kube: kube, Metadata: meta, Discovery: kube.Discovery()}, nil
}
